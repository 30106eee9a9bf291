#include "client/fixed_point.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace aggswitch::client {

namespace {

inline constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
inline constexpr uint32_t kInfBits = 0x7F800000u;

// 2^k as a double; |k| <= 128 + kMaxHeadroom here, far inside double's range.
double Pow2(int k) {
  return std::ldexp(1.0, k);
}

// x * 2^-scale is exact in double (a float has 24 significant bits and the
// product stays normal), so the only rounding is nearbyint's.
int32_t Quantize(double scaled) {
  const double r = std::nearbyint(scaled);
  return static_cast<int32_t>(std::clamp(r, double{INT32_MIN}, double{INT32_MAX}));
}

}  // namespace

int32_t MaxExponent(std::span<const float> data) {
  // The largest |x| is the largest magnitude bit pattern; NaN and Inf are the
  // patterns at or above kInfBits. One pass, no branches: it vectorizes.
  uint32_t max_bits = 0;
  for (const float x : data) max_bits = std::max(max_bits, std::bit_cast<uint32_t>(x) & kAbsMask);
  if (max_bits >= kInfBits) return kExponentNonFinite;
  if (max_bits == 0) return kExponentOfZero;
  int e = 0;
  std::frexp(std::bit_cast<float>(max_bits), &e);
  return e;
}

int DefaultHeadroom(uint32_t world) {
  return world <= 1 ? 0 : std::bit_width(world - 1);
}

std::optional<int8_t> FixedPointScale(int32_t max_exponent, int headroom) {
  if (max_exponent == kExponentNonFinite) return std::nullopt;
  if (max_exponent == kExponentOfZero) return int8_t{0};
  // Finite float exponents are -148..128 and headroom <= kMaxHeadroom, so
  // this stays below INT8_MAX (128 + 29 - 30).
  const int scale = max_exponent + headroom - kFixedPointBits;
  return static_cast<int8_t>(std::max(scale, int{INT8_MIN}));
}

int32_t ToFixed(float x, int8_t scale) {
  return Quantize(static_cast<double>(x) * Pow2(-scale));
}

float FromFixed(int32_t q, int8_t scale) {
  return static_cast<float>(static_cast<double>(q) * Pow2(scale));
}

void EncodeFixed(std::span<const float> in, int8_t scale, uint8_t* wire) {
  const double factor = Pow2(-scale);
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t q = Quantize(static_cast<double>(in[i]) * factor);
    std::memcpy(wire + 4 * i, &q, 4);
  }
}

void DecodeFixed(const uint8_t* wire, int8_t scale, std::span<float> out) {
  const double factor = Pow2(scale);
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    int32_t q;
    std::memcpy(&q, wire + 4 * i, 4);
    out[i] = static_cast<float>(static_cast<double>(q) * factor);
  }
}

}  // namespace aggswitch::client
