// The control API: JSON bodies of the /api/v1 routes, and the router that
// maps a request (method, path, query, body) to a response.
//
// Everything here is a pure function of what the DataSource returns (a
// StatsSnapshot, the MAC entries, the job table, a dump of the busy
// aggregation slots), so routing, filtering and
// the JSON shapes are unit-tested without EAL or a socket. api_server.h serves
// HandleRequest() through common/http_server.h; aggctl is the main client. The only
// writes are the job routes, and they go through the DataSource's job
// functions (job_control.h hands them to the control thread).
//
// The routes are one table, ApiRoutes() below (a method a route does not
// take gets 405 with its Allow list, unknown paths 404, all errors are
// {"error": "..."}). What each answers (GET unless noted):
//   /metrics          Prometheus text (metrics.h)
//   /api/v1/ports     {"ports": [port]}
//   /api/v1/mac       {"table": mac_table, "filter": {"vlan","port"}, "count", "entries": [mac]}
//                     optional query: vlan=<1..4094>, port=<name or index>
//   /api/v1/lcores    {"tsc_hz", "lcores": [lcore]}
//   /api/v1/stats     {"build", "process": {"pid","start_time_seconds","resident_memory_bytes"},
//                      "pools": [{"name","capacity","available"}], "http": null or
//                      {"threads","refused": {<reason>: n}}, "tsc_hz", "totals",
//                      "ports": [port], "lcores": [lcore], "mac_table": mac_table}
//   /api/v1/jobs      GET: {"capacity","max_fan_in","in_band_registration",
//                           "in_band": {"jobs","capacity","expired","displaced"},"count",
//                           "jobs": [job]}, by id
//                     POST job_request: 201 and the new job; 400 bad body (the message
//                           names the key: "switches[1].covers[0]: expected ..."),
//                           409 id exists, 507 table full
//   /api/v1/jobs/<id> GET: job_detail, or 404;  DELETE: 204, or 404
//   /api/v1/jobs/<id>/stragglers  GET ?top=N|over=S[&ops=K]; POST the same plus
//                     apply, clear: {"job","operations","predicted": [{"node",
//                     "offset_seconds"}],"excluded": [node]}
//   /api/v1/jobs/<id>/members/<node>  DELETE: 204, the member is unbound from the
//                     address it sent from (docs/security.md; its next datagram binds
//                     it again); 404 unknown job or node
//   /api/v1/jobs/<id>/tan  GET, or POST tan_request: tan_report; 400 bad body,
//                     404 unknown job, 409 a strategy for a job whose root is
//                     another switch, or "self" for a parameter-server job,
//                     503 aggregation off
//   /api/v1/bypass    ?job=J&limit=N: the live bypass entries
//   /api/v1/int       GET: int_state; PUT {"watch": [watch_entry]}: the watch list replaced
//                     (400 naming the key, as the config's telemetry.watch would), then
//                     int_state; 503 when in-band telemetry is off
//   /api/v1/int/decisions  GET: decisions_state; PUT {"decisions": [decision_request]}:
//                     the uplink groups' path decisions replaced (400 naming
//                     decisions[i].key), then decisions_state
//   /api/v1/slots     {"busy","truncated","filter": {"job","limit"},"count","slots": [slot]}
//                     optional query: limit=<1..100000> (default 1000), job=<id>;
//                     503 when aggregation is off or a worker did not answer in time
// where
//   port      = {"index","name","port_id","driver","devargs","mac","link_up",
//                "link_speed_mbps","rx_queues","tx_queues","vlan_mode","rx_packets",
//                "rx_bytes","tx_packets","tx_bytes","flooded_packets","dropped_packets",
//                "drops": {<reason>: n, ... every reason}, "device": {"missed_packets",
//                "rx_errors","tx_errors","rx_nombuf","xsk_ring_full","xsk_fill_empty"}}
//   lcore     = {"lcore","tx_queue","rx": [{"port","queue"}],"busy_cycles","idle_cycles",
//                "busy_packets","polls","learn_requests","learn_ring_full","arp_replies",
//                "icmp_replies","cycles_per_packet" (null before the first packet),
//                "busy_percent"}
//   mac_table = {"size","capacity","static_entries","aging_seconds","events": {"learned",
//                "moved","aged","static_conflicts","learn_refused"}}
//   mac       = {"vlan","mac","port","port_index","type": "static"|"dynamic",
//                "age_seconds" (null for static entries)}
//   job       = {"id","index","origin": "config"|"api"|"in-band","members" (expected),
//                "nodes","ordered","learned" (members with an address),
//                "min_ack" (null before any watermark),
//                "counters": {<AGG_JOB_COUNTERS name>: n, ...} (null without dataplane counters),
//                "learned_members": [{"node","mac","ip","udp_port","port","port_index",
//                                     "vlan","ack_watermark"}] (by node id; address fields
//                                     null for a member only seen acking),
//                "node_ids": [node],"switches": [{"node","covers": [node]}],
//                "upstream": null or {"address","port","node","vlan","resolved"},
//                "timeout_ms" (null: unknown TSC frequency),"trigger": "incremental"|"batch",
//                "tan": {"mode","address","port","resolved"},"tan_member" (null: none),
//                "parameter_server" (the TAN answers every chunk),
//                "verify" (the TAN, the job's parameter node, checks every complete chunk),
//                "main_server" ("a.b.c.d:port", port 0: any; null: none; DISTRIBUTE from
//                it is replicated to every member),
//                "mode" ("aggregate", "store", "both"), "store": {"buffers" (held now),
//                "quota" (at most)},
//                "placement": {"first","size","base","span","policy"} (its slot region;
//                chunk s takes slot first + (base - first + s) mod size, or with a span
//                first + (base - first + s mod span) mod size; policy: "hash",
//                "round_robin", "random" or "hint"), "slot_quota", "hold_quota"
//                (what it may hold; 0: no bound)}
//                (the job key, a shared secret, is never shown)
//   int_state = {"node_id","int_port","max_hops","collector","fabric_ports": [name],
//                "watch": [watch_entry],"counters": {<AGG_INT_COUNTERS name>: n},
//                "reports": {"sent","dropped": {"ring_full","send_failed"}}}
//   watch_entry = {"name","vlan","src","dst","port","job","sample","instructions"}: the
//                config's telemetry.watch[] keys (null: not given)
//   decisions_state = {"groups": [{"name","ports": [name]}],"decisions": [{"dst","port",
//                "port_index","group" (null: the port is in no group, so the decision
//                changes nothing here)}]}
//   decision_request = {"dst": "a.b.c.d/len","port": name or index}
//   job_detail = job + {"slots": [slot] (the job's busy slots, at most 1000; null when
//                the dump failed), "slots_truncated", "slots_error" (null, or why
//                "slots" is null)}
//   slot      = {"lcore","index","state": "aggregating"|"complete","job","seq","count",
//                "expected","dtype" (name),"op" (name),"elem_count","overflow","age_seconds"}
//   job_request = {"id","key"[,"members"][,"nodes"][,"ordered"][,"node_ids"][,"switches"]
//                [,"upstream"][,"timeout_ms"][,"trigger"][,"tan"][,"tan_member"]
//                [,"parameter_server"][,"verify"][,"placement_hint"][,"main_server"][,"mode"]}: the
//                keys of the config's aggregation.jobs[], with their meaning and defaults
//                (docs/config.md); "key" is an unsigned integer or a
//                "0x..." hex string; "members" is required unless node_ids or switches
//                list the members; node ids are numbers or "a-b" ranges
//   tan_request = {"strategy": "fixed"|"random"|"least_load"|"fewest_hops",
//                "candidates": [{"address","port","hops"}]} (the root picks among the
//                management node's candidates; without "strategy": fixed), or
//                {"strategy": "self"}, and/or {"member": node | null} (at any switch)
//   tan_report = {"job","root","mode": "none"|"remote"|"self","address","port","resolved",
//                "member","chosen_by": "config"|"api"|null,"strategy","candidates":
//                [{"address","port","hops"}]} (address and port null unless remote;
//                strategy null and candidates [] when no choice was made here)
//
// "busy" counts every busy slot of the switch, whatever the filter; "truncated"
// says that more slots matched than are listed. A job filter is applied to a
// dump of up to 100000 slots, then cut to the limit.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/types.h"
#include "common/http_response.h"
#include "common/http_server.h"
#include "common/status.h"
#include "config/config.h"
#include "control/stats_snapshot.h"

