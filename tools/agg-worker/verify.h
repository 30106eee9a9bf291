// agg-worker --verify: the result an allreduce must return, computed locally
// from every rank's vector, and the comparison.
//
// The expectation follows what the client and the switch do (client.h,
// aggregator/reduce.h), so the check is bit-exact wherever the result is
// defined bit for bit:
//   * float32 sum in fixed-point mode: the same exponent, scale, conversion
//     and integer sum as the client (fixed_point.h), chunk by chunk. A chunk
//     whose integer sum must saturate comes back as the rank-order float32
//     sum (the client's redo); one that may saturate in some arrival orders
//     and not in others may come back either way, and must equal one of the
//     two exactly. With NaN or Inf anywhere, the rank-order float32 sum.
//   * float sums with the ORDERED flag (float32 in ordered mode, float16 and
//     bfloat16 in fixed-point and ordered mode): the switch's reference
//     kernels in rank order.
//   * min, max, and, or: do not depend on order; the reference kernels.
//   * int32 sums: every element is compared with its exact sum. A sum
//     outside the int32 range cannot come back as a result (the allreduce
//     must fail with the overflow error); one whose parts can saturate in
//     some order may fail so too, and VerifyOverflow tells such a failure
//     from a wrong one.
//   * float sums in arrival order (float mode): within the rounding error of
//     any order, (world - 1) * 2^-24 * sum(|x|), plus the final rounding to
//     float16 or bfloat16.
//
//   VerifySpec spec{.dtype = DType::kFloat32, .op = ReduceOp::kSum, ...};
//   VerifyReport r = Verify(spec, vectors, iteration, result.data());
//   if (r.mismatches > 0) for (const std::string& e : r.examples) puts(e.c_str());
//
// Thread safety: pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "client/client.h"
#include "tools/agg-worker/vectors.h"

namespace aggswitch::tools {

struct VerifySpec {
  aggregator::DType dtype = aggregator::DType::kFloat32;
  aggregator::ReduceOp op = aggregator::ReduceOp::kSum;
  client::FloatMode float_mode = client::FloatMode::kFixedPoint;
  int headroom = 0;  // the fixed-point headroom the clients use
  uint16_t world = 1;
  uint32_t chunk_elements = 1;  // the clients' elements per chunk
};

struct VerifyReport {
  uint64_t checked = 0;               // elements compared
  uint64_t mismatches = 0;            // elements that differ from the expectation
  std::vector<std::string> examples;  // the first few mismatches, described

  bool ok() const { return mismatches == 0; }
};

inline constexpr size_t kMaxMismatchExamples = 5;

// An int32 sum allreduce failed with the overflow error (kOutOfRange): right
// when some element's sum can saturate in some order (its positive or its
// negative part leaves the int32 range); a mismatch naming the first
// element otherwise, and for any other type or op. [any]
VerifyReport VerifyOverflow(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration);

// Checks `result` (vectors.elements() elements of spec.dtype) against the
// reduction of every rank's vector of `iteration`. [any]
VerifyReport Verify(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration,
                    const uint8_t* result);

// agg-worker --verify-sgd LR: a parameter-server job (docs/stragglers.md)
// answers each allreduce of float32 sums with the server's parameters after
// one step, p = p - LR * sum, from p = 0 (agg-ps --sgd). SgdCheck follows the
// exact parameters from every rank's vectors and accepts a result within the
// rounding that the sums (in any order) and the server's float32 steps may
// have added up to, element by element: per step
//   2 * 2^-24 * (LR * (world + 1) * sum(|x|) + |p|).
//
//   SgdCheck sgd(0.5f, vectors.elements());
//   for (it...) { ...allreduce...; VerifyReport r = sgd.Check(spec, vectors, it, result); }
//
// Thread safety: one thread; Check is called with iterations in order.
class SgdCheck {
 public:
  SgdCheck(float lr, size_t elements);
  VerifyReport Check(const VerifySpec& spec, const RankVectors& vectors, uint32_t iteration,
                     const uint8_t* result);

 private:
  double lr_;
  std::vector<double> params_;  // the exact parameters after the steps so far
  std::vector<double> bound_;   // how far the server's may be from them
  std::vector<float> block_;    // one rank's vector
};

}  // namespace aggswitch::tools
