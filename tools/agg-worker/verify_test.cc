#include "tools/agg-worker/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "aggregator/reduce.h"
#include "client/fixed_point.h"

namespace aggswitch::tools {
namespace {

using aggregator::DType;
using aggregator::ReduceOp;
using client::FloatMode;

// Vectors given in full, one per rank.
class MemoryVectors final : public RankVectors {
 public:
  template <typename T>
  explicit MemoryVectors(const std::vector<std::vector<T>>& ranks) : size_(sizeof(T)) {
    for (const auto& v : ranks) {
      data_.emplace_back(v.size() * sizeof(T));
      std::memcpy(data_.back().data(), v.data(), data_.back().size());
    }
  }
  size_t elements() const override { return data_[0].size() / size_; }
  void Read(uint16_t rank, uint32_t, size_t first, size_t count, uint8_t* out) const override {
    std::memcpy(out, data_[rank].data() + first * size_, count * size_);
  }

 private:
  size_t size_;
  std::vector<std::vector<uint8_t>> data_;
};

VerifySpec Spec(DType dtype, ReduceOp op, FloatMode mode, uint16_t world, uint32_t chunk) {
  VerifySpec s;
  s.dtype = dtype;
  s.op = op;
  s.float_mode = mode;
  s.world = world;
  s.headroom = client::DefaultHeadroom(world);
  s.chunk_elements = chunk;
  return s;
}

// The reference kernels in the given rank order.
std::vector<uint8_t> Reduce(const VerifySpec& s, const RankVectors& v,
                            std::vector<uint16_t> order) {
  const uint32_t n = static_cast<uint32_t>(v.elements());
  const size_t size = aggregator::ElementSize(s.dtype);
  std::vector<uint8_t> in(n * size), acc(size_t{n} * 4), out(n * size);
  v.Read(order[0], 0, 0, n, in.data());
  aggregator::reference::LoadFirst(s.dtype, in.data(), n, acc.data());
  for (size_t i = 1; i < order.size(); ++i) {
    v.Read(order[i], 0, 0, n, in.data());
    (void)aggregator::reference::Accumulate(s.dtype, s.op, acc.data(), in.data(), n);
  }
  aggregator::reference::StoreResult(s.dtype, acc.data(), n, out.data());
  return out;
}

std::vector<uint16_t> Ranks(uint16_t world) {
  std::vector<uint16_t> r(world);
  for (uint16_t i = 0; i < world; ++i) r[i] = i;
  return r;
}

TEST(VerifyTest, ExactRulesAcceptTheReductionAndNameAWrongElement) {
  for (const auto& [dtype, op, mode] :
       {std::tuple{DType::kInt32, ReduceOp::kSum, FloatMode::kFixedPoint},
        std::tuple{DType::kInt32, ReduceOp::kAnd, FloatMode::kFixedPoint},
        std::tuple{DType::kFloat32, ReduceOp::kMax, FloatMode::kFixedPoint},
        std::tuple{DType::kFloat32, ReduceOp::kSum, FloatMode::kFloatOrdered},
        std::tuple{DType::kFloat16, ReduceOp::kSum, FloatMode::kFixedPoint},
        std::tuple{DType::kBFloat16, ReduceOp::kMin, FloatMode::kFloat},
        std::tuple{DType::kBool, ReduceOp::kOr, FloatMode::kFixedPoint}}) {
    const GeneratedVectors v(dtype, op, 4, 9, 1000);
    const VerifySpec spec = Spec(dtype, op, mode, 4, 300);
    std::vector<uint8_t> result = Reduce(spec, v, Ranks(4));
    const VerifyReport good = Verify(spec, v, 0, result.data());
    EXPECT_TRUE(good.ok()) << DTypeName(dtype) << " " << ReduceOpName(op);
    EXPECT_EQ(good.checked, 1000u);
    result[aggregator::ElementSize(dtype) * 777] ^= 1;  // the lowest bit of element 777
    const VerifyReport bad = Verify(spec, v, 0, result.data());
    EXPECT_EQ(bad.mismatches, 1u);
    ASSERT_EQ(bad.examples.size(), 1u);
    EXPECT_EQ(bad.examples[0].rfind("element 777: got ", 0), 0u) << bad.examples[0];
  }
}

TEST(VerifyTest, OrderedRulesRejectAnotherOrder) {
  // Sums in another rank order differ in the last bits somewhere: the ordered
  // modes must not accept them.
  const GeneratedVectors v(DType::kFloat32, ReduceOp::kSum, 4, 2, 5000);
  const VerifySpec spec = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFloatOrdered, 4, 356);
  const std::vector<uint8_t> reversed = Reduce(spec, v, {3, 2, 1, 0});
  EXPECT_GT(Verify(spec, v, 0, reversed.data()).mismatches, 0u);
  // In float (arrival-order) mode the same result is within the rounding bound.
  const VerifySpec unordered = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFloat, 4, 356);
  EXPECT_TRUE(Verify(unordered, v, 0, reversed.data()).ok());
  for (const DType t : {DType::kFloat16, DType::kBFloat16}) {
    const GeneratedVectors h(t, ReduceOp::kSum, 4, 2, 5000);
    const VerifySpec s = Spec(t, ReduceOp::kSum, FloatMode::kFloat, 4, 712);
    EXPECT_TRUE(Verify(s, h, 0, Reduce(s, h, {2, 0, 3, 1}).data()).ok());
  }
}

