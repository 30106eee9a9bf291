#include "control/api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "aggregator/types.h"
#include "common/prometheus.h"
#include "control/api_routes.h"
#include "control/metrics.h"

namespace aggswitch::control {
namespace {

// Insertion-ordered, so that a body read with curl lists "name" before the counters.
using json = nlohmann::ordered_json;


// Compact JSON. Invalid UTF-8 (say, in a port name) is replaced rather than
// thrown about.
std::string DumpCompact(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A response body: compact JSON plus a newline.
std::string Dump(const json& j) {
  return DumpCompact(j) + "\n";
}

// What an error message shows of a value from a request body: a scalar as
// JSON (a string cut after kPreviewChars characters), a list or an object by
// its size. Never recursive: dump() recurses once per nesting level, and a
// request decides how deep its values nest.
constexpr size_t kPreviewChars = 48;
std::string Preview(const json& v) {
  if (v.is_array()) {
    return v.empty() ? "[]" : "a list of " + std::to_string(v.size()) +
                                  (v.size() == 1 ? " item" : " items");
  }
  if (v.is_object()) {
    return v.empty() ? "{}" : "an object with " + std::to_string(v.size()) +
                                  (v.size() == 1 ? " key" : " keys");
  }
  if (v.is_string()) {
    const std::string& text = v.get_ref<const std::string&>();
    if (text.size() <= kPreviewChars) return DumpCompact(v);
    // The cut may split a UTF-8 sequence; dump() replaces what is left of it.
    return DumpCompact(json(text.substr(0, kPreviewChars))) + "...";
  }
  return DumpCompact(v);  // a number, true, false or null
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
  json faults = json::object();
  for (size_t f = 0; f < dataplane::kNumFaults; ++f) faults[dataplane::kFaultText[f].label] = p.faults[f];
  json device = json::object();
#define AGG_PORT_DEVICE_JSON(name, stat, help) device[#name] = p.dev_##name;
  AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_JSON)
#undef AGG_PORT_DEVICE_JSON
  json j = {
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
  };
#define AGG_PORT_JSON(name, help) j[#name] = p.name;
  AGG_PORT_COUNTERS(AGG_PORT_JSON)
#undef AGG_PORT_JSON
  j["dropped_packets"] = p.TotalDrops();
  j["drops"] = std::move(drops);
  j["faults"] = std::move(faults);
  j["device"] = std::move(device);
  return j;
}

json LcoreJson(const LcoreSnapshot& l) {
  json rx = json::array();
  for (const auto& [port, queue] : l.rx) rx.push_back({{"port", port}, {"queue", queue}});
  json j = {
      {"lcore", l.lcore},
      {"tx_queue", l.tx_queue},
      {"rx", std::move(rx)},
  };
#define AGG_LCORE_JSON(name, help) j[#name] = l.name;
  AGG_LCORE_COUNTERS(AGG_LCORE_JSON)
#undef AGG_LCORE_JSON
  j["cycles_per_packet"] = nullptr;
  j["busy_percent"] = RoundTo(l.BusyPercent(), 2);
  if (l.busy_packets != 0) j["cycles_per_packet"] = RoundTo(l.CyclesPerPacket(), 1);
  json agg = json::object();
  for (size_t a = 0; a < dataplane::kNumAggCounters; ++a)
    agg[dataplane::kAggCounterText[a].name] = l.agg[a];
  agg["slots"] = l.slots;
  agg["slots_busy"] = l.slots_busy;
  agg["slots_complete"] = l.slots_complete;
  agg["slot_timers"] = l.slot_timers;
  agg["bypass_entries"] = l.bypass_entries;
  agg["store_buffers"] = l.store_buffers;
  agg["store_buffers_used"] = l.store_buffers_used;
  json malformed = json::object();
  for (size_t r = 0; r < dataplane::kNumMalformedReasons; ++r)
    malformed[dataplane::kMalformedText[r].name] = l.malformed[r];
  agg["malformed"] = std::move(malformed);
  j["aggregation"] = std::move(agg);
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

json JobMemberJson(const JobMemberSnapshot& m) {
  json j = {
      {"node", m.node},  {"mac", nullptr},        {"ip", nullptr},   {"udp_port", nullptr},
      {"port", nullptr}, {"port_index", nullptr}, {"vlan", nullptr}, {"ack_watermark", nullptr},
  };
  if (m.has_address) {
    j["mac"] = m.mac.ToString();
    j["ip"] = m.ip.ToString();
    j["udp_port"] = m.udp_port;
    j["port"] = m.port;
    j["port_index"] = m.port_index;
    j["vlan"] = m.vlan;
  }
  if (m.ack_watermark) j["ack_watermark"] = *m.ack_watermark;
  return j;
}

// The TAN as a job and the TAN route show it; address and port only for a remote one.
json TanStateJson(const JobTanSnapshot& tan) {
  const bool remote = tan.mode == "remote";
  return {
      {"mode", tan.mode},
      {"address", remote ? json(tan.address.ToString()) : json(nullptr)},
      {"port", remote ? json(tan.port) : json(nullptr)},
      {"resolved", tan.resolved},
  };
}

json JobObject(const JobSnapshot& job) {
  json members = json::array();
  for (const JobMemberSnapshot& m : job.learned_members) members.push_back(JobMemberJson(m));
  json counters = nullptr;
  if (job.counters) {
    counters = json::object();
    for (size_t c = 0; c < dataplane::kNumJobCounters; ++c) {
      counters[dataplane::kJobCounterText[c].name] = (*job.counters)[c];
    }
  }
  json j = {
      {"id", job.id},
      {"index", job.index},
      {"origin", job.origin},
      {"members", job.members},
      {"nodes", job.nodes},
      {"ordered", job.ordered},
      {"learned", job.learned},
      {"min_ack", nullptr},
      {"counters", std::move(counters)},
      {"learned_members", std::move(members)},
  };
  if (job.min_ack) j["min_ack"] = *job.min_ack;
  // The tree, under the config's key names.
  json switches = json::array();
  for (const JobChildSwitchSnapshot& child : job.switches) {
    switches.push_back({{"node", child.node}, {"covers", child.covers}});
  }
  json upstreams = json::array();
  for (const JobUpstreamSnapshot& up : job.upstreams) {
    upstreams.push_back({{"address", up.address.ToString()},
                         {"port", up.port},
                         {"node", up.node},
                         {"vlan", up.vlan},
                         {"resolved", up.resolved}});
  }
  j["node_ids"] = job.node_ids;
  j["switches"] = std::move(switches);
  // "upstream" as a job body gives it: the one parent; null at the root and
  // for a job that chooses among several ("upstreams").
  j["upstream"] = upstreams.size() == 1 ? upstreams[0] : json(nullptr);
  j["upstreams"] = std::move(upstreams);
  j["timeout_ms"] = job.timeout_ms ? json(*job.timeout_ms) : json(nullptr);
  j["trigger"] = job.batch ? "batch" : "incremental";
  j["tan"] = TanStateJson(job.tan);
  j["tan_member"] = job.tan_member ? json(*job.tan_member) : json(nullptr);
  j["parameter_server"] = job.parameter_server;
  j["verify"] = job.verify;
  j["main_server"] = job.main_server.empty() ? json(nullptr) : json(job.main_server);
  j["mode"] = job.mode;
  j["store"] = {{"buffers", job.store_buffers}, {"quota", job.store_quota}};
  j["placement"] = {{"first", job.slot_region_first},
                    {"size", job.slot_region_size},
                    {"base", job.slot_base},
                    {"span", job.slot_span},
                    {"policy", job.placed},
                    {"moved", job.moved ? json{{"cut", job.moved->cut},
                                               {"base", job.moved->base},
                                               {"span", job.slot_quota}}
                                        : json(nullptr)}};
  j["slot_quota"] = job.slot_quota;
  j["hold_quota"] = job.hold_quota;
  return j;
}

// A wire value's name ("float32", "sum"); the number itself for a value the
// protocol does not define (a worker only takes valid ones into a slot).
std::string DTypeText(uint8_t wire) {
  const std::optional<aggregator::DType> t = aggregator::DTypeFromWire(wire);
  return t ? std::string(aggregator::DTypeName(*t)) : std::to_string(wire);
}
std::string ReduceOpText(uint8_t wire) {
  const std::optional<aggregator::ReduceOp> op = aggregator::ReduceOpFromWire(wire);
  return op ? std::string(aggregator::ReduceOpName(*op)) : std::to_string(wire);
}

json SlotJson(const dataplane::SlotInfo& s) {
  return {
      {"lcore", s.lcore},
      {"index", s.index},
      {"state", s.complete ? "complete" : s.forwarded ? "forwarded" : "aggregating"},
      {"job", s.job_id},
      {"seq", s.seq},
      {"count", s.count},
      {"expected", s.expected},
      {"dtype", DTypeText(s.dtype)},
      {"op", ReduceOpText(s.op)},
      {"elem_count", s.elem_count},
      {"overflow", s.overflow},
      // Chunks complete in microseconds; seconds with microsecond resolution.
      {"age_seconds", RoundTo(s.age_seconds, 6)},
  };
}

// The slots of `dump` that belong to `job` (every slot without one), in dump
// order, at most `limit`. `*more`: more slots matched than were taken.
std::vector<const dataplane::SlotInfo*> SelectSlots(const dataplane::SlotDump& dump,
                                                    std::optional<uint32_t> job, size_t limit,
                                                    bool* more) {
  std::vector<const dataplane::SlotInfo*> out;
  *more = false;
  for (const dataplane::SlotInfo& s : dump.slots) {
    if (job && s.job_id != *job) continue;
    if (out.size() == limit) {
      *more = true;
      break;
    }
    out.push_back(&s);
  }
  return out;
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

HttpResponse ErrorResponse(const common::Status& status) {
  return JsonResponse(HttpStatusOf(status.code()), ErrorJson(status.message()));
}

HttpResponse MethodNotAllowed(std::string_view method, std::string_view path, std::string allow,
                              std::string_view hint) {
  HttpResponse r =
      JsonResponse(405, ErrorJson("method " + std::string(method) + " not allowed on " +
                                  std::string(path) + "; " + std::string(hint)));
  r.allow = std::move(allow);
  return r;
}

HttpResponse NoJobTable() {
  return JsonResponse(503, ErrorJson("this aggswitch serves no job table"));
}

// What a source without `slots` means.
common::Status AggregationOff() {
  return common::Unavailable(
      "aggregation is off on this aggswitch (its config has no aggregation: section)");
}

// Splits a query string into key=value pairs, percent-decodes both and calls
// `fn` with each; the first error (a broken escape, or `fn`'s) is returned.
common::Status ForEachQueryParam(
    std::string_view query,
    const std::function<common::Status(const std::string& key, const std::string& value)>& fn) {
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
    RETURN_IF_ERROR(fn(*key, *value));
  }
  return common::Status::Ok();
}

// GET and POST /api/v1/jobs.
HttpResponse JobsCollection(const ApiRequest& r, const DataSource& source) {
  if (r.method == "GET") {
    if (!source.jobs) return NoJobTable();
    common::Result<JobTableSnapshot> table = source.jobs();
    if (!table.ok()) return ErrorResponse(table.status());
    return JsonResponse(200, JobsJson(*table));
  }
  if (!source.add_job) return NoJobTable();
  common::Result<JobRequest> request = ParseJobRequest(r.body);
  if (!request.ok()) return ErrorResponse(request.status());
  common::Result<JobSnapshot> job = source.add_job(*request);
  if (!job.ok()) return ErrorResponse(job.status());
  return JsonResponse(201, JobJson(*job));
}

// GET and POST /api/v1/jobs/<id>/stragglers.
HttpResponse StragglersRoute(const ApiRequest& r, const DataSource& source) {
  if (!source.stragglers) return ErrorResponse(AggregationOff());
  common::Result<StragglerRequest> request =
      r.method == "GET" ? ParseStragglerQuery(r.query) : ParseStragglerBody(r.body);
  if (!request.ok()) return ErrorResponse(request.status());
  common::Result<StragglerReport> report = source.stragglers(r.job, *request);
  if (!report.ok()) return ErrorResponse(report.status());
  return JsonResponse(200, StragglerJson(*report));
}

// GET and POST /api/v1/jobs/<id>/tan.
HttpResponse TanRoute(const ApiRequest& r, const DataSource& source) {
  if (!source.tan) return ErrorResponse(AggregationOff());
  std::optional<TanRequest> request;
  if (r.method == "POST") {
    common::Result<TanRequest> parsed = ParseTanBody(r.body);
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    request = std::move(parsed).value();
  }
  common::Result<TanReport> report = source.tan(r.job, request);
  if (!report.ok()) return ErrorResponse(report.status());
  return JsonResponse(200, TanJson(*report));
}

// DELETE /api/v1/jobs/<id>/members/<node>: forgets the address the member
// is bound to; its next datagram binds it again.
HttpResponse MemberRoute(const ApiRequest& r, const DataSource& source) {
  const std::string_view node_text = r.node;
  const std::optional<uint32_t> node = ParseDecimal(node_text);
  if (!node || *node > config::kMaxNodeId) {
    return JsonResponse(400, ErrorJson("node must be a node id 0.." +
                                       std::to_string(config::kMaxNodeId) + ", got '" +
                                       std::string(node_text) + "'"));
  }
  if (!source.unbind_member) return NoJobTable();
  const common::Status status = source.unbind_member(r.job, static_cast<uint16_t>(*node));
  if (!status.ok()) return ErrorResponse(status);
  return {204, "", ""};
}

// GET and DELETE /api/v1/jobs/<id>.
HttpResponse JobRoute(const ApiRequest& r, const DataSource& source) {
  if (r.method == "DELETE") {
    if (!source.remove_job) return NoJobTable();
    const common::Status status = source.remove_job(r.job);
    if (!status.ok()) return ErrorResponse(status);
    return {204, "", ""};
  }
  if (!source.jobs) return NoJobTable();
  common::Result<JobTableSnapshot> table = source.jobs();
  if (!table.ok()) return ErrorResponse(table.status());
  for (const JobSnapshot& job : table->jobs) {
    if (job.id != r.job) continue;
    // The job's slots come from a dump of every job's: the workers copy
    // slots without looking at their job. A failed dump still shows the job.
    const common::Result<dataplane::SlotDump> dump =
        source.slots ? source.slots(kMaxSlotLimit)
                     : common::Result<dataplane::SlotDump>(AggregationOff());
    return JsonResponse(200, JobDetailJson(job, dump));
  }
  return JsonResponse(404, ErrorJson("job " + std::to_string(r.job) + " does not exist"));
}

// GET /api/v1/slots.
HttpResponse SlotsRoute(const ApiRequest& r, const DataSource& source) {
  common::Result<SlotQuery> slot_query = ParseSlotQuery(r.query);
  if (!slot_query.ok()) return ErrorResponse(slot_query.status());
  if (!source.slots) return ErrorResponse(AggregationOff());
  // With a job filter the limit applies after filtering, so the dump takes
  // everything it may.
  common::Result<dataplane::SlotDump> dump =
      source.slots(slot_query->job ? kMaxSlotLimit : slot_query->limit);
  if (!dump.ok()) return ErrorResponse(dump.status());
  return JsonResponse(200, SlotsJson(*dump, *slot_query));
}

// An unsigned JSON integer within [min, max], or an error naming `field`.
common::Result<uint64_t> JsonUnsigned(const json& v, std::string_view field, uint64_t min,
                                      uint64_t max) {
  const std::string range = std::to_string(min) + ".." + std::to_string(max);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return common::InvalidArgument(std::string(field) + " must be an integer " + range + ", got " +
                                   Preview(v));
  }
  const uint64_t value = v.get<uint64_t>();
  if (value < min || value > max) {
    return common::InvalidArgument(std::string(field) + " must be " + range + ", got " +
                                   std::to_string(value));
  }
  return value;
}

// A JSON true or false, or an error naming `field`.
common::Result<bool> JsonBool(const json& v, std::string_view field) {
  if (!v.is_boolean()) {
    return common::InvalidArgument(std::string(field) + " must be true or false, got " +
                                   Preview(v));
  }
  return v.get<bool>();
}

// A job key: an unsigned JSON integer, or a string of decimal digits or "0x"
// and 1..16 hex digits (JSON numbers above 2^53 lose precision in many clients).
common::Result<uint64_t> JsonJobKey(const json& v) {
  const common::Status bad = common::InvalidArgument(
      "key must be an unsigned 64-bit integer or a \"0x...\" hex string of 1..16 digits, got " +
      Preview(v));
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<uint64_t>();
  if (!v.is_string()) return bad;
  const std::string& text = v.get_ref<const std::string&>();
  const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const char* first = text.data() + (hex ? 2 : 0);
  const char* last = text.data() + text.size();
  uint64_t value = 0;
  auto [next, ec] = std::from_chars(first, last, value, hex ? 16 : 10);
  if (text.empty() || ec != std::errc() || next != last || (hex && last - first > 16)) return bad;
  return value;
}

// A 500 response naming the exception, or a fixed body when even that fails.
HttpResponse InternalError(const char* what) {
  try {
    return JsonResponse(500, ErrorJson(std::string("internal error: ") + what));
  } catch (const std::exception&) {
    return {500, kJsonContentType, "{\"error\":\"internal error\"}\n"};
  }
}

HttpResponse MetricsRoute(const ApiRequest&, const DataSource& source) {
  return {200, common::kPrometheusContentType, RenderPrometheus(source.snapshot())};
}
HttpResponse PortsRoute(const ApiRequest&, const DataSource& source) {
  return JsonResponse(200, PortsJson(source.snapshot()));
}
HttpResponse LcoresRoute(const ApiRequest&, const DataSource& source) {
  return JsonResponse(200, LcoresJson(source.snapshot()));
}
HttpResponse StatsRoute(const ApiRequest&, const DataSource& source) {
  return JsonResponse(200, StatsJson(source.snapshot()));
}
HttpResponse BypassRoute(const ApiRequest& r, const DataSource& source) {
  common::Result<SlotQuery> bypass_query = ParseBypassQuery(r.query);
  if (!bypass_query.ok()) return ErrorResponse(bypass_query.status());
  if (!source.bypass) return ErrorResponse(AggregationOff());
  common::Result<dataplane::BypassDump> dump =
      source.bypass(bypass_query->job ? kMaxSlotLimit : bypass_query->limit);
  if (!dump.ok()) return ErrorResponse(dump.status());
  return JsonResponse(200, BypassJson(*dump, *bypass_query));
}
HttpResponse MacRoute(const ApiRequest& r, const DataSource& source) {
  common::Result<MacQuery> mac_query = ParseMacQuery(r.query);
  if (!mac_query.ok()) return JsonResponse(400, ErrorJson(mac_query.status().message()));
  common::Result<std::string> body = MacJson(source.snapshot(), source.mac_entries(), *mac_query);
  if (!body.ok()) return JsonResponse(400, ErrorJson(body.status().message()));
  return JsonResponse(200, std::move(body).value());
}

}  // namespace

common::Result<MacQuery> ParseMacQuery(std::string_view query) {
  MacQuery out;
  RETURN_IF_ERROR(ForEachQueryParam(query, [&](const std::string& key, const std::string& value) {
    if (key == "vlan") {
      const std::optional<uint32_t> vlan = ParseDecimal(value);
      if (!vlan || *vlan < config::kMinVlan || *vlan > config::kMaxVlan) {
        return common::InvalidArgument("vlan must be a number from 1 to 4094, got '" + value + "'");
      }
      out.vlan = static_cast<uint16_t>(*vlan);
    } else if (key == "port") {
      if (value.empty()) return common::InvalidArgument("port must name a port, got ''");
      out.port = value;
    } else {
      return common::InvalidArgument("unknown query parameter '" + key +
                                     "'; expected vlan or port");
    }
    return common::Status::Ok();
  }));
  return out;
}

common::Result<SlotQuery> ParseSlotQuery(std::string_view query) {
  SlotQuery out;
  RETURN_IF_ERROR(ForEachQueryParam(query, [&](const std::string& key, const std::string& value) {
    if (key == "limit") {
      const std::optional<uint32_t> limit = ParseDecimal(value);
      if (!limit || *limit < 1 || *limit > kMaxSlotLimit) {
        return common::InvalidArgument("limit must be a number from 1 to " +
                                       std::to_string(kMaxSlotLimit) + ", got '" + value + "'");
      }
      out.limit = *limit;
    } else if (key == "job") {
      const std::optional<uint32_t> job = ParseDecimal(value);
      if (!job || *job == 0) {
        return common::InvalidArgument("job must be a job id from 1 to 4294967295, got '" + value +
                                       "'");
      }
      out.job = *job;
    } else {
      return common::InvalidArgument("unknown query parameter '" + key +
                                     "'; expected limit or job");
    }
    return common::Status::Ok();
  }));
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
  json pools = json::array();
  for (const PoolSnapshot& p : snap.pools) {
    pools.push_back({{"name", p.name}, {"capacity", p.capacity}, {"available", p.available}});
  }
  json http = nullptr;
  if (snap.http) {
    json refused = json::object();
    for (size_t r = 0; r < common::kNumRefusals; ++r) {
      refused[common::kRefusalText[r].label] = snap.http->refused[r];
    }
    http = {{"threads", snap.http->threads}, {"refused", std::move(refused)}};
  }
  // The spare slots and the jobs moved (docs/aggregation.md, "Collisions",
  // "Moves"); null without aggregation.
  json aggregation = nullptr;
  if (snap.aggregation) {
    const dataplane::EscalationStats& s = snap.aggregation->spare;
    aggregation = {{"spare_slots",
                    {{"slots", s.slots},
                     {"leased", s.leased},
                     {"relocations", s.granted},
                     {"refused", s.refused}}},
                   {"job_moves", s.moves}};
  }
  return Dump({
      {"build", {{"version", snap.build.version}, {"dpdk_version", snap.build.dpdk_version}}},
      {"process",
       {{"pid", snap.process.pid},
        {"start_time_seconds", RoundTo(snap.process.start_time_seconds, 2)},
        {"resident_memory_bytes", snap.process.resident_memory_bytes}}},
      {"pools", std::move(pools)},
      {"http", std::move(http)},
      {"tsc_hz", snap.tsc_hz},
      {"totals",
       {{"rx_packets", rx},
        {"tx_packets", tx},
        {"flooded_packets", flooded},
        {"dropped_packets", dropped}}},
      {"ports", std::move(ports)},
      {"lcores", std::move(lcores)},
      {"mac_table", MacTableJson(snap.mac_table)},
      {"aggregation", std::move(aggregation)},
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

std::string JobsJson(const JobTableSnapshot& table) {
  json jobs = json::array();
  for (const JobSnapshot& job : table.jobs) jobs.push_back(JobObject(job));
  uint64_t in_band = 0;
  for (const JobSnapshot& job : table.jobs) in_band += job.origin == "in-band";
  return Dump({
      {"capacity", table.capacity},
      {"max_fan_in", table.max_fan_in},
      {"in_band_registration", table.in_band_registration},
      {"in_band",
       {{"jobs", in_band},
        {"capacity", table.in_band_capacity},
        {"expired", table.in_band_expired},
        {"displaced", table.in_band_displaced}}},
      {"count", table.jobs.size()},
      {"jobs", std::move(jobs)},
  });
}

std::string JobJson(const JobSnapshot& job) {
  return Dump(JobObject(job));
}

std::string JobDetailJson(const JobSnapshot& job, const common::Result<dataplane::SlotDump>& dump) {
  json j = JobObject(job);
  j["slots"] = nullptr;
  j["slots_truncated"] = false;
  j["slots_error"] = nullptr;
  if (dump.ok()) {
    bool more = false;
    json slots = json::array();
    for (const dataplane::SlotInfo* s : SelectSlots(*dump, job.id, kDefaultSlotLimit, &more)) {
      slots.push_back(SlotJson(*s));
    }
    j["slots"] = std::move(slots);
    // A truncated dump may have left out some of this job's slots.
    j["slots_truncated"] = more || dump->truncated;
  } else {
    j["slots_error"] = dump.status().message();
  }
  return Dump(j);
}

std::string SlotsJson(const dataplane::SlotDump& dump, const SlotQuery& query) {
  bool more = false;
  const std::vector<const dataplane::SlotInfo*> slots =
      SelectSlots(dump, query.job, query.limit, &more);
  json filter = {{"job", nullptr}, {"limit", query.limit}};
  if (query.job) filter["job"] = *query.job;
  // Written slot by slot, like the MAC entries: up to kMaxSlotLimit of them.
  std::string out = "{\"busy\":" + std::to_string(dump.busy) +
                    ",\"truncated\":" + (more || dump.truncated ? "true" : "false") +
                    ",\"filter\":" + DumpCompact(filter) +
                    ",\"count\":" + std::to_string(slots.size()) + ",\"slots\":[";
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i > 0) out += ',';
    out += DumpCompact(SlotJson(*slots[i]));
  }
  out += "]}\n";
  return out;
}

namespace {

// "node_ids[3]".
std::string Index(std::string_view base, size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

// The key path of `key` below `base` ("" at the top).
std::string KeyPath(std::string_view base, std::string_view key) {
  return base.empty() ? std::string(key) : std::string(base) + "." + std::string(key);
}

common::Status UnknownField(const std::string& path, std::string_view expected) {
  return common::InvalidArgument("unknown field \"" + path + "\"; expected " +
                                 std::string(expected));
}

// An object, or an error saying which one was expected.
common::Status ExpectObject(const json& v, const std::string& path, std::string_view shape) {
  if (v.is_object()) return common::Status::Ok();
  return common::InvalidArgument(path + " must be an object " + std::string(shape) + ", got " +
                                 Preview(v));
}

// "a.b.c.d"; whether it may be used (unicast, not this switch's) is
// Validate()'s to say, as for the config.
common::Result<common::Ipv4Addr> JsonIpv4(const json& v, const std::string& path) {
  const std::optional<common::Ipv4Addr> ip =
      v.is_string() ? common::Ipv4Addr::Parse(v.get_ref<const std::string&>()) : std::nullopt;
  if (!ip) {
    return common::InvalidArgument(path + " must be an IPv4 address \"a.b.c.d\", got " +
                                   Preview(v));
  }
  return *ip;
}

common::Result<uint16_t> JsonNodeId(const json& v, const std::string& path) {
  ASSIGN_OR_RETURN(const uint64_t id, JsonUnsigned(v, path, 0, config::kMaxNodeId));
  return static_cast<uint16_t>(id);
}


// One item of a node id list: a number, or a string "N" or "A-B" (A <= B).
std::optional<std::pair<uint16_t, uint16_t>> NodeIdItem(const json& item) {
  if (item.is_number_unsigned() || (item.is_number_integer() && item.get<int64_t>() >= 0)) {
    const uint64_t id = item.get<uint64_t>();
    if (id > config::kMaxNodeId) return std::nullopt;
    return std::pair{static_cast<uint16_t>(id), static_cast<uint16_t>(id)};
  }
  if (!item.is_string()) return std::nullopt;
  const std::string_view text = item.get_ref<const std::string&>();
  const size_t dash = text.find('-');
  const std::optional<uint32_t> first = ParseDecimal(text.substr(0, dash));
  const std::optional<uint32_t> last =
      dash == std::string_view::npos ? first : ParseDecimal(text.substr(dash + 1));
  if (!first || !last || *first > *last || *last > config::kMaxNodeId) return std::nullopt;
  return std::pair{static_cast<uint16_t>(*first), static_cast<uint16_t>(*last)};
}

// A node id list (node_ids, covers): numbers and "a-b" ranges, expanded into
// `out`. As in the config, an item's key path indexes the expanded list (in
// ["0-3", 8], 8 is [4]). `listed` counts the ids of every list of the body.
common::Status ParseNodeIds(const json& v, const std::string& path, std::vector<uint16_t>& out,
                            size_t& listed) {
  if (!v.is_array()) {
    return common::InvalidArgument(
        path + " must be a list of node ids (numbers or \"a-b\" ranges), got " + Preview(v));
  }
  for (const json& item : v) {
    const std::string item_path = Index(path, out.size());
    const std::optional<std::pair<uint16_t, uint16_t>> range = NodeIdItem(item);
    if (!range) {
      return common::InvalidArgument(
          item_path + " must be a node id 0.." + std::to_string(config::kMaxNodeId) +
          " or a range \"a-b\" of them (a <= b), got " + Preview(item));
    }
    const size_t count = size_t{range->second} - range->first + 1;
    if (listed + count > config::kMaxJobListedNodeIds) {
      return common::InvalidArgument(
          item_path + " brings the node ids listed above " + std::to_string(config::kMaxJobListedNodeIds) +
          ": a job's members and the nodes below its child switches are distinct ids 0.." +
          std::to_string(config::kMaxNodeId));
    }
    listed += count;
    for (uint32_t id = range->first; id <= range->second; ++id) {
      out.push_back(static_cast<uint16_t>(id));
    }
  }
  return common::Status::Ok();
}

constexpr std::pair<config::TanStrategy, std::string_view> kTanStrategies[] = {
    {config::TanStrategy::kFixed, "fixed"},
    {config::TanStrategy::kRandom, "random"},
    {config::TanStrategy::kLeastLoad, "least_load"},
    {config::TanStrategy::kFewestHops, "fewest_hops"},
    {config::TanStrategy::kSelf, "self"},
};

std::string_view TanStrategyName(config::TanStrategy strategy) {
  for (const auto& [s, name] : kTanStrategies) {
    if (s == strategy) return name;
  }
  return "?";
}

// candidates[k]: {"address", "port" (default 47000), "hops" (default 0)}.
common::Result<config::TanCandidate> ParseTanCandidate(const json& v, const std::string& path) {
  RETURN_IF_ERROR(ExpectObject(v, path, "{address, port, hops}"));
  config::TanCandidate c;
  bool has_address = false;
  for (const auto& [key, value] : v.items()) {
    const std::string key_path = KeyPath(path, key);
    if (key == "address") {
      ASSIGN_OR_RETURN(c.address, JsonIpv4(value, key_path));
      has_address = true;
    } else if (key == "port") {
      ASSIGN_OR_RETURN(const uint64_t port, JsonUnsigned(value, key_path, 1, 65535));
      c.port = static_cast<uint16_t>(port);
    } else if (key == "hops") {
      ASSIGN_OR_RETURN(const uint64_t hops, JsonUnsigned(value, key_path, 0, config::kMaxTanHops));
      c.hops = static_cast<uint16_t>(hops);
    } else {
      return UnknownField(key_path, "address, port, hops");
    }
  }
  if (!has_address) return common::InvalidArgument("missing field \"" + path + ".address\"");
  return c;
}

// Reads `key` of a TAN choice, "strategy" or "candidates", at `path` into
// `tan`. False when `key` is neither.
common::Result<bool> ReadTanKey(const std::string& key, const json& v, const std::string& path,
                                config::TanConfig& tan) {
  if (key == "strategy") {
    const std::string name = v.is_string() ? v.get<std::string>() : "";
    for (const auto& [strategy, strategy_name] : kTanStrategies) {
      if (strategy_name != name) continue;
      tan.strategy = strategy;
      return true;
    }
    return common::InvalidArgument(
        path + " must be fixed, random, least_load, fewest_hops or self, got " + Preview(v));
  }
  if (key == "candidates") {
    if (!v.is_array()) {
      return common::InvalidArgument(path + " must be a list of {address, port, hops}, got " +
                                     Preview(v));
    }
    tan.candidates.clear();
    for (size_t k = 0; k < v.size(); ++k) {
      ASSIGN_OR_RETURN(config::TanCandidate c, ParseTanCandidate(v[k], Index(path, k)));
      tan.candidates.push_back(c);
    }
    return true;
  }
  return false;
}

// upstream: {"address", "port" (default 47000), "node", "vlan" (default 0)}.
common::Result<config::UpstreamConfig> ParseUpstream(const json& v) {
  RETURN_IF_ERROR(ExpectObject(v, "upstream", "{address, port, node, vlan}"));
  config::UpstreamConfig up;
  bool has_address = false, has_node = false;
  for (const auto& [key, value] : v.items()) {
    const std::string key_path = KeyPath("upstream", key);
    if (key == "address") {
      ASSIGN_OR_RETURN(up.address, JsonIpv4(value, key_path));
      has_address = true;
    } else if (key == "port") {
      ASSIGN_OR_RETURN(const uint64_t port, JsonUnsigned(value, key_path, 1, 65535));
      up.port = static_cast<uint16_t>(port);
    } else if (key == "node") {
      ASSIGN_OR_RETURN(up.node, JsonNodeId(value, key_path));
      has_node = true;
    } else if (key == "vlan") {
      ASSIGN_OR_RETURN(const uint64_t vlan, JsonUnsigned(value, key_path, 0, config::kMaxVlan));
      up.vlan = static_cast<uint16_t>(vlan);
    } else {
      return UnknownField(key_path, "address, port, node, vlan");
    }
  }
  if (!has_address) return common::InvalidArgument("missing field \"upstream.address\"");
  if (!has_node) {
    return common::InvalidArgument(
        "missing field \"upstream.node\" (this switch's node id at the parent switch)");
  }
  return up;
}

// switches[j]: {"node", "covers" (default none)}.
common::Result<config::ChildSwitchConfig> ParseChildSwitch(const json& v, const std::string& path,
                                                           size_t& listed) {
  RETURN_IF_ERROR(ExpectObject(v, path, "{node, covers}"));
  config::ChildSwitchConfig child;
  bool has_node = false;
  for (const auto& [key, value] : v.items()) {
    const std::string key_path = KeyPath(path, key);
    if (key == "node") {
      ASSIGN_OR_RETURN(child.node, JsonNodeId(value, key_path));
      has_node = true;
    } else if (key == "covers") {
      RETURN_IF_ERROR(ParseNodeIds(value, key_path, child.covers, listed));
    } else {
      return UnknownField(key_path, "node, covers");
    }
  }
  if (!has_node) return common::InvalidArgument("missing field \"" + path + ".node\"");
  return child;
}

// How deep a request body may nest lists and objects. The deepest valid
// body, a job with a tree, nests 4 levels ({"switches": [{"covers": [..]}]});
// the bound keeps every later step (dump(), copies, destruction, which all
// recurse per level) far inside a request thread's stack.
constexpr size_t kMaxBodyDepth = 16;
// What an error message quotes of the JSON parser's own text at most.
constexpr size_t kMaxParserMessage = 160;

// The nesting depth of `body` if it were JSON, scanned without recursion:
// brackets outside strings. Stops counting past `limit`.
size_t NestingDepth(std::string_view body, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A POST body: a JSON object, nested at most kMaxBodyDepth deep, its numbers
// in range. `shape` says what the route expects. InvalidArgument otherwise;
// never throws.
common::Result<json> ParseBodyObject(std::string_view body, std::string_view shape) {
  if (NestingDepth(body, kMaxBodyDepth) > kMaxBodyDepth) {
    return common::InvalidArgument("the body nests lists and objects more than " +
                                   std::to_string(kMaxBodyDepth) + " levels deep; expected " +
                                   std::string(shape));
  }
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // parse_error, or out_of_range for a number no double holds (1e999).
    std::string what = e.what();
    if (what.size() > kMaxParserMessage) what = what.substr(0, kMaxParserMessage) + "...";
    return common::InvalidArgument("the body is not valid JSON (expected " + std::string(shape) +
                                   "): " + what);
  }
  if (!j.is_object()) {
    return common::InvalidArgument("the body must be a JSON object " + std::string(shape) +
                                   ", got " + Preview(j));
  }
  return j;
}

constexpr char kJobFields[] =
    "id, key, members, nodes, ordered, node_ids, switches, upstream, timeout_ms, trigger, tan, "
    "tan_member, parameter_server, verify, placement_hint, main_server, mode";

}  // namespace

common::Result<JobRequest> ParseJobRequest(std::string_view body) {
  constexpr char kShape[] = "{\"id\", \"key\", \"members\" or \"node_ids\"/\"switches\", ...}";
  ASSIGN_OR_RETURN(const json j, ParseBodyObject(body, kShape));
  JobRequest request;
  request.body = j.dump();
  config::AggregationJobConfig& job = request.job;
  bool has_id = false, has_key = false, has_members = false, has_lists = false;
  size_t listed = 0;  // node ids in node_ids and every covers list
  for (const auto& [name, value] : j.items()) {
    if (name == "id") {
      ASSIGN_OR_RETURN(const uint64_t id, JsonUnsigned(value, "id", 1, 4294967295u));
      job.id = static_cast<uint32_t>(id);
      has_id = true;
    } else if (name == "key") {
      ASSIGN_OR_RETURN(job.key, JsonJobKey(value));
      has_key = true;
    } else if (name == "members") {
      ASSIGN_OR_RETURN(const uint64_t members, JsonUnsigned(value, "members", 1, 65535));
      job.members = static_cast<uint16_t>(members);
      has_members = true;
    } else if (name == "nodes") {
      ASSIGN_OR_RETURN(const uint64_t nodes, JsonUnsigned(value, "nodes", 1, 65535));
      job.nodes = static_cast<uint16_t>(nodes);
    } else if (name == "ordered") {
      ASSIGN_OR_RETURN(job.ordered, JsonBool(value, "ordered"));
    } else if (name == "node_ids") {
      RETURN_IF_ERROR(ParseNodeIds(value, "node_ids", job.node_ids, listed));
      has_lists = true;
    } else if (name == "switches") {
      if (!value.is_array()) {
        return common::InvalidArgument("switches must be a list of {node, covers}, got " +
                                       Preview(value));
      }
      for (size_t k = 0; k < value.size(); ++k) {
        ASSIGN_OR_RETURN(config::ChildSwitchConfig child,
                         ParseChildSwitch(value[k], Index("switches", k), listed));
        job.switches.push_back(std::move(child));
      }
      has_lists = true;
    } else if (name == "upstream") {
      ASSIGN_OR_RETURN(job.upstream, ParseUpstream(value));
    } else if (name == "timeout_ms") {
      ASSIGN_OR_RETURN(const uint64_t ms,
                       JsonUnsigned(value, "timeout_ms", 0, config::kMaxTimeoutMs));
      job.timeout_ms = static_cast<uint32_t>(ms);
    } else if (name == "trigger") {
      const std::string trigger = value.is_string() ? value.get<std::string>() : "";
      if (trigger != "incremental" && trigger != "batch") {
        return common::InvalidArgument("trigger must be \"incremental\" or \"batch\", got " +
                                       Preview(value));
      }
      job.trigger =
          trigger == "batch" ? config::AggTrigger::kBatch : config::AggTrigger::kIncremental;
    } else if (name == "tan") {
      RETURN_IF_ERROR(ExpectObject(value, "tan", "{strategy, candidates}"));
      config::TanConfig& tan = job.tan.emplace();
      for (const auto& [key, v] : value.items()) {
        ASSIGN_OR_RETURN(const bool known, ReadTanKey(key, v, KeyPath("tan", key), tan));
        if (!known) return UnknownField(KeyPath("tan", key), "strategy, candidates");
      }
      // A strategy without candidates is reported there, as the loader would.
      request.keys.push_back("tan.candidates");
    } else if (name == "tan_member") {
      ASSIGN_OR_RETURN(job.tan_member, JsonNodeId(value, "tan_member"));
    } else if (name == "parameter_server") {
      // Validate() checks the rest: a root job, with a remote TAN.
      ASSIGN_OR_RETURN(job.parameter_server, JsonBool(value, "parameter_server"));
    } else if (name == "verify") {
      // Validate() checks the rest, as for parameter_server.
      ASSIGN_OR_RETURN(job.verify, JsonBool(value, "verify"));
    } else if (name == "placement_hint") {
      // Validate() checks it against the region's size.
      ASSIGN_OR_RETURN(const uint64_t hint, JsonUnsigned(value, "placement_hint", 0, 4294967295u));
      job.placement_hint = static_cast<uint32_t>(hint);
    } else if (name == "main_server") {
      std::optional<common::Ipv4Endpoint> at;
      if (value.is_string()) {
        at = common::Ipv4Endpoint::ParsePortOptional(value.get_ref<const std::string&>());
      }
      if (!at || at->ip.addr == 0) {
        return common::InvalidArgument("main_server must be \"a.b.c.d\" or \"a.b.c.d:port\", got " +
                                       Preview(value));
      }
      job.main_server = *at;
    } else if (name == "mode") {
      const std::string text = value.is_string() ? value.get<std::string>() : std::string();
      if (text == "aggregate") {
        job.mode = config::JobMode::kAggregate;
      } else if (text == "store") {
        job.mode = config::JobMode::kStore;
      } else if (text == "both") {
        job.mode = config::JobMode::kBoth;
      } else {
        return common::InvalidArgument("mode must be \"aggregate\", \"store\" or \"both\", got " +
                                       Preview(value));
      }
    } else {
      return UnknownField(name, kJobFields);
    }
  }
  if (!has_id) return common::InvalidArgument("missing field \"id\"");
  if (!has_key) return common::InvalidArgument("missing field \"key\"");
  if (has_members) request.keys.push_back("members");
  if (j.contains("node_ids")) request.keys.push_back("node_ids");
  if (j.contains("switches")) request.keys.push_back("switches");
  if (has_lists) {
    // The lists count the members; a members key must agree (Validate()).
    if (!has_members) {
      const size_t listed_members = job.node_ids.size() + job.switches.size();
      job.members = static_cast<uint16_t>(std::min<size_t>(listed_members, UINT16_MAX));
    }
  } else if (!has_members) {
    return common::InvalidArgument(
        "missing field \"members\" (or the members' node ids in \"node_ids\" and \"switches\")");
  }
  return request;
}

common::Result<TanRequest> ParseTanBody(std::string_view body) {
  constexpr char kShape[] = "{\"strategy\", \"candidates\"} and/or {\"member\"}";
  ASSIGN_OR_RETURN(const json j, ParseBodyObject(body, kShape));
  TanRequest r;
  config::TanConfig choice;  // strategy fixed unless the body says otherwise, as in the config
  bool has_choice = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "member") {
      r.set_member = true;
      if (!v.is_null()) {
        ASSIGN_OR_RETURN(const uint64_t node, JsonUnsigned(v, "member", 0, config::kMaxNodeId));
        r.member = static_cast<uint16_t>(node);
      }
      continue;
    }
    ASSIGN_OR_RETURN(const bool known, ReadTanKey(key, v, key, choice));
    if (!known) return UnknownField(key, "strategy, candidates, member");
    has_choice = true;
  }
  if (has_choice) r.choice = std::move(choice);
  if (!r.choice && !r.set_member) {
    return common::InvalidArgument(std::string("the body must choose the TAN or its member: ") +
                                   kShape);
  }
  return r;
}

namespace {

// A TAN choice's "strategy" and "candidates", as ReadTanKey reads them.
json TanChoiceJson(const config::TanConfig& tan) {
  json candidates = json::array();
  for (const config::TanCandidate& c : tan.candidates) {
    candidates.push_back({{"address", c.address.ToString()}, {"port", c.port}, {"hops", c.hops}});
  }
  return {{"strategy", TanStrategyName(tan.strategy)}, {"candidates", std::move(candidates)}};
}

}  // namespace

std::string TanJson(const TanReport& report) {
  json j = {{"job", report.job}, {"root", report.root}};
  j.update(TanStateJson(report.tan));
  j["member"] = report.member ? json(*report.member) : json(nullptr);
  j["chosen_by"] = nullptr;
  j["strategy"] = nullptr;
  j["candidates"] = json::array();
  if (report.chosen) {
    j["chosen_by"] = report.chosen->source == TanReport::Source::kApi ? "api" : "config";
    j.update(TanChoiceJson(report.chosen->tan));
  }
  return Dump(j);
}

common::Result<std::string> SavedJobWithTan(std::string_view body, const TanRequest& request) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return common::InvalidArgument("the saved request is not a JSON object: " +
                                   std::string(body.substr(0, 80)));
  }
  if (request.choice) j["tan"] = TanChoiceJson(*request.choice);
  if (request.set_member) {
    if (request.member) {
      j["tan_member"] = *request.member;
    } else {
      j.erase("tan_member");
    }
  }
  return DumpCompact(j);
}

