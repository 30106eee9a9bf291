#include "tools/agg-worker/verify.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "aggregator/half.h"
#include "aggregator/reduce.h"
#include "client/fixed_point.h"

namespace aggswitch::tools {

namespace {

using aggregator::DType;
using aggregator::ReduceOp;

enum class Rule : uint8_t {
  kFixedPoint,  // the client's fixed-point sum, or its float32 redo
  kExact,       // the reference kernels in rank order, bit for bit
  kTolerance,   // a float sum in arrival order: within the rounding error
};

bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

Rule RuleFor(const VerifySpec& s) {
  if (!IsFloat(s.dtype) || s.op != ReduceOp::kSum) return Rule::kExact;
  if (s.dtype == DType::kFloat32 && s.float_mode == client::FloatMode::kFixedPoint) {
    return Rule::kFixedPoint;
  }
  return s.float_mode == client::FloatMode::kFloat ? Rule::kTolerance : Rule::kExact;
}

template <typename T>
T ReadAs(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// Element i of a float-typed payload, widened to float.
float FloatAt(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kFloat16:
      return aggregator::HalfToFloat(ReadAs<uint16_t>(p, i));
    case DType::kBFloat16:
      return aggregator::BFloat16ToFloat(ReadAs<uint16_t>(p, i));
    default:
      return ReadAs<float>(p, i);
  }
}

std::string Describe(DType t, const uint8_t* p, size_t i) {
  char text[64];
  switch (t) {
    case DType::kInt32:
      std::snprintf(text, sizeof(text), "%" PRId32, ReadAs<int32_t>(p, i));
      break;
    case DType::kFloat32:
      std::snprintf(text, sizeof(text), "%.9g (0x%08" PRIx32 ")", ReadAs<float>(p, i),
                    ReadAs<uint32_t>(p, i));
      break;
    case DType::kFloat16:
    case DType::kBFloat16:
      std::snprintf(text, sizeof(text), "%.5g (0x%04x)", FloatAt(t, p, i),
                    static_cast<unsigned>(ReadAs<uint16_t>(p, i)));
      break;
    case DType::kBool:
      std::snprintf(text, sizeof(text), "%u", static_cast<unsigned>(p[i] != 0));
      break;
  }
  return text;
}

// One chunk of every rank's vector and the reductions of it.
class ChunkCheck {
 public:
  ChunkCheck(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration)
      : spec_(spec),
        vectors_(vectors),
        iteration_(iteration),
        size_(aggregator::ElementSize(spec.dtype)),
        blocks_(spec.world, std::vector<uint8_t>(size_t{spec.chunk_elements} * size_)),
        acc_(size_t{spec.chunk_elements} * 4),
        want_(size_t{spec.chunk_elements} * size_),
        alternative_(size_t{spec.chunk_elements} * size_) {}

  void Load(size_t first, uint32_t n) {
    first_ = first;
    n_ = n;
    for (uint16_t r = 0; r < spec_.world; ++r) {
      vectors_.Read(r, iteration_, first, n, blocks_[r].data());
    }
  }

  const uint8_t* block(uint16_t r) const { return blocks_[r].data(); }

  // The reference kernels in rank order (the switch's ordered mode) into want_.
  void RankOrder() {
    aggregator::reference::LoadFirst(spec_.dtype, blocks_[0].data(), n_, acc_.data());
    for (uint16_t r = 1; r < spec_.world; ++r) {
      (void)aggregator::reference::Accumulate(spec_.dtype, spec_.op, acc_.data(), blocks_[r].data(),
                                              n_);
    }
    aggregator::reference::StoreResult(spec_.dtype, acc_.data(), n_, want_.data());
  }

  // The client's fixed-point sum into alternative_; whether some element must
  // saturate (in every order) and whether some element may (in some order).
  void FixedPoint(int8_t scale, bool* must, bool* may) {
    *must = false;
    *may = false;
    for (uint32_t i = 0; i < n_; ++i) {
      int64_t total = 0, positive = 0, negative = 0;
      for (uint16_t r = 0; r < spec_.world; ++r) {
        const int32_t q = client::ToFixed(ReadAs<float>(blocks_[r].data(), i), scale);
        total += q;
        (q > 0 ? positive : negative) += q;
      }
      *must |= total > INT32_MAX || total < INT32_MIN;
      *may |= positive > INT32_MAX || negative < INT32_MIN;
      const float v = client::FromFixed(
          static_cast<int32_t>(std::clamp<int64_t>(total, INT32_MIN, INT32_MAX)), scale);
      std::memcpy(alternative_.data() + 4 * i, &v, 4);
    }
  }

  bool Equal(const uint8_t* got, const std::vector<uint8_t>& want) const {
    return std::memcmp(got, want.data(), size_t{n_} * size_) == 0;
  }

