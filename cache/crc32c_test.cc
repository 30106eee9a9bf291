#include "cache/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace aggswitch::cache {
namespace {

TEST(Crc32cTest, MatchesTheKnownCheckValue) {
  // The CRC-32C check value (RFC 3720 appendix B.4's polynomial) of "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32cTest, PiecewiseEqualsWhole) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut, data.size() - cut), whole) << cut;
  }
  data[123] ^= 1;
  EXPECT_NE(Crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace aggswitch::cache