int HttpStatusOf(common::StatusCode code) {
  switch (code) {
    case common::StatusCode::kOk:
      return 200;
    case common::StatusCode::kInvalidArgument:
    case common::StatusCode::kOutOfRange:
      return 400;
    case common::StatusCode::kNotFound:
      return 404;
    case common::StatusCode::kAlreadyExists:
    case common::StatusCode::kFailedPrecondition:
      return 409;
    case common::StatusCode::kResourceExhausted:
      return 507;
    case common::StatusCode::kUnavailable:
    case common::StatusCode::kIncomplete:
      return 503;
    case common::StatusCode::kInternal:
      return 500;
  }
  return 500;
}

namespace {

common::Status CheckStragglerRequest(const StragglerRequest& r) {
  if (r.clear) {
    if (r.top || r.over_s || r.apply) {
      return common::InvalidArgument("clear takes no top, over or apply");
    }
    return common::Status::Ok();
  }
  if (r.top.has_value() == r.over_s.has_value()) {
    return common::InvalidArgument("give exactly one rule: top=N or over=SECONDS");
  }
  if (r.top && *r.top == 0) return common::InvalidArgument("top must be at least 1, got 0");
  if (r.over_s && !(*r.over_s >= 0)) return common::InvalidArgument("over must be 0 or more seconds");
  return common::Status::Ok();
}

}  // namespace

