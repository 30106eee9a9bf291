// float32 as int32 fixed point: the encoding the client uses by default for
// float32 sums, and the scale every rank must agree on.
//
// A value x travels as q = round(x * 2^-scale) (to nearest, ties to even), the
// switch sums the integers, and the sum comes back as float(sum * 2^scale).
// Integer sums do not depend on the order in which contributions arrive, so
// the result is bit-identical on every rank and in every run, and anyone who
// knows every rank's data can compute it exactly (agg-worker --verify does).
//
// Choosing the scale (one extra exchange per allreduce, through the switch):
//
//   1. every rank computes e = MaxExponent(its data): the smallest e with
//      |x| < 2^e for each element, i.e. std::frexp's exponent of max |x|;
//   2. the ranks allreduce e with op max (one int32 element), so every rank
//      holds the same E, the exponent of the largest |x| anywhere;
//   3. scale = FixedPointScale(E, h) = E + h - 30, h = the headroom in bits,
//      by default DefaultHeadroom(world) = ceil(log2(world)).
//
// Then |x * 2^-scale| < 2^(30 - h), so after rounding |q| <= 2^(30 - h), and
// the sum over world <= 2^h ranks has |sum| <= 2^30 < INT32_MAX: with the
// default headroom the switch's int32 sum cannot saturate. Each element keeps
// 30 - h bits relative to the largest element anywhere; smaller elements keep
// fewer (down to none below 2^(E + h - 31)). A headroom below the default buys
// bits of precision at the risk of a saturated sum, which the switch reports
// with the OVERFLOW flag; the client then redoes that chunk in float32
// (client.h).
//
// Two exponent values are sentinels: kExponentOfZero when every element is
// zero (it loses every max; if all ranks send it, any scale is exact and
// FixedPointScale picks 0), and kExponentNonFinite when any element is NaN or
// Inf (it wins every max; no fixed point holds it, FixedPointScale returns
// nullopt and the whole allreduce goes as float32). The scale is an int8 on
// the wire; a scale below -128 is raised to -128, which keeps the no-overflow
// bound and only costs precision for data below 2^-98.
//
//   int32_t e = MaxExponent(data);                     // then allreduce(max) it
//   std::optional<int8_t> scale = FixedPointScale(e_max, DefaultHeadroom(world));
//   EncodeFixed(data.subspan(0, n), *scale, payload);  // little-endian int32s
//   DecodeFixed(result_payload, *scale, out.subspan(0, n));
//
// The conversions round in the current floating-point rounding mode, which is
// round-to-nearest-even unless the program calls fesetround; ranks must not
// change it.
//
// MaxExponent, EncodeFixed and DecodeFixed run AVX-512 or AVX2 kernels where
// the CPU has them (picked at the first call), bit-identical to the scalar
// code (internal/fixed_point_kernels.h); fixed_point_bench.cc measures them.
//
// Thread safety: pure functions on the caller's memory; any thread.
// ForceFixedPointIsa only while no other thread converts.
#pragma once

#include <climits>
#include <cstdint>
#include <optional>
#include <span>

#include "common/simd_isa.h"

namespace aggswitch::client {

inline constexpr int32_t kExponentOfZero = INT32_MIN;
inline constexpr int32_t kExponentNonFinite = INT32_MAX;
// Bits a fixed-point element may use below the sign bit and the spare top bit.
inline constexpr int kFixedPointBits = 30;
// The largest headroom: with it the scale of the largest float exponent (128)
// is 127, the most the int8 header field holds.
inline constexpr int kMaxHeadroom = 29;

// The smallest e with |x| < 2^e for every element; kExponentOfZero when all are
// (+-)0 or data is empty, kExponentNonFinite when any is NaN or +-Inf. [any]
int32_t MaxExponent(std::span<const float> data);

// ceil(log2(world)): the headroom that makes a sum over `world` ranks safe. [any]
int DefaultHeadroom(uint32_t world);

// The scale for the largest exponent over all ranks and `headroom` bits
// (0..kMaxHeadroom); nullopt for kExponentNonFinite. [any]
std::optional<int8_t> FixedPointScale(int32_t max_exponent, int headroom);

// One element: round(x * 2^-scale), ties to even, clamped to the int32 range
// (only reachable with a scale not chosen by FixedPointScale). [any]
int32_t ToFixed(float x, int8_t scale);

// One element back: float(q * 2^scale), rounded once. [any]
float FromFixed(int32_t q, int8_t scale);

// in.size() elements to little-endian int32s at `wire` (any alignment). [any]
void EncodeFixed(std::span<const float> in, int8_t scale, uint8_t* wire);

// out.size() little-endian int32s at `wire` (any alignment) back to floats. [any]
void DecodeFixed(const uint8_t* wire, int8_t scale, std::span<float> out);

// The kernel set the three above run (the widest this CPU has, unless forced). [any]
common::SimdIsa ActiveFixedPointIsa();

// Runs `isa` from now on; false (and no change) if this CPU cannot. For tests
// and benchmarks. [any thread, while no other converts]
bool ForceFixedPointIsa(common::SimdIsa isa);

}  // namespace aggswitch::client
