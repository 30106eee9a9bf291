#include "common/simd_isa.h"

#include <gtest/gtest.h>

#include <string>

namespace aggswitch::common {
namespace {

TEST(SimdIsaTest, ScalarAlwaysRunsAndWiderSetsImplyNarrowerOnes) {
  EXPECT_TRUE(SimdIsaSupported(SimdIsa::kScalar));
  if (SimdIsaSupported(SimdIsa::kAvx512)) EXPECT_TRUE(SimdIsaSupported(SimdIsa::kAvx2));
  EXPECT_TRUE(SimdIsaSupported(BestSimdIsa()));
  if (BestSimdIsa() == SimdIsa::kAvx2) EXPECT_FALSE(SimdIsaSupported(SimdIsa::kAvx512));
  if (BestSimdIsa() == SimdIsa::kScalar) EXPECT_FALSE(SimdIsaSupported(SimdIsa::kAvx2));
}

TEST(SimdIsaTest, NamesAreTheOnesLogsAndFlagsUse) {
  EXPECT_EQ(std::string(SimdIsaName(SimdIsa::kScalar)), "scalar");
  EXPECT_EQ(std::string(SimdIsaName(SimdIsa::kAvx2)), "avx2");
  EXPECT_EQ(std::string(SimdIsaName(SimdIsa::kAvx512)), "avx512");
}

}  // namespace
}  // namespace aggswitch::common
