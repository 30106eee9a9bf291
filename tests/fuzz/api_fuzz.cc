// api_fuzz: the control API's router, control::HandleRequest (control/api.h),
// on arbitrary requests, run on a thread whose stack is as small as the
// civetweb request threads that run it in the daemon.
//
// Input: an HTTP-like request, "METHOD TARGET\nBODY": the first line up to
// the first space is the method, the rest of it the target, split at the
// first '?' into the path (as civetweb hands it over, URL-decoded) and the
// raw query; everything after the first newline is the body. Any bytes are
// an input: without a space the whole line is the method, without a newline
// the body is empty.
//
// The DataSource answers with fixed, realistic data: two ports, two worker
// lcores, three MAC entries, jobs 1 (flat, four members) and 7 (a tree job
// under an upstream switch, with a remote TAN), three busy slots and two
// bypass entries. Adding a job fails for ids 1 and 7 (it exists) and ids
// ending in 4 (the table is full) and succeeds otherwise; removing one
// succeeds for 1 and 7, and so does unbinding their members 0-3; stragglers
// and TAN answer for 1 and 7 only, and a TAN choice for job 7 (not rooted
// here) is refused.
//
// Invariants, each a finding when broken:
//   * no stack overflow on kRequestStackBytes (ASan reports one);
//   * no 500: the DataSource never fails internally, so a 500 means an
//     exception escaped a route;
//   * a 204 has no body, a 405 an Allow list; every other body but /metrics
//     is one JSON document ending in a newline, and an error status carries
//     {"error": "<message>"};
//   * each DataSource function is called at most once per request (api.h);
//     a GET never adds or removes a job, never applies or clears a straggler
//     exclusion and never changes a TAN; a 201 comes only from POST
//     /api/v1/jobs after add_job succeeded.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "control/api.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/lib/small_stack.h"

