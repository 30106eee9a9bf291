// float16 (IEEE 754 binary16) and bfloat16 <-> float32 conversion, scalar.
//
// These are the reference conversions of the aggregation engine: the 16-bit
// float payloads are widened to float32 when they enter a slot's accumulator
// and narrowed again when the result leaves. The SIMD kernels in
// reduce_avx2.cc / reduce_avx512.cc must give bit-identical results, and
// reduce_test.cc checks that they do. The rules:
//
//   HalfToFloat      exact for every finite value, subnormals included;
//                    +-Inf stays +-Inf; a NaN keeps its sign and payload and
//                    gets the quiet bit (what F16C's vcvtph2ps does).
//   FloatToHalf      round to nearest, ties to even (also into and out of the
//                    subnormal range); values at or above 65520 in magnitude
//                    become +-Inf; a NaN keeps its sign and the top 10 payload
//                    bits and gets the quiet bit (what vcvtps2ph does).
//   BFloat16ToFloat  exact: the 16 bits become the top half of the float,
//                    NaNs included (a signalling NaN stays signalling).
//   FloatToBFloat16  round to nearest, ties to even; overflow carries into
//                    the exponent and gives +-Inf; a NaN keeps its sign and the
//                    top 7 payload bits and gets the quiet bit.
//
// None of them reads or depends on the floating-point environment (rounding
// mode, FTZ/DAZ): they are integer bit manipulation only.
//
//   uint16_t wire = FloatToHalf(0.1f);     // 0x2E66
//   float back = HalfToFloat(wire);        // 0.0999755859375f
//   uint16_t bf = FloatToBFloat16(1.0f);   // 0x3F80
//
// Thread safety: pure constexpr functions; any thread, hot path included.
#pragma once

#include <bit>
#include <cstdint>

namespace aggswitch::aggregator {

constexpr float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {  // Inf, or NaN made quiet
    const uint32_t quiet = mant != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7F800000u | quiet | (mant << 13));
  }
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal half: normalise, moving the leading 1 up to bit 10 (the hidden bit). A
  // float32 holds every one exactly. 113 is the float32 biased exponent of 2^-14.
  const uint32_t shift = static_cast<uint32_t>(std::countl_zero(mant)) - 21;  // 1..10
  mant <<= shift;
  return std::bit_cast<float>(sign | ((113 - shift) << 23) | ((mant & 0x3FFu) << 13));
}

constexpr uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
  // 65520 is halfway between 65504 (largest half, odd mantissa) and 65536: ties go to even,
  // which is the overflow to Inf.
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (ax >= 0x38800000u) {  // normal half: rebias the exponent (127 - 15 = 112), round 13 bits
    const uint32_t r = ax - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
  }
  // 2^-25 is halfway between 0 and the smallest subnormal 2^-24; ties go to even (0).
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);
  // Subnormal half: units of 2^-24. mant * 2^(exp - 150) / 2^-24 = mant >> (126 - exp).
  const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - (ax >> 23);  // 14..24
  uint32_t r = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u) != 0)) ++r;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | r);
}

constexpr float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

constexpr uint16_t FloatToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace aggswitch::aggregator
