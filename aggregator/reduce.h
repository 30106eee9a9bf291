// Reduction kernels: fold one contribution's payload into a slot's accumulator.
//
// A slot accumulates n elements in the accumulator type of its dtype (int32
// for kInt32; float32 for kFloat32, kFloat16 and kBFloat16; uint8 holding 0 or
// 1 for kBool). The first contribution is converted into the accumulator with
// LoadFirst, every further one is folded in with Accumulate, and StoreResult
// converts the accumulator back to wire elements. Payload elements are packed
// little-endian wire values (types.h); no pointer needs any alignment.
//
//   InitReduceKernels();                               // once, at startup
//   alignas(64) uint8_t acc[357 * 4];                  // >= AccumulatorElementSize(dtype) * n
//   LoadFirst(dtype, first_payload, n, acc);
//   bool saturated = Accumulate(dtype, op, acc, next_payload, n);   // per contribution
//   StoreResult(dtype, acc, n, result_payload);
//
// Semantics (namespace reference below is the specification; the SIMD kernels
// are bit-exact with it, and reduce_test.cc checks every dtype, op and length):
//   int32     sum saturates at INT32_MIN / INT32_MAX and Accumulate returns true
//             when any element saturated; min/max as integers; and/or bitwise.
//   float     sum is the IEEE sum. min/max return NaN when either operand is
//             NaN, and min(-0, +0) = -0, max(-0, +0) = +0 in either order.
//             A NaN produced by Accumulate (any NaN input, or Inf + -Inf) is
//             always kCanonicalNaNBits, so results do not depend on arrival
//             order or on which NaN payload the hardware picks. LoadFirst and
//             StoreResult copy float32 bits unchanged, so a single contribution
//             comes back exactly as sent. Sums depend on the order in which
//             contributions are folded in; that order is the caller's.
//   float16 / bfloat16   accumulate in float32 (conversions in half.h); the
//             result is rounded to nearest-even, overflow gives +-Inf.
//   bool      any non-zero byte is true; and/or are logical; the accumulator
//             and the result hold only 0 and 1.
// An invalid (dtype, op) pair (types.h IsValid) or an out-of-range enum value
// does nothing and Accumulate returns false; callers validate the header first.
//
// Dispatch: the first call (or InitReduceKernels) picks the widest kernel set
// this CPU supports: AVX-512 (F, BW, VL), else AVX2 (with F16C), else scalar.
// The SIMD kernels are compiled with function target attributes, so the choice
// is made at run time whatever -march (AGG_MARCH) the build used. Every kernel
// set, the reference too, shares one dtype x op dispatch (reduce_dispatch.h)
// and provides only its loops. Measured costs are in reduce_bench.cc and next
// to the kernels.
//
// Thread safety: LoadFirst, Accumulate, StoreResult, the reference functions,
// AccumulatorElementSize, ActiveReduceIsa, ReduceIsaName and ReduceIsaSupported
// are [any]: reentrant, no allocation, locks, exceptions or syscalls, loops
// bounded by n. InitReduceKernels is [any]. ForceReduceIsa is [control] (startup
// override, tests, benchmarks); since every kernel set gives the same bits, a
// switch while lcores reduce is harmless, only the speed changes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "aggregator/types.h"
#include "common/simd_isa.h"

