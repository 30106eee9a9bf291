// AVX-512 fixed-point kernels: 16 floats per step, as two vectors of 8
// doubles; only AVX-512F instructions. Every function carries the target
// attribute (aggregator/reduce_avx2.cc says why); fixed_point_kernels.h says
// why the result is the reference's, bit for bit.

// GCC 12's _mm512_undefined_*() (self-initialised on purpose) trips
// -Wmaybe-uninitialized wherever a non-masked AVX-512 intrinsic is inlined
// (GCC bug 105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <climits>

#include "client/internal/fixed_point_kernels.h"

#define AGG_TARGET_AVX512 __attribute__((target("avx512f")))

namespace aggswitch::client::internal {

namespace {
constexpr size_t kStep = 16;
}  // namespace

AGG_TARGET_AVX512 uint32_t MaxMagnitudeBitsAvx512(const float* in, size_t n) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  __m512i m = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(in + i), magnitude));
  }
  const uint32_t vector_max = _mm512_reduce_max_epu32(m);
  const uint32_t tail_max = MaxMagnitudeBitsScalar(in + i, n - i);
  return vector_max > tail_max ? vector_max : tail_max;
}

AGG_TARGET_AVX512 void EncodeAvx512(const float* in, size_t n, double factor, uint8_t* wire) {
  const __m512d f = _mm512_set1_pd(factor);
  const __m512d lo = _mm512_set1_pd(double{INT32_MIN});
  const __m512d hi = _mm512_set1_pd(double{INT32_MAX});
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    __m512d a = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(in + i)), f);
    __m512d b = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(in + i + 8)), f);
    // max(NaN, lo) is lo, as the reference's conversion of NaN gives INT32_MIN.
    a = _mm512_min_pd(_mm512_max_pd(a, lo), hi);
    b = _mm512_min_pd(_mm512_max_pd(b, lo), hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wire + 4 * i), _mm512_cvtpd_epi32(a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wire + 4 * i + 32), _mm512_cvtpd_epi32(b));
  }
  EncodeScalar(in + i, n - i, factor, wire + 4 * i);
}

AGG_TARGET_AVX512 void DecodeAvx512(const uint8_t* wire, size_t n, double factor, float* out) {
  const __m512d f = _mm512_set1_pd(factor);
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const auto* q = reinterpret_cast<const __m256i*>(wire + 4 * i);
    const __m512d a = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_loadu_si256(q)), f);
    const __m512d b = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_loadu_si256(q + 1)), f);
    _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(a));
    _mm256_storeu_ps(out + i + 8, _mm512_cvtpd_ps(b));
  }
  DecodeScalar(wire + 4 * i, n - i, factor, out + i);
}

}  // namespace aggswitch::client::internal