common::Result<StragglerRequest> ParseStragglerQuery(std::string_view query) {
  StragglerRequest r;
  RETURN_IF_ERROR(ForEachQueryParam(query, [&](const std::string& key, const std::string& value) {
    if (key == "top" || key == "ops") {
      const std::optional<uint32_t> n = ParseDecimal(value);
      if (!n) return common::InvalidArgument(key + " must be a non-negative integer, got '" + value + "'");
      if (key == "top") r.top = *n; else r.operations = *n;
      return common::Status::Ok();
    }
    if (key == "over") {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || end != value.c_str() + value.size()) {
        return common::InvalidArgument("over must be a number of seconds, got '" + value + "'");
      }
      r.over_s = v;
      return common::Status::Ok();
    }
    return common::InvalidArgument("unknown query parameter '" + key + "' (top, over, ops)");
  }));
  RETURN_IF_ERROR(CheckStragglerRequest(r));
  return r;
}

common::Result<StragglerRequest> ParseStragglerBody(std::string_view body) {
  ASSIGN_OR_RETURN(const json j, ParseBodyObject(body, "{top|over, ops, max_excluded, apply, clear}"));
  StragglerRequest r;
  for (const auto& [key, v] : j.items()) {
    if (key == "top") {
      ASSIGN_OR_RETURN(const uint64_t n, JsonUnsigned(v, "top", 1, 65535));
      r.top = static_cast<uint32_t>(n);
    } else if (key == "ops") {
      ASSIGN_OR_RETURN(const uint64_t n, JsonUnsigned(v, "ops", 0, 1000000));
      r.operations = static_cast<uint32_t>(n);
    } else if (key == "over") {
      if (!v.is_number()) return common::InvalidArgument("over must be a number of seconds, got " + Preview(v));
      r.over_s = v.get<double>();
    } else if (key == "max_excluded") {
      ASSIGN_OR_RETURN(const uint64_t n, JsonUnsigned(v, "max_excluded", 1, 255));
      r.max_excluded = static_cast<uint32_t>(n);
    } else if (key == "apply" || key == "clear") {
      ASSIGN_OR_RETURN((key == "apply" ? r.apply : r.clear), JsonBool(v, key));
    } else {
      return common::InvalidArgument(
          "unknown field '" + key + "' (top, over, ops, max_excluded, apply, clear)");
    }
  }
  RETURN_IF_ERROR(CheckStragglerRequest(r));
  return r;
}