TEST(VerifyTest, ToleranceRuleRejectsAWrongSum) {
  const GeneratedVectors v(DType::kFloat32, ReduceOp::kSum, 4, 2, 1000);
  const VerifySpec spec = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFloat, 4, 356);
  std::vector<uint8_t> result = Reduce(spec, v, Ranks(4));
  float x;
  std::memcpy(&x, result.data() + 4 * 10, 4);
  x = x * 1.001f + 1e-3f;  // far beyond four float32 roundings
  std::memcpy(result.data() + 4 * 10, &x, 4);
  const VerifyReport r = Verify(spec, v, 0, result.data());
  EXPECT_EQ(r.mismatches, 1u);
  EXPECT_NE(r.examples[0].find("within rounding"), std::string::npos);
}

// The client's fixed-point sum of each element.
std::vector<float> FixedSum(const std::vector<std::vector<float>>& in, int headroom) {
  int32_t e = client::kExponentOfZero;
  for (const auto& v : in) e = std::max(e, client::MaxExponent(v));
  const int8_t scale = *client::FixedPointScale(e, headroom);
  std::vector<float> out(in[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t sum = 0;
    for (const auto& v : in) sum += client::ToFixed(v[i], scale);
    out[i] = client::FromFixed(static_cast<int32_t>(std::clamp<int64_t>(sum, INT32_MIN, INT32_MAX)),
                               scale);
  }
  return out;
}

std::vector<uint8_t> AsBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(VerifyTest, FixedPointIsTheClientsIntegerSum) {
  const GeneratedVectors gen(DType::kFloat32, ReduceOp::kSum, 4, 5, 2000);
  std::vector<std::vector<float>> in(4, std::vector<float>(2000));
  for (uint16_t r = 0; r < 4; ++r) {
    gen.Read(r, 0, 0, 2000, reinterpret_cast<uint8_t*>(in[r].data()));
  }
  const VerifySpec spec = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFixedPoint, 4, 356);
  const std::vector<float> fixed = FixedSum(in, spec.headroom);
  EXPECT_TRUE(Verify(spec, gen, 0, AsBytes(fixed).data()).ok());
  // The float sum is close, but not what fixed point gives.
  const std::vector<uint8_t> floats = Reduce(spec, gen, Ranks(4));
  EXPECT_GT(Verify(spec, gen, 0, floats.data()).mismatches, 0u);
}

