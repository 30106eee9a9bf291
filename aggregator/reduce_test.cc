// Reduction kernels: every kernel set this CPU runs against the scalar reference,
// bit for bit, plus the semantics the reference itself promises (saturation,
// NaN/Inf/-0, 16-bit float conversions, bool normalisation).
#include "aggregator/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aggregator/half.h"

namespace aggswitch::aggregator {
namespace {

constexpr uint32_t kSizes[] = {0, 1, 7, 8, 15, 16, 31, 33, 64, 255, 357, 700};
// (payload offset, accumulator offset) from a 64-byte aligned base.
constexpr std::pair<size_t, size_t> kOffsets[] = {{0, 0}, {1, 3}, {2, 1}, {3, 2}, {5, 0}};
constexpr size_t kGuard = 64;  // canary bytes after every buffer
constexpr uint8_t kCanary = 0xA5;

constexpr DType kDTypes[] = {DType::kInt32, DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                             DType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAnd,
                             ReduceOp::kOr};

uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float FromBits(uint32_t b) {
  return std::bit_cast<float>(b);
}

std::vector<ReduceIsa> AvailableIsas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : {ReduceIsa::kScalar, ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (ReduceIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// A byte buffer whose data starts at a chosen misalignment and is followed by canaries.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset)
      : storage_(64 + offset + bytes + kGuard, kCanary), bytes_(bytes) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - base % 64) % 64) + offset;
  }
  uint8_t* data() { return data_; }
  // The data and the canaries after it.
  std::vector<uint8_t> contents() const { return {data_, data_ + bytes_ + kGuard}; }

 private:
  std::vector<uint8_t> storage_;
  size_t bytes_;
  uint8_t* data_;
};

// Wire elements with the values that matter over-represented.
std::vector<uint8_t> RandomPayload(DType dtype, uint32_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(ElementSize(dtype) * n);
  auto put32 = [&](size_t i, uint32_t v) { std::memcpy(out.data() + 4 * i, &v, 4); };
  auto put16 = [&](size_t i, uint16_t v) { std::memcpy(out.data() + 2 * i, &v, 2); };
  static constexpr uint32_t kFloatSpecials[] = {
      0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFBFFFFF, 0x7F800000,
      0xFF800000, 0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF,
      0xFF7FFFFF, 0x477FF000, 0x33000000, 0x38800000, 0x3F808000, 0x3F818000};
  static constexpr uint16_t k16Specials[] = {0x7E00, 0xFE00, 0x7C01, 0x7C00, 0xFC00, 0x0000,
                                             0x8000, 0x0001, 0x83FF, 0x7BFF, 0x7F80, 0xFF80,
                                             0x7FC0, 0x7F81, 0x0080, 0x007F};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    const uint32_t pick = rng() % 8;
    switch (dtype) {
      case DType::kInt32: {
        int32_t v;
        if (pick < 3)
          v = static_cast<int32_t>(r);
        else if (pick < 5)
          v = static_cast<int32_t>(r % 2001) - 1000;
        else if (pick < 6)
          v = INT32_MAX - static_cast<int32_t>(r % 1000);
        else if (pick < 7)
          v = INT32_MIN + static_cast<int32_t>(r % 1000);
        else
          v = static_cast<int32_t>(r) >> (r % 31);
        put32(i, static_cast<uint32_t>(v));
        break;
      }
      case DType::kFloat32: {
        uint32_t v;
        if (pick == 0)
          v = kFloatSpecials[r % std::size(kFloatSpecials)];
        else if (pick < 3)
          v = r;  // any pattern: NaNs, subnormals, huge values
        else
          v = Bits(static_cast<float>(static_cast<int32_t>(r % 20001) - 10000) / 64.0f);
        put32(i, v);
        break;
      }
      case DType::kFloat16:
      case DType::kBFloat16:
        put16(i, pick == 0 ? k16Specials[r % std::size(k16Specials)] : static_cast<uint16_t>(r));
        break;
      case DType::kBool:
        out[i] = pick < 4 ? 0 : pick < 6 ? 1 : static_cast<uint8_t>(r | 1u);
        break;
    }
  }
  return out;
}