namespace aggswitch::control {

// A job as POST /api/v1/jobs asks for it: the job as the config's
// aggregation.jobs[i] would give it, shapes and ranges checked (as the
// loader checks them). JobControl then checks it against the running config
// as config::Validate() checks a config job, and builds it the same way
// (JobSpecFromConfig), so the config and the API cannot drift apart.
struct JobRequest {
  config::AggregationJobConfig job;
  // The key paths the body gave below the job ("members", "node_ids",
  // "switches", "tan.candidates"): where Validate() reports a mistake that
  // more than one key could hold, as the loader records them.
  std::vector<std::string> keys;
  // The request as given (a JSON object): what aggregation.state_file keeps
  // of an API job, to add it again after a restart. Set by ParseJobRequest.
  std::string body;

  // Two requests are equal when they ask for the same job, however written.
  friend bool operator==(const JobRequest& a, const JobRequest& b) {
    return a.job == b.job && a.keys == b.keys;
  }
};

// Where the router gets its data. Each function is called at most once per
// request, and only by the routes that need it. The job functions may be
// empty (a source without a job table): the job routes then answer 503.
// `slots` may be empty too (aggregation off): /api/v1/slots answers 503 and a
// job's "slots" are null.
// POST (or GET, without apply/clear) /api/v1/jobs/<id>/stragglers: predict
// a job's stragglers at this switch from the arrival offsets of its last
// `operations` sampled chunks (0: all kept), by one rule (docs/stragglers.md).
struct StragglerRequest {
  std::optional<uint32_t> top;   // the N latest members
  std::optional<double> over_s;  // members whose mean offset is strictly above this
  uint32_t operations = 0;
  bool apply = false;  // exclude the predicted members (they then self-flag)
  // With apply: exclude at most this many, the latest first (1..255). A
  // switch's partial lists its excluded members beside a chunk's payload,
  // which leaves room for the ids its members' clients reserve
  // (reserve_missing_ids, 32 by default); a partial that cannot carry its
  // list ends the chunk INCOMPLETE.
  uint32_t max_excluded = aggregator::kDefaultReservedMissingIds;
  bool clear = false;  // include every member again (no prediction)
};
struct StragglerReport {
  uint32_t job = 0;
  uint64_t operations = 0;  // sampled operations the prediction could use
  struct Member {
    uint16_t node = 0;
    double offset_s = 0;
  };
  std::vector<Member> predicted;
  std::vector<uint16_t> excluded;  // node ids excluded now (after apply/clear)
};

// POST /api/v1/jobs/<id>/tan: what the management node tells this switch
// about a job's timeout aggregation node (docs/stragglers.md, "Choice").
// `choice`, at the job's root only: the strategy and the candidates the root
// picks from, as the config's tan (one candidate with "fixed": the
// management node's own pick, synced to the root; several: a joint choice,
// the root picks by the strategy), or "self" (not for a parameter-server
// job, whose TAN is its parameter server). `member`, at any switch: the
// worker of the job here that runs the TAN (jobs[].tan_member), or none. At
// least one of the two.
struct TanRequest {
  std::optional<config::TanConfig> choice;
  bool set_member = false;
  std::optional<uint16_t> member;  // with set_member: the node id, or none

