#include "tools/agg-cached/cache_metrics.h"

#include "common/prometheus.h"

namespace aggswitch::tools {

std::string RenderCacheMetrics(const cache::CacheDaemon::Stats& s, const cache::DaemonConfig& config) {
  common::PrometheusExposition out;
  auto one = [&out](const char* name, const char* type, const char* help, uint64_t value) {
    out.Family(name, type, help);
    out.Sample(name, {}, value);
  };
  one("aggswitch_cache_region_bytes", "gauge", "Bytes of the node's cache region.", s.region_bytes);
  one("aggswitch_cache_region_used_bytes", "gauge",
      "Bytes of the region that hold items, headers included.", s.region_used_bytes);
  one("aggswitch_cache_items", "gauge", "Items in the region.", s.items);
  one("aggswitch_cache_evictions_total", "counter", "Items evicted to make room.", s.evictions);
  one("aggswitch_cache_fill_target_items", "gauge",
      "Items of the dataset that placement gives this node.", s.fill_target_items);
  one("aggswitch_cache_fill_target_bytes", "gauge",
      "Bytes of the dataset that placement gives this node.", s.fill_target_bytes);
  one("aggswitch_cache_filled_items_total", "counter", "Items filled from the store and recorded.",
      s.filled_items);
  one("aggswitch_cache_filled_bytes_total", "counter", "Bytes filled from the store.", s.filled_bytes);
  one("aggswitch_cache_fill_errors_total", "counter", "Items that could not be filled.", s.fill_errors);
  one("aggswitch_cache_fill_complete", "gauge", "1 once the fill ahead of use has finished.",
      s.initial_fill_done ? 1 : 0);
  out.Family("aggswitch_cache_fill_requests_total", "counter",
             "Read-through fill requests from loaders, by outcome.");
  out.Sample("aggswitch_cache_fill_requests_total", {{"outcome", "queued"}}, s.fill_requests);
  out.Sample("aggswitch_cache_fill_requests_total", {{"outcome", "ignored"}}, s.fill_requests_ignored);
  one("aggswitch_cache_record_errors_total", "counter", "Record service calls that failed.",
      s.record_errors);
  one("aggswitch_cache_connections_total", "counter", "Loader connections accepted.", s.connections);
  out.Family("aggswitch_cache_refused_total", "counter", "Loaders refused, by reason.");
  out.Sample("aggswitch_cache_refused_total", {{"reason", "address"}}, s.refused_address);
  out.Sample("aggswitch_cache_refused_total", {{"reason", "job"}}, s.refused_job);
  out.Sample("aggswitch_cache_refused_total", {{"reason", "bad_hello"}}, s.bad_hellos);
  one("aggswitch_cache_hellos_total", "counter", "Hellos answered with the region's key.", s.hellos);
  one("aggswitch_cache_peer_failures_total", "counter", "Loader connections that failed.",
      s.peer_failures);
  one("aggswitch_cache_unknown_messages_total", "counter",
      "Messages of a kind the daemon does not serve, dropped.", s.unknown_messages);
  one("aggswitch_cache_store_requests_total", "counter", "Reads from the external store.",
      s.store_requests);
  one("aggswitch_cache_store_bytes_total", "counter", "Bytes read from the external store.",
      s.store_bytes);
  out.Family("aggswitch_cache_info", "gauge", "The cache node's identity.");
  out.Sample("aggswitch_cache_info",
             {{"node", config.node}, {"dataset", config.dataset}, {"ucx_tls", config.ucx_tls}}, 1);
  return out.Take();
}

}  // namespace aggswitch::tools