  // Compares element by element.
  void Compare(const uint8_t* got, const std::vector<uint8_t>& want, VerifyReport& report) const {
    for (uint32_t i = 0; i < n_; ++i) {
      ++report.checked;
      if (std::memcmp(got + size_t{i} * size_, want.data() + size_t{i} * size_, size_) == 0) {
        continue;
      }
      Mismatch(got, want.data(), i, report);
    }
  }

  void Mismatch(const uint8_t* got, const uint8_t* want, uint32_t i, VerifyReport& report) const {
    ++report.mismatches;
    if (report.examples.size() == kMaxMismatchExamples) return;
    report.examples.push_back("element " + std::to_string(first_ + i) + ": got " +
                              Describe(spec_.dtype, got, i) + ", want " +
                              Describe(spec_.dtype, want, i));
  }

  // The int32 sum of element i: its positive and negative parts (some
  // order saturates when either leaves the int32 range) and its total.
  struct Int32Sum {
    int64_t positive = 0, negative = 0;
    int64_t total() const { return positive + negative; }
    bool may_saturate() const { return positive > INT32_MAX || negative < INT32_MIN; }
    bool fits() const { return total() >= INT32_MIN && total() <= INT32_MAX; }
  };
  Int32Sum SumOf(uint32_t i) const {
    Int32Sum s;
    for (uint16_t r = 0; r < spec_.world; ++r) {
      const int32_t v = ReadAs<int32_t>(blocks_[r].data(), i);
      (v > 0 ? s.positive : s.negative) += v;
    }
    return s;
  }
  // An int32 sum that returned: every element its exact sum, which must fit.
  void CompareInt32Sums(const uint8_t* got, VerifyReport& report) {
    for (uint32_t i = 0; i < n_; ++i) {
      ++report.checked;
      const Int32Sum s = SumOf(i);
      const int32_t g = ReadAs<int32_t>(got, i);
      if (s.fits() && g == s.total()) continue;
      ++report.mismatches;
      if (report.examples.size() == kMaxMismatchExamples) continue;
      report.examples.push_back(
          "element " + std::to_string(first_ + i) + ": got " + std::to_string(g) + ", want " +
          std::to_string(s.total()) +
          (s.fits() ? "" : ", which leaves int32: the allreduce must fail with the overflow"));
    }
  }
  // Whether some element's sum can saturate in some order.
  bool AnyMaySaturate(uint32_t* first) const {
    for (uint32_t i = 0; i < n_; ++i) {
      if (SumOf(i).may_saturate()) {
        *first = static_cast<uint32_t>(first_ + i);
        return true;
      }
    }
    return false;
  }

  // A float sum in arrival order: within the error bound of the exact sum.
  void CompareWithinRounding(const uint8_t* got, VerifyReport& report) const {
    // Relative rounding of the result type, and its smallest subnormal.
    const double unit = spec_.dtype == DType::kFloat16    ? 0x1p-11
                        : spec_.dtype == DType::kBFloat16 ? 0x1p-8
                                                          : 0.0;
    const double tiny = spec_.dtype == DType::kFloat16    ? 0x1p-24
                        : spec_.dtype == DType::kBFloat16 ? 0x1p-133
                                                          : 0.0;
    for (uint32_t i = 0; i < n_; ++i) {
      ++report.checked;
      double exact = 0, magnitude = 0;
      for (uint16_t r = 0; r < spec_.world; ++r) {
        const double x = FloatAt(spec_.dtype, blocks_[r].data(), i);
        exact += x;
        magnitude += std::fabs(x);
      }
      const double g = FloatAt(spec_.dtype, got, i);
      if (!std::isfinite(exact)) {
        // Inf or NaN inputs: the switch's result does not depend on order.
        if (std::isnan(exact) ? std::isnan(g) : g == exact) continue;
      } else {
        const double bound =
            (spec_.world - 1) * 0x1p-24 * magnitude + unit * std::fabs(exact) + tiny;
        if (std::fabs(g - exact) <= bound * 1.0001) continue;
      }
      ++report.mismatches;
      if (report.examples.size() < kMaxMismatchExamples) {
        char text[160];
        std::snprintf(text, sizeof(text), "element %zu: got %.9g, want %.9g within rounding",
                      first_ + i, g, exact);
        report.examples.push_back(text);
      }
    }
  }

  const std::vector<uint8_t>& want() const { return want_; }
  const std::vector<uint8_t>& alternative() const { return alternative_; }

