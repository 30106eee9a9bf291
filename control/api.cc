#include "control/api.h"

#include <charconv>
#include <cmath>
#include <exception>
#include <nlohmann/json.hpp>

#include "control/metrics.h"

namespace aggswitch::control {
namespace {

// Insertion-ordered, so that a body read with curl lists "name" before the counters.
using json = nlohmann::ordered_json;

constexpr std::string_view kRoutes[] = {"/metrics", "/api/v1/ports", "/api/v1/mac",
                                        "/api/v1/lcores", "/api/v1/stats"};

// Compact JSON. Invalid UTF-8 (say, in a port name) is replaced rather than
// thrown about.
std::string DumpCompact(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A response body: compact JSON plus a newline.
std::string Dump(const json& j) {
  return DumpCompact(j) + "\n";
}

// Rounds to `decimals` places so that the JSON shows 12.3, not 12.299999999999999.
double RoundTo(double v, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(v * scale) / scale;
}

json PortJson(const PortSnapshot& p) {
  json drops = json::object();
  for (size_t r = 0; r < dataplane::kNumDropReasons; ++r) {
    drops[kDropReasonText[r].label] = p.drops[r];
  }
  return {
      {"index", p.index},
      {"name", p.name},
      {"port_id", p.port_id},
      {"driver", p.driver},
      {"devargs", p.devargs},
      {"mac", p.mac.ToString()},
      {"link_up", p.link_up},
      {"link_speed_mbps", p.link_speed_mbps},
      {"rx_queues", p.rx_queues},
      {"tx_queues", p.tx_queues},
      {"vlan_mode", p.vlan_mode},
      {"rx_packets", p.rx_packets},
      {"rx_bytes", p.rx_bytes},
      {"tx_packets", p.tx_packets},
      {"tx_bytes", p.tx_bytes},
      {"flooded_packets", p.flooded_packets},
      {"dropped_packets", p.TotalDrops()},
      {"drops", std::move(drops)},
      {"device",
       {{"missed_packets", p.dev_imissed},
        {"rx_errors", p.dev_ierrors},
        {"tx_errors", p.dev_oerrors},
        {"rx_nombuf", p.dev_rx_nombuf}}},
  };
}

json LcoreJson(const LcoreSnapshot& l) {
  json rx = json::array();
  for (const auto& [port, queue] : l.rx) rx.push_back({{"port", port}, {"queue", queue}});
  json j = {
      {"lcore", l.lcore},
      {"tx_queue", l.tx_queue},
      {"rx", std::move(rx)},
      {"busy_cycles", l.busy_cycles},
      {"idle_cycles", l.idle_cycles},
      {"busy_packets", l.busy_packets},
      {"polls", l.polls},
      {"learn_requests", l.learn_requests},
      {"learn_ring_full", l.learn_ring_full},
      {"arp_replies", l.arp_replies},
      {"icmp_replies", l.icmp_replies},
      {"cycles_per_packet", nullptr},
      {"busy_percent", RoundTo(l.BusyPercent(), 2)},
  };
  if (l.busy_packets != 0) j["cycles_per_packet"] = RoundTo(l.CyclesPerPacket(), 1);
  return j;
}

json MacTableJson(const MacTableSnapshot& m) {
  return {
      {"size", m.entries},
      {"capacity", m.capacity},
      {"static_entries", m.static_entries},
      {"aging_seconds", m.aging_seconds},
      {"events",
       {{"learned", m.learned},
        {"moved", m.moved},
        {"aged", m.aged},
        {"static_conflicts", m.static_conflicts},
        {"learn_refused", m.learn_refused}}},
  };
}

json MacEntryJson(const MacEntrySnapshot& e) {
  json j = {
      {"vlan", e.vlan},
      {"mac", e.mac.ToString()},
      {"port", e.port},
      {"port_index", e.port_index},
      {"type", e.is_static ? "static" : "dynamic"},
      {"age_seconds", nullptr},
  };
  if (!e.is_static) j["age_seconds"] = RoundTo(e.age_seconds, 1);
  return j;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes %XX and '+' of a query component; nullopt on a broken escape.
std::optional<std::string> DecodeQueryComponent(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      const int hi = HexDigit(in[i + 1]);
      const int lo = HexDigit(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

std::optional<uint32_t> ParseDecimal(std::string_view text) {
  uint32_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// The port `query_port` names: a port name first, else a decimal index.
// nullptr when it names no port.
const PortSnapshot* ResolvePort(const StatsSnapshot& snap, const std::string& query_port) {
  for (const PortSnapshot& p : snap.ports) {
    if (p.name == query_port) return &p;
  }
  const std::optional<uint32_t> index = ParseDecimal(query_port);
  for (const PortSnapshot& p : snap.ports) {
    if (index && p.index == *index) return &p;
  }
  return nullptr;
}

HttpResponse JsonResponse(int status, std::string body) {
  return {status, kJsonContentType, std::move(body)};
}

// A 500 response naming the exception, or a fixed body when even that fails.
HttpResponse InternalError(const char* what) {
  try {
    return JsonResponse(500, ErrorJson(std::string("internal error: ") + what));
  } catch (const std::exception&) {
    return {500, kJsonContentType, "{\"error\":\"internal error\"}\n"};
  }
}

HttpResponse Route(std::string_view path, std::string_view query, const DataSource& source) {
  if (path == "/metrics") {
    return {200, kPrometheusContentType, RenderPrometheus(source.snapshot())};
  }
  if (path == "/api/v1/ports") return JsonResponse(200, PortsJson(source.snapshot()));
  if (path == "/api/v1/lcores") return JsonResponse(200, LcoresJson(source.snapshot()));
  if (path == "/api/v1/stats") return JsonResponse(200, StatsJson(source.snapshot()));
  // path == "/api/v1/mac", the last route.
  common::Result<MacQuery> mac_query = ParseMacQuery(query);
  if (!mac_query.ok()) return JsonResponse(400, ErrorJson(mac_query.status().message()));
  common::Result<std::string> body = MacJson(source.snapshot(), source.mac_entries(), *mac_query);
  if (!body.ok()) return JsonResponse(400, ErrorJson(body.status().message()));
  return JsonResponse(200, std::move(body).value());
}

}  // namespace

common::Result<MacQuery> ParseMacQuery(std::string_view query) {
  MacQuery out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    const std::optional<std::string> key = DecodeQueryComponent(pair.substr(0, eq));
    const std::optional<std::string> value = DecodeQueryComponent(
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!key || !value) {
      return common::InvalidArgument("malformed percent-encoding in query '" + std::string(pair) +
                                     "'");
    }
    if (*key == "vlan") {
      const std::optional<uint32_t> vlan = ParseDecimal(*value);
      if (!vlan || *vlan < config::kMinVlan || *vlan > config::kMaxVlan) {
        return common::InvalidArgument("vlan must be a number from 1 to 4094, got '" + *value +
                                       "'");
      }
      out.vlan = static_cast<uint16_t>(*vlan);
    } else if (*key == "port") {
      if (value->empty()) return common::InvalidArgument("port must name a port, got ''");
      out.port = *value;
    } else {
      return common::InvalidArgument("unknown query parameter '" + *key +
                                     "'; expected vlan or port");
    }
  }
  return out;
}

std::string PortsJson(const StatsSnapshot& snap) {
  json ports = json::array();
  for (const PortSnapshot& p : snap.ports) ports.push_back(PortJson(p));
  return Dump({{"ports", std::move(ports)}});
}

std::string LcoresJson(const StatsSnapshot& snap) {
  json lcores = json::array();
  for (const LcoreSnapshot& l : snap.lcores) lcores.push_back(LcoreJson(l));
  return Dump({{"tsc_hz", snap.tsc_hz}, {"lcores", std::move(lcores)}});
}

std::string StatsJson(const StatsSnapshot& snap) {
  json ports = json::array();
  uint64_t rx = 0, tx = 0, flooded = 0, dropped = 0;
  for (const PortSnapshot& p : snap.ports) {
    ports.push_back(PortJson(p));
    rx += p.rx_packets;
    tx += p.tx_packets;
    flooded += p.flooded_packets;
    dropped += p.TotalDrops();
  }
  json lcores = json::array();
  for (const LcoreSnapshot& l : snap.lcores) lcores.push_back(LcoreJson(l));
  return Dump({
      {"build", {{"version", snap.build.version}, {"dpdk_version", snap.build.dpdk_version}}},
      {"tsc_hz", snap.tsc_hz},
      {"totals",
       {{"rx_packets", rx},
        {"tx_packets", tx},
        {"flooded_packets", flooded},
        {"dropped_packets", dropped}}},
      {"ports", std::move(ports)},
      {"lcores", std::move(lcores)},
      {"mac_table", MacTableJson(snap.mac_table)},
  });
}

common::Result<std::string> MacJson(const StatsSnapshot& snap,
                                    const std::vector<MacEntrySnapshot>& entries,
                                    const MacQuery& query) {
  const PortSnapshot* port = nullptr;
  if (query.port) {
    port = ResolvePort(snap, *query.port);
    if (port == nullptr) {
      std::string names;
      for (const PortSnapshot& p : snap.ports) names += (names.empty() ? "" : ", ") + p.name;
      return common::InvalidArgument("no port '" + *query.port + "'; ports are: " + names);
    }
  }
  std::vector<const MacEntrySnapshot*> matches;
  for (const MacEntrySnapshot& e : entries) {
    if (query.vlan && e.vlan != *query.vlan) continue;
    if (port != nullptr && e.port_index != port->index) continue;
    matches.push_back(&e);
  }
  json filter = {{"vlan", nullptr}, {"port", nullptr}};
  if (query.vlan) filter["vlan"] = *query.vlan;
  if (port != nullptr) filter["port"] = port->name;

  // The entries are written one by one rather than built as one JSON tree:
  // a full table of a million entries would otherwise need several hundred MB.
  std::string out = "{\"table\":" + DumpCompact(MacTableJson(snap.mac_table)) +
                    ",\"filter\":" + DumpCompact(filter) +
                    ",\"count\":" + std::to_string(matches.size()) + ",\"entries\":[";
  for (size_t i = 0; i < matches.size(); ++i) {
    if (i > 0) out += ',';
    out += DumpCompact(MacEntryJson(*matches[i]));
  }
  out += "]}\n";
  return out;
}

std::string ErrorJson(std::string_view message) {
  return Dump({{"error", message}});
}

HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           const DataSource& source) {
  try {
    bool known = false;
    for (std::string_view route : kRoutes) known = known || route == path;
    if (!known) {
      json routes = json::array();
      for (std::string_view route : kRoutes) routes.push_back(route);
      return JsonResponse(
          404, Dump({{"error", "no route " + std::string(path)}, {"routes", std::move(routes)}}));
    }
    if (method != "GET") {
      return JsonResponse(405, ErrorJson("method " + std::string(method) + " not allowed on " +
                                         std::string(path) + "; the API is read-only, use GET"));
    }
    return Route(path, query, source);
  } catch (const std::exception& e) {
    return InternalError(e.what());
  }
}

}  // namespace aggswitch::control
