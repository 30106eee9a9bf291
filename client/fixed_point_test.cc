#include "client/fixed_point.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace aggswitch::client {
namespace {

TEST(MaxExponentTest, IsTheExponentOfTheLargestMagnitude) {
  EXPECT_EQ(MaxExponent(std::vector<float>{0.75f}), 0);  // 0.75 < 2^0
  EXPECT_EQ(MaxExponent(std::vector<float>{1.0f}), 1);   // 1 < 2^1
  EXPECT_EQ(MaxExponent(std::vector<float>{0.5f, -3.0f, 2.0f}), 2);
  EXPECT_EQ(MaxExponent(std::vector<float>{-4.0f, 1e-3f}), 3);
  EXPECT_EQ(MaxExponent(std::vector<float>{std::numeric_limits<float>::denorm_min()}), -148);
  EXPECT_EQ(MaxExponent(std::vector<float>{FLT_MAX}), 128);
}

TEST(MaxExponentTest, SentinelsForZeroAndNonFinite) {
  EXPECT_EQ(MaxExponent({}), kExponentOfZero);
  EXPECT_EQ(MaxExponent(std::vector<float>{0.0f, -0.0f}), kExponentOfZero);
  EXPECT_EQ(MaxExponent(std::vector<float>{1.0f, std::nanf("")}), kExponentNonFinite);
  EXPECT_EQ(MaxExponent(std::vector<float>{-INFINITY, 1.0f}), kExponentNonFinite);
}

TEST(MaxExponentTest, BoundsEveryElement) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-140, 120);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> v(17);
    for (float& x : v) x = std::ldexp(mant(rng), exp(rng));
    const int32_t e = MaxExponent(v);
    float largest = 0;
    for (float x : v) {
      EXPECT_LT(std::fabs(x), std::ldexp(1.0, e));
      largest = std::max(largest, std::fabs(x));
    }
    EXPECT_GE(largest, std::ldexp(1.0, e - 1));  // and e is the smallest such exponent
  }
}

TEST(DefaultHeadroomTest, IsCeilLog2OfWorld) {
  const std::pair<uint32_t, int> cases[] = {{1, 0}, {2, 1}, {3, 2},   {4, 2},   {5, 3},
                                            {8, 3}, {9, 4}, {255, 8}, {256, 8}, {1024, 10}};
  for (const auto& [world, bits] : cases) EXPECT_EQ(DefaultHeadroom(world), bits) << world;
}

TEST(FixedPointScaleTest, Formula) {
  EXPECT_EQ(FixedPointScale(0, 2), -28);  // |x| < 1, 4 ranks: 28 fraction bits
  EXPECT_EQ(FixedPointScale(10, 0), -20);
  EXPECT_EQ(FixedPointScale(kExponentOfZero, 3), 0);
  EXPECT_EQ(FixedPointScale(kExponentNonFinite, 3), std::nullopt);
  EXPECT_EQ(FixedPointScale(-148, 0), -128);  // raised to what the header holds
  EXPECT_EQ(FixedPointScale(128, kMaxHeadroom), 127);
}

TEST(ToFixedTest, RoundsToNearestTiesToEven) {
  EXPECT_EQ(ToFixed(2.5f, 0), 2);
  EXPECT_EQ(ToFixed(3.5f, 0), 4);
  EXPECT_EQ(ToFixed(-2.5f, 0), -2);
  EXPECT_EQ(ToFixed(0.5f, 0), 0);
  EXPECT_EQ(ToFixed(2.4f, 0), 2);
  EXPECT_EQ(ToFixed(-2.6f, 0), -3);
  EXPECT_EQ(ToFixed(1.0f, -4), 16);
  EXPECT_EQ(ToFixed(48.0f, 4), 3);
  EXPECT_EQ(ToFixed(1e30f, 0), INT32_MAX);  // clamped, not undefined
  EXPECT_EQ(ToFixed(-1e30f, 0), INT32_MIN);
}

TEST(ToFixedTest, RoundTripIsExactOnTheGridAndHalfAStepOffIt) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> q(-(1 << 30), 1 << 30);
  std::uniform_int_distribution<int> s(-128, 96);  // 2^30 * 2^96 is still a finite float
  std::uniform_real_distribution<float> x(-1.0f, 1.0f);
  for (int i = 0; i < 10000; ++i) {
    const auto scale = static_cast<int8_t>(s(rng));
    // A multiple of 2^scale with at most 24 significant bits is a float and comes back exactly.
    const int32_t grid = q(rng) & ~0xFF;
    const float on_grid = FromFixed(grid, scale);
    EXPECT_EQ(ToFixed(on_grid, scale), grid);
    // Any value comes back within half a step.
    const int8_t fine = -30;
    const float v = x(rng);
    EXPECT_LE(std::fabs(FromFixed(ToFixed(v, fine), fine) - v), std::ldexp(1.0, fine - 1));
  }
}