TEST(VerifyTest, FixedPointChunksThatOverflowAreTheFloatRedo) {
  // No headroom, four ranks, 8-element chunks:
  //   chunk 0: all positive and large: must overflow, comes back as the float sum;
  //   chunk 1: small: cannot overflow, comes back as the fixed-point sum;
  //   chunk 2: three ranks +0.7..0.8, one -0.7..0.8: the sum fits, but the
  //            three positive ones alone do not, so it overflows in some
  //            arrival orders only; either answer is right.
  const size_t chunk = 8;
  std::vector<std::vector<float>> in(4, std::vector<float>(3 * chunk));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> big(0.6f, 0.99f), small(-0.1f, 0.1f), mid(0.7f, 0.8f);
  for (uint16_t r = 0; r < 4; ++r) {
    for (size_t i = 0; i < chunk; ++i) {
      in[r][i] = big(rng);
      in[r][chunk + i] = small(rng);
      in[r][2 * chunk + i] = r < 3 ? mid(rng) : -mid(rng);
    }
  }
  const MemoryVectors v(in);
  VerifySpec spec = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFixedPoint, 4, chunk);
  spec.headroom = 0;
  const std::vector<float> fixed = FixedSum(in, 0);
  std::vector<float> floats(3 * chunk);
  const std::vector<uint8_t> ordered = Reduce(spec, v, Ranks(4));
  std::memcpy(floats.data(), ordered.data(), ordered.size());

  std::vector<float> result = fixed;
  std::copy_n(floats.begin(), chunk, result.begin());  // chunk 0 redone
  EXPECT_TRUE(Verify(spec, v, 0, AsBytes(result).data()).ok());
  std::copy_n(floats.begin() + 2 * chunk, chunk, result.begin() + 2 * chunk);  // chunk 2 too
  EXPECT_TRUE(Verify(spec, v, 0, AsBytes(result).data()).ok());
  // Chunk 0 as (saturated) fixed point is wrong; so is chunk 1 as floats.
  EXPECT_EQ(Verify(spec, v, 0, AsBytes(fixed).data()).mismatches, chunk);
  result = floats;
  EXPECT_GT(Verify(spec, v, 0, AsBytes(result).data()).mismatches, 0u);
}

// Every element of an int32 sum is checked: one whose parts can saturate
// and whose true sum fits must come back exact when the allreduce returned
// (the switch flags any saturation as an overflow, failing it); its clamped
// value is wrong, as is anything for a sum that leaves int32.
TEST(VerifyTest, EveryInt32SumElementIsComparedWithItsExactSum) {
  std::vector<std::vector<int32_t>> in = {{INT32_MAX, 5, INT32_MAX}, {1, 6, 1}, {-1, 7, 0}};
  const MemoryVectors v(in);
  const VerifySpec spec = Spec(DType::kInt32, ReduceOp::kSum, FloatMode::kFixedPoint, 3, 356);
  const auto check = [&](std::vector<int32_t> result) {
    std::vector<uint8_t> bytes(result.size() * 4);
    std::memcpy(bytes.data(), result.data(), bytes.size());
    return Verify(spec, v, 0, bytes.data());
  };
  // Element 2 (INT32_MAX + 1) leaves int32: no returned value is right.
  VerifyReport r = check({INT32_MAX, 18, INT32_MAX});
  EXPECT_EQ(r.checked, 3u);
  EXPECT_EQ(r.mismatches, 1u);
  ASSERT_FALSE(r.examples.empty());
  EXPECT_NE(r.examples[0].find("must fail with the overflow"), std::string::npos) << r.examples[0];
  // Element 0's parts saturate in some order, but its sum fits: exact or wrong.
  std::vector<std::vector<int32_t>> fits = {{INT32_MAX, 5}, {1, 6}, {-1, 7}};
  const MemoryVectors w(fits);
  std::vector<int32_t> result = {INT32_MAX, 18};
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), result.data(), 8);
  EXPECT_TRUE(Verify(spec, w, 0, bytes.data()).ok()) << "INT32_MAX + 1 - 1 is exact";
  result[0] = INT32_MAX - 1;  // what an order that saturated gives, without the flag
  std::memcpy(bytes.data(), result.data(), 8);
  EXPECT_EQ(Verify(spec, w, 0, bytes.data()).mismatches, 1u);
}

