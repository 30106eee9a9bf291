// The simulator's randomness: xoshiro256** seeded through splitmix64, with
// its own range reductions, so that a seed draws the same scenario, faults
// and values on every machine and standard library (the <random>
// distributions are implementation-defined).
//
//   Rng rng(Mix(seed, kLinks, link_id));   // one stream per purpose and object
//   if (rng.Chance(0.01)) ...;             // lose the frame
//   uint32_t ranks = rng.Range(2, 64);
//
// Thread safety: an Rng is used by one thread.
#pragma once

#include <cstdint>

namespace aggswitch::sim {

inline uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A seed for one purpose (and object) under `seed`: streams that do not
// shift when another purpose draws more or less.
inline uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  uint64_t x = seed ^ 0x243f6a8885a308d3ULL;
  uint64_t h = SplitMix(x);
  x = h ^ a;
  h = SplitMix(x);
  x = h ^ b;
  h = SplitMix(x);
  x = h ^ c;
  return SplitMix(x);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& w : s_) w = SplitMix(x);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n); n > 0.
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  // Uniform in [lo, hi], inclusive.
  int64_t Range(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
  }
  // True with probability p (0 <= p <= 1), to 2^-53.
  bool Chance(double p) { return Unit() < p; }
  // Uniform in [0, 1).
  double Unit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // One of `n` weights' indices, with probability proportional to its weight.
  template <typename T, size_t N>
  size_t Pick(const T (&weights)[N]) {
    T total = 0;
    for (T w : weights) total += w;
    T r = static_cast<T>(Below(static_cast<uint64_t>(total)));
    for (size_t i = 0; i < N; ++i) {
      if (r < weights[i]) return i;
      r -= weights[i];
    }
    return N - 1;
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace aggswitch::sim