common::Result<SlotQuery> ParseBypassQuery(std::string_view query) { return ParseSlotQuery(query); }

std::string BypassJson(const dataplane::BypassDump& dump, const SlotQuery& query) {
  json entries = json::array();
  bool truncated = dump.truncated;
  for (const dataplane::BypassInfo& e : dump.entries) {
    if (query.job && e.job_id != *query.job) continue;
    if (entries.size() == query.limit) {
      truncated = true;
      break;
    }
    entries.push_back({{"lcore", e.lcore},
                       {"job", e.job_id},
                       {"seq", e.seq},
                       {"node", e.node},
                       {"ttl_seconds", e.ttl_seconds}});
  }
  json filter = {{"limit", query.limit}};
  filter["job"] = query.job ? json(*query.job) : json(nullptr);
  const size_t count = entries.size();
  return Dump({{"live", dump.live},
               {"truncated", truncated},
               {"filter", std::move(filter)},
               {"count", count},
               {"entries", std::move(entries)}});
}

std::string StragglerJson(const StragglerReport& report) {
  json predicted = json::array();
  for (const StragglerReport::Member& m : report.predicted) {
    predicted.push_back({{"node", m.node}, {"offset_seconds", m.offset_s}});
  }
  return Dump({{"job", report.job},
               {"operations", report.operations},
               {"predicted", std::move(predicted)},
               {"excluded", report.excluded}});
}

