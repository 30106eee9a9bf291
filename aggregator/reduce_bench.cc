// Reduction kernel throughput, one core, per kernel set this CPU runs: bytes of
// wire payload folded into an accumulator per second (Accumulate), for one
// packet's worth of elements (256, and 357 = a 1428-byte float32 payload) and a
// large chunk (4096). The accumulator (64-byte aligned, as in a slot) and the
// payload (2 bytes past a cache line, where a 14-byte Ethernet header leaves
// it) stay in L1: this measures the kernel, not the memory system.
// StoreResult is measured for the 16-bit types, whose results are rounded.
//
//   reduce_bench --benchmark_filter='Accumulate/.*/357'
//
// Measured on the 2-core dev VM ("Intel Xeon Processor", AVX-512 incl. FP16/BF16,
// GCC 12 -O3), GiB/s of wire payload, median of 3, elements 256 / 357 / 4096.
// "scalar" is the reference as the build compiles it: with -march=native GCC
// auto-vectorises the simple loops (float32 sum) for AVX-512; with
// -march=x86-64 (the portable build, last column, n = 357) it is SSE2 at best.
//
//   Accumulate        scalar(native)     avx2               avx512           scalar x86-64
//   int32 sum         8.4/8.9/8.4       27/26/27           49/49/52          10.3
//   float32 sum       70/78/114         43/40/48           76/80/93          22.8
//   float32 min       30/28/31          35/33/40           66/70/71           7.8
//   float16 sum       1.1/1.2/1.2       23/18/23           34/35/37           1.1
//   bfloat16 sum      35/30/36          19/18/18           36/36/38          10.2
//   bool or           37/32/77          31/20/45           44/37/77          16.3
//   StoreResult, 357: float16 1.3 / 26 / 39, bfloat16 17 / 12 / 21 (scalar/avx2/avx512).
//
// One 357-element float32 packet costs ~17 ns on AVX-512 (~27 ns as int32,
// ~19 ns as float16), of which the call and the dispatch are ~3.5 ns (timed
// with n = 0). AVX2 lanes after the last full vector go through the reference,
// which is why 357 is slower than 256 there (and why float16, whose scalar
// widening is slow, drops most). The explicit kernels earn their place on int32 (saturation
// does not auto-vectorise), min/max (NaN and -0 rules), float16 and bool, and
// on every type in a portable build.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "aggregator/half.h"
#include "aggregator/reduce.h"

namespace aggswitch::aggregator {
namespace {

constexpr size_t kPayloadMisalign = 2;
constexpr size_t kPage = 4096;

// Plausible gradient values: no NaN, no saturation, so every run takes the same path.
std::vector<uint8_t> MakePayload(DType dtype, uint32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> grad(-1.0f, 1.0f);
  std::vector<uint8_t> out(ElementSize(dtype) * n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kInt32: {
        const int32_t v = static_cast<int32_t>(rng() % 2001) - 1000;
        std::memcpy(out.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kFloat32: {
        const float v = grad(rng);
        std::memcpy(out.data() + 4 * i, &v, 4);
        break;
      }
      case DType::kFloat16:
      case DType::kBFloat16: {
        const float f = grad(rng);
        const uint16_t v = dtype == DType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
        std::memcpy(out.data() + 2 * i, &v, 2);
        break;
      }
      case DType::kBool:
        out[i] = static_cast<uint8_t>(rng() & 1);
        break;
    }
  }
  return out;
}

// Both buffers live in one block. The payload starts half a page (plus the
// misalignment) after a page boundary past the accumulator: loads from it that
// sit exactly 4 KiB after a pending accumulator store would stall on 4K
// aliasing, which would measure the buffer layout, not the kernel.
struct Buffers {
  Buffers(DType dtype, uint32_t n)
      : storage(AccumulatorElementSize(dtype) * n + ElementSize(dtype) * n + 2 * kPage) {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    acc = storage.data() + (64 - base % 64) % 64;
    const size_t acc_pages = (AccumulatorElementSize(dtype) * n + kPage - 1) / kPage;
    payload = acc + acc_pages * kPage + kPage / 2 + kPayloadMisalign;
    const std::vector<uint8_t> p = MakePayload(dtype, n, 1);
    std::memcpy(payload, p.data(), p.size());
    LoadFirst(dtype, payload, n, acc);
  }
  std::vector<uint8_t> storage;
  uint8_t* acc;
  uint8_t* payload;
};

void BM_Accumulate(benchmark::State& state, ReduceIsa isa, DType dtype, ReduceOp op, uint32_t n) {
  if (!ForceReduceIsa(isa)) {
    state.SkipWithError("kernel set not supported on this CPU");
    return;
  }
  Buffers b(dtype, n);
  for (auto _ : state) {
    benchmark::DoNotOptimize(Accumulate(dtype, op, b.acc, b.payload, n));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * ElementSize(dtype));
  InitReduceKernels();
}

void BM_StoreResult(benchmark::State& state, ReduceIsa isa, DType dtype, uint32_t n) {
  if (!ForceReduceIsa(isa)) {
    state.SkipWithError("kernel set not supported on this CPU");
    return;
  }
  Buffers b(dtype, n);
  for (auto _ : state) {
    StoreResult(dtype, b.acc, n, b.payload);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * ElementSize(dtype));
  InitReduceKernels();
}

bool RegisterAll() {
  struct Case {
    DType dtype;
    ReduceOp op;
  };
  constexpr Case kCases[] = {
      {DType::kInt32, ReduceOp::kSum},    {DType::kFloat32, ReduceOp::kSum},
      {DType::kFloat32, ReduceOp::kMin},  {DType::kFloat16, ReduceOp::kSum},
      {DType::kBFloat16, ReduceOp::kSum}, {DType::kBool, ReduceOp::kOr},
  };
  constexpr uint32_t kSizes[] = {256, 357, 4096};
  for (ReduceIsa isa : {ReduceIsa::kScalar, ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (!ReduceIsaSupported(isa)) continue;
    const std::string isa_name = ReduceIsaName(isa);
    for (const Case& c : kCases) {
      for (uint32_t n : kSizes) {
        const std::string name = "Accumulate/" + isa_name + "/" + std::string(DTypeName(c.dtype)) +
                                 "_" + std::string(ReduceOpName(c.op)) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Accumulate, isa, c.dtype, c.op, n);
      }
    }
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      const std::string name =
          "StoreResult/" + isa_name + "/" + std::string(DTypeName(dtype)) + "/357";
      benchmark::RegisterBenchmark(name.c_str(), BM_StoreResult, isa, dtype, 357u);
    }
  }
  return true;
}

// benchmark_main supplies main(); registration has to happen before it runs.
[[maybe_unused]] const bool kRegistered = RegisterAll();

}  // namespace
}  // namespace aggswitch::aggregator