std::string Describe(ReduceIsa isa, DType dtype, ReduceOp op, uint32_t n, size_t poff,
                     size_t aoff) {
  return std::string(ReduceIsaName(isa)) + " " + std::string(DTypeName(dtype)) + " " +
         std::string(ReduceOpName(op)) + " n=" + std::to_string(n) + " payload+" +
         std::to_string(poff) + " acc+" + std::to_string(aoff);
}

class ReduceIsaTest : public testing::TestWithParam<ReduceIsa> {
 protected:
  void SetUp() override { ASSERT_TRUE(ForceReduceIsa(GetParam())); }
  void TearDown() override { InitReduceKernels(); }
};

// The whole life of a slot, LoadFirst -> Accumulate x2 -> StoreResult, and an
// Accumulate into an accumulator of arbitrary bytes, against the reference;
// the canaries after each buffer must survive.
TEST_P(ReduceIsaTest, BitExactWithReference) {
  const ReduceIsa isa = GetParam();
  std::mt19937 rng(20240611);
  int checked = 0;
  for (DType dtype : kDTypes) {
    const size_t wire = ElementSize(dtype);
    const size_t acc_size = AccumulatorElementSize(dtype);
    for (ReduceOp op : kOps) {
      if (!IsValid(dtype, op)) continue;
      for (uint32_t n : kSizes) {
        for (auto [poff, aoff] : kOffsets) {
          SCOPED_TRACE(Describe(isa, dtype, op, n, poff, aoff));
          const std::vector<uint8_t> p0 = RandomPayload(dtype, n, rng);
          const std::vector<uint8_t> p1 = RandomPayload(dtype, n, rng);
          const std::vector<uint8_t> p2 = RandomPayload(dtype, n, rng);
          Buffer payload(wire * n, poff), acc_ref(acc_size * n, aoff), acc(acc_size * n, aoff);
          Buffer out_ref(wire * n, poff), out(wire * n, poff);

          if (n != 0) std::memcpy(payload.data(), p0.data(), p0.size());
          reference::LoadFirst(dtype, payload.data(), n, acc_ref.data());
          LoadFirst(dtype, payload.data(), n, acc.data());
          ASSERT_EQ(acc_ref.contents(), acc.contents()) << "LoadFirst";
          for (const auto* p : {&p1, &p2}) {
            if (n != 0) std::memcpy(payload.data(), p->data(), p->size());
            const bool sat_ref =
                reference::Accumulate(dtype, op, acc_ref.data(), payload.data(), n);
            const bool sat = Accumulate(dtype, op, acc.data(), payload.data(), n);
            ASSERT_EQ(sat_ref, sat) << "Accumulate flag";
            ASSERT_EQ(acc_ref.contents(), acc.contents()) << "Accumulate";
          }
          reference::StoreResult(dtype, acc_ref.data(), n, out_ref.data());
          StoreResult(dtype, acc.data(), n, out.data());
          ASSERT_EQ(out_ref.contents(), out.contents()) << "StoreResult";

          // Arbitrary accumulator bits: any float pattern, bool bytes other than 0/1.
          for (size_t i = 0; i < acc_size * n; ++i) {
            acc_ref.data()[i] = acc.data()[i] = static_cast<uint8_t>(rng());
          }
          const bool sat_ref = reference::Accumulate(dtype, op, acc_ref.data(), payload.data(), n);
          const bool sat = Accumulate(dtype, op, acc.data(), payload.data(), n);
          ASSERT_EQ(sat_ref, sat) << "Accumulate flag, arbitrary acc";
          ASSERT_EQ(acc_ref.contents(), acc.contents()) << "Accumulate, arbitrary acc";
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 16 * static_cast<int>(std::size(kSizes) * std::size(kOffsets)));
}

// Round trips of every 16-bit pattern through the kernel set's LoadFirst and
// StoreResult, against the reference.
TEST_P(ReduceIsaTest, SixteenBitConversionsExhaustive) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    std::vector<uint16_t> wire(65536);
    for (uint32_t i = 0; i < 65536; ++i) wire[i] = static_cast<uint16_t>(i);
    const auto* in = reinterpret_cast<const uint8_t*>(wire.data());
    std::vector<float> acc(65536), acc_ref(65536);
    LoadFirst(dtype, in, 65536, acc.data());
    reference::LoadFirst(dtype, in, 65536, acc_ref.data());
    ASSERT_EQ(0, std::memcmp(acc.data(), acc_ref.data(), 65536 * 4));
    std::vector<uint16_t> back(65536), back_ref(65536);
    StoreResult(dtype, acc.data(), 65536, reinterpret_cast<uint8_t*>(back.data()));
    reference::StoreResult(dtype, acc.data(), 65536, reinterpret_cast<uint8_t*>(back_ref.data()));
    ASSERT_EQ(back, back_ref);
  }
}

// float32 -> 16 bits over every exponent and sign with the rounding-relevant low bits
// varied (ties, just below, just above), against the reference.
TEST_P(ReduceIsaTest, NarrowingSweep) {
  constexpr uint32_t kLow[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF,
                               0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
  std::mt19937 rng(7);
  std::vector<uint32_t> bits;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t low : kLow) bits.push_back(hi << 16 | low);
    bits.push_back(hi << 16 | (rng() & 0xFFFF));
  }
  const auto n = static_cast<uint32_t>(bits.size());
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    std::vector<uint16_t> out(n), out_ref(n);
    StoreResult(dtype, bits.data(), n, reinterpret_cast<uint8_t*>(out.data()));
    reference::StoreResult(dtype, bits.data(), n, reinterpret_cast<uint8_t*>(out_ref.data()));
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], out_ref[i]) << std::hex << "float bits 0x" << bits[i];
    }
  }
}

