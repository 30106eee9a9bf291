// Fixed-point conversion throughput, one core, per kernel set this CPU runs:
// float32 bytes encoded to the wire (EncodeFixed), decoded from it
// (DecodeFixed) and scanned for the exponent (MaxExponent) per second, for
// one datagram's elements at a 1500-byte MTU (356) and a whole 4 MiB
// gradient (1 Mi elements, past the L2 cache, as a client converts it).
//
//   fixed_point_bench --benchmark_filter='Encode/.*'
//
// Measured on the 2-core dev VM (AMD, AVX-512, GCC 12 -O3), GiB/s of float32
// at 1 Mi elements, the two builds run back to back (356 elements: within
// 15%). "portable" is the scalar code built with -march=x86-64:
//
//                 scalar(native)   avx2   avx512   scalar(portable)
//   Encode              13          20      35          2.0
//   Decode              38          28      37         21
//   MaxExponent         69          50      71          6.3
//
// With -march=native GCC vectorises the scalar decode and exponent loops for
// AVX-512 by itself; the kernels earn their place on encode (round and clamp
// do not auto-vectorise: 2.6x) and on every conversion of a portable build
// (encode 16x, exponent 11x, decode 1.9x). A 4 MiB gradient then costs about
// 0.3 ms of conversions per allreduce instead of 2.3 ms (portable, scalar).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "client/fixed_point.h"

namespace aggswitch::client {
namespace {

constexpr int8_t kScale = -24;  // gradients in (-1, 1) at 4 ranks' headroom

std::vector<float> Gradient(size_t n) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = grad(rng);
  return v;
}

enum class Op { kEncode, kDecode, kMaxExponent };

void BM_Convert(benchmark::State& state, common::SimdIsa isa, Op op, size_t n) {
  if (!ForceFixedPointIsa(isa)) {
    state.SkipWithError("kernel set not supported on this CPU");
    return;
  }
  const std::vector<float> in = Gradient(n);
  std::vector<uint8_t> wire(4 * n + 2);
  uint8_t* const payload = wire.data() + 2;  // where a 14-byte Ethernet header leaves it
  EncodeFixed(in, kScale, payload);
  std::vector<float> out(n);
  for (auto _ : state) {
    switch (op) {
      case Op::kEncode:
        EncodeFixed(in, kScale, payload);
        break;
      case Op::kDecode:
        DecodeFixed(payload, kScale, out);
        break;
      case Op::kMaxExponent:
        benchmark::DoNotOptimize(MaxExponent(in));
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(4 * n));
  ForceFixedPointIsa(common::BestSimdIsa());
}

bool RegisterAll() {
  const std::pair<const char*, Op> ops[] = {
      {"Encode", Op::kEncode}, {"Decode", Op::kDecode}, {"MaxExponent", Op::kMaxExponent}};
  for (const auto& [name, op] : ops) {
    for (common::SimdIsa isa :
         {common::SimdIsa::kScalar, common::SimdIsa::kAvx2, common::SimdIsa::kAvx512}) {
      if (!common::SimdIsaSupported(isa)) continue;
      for (size_t n : {size_t{356}, size_t{1} << 20}) {
        const std::string full =
            std::string(name) + "/" + common::SimdIsaName(isa) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(full.c_str(), BM_Convert, isa, op, n);
      }
    }
  }
  return true;
}

// benchmark_main supplies main(); registration has to happen before it runs.
[[maybe_unused]] const bool kRegistered = RegisterAll();

}  // namespace
}  // namespace aggswitch::client
