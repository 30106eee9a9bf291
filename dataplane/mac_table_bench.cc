// MAC table lookup cost: single lookups, bulk lookups of a 32-frame burst
// (one source + one destination per frame), hits and misses, at a table load
// that fits in cache and one that does not.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "dataplane/mac_table.h"

namespace aggswitch::dataplane {
namespace {

struct Fixture {
  explicit Fixture(uint32_t entries) : table(entries) {
    std::mt19937_64 rng(42);
    for (uint32_t i = 0; i < entries; ++i) {
      const uint64_t key = MacKey(1 + i % 16, (rng() & 0xfeffffffffffULL) | 0x020000000000ULL);
      if (table.Learn(key, static_cast<uint16_t>(i % 8), 0) == MacTable::LearnResult::kAdded)
        keys.push_back(key);
    }
    std::shuffle(keys.begin(), keys.end(), rng);
  }
  MacTable table;
  std::vector<uint64_t> keys;
};

void BM_LookupSingle(benchmark::State& state) {
  Fixture f(static_cast<uint32_t>(state.range(0)));
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.table.Lookup(f.keys[i]));
    if (++i == f.keys.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_LookupBulk64(benchmark::State& state) {
  Fixture f(static_cast<uint32_t>(state.range(0)));
  MacTable::Hit hits[64];
  size_t i = 0;
  for (auto _ : state) {
    if (i + 64 > f.keys.size()) i = 0;
    f.table.LookupBulk(&f.keys[i], 64, hits);
    benchmark::DoNotOptimize(hits);
    i += 64;
  }
  state.SetItemsProcessed(state.iterations() * 64);
}

void BM_LookupBulkMiss64(benchmark::State& state) {
  Fixture f(static_cast<uint32_t>(state.range(0)));
  std::vector<uint64_t> misses;
  for (uint64_t k : f.keys) misses.push_back(k ^ 0x0000000100000000ULL);
  MacTable::Hit hits[64];
  size_t i = 0;
  for (auto _ : state) {
    if (i + 64 > misses.size()) i = 0;
    f.table.LookupBulk(&misses[i], 64, hits);
    benchmark::DoNotOptimize(hits);
    i += 64;
  }
  state.SetItemsProcessed(state.iterations() * 64);
}

BENCHMARK(BM_LookupSingle)->Arg(1024)->Arg(1 << 20);
BENCHMARK(BM_LookupBulk64)->Arg(1024)->Arg(1 << 20);
BENCHMARK(BM_LookupBulkMiss64)->Arg(1024)->Arg(1 << 20);

}  // namespace
}  // namespace aggswitch::dataplane
