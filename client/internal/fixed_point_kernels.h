// The fixed-point conversions' kernel sets (client/fixed_point.h): the scalar
// reference, which is the specification, and AVX2 and AVX-512 versions that
// must match it bit for bit. Each SIMD kernel hands the elements after its
// last full vector to the reference, so tails are exact by construction.
//
// Every kernel does the reference's arithmetic, in the same order, on double
// lanes: float -> double (exact), times a power of two (exact: the product
// stays normal), clamped to the int32 range, converted in the current
// rounding mode (clamping to integer bounds first rounds the same as rounding
// first); back, int32 -> double (exact), times a power of two (exact), to
// float in the current rounding mode, once. The largest |x| is the largest
// magnitude bit pattern, compared as unsigned integers.
//
// Thread safety: pure functions on the caller's memory; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/simd_isa.h"

namespace aggswitch::client::internal {

struct FixedPointKernels {
  common::SimdIsa isa;
  // max over i of (bit pattern of in[i]) & 0x7FFFFFFF; 0 for n = 0.
  uint32_t (*max_magnitude_bits)(const float* in, size_t n);
  // n little-endian int32s at `wire`: clamp(round(in[i] * factor)).
  void (*encode)(const float* in, size_t n, double factor, uint8_t* wire);
  // n floats at `out`: float(q[i] * factor), q[i] the little-endian int32s at `wire`.
  void (*decode)(const uint8_t* wire, size_t n, double factor, float* out);
};

// The reference, and what the SIMD kernels run on their tails.
uint32_t MaxMagnitudeBitsScalar(const float* in, size_t n);
void EncodeScalar(const float* in, size_t n, double factor, uint8_t* wire);
void DecodeScalar(const uint8_t* wire, size_t n, double factor, float* out);

uint32_t MaxMagnitudeBitsAvx2(const float* in, size_t n);
void EncodeAvx2(const float* in, size_t n, double factor, uint8_t* wire);
void DecodeAvx2(const uint8_t* wire, size_t n, double factor, float* out);

uint32_t MaxMagnitudeBitsAvx512(const float* in, size_t n);
void EncodeAvx512(const float* in, size_t n, double factor, uint8_t* wire);
void DecodeAvx512(const uint8_t* wire, size_t n, double factor, float* out);

}  // namespace aggswitch::client::internal