TEST(EncodeFixedTest, MatchesTheScalarConversionsAndIsLittleEndian) {
  const std::vector<float> in = {1.0f, -0.5f, 0.25f, 3.0e-5f, -7.75f};
  std::vector<uint8_t> wire(in.size() * 4 + 1);
  EncodeFixed(in, -20, wire.data() + 1);  // unaligned on purpose
  for (size_t i = 0; i < in.size(); ++i) {
    const uint8_t* p = wire.data() + 1 + 4 * i;
    const auto le = static_cast<int32_t>(p[0] | p[1] << 8 | p[2] << 16 | uint32_t{p[3]} << 24);
    EXPECT_EQ(le, ToFixed(in[i], -20));
  }
  std::vector<float> out(in.size());
  DecodeFixed(wire.data() + 1, -20, out);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], FromFixed(ToFixed(in[i], -20), -20));
}

// The claim the client rests on: with the default headroom, the sum over the
// world of every rank's fixed-point values fits an int32, whatever the data.
TEST(FixedPointScaleTest, DefaultHeadroomNeverOverflowsTheSum) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-60, 60);
  for (const uint32_t world : {1u, 2u, 3u, 4u, 7u, 8u, 100u, 1024u}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int base = exp(rng);
      std::vector<std::vector<float>> data(world, std::vector<float>(8));
      int32_t e = kExponentOfZero;
      for (auto& v : data) {
        for (float& x : v) x = std::ldexp(mant(rng), base);
        e = std::max(e, MaxExponent(v));
      }
      const int8_t scale = *FixedPointScale(e, DefaultHeadroom(world));
      for (size_t i = 0; i < 8; ++i) {
        int64_t sum = 0;
        for (const auto& v : data) sum += ToFixed(v[i], scale);
        EXPECT_LE(std::llabs(sum), int64_t{1} << 30);
      }
    }
    // The worst case: every rank holds the largest float below 2^E, which
    // rounds up to a full 2^(30 - h) step.
    const float largest = std::nextafter(1.0f, 0.0f);  // E = 0
    const int8_t scale = *FixedPointScale(0, DefaultHeadroom(world));
    const int64_t worst = int64_t{world} * ToFixed(largest, scale);
    EXPECT_LE(worst, int64_t{1} << 30) << world;
    EXPECT_LE(-int64_t{world} * ToFixed(largest, scale), int64_t{1} << 30) << world;
  }
}

TEST(FixedPointScaleTest, LessHeadroomThanDefaultCanOverflow) {
  // Four ranks, no headroom: four values near the maximum exceed INT32_MAX.
  const int8_t scale = *FixedPointScale(0, 0);
  EXPECT_GT(4 * int64_t{ToFixed(0.9f, scale)}, int64_t{INT32_MAX});
}

// Every kernel set against the scalar reference, bit for bit: the set
// under test is forced, the reference is the scalar one (ToFixed, FromFixed
// and a scalar MaxExponent), over every length up to a few vectors (tails)
// and at every byte misalignment of the wire.
class FixedPointIsaTest : public testing::TestWithParam<common::SimdIsa> {
 protected:
  void SetUp() override { ASSERT_TRUE(ForceFixedPointIsa(GetParam())); }
  void TearDown() override { ForceFixedPointIsa(common::BestSimdIsa()); }
};