namespace {

constexpr char kWatchFields[] = "name, vlan, src, dst, port, job, sample, instructions";

const char* InstructionsName(config::IntInstructions set) {
  switch (set) {
    case config::IntInstructions::kLatency:
      return "latency";
    case config::IntInstructions::kBandwidth:
      return "bandwidth";
    case config::IntInstructions::kBoth:
      return "both";
  }
  return "latency";
}

json WatchEntryJson(const config::WatchEntry& w) {
  return {{"name", w.name},
          {"vlan", w.vlan == 0 ? json() : json(w.vlan)},
          {"src", w.src ? json(w.src->ToString()) : json()},
          {"dst", w.dst ? json(w.dst->ToString()) : json()},
          {"port", w.port == 0 ? json() : json(w.port)},
          {"job", w.job ? json(*w.job) : json()},
          {"sample", w.sample},
          {"instructions", InstructionsName(w.instructions)}};
}

std::string IntJson(const IntSnapshot& t) {
  json watch = json::array();
  for (const config::WatchEntry& w : t.watch) watch.push_back(WatchEntryJson(w));
  json counters = json::object();
#define AGG_INT_JSON(name, help) counters[#name] = t.name;
  AGG_INT_COUNTERS(AGG_INT_JSON)
#undef AGG_INT_JSON
  return Dump({{"node_id", t.node_id},
               {"int_port", t.int_port},
               {"max_hops", t.max_hops},
               {"collector", t.collector.empty() ? json() : json(t.collector)},
               {"fabric_ports", t.fabric_ports},
               {"watch", std::move(watch)},
               {"counters", std::move(counters)},
               {"reports", {{"sent", t.reports_sent},
                            {"dropped", {{"ring_full", t.records_lost},
                                         {"send_failed", t.send_failed}}}}}});
}

common::Status TelemetryOff() {
  return common::Unavailable(
      "in-band telemetry is off on this aggswitch (its config has no telemetry: section)");
}

// GET /api/v1/int, and PUT with a new watch list.
HttpResponse IntRoute(const ApiRequest& r, const DataSource& source) {
  if (r.method == "PUT") {
    if (!source.set_watch) return ErrorResponse(TelemetryOff());
    common::Result<std::vector<config::WatchEntry>> watch = ParseWatchBody(r.body);
    if (!watch.ok()) return ErrorResponse(watch.status());
    if (common::Status set = source.set_watch(*watch); !set.ok()) return ErrorResponse(set);
  }
  const StatsSnapshot snap = source.snapshot();
  if (!snap.telemetry) return ErrorResponse(TelemetryOff());
  return JsonResponse(200, IntJson(*snap.telemetry));
}

common::Status DecisionsOff() {
  return common::Unavailable("path decisions need the dataplane, which this server does not serve");
}

std::string DecisionsJson(const PathDecisionsView& view) {
  json groups = json::array();
  for (const PathDecisionsView::Group& g : view.groups) {
    groups.push_back({{"name", g.name}, {"ports", g.ports}});
  }
  json decisions = json::array();
  for (const PathDecisionEntry& d : view.decisions) {
    decisions.push_back({{"dst", d.dst.ToString()},
                         {"port", d.port},
                         {"port_index", d.port_index ? json(*d.port_index) : json()},
                         {"group", d.group.empty() ? json() : json(d.group)}});
  }
  return Dump({{"groups", std::move(groups)}, {"decisions", std::move(decisions)}});
}

// GET /api/v1/int/decisions, and PUT with new decisions.
HttpResponse DecisionsRoute(const ApiRequest& r, const DataSource& source) {
  if (!source.decisions || !source.set_decisions) return ErrorResponse(DecisionsOff());
  if (r.method == "PUT") {
    common::Result<std::vector<PathDecisionEntry>> decisions = ParseDecisionsBody(r.body);
    if (!decisions.ok()) return ErrorResponse(decisions.status());
    if (common::Status set = source.set_decisions(*decisions); !set.ok()) return ErrorResponse(set);
  }
  return JsonResponse(200, DecisionsJson(source.decisions()));
}

}  // namespace

