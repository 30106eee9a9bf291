// agg-load: loads a dataset out of the data cache as a training process
// would (cache/loader.h), and says what it measured: requests, items by
// source (local, owner, replica, store), misses, stale records, failed
// holders, throughput and the latency of each request. With
// --verify-against it compares every item with the source copy. With
// --source store it reads the same requests from the external store instead,
// for comparison (bench/cache_load.sh).
//
//   agg-load --config loader.yaml [--requests N] [--verify-against DIR] [--print-requests]
//
// The last line is the summary:
//   agg-load: requests=8 items=512 bytes=... local=128 owner=384 ... MBps=... p50_ms=... p99_ms=...
//
// Exit codes: 0 every request served (and every item verified); 1 a request
// failed or an item differed; 2 a bad command line or config.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_config.h"
#include "cache/external_store.h"
#include "cache/loader.h"
#include "common/log.h"

namespace aggswitch::tools {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

bool SameAsFile(const std::string& path, const uint8_t* data, uint64_t length) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::vector<char> want(length + 1);
  in.read(want.data(), static_cast<std::streamsize>(length + 1));
  return static_cast<uint64_t>(in.gcount()) == length && std::memcmp(want.data(), data, length) == 0;
}

int Main(int argc, char** argv) {
  std::string config_path, verify_dir, source = "cache", amount_text, component_text, log_level = "warning";
  uint64_t requests = 0;
  uint32_t interval_ms = 0;
  bool print_requests = false;
  CLI::App app{"agg-load: load a dataset from the aggswitch data cache and measure it"};
  app.add_option("--config", config_path, "The loader config (YAML, a `loader:` section)")->required();
  app.add_option("--requests", requests, "Requests to serve (default: one pass over the dataset)");
  app.add_option("--amount", amount_text, "Bytes per request (overrides request.amount), e.g. 64MiB");
  app.add_option("--component", component_text, "cpu or gpu (overrides request.component)")
      ->check(CLI::IsMember({"cpu", "gpu"}));
  app.add_option("--source", source, "cache (the loader) or store (the external store alone)")
      ->check(CLI::IsMember({"cache", "store"}))
      ->capture_default_str();
  app.add_option("--verify-against", verify_dir, "A directory with the source copy of every item");
  app.add_option("--interval-ms", interval_ms, "Pause between requests");
  app.add_flag("--print-requests", print_requests, "One line per request");
  app.add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  common::SetLogLevel(common::ParseLogLevel(log_level).value_or(common::LogLevel::kWarning));
  auto cfg = cache::LoadLoaderConfig(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "%s\n", cfg.status().message().c_str());
    return kExitUsage;
  }
  std::optional<uint64_t> amount;
  if (!amount_text.empty() && !(amount = cache::ParseSize(amount_text))) {
    std::fprintf(stderr, "--amount: expected a size such as 64MiB, got \"%s\"\n", amount_text.c_str());
    return kExitUsage;
  }

  std::unique_ptr<cache::Loader> loader;
  std::unique_ptr<cache::ExternalStore> store;
  std::vector<cache::ExternalStore::Entry> entries;
  if (source == "cache") {
    auto opened = cache::Loader::Open(*cfg, config_path);
    if (!opened.ok()) {
      std::fprintf(stderr, "agg-load: %s\n", opened.status().message().c_str());
      return kExitUsage;
    }
    loader = std::move(opened).value();
    if (amount || !component_text.empty()) {
      const common::Status set = loader->SetRequest(amount.value_or(loader->amount()),
                                                    component_text == "gpu"   ? cache::Component::kGpu
                                                    : component_text == "cpu" ? cache::Component::kCpu
                                                                              : loader->component());
      if (!set.ok()) {
        std::fprintf(stderr, "agg-load: --amount: %s\n", set.message().c_str());
        return kExitUsage;
      }
    }
    for (size_t i = 0; i < loader->size(); ++i) entries.push_back({loader->name(i), loader->length(i)});
  } else {
    auto opened = cache::ExternalStore::Open(cfg->store);
    auto listed = opened.ok() ? (*opened)->List() : common::Result<std::vector<cache::ExternalStore::Entry>>(opened.status());
    if (!listed.ok()) {
      std::fprintf(stderr, "agg-load: %s\n", listed.status().message().c_str());
      return kExitUsage;
    }
    store = std::move(opened).value();
    entries = std::move(listed).value();
  }
  uint64_t total_bytes = 0;
  for (const auto& e : entries) total_bytes += e.length;
  const uint64_t request_amount = amount.value_or(cfg->amount);

  std::vector<double> latencies_ms;
  uint64_t items = 0, bytes = 0, mismatches = 0, served = 0;
  std::vector<uint8_t> store_buf;
  size_t store_cursor = 0;
  const auto started = Clock::now();
  int rc = 0;
  for (;;) {
    if (requests != 0 ? served >= requests : bytes >= total_bytes) break;
    const auto t0 = Clock::now();
    std::vector<cache::Loader::Item> got;
    const uint8_t* data = nullptr;
    if (loader) {
      auto batch = loader->Next();
      if (!batch.ok()) {
        std::fprintf(stderr, "agg-load: request %llu: %s\n", static_cast<unsigned long long>(served + 1),
                     batch.status().message().c_str());
        rc = kExitFailed;
        break;
      }
      data = (*batch)->data;
      got = (*batch)->items;
    } else {
      uint64_t off = 0;
      std::vector<size_t> picked;
      for (size_t n = 0; n < entries.size(); ++n) {
        const auto& e = entries[store_cursor];
        if (!picked.empty() && off + e.length > request_amount) break;
        picked.push_back(store_cursor);
        got.push_back({e.name, off, e.length, cache::Loader::Source::kStore});
        off += e.length;
        store_cursor = (store_cursor + 1) % entries.size();
      }
      if (store_buf.size() < off) store_buf.resize(off);
      for (const auto& item : got) {
        auto r = store->Read(item.name, store_buf.data() + item.offset, item.length);
        if (!r.ok()) {
          std::fprintf(stderr, "agg-load: %s\n", r.status().message().c_str());
          return kExitFailed;
        }
      }
      data = store_buf.data();
    }
    latencies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ++served;
    uint64_t request_bytes = 0;
    for (const auto& item : got) {
      request_bytes += item.length;
      if (!verify_dir.empty() && !SameAsFile(verify_dir + "/" + item.name, data + item.offset, item.length)) {
        ++mismatches;
        std::fprintf(stderr, "agg-load: %s differs from %s/%s\n", item.name.c_str(), verify_dir.c_str(),
                     item.name.c_str());
      }
    }
    items += got.size();
    bytes += request_bytes;
    if (print_requests) {
      // at_ms: the wall clock when it was served, to line up concurrent loaders.
      const auto at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
      std::printf("request %llu: items=%zu bytes=%llu amount=%llu component=%s first=%s at_ms=%lld\n",
                  static_cast<unsigned long long>(served), got.size(),
                  static_cast<unsigned long long>(request_bytes),
                  static_cast<unsigned long long>(loader ? loader->amount() : request_amount),
                  loader ? cache::ComponentName(loader->component()) : "cpu",
                  got.empty() ? "" : got[0].name.c_str(), static_cast<long long>(at_ms));
      std::fflush(stdout);
    }
    if (interval_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - started).count();
  const cache::Loader::Stats s = loader ? loader->stats() : cache::Loader::Stats{};
  std::printf(
      "agg-load: source=%s requests=%llu items=%llu bytes=%llu local=%llu owner=%llu replica=%llu "
      "store=%llu misses=%llu stale=%llu holder_failures=%llu crc_failures=%llu fills_requested=%llu "
      "config_reloads=%llu record_errors=%llu malformed_records=%llu forged=%llu mismatches=%llu "
      "store_requests=%llu "
      "seconds=%.3f MBps=%.1f p50_ms=%.2f p99_ms=%.2f transport=%s\n",
      source.c_str(), static_cast<unsigned long long>(served), static_cast<unsigned long long>(items),
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(s.local),
      static_cast<unsigned long long>(s.owner), static_cast<unsigned long long>(s.replica),
      static_cast<unsigned long long>(s.store), static_cast<unsigned long long>(s.misses),
      static_cast<unsigned long long>(s.stale), static_cast<unsigned long long>(s.holder_failures),
      static_cast<unsigned long long>(s.crc_failures), static_cast<unsigned long long>(s.fills_requested),
      static_cast<unsigned long long>(s.config_reloads), static_cast<unsigned long long>(s.record_errors),
      static_cast<unsigned long long>(s.malformed_records), static_cast<unsigned long long>(s.forged),
      static_cast<unsigned long long>(mismatches),
      static_cast<unsigned long long>(loader ? loader->store_requests() : store->requests()), secs,
      secs > 0 ? static_cast<double>(bytes) / secs / 1e6 : 0.0, Percentile(latencies_ms, 0.5),
      Percentile(latencies_ms, 0.99), loader && !loader->transports().empty() ? loader->transports().c_str() : "none");
  if (mismatches != 0) rc = kExitFailed;
  return rc;
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) { return aggswitch::tools::Main(argc, argv); }