int32_t SumInt32(int32_t a, int32_t b, bool* saturated) {
  uint8_t acc[4], p[4];
  std::memcpy(acc, &a, 4);
  std::memcpy(p, &b, 4);
  *saturated = Accumulate(DType::kInt32, ReduceOp::kSum, acc, p, 1);
  int32_t r;
  std::memcpy(&r, acc, 4);
  return r;
}

TEST_P(ReduceIsaTest, Int32SumSaturatesAndReportsIt) {
  struct Case {
    int32_t a, b, want;
    bool saturated;
  };
  const Case cases[] = {
      {INT32_MAX - 1, 1, INT32_MAX, false},    {INT32_MAX - 1, 2, INT32_MAX, true},
      {INT32_MAX, INT32_MAX, INT32_MAX, true}, {INT32_MAX, 0, INT32_MAX, false},
      {INT32_MAX, INT32_MIN, -1, false},       {INT32_MIN + 1, -1, INT32_MIN, false},
      {INT32_MIN + 1, -2, INT32_MIN, true},    {INT32_MIN, INT32_MIN, INT32_MIN, true},
      {INT32_MIN, -1, INT32_MIN, true},        {-5, 3, -2, false},
  };
  for (const Case& c : cases) {
    bool sat = false;
    EXPECT_EQ(SumInt32(c.a, c.b, &sat), c.want) << c.a << " + " << c.b;
    EXPECT_EQ(sat, c.saturated) << c.a << " + " << c.b;
  }
}

// One saturating element among non-saturating ones, at every position of a vector
// body and tail: the flag is set exactly when it is there, and only it is clamped.
TEST_P(ReduceIsaTest, Int32SaturationFlagPerPosition) {
  constexpr uint32_t kN = 45;
  for (int32_t extreme : {INT32_MAX, INT32_MIN}) {
    for (uint32_t pos = 0; pos <= kN; ++pos) {  // pos == kN: nothing saturates
      std::vector<int32_t> acc(kN, extreme), p(kN, 0);
      for (uint32_t i = 0; i < kN; ++i)
        p[i] = extreme > 0 ? -static_cast<int32_t>(i) : static_cast<int32_t>(i);
      if (pos < kN) p[pos] = extreme > 0 ? 7 : -7;
      const bool sat = Accumulate(DType::kInt32, ReduceOp::kSum, acc.data(),
                                  reinterpret_cast<uint8_t*>(p.data()), kN);
      EXPECT_EQ(sat, pos < kN) << "pos " << pos;
      for (uint32_t i = 0; i < kN; ++i) {
        const int32_t want = i == pos ? extreme : extreme + p[i];
        ASSERT_EQ(acc[i], want) << "pos " << pos << " i " << i;
      }
    }
  }
  // Other int32 ops never report saturation.
  std::vector<int32_t> acc(40, INT32_MAX), p(40, INT32_MAX);
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAnd, ReduceOp::kOr}) {
    EXPECT_FALSE(
        Accumulate(DType::kInt32, op, acc.data(), reinterpret_cast<uint8_t*>(p.data()), 40));
  }
}