 private:
  const VerifySpec& spec_;
  const RankVectors& vectors_;
  const uint32_t iteration_;
  const size_t size_;
  std::vector<std::vector<uint8_t>> blocks_;  // per rank: the chunk's elements
  std::vector<uint8_t> acc_;
  std::vector<uint8_t> want_;         // the rank-order reduction
  std::vector<uint8_t> alternative_;  // the fixed-point sum
  size_t first_ = 0;
  uint32_t n_ = 0;
};

}  // namespace

VerifyReport Verify(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration,
                    const uint8_t* result) {
  VerifyReport report;
  const Rule rule = RuleFor(spec);
  const size_t n = vectors.elements();
  const size_t size = aggregator::ElementSize(spec.dtype);
  ChunkCheck chunk(spec, vectors, iteration);

  // Fixed point: the exponent every rank agreed on comes first.
  std::optional<int8_t> scale;
  if (rule == Rule::kFixedPoint) {
    int32_t e = client::kExponentOfZero;
    for (size_t first = 0; first < n; first += spec.chunk_elements) {
      const auto count = static_cast<uint32_t>(std::min<size_t>(spec.chunk_elements, n - first));
      chunk.Load(first, count);
      for (uint16_t r = 0; r < spec.world; ++r) {
        e = std::max(e,
                     client::MaxExponent({reinterpret_cast<const float*>(chunk.block(r)), count}));
      }
    }
    scale = client::FixedPointScale(e, spec.headroom);  // nullopt: NaN or Inf, sent as float32
  }

  for (size_t first = 0; first < n; first += spec.chunk_elements) {
    const auto count = static_cast<uint32_t>(std::min<size_t>(spec.chunk_elements, n - first));
    const uint8_t* got = result + first * size;
    chunk.Load(first, count);
    switch (rule) {
      case Rule::kTolerance:
        chunk.CompareWithinRounding(got, report);
        break;
      case Rule::kExact:
        if (spec.dtype == DType::kInt32 && spec.op == ReduceOp::kSum) {
          chunk.CompareInt32Sums(got, report);
        } else {
          chunk.RankOrder();
          chunk.Compare(got, chunk.want(), report);
        }
        break;
      case Rule::kFixedPoint: {
        chunk.RankOrder();  // the float32 redo, and the NaN/Inf fallback
        if (!scale) {
          chunk.Compare(got, chunk.want(), report);
          break;
        }
        bool must = false, may = false;
        chunk.FixedPoint(*scale, &must, &may);
        if (must) {
          chunk.Compare(got, chunk.want(), report);
        } else if (!may || chunk.Equal(got, chunk.alternative())) {
          chunk.Compare(got, chunk.alternative(), report);
        } else {
          chunk.Compare(got, chunk.want(), report);  // it overflowed and was redone
        }
        break;
      }
    }
  }
  return report;
}

VerifyReport VerifyOverflow(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration) {
  VerifyReport report;
  const size_t n = vectors.elements();
  if (spec.dtype == DType::kInt32 && spec.op == ReduceOp::kSum) {
    ChunkCheck chunk(spec, vectors, iteration);
    for (size_t first = 0; first < n; first += spec.chunk_elements) {
      const auto count = static_cast<uint32_t>(std::min<size_t>(spec.chunk_elements, n - first));
      chunk.Load(first, count);
      uint32_t at = 0;
      if (chunk.AnyMaySaturate(&at)) {
        report.checked = n;
        return report;
      }
    }
  }
  report.checked = n;
  report.mismatches = 1;
  report.examples.push_back(
      spec.dtype == DType::kInt32 && spec.op == ReduceOp::kSum
          ? "the allreduce failed with the int32 overflow, but no element's sum can saturate"
          : "the allreduce failed with the int32 overflow, which only int32 sums can have");
  return report;
}

SgdCheck::SgdCheck(float lr, size_t elements)
    : lr_(lr), params_(elements, 0.0), bound_(elements, 0.0), block_(elements) {}

VerifyReport SgdCheck::Check(const VerifySpec& spec, const RankVectors& vectors,
                             uint32_t iteration, const uint8_t* result) {
  const size_t n = params_.size();
  std::vector<double> sum(n, 0.0), magnitude(n, 0.0);
  for (uint16_t r = 0; r < spec.world; ++r) {
    vectors.Read(r, iteration, 0, n, reinterpret_cast<uint8_t*>(block_.data()));
    for (size_t i = 0; i < n; ++i) {
      sum[i] += block_[i];
      magnitude[i] += std::fabs(block_[i]);
    }
  }
  constexpr double kUlp = 0x1p-24;
  VerifyReport report;
  for (size_t i = 0; i < n; ++i) {
    params_[i] -= lr_ * sum[i];
    bound_[i] += 2 * kUlp * (lr_ * (spec.world + 1) * magnitude[i] + std::fabs(params_[i]));
    const float got = ReadAs<float>(result, i);
    ++report.checked;
    if (std::fabs(static_cast<double>(got) - params_[i]) <= bound_[i]) continue;
    ++report.mismatches;
    if (report.examples.size() < kMaxMismatchExamples) {
      char text[160];
      std::snprintf(text, sizeof(text), "element %zu: got %.9g, want %.9g within %.3g", i, got,
                    params_[i], bound_[i]);
      report.examples.emplace_back(text);
    }
  }
  return report;
}

}  // namespace aggswitch::tools