// The overflow error is the right answer only where a sum can saturate.
TEST(VerifyTest, AnOverflowIsRightOnlyWhereASumCanSaturate) {
  const VerifySpec spec = Spec(DType::kInt32, ReduceOp::kSum, FloatMode::kFixedPoint, 2, 356);
  std::vector<std::vector<int32_t>> can = {{1'500'000'000, 1}, {1'500'000'000, 1}};
  EXPECT_TRUE(VerifyOverflow(spec, MemoryVectors(can), 0).ok());
  std::vector<std::vector<int32_t>> cannot = {{1'000'000'000, 1}, {1'000'000'000, 1}};
  const VerifyReport r = VerifyOverflow(spec, MemoryVectors(cannot), 0);
  EXPECT_EQ(r.mismatches, 1u);
  const VerifySpec floats = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFixedPoint, 2, 356);
  std::vector<std::vector<float>> f = {{1.0f}, {2.0f}};
  EXPECT_FALSE(VerifyOverflow(floats, MemoryVectors(f), 0).ok());
}

// A parameter server's answers, stepped in float32 from float32 sums in some
// order, pass; a step missed, or the sum returned instead, does not.
TEST(SgdCheckTest, FollowsTheServersStepsWithinRounding) {
  const uint16_t world = 4;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<std::vector<float>> ranks(world, std::vector<float>(64));
  for (auto& v : ranks) {
    for (float& x : v) x = dist(rng);
  }
  const MemoryVectors vectors(ranks);
  const VerifySpec spec = Spec(DType::kFloat32, ReduceOp::kSum, FloatMode::kFloat, world, 16);
  const float lr = 0.1f;
  SgdCheck check(lr, 64);
  std::vector<float> params(64, 0.0f);  // as agg-ps keeps them
  for (uint32_t it = 0; it < 5; ++it) {
    std::vector<float> answer(64);
    for (size_t i = 0; i < 64; ++i) {
      float sum = 0;  // reverse rank order: another rounding than the check's
      for (int r = world - 1; r >= 0; --r) sum += ranks[r][i];
      params[i] = params[i] - lr * sum;
      answer[i] = params[i];
    }
    const VerifyReport r =
        check.Check(spec, vectors, it, reinterpret_cast<const uint8_t*>(answer.data()));
    EXPECT_EQ(r.checked, 64u);
    EXPECT_TRUE(r.ok()) << "iteration " << it << ": " << (r.examples.empty() ? "" : r.examples[0]);
  }

  // The sum itself, not the parameters.
  SgdCheck fresh(lr, 64);
  std::vector<float> sums(64);
  for (size_t i = 0; i < 64; ++i) {
    for (uint16_t r = 0; r < world; ++r) sums[i] += ranks[r][i];
  }
  VerifyReport r = fresh.Check(spec, vectors, 0, reinterpret_cast<const uint8_t*>(sums.data()));
  EXPECT_GT(r.mismatches, 60u);
  ASSERT_FALSE(r.examples.empty());
  EXPECT_NE(r.examples[0].find("element "), std::string::npos);

  // A server that missed the first step is one step behind at the second.
  std::vector<float> behind(64);
  for (size_t i = 0; i < 64; ++i) behind[i] = -lr * sums[i];
  r = fresh.Check(spec, vectors, 1, reinterpret_cast<const uint8_t*>(behind.data()));
  EXPECT_GT(r.mismatches, 60u);
}

}  // namespace
}  // namespace aggswitch::tools
