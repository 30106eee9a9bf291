#include "client/fixed_point.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "client/internal/fixed_point_kernels.h"

namespace aggswitch::client {

namespace {

inline constexpr uint32_t kMagnitudeMask = 0x7FFFFFFFu;
inline constexpr uint32_t kInfBits = 0x7F800000u;

// 2^k as a double; |k| <= 128 + kMaxHeadroom here, far inside double's range.
double Pow2(int k) {
  return std::ldexp(1.0, k);
}

// x * 2^-scale is exact in double (a float has 24 significant bits and the
// product stays normal), so the only rounding is nearbyint's. Clamped with
// max(lo, r) first, so NaN (never encoded: it makes the allreduce go as
// float32) comes out as INT32_MIN, as the SIMD kernels' max does.
int32_t Quantize(double scaled) {
  const double r = std::nearbyint(scaled);
  return static_cast<int32_t>(std::min(std::max(double{INT32_MIN}, r), double{INT32_MAX}));
}

constexpr internal::FixedPointKernels kKernelSets[] = {
    {common::SimdIsa::kScalar, internal::MaxMagnitudeBitsScalar, internal::EncodeScalar,
     internal::DecodeScalar},
    {common::SimdIsa::kAvx2, internal::MaxMagnitudeBitsAvx2, internal::EncodeAvx2,
     internal::DecodeAvx2},
    {common::SimdIsa::kAvx512, internal::MaxMagnitudeBitsAvx512, internal::EncodeAvx512,
     internal::DecodeAvx512},
};

// Null until the first conversion picks the widest set; it only ever points
// into the constant kKernelSets, so relaxed ordering is enough.
std::atomic<const internal::FixedPointKernels*> g_active{nullptr};

const internal::FixedPointKernels& Active() {
  const internal::FixedPointKernels* k = g_active.load(std::memory_order_relaxed);
  if (k != nullptr) [[likely]]
    return *k;
  // Racing first callers all pick the same set, and none overrides a set
  // ForceFixedPointIsa chose meanwhile.
  const internal::FixedPointKernels* expected = nullptr;
  g_active.compare_exchange_strong(expected,
                                   &kKernelSets[static_cast<size_t>(common::BestSimdIsa())],
                                   std::memory_order_relaxed);
  return *g_active.load(std::memory_order_relaxed);
}

}  // namespace

namespace internal {

uint32_t MaxMagnitudeBitsScalar(const float* in, size_t n) {
  // One pass, no branches.
  uint32_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    max_bits = std::max(max_bits, std::bit_cast<uint32_t>(in[i]) & kMagnitudeMask);
  }
  return max_bits;
}

void EncodeScalar(const float* in, size_t n, double factor, uint8_t* wire) {
  for (size_t i = 0; i < n; ++i) {
    const int32_t q = Quantize(static_cast<double>(in[i]) * factor);
    std::memcpy(wire + 4 * i, &q, 4);
  }
}

void DecodeScalar(const uint8_t* wire, size_t n, double factor, float* out) {
  for (size_t i = 0; i < n; ++i) {
    int32_t q;
    std::memcpy(&q, wire + 4 * i, 4);
    out[i] = static_cast<float>(static_cast<double>(q) * factor);
  }
}

}  // namespace internal

common::SimdIsa ActiveFixedPointIsa() {
  return Active().isa;
}

bool ForceFixedPointIsa(common::SimdIsa isa) {
  if (!common::SimdIsaSupported(isa)) return false;
  g_active.store(&kKernelSets[static_cast<size_t>(isa)], std::memory_order_relaxed);
  return true;
}

int32_t MaxExponent(std::span<const float> data) {
  // The largest |x| is the largest magnitude bit pattern; NaN and Inf are the
  // patterns at or above kInfBits.
  const uint32_t max_bits = Active().max_magnitude_bits(data.data(), data.size());
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
  Active().encode(in.data(), in.size(), Pow2(-scale), wire);
}

void DecodeFixed(const uint8_t* wire, int8_t scale, std::span<float> out) {
  Active().decode(wire, out.size(), Pow2(scale), out.data());
}

}  // namespace aggswitch::client
