// The read-only control API: JSON bodies of the /api/v1 routes, and the router
// that maps a request (method, path, query) to a response.
//
// Everything here is a pure function of a StatsSnapshot (and, for /mac, the
// MAC entries), so routing, filtering and the JSON shapes are unit-tested
// without EAL or a socket. http_server.h only adapts civetweb to
// HandleRequest(); aggctl is the main client.
//
// Routes (GET only; other methods get 405, unknown paths 404, all errors are
// {"error": "..."}):
//   /metrics          Prometheus text (metrics.h)
//   /api/v1/ports     {"ports": [port]}
//   /api/v1/mac       {"table": mac_table, "filter": {"vlan","port"}, "count", "entries": [mac]}
//                     optional query: vlan=<1..4094>, port=<name or index>
//   /api/v1/lcores    {"tsc_hz", "lcores": [lcore]}
//   /api/v1/stats     {"build", "tsc_hz", "totals", "ports": [port], "lcores": [lcore],
//                      "mac_table": mac_table}
// where
//   port      = {"index","name","port_id","driver","devargs","mac","link_up",
//                "link_speed_mbps","rx_queues","tx_queues","vlan_mode","rx_packets",
//                "rx_bytes","tx_packets","tx_bytes","flooded_packets","dropped_packets",
//                "drops": {<reason>: n, ... every reason}, "device": {"missed_packets",
//                "rx_errors","tx_errors","rx_nombuf"}}
//   lcore     = {"lcore","tx_queue","rx": [{"port","queue"}],"busy_cycles","idle_cycles",
//                "busy_packets","polls","learn_requests","learn_ring_full","arp_replies",
//                "icmp_replies","cycles_per_packet" (null before the first packet),
//                "busy_percent"}
//   mac_table = {"size","capacity","static_entries","aging_seconds","events": {"learned",
//                "moved","aged","static_conflicts","learn_refused"}}
//   mac       = {"vlan","mac","port","port_index","type": "static"|"dynamic",
//                "age_seconds" (null for static entries)}
//
//   DataSource source{[&] { return CollectSnapshot(dp); },
//                     [&] { return CollectMacEntries(dp); }};
//   HttpResponse r = HandleRequest("GET", "/api/v1/mac", "vlan=10", source);
//
// Thread safety: every function is pure apart from calling the DataSource
// functions; any thread, provided the DataSource functions are safe there.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "control/stats_snapshot.h"

namespace aggswitch::control {

// Where the router gets its data. Each function is called at most once per
// request, and only by the routes that need it.
struct DataSource {
  std::function<StatsSnapshot()> snapshot;
  std::function<std::vector<MacEntrySnapshot>()> mac_entries;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
};

inline constexpr char kJsonContentType[] = "application/json";

// Filters of GET /api/v1/mac.
struct MacQuery {
  std::optional<uint16_t> vlan;
  std::optional<std::string> port;  // a port name, or a port index in decimal
};

// Parses "vlan=10&port=p0" (percent-encoding and '+' decoded). An empty query
// is no filter. Unknown keys and bad VLAN numbers are InvalidArgument. [any]
common::Result<MacQuery> ParseMacQuery(std::string_view query);

// The bodies of the routes above, compact JSON ending in a newline. [any]
std::string PortsJson(const StatsSnapshot& snap);
std::string LcoresJson(const StatsSnapshot& snap);
std::string StatsJson(const StatsSnapshot& snap);
// `entries` filtered by `query`. A port filter that names no port of `snap`
// is InvalidArgument. [any]
common::Result<std::string> MacJson(const StatsSnapshot& snap,
                                    const std::vector<MacEntrySnapshot>& entries,
                                    const MacQuery& query);
// {"error": message}. [any]
std::string ErrorJson(std::string_view message);

// Routes one request. `path` is the URL-decoded path without the query;
// `query` is the raw query string without '?'. Never throws: failures of the
// DataSource or of JSON encoding become a 500 response. [any]
HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           const DataSource& source);

}  // namespace aggswitch::control
