// AVX2 fixed-point kernels: 8 floats per step, as two vectors of 4 doubles.
// Every function carries the target attribute instead of the file getting
// -mavx2 (aggregator/reduce_avx2.cc says why); fixed_point_kernels.h says why
// the result is the reference's, bit for bit.
#include <immintrin.h>

#include <climits>

#include "client/internal/fixed_point_kernels.h"

#define AGG_TARGET_AVX2 __attribute__((target("avx2")))

namespace aggswitch::client::internal {

namespace {
constexpr size_t kStep = 8;
}  // namespace

AGG_TARGET_AVX2 uint32_t MaxMagnitudeBitsAvx2(const float* in, size_t n) {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i m = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    m = _mm256_max_epu32(m, _mm256_and_si256(bits, magnitude));
  }
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  const auto vector_max = static_cast<uint32_t>(_mm_cvtsi128_si32(h));
  const uint32_t tail_max = MaxMagnitudeBitsScalar(in + i, n - i);
  return vector_max > tail_max ? vector_max : tail_max;
}

AGG_TARGET_AVX2 void EncodeAvx2(const float* in, size_t n, double factor, uint8_t* wire) {
  const __m256d f = _mm256_set1_pd(factor);
  const __m256d lo = _mm256_set1_pd(double{INT32_MIN});
  const __m256d hi = _mm256_set1_pd(double{INT32_MAX});
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const __m256 x = _mm256_loadu_ps(in + i);
    __m256d a = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), f);
    __m256d b = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), f);
    // max(NaN, lo) is lo, as the reference's conversion of NaN gives INT32_MIN.
    a = _mm256_min_pd(_mm256_max_pd(a, lo), hi);
    b = _mm256_min_pd(_mm256_max_pd(b, lo), hi);
    const __m256i q = _mm256_set_m128i(_mm256_cvtpd_epi32(b), _mm256_cvtpd_epi32(a));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(wire + 4 * i), q);
  }
  EncodeScalar(in + i, n - i, factor, wire + 4 * i);
}

AGG_TARGET_AVX2 void DecodeAvx2(const uint8_t* wire, size_t n, double factor, float* out) {
  const __m256d f = _mm256_set1_pd(factor);
  size_t i = 0;
  for (; i + kStep <= n; i += kStep) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wire + 4 * i));
    const __m256d a = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(q)), f);
    const __m256d b = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(q, 1)), f);
    _mm256_storeu_ps(out + i, _mm256_set_m128(_mm256_cvtpd_ps(b), _mm256_cvtpd_ps(a)));
  }
  DecodeScalar(wire + 4 * i, n - i, factor, out + i);
}

}  // namespace aggswitch::client::internal