// Float special values: the pair (acc, payload) in both orders, replicated over a
// vector body and tail.
TEST_P(ReduceIsaTest, FloatSpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float snan = FromBits(0x7F800001);
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    ReduceOp op;
    float a, b;
    uint32_t want;
  };
  const Case cases[] = {
      {ReduceOp::kSum, nan, 1.0f, kCanonicalNaNBits},
      {ReduceOp::kSum, -nan, 1.0f, kCanonicalNaNBits},
      {ReduceOp::kSum, snan, 1.0f, kCanonicalNaNBits},
      {ReduceOp::kSum, inf, -inf, kCanonicalNaNBits},
      {ReduceOp::kSum, inf, 1.0f, Bits(inf)},
      {ReduceOp::kSum, -0.0f, -0.0f, Bits(-0.0f)},
      {ReduceOp::kSum, -0.0f, 0.0f, Bits(0.0f)},
      {ReduceOp::kSum, FLT_MAX, FLT_MAX, Bits(inf)},
      {ReduceOp::kMin, nan, 1.0f, kCanonicalNaNBits},
      {ReduceOp::kMin, snan, -inf, kCanonicalNaNBits},
      {ReduceOp::kMin, -0.0f, 0.0f, Bits(-0.0f)},
      {ReduceOp::kMin, -inf, 3.0f, Bits(-inf)},
      {ReduceOp::kMin, 2.0f, 2.0f, Bits(2.0f)},
      {ReduceOp::kMax, nan, 1.0f, kCanonicalNaNBits},
      {ReduceOp::kMax, -nan, inf, kCanonicalNaNBits},
      {ReduceOp::kMax, -0.0f, 0.0f, Bits(0.0f)},
      {ReduceOp::kMax, -0.0f, -0.0f, Bits(-0.0f)},
      {ReduceOp::kMax, inf, 3.0f, Bits(inf)},
  };
  constexpr uint32_t kN = 37;
  for (const Case& c : cases) {
    for (bool swap : {false, true}) {
      const float a = swap ? c.b : c.a;
      const float b = swap ? c.a : c.b;
      SCOPED_TRACE(std::string(ReduceOpName(c.op)) + " " + std::to_string(a) + " " +
                   std::to_string(b));
      std::vector<float> acc(kN, a), p(kN, b);
      EXPECT_FALSE(
          Accumulate(DType::kFloat32, c.op, acc.data(), reinterpret_cast<uint8_t*>(p.data()), kN));
      for (uint32_t i = 0; i < kN; ++i) ASSERT_EQ(Bits(acc[i]), c.want) << "float32 i " << i;
      // The same through the 16-bit wire types, where the operand is representable.
      for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
        const uint16_t wire = dtype == DType::kFloat16 ? FloatToHalf(b) : FloatToBFloat16(b);
        const float widened = dtype == DType::kFloat16 ? HalfToFloat(wire) : BFloat16ToFloat(wire);
        if (!std::isnan(b) && Bits(widened) != Bits(b)) continue;
        std::vector<float> acc16(kN, a);
        std::vector<uint16_t> p16(kN, wire);
        EXPECT_FALSE(
            Accumulate(dtype, c.op, acc16.data(), reinterpret_cast<uint8_t*>(p16.data()), kN));
        for (uint32_t i = 0; i < kN; ++i)
          ASSERT_EQ(Bits(acc16[i]), c.want) << DTypeName(dtype) << " i " << i;
      }
    }
  }
}

