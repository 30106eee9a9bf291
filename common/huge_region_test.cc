#include "common/huge_region.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace aggswitch::common {
namespace {

TEST(HugeRegionTest, ZeroedAlignedAndWholeHugePages) {
  HugeRegion r = HugeRegion::Allocate(3 << 20);
  ASSERT_NE(r.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.data()) % HugeRegion::kHugePage, 0u);
  EXPECT_EQ(r.size(), size_t{4} << 20);
  for (size_t i = 0; i < r.size(); i += 4096) ASSERT_EQ(r.data()[i], 0) << i;
  r.data()[r.size() - 1] = 7;  // the whole size is writable
}

TEST(HugeRegionTest, CarvesAlignedPiecesInOrderUntilFull) {
  HugeRegion r = HugeRegion::Allocate(100);
  ASSERT_EQ(r.size(), HugeRegion::kHugePage);
  auto* a = r.Carve<uint8_t>(1);
  auto* b = r.Carve<uint64_t>(3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(b) - a, 64);
  EXPECT_EQ(r.Carve<uint8_t>(HugeRegion::kHugePage), nullptr) << "past the end";
  EXPECT_NE(r.Carve<uint8_t>(HugeRegion::kHugePage - 128), nullptr) << "a failed carve takes nothing";
}

TEST(HugeRegionTest, MoveHandsTheMappingOver) {
  HugeRegion a = HugeRegion::Allocate(1);
  uint8_t* data = a.data();
  HugeRegion b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.Carve<uint8_t>(1), nullptr);
  a = std::move(b);
  EXPECT_EQ(a.data(), data);
  EXPECT_EQ(HugeRegion::Allocate(0).data(), nullptr);
}

}  // namespace
}  // namespace aggswitch::common
