#include "tools/agg-cached/cache_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/lib/promtool.h"

namespace aggswitch::tools {
namespace {

cache::CacheDaemon::Stats Distinct() {
  cache::CacheDaemon::Stats s;
  s.fill_target_items = 11;
  s.fill_target_bytes = 12;
  s.filled_items = 13;
  s.filled_bytes = 14;
  s.fill_errors = 15;
  s.fill_requests = 16;
  s.fill_requests_ignored = 17;
  s.record_errors = 18;
  s.connections = 19;
  s.refused_address = 20;
  s.refused_job = 21;
  s.bad_hellos = 22;
  s.hellos = 23;
  s.peer_failures = 24;
  s.initial_fill_done = true;
  s.region_bytes = 25;
  s.region_used_bytes = 26;
  s.items = 27;
  s.evictions = 28;
  s.store_requests = 29;
  s.store_bytes = 30;
  s.unknown_messages = 31;
  return s;
}

TEST(CacheMetricsTest, EveryCounterIsItsOwnSeries) {
  cache::DaemonConfig c;
  c.node = "n\"1";
  c.dataset = "ds";
  const std::string text = RenderCacheMetrics(Distinct(), c);
  for (const char* line : {
           "aggswitch_cache_fill_target_items 11", "aggswitch_cache_filled_bytes_total 14",
           "aggswitch_cache_fill_requests_total{outcome=\"queued\"} 16",
           "aggswitch_cache_fill_requests_total{outcome=\"ignored\"} 17",
           "aggswitch_cache_refused_total{reason=\"address\"} 20",
           "aggswitch_cache_refused_total{reason=\"job\"} 21",
           "aggswitch_cache_refused_total{reason=\"bad_hello\"} 22", "aggswitch_cache_fill_complete 1",
           "aggswitch_cache_region_used_bytes 26", "aggswitch_cache_evictions_total 28",
           "aggswitch_cache_store_bytes_total 30", "aggswitch_cache_unknown_messages_total 31",
           "aggswitch_cache_info{node=\"n\\\"1\",dataset=\"ds\",ucx_tls=\"rc_verbs,ud_verbs,tcp\"} 1"}) {
    EXPECT_NE(text.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << text;
  }
}

TEST(CacheMetricsTest, PromtoolAcceptsIt) {
  const std::string text = RenderCacheMetrics(Distinct(), cache::DaemonConfig{});
  const testing::PromtoolResult r = testing::RunPromtool(text);
  EXPECT_EQ(r.exit_code, 0) << r.output << text;
}

}  // namespace
}  // namespace aggswitch::tools