common::Result<std::vector<PathDecisionEntry>> ParseDecisionsBody(std::string_view body) {
  constexpr char kShape[] = "{\"decisions\": [{\"dst\": \"a.b.c.d/len\", \"port\": name or index}]}";
  ASSIGN_OR_RETURN(const json j, ParseBodyObject(body, kShape));
  for (const auto& [name, value] : j.items()) {
    if (name != "decisions") return UnknownField(name, "decisions");
  }
  if (!j.contains("decisions")) return common::InvalidArgument(std::string("expected ") + kShape);
  const json& list = j["decisions"];
  if (!list.is_array()) {
    return common::InvalidArgument("decisions must be a list, got " + Preview(list));
  }
  std::vector<PathDecisionEntry> entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = Index("decisions", i);
    RETURN_IF_ERROR(ExpectObject(list[i], path, "{dst, port}"));
    PathDecisionEntry& d = entries.emplace_back();
    bool has_dst = false;
    bool has_port = false;
    for (const auto& [key, v] : list[i].items()) {
      const std::string key_path = KeyPath(path, key);
      if (key == "dst") {
        const std::optional<common::Ipv4Prefix> prefix =
            v.is_string() ? common::Ipv4Prefix::Parse(v.get_ref<const std::string&>()) : std::nullopt;
        if (!prefix) {
          return common::InvalidArgument(key_path + " must be an IPv4 prefix \"a.b.c.d/len\", got " +
                                         Preview(v));
        }
        d.dst = *prefix;
        has_dst = true;
      } else if (key == "port") {
        if (v.is_string()) {
          d.port = v.get<std::string>();
        } else {
          ASSIGN_OR_RETURN(const uint64_t index, JsonUnsigned(v, key_path, 0, config::kMaxPorts - 1));
          d.port_index = static_cast<uint16_t>(index);
        }
        has_port = true;
      } else {
        return UnknownField(key_path, "dst, port");
      }
    }
    if (!has_dst) return common::InvalidArgument(path + ".dst is required");
    if (!has_port) return common::InvalidArgument(path + ".port is required");
  }
  return entries;
}

