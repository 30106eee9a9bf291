#include "common/siphash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace aggswitch::common {
namespace {

// The reference implementation's key 00 01 .. 0f and messages 00 01 .. (n-1).
TEST(SipHashTest, ReferenceVectors) {
  const SipKey key{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};
  std::vector<uint8_t> message;
  for (uint8_t i = 0; i < 15; ++i) message.push_back(i);
  EXPECT_EQ(SipHash24(key, message.data(), 0), 0x726fdb47dd0e0e31ULL);
  EXPECT_EQ(SipHash24(key, message.data(), 1), 0x74f839c593dc67fdULL);
  // The paper's worked example (Appendix A): 15 bytes.
  EXPECT_EQ(SipHash24(key, message.data(), 15), 0xa129ca6149be45e5ULL);
}

TEST(SipHashTest, KeysParseAndDiffer) {
  const std::optional<SipKey> key = SipKey::Parse("0x0706050403020100" "0f0e0d0c0b0a0908");
  ASSERT_TRUE(key);
  EXPECT_EQ(key->k0, 0x0706050403020100ULL);
  EXPECT_EQ(key->k1, 0x0f0e0d0c0b0a0908ULL);
  for (const char* bad : {"", "0x", "0x0706050403020100", "07060504030201000f0e0d0c0b0a090800",
                          "0x0706050403020100 f0e0d0c0b0a0908", "0xg706050403020100f0e0d0c0b0a09080"}) {
    EXPECT_FALSE(SipKey::Parse(bad)) << bad;
  }
  const std::optional<SipKey> a = SipKey::Random(), b = SipKey::Random();
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  const uint32_t id = 7;
  EXPECT_NE(SipHash24(*a, &id, sizeof(id)), SipHash24(*b, &id, sizeof(id)));
}

}  // namespace
}  // namespace aggswitch::common