TEST_P(ReduceIsaTest, StoreResultNarrowsSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> acc = {
      FromBits(kCanonicalNaNBits), -inf, 70000.0f, -65520.0f, 65504.0f, -0.0f, 1e-30f, 3.0e38f};
  const std::vector<uint16_t> want_half = {0x7E00, 0xFC00, 0x7C00, 0xFC00,
                                           0x7BFF, 0x8000, 0x0000, 0x7C00};
  const std::vector<uint16_t> want_bf16 = {0x7FC0, 0xFF80, 0x4789, 0xC780,
                                           0x4780, 0x8000, 0x0DA2, 0x7F62};
  const auto n = static_cast<uint32_t>(acc.size());
  std::vector<uint16_t> out(n);
  StoreResult(DType::kFloat16, acc.data(), n, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(out, want_half);
  StoreResult(DType::kBFloat16, acc.data(), n, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(out, want_bf16);
}

TEST_P(ReduceIsaTest, BoolTreatsAnyNonZeroByteAsTrue) {
  const std::vector<uint8_t> first = {0, 1, 2, 0x80, 0xFF, 0, 0x10, 0};
  const std::vector<uint8_t> second = {0, 0, 0x40, 0xFF, 0, 7, 1, 0xFE};
  for (size_t reps : {size_t{1}, size_t{9}}) {  // 8 and 72 elements: tail only, and body + tail
    std::vector<uint8_t> a, b;
    for (size_t r = 0; r < reps; ++r) {
      a.insert(a.end(), first.begin(), first.end());
      b.insert(b.end(), second.begin(), second.end());
    }
    const auto n = static_cast<uint32_t>(a.size());
    std::vector<uint8_t> acc_and(n), acc_or(n), out(n);
    LoadFirst(DType::kBool, a.data(), n, acc_and.data());
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(acc_and[i], a[i] != 0 ? 1 : 0) << i;
    acc_or = acc_and;
    EXPECT_FALSE(Accumulate(DType::kBool, ReduceOp::kAnd, acc_and.data(), b.data(), n));
    EXPECT_FALSE(Accumulate(DType::kBool, ReduceOp::kOr, acc_or.data(), b.data(), n));
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(acc_and[i], a[i] != 0 && b[i] != 0 ? 1 : 0) << i;
      ASSERT_EQ(acc_or[i], a[i] != 0 || b[i] != 0 ? 1 : 0) << i;
    }
    StoreResult(DType::kBool, a.data(), n, out.data());  // raw non-0/1 bytes come out as 0/1
    for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] != 0 ? 1 : 0) << i;
  }
}

TEST_P(ReduceIsaTest, InvalidPairsDoNothing) {
  std::vector<uint8_t> acc(64 * 4, 0x5A);
  const std::vector<uint8_t> before = acc;
  const std::vector<uint8_t> p(64 * 4, 0x33);
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (IsValid(dtype, op)) continue;
      EXPECT_FALSE(Accumulate(dtype, op, acc.data(), p.data(), 64));
    }
  }
  const auto bad_dtype = static_cast<DType>(9);
  const auto bad_op = static_cast<ReduceOp>(9);
  EXPECT_FALSE(Accumulate(bad_dtype, ReduceOp::kSum, acc.data(), p.data(), 64));
  EXPECT_FALSE(Accumulate(DType::kInt32, bad_op, acc.data(), p.data(), 64));
  LoadFirst(bad_dtype, p.data(), 64, acc.data());
  EXPECT_EQ(acc, before);
  std::vector<uint8_t> out(64 * 4, 0x11);
  StoreResult(bad_dtype, acc.data(), 64, out.data());
  EXPECT_EQ(out, std::vector<uint8_t>(64 * 4, 0x11));
}