common::Result<std::vector<config::WatchEntry>> ParseWatchBody(std::string_view body) {
  constexpr char kShape[] = "{\"watch\": [{\"name\", \"dst\", \"port\", ...}]}";
  ASSIGN_OR_RETURN(const json j, ParseBodyObject(body, kShape));
  for (const auto& [name, value] : j.items()) {
    if (name != "watch") return UnknownField(name, "watch");
  }
  if (!j.contains("watch")) return common::InvalidArgument(std::string("expected ") + kShape);
  const json& list = j["watch"];
  if (!list.is_array()) {
    return common::InvalidArgument("watch must be a list of entries, got " + Preview(list));
  }
  std::vector<config::WatchEntry> entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = Index("watch", i);
    RETURN_IF_ERROR(ExpectObject(list[i], path, "{name, ...}"));
    config::WatchEntry& w = entries.emplace_back();
    bool named = false;
    for (const auto& [key, v] : list[i].items()) {
      const std::string key_path = KeyPath(path, key);
      if (key == "name") {
        if (!v.is_string()) return common::InvalidArgument(key_path + " must be a string, got " + Preview(v));
        w.name = v.get<std::string>();
        named = true;
      } else if (key == "vlan") {
        ASSIGN_OR_RETURN(const uint64_t vlan, JsonUnsigned(v, key_path, config::kMinVlan, config::kMaxVlan));
        w.vlan = static_cast<uint16_t>(vlan);
      } else if (key == "src" || key == "dst") {
        const std::optional<common::Ipv4Prefix> prefix =
            v.is_string() ? common::Ipv4Prefix::Parse(v.get_ref<const std::string&>()) : std::nullopt;
        if (!prefix) {
          return common::InvalidArgument(key_path + " must be an IPv4 prefix \"a.b.c.d/len\", got " +
                                         Preview(v));
        }
        (key == "src" ? w.src : w.dst) = *prefix;
      } else if (key == "port") {
        ASSIGN_OR_RETURN(const uint64_t port, JsonUnsigned(v, key_path, 1, 65535));
        w.port = static_cast<uint16_t>(port);
      } else if (key == "job") {
        ASSIGN_OR_RETURN(const uint64_t job, JsonUnsigned(v, key_path, 0, 4294967295u));
        w.job = static_cast<uint32_t>(job);
      } else if (key == "sample") {
        ASSIGN_OR_RETURN(const uint64_t sample, JsonUnsigned(v, key_path, 1, config::kMaxWatchSample));
        w.sample = static_cast<uint32_t>(sample);
      } else if (key == "instructions") {
        const std::string set = v.is_string() ? v.get<std::string>() : "";
        if (set == "latency") {
          w.instructions = config::IntInstructions::kLatency;
        } else if (set == "bandwidth") {
          w.instructions = config::IntInstructions::kBandwidth;
        } else if (set == "both") {
          w.instructions = config::IntInstructions::kBoth;
        } else {
          return common::InvalidArgument(key_path + " must be \"latency\", \"bandwidth\" or \"both\", got " +
                                         Preview(v));
        }
      } else {
        return UnknownField(key_path, kWatchFields);
      }
    }
    if (!named) return common::InvalidArgument(path + ".name is required");
  }
  return entries;
}

HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           const DataSource& source) {
  return HandleRequest(method, path, query, {}, source);
}

namespace {

constexpr std::string_view kReadOnly = "this route is read-only, use GET";

constexpr ApiRoute kApiRoutes[] = {
    {routes::kMetrics, "GET", kReadOnly, MetricsRoute,
     "the counters and gauges, in the Prometheus text format"},
    {routes::kPorts, "GET", kReadOnly, PortsRoute,
     "every port: its driver, link, VLANs and counters"},
    {routes::kMac, "GET", kReadOnly, MacRoute, "the MAC table, `?vlan=&port=&limit=` to filter it"},
    {routes::kLcores, "GET", kReadOnly, LcoresRoute,
     "every worker lcore: its counters, rings and slot latencies"},
    {routes::kStats, "GET", kReadOnly, StatsRoute, "the switch's totals and its configuration"},
    {routes::kJobs, "GET, POST", "use GET to list jobs, POST to add one", JobsCollection,
     "the jobs (GET), or a new one (POST, 201)"},
    {routes::kJob, "GET, DELETE", "use GET to show the job, DELETE to remove it", JobRoute,
     "one job with its busy slots (GET), or its removal (DELETE, 204)"},
    {routes::kJobStragglers, "GET, POST",
     "use GET to predict, POST to predict and apply (or clear)", StragglersRoute,
     "the job's predicted stragglers, `?top=N` or `?over=S`, `&ops=K` (GET), applied (POST)"},
    {routes::kJobTan, "GET, POST", "use GET to show the job's TAN, POST to choose it", TanRoute,
     "the job's TAN (GET), or the one chosen (POST)"},
    {routes::kJobMember, "DELETE", "use DELETE to unbind the member from its address", MemberRoute,
     "forgets the address the member is bound to (204)"},
    {routes::kSlots, "GET", kReadOnly, SlotsRoute, "the busy aggregation slots, `?limit=N&job=J`"},
    {routes::kBypass, "GET", kReadOnly, BypassRoute, "the live bypass entries, `?limit=N&job=J`"},
    {routes::kInt, "GET, PUT",
     "use GET to show in-band telemetry, PUT {\"watch\": [...]} to replace the watch list",
     IntRoute, "in-band telemetry and its watch list (GET), a new watch list (PUT)"},
    {routes::kDecisions, "GET, PUT",
     "use GET to show the path decisions, PUT {\"decisions\": [...]} to replace them",
     DecisionsRoute, "the uplink groups and path decisions (GET), new decisions (PUT)"},
};

// Whether `path` has `pattern`'s segments; <id> and <node> take one
// segment each, into `r` (an <id> that is no job id: into `*bad_id`).
bool Match(std::string_view pattern, std::string_view path, ApiRequest* r,
           std::string_view* bad_id) {
  while (!pattern.empty() || !path.empty()) {
    if (pattern.empty() || path.empty() || pattern[0] != '/' || path[0] != '/') return false;
    pattern.remove_prefix(1);
    path.remove_prefix(1);
    const std::string_view want = pattern.substr(0, pattern.find('/'));
    const std::string_view got = path.substr(0, path.find('/'));
    pattern.remove_prefix(want.size());
    path.remove_prefix(got.size());
    if (want == "<id>") {
      const std::optional<uint32_t> id = ParseDecimal(got);
      if (!id || *id == 0) {
        *bad_id = got;
      } else {
        r->job = *id;
      }
    } else if (want == "<node>") {
      r->node = got;
    } else if (want != got) {
      return false;
    }
  }
  return true;
}

// Whether `method` is one of `methods` ("GET, POST").
bool Allows(std::string_view methods, std::string_view method) {
  while (!methods.empty()) {
    const size_t comma = methods.find(", ");
    if (methods.substr(0, comma) == method) return true;
    methods.remove_prefix(comma == std::string_view::npos ? methods.size() : comma + 2);
  }
  return false;
}

}  // namespace

std::span<const ApiRoute> ApiRoutes() {
  return kApiRoutes;
}

HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           std::string_view body, const DataSource& source) {
  try {
    for (const ApiRoute& route : kApiRoutes) {
      ApiRequest r{method, path, query, body};
      std::string_view bad_id;
      if (!Match(route.pattern, path, &r, &bad_id)) continue;
      if (bad_id.data() != nullptr) {
        return JsonResponse(400, ErrorJson("job id must be a number 1..4294967295, got '" +
                                           std::string(bad_id) + "'"));
      }
      if (!Allows(route.methods, method)) {
        return MethodNotAllowed(method, route.pattern, std::string(route.methods), route.hint);
      }
      return route.handler(r, source);
    }
    json routes = json::array();
    for (const ApiRoute& route : kApiRoutes) routes.push_back(route.pattern);
    return JsonResponse(
        404, Dump({{"error", "no route " + std::string(path)}, {"routes", std::move(routes)}}));
  } catch (const std::exception& e) {
    return InternalError(e.what());
  }
}

}  // namespace aggswitch::control