  friend bool operator==(const TanRequest&, const TanRequest&) = default;
};
// A job's TAN as this switch knows it (GET and POST /api/v1/jobs/<id>/tan).
struct TanReport {
  uint32_t job = 0;
  bool root = false;  // the job has no upstream here: this switch picks its TAN
  JobTanSnapshot tan;
  std::optional<uint16_t> member;  // the worker here that runs the TAN
  // How the TAN in use was chosen here: the strategy and the candidates,
  // from the config (the job's tan, or aggregation.tan) or the API. nullopt
  // when no choice was made (not the root, or no tan configured).
  enum class Source { kConfig, kApi };
  struct Choice {
    Source source = Source::kConfig;
    config::TanConfig tan;
  };
  std::optional<Choice> chosen;
};

// A path decision as the API shows and takes it: traffic to `dst` leaves by
// `port` when that port is the member of an uplink group the L2 switch
// would send it to (docs/telemetry.md, "Decisions applied").
struct PathDecisionEntry {
  common::Ipv4Prefix dst;
  std::string port;                    // by name, or
  std::optional<uint16_t> port_index;  // by index (the INT reports' port ids)
  std::string group;                   // shown: the port's group, "" for none

  friend bool operator==(const PathDecisionEntry&, const PathDecisionEntry&) = default;
};
struct PathDecisionsView {
  struct Group {
    std::string name;
    std::vector<std::string> ports;
  };
  std::vector<Group> groups;
  std::vector<PathDecisionEntry> decisions;  // port and port_index both set
};

struct DataSource {
  std::function<StatsSnapshot()> snapshot;
  std::function<std::vector<MacEntrySnapshot>()> mac_entries;
  std::function<common::Result<JobTableSnapshot>()> jobs;
  std::function<common::Result<JobSnapshot>(const JobRequest&)> add_job;
  std::function<common::Status(uint32_t id)> remove_job;
  // Forgets the address member `node` of job `id` is bound to (NotFound for
  // an unknown job or node), on the control thread.
  std::function<common::Status(uint32_t id, uint16_t node)> unbind_member;
  // Up to `limit` busy slots of every worker (Dataplane::DumpSlots). Unavailable
  // when the workers did not answer in time; the route answers 503 with its message.
  std::function<common::Result<dataplane::SlotDump>(size_t limit)> slots;
  // Up to `limit` live bypass entries of every worker (Dataplane::DumpBypass).
  std::function<common::Result<dataplane::BypassDump>(size_t limit)> bypass;
  // Straggler prediction and exclusion, run on the control thread.
  std::function<common::Result<StragglerReport>(uint32_t job, const StragglerRequest&)> stragglers;
  // A job's TAN: shown (nullopt) or changed, on the control thread. Empty
  // when aggregation is off: the TAN route then answers 503.
  std::function<common::Result<TanReport>(uint32_t job, const std::optional<TanRequest>&)> tan;
  // Replaces the telemetry watch list: InvalidArgument when it does not
  // validate against the running config. Empty when telemetry is off.
  std::function<common::Status(const std::vector<config::WatchEntry>&)> set_watch;
  // The uplink groups and their path decisions, and the decisions' replacement
  // (InvalidArgument naming decisions[i].key). Empty without a dataplane:
  // the route answers 503.
  std::function<PathDecisionsView()> decisions;
  std::function<common::Status(const std::vector<PathDecisionEntry>&)> set_decisions;
};

// Parses the body of PUT /api/v1/int: {"watch": [watch_entry]}, shapes and
// ranges; the rest (names, prefixes, VLANs) is config::Validate()'s. [any]
common::Result<std::vector<config::WatchEntry>> ParseWatchBody(std::string_view body);

// Parses the body of PUT /api/v1/int/decisions: {"decisions": [decision_request]},
// shapes and prefixes; whether the ports exist is the setter's. [any]
common::Result<std::vector<PathDecisionEntry>> ParseDecisionsBody(std::string_view body);

// Parses the body of POST /api/v1/jobs/<id>/tan (tan_request above): the
// shapes and ranges; the rules that need the running config (the number of
// candidates, repeats, the switch's own addresses) are JobControl's.
// InvalidArgument naming the key and what it takes. [any]
common::Result<TanRequest> ParseTanBody(std::string_view body);
// tan_report above. [any]
std::string TanJson(const TanReport& report);
// An API job's request as aggregation.state_file keeps it (JobRequest::body)
// with a TAN change applied: "tan" becomes the choice, written as POST takes
// it, and "tan_member" the member (removed for none), so that the job added
// again after a restart has the TAN the API gave it. InvalidArgument when
// `body` is not a JSON object. [any]
common::Result<std::string> SavedJobWithTan(std::string_view body, const TanRequest& request);

// Parses the query (top, over, ops) or body (the same plus apply, clear) of
// the stragglers route. Exactly one of top/over unless clear. [any]
common::Result<StragglerRequest> ParseStragglerQuery(std::string_view query);
common::Result<StragglerRequest> ParseStragglerBody(std::string_view body);
std::string StragglerJson(const StragglerReport& report);

// The router runs on the HTTP server's request threads, whose stack is
// common::kRequestStackBytes (common/http_server.h): Debian's libcivetweb is
// built with civetweb's default CIVETWEB_THREAD_STACK_SIZE. Nothing the
// router does for a request may need more; in particular no recursion follows
// the nesting of a request body (bodies nest at most 16 levels, and error
// messages show values without recursing). ApiServerTest checks the server's
// threads against it; api_test and the fuzz harness run the router on a stack
// this size.
using common::HttpResponse;
using common::kJsonContentType;
using common::kRequestStackBytes;

// Filters of GET /api/v1/mac.
struct MacQuery {
  std::optional<uint16_t> vlan;
  std::optional<std::string> port;  // a port name, or a port index in decimal
};

// Parses "vlan=10&port=p0" (percent-encoding and '+' decoded). An empty query
// is no filter. Unknown keys and bad VLAN numbers are InvalidArgument. [any]
common::Result<MacQuery> ParseMacQuery(std::string_view query);

// Slots listed by GET /api/v1/slots without a limit, and at most; also the
// most busy slots GET /api/v1/jobs/<id> lists.
inline constexpr size_t kDefaultSlotLimit = 1000;
inline constexpr size_t kMaxSlotLimit = 100000;

// Filters of GET /api/v1/slots.
struct SlotQuery {
  size_t limit = kDefaultSlotLimit;  // 1..kMaxSlotLimit
  std::optional<uint32_t> job;       // only this job's slots