std::vector<common::SimdIsa> AvailableIsas() {
  std::vector<common::SimdIsa> isas;
  for (common::SimdIsa isa :
       {common::SimdIsa::kScalar, common::SimdIsa::kAvx2, common::SimdIsa::kAvx512}) {
    if (common::SimdIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Values that stress the rounding at `scale`: exact ties, values with
// fraction bits, signed zeros, denormals, and values past the int32 range
// (clamped).
std::vector<float> HardValues(std::mt19937& rng, size_t n, int scale) {
  std::uniform_real_distribution<float> mag(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> v(n);
  for (float& x : v) {
    switch (pick(rng)) {
      case 0:
        x = std::ldexp(std::round(mag(rng) * 1000.0f) + 0.5f, scale);  // k + 1/2 once scaled
        break;
      case 1:
        x = -0.0f;
        break;
      case 2:
        x = std::numeric_limits<float>::denorm_min() * static_cast<float>(pick(rng));
        break;
      case 3:
        x = std::ldexp(mag(rng), scale + 33);  // up to 2^33 once scaled
        break;
      default:
        x = std::ldexp(mag(rng), scale + 20);  // 20 integer and ~4 fraction bits once scaled
    }
  }
  return v;
}

TEST_P(FixedPointIsaTest, EncodeAndDecodeAreBitExactWithTheScalarConversions) {
  std::mt19937 rng(17);
  for (int8_t scale : {int8_t{-128}, int8_t{-40}, int8_t{-28}, int8_t{0}, int8_t{9}, int8_t{100}}) {
    for (size_t n = 0; n <= 70; ++n) {
      const std::vector<float> in = HardValues(rng, n, scale);
      for (size_t misalign : {0, 1, 3}) {
        std::vector<uint8_t> wire(4 * n + misalign, 0xEE);
        EncodeFixed(in, scale, wire.data() + misalign);
        std::vector<float> out(n, 1.0f);
        DecodeFixed(wire.data() + misalign, scale, out);
        for (size_t i = 0; i < n; ++i) {
          int32_t q;
          std::memcpy(&q, wire.data() + misalign + 4 * i, 4);
          ASSERT_EQ(q, ToFixed(in[i], scale))
              << common::SimdIsaName(GetParam()) << " x=" << in[i] << " scale " << int{scale}
              << " n " << n << " i " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(FromFixed(q, scale)))
              << common::SimdIsaName(GetParam()) << " q=" << q << " scale " << int{scale};
        }
      }
    }
  }
}

TEST_P(FixedPointIsaTest, EncodeClampsInfinitiesAndDecodeCoversTheInt32Range) {
  const std::vector<float> in = {std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 3e38f, -3e38f, 1.0f, -1.0f, 0.5f, -0.5f,
                                 1.5f, 2.5f, -2.5f, 2147483520.0f, -2147483648.0f, 0.0f, 7.0f, 8.0f,
                                 std::numeric_limits<float>::max()};
  std::vector<uint8_t> wire(4 * in.size());
  EncodeFixed(in, 0, wire.data());
  for (size_t i = 0; i < in.size(); ++i) {
    int32_t q;
    std::memcpy(&q, wire.data() + 4 * i, 4);
    EXPECT_EQ(q, ToFixed(in[i], 0)) << in[i];
  }
  const int32_t qs[] = {INT32_MIN, INT32_MAX, -1, 0, 1, 16777217, -16777217, 123456789,
                        INT32_MIN + 1, INT32_MAX - 1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(wire.data(), qs, sizeof(qs));
  for (int8_t scale : {int8_t{-128}, int8_t{0}, int8_t{96}, int8_t{127}}) {
    std::vector<float> out(std::size(qs));
    DecodeFixed(wire.data(), scale, out);
    for (size_t i = 0; i < std::size(qs); ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(FromFixed(qs[i], scale)))
          << qs[i] << " scale " << int{scale};
    }
  }
}

TEST_P(FixedPointIsaTest, MaxExponentFindsTheLargestMagnitudeAtAnyPosition) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (size_t n = 1; n <= 70; ++n) {
    for (size_t at = 0; at < n; ++at) {
      std::vector<float> v(n);
      for (float& x : v) x = small(rng);
      v[at] = (at % 2 == 0) ? -1000.0f : 1000.0f;  // exponent 10
      ASSERT_EQ(MaxExponent(v), 10) << common::SimdIsaName(GetParam()) << " n " << n << " at " << at;
      v[at] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_EQ(MaxExponent(v), kExponentNonFinite) << "n " << n << " at " << at;
      v[at] = -std::numeric_limits<float>::infinity();
      ASSERT_EQ(MaxExponent(v), kExponentNonFinite) << "n " << n << " at " << at;
    }
    EXPECT_EQ(MaxExponent(std::vector<float>(n, -0.0f)), kExponentOfZero);
  }
}

INSTANTIATE_TEST_SUITE_P(AvailableIsas, FixedPointIsaTest, testing::ValuesIn(AvailableIsas()),
                         [](const testing::TestParamInfo<common::SimdIsa>& info) {
                           return std::string(common::SimdIsaName(info.param));
                         });

}  // namespace
}  // namespace aggswitch::client