namespace aggswitch::aggregator {

// Bit pattern of the float32 NaN that Accumulate produces (positive, quiet, no payload).
inline constexpr uint32_t kCanonicalNaNBits = 0x7FC00000u;

// Whether reducing the same data in any order and grouping gives the same
// bytes: integers, fixed point, min and max do; a float sum does not. [any]
constexpr bool SameInAnyOrder(DType t, ReduceOp op) {
  return op != ReduceOp::kSum ||
         (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16);
}

// Bytes per accumulator element: 4 for kInt32, kFloat32, kFloat16, kBFloat16; 1 for
// kBool; 0 for an out-of-range value. [any]
size_t AccumulatorElementSize(DType dtype);

// acc[0..n) = payload[0..n) converted to the accumulator type. [any]
void LoadFirst(DType dtype, const uint8_t* payload, uint32_t n, void* acc);

// acc[i] = op(acc[i], payload[i]) for i in [0, n). Returns true when any int32 sum
// saturated. [any]
[[nodiscard]] bool Accumulate(DType dtype, ReduceOp op, void* acc, const uint8_t* payload,
                              uint32_t n);

// payload_out[0..n) = acc[0..n) converted to the wire type. [any]
void StoreResult(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out);

// payload_out[0..n) = the wire elements of `op`'s identity e, for which
// op(e, x) = x whatever x: an int32 sum's and or's 0, a float sum's -0.0 (+0.0
// would turn a -0.0 into +0.0), min's INT32_MAX or +Inf, max's INT32_MIN or
// -Inf, an int32 and's all ones, a bool and's true and a bool or's false. What
// a switch sends up for a chunk none of whose members it could count (the
// TAN folds their data into it). An invalid (dtype, op) pair writes nothing. [any]
void StoreIdentity(DType dtype, ReduceOp op, uint32_t n, uint8_t* payload_out);

// Whether reducing a member's data into an accumulator that holds it already
// leaves the bytes as they were: min, max, and, or (the float min and max
// too: NaN absorbs, and equal zeros combine by their bits, either way). Not
// a sum. Data that reaches a reduction twice, as a late that overlaps what
// was merged already, then changes nothing. [any]
constexpr bool SameTwice(ReduceOp op) {
  return op == ReduceOp::kMin || op == ReduceOp::kMax || op == ReduceOp::kAnd ||
         op == ReduceOp::kOr;
}

// Whether `dtype` accumulates in its wire format (int32, float32), so that
// StoreResult is a plain copy and the accumulator can serve as the result. [any]
constexpr bool AccumulatesInWireFormat(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kFloat32;
}

// Kernel sets, widest last (common/simd_isa.h says what each needs).
using ReduceIsa = common::SimdIsa;

// Picks the widest kernel set this CPU supports, undoing any ForceReduceIsa. Optional:
// the first reduce call picks the same; calling it at startup keeps the one-time CPUID
// probe off the first packet. [any]: every kernel set gives bit-identical results, so
// switching while other threads reduce changes speed, never answers.
void InitReduceKernels();

// "avx512", "avx2" or "scalar": the kernel set in use (picks one if none is yet). [any]
const char* ActiveReduceIsa();

// "avx512", "avx2", "scalar". [any]
const char* ReduceIsaName(ReduceIsa isa);

// Whether this CPU (and OS) can run the kernel set. kScalar is always supported. [any]
bool ReduceIsaSupported(ReduceIsa isa);

// Uses the given kernel set from now on; false (and no change) if this CPU cannot run
// it. For tests, benchmarks and an operator override at startup. [control]
bool ForceReduceIsa(ReduceIsa isa);

// The specification: plain scalar code, one element at a time, with the same
// signatures and semantics as the dispatched functions above. It is also the
// kernel set used when the CPU has no AVX2, and the SIMD kernels use it for
// the elements after their last full vector. [any]
namespace reference {
void LoadFirst(DType dtype, const uint8_t* payload, uint32_t n, void* acc);
[[nodiscard]] bool Accumulate(DType dtype, ReduceOp op, void* acc, const uint8_t* payload,
                              uint32_t n);
void StoreResult(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out);
}  // namespace reference

// The per-ISA kernel sets, defined in reduce_avx2.cc and reduce_avx512.cc. Only
// the dispatcher in reduce.cc calls them: they execute instructions the CPU may
// not have. Use the functions above.
namespace internal {
void LoadFirstAvx2(DType dtype, const uint8_t* payload, uint32_t n, void* acc);
bool AccumulateAvx2(DType dtype, ReduceOp op, void* acc, const uint8_t* payload, uint32_t n);
void StoreResultAvx2(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out);
void LoadFirstAvx512(DType dtype, const uint8_t* payload, uint32_t n, void* acc);
bool AccumulateAvx512(DType dtype, ReduceOp op, void* acc, const uint8_t* payload, uint32_t n);
void StoreResultAvx512(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out);
}  // namespace internal

}  // namespace aggswitch::aggregator