namespace aggswitch::control {
namespace {

// Calls per DataSource function during one request.
struct Calls {
  int snapshot = 0, mac_entries = 0, jobs = 0, add_job = 0, remove_job = 0, unbind_member = 0,
      slots = 0, bypass = 0, stragglers = 0, tan = 0, set_watch = 0, decisions = 0,
      set_decisions = 0;
  bool add_job_ok = false;
  bool mutated = false;  // removed a job or a binding, applied/cleared stragglers, changed a TAN, the watch list or the decisions
};

common::MacAddr Mac(const char* text) {
  return *common::MacAddr::Parse(text);
}
common::Ipv4Addr Ip(const char* text) {
  return *common::Ipv4Addr::Parse(text);
}

JobSnapshot FlatJob() {
  JobSnapshot j;
  j.id = 1;
  j.index = 0;
  j.origin = "config";
  j.members = 4;
  j.learned = 2;
  j.min_ack = 41;
  for (uint16_t n = 0; n < 2; ++n) {
    JobMemberSnapshot m;
    m.node = n;
    m.has_address = true;
    m.mac = Mac(n == 0 ? "02:00:00:00:10:0a" : "02:00:00:00:10:0b");
    m.port_index = n;
    m.port = n == 0 ? "uplink" : "host1";
    m.vlan = 10;
    m.ip = Ip(n == 0 ? "10.0.10.10" : "10.0.10.11");
    m.udp_port = static_cast<uint16_t>(40000 + n);
    m.ack_watermark = 41u + n;
    j.learned_members.push_back(m);
  }
  JobMemberSnapshot acking;  // seen only acking
  acking.node = 3;
  acking.ack_watermark = 40;
  j.learned_members.push_back(acking);
  j.counters = JobCounterValues{};
  (*j.counters)[0] = 1234;
  j.timeout_ms = 50;
  return j;
}

JobSnapshot TreeJob() {
  JobSnapshot j;
  j.id = 7;
  j.index = 1;
  j.origin = "api";
  j.members = 3;
  j.nodes = 3;
  j.ordered = true;
  j.node_ids = {4, 5};
  j.switches = {{100, {0, 1, 2, 3}}};
  j.upstreams = {JobUpstreamSnapshot{Ip("10.0.9.1"), 47000, 200, 0, true}};
  j.timeout_ms = 20;
  j.batch = true;
  j.tan.mode = "remote";
  j.tan.address = Ip("10.0.9.50");
  j.tan.port = 47000;
  j.tan.resolved = true;
  j.tan_member = 5;
  j.parameter_server = false;
  return j;
}

JobTableSnapshot JobTable() {
  JobTableSnapshot t;
  t.capacity = 64;
  t.max_fan_in = 256;
  t.in_band_registration = true;
  t.jobs = {FlatJob(), TreeJob()};
  return t;
}

StatsSnapshot Snapshot() {
  StatsSnapshot s;
  s.build = {"0.1.0", "DPDK 22.11.4"};
  s.tsc_hz = 2'000'000'000;
  PortSnapshot p0;
  p0.index = 0;
  p0.name = "uplink";
  p0.devargs = "net_ring0";
  p0.driver = "net_ring";
  p0.port_id = 3;
  p0.mac = Mac("02:00:00:00:00:01");
  p0.link_up = true;
  p0.link_speed_mbps = 10000;
  p0.rx_queues = 2;
  p0.tx_queues = 1;
  p0.vlan_mode = "trunk 10,20 native 1";
  p0.rx_packets = 1000;
  p0.rx_bytes = 64000;
  p0.tx_packets = 900;
  p0.tx_bytes = 57600;
  p0.flooded_packets = 12;
  p0.drops[0] = 5;
  p0.dev_missed_packets = 3;
  s.ports.push_back(p0);
  PortSnapshot p1;
  p1.index = 1;
  p1.name = "host1";
  p1.driver = "net_ring";
  p1.vlan_mode = "access 10";
  p1.rx_packets = 5;
  p1.tx_packets = 6;
  s.ports.push_back(p1);

  LcoreSnapshot l1;
  l1.lcore = 1;
  l1.tx_queue = 0;
  l1.rx = {{"uplink", 0}, {"host1", 0}};
  l1.busy_cycles = 300000;
  l1.idle_cycles = 100000;
  l1.busy_packets = 2000;
  l1.polls = 50;
  l1.slots = 2048;
  l1.slots_busy = 3;
  l1.agg[0] = 77;
  s.lcores.push_back(l1);
  LcoreSnapshot l2;
  l2.lcore = 2;
  l2.tx_queue = 1;
  l2.rx = {{"uplink", 1}};
  l2.slots = 2048;
  s.lcores.push_back(l2);

  s.mac_table = {3, 8192, 1, 300, 10, 2, 6, 1, 3};
  s.jobs = JobTable();
  AggregationSnapshot agg;
  agg.slot_latency.buckets[0] = 5;
  agg.slot_latency.count = 5;
  agg.slot_latency.sum_seconds = 0.001;
  agg.registrations[0] = 2;
  agg.tan = OwnTanSnapshot{};
  agg.tan->counters.first_data = 9;
  agg.tan->pending = 1;
  s.aggregation = agg;
  IntSnapshot& t = s.telemetry.emplace();
  t.node_id = 3;
  t.int_port = 7700;
  t.max_hops = 8;
  t.collector = "10.0.79.254:32766";
  t.fabric_ports = {"uplink"};
  t.watch.emplace_back().name = "grads";
  t.inserted = 5;
  return s;
}

std::vector<MacEntrySnapshot> MacEntries() {
  return {{10, Mac("02:00:00:00:00:0a"), 0, "uplink", false, 12.34},
          {10, Mac("02:00:00:00:00:0b"), 1, "host1", true, 0},
          {20, Mac("02:00:00:00:00:0c"), 0, "uplink", false, 0.5}};
}

// The first `limit` of `all`, as a dump answers a limit.
template <typename T, size_t N>
std::vector<T> FirstOf(const T (&all)[N], size_t limit, bool* truncated) {
  *truncated = limit < N;
  return std::vector<T>(all, all + std::min(limit, N));
}

dataplane::SlotDump Slots(size_t limit) {
  const dataplane::SlotInfo all[] = {{1, 17, false, false, 1, 17, 2, 4, 1, 0, 256, false, 0.002},
                                     {1, 18, true, false, 1, 18, 4, 4, 1, 0, 256, true, 0.004},
                                     {2, 900, false, true, 7, 3, 1, 3, 0, 2, 64, false, 1.5}};
  dataplane::SlotDump d;
  d.busy = 3;
  d.slots = FirstOf(all, limit, &d.truncated);
  return d;
}

dataplane::BypassDump Bypass(size_t limit) {
  const dataplane::BypassInfo all[] = {{1, 7, 3, 4, 0.25}, {2, 7, 4, 4, 0.5}};
  dataplane::BypassDump d;
  d.live = 2;
  d.entries = FirstOf(all, limit, &d.truncated);
  return d;
}

bool KnownJob(uint32_t id) {
  return id == 1 || id == 7;
}

DataSource Source(Calls& calls) {
  DataSource s;
  s.snapshot = [&calls] {
    ++calls.snapshot;
    return Snapshot();
  };
  s.mac_entries = [&calls] {
    ++calls.mac_entries;
    return MacEntries();
  };
  s.jobs = [&calls]() -> common::Result<JobTableSnapshot> {
    ++calls.jobs;
    return JobTable();
  };
  s.add_job = [&calls](const JobRequest& r) -> common::Result<JobSnapshot> {
    ++calls.add_job;
    if (KnownJob(r.job.id))
      return common::AlreadyExists("job " + std::to_string(r.job.id) + " exists");
    if (r.job.id % 10 == 4) return common::ResourceExhausted("the job table is full (64 jobs)");
    calls.add_job_ok = true;
    JobSnapshot j;
    j.id = r.job.id;
    j.index = 2;
    j.origin = "api";
    j.members = r.job.members;
    j.nodes = r.job.nodes;
    j.ordered = r.job.ordered;
    j.node_ids = r.job.node_ids;
    for (const config::ChildSwitchConfig& c : r.job.switches)
      j.switches.push_back({c.node, c.covers});
    j.timeout_ms = r.job.timeout_ms;
    j.tan_member = r.job.tan_member;
    j.parameter_server = r.job.parameter_server;
    return j;
  };
  s.remove_job = [&calls](uint32_t id) -> common::Status {
    ++calls.remove_job;
    if (!KnownJob(id)) return common::NotFound("job " + std::to_string(id) + " does not exist");
    calls.mutated = true;
    return common::Status::Ok();
  };
  s.unbind_member = [&calls](uint32_t id, uint16_t node) -> common::Status {
    ++calls.unbind_member;
    if (!KnownJob(id) || node >= 4) return common::NotFound("no member " + std::to_string(node));
    calls.mutated = true;
    return common::Status::Ok();
  };
  s.slots = [&calls](size_t limit) -> common::Result<dataplane::SlotDump> {
    ++calls.slots;
    return Slots(limit);
  };
  s.bypass = [&calls](size_t limit) -> common::Result<dataplane::BypassDump> {
    ++calls.bypass;
    return Bypass(limit);
  };
  s.stragglers = [&calls](uint32_t job,
                          const StragglerRequest& r) -> common::Result<StragglerReport> {
    ++calls.stragglers;
    if (!KnownJob(job)) return common::NotFound("job " + std::to_string(job) + " does not exist");
    if (r.apply || r.clear) calls.mutated = true;
    StragglerReport report;
    report.job = job;
    report.operations = 100;
    const uint32_t n = r.top ? std::min<uint32_t>(*r.top, 2) : 1;
    for (uint32_t i = 0; i < n; ++i) {
      report.predicted.push_back({static_cast<uint16_t>(i + 2), 0.001 * (i + 1)});
    }
    if (r.apply) {
      for (const StragglerReport::Member& m : report.predicted) report.excluded.push_back(m.node);
    }
    return report;
  };
  s.set_watch = [&calls](const std::vector<config::WatchEntry>& watch) -> common::Status {
    ++calls.set_watch;
    for (const config::WatchEntry& w : watch) {
      if (w.vlan == 99) return common::InvalidArgument("watch[0].vlan: no port carries VLAN 99");
    }
    calls.mutated = true;
    return common::Status::Ok();
  };
  s.decisions = [&calls] {
    ++calls.decisions;
    PathDecisionsView v;
    v.groups.push_back({"up", {"s1", "s2"}});
    v.decisions.push_back({*common::Ipv4Prefix::Parse("10.0.80.2/32"), "s2", 2, "up"});
    return v;
  };
  s.set_decisions = [&calls](const std::vector<PathDecisionEntry>& d) -> common::Status {
    ++calls.set_decisions;
    for (size_t i = 0; i < d.size(); ++i) {
      if (!d[i].port_index && d[i].port != "s1" && d[i].port != "s2") {
        return common::InvalidArgument("decisions[" + std::to_string(i) + "].port: no such port");
      }
    }
    calls.mutated = true;
    return common::Status::Ok();
  };
  s.tan = [&calls](uint32_t job, const std::optional<TanRequest>& r) -> common::Result<TanReport> {
    ++calls.tan;
    if (!KnownJob(job)) return common::NotFound("job " + std::to_string(job) + " does not exist");
    TanReport report;
    report.job = job;
    report.root = job == 1;
    if (r && r->choice && job == 7) {
      return common::FailedPrecondition("job 7 is rooted at another switch");
    }
    if (r) calls.mutated = true;
    if (r && r->choice) report.chosen = TanReport::Choice{TanReport::Source::kApi, *r->choice};
    if (r && r->set_member) report.member = r->member;
    if (job == 7) report.tan = TreeJob().tan;
    return report;
  };
  return s;
}

struct Request {
  std::string_view method, path, query, body;
  const DataSource* source;
  HttpResponse response;
};

// HandleRequest on a thread with a civetweb-sized stack (kRequestStackBytes,
// measured there); ASan's frames are larger than a release build's, so this
// is, if anything, stricter than production.
HttpResponse HandleOnSmallStack(Request& request) {
  testing::RunOnStack(kRequestStackBytes, [&] {
    request.response =
        HandleRequest(request.method, request.path, request.query, request.body, *request.source);
  });
  return std::move(request.response);
}

void CheckResponse(const Request& req, const HttpResponse& r, const Calls& calls) {
  FUZZ_CHECK(r.status >= 200 && r.status < 600);
  if (r.status == 500)
    std::fprintf(stderr, "500 for %.*s %.*s: %s", static_cast<int>(req.method.size()),
                 req.method.data(), static_cast<int>(req.path.size()), req.path.data(),
                 r.body.c_str());
  FUZZ_CHECK(r.status != 500);
  FUZZ_CHECK(calls.snapshot <= 1 && calls.mac_entries <= 1 && calls.jobs <= 1 &&
             calls.add_job <= 1 && calls.remove_job <= 1 && calls.unbind_member <= 1 && calls.slots <= 1 && calls.bypass <= 1 &&
             calls.stragglers <= 1 && calls.tan <= 1 && calls.set_watch <= 1 &&
             calls.decisions <= 1 && calls.set_decisions <= 1);
  if (req.method == "GET")
    FUZZ_CHECK(calls.add_job == 0 && calls.remove_job == 0 && calls.unbind_member == 0 &&
               calls.set_watch == 0 && calls.set_decisions == 0 && !calls.mutated);
  if (r.status == 201) FUZZ_CHECK(req.method == "POST" && calls.add_job_ok);
  if (r.status == 204) {
    FUZZ_CHECK(r.body.empty());
    return;
  }
  if (r.status == 405) FUZZ_CHECK(!r.allow.empty());
  if (r.status == 200 && req.path == "/metrics") {
    FUZZ_CHECK(r.content_type != kJsonContentType && !r.body.empty());
    return;
  }
  FUZZ_CHECK(r.content_type == kJsonContentType);
  FUZZ_CHECK(!r.body.empty() && r.body.back() == '\n');
  const nlohmann::json j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!j.is_discarded());
  if (r.status >= 400) {
    FUZZ_CHECK(j.is_object() && j.contains("error") && j["error"].is_string());
  }
}

}  // namespace
}  // namespace aggswitch::control

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  aggswitch::common::SetLogLevel(aggswitch::common::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace aggswitch::control;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t newline = in.find('\n');
  const std::string_view line = in.substr(0, newline);
  const std::string_view body = newline == std::string_view::npos ? "" : in.substr(newline + 1);
  const size_t space = line.find(' ');
  const std::string_view method = line.substr(0, space);
  const std::string_view target =
      space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  const size_t question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);

  Calls calls;
  const DataSource source = Source(calls);
  Request request{method, path, query, body, &source, {}};
  const HttpResponse response = HandleOnSmallStack(request);
  CheckResponse(request, response, calls);
  return 0;
}