// A chunk of zero elements may come with null pointers; nothing is touched.
TEST_P(ReduceIsaTest, ZeroElementsWithNullPointers) {
  for (DType dtype : kDTypes) {
    LoadFirst(dtype, nullptr, 0, nullptr);
    for (ReduceOp op : kOps) EXPECT_FALSE(Accumulate(dtype, op, nullptr, nullptr, 0));
    StoreResult(dtype, nullptr, 0, nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(AvailableIsas, ReduceIsaTest, testing::ValuesIn(AvailableIsas()),
                         [](const testing::TestParamInfo<ReduceIsa>& info) {
                           return std::string(ReduceIsaName(info.param));
                         });

// The identity a switch sends for a chunk none of whose members it counted:
// folding it in first changes no bit of any reduction of two members (NaN,
// -0, Inf and saturation included), and its wire values are the ones named.
TEST(ReduceIdentityTest, FoldingTheIdentityFirstChangesNothing) {
  std::mt19937 rng(17);
  constexpr uint32_t n = 357;
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (!IsValid(dtype, op)) continue;
      SCOPED_TRACE(testing::Message() << "dtype " << int(dtype) << " op " << int(op));
      const size_t wire = ElementSize(dtype) * n;
      std::vector<uint8_t> identity(wire, kCanary);
      StoreIdentity(dtype, op, n, identity.data());
      for (int round = 0; round < 20; ++round) {
        const std::vector<uint8_t> x = RandomPayload(dtype, n, rng);
        const std::vector<uint8_t> y = RandomPayload(dtype, n, rng);
        std::vector<uint8_t> acc(AccumulatorElementSize(dtype) * n);
        LoadFirst(dtype, x.data(), n, acc.data());
        const bool saturated = Accumulate(dtype, op, acc.data(), y.data(), n);
        std::vector<uint8_t> want(wire);
        StoreResult(dtype, acc.data(), n, want.data());
        LoadFirst(dtype, identity.data(), n, acc.data());
        EXPECT_FALSE(Accumulate(dtype, op, acc.data(), x.data(), n));
        EXPECT_EQ(Accumulate(dtype, op, acc.data(), y.data(), n), saturated);
        std::vector<uint8_t> got(wire);
        StoreResult(dtype, acc.data(), n, got.data());
        ASSERT_EQ(got, want);
      }
    }
  }
  auto first32 = [](DType dtype, ReduceOp op) {
    uint8_t b[4];
    StoreIdentity(dtype, op, 1, b);
    uint32_t v;
    std::memcpy(&v, b, 4);
    return v;
  };
  EXPECT_EQ(first32(DType::kInt32, ReduceOp::kSum), 0u);
  EXPECT_EQ(first32(DType::kInt32, ReduceOp::kMin), uint32_t{INT32_MAX});
  EXPECT_EQ(first32(DType::kInt32, ReduceOp::kMax), 0x80000000u);
  EXPECT_EQ(first32(DType::kInt32, ReduceOp::kAnd), 0xFFFFFFFFu);
  EXPECT_EQ(first32(DType::kInt32, ReduceOp::kOr), 0u);
  EXPECT_EQ(first32(DType::kFloat32, ReduceOp::kSum), Bits(-0.0f));
  EXPECT_EQ(first32(DType::kFloat32, ReduceOp::kMin), Bits(INFINITY));
  EXPECT_EQ(first32(DType::kFloat32, ReduceOp::kMax), Bits(-INFINITY));
  EXPECT_EQ(first32(DType::kFloat16, ReduceOp::kSum) & 0xFFFF, 0x8000u);
  EXPECT_EQ(first32(DType::kFloat16, ReduceOp::kMax) & 0xFFFF, 0xFC00u);
  EXPECT_EQ(first32(DType::kBFloat16, ReduceOp::kMin) & 0xFFFF, 0x7F80u);
  uint8_t b[2] = {7, 7};
  StoreIdentity(DType::kBool, ReduceOp::kAnd, 1, b);
  StoreIdentity(DType::kBool, ReduceOp::kOr, 1, b + 1);
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 0);
  StoreIdentity(DType::kBool, ReduceOp::kSum, 1, b);  // invalid: nothing written
  EXPECT_EQ(b[0], 1);
}