  friend bool operator==(const SlotQuery&, const SlotQuery&) = default;
};

// Parses "limit=100&job=7". Unknown keys, and values out of range, are
// InvalidArgument naming the parameter and what it takes. [any]
common::Result<SlotQuery> ParseSlotQuery(std::string_view query);

// The bodies of the routes above, compact JSON ending in a newline. [any]
std::string PortsJson(const StatsSnapshot& snap);
std::string LcoresJson(const StatsSnapshot& snap);
std::string StatsJson(const StatsSnapshot& snap);
// `entries` filtered by `query`. A port filter that names no port of `snap`
// is InvalidArgument. [any]
common::Result<std::string> MacJson(const StatsSnapshot& snap,
                                    const std::vector<MacEntrySnapshot>& entries,
                                    const MacQuery& query);
// {"error": message}: common/http_response.h. [any]
using common::ErrorJson;
// The bodies of the job routes. [any]
std::string JobsJson(const JobTableSnapshot& table);
std::string JobJson(const JobSnapshot& job);
// GET /api/v1/jobs/<id>: the job, plus its busy slots taken from `dump` (every
// job's slots; at most kDefaultSlotLimit are listed), or the dump's error. [any]
std::string JobDetailJson(const JobSnapshot& job, const common::Result<dataplane::SlotDump>& dump);
// GET /api/v1/slots: the slots of `dump` that match `query`, up to its limit. [any]
std::string SlotsJson(const dataplane::SlotDump& dump, const SlotQuery& query);

// GET /api/v1/bypass[?job=J&limit=N]: the live bypass entries, at most
// `limit` (default kDefaultSlotLimit), of one job or all. [any]
common::Result<SlotQuery> ParseBypassQuery(std::string_view query);
std::string BypassJson(const dataplane::BypassDump& dump, const SlotQuery& query);

// Parses the body of POST /api/v1/jobs (job_request above): the shapes and
// ranges of every key, as the config loader reads aggregation.jobs[i]
// (members, when node_ids or switches are given and members is not, is
// their count). InvalidArgument naming the key ("switches[1].covers[0]",
// indices of node id lists counting the expanded ranges, as in the config)
// and what it takes. The cross-key rules are JobControl's. [any]
common::Result<JobRequest> ParseJobRequest(std::string_view body);

// The HTTP status for a failed Status: 400 invalid argument, 404 not found,
// 409 already exists or failed precondition, 507 resource exhausted, 503
// unavailable, 500 otherwise. [any]
int HttpStatusOf(common::StatusCode code);

// A request as a route's handler sees it: the path's parameters parsed.
struct ApiRequest {
  std::string_view method;
  std::string_view path;
  std::string_view query;
  std::string_view body;
  uint32_t job = 0;       // <id>: a job id, 1..4294967295
  std::string_view node;  // <node>, as the path gives it (its route checks it)
};

// One route of the API, in one table: the router dispatches by it, a 404
// lists the patterns, a 405 answers with the methods (the Allow header) and
// the hint, and docs/operations.md's route table is checked against it
// (api_test).
struct ApiRoute {
  std::string_view pattern;  // "/api/v1/jobs/<id>/tan": <id> a job id, <node> a node id
  std::string_view methods;  // "GET, POST"
  std::string_view hint;     // what a 405 adds
  HttpResponse (*handler)(const ApiRequest&, const DataSource&);
  std::string_view doc;  // what the route does, one line
};

// The routes, in the order a 404 lists them. [any]
std::span<const ApiRoute> ApiRoutes();

// Routes one request. `path` is the URL-decoded path without the query;
// `query` is the raw query string without '?'; `body` is the request body
// (only the POST routes read it). Never throws: failures of the DataSource
// or of JSON encoding become a 500 response. [any]
HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           std::string_view body, const DataSource& source);
// The same without a body.
HttpResponse HandleRequest(std::string_view method, std::string_view path, std::string_view query,
                           const DataSource& source);

}  // namespace aggswitch::control