TEST(ReduceDispatchTest, PicksTheWidestSupportedIsa) {
  const char* want = ReduceIsaSupported(ReduceIsa::kAvx512) ? "avx512"
                     : ReduceIsaSupported(ReduceIsa::kAvx2) ? "avx2"
                                                            : "scalar";
  ASSERT_TRUE(ForceReduceIsa(ReduceIsa::kScalar));
  EXPECT_STREQ(ActiveReduceIsa(), "scalar");
  InitReduceKernels();
  EXPECT_STREQ(ActiveReduceIsa(), want);
  EXPECT_TRUE(ReduceIsaSupported(ReduceIsa::kScalar));
  EXPECT_FALSE(ForceReduceIsa(static_cast<ReduceIsa>(7)));
  EXPECT_STREQ(ActiveReduceIsa(), want);
}

TEST(ReduceDispatchTest, AccumulatorElementSizes) {
  EXPECT_EQ(AccumulatorElementSize(DType::kInt32), 4u);
  EXPECT_EQ(AccumulatorElementSize(DType::kFloat32), 4u);
  EXPECT_EQ(AccumulatorElementSize(DType::kFloat16), 4u);
  EXPECT_EQ(AccumulatorElementSize(DType::kBFloat16), 4u);
  EXPECT_EQ(AccumulatorElementSize(DType::kBool), 1u);
  EXPECT_EQ(AccumulatorElementSize(static_cast<DType>(9)), 0u);
}

// The reference conversions themselves.
TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = HalfToFloat(h);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(FloatToHalf(f), h | 0x0200) << std::hex << i;  // NaN: made quiet, payload kept
    } else if ((h & 0x7C00) == 0x7C00) {
      ASSERT_TRUE(std::isinf(f) && std::signbit(f) == ((h & 0x8000) != 0)) << std::hex << i;
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << i;
    } else {
      ASSERT_EQ(FloatToHalf(f), h) << std::hex << i;
      ASSERT_EQ(static_cast<double>(f),
                std::ldexp(static_cast<double>(i & 0x3FF) + ((i & 0x7C00) ? 1024 : 0),
                           std::max(1, static_cast<int>((i >> 10) & 0x1F)) - 25) *
                    ((i & 0x8000) ? -1 : 1))
          << std::hex << i;
    }
  }
}

TEST(HalfTest, EveryBFloat16RoundTrips) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<uint16_t>(i);
    const float f = BFloat16ToFloat(b);
    ASSERT_EQ(Bits(f), i << 16);
    ASSERT_EQ(FloatToBFloat16(f), std::isnan(f) ? (b | 0x0040) : b) << std::hex << i;
  }
}

TEST(HalfTest, HalfRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3C00);             // tie, 1.0 is even
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // just above the tie
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3C02);         // tie, rounds up to even
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // tie at the top goes to Inf
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xFC00);
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);  // tie between 0 and 2^-24
  EXPECT_EQ(FloatToHalf(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);         // tie, rounds up to even
  EXPECT_EQ(FloatToHalf(5 * 0x1p-25f), 0x0002);         // tie, rounds down to even
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-25f), 0x0400);  // tie into the smallest normal
  EXPECT_EQ(FloatToHalf(-0x1p-26f), 0x8000);
  EXPECT_EQ(FloatToHalf(FromBits(0x00000001)), 0x0000);  // float subnormal
  EXPECT_EQ(FloatToHalf(FromBits(0x7F800001)), 0x7E00);  // signalling NaN made quiet
  EXPECT_EQ(FloatToHalf(FromBits(0xFFFFE000)), 0xFFFF);
  EXPECT_EQ(Bits(HalfToFloat(0x7C01)), 0x7FC02000u);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x03FF), 0x3FFp-24f);
}

TEST(HalfTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), 0x3F80);      // tie, 1.0 is even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie, rounds up to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(FLT_MAX), 0x7F80);  // overflow to Inf
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F7F7FFF)), 0x7F7F);
  EXPECT_EQ(FloatToBFloat16(FromBits(0xFF7F8000)), 0xFF80);  // tie at the top, odd: -Inf
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00008000)), 0x0000);  // subnormal tie, even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x00018000)), 0x0002);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F800001)), 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(FloatToBFloat16(FromBits(0xFFFFFFFF)), 0xFFFF);
}

}  // namespace
}  // namespace aggswitch::aggregator
