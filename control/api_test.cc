#include "control/api.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/types.h"
#include "common/prometheus.h"
#include "config/loader.h"
#include "control/job_control.h"
#include "control/metrics.h"
#include "tests/lib/small_stack.h"

namespace aggswitch::control {
namespace {

using dataplane::DropReason;
using aggregator::JobSpec;
using nlohmann::json;

StatsSnapshot SyntheticSnapshot() {
  StatsSnapshot s;
  s.build = {"0.1.0", "DPDK 22.11.4"};
  s.tsc_hz = 2'000'000'000;

  PortSnapshot p0;
  p0.index = 0;
  p0.name = "uplink";
  p0.devargs = "net_ring0";
  p0.driver = "net_ring";
  p0.port_id = 3;
  p0.mac = *common::MacAddr::Parse("02:00:00:00:00:01");
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
  p0.drops[static_cast<size_t>(DropReason::kHairpin)] = 5;
  p0.drops[static_cast<size_t>(DropReason::kTxFull)] = 7;
  p0.faults[static_cast<size_t>(dataplane::Fault::kReorder)] = 3;
  p0.dev_missed_packets = 3;
  s.ports.push_back(p0);

  PortSnapshot p1;
  p1.index = 1;
  p1.name = "host1";
  p1.driver = "net_ring";
  p1.vlan_mode = "access 10";
  p1.rx_packets = 5;
  p1.tx_packets = 6;
  p1.flooded_packets = 1;
  p1.drops[static_cast<size_t>(DropReason::kRunt)] = 1;
  s.ports.push_back(p1);

  LcoreSnapshot l1;
  l1.lcore = 1;
  l1.tx_queue = 0;
  l1.rx = {{"uplink", 0}, {"host1", 0}};
  l1.busy_cycles = 300000;
  l1.idle_cycles = 100000;
  l1.busy_packets = 2000;
  l1.polls = 50;
  s.lcores.push_back(l1);

  LcoreSnapshot l2;
  l2.lcore = 2;
  l2.tx_queue = 1;
  l2.rx = {{"uplink", 1}};
  s.lcores.push_back(l2);

  s.mac_table = {/*entries=*/3,        /*capacity=*/8192,
                 /*static_entries=*/1, /*aging_seconds=*/300,
                 /*learned=*/10,       /*moved=*/2,
                 /*aged=*/6,           /*static_conflicts=*/1,
                 /*learn_refused=*/3};
  return s;
}

std::vector<MacEntrySnapshot> SyntheticMacs() {
  std::vector<MacEntrySnapshot> v;
  v.push_back({10, *common::MacAddr::Parse("02:00:00:00:00:0a"), 0, "uplink", false, 12.34});
  v.push_back({10, *common::MacAddr::Parse("02:00:00:00:00:0b"), 1, "host1", true, 0});
  v.push_back({20, *common::MacAddr::Parse("02:00:00:00:00:0c"), 0, "uplink", false, 0.5});
  return v;
}

// Whether `body` has "key":number with exactly that text, not a longer number.
bool HasNumber(const std::string& body, const std::string& key, const std::string& number) {
  const std::string needle = "\"" + key + "\":" + number;
  for (size_t pos = body.find(needle); pos != std::string::npos; pos = body.find(needle, pos + 1)) {
    const size_t end = pos + needle.size();
    if (end == body.size() || !std::isdigit(static_cast<unsigned char>(body[end]))) return true;
  }
  return false;
}

DataSource Source(std::function<StatsSnapshot()> snapshot,
                  std::function<std::vector<MacEntrySnapshot>()> mac_entries) {
  DataSource source;
  source.snapshot = std::move(snapshot);
  source.mac_entries = std::move(mac_entries);
  return source;
}

DataSource SyntheticSource() {
  return Source([] { return SyntheticSnapshot(); }, [] { return SyntheticMacs(); });
}

TEST(ApiTest, PortsJsonShape) {
  const json j = json::parse(PortsJson(SyntheticSnapshot()));
  ASSERT_EQ(j["ports"].size(), 2u);
  const json& p = j["ports"][0];
  EXPECT_EQ(p["index"], 0);
  EXPECT_EQ(p["name"], "uplink");
  EXPECT_EQ(p["port_id"], 3);
  EXPECT_EQ(p["driver"], "net_ring");
  EXPECT_EQ(p["devargs"], "net_ring0");
  EXPECT_EQ(p["mac"], "02:00:00:00:00:01");
  EXPECT_EQ(p["link_up"], true);
  EXPECT_EQ(p["link_speed_mbps"], 10000);
  EXPECT_EQ(p["rx_queues"], 2);
  EXPECT_EQ(p["tx_queues"], 1);
  EXPECT_EQ(p["vlan_mode"], "trunk 10,20 native 1");
  EXPECT_EQ(p["rx_packets"], 1000);
  EXPECT_EQ(p["rx_bytes"], 64000);
  EXPECT_EQ(p["tx_packets"], 900);
  EXPECT_EQ(p["tx_bytes"], 57600);
  EXPECT_EQ(p["flooded_packets"], 12);
  EXPECT_EQ(p["dropped_packets"], 12);
  EXPECT_EQ(p["drops"]["hairpin"], 5);
  EXPECT_EQ(p["drops"]["tx_full"], 7);
  EXPECT_EQ(p["drops"].size(), dataplane::kNumDropReasons);
  for (const DropReasonText& t : kDropReasonText) EXPECT_TRUE(p["drops"].contains(t.label));
  EXPECT_EQ(p["faults"]["reorder"], 3);
  EXPECT_EQ(p["faults"]["drop"], 0);
  EXPECT_EQ(p["faults"].size(), dataplane::kNumFaults);
  EXPECT_EQ(p["device"]["missed_packets"], 3);
  EXPECT_EQ(p["device"]["rx_errors"], 0);
  EXPECT_EQ(p["device"]["tx_errors"], 0);
  EXPECT_EQ(p["device"]["rx_nombuf"], 0);
  EXPECT_EQ(j["ports"][1]["link_up"], false);
}

TEST(ApiTest, LcoresJsonHasCyclesPerPacket) {
  const json j = json::parse(LcoresJson(SyntheticSnapshot()));
  EXPECT_EQ(j["tsc_hz"], 2000000000);
  ASSERT_EQ(j["lcores"].size(), 2u);
  const json& l = j["lcores"][0];
  EXPECT_EQ(l["lcore"], 1);
  EXPECT_EQ(l["tx_queue"], 0);
  ASSERT_EQ(l["rx"].size(), 2u);
  EXPECT_EQ(l["rx"][1]["port"], "host1");
  EXPECT_EQ(l["rx"][1]["queue"], 0);
  EXPECT_EQ(l["busy_cycles"], 300000);
  EXPECT_EQ(l["idle_cycles"], 100000);
  EXPECT_EQ(l["busy_packets"], 2000);
  EXPECT_EQ(l["polls"], 50);
  for (const char* key : {"learn_requests", "learn_ring_full", "arp_replies", "icmp_replies"}) {
    EXPECT_EQ(l[key], 0) << key;
  }
  EXPECT_DOUBLE_EQ(l["cycles_per_packet"].get<double>(), 150.0);
  EXPECT_DOUBLE_EQ(l["busy_percent"].get<double>(), 75.0);
  // An lcore that has seen no packet has no cycles per packet.
  EXPECT_TRUE(j["lcores"][1]["cycles_per_packet"].is_null());
  EXPECT_DOUBLE_EQ(j["lcores"][1]["busy_percent"].get<double>(), 0.0);
}

// Each lcore's aggregation object names every malformed reason, the wire
// parser's among them, zeros included.
TEST(ApiTest, LcoresJsonHasMalformedByReason) {
  StatsSnapshot s = SyntheticSnapshot();
  s.lcores[0].malformed[static_cast<size_t>(dataplane::MalformedReason::kCountMismatch)] = 5;
  const json j = json::parse(LcoresJson(s));
  const json& malformed = j["lcores"][0]["aggregation"]["malformed"];
  ASSERT_EQ(malformed.size(), dataplane::kNumMalformedReasons);
  EXPECT_EQ(malformed["count_mismatch"], 5);
  EXPECT_EQ(malformed["bad_magic"], 0);
  EXPECT_EQ(j["lcores"][1]["aggregation"]["malformed"]["count_mismatch"], 0);
}

TEST(ApiTest, CyclesPerPacketIsRounded) {
  StatsSnapshot s = SyntheticSnapshot();
  s.lcores[0].busy_cycles = 1000;
  s.lcores[0].busy_packets = 3;
  const json j = json::parse(LcoresJson(s));
  EXPECT_DOUBLE_EQ(j["lcores"][0]["cycles_per_packet"].get<double>(), 333.3);
}

// Rounded values print as short decimals, without binary floating-point noise.
TEST(ApiTest, RoundedValuesPrintShort) {
  std::vector<MacEntrySnapshot> macs = SyntheticMacs();
  macs[0].age_seconds = 5.58;
  StatsSnapshot s = SyntheticSnapshot();
  s.lcores[0].busy_cycles = 56;
  s.lcores[0].idle_cycles = 44;
  s.lcores[0].busy_packets = 10;
  auto mac = MacJson(s, macs, {});
  ASSERT_TRUE(mac.ok());
  EXPECT_TRUE(HasNumber(*mac, "age_seconds", "5.6")) << *mac;
  const std::string lcores = LcoresJson(s);
  EXPECT_TRUE(HasNumber(lcores, "busy_percent", "56.0")) << lcores;
  EXPECT_TRUE(HasNumber(lcores, "cycles_per_packet", "5.6")) << lcores;
}

TEST(ApiTest, StatsJsonSummarisesEverything) {
  const json j = json::parse(StatsJson(SyntheticSnapshot()));
  EXPECT_EQ(j["build"]["version"], "0.1.0");
  EXPECT_EQ(j["build"]["dpdk_version"], "DPDK 22.11.4");
  EXPECT_EQ(j["tsc_hz"], 2000000000);
  EXPECT_EQ(j["totals"]["rx_packets"], 1005);
  EXPECT_EQ(j["totals"]["tx_packets"], 906);
  EXPECT_EQ(j["totals"]["flooded_packets"], 13);
  EXPECT_EQ(j["totals"]["dropped_packets"], 13);
  EXPECT_EQ(j["ports"].size(), 2u);
  EXPECT_EQ(j["ports"][1]["drops"]["runt"], 1);
  EXPECT_EQ(j["lcores"].size(), 2u);
  const json& m = j["mac_table"];
  EXPECT_EQ(m["size"], 3);
  EXPECT_EQ(m["capacity"], 8192);
  EXPECT_EQ(m["static_entries"], 1);
  EXPECT_EQ(m["aging_seconds"], 300);
  EXPECT_EQ(m["events"]["learned"], 10);
  EXPECT_EQ(m["events"]["moved"], 2);
  EXPECT_EQ(m["events"]["aged"], 6);
  EXPECT_EQ(m["events"]["static_conflicts"], 1);
  EXPECT_EQ(m["events"]["learn_refused"], 3);
  // The port objects are the same as /api/v1/ports'.
  EXPECT_EQ(j["ports"], json::parse(PortsJson(SyntheticSnapshot()))["ports"]);
}

TEST(ApiTest, ParseMacQueryAcceptsFilters) {
  auto q = ParseMacQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->vlan);
  EXPECT_FALSE(q->port);

  q = ParseMacQuery("vlan=10&port=uplink");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->vlan, 10);
  EXPECT_EQ(q->port, "uplink");

  q = ParseMacQuery("port=my%20port&&vlan=4094");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->port, "my port");
  EXPECT_EQ(q->vlan, 4094);

  q = ParseMacQuery("port=a+b");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->port, "a b");
}

TEST(ApiTest, ParseMacQueryRejectsMistakes) {
  for (const char* query : {"vlan=0", "vlan=4095", "vlan=abc", "vlan=", "vlan=10x", "vlan=-1",
                            "port=", "colour=red", "port=%zz", "port=%4", "vlan"}) {
    const auto q = ParseMacQuery(query);
    EXPECT_FALSE(q.ok()) << query;
    if (!q.ok()) {
      EXPECT_EQ(q.status().code(), common::StatusCode::kInvalidArgument) << query;
    }
  }
  EXPECT_NE(ParseMacQuery("colour=red").status().message().find("colour"), std::string::npos);
}

TEST(ApiTest, MacJsonListsAndFilters) {
  const StatsSnapshot snap = SyntheticSnapshot();
  const std::vector<MacEntrySnapshot> macs = SyntheticMacs();

  auto body = MacJson(snap, macs, {});
  ASSERT_TRUE(body.ok());
  json j = json::parse(*body);
  EXPECT_EQ(j["count"], 3);
  EXPECT_EQ(j["table"]["size"], 3);
  EXPECT_EQ(j["table"]["events"]["learned"], 10);
  EXPECT_TRUE(j["filter"]["vlan"].is_null());
  EXPECT_TRUE(j["filter"]["port"].is_null());
  const json& e0 = j["entries"][0];
  EXPECT_EQ(e0["vlan"], 10);
  EXPECT_EQ(e0["mac"], "02:00:00:00:00:0a");
  EXPECT_EQ(e0["port"], "uplink");
  EXPECT_EQ(e0["port_index"], 0);
  EXPECT_EQ(e0["type"], "dynamic");
  EXPECT_DOUBLE_EQ(e0["age_seconds"].get<double>(), 12.3);
  EXPECT_TRUE(HasNumber(*body, "age_seconds", "12.3")) << *body;
  EXPECT_EQ(j["entries"][1]["type"], "static");
  EXPECT_TRUE(j["entries"][1]["age_seconds"].is_null());

  body = MacJson(snap, macs, {10, std::nullopt});
  ASSERT_TRUE(body.ok());
  j = json::parse(*body);
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["filter"]["vlan"], 10);

  body = MacJson(snap, macs, {std::nullopt, "uplink"});
  ASSERT_TRUE(body.ok());
  j = json::parse(*body);
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["filter"]["port"], "uplink");

  // A port index works too, and is reported by name.
  body = MacJson(snap, macs, {10, "1"});
  ASSERT_TRUE(body.ok());
  j = json::parse(*body);
  EXPECT_EQ(j["count"], 1);
  EXPECT_EQ(j["entries"][0]["mac"], "02:00:00:00:00:0b");
  EXPECT_EQ(j["filter"]["port"], "host1");

  body = MacJson(snap, macs, {4000, std::nullopt});
  ASSERT_TRUE(body.ok());
  j = json::parse(*body);
  EXPECT_EQ(j["count"], 0);
  EXPECT_TRUE(j["entries"].is_array());
}

TEST(ApiTest, MacJsonRejectsUnknownPort) {
  for (const char* port : {"nope", "7"}) {
    const auto body = MacJson(SyntheticSnapshot(), SyntheticMacs(), {std::nullopt, port});
    ASSERT_FALSE(body.ok()) << port;
    EXPECT_NE(body.status().message().find("uplink, host1"), std::string::npos)
        << body.status().message();
  }
}

TEST(ApiTest, RoutesEveryEndpoint) {
  const DataSource source = SyntheticSource();
  for (const char* path : {"/api/v1/ports", "/api/v1/mac", "/api/v1/lcores", "/api/v1/stats"}) {
    const HttpResponse r = HandleRequest("GET", path, "", source);
    EXPECT_EQ(r.status, 200) << path;
    EXPECT_EQ(r.content_type, "application/json") << path;
    EXPECT_NO_THROW(json::parse(r.body)) << path;
  }
  const HttpResponse m = HandleRequest("GET", "/metrics", "", source);
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type, common::kPrometheusContentType);
  EXPECT_EQ(m.body, RenderPrometheus(SyntheticSnapshot()));

  const HttpResponse mac = HandleRequest("GET", "/api/v1/mac", "vlan=20", source);
  EXPECT_EQ(json::parse(mac.body)["count"], 1);
}

TEST(ApiTest, UnknownPathIs404WithRouteList) {
  const HttpResponse r = HandleRequest("GET", "/api/v1/nope", "", SyntheticSource());
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.content_type, "application/json");
  const json j = json::parse(r.body);
  EXPECT_EQ(j["error"], "no route /api/v1/nope");
  EXPECT_EQ(j["routes"].size(), 14u);
  EXPECT_EQ(j["routes"][13], "/api/v1/int/decisions");
  EXPECT_EQ(j["routes"][11], "/api/v1/bypass");
  EXPECT_EQ(j["routes"][5], "/api/v1/jobs");
  EXPECT_EQ(j["routes"][7], "/api/v1/jobs/<id>/stragglers");
  EXPECT_EQ(j["routes"][8], "/api/v1/jobs/<id>/tan");
  EXPECT_EQ(j["routes"][9], "/api/v1/jobs/<id>/members/<node>");
  EXPECT_EQ(j["routes"][10], "/api/v1/slots");
  EXPECT_EQ(HandleRequest("GET", "/", "", SyntheticSource()).status, 404);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/ports/", "", SyntheticSource()).status, 404);
}

// The operations guide's route table is the router's: the same routes, in
// the same order, with the same methods and descriptions.
TEST(ApiTest, TheOperationsGuideListsTheRoutersRoutes) {
  std::ifstream in(AGG_SOURCE_DIR "/docs/operations.md");
  ASSERT_TRUE(in) << "docs/operations.md";
  std::vector<std::string> documented;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) == 0 && line.find("` | `/") != std::string::npos) {
      documented.push_back(line);
    }
  }
  std::vector<std::string> routed;
  for (const ApiRoute& route : ApiRoutes()) {
    routed.push_back("| `" + std::string(route.methods) + "` | `" + std::string(route.pattern) +
                     "` | " + std::string(route.doc) + " |");
  }
  EXPECT_EQ(documented, routed);
  const HttpResponse r = HandleRequest("GET", "/api/v1/nope", "", SyntheticSource());
  EXPECT_EQ(json::parse(r.body)["routes"].size(), routed.size()) << "a 404 lists them all";
}

TEST(ApiTest, NonGetIs405) {
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD"}) {
    const HttpResponse r = HandleRequest(method, "/api/v1/ports", "", SyntheticSource());
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.allow, "GET");
    EXPECT_TRUE(json::parse(r.body).contains("error"));
  }
}

TEST(ApiTest, BadMacQueryIs400) {
  HttpResponse r = HandleRequest("GET", "/api/v1/mac", "vlan=5000", SyntheticSource());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find("vlan"), std::string::npos);
  r = HandleRequest("GET", "/api/v1/mac", "port=nope", SyntheticSource());
  EXPECT_EQ(r.status, 400);
}

TEST(ApiTest, OnlyTheMacRouteCollectsMacEntries) {
  int mac_calls = 0;
  int snapshot_calls = 0;
  const DataSource source = Source(
      [&] {
        ++snapshot_calls;
        return SyntheticSnapshot();
      },
      [&] {
        ++mac_calls;
        return SyntheticMacs();
      });
  for (const char* path : {"/metrics", "/api/v1/ports", "/api/v1/lcores", "/api/v1/stats"}) {
    EXPECT_EQ(HandleRequest("GET", path, "", source).status, 200);
  }
  EXPECT_EQ(mac_calls, 0);
  EXPECT_EQ(snapshot_calls, 4);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/mac", "", source).status, 200);
  EXPECT_EQ(mac_calls, 1);
  EXPECT_EQ(snapshot_calls, 5);
}

TEST(ApiTest, SourceFailureIs500) {
  const DataSource source = Source([]() -> StatsSnapshot { throw std::runtime_error("boom"); },
                                   [] { return SyntheticMacs(); });
  const HttpResponse r = HandleRequest("GET", "/api/v1/stats", "", source);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["error"], "internal error: boom");
}

TEST(ApiTest, InvalidUtf8IsReplacedNotThrown) {
  StatsSnapshot s = SyntheticSnapshot();
  s.ports[0].name = "bad\xff";
  const json j = json::parse(PortsJson(s));
  EXPECT_EQ(j["ports"][0]["name"], "bad\xEF\xBF\xBD");
}

// --- The job routes, against a synthetic job source ----------------------------------

JobTableSnapshot SyntheticJobs() {
  JobTableSnapshot t;
  t.capacity = 1024;
  t.max_fan_in = 256;
  t.in_band_registration = true;
  JobSnapshot a;
  a.id = 7;
  a.index = 0;
  a.origin = "config";
  a.members = 2;
  a.learned = 1;
  a.min_ack = 41;
  JobMemberSnapshot m0;
  m0.node = 0;
  m0.has_address = true;
  m0.mac = *common::MacAddr::Parse("02:00:00:00:00:0a");
  m0.port_index = 1;
  m0.port = "host1";
  m0.vlan = 10;
  m0.ip = *common::Ipv4Addr::Parse("10.0.10.1");
  m0.udp_port = 40001;
  m0.ack_watermark = 41;
  JobMemberSnapshot m1;  // only an ACK seen so far
  m1.node = 1;
  m1.ack_watermark = 45;
  a.learned_members = {m0, m1};
  JobCounterValues counters{};
  counters[static_cast<size_t>(dataplane::JobCounter::contributions)] = 40;
  counters[static_cast<size_t>(dataplane::JobCounter::completions)] = 20;
  counters[static_cast<size_t>(dataplane::JobCounter::duplicates)] = 3;
  counters[static_cast<size_t>(dataplane::JobCounter::key_failures)] = 1;
  counters[static_cast<size_t>(dataplane::JobCounter::reduced_bytes)] = 56960;
  a.counters = counters;
  // A root with a worker and a child switch, its TAN remote and resolved.
  a.node_ids = {0};
  a.switches = {{100, {4, 5}}};
  a.timeout_ms = 20;
  a.tan.mode = "remote";
  a.tan.address = *common::Ipv4Addr::Parse("10.0.9.50");
  a.tan.port = 47000;
  a.tan.resolved = true;
  a.parameter_server = true;
  JobSnapshot b;
  b.id = 9;
  b.index = 3;
  b.origin = "api";
  b.members = 4;
  b.nodes = 2;
  b.ordered = true;
  // A leaf: workers only, an upstream not resolved yet, and the TAN run by a worker.
  b.node_ids = {4, 5, 6, 7};
  b.upstreams = {JobUpstreamSnapshot{*common::Ipv4Addr::Parse("10.0.9.1"), 47001, 100, 10, false}};
  b.batch = true;
  b.tan_member = 6;
  t.jobs = {a, b};
  return t;
}

// The request of a flat job, as {"id", "key", "members"[, "nodes"][, "ordered"]} gives it.
JobRequest FlatJob(uint32_t id, uint64_t key, uint16_t members, uint16_t nodes = 1,
                   bool ordered = false) {
  JobRequest r;
  r.job.id = id;
  r.job.key = key;
  r.job.members = members;
  r.job.nodes = nodes;
  r.job.ordered = ordered;
  r.keys = {"members"};
  return r;
}

// A job source that records what it was asked.
struct FakeJobs {
  std::vector<JobRequest> added;
  std::vector<uint32_t> removed;
  common::Status add_status;
  common::Status remove_status;

  DataSource Attach(DataSource source) {
    source.jobs = [] { return common::Result<JobTableSnapshot>(SyntheticJobs()); };
    source.add_job = [this](const JobRequest& r) -> common::Result<JobSnapshot> {
      added.push_back(r);
      if (!add_status.ok()) return add_status;
      JobSnapshot s;
      s.id = r.job.id;
      s.origin = "api";
      s.members = r.job.members;
      s.nodes = r.job.nodes;
      s.ordered = r.job.ordered;
      return s;
    };
    source.remove_job = [this](uint32_t id) {
      removed.push_back(id);
      return remove_status;
    };
    return source;
  }
};

TEST(ApiJobsTest, JobsJsonShape) {
  const json j = json::parse(JobsJson(SyntheticJobs()));
  EXPECT_EQ(j["capacity"], 1024);
  EXPECT_EQ(j["max_fan_in"], 256);
  EXPECT_EQ(j["in_band_registration"], true);
  EXPECT_EQ(j["count"], 2);
  const json& a = j["jobs"][0];
  EXPECT_EQ(a["id"], 7);
  EXPECT_EQ(a["index"], 0);
  EXPECT_EQ(a["origin"], "config");
  EXPECT_EQ(a["members"], 2);
  EXPECT_EQ(a["nodes"], 1);
  EXPECT_EQ(a["ordered"], false);
  EXPECT_EQ(a["learned"], 1);
  EXPECT_EQ(a["min_ack"], 41);
  EXPECT_FALSE(a.contains("key")) << "the job key is a secret";
  ASSERT_EQ(a["learned_members"].size(), 2u);
  const json& m0 = a["learned_members"][0];
  EXPECT_EQ(m0["node"], 0);
  EXPECT_EQ(m0["mac"], "02:00:00:00:00:0a");
  EXPECT_EQ(m0["ip"], "10.0.10.1");
  EXPECT_EQ(m0["udp_port"], 40001);
  EXPECT_EQ(m0["port"], "host1");
  EXPECT_EQ(m0["port_index"], 1);
  EXPECT_EQ(m0["vlan"], 10);
  EXPECT_EQ(m0["ack_watermark"], 41);
  const json& m1 = a["learned_members"][1];
  EXPECT_TRUE(m1["mac"].is_null());
  EXPECT_TRUE(m1["ip"].is_null());
  EXPECT_TRUE(m1["port"].is_null());
  EXPECT_EQ(m1["ack_watermark"], 45);
  const json& c = a["counters"];
  ASSERT_TRUE(c.is_object());
  EXPECT_EQ(c.size(), dataplane::kNumJobCounters);
  EXPECT_EQ(c["contributions"], 40);
  EXPECT_EQ(c["completions"], 20);
  EXPECT_EQ(c["duplicates"], 3);
  EXPECT_EQ(c["collisions"], 0);
  EXPECT_EQ(c["key_failures"], 1);
  EXPECT_EQ(c["reduced_bytes"], 56960);
  EXPECT_EQ(a["node_ids"], json::parse("[0]"));
  EXPECT_EQ(a["switches"], json::parse(R"([{"node": 100, "covers": [4, 5]}])"));
  EXPECT_TRUE(a["upstream"].is_null()) << "the root";
  EXPECT_EQ(a["timeout_ms"], 20);
  EXPECT_EQ(a["trigger"], "incremental");
  EXPECT_EQ(a["tan"],
            json::parse(
                R"({"mode": "remote", "address": "10.0.9.50", "port": 47000, "resolved": true})"));
  EXPECT_TRUE(a["tan_member"].is_null());
  EXPECT_EQ(a["parameter_server"], true);
  const json& b = j["jobs"][1];
  EXPECT_EQ(b["node_ids"], json::parse("[4, 5, 6, 7]"));
  EXPECT_EQ(b["switches"], json::array());
  EXPECT_EQ(
      b["upstream"],
      json::parse(
          R"({"address": "10.0.9.1", "port": 47001, "node": 100, "vlan": 10, "resolved": false})"));
  EXPECT_TRUE(b["timeout_ms"].is_null()) << "no TSC frequency to convert with";
  EXPECT_EQ(b["trigger"], "batch");
  EXPECT_EQ(b["tan"],
            json::parse(R"({"mode": "none", "address": null, "port": null, "resolved": false})"));
  EXPECT_EQ(b["tan_member"], 6);
  EXPECT_EQ(b["parameter_server"], false);
  EXPECT_EQ(b["nodes"], 2);
  EXPECT_EQ(b["ordered"], true);
  EXPECT_TRUE(b["min_ack"].is_null());
  EXPECT_TRUE(b["counters"].is_null()) << "no counters read for this job";
  EXPECT_TRUE(b["learned_members"].is_array());
  EXPECT_EQ(json::parse(JobJson(SyntheticJobs().jobs[1])), b);
}

TEST(ApiJobsTest, ParseJobRequestAcceptsEveryForm) {
  auto r = ParseJobRequest(R"({"id": 7, "key": 12345, "members": 4})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, FlatJob(7, 12345, 4));
  r = ParseJobRequest(
      R"({"ordered": true, "nodes": 3, "members": 65535, "key": "0xFFFFFFFFFFFFFFFF", "id": 4294967295})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, FlatJob(4294967295u, ~0ull, 65535, 3, true));
  r = ParseJobRequest(R"({"id": 1, "key": 18446744073709551615, "members": 1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job.key, ~0ull);
  {
    const auto with_server = ParseJobRequest(R"({"id": 1, "key": 1, "members": 2, "main_server": "10.0.0.9"})");
    ASSERT_TRUE(with_server.ok()) << with_server.status().message();
    EXPECT_EQ(with_server->job.main_server->ToString(), "10.0.0.9:0");
  }
  {
    const auto stored = ParseJobRequest(R"({"id": 1, "key": 1, "members": 2, "mode": "store"})");
    ASSERT_TRUE(stored.ok()) << stored.status().message();
    EXPECT_EQ(stored->job.mode, config::JobMode::kStore);
  }
  r = ParseJobRequest(R"({"id": 1, "key": "42", "members": 1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job.key, 42u);
}

// Every key of the config's aggregation.jobs[] lands where the loader puts it.
TEST(ApiJobsTest, ParseJobRequestReadsTheTree) {
  auto r = ParseJobRequest(R"({"id": 9, "key": "0x9", "nodes": 3, "ordered": true,
      "node_ids": [0, "2-3", "5"],
      "switches": [{"node": 100, "covers": ["10-11", 12]}, {"node": 101}],
      "upstream": {"address": "10.0.9.1", "port": 47001, "node": 7, "vlan": 10},
      "timeout_ms": 20, "trigger": "batch", "tan_member": 2, "parameter_server": true})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const config::AggregationJobConfig& job = r->job;
  EXPECT_EQ(job.id, 9u);
  EXPECT_EQ(job.key, 9u);
  EXPECT_EQ(job.nodes, 3);
  EXPECT_TRUE(job.ordered);
  EXPECT_EQ(job.node_ids, (std::vector<uint16_t>{0, 2, 3, 5}));
  ASSERT_EQ(job.switches.size(), 2u);
  EXPECT_EQ(job.switches[0].node, 100);
  EXPECT_EQ(job.switches[0].covers, (std::vector<uint16_t>{10, 11, 12}));
  EXPECT_EQ(job.switches[1].node, 101);
  EXPECT_TRUE(job.switches[1].covers.empty());
  EXPECT_EQ(job.members, 6) << "the lists count the members";
  ASSERT_TRUE(job.upstream);
  EXPECT_EQ(job.upstream->address.ToString(), "10.0.9.1");
  EXPECT_EQ(job.upstream->port, 47001);
  EXPECT_EQ(job.upstream->node, 7);
  EXPECT_EQ(job.upstream->vlan, 10);
  EXPECT_EQ(job.timeout_ms, std::optional<uint32_t>(20));
  EXPECT_EQ(job.trigger, std::optional(config::AggTrigger::kBatch));
  EXPECT_EQ(job.tan_member, std::optional<uint16_t>(2));
  EXPECT_TRUE(job.parameter_server) << "read here; Validate() refuses it with an upstream";
  EXPECT_FALSE(job.tan);
  EXPECT_EQ(r->keys, (std::vector<std::string>{"node_ids", "switches"}));

  // The defaults are the config's: upstream port 47000 and VLAN 0, no
  // per-job timer, trigger or TAN (the switch-wide values apply).
  r = ParseJobRequest(R"({"id": 9, "key": 1, "members": 4, "node_ids": ["0-3"],
      "upstream": {"address": "10.0.9.1", "node": 7},
      "tan": {"candidates": [{"address": "10.0.9.50"}]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.members, 4) << "a members key stays, for Validate() to compare";
  EXPECT_EQ(r->job.upstream->port, config::kDefaultAggregationUdpPort);
  EXPECT_EQ(r->job.upstream->vlan, 0);
  EXPECT_FALSE(r->job.timeout_ms);
  EXPECT_FALSE(r->job.trigger);
  EXPECT_FALSE(r->job.parameter_server);
  ASSERT_TRUE(r->job.tan);
  EXPECT_EQ(r->job.tan->strategy, config::TanStrategy::kFixed);
  ASSERT_EQ(r->job.tan->candidates.size(), 1u);
  EXPECT_EQ(r->job.tan->candidates[0].port, config::kDefaultAggregationUdpPort);
  EXPECT_EQ(r->job.tan->candidates[0].hops, 0);
  EXPECT_EQ(r->keys, (std::vector<std::string>{"tan.candidates", "members", "node_ids"}));

  r = ParseJobRequest(R"({"id": 9, "key": 1, "members": 2, "trigger": "incremental",
      "tan": {"strategy": "fewest_hops", "candidates": [{"address": "10.0.9.50", "hops": 3},
                                                        {"address": "10.0.9.51", "port": 1}]}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job.trigger, std::optional(config::AggTrigger::kIncremental));
  EXPECT_EQ(r->job.tan->strategy, config::TanStrategy::kFewestHops);
  EXPECT_EQ(r->job.tan->candidates[0].hops, 3);
  EXPECT_EQ(r->job.tan->candidates[1].port, 1);
  r = ParseJobRequest(R"({"id": 9, "key": 1, "members": 2, "tan": {"strategy": "self"}})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job.tan->strategy, config::TanStrategy::kSelf);
  // An empty list is read as such; Validate() reports that it lists nobody.
  r = ParseJobRequest(R"({"id": 9, "key": 1, "node_ids": []})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job.members, 0);
  EXPECT_EQ(r->keys, (std::vector<std::string>{"node_ids"}));
}

// A mistake in the shape of a key: its key path, and what it takes.
TEST(ApiJobsTest, ParseJobRequestNamesTheTreeKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"id": 1, "key": 1})",
       "missing field \"members\" (or the members' node ids in \"node_ids\" and \"switches\")"},
      {R"({"id": 1, "key": 1, "node_ids": "0-3"})",
       "node_ids must be a list of node ids (numbers or \"a-b\" ranges), got \"0-3\""},
      {R"({"id": 1, "key": 1, "node_ids": [0, "3-1"]})",
       "node_ids[1] must be a node id 0..65534 or a range \"a-b\" of them (a <= b), got \"3-1\""},
      {R"({"id": 1, "key": 1, "node_ids": [65535]})",
       "node_ids[0] must be a node id 0..65534 or a range"},
      {R"({"id": 1, "key": 1, "node_ids": [1.5]})", "node_ids[0] must be a node id"},
      {R"({"id": 1, "key": 1, "node_ids": [-1]})", "node_ids[0] must be a node id"},
      {R"({"id": 1, "key": 1, "node_ids": ["0-3", "x"]})",
       "node_ids[4] must be a node id 0..65534 or a range \"a-b\" of them (a <= b), got \"x\""},
      {R"({"id": 1, "key": 1, "node_ids": ["0-65534", 1]})",
       "node_ids[65535] brings the node ids listed above 65535"},
      {R"({"id": 1, "key": 1, "switches": [{"node": 1, "covers": ["0-40000"]},
                                            {"node": 2, "covers": ["0-40000"]}]})",
       "switches[1].covers[0] brings the node ids listed above 65535"},
      {R"({"id": 1, "key": 1, "switches": {"node": 1}})",
       "switches must be a list of {node, covers}, got an object with 1 key"},
      {R"({"id": 1, "key": 1, "switches": [1]})",
       "switches[0] must be an object {node, covers}, got 1"},
      {R"({"id": 1, "key": 1, "switches": [{"covers": [1]}]})",
       "missing field \"switches[0].node\""},
      {R"({"id": 1, "key": 1, "switches": [{"node": 65535}]})",
       "switches[0].node must be 0..65534, got 65535"},
      {R"({"id": 1, "key": 1, "switches": [{"node": 1}, {"node": 2, "covers": [0, "x"]}]})",
       "switches[1].covers[1] must be a node id 0..65534"},
      {R"({"id": 1, "key": 1, "switches": [{"node": 1, "colour": 1}]})",
       "unknown field \"switches[0].colour\"; expected node, covers"},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": "10.0.9.1"})",
       "upstream must be an object {address, port, node, vlan}, got \"10.0.9.1\""},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"node": 1}})",
       "missing field \"upstream.address\""},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"address": "10.0.9", "node": 1}})",
       "upstream.address must be an IPv4 address \"a.b.c.d\", got \"10.0.9\""},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"address": "10.0.9.1"}})",
       "missing field \"upstream.node\" (this switch's node id at the parent switch)"},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"address": "10.0.9.1", "node": 1, "port": 0}})",
       "upstream.port must be 1..65535, got 0"},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"address": "10.0.9.1", "node": 1, "vlan": 4095}})",
       "upstream.vlan must be 0..4094, got 4095"},
      {R"({"id": 1, "key": 1, "members": 2, "upstream": {"address": "10.0.9.1", "node": 1, "via": 2}})",
       "unknown field \"upstream.via\"; expected address, port, node, vlan"},
      {R"({"id": 1, "key": 1, "members": 2, "timeout_ms": 3600001})",
       "timeout_ms must be 0..3600000, got 3600001"},
      {R"({"id": 1, "key": 1, "members": 2, "timeout_ms": "20"})",
       "timeout_ms must be an integer 0..3600000, got \"20\""},
      {R"({"id": 1, "key": 1, "members": 2, "trigger": "eager"})",
       "trigger must be \"incremental\" or \"batch\", got \"eager\""},
      {R"({"id": 1, "key": 1, "members": 2, "tan": []})",
       "tan must be an object {strategy, candidates}, got []"},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"strategy": "closest"}})",
       "tan.strategy must be fixed, random, least_load, fewest_hops or self, got \"closest\""},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": {"address": "10.0.9.50"}}})",
       "tan.candidates must be a list of {address, port, hops}"},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": [{"address": "x"}]}})",
       "tan.candidates[0].address must be an IPv4 address \"a.b.c.d\", got \"x\""},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": [{"port": 1}]}})",
       "missing field \"tan.candidates[0].address\""},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": [{"address": "10.0.9.50", "hops": 256}]}})",
       "tan.candidates[0].hops must be 0..255, got 256"},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": [{"address": "10.0.9.50", "port": 0}]}})",
       "tan.candidates[0].port must be 1..65535, got 0"},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"candidates": [{"address": "10.0.9.50", "weight": 1}]}})",
       "unknown field \"tan.candidates[0].weight\"; expected address, port, hops"},
      {R"({"id": 1, "key": 1, "members": 2, "tan": {"weight": 1}})",
       "unknown field \"tan.weight\"; expected strategy, candidates"},
      {R"({"id": 1, "key": 1, "members": 2, "tan_member": 65535})",
       "tan_member must be 0..65534, got 65535"},
      {R"({"id": 1, "key": 1, "members": 2, "parameter_server": 1})",
       "parameter_server must be true or false, got 1"},
      {R"({"id": 1, "key": 1, "members": 2, "parameter_server": "true"})",
       "parameter_server must be true or false, got \"true\""},
      {R"({"id": 1, "key": 1, "members": 2, "colour": "red"})",
       "unknown field \"colour\"; expected id, key, members, nodes, ordered, node_ids, switches, "
       "upstream, timeout_ms, trigger, tan, tan_member, parameter_server, verify, placement_hint, "
       "main_server, mode"},
      {R"({"id": 1, "key": 1, "members": 2, "mode": "cache"})",
       "mode must be \"aggregate\", \"store\" or \"both\", got \"cache\""},
      {R"({"id": 1, "key": 1, "members": 2, "placement_hint": -1})",
       "placement_hint must be"},
      {R"({"id": 1, "key": 1, "members": 2, "main_server": "host:1"})",
       "main_server must be \"a.b.c.d\" or \"a.b.c.d:port\", got \"host:1\""},
  };
  for (const auto& [body, message] : cases) {
    const auto r = ParseJobRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

TEST(ApiJobsTest, ParseJobRequestRejectsMistakes) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "the body is not valid JSON"},
      {"{", "the body is not valid JSON"},
      {"[1]", "must be a JSON object"},
      {R"({"key": 1, "members": 2})", "missing field \"id\""},
      {R"({"id": 1, "members": 2})", "missing field \"key\""},
      {R"({"id": 1, "key": 2})", "missing field \"members\""},
      {R"({"id": 0, "key": 1, "members": 2})", "id must be 1..4294967295, got 0"},
      {R"({"id": 4294967296, "key": 1, "members": 2})", "id must be 1..4294967295"},
      {R"({"id": -1, "key": 1, "members": 2})", "id must be an integer"},
      {R"({"id": 1.5, "key": 1, "members": 2})", "id must be an integer"},
      {R"({"id": "1", "key": 1, "members": 2})", "id must be an integer"},
      {R"({"id": 1, "key": -1, "members": 2})", "key must be"},
      {R"({"id": 1, "key": "0x", "members": 2})", "key must be"},
      {R"({"id": 1, "key": "0x10000000000000000", "members": 2})", "key must be"},
      {R"({"id": 1, "key": "zz", "members": 2})", "key must be"},
      {R"({"id": 1, "key": 1.0, "members": 2})", "key must be"},
      {R"({"id": 1, "key": 1, "members": 0})", "members must be 1..65535, got 0"},
      {R"({"id": 1, "key": 1, "members": 70000})", "members must be 1..65535"},
      {R"({"id": 1, "key": 1, "members": 2, "nodes": 0})", "nodes must be 1..65535"},
      {R"({"id": 1, "key": 1, "members": 2, "ordered": 1})", "ordered must be true or false"},
      {R"({"id": 1, "key": 1, "members": 2, "colour": "red"})", "unknown field \"colour\""},
  };
  for (const auto& [body, fragment] : cases) {
    const auto r = ParseJobRequest(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(fragment), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

// A body nested far deeper than any route takes: "[[[[...", and the same
// as the value of a key, as an attacker sends it (about 1.2 KB).
std::string DeepBody(size_t depth, std::string_view key) {
  std::string body = "{\"" + std::string(key) + "\":";
  body.append(depth, '[');
  body.append(depth, ']');
  return body + "}";
}

// Each POST route with a body nested 5000 deep (10 KB), run on a stack the size of
// civetweb's request threads: a 400 that says why, not a stack overflow.
// (Error messages used to echo the value with nlohmann's recursive dump().)
TEST(ApiBodyTest, DeeplyNestedBodiesGet400OnARequestThreadStack) {
  DataSource source;
  source.jobs = [] { return common::Result<JobTableSnapshot>(JobTableSnapshot{}); };
  source.add_job = [](const JobRequest&) -> common::Result<JobSnapshot> {
    return common::Internal("must not be reached");
  };
  source.tan = [](uint32_t, const std::optional<TanRequest>&) -> common::Result<TanReport> {
    return common::Internal("must not be reached");
  };
  source.stragglers = [](uint32_t, const StragglerRequest&) -> common::Result<StragglerReport> {
    return common::Internal("must not be reached");
  };
  const std::pair<const char*, const char*> routes[] = {
      {"/api/v1/jobs", "id"},
      {"/api/v1/jobs", "switches"},
      {"/api/v1/jobs/7/tan", "candidates"},
      {"/api/v1/jobs/7/stragglers", "top"},
  };
  for (const auto& [path, key] : routes) {
    const std::string body = DeepBody(5000, key);
    HttpResponse r;
    testing::RunOnStack(kRequestStackBytes, [&] { r = HandleRequest("POST", path, "", body, source); });
    EXPECT_EQ(r.status, 400) << path << " " << key << ": " << r.body;
    EXPECT_NE(r.body.find("more than 16 levels deep"), std::string::npos) << r.body;
  }
}

TEST(ApiBodyTest, NestingAtTheBoundIsParsedBeyondItRefused) {
  // 16 levels: parsed (and refused for its content, naming the key).
  auto r = ParseJobRequest(DeepBody(15, "node_ids"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("node_ids[0] must be a node id"), std::string::npos)
      << r.status().message();
  r = ParseJobRequest(DeepBody(16, "node_ids"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 16 levels deep"), std::string::npos)
      << r.status().message();
  // Brackets inside strings are text, not nesting.
  r = ParseJobRequest(R"({"id": 1, "key": 1, "members": 2, "x": ")" + std::string(100, '[') +
                      R"("})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown field \"x\""), std::string::npos)
      << r.status().message();
}

TEST(ApiBodyTest, ErrorsShowBoundedValues) {
  // A long string is cut, a list or object is described by its size.
  const std::string long_value(5000, 'a');
  auto r = ParseJobRequest(R"({"id": ")" + long_value + R"(", "key": 1, "members": 2})");
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u) << r.status().message();
  EXPECT_NE(r.status().message().find("id must be an integer 1..4294967295, got \"" +
                                      std::string(48, 'a') + "\"..."),
            std::string::npos)
      << r.status().message();
  r = ParseJobRequest(R"({"id": [1, [2, [3]]], "key": 1, "members": 2})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("got a list of 2 items"), std::string::npos)
      << r.status().message();
  // The parser's own message is bounded too: a broken 60 KB body.
  r = ParseJobRequest("{\"id\": \"" + std::string(60000, 'b'));
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 400u);
}

TEST(ApiBodyTest, NumbersOutOfRangeAre400Not500) {
  DataSource source;
  source.add_job = [](const JobRequest&) -> common::Result<JobSnapshot> {
    return common::Internal("must not be reached");
  };
  source.stragglers = [](uint32_t, const StragglerRequest&) -> common::Result<StragglerReport> {
    return common::Internal("must not be reached");
  };
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/api/v1/jobs", R"({"id": 1e999, "key": 1, "members": 2})"},
           {"/api/v1/jobs", R"({"id": 1, "key": -1e999, "members": 2})"},
           {"/api/v1/jobs/7/stragglers", R"({"over": 1e999})"}}) {
    const HttpResponse r = HandleRequest("POST", path, "", body, source);
    EXPECT_EQ(r.status, 400) << path << " " << body << " -> " << r.body;
    EXPECT_NE(r.body.find("the body is not valid JSON"), std::string::npos) << r.body;
  }
}

TEST(ApiJobsTest, HttpStatusOfEveryCode) {
  using common::StatusCode;
  EXPECT_EQ(HttpStatusOf(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(HttpStatusOf(StatusCode::kFailedPrecondition), 409);
  EXPECT_EQ(HttpStatusOf(StatusCode::kResourceExhausted), 507);
  EXPECT_EQ(HttpStatusOf(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(StatusCode::kInternal), 500);
}

TEST(ApiJobsTest, ListAndShow) {
  FakeJobs fake;
  const DataSource source = fake.Attach(SyntheticSource());
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs", "", source);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(json::parse(r.body)["count"], 2);

  r = HandleRequest("GET", "/api/v1/jobs/9", "", source);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body)["id"], 9);

  r = HandleRequest("GET", "/api/v1/jobs/8", "", source);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"], "job 8 does not exist");

  for (const char* path : {"/api/v1/jobs/abc", "/api/v1/jobs/", "/api/v1/jobs/0",
                           "/api/v1/jobs/4294967296", "/api/v1/jobs/x/tan"}) {
    r = HandleRequest("GET", path, "", source);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find("job id must be"),
              std::string::npos);
  }
  r = HandleRequest("GET", "/api/v1/jobs/7/x", "", source);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"], "no route /api/v1/jobs/7/x");
}

TEST(ApiJobsTest, AddPassesTheRequestAndAnswers201) {
  FakeJobs fake;
  const DataSource source = fake.Attach(SyntheticSource());
  HttpResponse r =
      HandleRequest("POST", "/api/v1/jobs", "",
                    R"({"id": 12, "key": "0xabc", "members": 3, "ordered": true})", source);
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body)["id"], 12);
  ASSERT_EQ(fake.added.size(), 1u);
  EXPECT_EQ(fake.added[0], FlatJob(12, 0xabc, 3, 1, true));

  // A bad body never reaches the source.
  r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 12})", source);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(fake.added.size(), 1u);

  // The source's error becomes the status and the message.
  fake.add_status = common::AlreadyExists("job 12 already exists");
  r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 12, "key": 1, "members": 3})", source);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(json::parse(r.body)["error"], "job 12 already exists");
  fake.add_status = common::ResourceExhausted("job table full");
  r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 13, "key": 1, "members": 3})", source);
  EXPECT_EQ(r.status, 507);
}

TEST(ApiJobsTest, DeleteAnswers204Or404) {
  FakeJobs fake;
  const DataSource source = fake.Attach(SyntheticSource());
  HttpResponse r = HandleRequest("DELETE", "/api/v1/jobs/7", "", source);
  EXPECT_EQ(r.status, 204);
  EXPECT_TRUE(r.body.empty());
  EXPECT_EQ(fake.removed, std::vector<uint32_t>({7}));
  fake.remove_status = common::NotFound("job 8 does not exist");
  r = HandleRequest("DELETE", "/api/v1/jobs/8", "", source);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"], "job 8 does not exist");
}

TEST(ApiJobsTest, WrongMethodsAre405WithTheirAllowList) {
  FakeJobs fake;
  const DataSource source = fake.Attach(SyntheticSource());
  for (const char* method : {"PUT", "DELETE", "PATCH"}) {
    const HttpResponse r = HandleRequest(method, "/api/v1/jobs", "", source);
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.allow, "GET, POST");
  }
  for (const char* method : {"PUT", "POST"}) {
    const HttpResponse r = HandleRequest(method, "/api/v1/jobs/7", "", source);
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.allow, "GET, DELETE");
  }
  EXPECT_TRUE(fake.added.empty());
  EXPECT_TRUE(fake.removed.empty());
}

TEST(ApiJobsTest, NoJobSourceIs503) {
  const DataSource source = SyntheticSource();
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs", "", source).status, 503);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7", "", source).status, 503);
  EXPECT_EQ(HandleRequest("DELETE", "/api/v1/jobs/7", "", source).status, 503);
  EXPECT_EQ(
      HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 1, "key": 1, "members": 1})", source)
          .status,
      503);
}

TEST(ApiJobsTest, JobSourceFailureIs500) {
  DataSource source = SyntheticSource();
  source.jobs = []() -> common::Result<JobTableSnapshot> { throw std::runtime_error("boom"); };
  const HttpResponse r = HandleRequest("GET", "/api/v1/jobs", "", source);
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(json::parse(r.body)["error"], "internal error: boom");
}

// --- The stragglers route ---------------------------------------------------------

TEST(ApiStragglersTest, ParsesOneRule) {
  common::Result<StragglerRequest> r = ParseStragglerQuery("top=2&ops=5");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->top, 2u);
  EXPECT_EQ(r->operations, 5u);
  EXPECT_FALSE(r->apply);
  r = ParseStragglerQuery("over=4");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->over_s, 4.0);
  r = ParseStragglerBody(R"({"over": 0.25, "apply": true})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->over_s, 0.25);
  EXPECT_TRUE(r->apply);
  EXPECT_EQ(r->max_excluded, aggregator::kDefaultReservedMissingIds);
  r = ParseStragglerBody(R"({"top": 50, "max_excluded": 48, "apply": true})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_excluded, 48u);
  r = ParseStragglerBody(R"({"clear": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->clear);
  for (const char* bad : {"", "top=1&over=2", "top=0", "over=x", "top=1&color=red", "ops=-1"}) {
    EXPECT_EQ(ParseStragglerQuery(bad).status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
  for (const char* bad : {"[]", "{}", R"({"top": 0})", R"({"top": 1, "apply": 1})",
                          R"({"clear": true, "top": 1})", R"({"top": 1, "extra": 2})",
                          R"({"top": 1, "max_excluded": 0})", R"({"top": 1, "max_excluded": 256})"}) {
    EXPECT_EQ(ParseStragglerBody(bad).status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ApiStragglersTest, GetPredictsAndPostApplies) {
  DataSource source = SyntheticSource();
  std::vector<std::pair<uint32_t, StragglerRequest>> calls;
  source.stragglers = [&](uint32_t job, const StragglerRequest& r) -> common::Result<StragglerReport> {
    calls.emplace_back(job, r);
    if (job == 9) return common::NotFound("job 9 does not exist");
    StragglerReport report;
    report.job = job;
    report.operations = 12;
    report.predicted = {{134, 6.0}};
    if (r.apply) report.excluded = {134};
    return report;
  };
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs/7/stragglers", "top=1", source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["job"], 7);
  EXPECT_EQ(j["operations"], 12);
  EXPECT_EQ(j["predicted"][0]["node"], 134);
  EXPECT_EQ(j["predicted"][0]["offset_seconds"], 6.0);
  EXPECT_TRUE(j["excluded"].empty());
  r = HandleRequest("POST", "/api/v1/jobs/7/stragglers", "", R"({"top": 1, "apply": true})", source);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["excluded"], json::array({134}));
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_FALSE(calls[0].second.apply);
  EXPECT_TRUE(calls[1].second.apply);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/9/stragglers", "top=1", source).status, 404);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7/stragglers", "top=1&over=2", source).status, 400);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/x/stragglers", "top=1", source).status, 400);
  EXPECT_EQ(HandleRequest("DELETE", "/api/v1/jobs/7/stragglers", "", source).status, 405);
  EXPECT_EQ(calls.size(), 3u) << "only well-formed requests reach the control thread";
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7/stragglers", "top=1", SyntheticSource()).status,
            503);
}

// --- The TAN route -----------------------------------------------------------------

TEST(ApiTanTest, ParsesEveryBodyForm) {
  auto r = ParseTanBody(R"({"strategy": "least_load", "candidates": [
      {"address": "10.0.9.50"}, {"address": "10.0.9.51", "port": 47001, "hops": 3}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->choice);
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kLeastLoad);
  ASSERT_EQ(r->choice->candidates.size(), 2u);
  EXPECT_EQ(r->choice->candidates[0].address.ToString(), "10.0.9.50");
  EXPECT_EQ(r->choice->candidates[0].port, config::kDefaultAggregationUdpPort);
  EXPECT_EQ(r->choice->candidates[0].hops, 0);
  EXPECT_EQ(r->choice->candidates[1].port, 47001);
  EXPECT_EQ(r->choice->candidates[1].hops, 3);
  EXPECT_FALSE(r->set_member);
  // Candidates alone: the config's default strategy, fixed (one of them:
  // the management node's own pick).
  r = ParseTanBody(R"({"candidates": [{"address": "10.0.9.50"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kFixed);
  for (const char* strategy : {"fixed", "random", "fewest_hops"}) {
    r = ParseTanBody(std::string(R"({"candidates": [{"address": "10.0.9.50"}], "strategy": ")") +
                     strategy + "\"}");
    ASSERT_TRUE(r.ok()) << strategy;
    EXPECT_EQ(r->choice->candidates.size(), 1u) << strategy;
  }
  r = ParseTanBody(R"({"strategy": "self"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kSelf);
  EXPECT_TRUE(r->choice->candidates.empty());
  r = ParseTanBody(R"({"member": 3})");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->choice);
  EXPECT_TRUE(r->set_member);
  EXPECT_EQ(r->member, std::optional<uint16_t>(3));
  r = ParseTanBody(R"({"member": null, "strategy": "random", "candidates": [{"address": "10.1.1.1"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->set_member);
  EXPECT_FALSE(r->member);
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kRandom);
  // How many candidates, repeats, and whose addresses they are: the config's
  // rules, which JobControl applies (JobControlTreeTest).
  r = ParseTanBody(R"({"strategy": "fixed"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->choice->candidates.empty());
}

TEST(ApiTanTest, BodyErrorsNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "the body must be a JSON object"},
      {"{", "the body is not valid JSON"},
      {"{}", "the body must choose the TAN or its member"},
      {R"({"strategy": "closest", "candidates": [{"address": "10.0.9.50"}]})",
       "strategy must be fixed, random, least_load, fewest_hops or self, got \"closest\""},
      {R"({"strategy": 1})",
       "strategy must be fixed, random, least_load, fewest_hops or self, got 1"},
      {R"({"candidates": {"address": "10.0.9.50"}})",
       "candidates must be a list of {address, port, hops}, got an object with 1 key"},
      {R"({"candidates": ["10.0.9.50"]})",
       "candidates[0] must be an object {address, port, hops}, got \"10.0.9.50\""},
      {R"({"candidates": [{"port": 1}]})", "missing field \"candidates[0].address\""},
      {R"({"candidates": [{"address": "10.0.9"}]})",
       "candidates[0].address must be an IPv4 address \"a.b.c.d\", got \"10.0.9\""},
      {R"({"candidates": [{"address": "10.0.9.50", "port": 0}]})",
       "candidates[0].port must be 1..65535, got 0"},
      {R"({"candidates": [{"address": "10.0.9.50"}, {"address": "10.0.9.51", "hops": 256}]})",
       "candidates[1].hops must be 0..255, got 256"},
      {R"({"candidates": [{"address": "10.0.9.50", "weight": 1}]})",
       "unknown field \"candidates[0].weight\"; expected address, port, hops"},
      {R"({"member": 65535})", "member must be 0..65534, got 65535"},
      {R"({"member": "3"})", "member must be an integer 0..65534, got \"3\""},
      {R"({"node": 3})", "unknown field \"node\"; expected strategy, candidates, member"},
  };
  for (const auto& [body, message] : cases) {
    const auto r = ParseTanBody(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

TEST(ApiTanTest, ReportShape) {
  TanReport report;
  report.job = 7;
  report.root = true;
  report.tan.mode = "remote";
  report.tan.address = *common::Ipv4Addr::Parse("10.0.9.50");
  report.tan.port = 47000;
  report.tan.resolved = true;
  report.member = 0;
  config::TanConfig tan;
  tan.strategy = config::TanStrategy::kFewestHops;
  tan.candidates.resize(2);
  tan.candidates[0].address = *common::Ipv4Addr::Parse("10.0.9.50");
  tan.candidates[0].hops = 1;
  tan.candidates[1].address = *common::Ipv4Addr::Parse("10.0.9.51");
  tan.candidates[1].port = 47100;
  tan.candidates[1].hops = 2;
  report.chosen = TanReport::Choice{TanReport::Source::kApi, tan};
  EXPECT_EQ(json::parse(TanJson(report)), json::parse(R"({"job": 7, "root": true,
      "mode": "remote", "address": "10.0.9.50", "port": 47000, "resolved": true, "member": 0,
      "chosen_by": "api", "strategy": "fewest_hops", "candidates": [
        {"address": "10.0.9.50", "port": 47000, "hops": 1},
        {"address": "10.0.9.51", "port": 47100, "hops": 2}]})"));
  report.chosen->source = TanReport::Source::kConfig;
  report.chosen->tan = config::TanConfig{config::TanStrategy::kSelf, {}, {}};
  report.tan = JobTanSnapshot{"self", {}, 0, false};
  report.member.reset();
  EXPECT_EQ(json::parse(TanJson(report)), json::parse(R"({"job": 7, "root": true,
      "mode": "self", "address": null, "port": null, "resolved": false, "member": null,
      "chosen_by": "config", "strategy": "self", "candidates": []})"));
  // A job that is not rooted here: no choice of its own.
  TanReport leaf;
  leaf.job = 8;
  leaf.member = 2;
  EXPECT_EQ(json::parse(TanJson(leaf)), json::parse(R"({"job": 8, "root": false,
      "mode": "none", "address": null, "port": null, "resolved": false, "member": 2,
      "chosen_by": null, "strategy": null, "candidates": []})"));
}

TEST(ApiTanTest, GetShowsAndPostChangesThroughTheSource) {
  DataSource source = SyntheticSource();
  std::vector<std::pair<uint32_t, std::optional<TanRequest>>> calls;
  source.tan = [&](uint32_t job, const std::optional<TanRequest>& request)
      -> common::Result<TanReport> {
    calls.emplace_back(job, request);
    if (job == 9) return common::NotFound("job 9 does not exist");
    if (job == 8 && request && request->choice) {
      return common::FailedPrecondition("job 8 has an upstream here");
    }
    TanReport report;
    report.job = job;
    report.root = true;
    report.tan = JobTanSnapshot{"remote", *common::Ipv4Addr::Parse("10.0.9.50"), 47000, true};
    if (request && request->choice) {
      report.chosen = TanReport::Choice{TanReport::Source::kApi, *request->choice};
    }
    if (request && request->set_member) report.member = request->member;
    return report;
  };
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs/7/tan", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"job": 7, "root": true, "mode": "remote",
      "address": "10.0.9.50", "port": 47000, "resolved": true, "member": null,
      "chosen_by": null, "strategy": null, "candidates": []})"));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].second) << "GET changes nothing";
  r = HandleRequest("POST", "/api/v1/jobs/7/tan", "",
                    R"({"strategy": "fewest_hops", "candidates": [{"address": "10.0.9.50", "hops": 2}],
                        "member": 0})",
                    source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["chosen_by"], "api");
  EXPECT_EQ(j["strategy"], "fewest_hops");
  EXPECT_EQ(j["candidates"],
            json::parse(R"([{"address": "10.0.9.50", "port": 47000, "hops": 2}])"));
  EXPECT_EQ(j["member"], 0);
  ASSERT_EQ(calls.size(), 2u);
  ASSERT_TRUE(calls[1].second && calls[1].second->choice);
  EXPECT_EQ(calls[1].second->choice->strategy, config::TanStrategy::kFewestHops);
  EXPECT_EQ(calls[1].second->member, std::optional<uint16_t>(0));
  r = HandleRequest("POST", "/api/v1/jobs/8/tan", "", R"({"strategy": "self"})", source);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(json::parse(r.body)["error"], "job 8 has an upstream here");
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/9/tan", "", source).status, 404);
  ASSERT_EQ(calls.size(), 4u);
  // Requests the router refuses never reach the source.
  EXPECT_EQ(HandleRequest("POST", "/api/v1/jobs/7/tan", "", R"({"strategy": "x"})", source).status,
            400);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/0/tan", "", source).status, 400);
  r = HandleRequest("DELETE", "/api/v1/jobs/7/tan", "", source);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, POST");
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7/other", "", source).status, 404);
  EXPECT_EQ(calls.size(), 4u);
  // Without aggregation there is no TAN.
  r = HandleRequest("GET", "/api/v1/jobs/7/tan", "", SyntheticSource());
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("aggregation is off"), std::string::npos);
}

TEST(ApiBypassTest, ListsFiltersAndLimits) {
  DataSource source = SyntheticSource();
  size_t asked = 0;
  source.bypass = [&](size_t limit) -> common::Result<dataplane::BypassDump> {
    asked = limit;
    dataplane::BypassDump dump;
    dump.live = 3;
    dump.entries = {{1, 7, 40, 2, 9.5}, {1, 7, 41, 2, 9.6}, {2, 8, 3, 5, 1.0}};
    return dump;
  };
  HttpResponse r = HandleRequest("GET", "/api/v1/bypass", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["live"], 3);
  EXPECT_EQ(j["count"], 3);
  EXPECT_EQ(j["entries"][2]["node"], 5);
  EXPECT_EQ(j["entries"][0]["ttl_seconds"], 9.5);
  EXPECT_FALSE(j["truncated"].get<bool>());
  EXPECT_EQ(asked, kDefaultSlotLimit);
  r = HandleRequest("GET", "/api/v1/bypass", "job=7&limit=1", source);
  j = json::parse(r.body);
  EXPECT_EQ(j["count"], 1);
  EXPECT_EQ(j["entries"][0]["seq"], 40);
  EXPECT_TRUE(j["truncated"].get<bool>());
  EXPECT_EQ(asked, kMaxSlotLimit) << "a job filter dumps everything it may, then filters";
  EXPECT_EQ(HandleRequest("GET", "/api/v1/bypass", "limit=0", source).status, 400);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/bypass", "", SyntheticSource()).status, 503);
}

// --- The slot routes, against a synthetic dump ---------------------------------------

dataplane::SlotInfo Slot(unsigned lcore, uint32_t index, bool complete, uint32_t job, uint32_t seq,
                         uint16_t count) {
  dataplane::SlotInfo s;
  s.lcore = lcore;
  s.index = index;
  s.complete = complete;
  s.job_id = job;
  s.seq = seq;
  s.count = count;
  s.expected = 4;
  s.dtype = static_cast<uint8_t>(aggregator::DType::kFloat32);
  s.op = static_cast<uint8_t>(aggregator::ReduceOp::kSum);
  s.elem_count = 356;
  s.age_seconds = 0.25;
  return s;
}

// Five busy slots on two lcores: three of job 7, two of job 9.
dataplane::SlotDump SyntheticDump() {
  dataplane::SlotDump d;
  d.slots = {Slot(1, 4, false, 7, 100, 3), Slot(1, 10, true, 9, 5, 4),
             Slot(1, 12, false, 7, 101, 1), Slot(2, 5, true, 7, 102, 4),
             Slot(2, 7, false, 9, 6, 2)};
  d.slots[0].dtype = static_cast<uint8_t>(aggregator::DType::kBFloat16);
  d.slots[0].op = static_cast<uint8_t>(aggregator::ReduceOp::kMax);
  d.slots[0].overflow = true;
  d.slots[0].age_seconds = 0.0001234;
  d.busy = 5;
  return d;
}

// A slot source that behaves like Dataplane::DumpSlots (the first `limit`
// slots, truncated when there were more) and records the limits it was asked for.
struct FakeSlots {
  std::vector<size_t> limits;
  std::optional<common::Status> error;

  void Attach(DataSource& source) {
    source.slots = [this](size_t limit) -> common::Result<dataplane::SlotDump> {
      limits.push_back(limit);
      if (error) return *error;
      dataplane::SlotDump d = SyntheticDump();
      if (d.slots.size() > limit) {
        d.slots.resize(limit);
        d.truncated = true;
      }
      return d;
    };
  }
};

TEST(ApiSlotsTest, ParseSlotQueryAcceptsFilters) {
  auto q = ParseSlotQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, (SlotQuery{1000, std::nullopt}));
  q = ParseSlotQuery("limit=5&job=7");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, (SlotQuery{5, 7u}));
  q = ParseSlotQuery("job=4294967295&&limit=100000");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(*q, (SlotQuery{100000, 4294967295u}));
  q = ParseSlotQuery("limit=1");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->limit, 1u);
}

TEST(ApiSlotsTest, ParseSlotQueryNamesTheBadParameter) {
  const std::pair<const char*, const char*> cases[] = {
      {"limit=0", "limit must be a number from 1 to 100000, got '0'"},
      {"limit=100001", "limit must be a number from 1 to 100000, got '100001'"},
      {"limit=abc", "limit must be a number from 1 to 100000, got 'abc'"},
      {"limit=", "limit must be a number from 1 to 100000, got ''"},
      {"limit=-5", "limit must be a number from 1 to 100000, got '-5'"},
      {"job=0", "job must be a job id from 1 to 4294967295, got '0'"},
      {"job=4294967296", "job must be a job id from 1 to 4294967295, got '4294967296'"},
      {"job=seven", "job must be a job id from 1 to 4294967295, got 'seven'"},
      {"colour=red", "unknown query parameter 'colour'; expected limit or job"},
      {"limit=%zz", "malformed percent-encoding in query 'limit=%zz'"},
  };
  for (const auto& [query, message] : cases) {
    const auto q = ParseSlotQuery(query);
    ASSERT_FALSE(q.ok()) << query;
    EXPECT_EQ(q.status().code(), common::StatusCode::kInvalidArgument) << query;
    EXPECT_EQ(q.status().message(), message) << query;
  }
}

TEST(ApiSlotsTest, SlotsJsonShape) {
  const json j = json::parse(SlotsJson(SyntheticDump(), {}));
  EXPECT_EQ(j["busy"], 5);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_TRUE(j["filter"]["job"].is_null());
  EXPECT_EQ(j["filter"]["limit"], 1000);
  EXPECT_EQ(j["count"], 5);
  ASSERT_EQ(j["slots"].size(), 5u);
  const json& s0 = j["slots"][0];
  EXPECT_EQ(s0["lcore"], 1);
  EXPECT_EQ(s0["index"], 4);
  EXPECT_EQ(s0["state"], "aggregating");
  EXPECT_EQ(s0["job"], 7);
  EXPECT_EQ(s0["seq"], 100);
  EXPECT_EQ(s0["count"], 3);
  EXPECT_EQ(s0["expected"], 4);
  EXPECT_EQ(s0["dtype"], "bfloat16");
  EXPECT_EQ(s0["op"], "max");
  EXPECT_EQ(s0["elem_count"], 356);
  EXPECT_EQ(s0["overflow"], true);
  EXPECT_DOUBLE_EQ(s0["age_seconds"].get<double>(), 0.000123);
  EXPECT_EQ(s0.size(), 12u);
  const json& s1 = j["slots"][1];
  EXPECT_EQ(s1["state"], "complete");
  EXPECT_EQ(s1["dtype"], "float32");
  EXPECT_EQ(s1["op"], "sum");
  EXPECT_EQ(s1["overflow"], false);
  EXPECT_DOUBLE_EQ(s1["age_seconds"].get<double>(), 0.25);
  // Dump order: by lcore, then slot index.
  EXPECT_EQ(j["slots"][3]["lcore"], 2);
  EXPECT_EQ(j["slots"][3]["index"], 5);
}

TEST(ApiSlotsTest, UnknownWireValuesShowAsNumbers) {
  dataplane::SlotDump d = SyntheticDump();
  d.slots[0].dtype = 9;
  d.slots[0].op = 200;
  const json j = json::parse(SlotsJson(d, {}));
  EXPECT_EQ(j["slots"][0]["dtype"], "9");
  EXPECT_EQ(j["slots"][0]["op"], "200");
}

TEST(ApiSlotsTest, RouteLimitsAndFilters) {
  FakeSlots fake;
  DataSource source = SyntheticSource();
  fake.Attach(source);

  HttpResponse r = HandleRequest("GET", "/api/v1/slots", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  json j = json::parse(r.body);
  EXPECT_EQ(j["count"], 5);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_EQ(fake.limits, std::vector<size_t>({1000}));

  // The limit goes to the dump, which reports that it left slots out.
  r = HandleRequest("GET", "/api/v1/slots", "limit=2", source);
  ASSERT_EQ(r.status, 200);
  j = json::parse(r.body);
  EXPECT_EQ(j["busy"], 5);
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["filter"]["limit"], 2);
  EXPECT_EQ(j["slots"][1]["index"], 10);
  EXPECT_EQ(fake.limits.back(), 2u);

  // A job filter dumps everything it may, then filters, then cuts at the limit.
  r = HandleRequest("GET", "/api/v1/slots", "job=7", source);
  ASSERT_EQ(r.status, 200);
  j = json::parse(r.body);
  EXPECT_EQ(fake.limits.back(), kMaxSlotLimit);
  EXPECT_EQ(j["filter"]["job"], 7);
  EXPECT_EQ(j["count"], 3);
  EXPECT_EQ(j["truncated"], false);
  EXPECT_EQ(j["busy"], 5) << "busy counts the whole switch";
  for (const json& s : j["slots"]) EXPECT_EQ(s["job"], 7);
  EXPECT_EQ(j["slots"][2]["index"], 5);

  r = HandleRequest("GET", "/api/v1/slots", "job=7&limit=2", source);
  j = json::parse(r.body);
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["slots"][1]["index"], 12);

  r = HandleRequest("GET", "/api/v1/slots", "job=12345", source);
  j = json::parse(r.body);
  EXPECT_EQ(j["count"], 0);
  EXPECT_EQ(j["slots"], json::array());
  EXPECT_EQ(j["truncated"], false);
}

TEST(ApiSlotsTest, BadQueryIs400AndDumpsNothing) {
  FakeSlots fake;
  DataSource source = SyntheticSource();
  fake.Attach(source);
  for (const auto& [query, fragment] :
       {std::pair{"limit=0", "limit must be"}, std::pair{"limit=200000", "limit must be"},
        std::pair{"job=x", "job must be"},
        std::pair{"vlan=10", "unknown query parameter 'vlan'"}}) {
    const HttpResponse r = HandleRequest("GET", "/api/v1/slots", query, source);
    EXPECT_EQ(r.status, 400) << query;
    EXPECT_NE(json::parse(r.body)["error"].get<std::string>().find(fragment), std::string::npos)
        << query << ": " << r.body;
  }
  EXPECT_TRUE(fake.limits.empty());
}

TEST(ApiSlotsTest, UnansweredDumpIs503WithItsMessage) {
  FakeSlots fake;
  fake.error = common::Unavailable("worker lcore 2 did not answer within 500 ms");
  DataSource source = SyntheticSource();
  fake.Attach(source);
  const HttpResponse r = HandleRequest("GET", "/api/v1/slots", "", source);
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"], "worker lcore 2 did not answer within 500 ms");
}

TEST(ApiSlotsTest, AggregationOffIs503) {
  const HttpResponse r = HandleRequest("GET", "/api/v1/slots", "", SyntheticSource());
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"],
            "aggregation is off on this aggswitch (its config has no aggregation: section)");
  // The query is still checked first.
  EXPECT_EQ(HandleRequest("GET", "/api/v1/slots", "limit=0", SyntheticSource()).status, 400);
}

TEST(ApiSlotsTest, SlotsRouteIsReadOnly) {
  FakeSlots fake;
  DataSource source = SyntheticSource();
  fake.Attach(source);
  const HttpResponse r = HandleRequest("POST", "/api/v1/slots", "", source);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET");
  EXPECT_TRUE(fake.limits.empty());
}

TEST(ApiSlotsTest, JobShowsItsCountersAndSlots) {
  FakeJobs jobs;
  FakeSlots slots;
  DataSource source = jobs.Attach(SyntheticSource());
  slots.Attach(source);
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs/7", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["id"], 7);
  EXPECT_EQ(j["counters"]["contributions"], 40);
  EXPECT_EQ(j["learned_members"].size(), 2u);
  ASSERT_EQ(j["slots"].size(), 3u);
  EXPECT_EQ(j["slots"][0]["index"], 4);
  EXPECT_EQ(j["slots"][1]["index"], 12);
  EXPECT_EQ(j["slots"][2]["index"], 5);
  for (const json& s : j["slots"]) EXPECT_EQ(s["job"], 7);
  EXPECT_EQ(j["slots_truncated"], false);
  EXPECT_TRUE(j["slots_error"].is_null());
  EXPECT_EQ(slots.limits, std::vector<size_t>({kMaxSlotLimit}));
  // The list has the same job without the slot fields.
  json listed = json::parse(HandleRequest("GET", "/api/v1/jobs", "", source).body)["jobs"][0];
  for (const char* key : {"slots", "slots_truncated", "slots_error"}) j.erase(key);
  EXPECT_EQ(j, listed);

  // An unknown job is 404 and needs no dump.
  r = HandleRequest("GET", "/api/v1/jobs/8", "", source);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(slots.limits.size(), 1u);
}

TEST(ApiSlotsTest, JobWithoutADumpStillShows) {
  FakeJobs jobs;
  FakeSlots slots;
  slots.error = common::Unavailable("worker lcore 1 did not answer within 500 ms");
  DataSource source = jobs.Attach(SyntheticSource());
  slots.Attach(source);
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs/9", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["id"], 9);
  EXPECT_TRUE(j["slots"].is_null());
  EXPECT_EQ(j["slots_error"], "worker lcore 1 did not answer within 500 ms");

  // Aggregation off: no slot source at all.
  source.slots = nullptr;
  r = HandleRequest("GET", "/api/v1/jobs/9", "", source);
  ASSERT_EQ(r.status, 200);
  j = json::parse(r.body);
  EXPECT_TRUE(j["slots"].is_null());
  EXPECT_EQ(j["slots_error"],
            "aggregation is off on this aggswitch (its config has no aggregation: section)");
}

// The job detail marks its slots truncated when more than kDefaultSlotLimit
// belong to the job, or when the dump itself was cut.
TEST(ApiSlotsTest, JobDetailTruncation) {
  JobSnapshot job = SyntheticJobs().jobs[0];
  dataplane::SlotDump d;
  for (uint32_t i = 0; i < kDefaultSlotLimit + 1; ++i)
    d.slots.push_back(Slot(1, i, false, 7, i, 1));
  d.busy = d.slots.size();
  json j = json::parse(JobDetailJson(job, d));
  EXPECT_EQ(j["slots"].size(), kDefaultSlotLimit);
  EXPECT_EQ(j["slots_truncated"], true);

  d.slots.resize(3);
  j = json::parse(JobDetailJson(job, d));
  EXPECT_EQ(j["slots"].size(), 3u);
  EXPECT_EQ(j["slots_truncated"], false);
  d.truncated = true;
  j = json::parse(JobDetailJson(job, d));
  EXPECT_EQ(j["slots_truncated"], true);
}

// --- End to end: HandleRequest -> JobControl -> JobTable, with a control thread -----

// Drains a JobControl and reclaims the table on a thread of its own, like
// ControlLoop::Run, until Stop() or destruction.
class ControlThread {
 public:
  ~ControlThread() { Stop(); }
  void Start(JobControl& jobs, aggregator::JobTable& table) {
    Stop();
    stop_ = false;
    thread_ = std::thread([this, &jobs, &table] {
      while (!stop_.load()) {
        jobs.ProcessPending();
        table.Reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Runs a JobControl and a control thread that drains it, like ControlLoop::Run.
class JobControlFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto table = aggregator::JobTable::Create(4, 8);
    ASSERT_TRUE(table.ok());
    table_ = std::move(table).value();
    config::AggregationConfig agg;
    {
      config::AggregationJobConfig job;
      job.id = 7;
      job.key = 0x77;
      job.members = 2;
      agg.jobs.push_back(job);
    }
    ASSERT_TRUE(AddConfigJobs(*table_, agg, 2000000000).ok());
    JobControl::Options options;
    options.port_names = {"p0", "p1"};
    // An address to send partials from, for jobs with an upstream.
    config::SwitchAddress address;
    address.prefix = {common::Ipv4Addr{0x0a0000fd}, 32};
    options.config.aggregation.address = address;
    jobs_ = std::make_unique<JobControl>(*table_, options);
    source_ = SyntheticSource();
    jobs_->Attach(source_);
  }
  void TearDown() override { StopControlThread(); }

  void StartControlThread() { control_.Start(*jobs_, *table_); }
  void StopControlThread() { control_.Stop(); }

  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<JobControl> jobs_;
  DataSource source_;
  ControlThread control_;
};

TEST_F(JobControlFixture, AddShowRemoveThroughTheControlThread) {
  StartControlThread();
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs", "", source_);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["capacity"], 4);
  EXPECT_EQ(j["max_fan_in"], 8);
  ASSERT_EQ(j["count"], 1);
  EXPECT_EQ(j["jobs"][0]["origin"], "config");

  r = HandleRequest("POST", "/api/v1/jobs", "",
                    R"({"id": 9, "key": "0x99", "members": 3, "nodes": 2,
                        "upstream": {"address": "10.0.0.1", "node": 4}})", source_);
  ASSERT_EQ(r.status, 201) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["id"], 9);
  EXPECT_EQ(j["origin"], "api");
  EXPECT_EQ(j["members"], 3);
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["index"], 1);
  const aggregator::Job* job = table_->Find(9);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->key(), 0x99u);
  EXPECT_EQ(job->origin(), aggregator::JobSpec::Origin::kApi);

  // What workers learn shows up in GET.
  aggregator::MemberAddr from;
  from.mac48 = 0x020000000001ull;
  from.port_index = 1;
  from.vlan = 10;
  from.ip = 0x0a000a05;
  from.udp_port = 40000;
  (void)job->BindMember(1, from, 0, 1, 0);
  job->UpdateAck(1, 17);
  job->UpdateAck(2, 20);
  r = HandleRequest("GET", "/api/v1/jobs/9", "", source_);
  ASSERT_EQ(r.status, 200);
  j = json::parse(r.body);
  EXPECT_EQ(j["learned"], 1);
  EXPECT_EQ(j["min_ack"], 17);
  ASSERT_EQ(j["learned_members"].size(), 2u);
  EXPECT_EQ(j["learned_members"][0]["node"], 1);
  EXPECT_EQ(j["learned_members"][0]["mac"], "02:00:00:00:00:01");
  EXPECT_EQ(j["learned_members"][0]["ip"], "10.0.10.5");
  EXPECT_EQ(j["learned_members"][0]["port"], "p1");
  EXPECT_EQ(j["learned_members"][0]["vlan"], 10);
  EXPECT_EQ(j["learned_members"][0]["udp_port"], 40000);
  EXPECT_EQ(j["learned_members"][0]["ack_watermark"], 17);
  EXPECT_TRUE(j["learned_members"][1]["mac"].is_null());
  EXPECT_EQ(j["learned_members"][1]["ack_watermark"], 20);

  // The table's rules come back as HTTP errors.
  r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 9, "key": 1, "members": 3})", source_);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(json::parse(r.body)["error"], "job 9 already exists");
  r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 10, "key": 1, "members": 9})", source_);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("aggregation.max_fan_in"), std::string::npos) << r.body;

  r = HandleRequest("DELETE", "/api/v1/jobs/9", "", source_);
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(table_->Find(9), nullptr);
  r = HandleRequest("DELETE", "/api/v1/jobs/9", "", source_);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"], "job 9 does not exist");
}

TEST_F(JobControlFixture, FullTableIs507) {
  StartControlThread();
  for (uint32_t id = 20; id < 23; ++id) {
    const std::string body = R"({"id": )" + std::to_string(id) + R"(, "key": 1, "members": 1})";
    ASSERT_EQ(HandleRequest("POST", "/api/v1/jobs", "", body, source_).status, 201);
  }
  const HttpResponse r =
      HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 30, "key": 1, "members": 1})", source_);
  EXPECT_EQ(r.status, 507);
  EXPECT_NE(r.body.find("job table full"), std::string::npos) << r.body;
}

// Without a control thread a caller gives up after the timeout, and its
// command is withdrawn: running the queue later changes nothing.
TEST_F(JobControlFixture, NoControlThreadTimesOutAndChangesNothing) {
  JobControl::Options options;
  options.timeout = std::chrono::milliseconds(50);
  JobControl jobs(*table_, options);
  const auto start = std::chrono::steady_clock::now();
  auto added = jobs.Add(FlatJob(11, 1, 1));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.status().code(), common::StatusCode::kUnavailable);
  EXPECT_NE(added.status().message().find("nothing was changed"), std::string::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(50));
  EXPECT_EQ(jobs.Remove(7).code(), common::StatusCode::kUnavailable);
  EXPECT_EQ(jobs.ProcessPending(), 0u);
  EXPECT_EQ(table_->Find(11), nullptr);
  EXPECT_NE(table_->Find(7), nullptr);

  DataSource source = SyntheticSource();
  jobs.Attach(source);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs", "", source).status, 503);
}

TEST_F(JobControlFixture, ManyCallersAtOnce) {
  StartControlThread();
  std::vector<std::thread> callers;
  std::atomic<int> created{0};
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const uint32_t id = 100 + static_cast<uint32_t>(t);
        if (jobs_->Add(FlatJob(id, 1, 1)).ok()) created.fetch_add(1);
        (void)jobs_->Remove(id);
        EXPECT_TRUE(jobs_->List().ok());
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_GT(created.load(), 0);
  StopControlThread();
  table_->Reclaim();
  EXPECT_EQ(table_->size(), 1u);  // job 7 from the config
}

// The counter reader runs on the control thread, in the same step as the job
// list, and a reused index starts from the zeroed counters of its new job.
TEST_F(JobControlFixture, CountersAreReadOnTheControlThreadWithTheJob) {
  // The dataplane's per-index counters, reduced to one per index, and the
  // reclaim hook that zeroes an index, as the dataplane sets it.
  std::array<std::atomic<uint64_t>, 4> contributions{};
  std::mutex mu;
  std::set<std::thread::id> reader_threads;
  table_->SetReclaimHook([&](uint16_t index) { contributions[index].store(0); });
  jobs_->SetCounterReader([&](uint16_t index) {
    {
      std::lock_guard<std::mutex> lock(mu);
      reader_threads.insert(std::this_thread::get_id());
    }
    JobCounterValues v{};
    v[static_cast<size_t>(dataplane::JobCounter::contributions)] = contributions[index].load();
    v[static_cast<size_t>(dataplane::JobCounter::reduced_bytes)] = 1000 + index;
    return v;
  });
  StartControlThread();
  // The hook and the reader use this test's locals: stop the control thread
  // and drop them before the locals go, on every way out of the test.
  struct AtExit {
    std::function<void()> fn;
    ~AtExit() { fn(); }
  } stop{[this] {
    StopControlThread();
    table_->SetReclaimHook(nullptr);
    jobs_->SetCounterReader(nullptr);
  }};

  contributions[0] = 11;  // job 7, index 0
  ASSERT_EQ(
      HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 9, "key": 1, "members": 2})", source_)
          .status,
      201);
  contributions[1] = 22;  // job 9, index 1
  json j = json::parse(HandleRequest("GET", "/api/v1/jobs", "", source_).body);
  ASSERT_EQ(j["count"], 2);
  EXPECT_EQ(j["jobs"][0]["id"], 7);
  EXPECT_EQ(j["jobs"][0]["counters"]["contributions"], 11);
  EXPECT_EQ(j["jobs"][0]["counters"]["reduced_bytes"], 1000);
  EXPECT_EQ(j["jobs"][1]["id"], 9);
  EXPECT_EQ(j["jobs"][1]["counters"]["contributions"], 22);
  EXPECT_EQ(j["jobs"][1]["counters"]["reduced_bytes"], 1001);

  // Job 9 goes; job 10 gets its index once it is reclaimed, and starts at 0.
  ASSERT_EQ(HandleRequest("DELETE", "/api/v1/jobs/9", "", source_).status, 204);
  HttpResponse r;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    r = HandleRequest("POST", "/api/v1/jobs", "", R"({"id": 10, "key": 1, "members": 2})", source_);
    if (r.status == 201 && json::parse(r.body)["index"] == 1) break;
    if (r.status == 201) (void)jobs_->Remove(10);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(r.status, 201) << r.body;
  j = json::parse(r.body);
  ASSERT_EQ(j["index"], 1);
  EXPECT_EQ(j["counters"]["contributions"], 0) << "job 9's counts must not show under job 10";
  j = json::parse(HandleRequest("GET", "/api/v1/jobs/10", "", source_).body);
  EXPECT_EQ(j["counters"]["contributions"], 0);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(reader_threads, std::set<std::thread::id>({control_.id()}));
}

TEST_F(JobControlFixture, NoCounterReaderNoCounters) {
  StartControlThread();
  const json j = json::parse(HandleRequest("GET", "/api/v1/jobs/7", "", source_).body);
  EXPECT_EQ(j["id"], 7);
  EXPECT_TRUE(j["counters"].is_null());
}

config::TanConfig Tan(config::TanStrategy strategy) {
  config::TanConfig tan;
  tan.strategy = strategy;
  for (const char* ip : {"10.0.9.50", "10.0.9.51", "10.0.9.52"}) {
    config::TanCandidate c;
    c.address = *common::Ipv4Addr::Parse(ip);
    tan.candidates.push_back(c);
  }
  tan.candidates[0].hops = 3;
  tan.candidates[1].hops = 1;
  tan.candidates[2].hops = 1;
  return tan;
}

TEST(ChooseTanTest, EveryStrategy) {
  const uint32_t a = common::Ipv4Addr::Parse("10.0.9.50")->addr;
  const uint32_t b = common::Ipv4Addr::Parse("10.0.9.51")->addr;
  const uint32_t c = common::Ipv4Addr::Parse("10.0.9.52")->addr;
  EXPECT_EQ(ChooseTan(nullptr, 7, {}).mode, aggregator::JobSpec::Tan::kNone);
  const config::TanConfig fixed = Tan(config::TanStrategy::kFixed);
  TanChoice choice = ChooseTan(&fixed, 7, {});
  EXPECT_EQ(choice.mode, aggregator::JobSpec::Tan::kRemote);
  EXPECT_EQ(choice.peer.ip, a);
  EXPECT_EQ(choice.peer.udp_port, 47000);
  // Fewest hops: the first of the two at one hop.
  const config::TanConfig hops = Tan(config::TanStrategy::kFewestHops);
  EXPECT_EQ(ChooseTan(&hops, 7, {}).peer.ip, b);
  // Least load: the candidate with the fewest jobs, then list order.
  const config::TanConfig least = Tan(config::TanStrategy::kLeastLoad);
  EXPECT_EQ(ChooseTan(&least, 7, {{a, 2}, {b, 1}}).peer.ip, c);
  EXPECT_EQ(ChooseTan(&least, 7, {{a, 1}, {b, 1}, {c, 1}}).peer.ip, a);
  // Random by job id: the same job always gets the same candidate, and the
  // jobs spread over all of them.
  const config::TanConfig random = Tan(config::TanStrategy::kRandom);
  std::set<uint32_t> seen;
  for (uint32_t job = 1; job <= 64; ++job) {
    EXPECT_EQ(ChooseTan(&random, job, {}).peer.ip, ChooseTan(&random, job, {{a, 9}}).peer.ip);
    seen.insert(ChooseTan(&random, job, {}).peer.ip);
  }
  EXPECT_EQ(seen.size(), 3u);
  config::TanConfig self;
  self.strategy = config::TanStrategy::kSelf;
  EXPECT_EQ(ChooseTan(&self, 7, {}).mode, aggregator::JobSpec::Tan::kSelf);
}

TEST(JobSpecFromConfigTest, BuildsTheTree) {
  config::AggregationConfig agg;
  agg.timeout_ms = 20;
  agg.tan = Tan(config::TanStrategy::kLeastLoad);
  config::AggregationJobConfig spine;
  spine.id = 7;
  for (uint16_t node : {100, 101}) {
    config::ChildSwitchConfig child;
    child.node = node;
    for (uint16_t i = 0; i < 4; ++i) child.covers.push_back(static_cast<uint16_t>((node - 100) * 4 + i));
    spine.switches.push_back(child);
  }
  spine.members = 2;
  spine.trigger = config::AggTrigger::kBatch;
  TanLoad load;
  JobSpec spec = JobSpecFromConfig(spine, agg, 1'000'000'000, load);
  EXPECT_EQ(spec.member_nodes, (std::vector<uint16_t>{100, 101}));
  ASSERT_EQ(spec.covers.size(), 2u);
  EXPECT_EQ(spec.covers[1], (std::vector<uint16_t>{4, 5, 6, 7}));
  EXPECT_TRUE(spec.upstreams.empty()) << "the root";
  EXPECT_EQ(spec.tan, JobSpec::Tan::kRemote);
  EXPECT_EQ(spec.timeout_cycles, 20'000'000u);
  EXPECT_TRUE(spec.batch);
  EXPECT_FALSE(spec.parameter_server);
  EXPECT_EQ(load.size(), 1u) << "the TAN's load counts the job";
  // A second root job goes to another candidate under least_load.
  spine.id = 8;
  spine.parameter_server = true;
  const JobSpec second = JobSpecFromConfig(spine, agg, 1'000'000'000, load);
  EXPECT_NE(second.tan_peer.ip, spec.tan_peer.ip);
  EXPECT_TRUE(second.parameter_server);

  config::AggregationJobConfig leaf;
  leaf.id = 7;
  leaf.node_ids = {4, 5, 6, 7};
  leaf.members = 4;
  leaf.timeout_ms = 0;
  config::UpstreamConfig up;
  up.address = *common::Ipv4Addr::Parse("10.0.9.1");
  up.node = 101;
  leaf.upstream = up;
  spec = JobSpecFromConfig(leaf, agg, 1'000'000'000, load);
  EXPECT_EQ(spec.member_nodes, (std::vector<uint16_t>{4, 5, 6, 7}));
  EXPECT_EQ(spec.upstreams,
            (std::vector<aggregator::JobPeer>{{up.address.addr, 47000, 101, 0}}));
  EXPECT_EQ(spec.tan, JobSpec::Tan::kNone) << "only a root has a TAN";
  EXPECT_EQ(spec.timeout_cycles, 0u) << "the job's own timeout_ms wins";
}

TEST(AddConfigJobsTest, NamesTheFailingItem) {
  auto table = aggregator::JobTable::Create(4, 8);
  ASSERT_TRUE(table.ok());
  config::AggregationConfig agg;
  for (uint64_t key : {1, 2}) {
    config::AggregationJobConfig job;  // the same id twice
    job.id = 1;
    job.key = key;
    job.members = 2;
    agg.jobs.push_back(job);
  }
  const common::Status status = AddConfigJobs(**table, agg, 2000000000);
  EXPECT_EQ(status.code(), common::StatusCode::kAlreadyExists);
  EXPECT_EQ(status.message(), "aggregation.jobs[1]: job 1 already exists");
  EXPECT_EQ((*table)->Find(1)->origin(), aggregator::JobSpec::Origin::kConfig);
}

TEST(AddConfigJobsTest, BuildsParameterServerJobs) {
  auto table = aggregator::JobTable::Create(4, 8);
  ASSERT_TRUE(table.ok());
  config::AggregationConfig agg;
  agg.tan = Tan(config::TanStrategy::kFixed);
  for (uint32_t id : {1, 2}) {
    config::AggregationJobConfig job;
    job.id = id;
    job.key = id;
    job.members = 2;
    job.parameter_server = id == 2;
    agg.jobs.push_back(job);
  }
  ASSERT_TRUE(AddConfigJobs(**table, agg, 2000000000).ok());
  EXPECT_FALSE((*table)->Find(1)->parameter_server());
  const aggregator::Job* ps = (*table)->Find(2);
  EXPECT_TRUE(ps->parameter_server());
  EXPECT_EQ(ps->tan(), JobSpec::Tan::kRemote);
}

// Placement: round robin packs the jobs' partitions one after the other
// and reuses a removed job's; a hint names the base; random stays in the
// region; hash leaves the job spanning its whole region.
TEST(AddConfigJobsTest, PlacesJobsByPolicyAndHint) {
  auto table = aggregator::JobTable::Create(16, 8);
  ASSERT_TRUE(table.ok());
  config::AggregationConfig agg;
  agg.slots = 4096;           // 1024 in-band and 256 spare by default:
  agg.slots_per_job = 512;    // 2816 for config and API jobs, 5 partitions of 512
  agg.placement = config::SlotPlacement::kRoundRobin;
  ASSERT_EQ(agg.ProvisionedSlots(), 2816u);
  TanLoad load;
  auto admit = [&](uint32_t id, std::optional<uint32_t> hint = std::nullopt) {
    config::AggregationJobConfig job;
    job.id = id;
    job.key = id;
    job.members = 2;
    job.placement_hint = hint;
    common::Result<const aggregator::Job*> added =
        AdmitJob(**table, job, agg, JobSpec::Origin::kApi, 2000000000, load);
    EXPECT_TRUE(added.ok()) << added.status().message();
    return added.ok() ? *added : nullptr;
  };
  for (uint32_t id = 1; id <= 5; ++id) {
    const aggregator::Job* job = admit(id);
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(job->placed(), JobSpec::Placed::kRoundRobin);
    EXPECT_EQ(job->placement().span, 512u);
    EXPECT_EQ(job->placement().offset, (id - 1) * 512) << "job " << id;
  }
  // 2816 slots hold five partitions of 512: the sixth goes where the region
  // has room left only by overlapping (after the newest, job 5's end, 2560).
  EXPECT_EQ(admit(6)->placement().offset, 2560u);
  // Job 2 leaves: the next takes its partition.
  ASSERT_TRUE((*table)->Remove(2).ok());
  (*table)->Reclaim();
  EXPECT_EQ(admit(7)->placement().offset, 512u);
  // A hint wins over the policy.
  const aggregator::Job* hinted = admit(8, 100);
  EXPECT_EQ(hinted->placed(), JobSpec::Placed::kHint);
  EXPECT_EQ(hinted->placement().offset, 100u);
  EXPECT_EQ(hinted->placement().span, 512u);
  // Random: a partition somewhere in the region.
  agg.placement = config::SlotPlacement::kRandom;
  const aggregator::Job* random = admit(9);
  EXPECT_EQ(random->placed(), JobSpec::Placed::kRandom);
  EXPECT_LT(random->placement().offset, 2816u);
  EXPECT_EQ(random->placement().span, 512u);
  // Hash: the whole region, from the keyed hash.
  agg.placement = config::SlotPlacement::kHash;
  const aggregator::Job* hashed = admit(10);
  EXPECT_EQ(hashed->placed(), JobSpec::Placed::kHash);
  EXPECT_FALSE(hashed->placement().partitioned());
}

// --- Tree jobs and TAN choices: HandleRequest -> JobControl -> JobTable, against a
// running config -------------------------------------------------------------------

// The running config: a switch at 10.0.9.1 (VLAN 10) with slot timers, the
// `nodes` sub-switch entries and a least_load TAN default; job 7 is the root
// of a tree over two leaves, job 8 a leaf whose root is 10.0.9.2.
constexpr char kTreeConfig[] = R"(
eal: {lcores: "0,1"}
switch:
  addresses: [{address: 10.0.9.1/24, vlan: 10}]
ports:
  - {name: p0, devargs: net_ring0, access: 10}
  - {name: p1, devargs: net_ring1, access: 10}
aggregation:
  address: {address: 10.0.9.1, vlan: 10}
  in_band_registration: false
  max_fan_in: 16
  max_jobs: 16
  timeout_ms: 30
  bypass: {subswitch: nodes}
  tan:
    strategy: least_load
    candidates:
      - {address: 10.0.9.50}
      - {address: 10.0.9.51, port: 47001, hops: 1}
  jobs:
    - {id: 7, key: 7, nodes: 3, switches: [{node: 100, covers: [0-3]}, {node: 101, covers: [4-7]}]}
    - {id: 8, key: 8, node_ids: [0-3], upstream: {address: 10.0.9.2, node: 100}, tan_member: 2}
)";

// The same switch without an aggregation address (so no timers either).
constexpr char kNoAddressConfig[] = R"(
eal: {lcores: "0,1"}
ports:
  - {name: p0, devargs: net_ring0, access: 10}
aggregation:
  max_fan_in: 16
  max_jobs: 16
)";

class JobControlTreeTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kTscHz = 1'000'000'000;

  void SetUp() override {
    config_ = Load(kTreeConfig);
    auto table = aggregator::JobTable::Create(16, 16);
    ASSERT_TRUE(table.ok());
    table_ = std::move(table).value();
    ASSERT_TRUE(AddConfigJobs(*table_, config_.aggregation, kTscHz).ok());
    Start(config_);
  }
  void TearDown() override { Stop(); }

  static config::Config Load(const char* yaml) {
    config::ConfigLoad load = config::LoadConfigText(yaml, "test");
    EXPECT_TRUE(load.ok()) << load.FormatErrors();
    return load.config;
  }

  // A JobControl for `config` over the table, drained by a control thread
  // like ControlLoop::Run, with the TAN route wired as http_server.cc does.
  void Start(const config::Config& config) {
    Stop();
    JobControl::Options options;
    options.port_names = {"p0", "p1"};
    options.config = config;
    options.tsc_hz = kTscHz;
    jobs_ = std::make_unique<JobControl>(*table_, std::move(options));
    jobs_->SetChangeHook([this] {
      changes_.fetch_add(1);
      hook_threads_.insert(std::this_thread::get_id());  // read after the command, under its lock
    });
    source_ = SyntheticSource();
    jobs_->Attach(source_);
    source_.tan = [this](uint32_t job, const std::optional<TanRequest>& request) {
      return jobs_->Tan(job, request);
    };
    control_.Start(*jobs_, *table_);
  }
  void Stop() { control_.Stop(); }

  HttpResponse Post(const std::string& path, const std::string& body) {
    return HandleRequest("POST", path, "", body, source_);
  }
  json Get(const std::string& path) {
    const HttpResponse r = HandleRequest("GET", path, "", source_);
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    return json::parse(r.body);
  }
  // The address of the TAN job `id` uses ("" when none is remote).
  std::string TanAddress(uint32_t id) {
    const json j = Get("/api/v1/jobs/" + std::to_string(id) + "/tan");
    return j["mode"] == "remote" ? j["address"].get<std::string>() : "";
  }
  static uint32_t Ip(const char* text) { return common::Ipv4Addr::Parse(text)->addr; }

  config::Config config_;
  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<JobControl> jobs_;
  DataSource source_;
  std::atomic<int> changes_{0};
  std::set<std::thread::id> hook_threads_;
  ControlThread control_;
};

// A root job posted with the config's keys: the table holds what
// JobSpecFromConfig builds from the same keys, and the API shows it back.
TEST_F(JobControlTreeTest, AddsARootJobBuiltLikeAConfigJob) {
  const std::string body = R"({"id": 9, "key": "0x9", "nodes": 3, "node_ids": [20],
      "switches": [{"node": 100, "covers": ["0-3"]}, {"node": 101, "covers": ["4-6", 7]}],
      "timeout_ms": 20, "trigger": "batch", "tan_member": 20,
      "tan": {"strategy": "fewest_hops", "candidates": [{"address": "10.0.9.50", "hops": 3},
                                                        {"address": "10.0.9.51", "port": 47001, "hops": 1}]}})";
  HttpResponse r = Post("/api/v1/jobs", body);
  ASSERT_EQ(r.status, 201) << r.body;
  const json shown = json::parse(r.body);
  EXPECT_EQ(shown["origin"], "api");
  EXPECT_EQ(shown["members"], 3);
  EXPECT_EQ(shown["node_ids"], json::parse("[20]"));
  EXPECT_EQ(shown["switches"], json::parse(R"([{"node": 100, "covers": [0, 1, 2, 3]},
                                               {"node": 101, "covers": [4, 5, 6, 7]}])"));
  EXPECT_TRUE(shown["upstream"].is_null());
  EXPECT_EQ(shown["timeout_ms"], 20);
  EXPECT_EQ(shown["trigger"], "batch");
  EXPECT_EQ(shown["tan"],
            json::parse(
                R"({"mode": "remote", "address": "10.0.9.51", "port": 47001, "resolved": false})"));
  EXPECT_EQ(shown["tan_member"], 20);
  EXPECT_EQ(shown["parameter_server"], false);
  json detail = Get("/api/v1/jobs/9");
  for (const char* key : {"node_ids", "switches", "upstream", "timeout_ms", "trigger", "tan",
                          "tan_member", "parameter_server"}) {
    EXPECT_EQ(detail[key], shown[key]) << key;
  }

  const aggregator::Job* job = table_->Find(9);
  ASSERT_NE(job, nullptr);
  const common::Result<JobRequest> request = ParseJobRequest(body);
  ASSERT_TRUE(request.ok());
  TanLoad load;
  const JobSpec spec = JobSpecFromConfig(request->job, config_.aggregation, kTscHz, load);
  EXPECT_EQ(job->origin(), JobSpec::Origin::kApi);
  EXPECT_EQ(job->key(), 9u);
  EXPECT_EQ(job->nodes(), 3);
  ASSERT_EQ(job->members(), 3);
  for (uint16_t i = 0; i < 3; ++i) {
    EXPECT_EQ(job->NodeId(i), spec.member_nodes[i]) << i;
    EXPECT_EQ(job->IsSwitch(i), !spec.covers[i].empty()) << i;
    const auto covers = job->Covers(i);
    EXPECT_EQ(std::vector<uint16_t>(covers.begin(), covers.end()), spec.covers[i]) << i;
  }
  EXPECT_EQ(job->NodeId(1), 100);
  EXPECT_EQ(job->LocalIndex(101), 2);
  EXPECT_TRUE(job->is_root());
  EXPECT_EQ(job->timeout_cycles(), 20'000'000u);
  EXPECT_EQ(job->timeout_cycles(), spec.timeout_cycles);
  EXPECT_TRUE(job->batch());
  EXPECT_TRUE(job->bypass_covered_nodes()) << "aggregation.bypass.subswitch: nodes";
  EXPECT_EQ(job->tan(), JobSpec::Tan::kRemote);
  EXPECT_EQ(job->tan_peer().ip, Ip("10.0.9.51")) << "fewest hops";
  EXPECT_EQ(job->tan_peer().udp_port, 47001);
  EXPECT_EQ(job->tan_peer().ip, spec.tan_peer.ip);
  EXPECT_EQ(job->tan_member(), 20);

  // The choice came with the job, through the API.
  const json tan = Get("/api/v1/jobs/9/tan");
  EXPECT_EQ(tan["chosen_by"], "api");
  EXPECT_EQ(tan["strategy"], "fewest_hops");
  EXPECT_EQ(tan["candidates"].size(), 2u);
  // The tree resolves the new job's next hops now, on the control thread.
  EXPECT_EQ(changes_.load(), 1);
  EXPECT_EQ(hook_threads_, std::set<std::thread::id>({control_.id()}));
}

TEST_F(JobControlTreeTest, AddsALeafWithTheConfigDefaults) {
  HttpResponse r = Post("/api/v1/jobs", R"({"id": 10, "key": 10, "node_ids": ["8-11"],
      "upstream": {"address": "10.0.9.2", "port": 47001, "node": 102, "vlan": 10}, "tan_member": 9})");
  ASSERT_EQ(r.status, 201) << r.body;
  const aggregator::Job* job = table_->Find(10);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->members(), 4);
  EXPECT_EQ(job->LocalIndex(8), 0);
  EXPECT_EQ(job->LocalIndex(11), 3);
  EXPECT_EQ(job->LocalIndex(7), -1);
  EXPECT_FALSE(job->IsSwitch(0));
  EXPECT_FALSE(job->is_root());
  ASSERT_EQ(job->upstreams().size(), 1u);
  EXPECT_EQ(job->upstreams()[0], (aggregator::JobPeer{Ip("10.0.9.2"), 47001, 102, 10}));
  EXPECT_EQ(job->tan(), JobSpec::Tan::kNone) << "a leaf has no TAN of its own";
  EXPECT_EQ(job->timeout_cycles(), 30'000'000u) << "aggregation.timeout_ms";
  EXPECT_FALSE(job->batch()) << "aggregation.trigger";
  EXPECT_EQ(job->tan_member(), 9);
  json j = json::parse(r.body);
  EXPECT_EQ(j["node_ids"], json::parse("[8, 9, 10, 11]"));
  EXPECT_EQ(
      j["upstream"],
      json::parse(
          R"({"address": "10.0.9.2", "port": 47001, "node": 102, "vlan": 10, "resolved": false})"));
  EXPECT_EQ(j["timeout_ms"], 30);
  EXPECT_EQ(j["trigger"], "incremental");
  EXPECT_EQ(j["tan"]["mode"], "none");
  // Once ARP answers (TreeControl publishes the hop), the API says so.
  job->SetHop(job->ParentHop(0), {0x02a99c000902ull, 0, 10, Ip("10.0.9.2"), 47001});
  EXPECT_EQ(Get("/api/v1/jobs/10")["upstream"]["resolved"], true);
  j = Get("/api/v1/jobs/10/tan");
  EXPECT_EQ(j["root"], false);
  EXPECT_TRUE(j["chosen_by"].is_null());
  EXPECT_EQ(j["member"], 9);

  // A flat job: node ids 0..members-1 and every switch-wide default,
  // the TAN by aggregation.tan (least_load: job 7 took 10.0.9.50).
  r = Post("/api/v1/jobs", R"({"id": 11, "key": 1, "members": 3})");
  ASSERT_EQ(r.status, 201) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["node_ids"], json::parse("[0, 1, 2]"));
  EXPECT_EQ(j["switches"], json::array());
  EXPECT_EQ(j["timeout_ms"], 30);
  EXPECT_EQ(j["tan"]["address"], "10.0.9.51");
  EXPECT_TRUE(j["tan_member"].is_null());
  j = Get("/api/v1/jobs/11/tan");
  EXPECT_EQ(j["chosen_by"], "config") << "aggregation.tan";
  EXPECT_EQ(j["strategy"], "least_load");
}

// parameter_server through the API: a root job whose remote TAN (agg-ps
// --sgd) answers every chunk; the table holds what JobSpecFromConfig builds.
TEST_F(JobControlTreeTest, AddsAParameterServerJob) {
  const std::string body = R"({"id": 9, "key": 1, "members": 2, "parameter_server": true})";
  HttpResponse r = Post("/api/v1/jobs", body);
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body)["parameter_server"], true);
  EXPECT_EQ(Get("/api/v1/jobs/9")["parameter_server"], true);
  const json listed = Get("/api/v1/jobs");
  EXPECT_EQ(listed["jobs"][0]["parameter_server"], false) << "job 7";
  EXPECT_EQ(listed["jobs"][2]["parameter_server"], true) << "job 9";
  const aggregator::Job* job = table_->Find(9);
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(job->parameter_server());
  EXPECT_TRUE(job->is_root());
  EXPECT_EQ(job->tan(), JobSpec::Tan::kRemote) << "aggregation.tan";
  const common::Result<JobRequest> request = ParseJobRequest(body);
  ASSERT_TRUE(request.ok());
  TanLoad load;
  EXPECT_TRUE(JobSpecFromConfig(request->job, config_.aggregation, kTscHz, load).parameter_server);
  // The job's own remote tan will do as well.
  r = Post("/api/v1/jobs", R"({"id": 10, "key": 1, "members": 2, "parameter_server": true,
      "tan": {"candidates": [{"address": "10.0.9.60"}]}})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_TRUE(table_->Find(10)->parameter_server());
  EXPECT_EQ(table_->Find(10)->tan_peer().ip, Ip("10.0.9.60"));
  r = Post("/api/v1/jobs", R"({"id": 11, "key": 1, "members": 2, "parameter_server": false})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body)["parameter_server"], false);
  EXPECT_FALSE(table_->Find(11)->parameter_server());
  EXPECT_FALSE(table_->Find(7)->parameter_server()) << "a config job without the key";
}

// placement_hint through the API: the job's partition starts there, and the
// API shows how it was placed; a hint past the region is refused by name.
TEST_F(JobControlTreeTest, AddsAJobAtItsPlacementHint) {
  HttpResponse r = Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2, "placement_hint": 40})");
  ASSERT_EQ(r.status, 201) << r.body;
  const json placement = json::parse(r.body)["placement"];
  EXPECT_EQ(placement["policy"], "hint");
  EXPECT_EQ(placement["base"], placement["first"].get<uint32_t>() + 40);
  EXPECT_EQ(placement["span"], config_.aggregation.SlotsPerJob());
  EXPECT_EQ(Get("/api/v1/jobs/7")["placement"]["policy"], "hash") << "the config's default";
  EXPECT_EQ(Get("/api/v1/jobs/7")["placement"]["span"], 0);
  r = Post("/api/v1/jobs", R"({"id": 10, "key": 1, "members": 2, "placement_hint": 1000000})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("placement_hint: expected a slot index 0.."), std::string::npos) << r.body;
  // A move shows as the partition it moved to, from its cut (null before).
  EXPECT_TRUE(Get("/api/v1/jobs/9")["placement"]["moved"].is_null());
  ASSERT_TRUE(table_->Find(9)->SetMove({77, 100}));
  const json moved = Get("/api/v1/jobs/9")["placement"]["moved"];
  EXPECT_EQ(moved["cut"], 77);
  EXPECT_EQ(moved["base"], placement["first"].get<uint32_t>() + 100);
  EXPECT_EQ(moved["span"], config_.aggregation.SlotsPerJob());
}

// Without a remote TAN to answer its chunks there is no parameter server.
TEST_F(JobControlTreeTest, AParameterServerJobNeedsARemoteTan) {
  Start(Load(kNoAddressConfig));
  const HttpResponse r =
      Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2, "parameter_server": true})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"],
            "parameter_server: expected a remote tan for a parameter-server job (the job's tan, or "
            "aggregation.tan, with a strategy other than \"self\": the agg-ps --sgd that answers "
            "every chunk), got none");
  EXPECT_EQ(table_->Find(9), nullptr);
}

// A parameter-server job's TAN is its parameter server: it stays remote, and
// a request that would make it "self" changes nothing.
TEST_F(JobControlTreeTest, AParameterServerJobKeepsARemoteTan) {
  ASSERT_EQ(
      Post("/api/v1/jobs", R"({"id": 9, "key": 1, "node_ids": [0, 1], "parameter_server": true})")
          .status,
      201);
  const aggregator::Job* job = table_->Find(9);
  ASSERT_NE(job, nullptr);
  const aggregator::JobPeer before = job->tan_peer();
  const int adds = changes_.load();
  for (const char* body : {R"({"strategy": "self"})", R"({"strategy": "self", "member": 1})"}) {
    const HttpResponse r = Post("/api/v1/jobs/9/tan", body);
    EXPECT_EQ(r.status, 409) << body;
    EXPECT_EQ(json::parse(r.body)["error"],
              "job 9 is a parameter-server job: its TAN (agg-ps --sgd) answers every chunk, so it "
              "must stay a remote one; choose among candidates, not \"self\"")
        << body;
  }
  EXPECT_EQ(job->tan(), JobSpec::Tan::kRemote) << "nothing of a refused request applies";
  EXPECT_EQ(job->tan_peer().ip, before.ip);
  EXPECT_EQ(job->tan_peer().udp_port, before.udp_port);
  EXPECT_EQ(job->tan_member(), aggregator::kNoNode);
  EXPECT_EQ(changes_.load(), adds);
  json tan = Get("/api/v1/jobs/9/tan");
  EXPECT_EQ(tan["mode"], "remote");
  EXPECT_EQ(tan["chosen_by"], "config") << "aggregation.tan, still";
  // Another remote TAN, and a member, it takes.
  HttpResponse r =
      Post("/api/v1/jobs/9/tan", R"({"candidates": [{"address": "10.0.9.60"}], "member": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(job->tan_peer().ip, Ip("10.0.9.60"));
  EXPECT_EQ(job->tan_member(), 1);
  EXPECT_TRUE(job->parameter_server());
  // Other jobs may still be their own TAN.
  r = Post("/api/v1/jobs/7/tan", R"({"strategy": "self"})");
  EXPECT_EQ(r.status, 200) << r.body;
}

// The config jobs show their tree too, and a learned member its node id.
TEST_F(JobControlTreeTest, ConfigJobsShowTheirTree) {
  aggregator::MemberAddr from;
  from.mac48 = 0x020000000001ull;
  from.port_index = 1;
  from.vlan = 10;
  from.ip = Ip("10.0.9.12");
  from.udp_port = 47000;
  (void)table_->Find(7)->BindMember(1, from, 0, 1, 0);
  const json jobs = Get("/api/v1/jobs");
  ASSERT_EQ(jobs["count"], 2);
  const json& root = jobs["jobs"][0];
  EXPECT_EQ(root["node_ids"], json::array());
  EXPECT_EQ(root["switches"][1], json::parse(R"({"node": 101, "covers": [4, 5, 6, 7]})"));
  EXPECT_EQ(root["learned_members"][0]["node"], 101) << "member index 1 is node 101";
  EXPECT_EQ(root["tan"]["address"], "10.0.9.50");
  const json& leaf = jobs["jobs"][1];
  EXPECT_EQ(leaf["upstream"]["address"], "10.0.9.2");
  EXPECT_EQ(leaf["upstream"]["port"], 47000);
  EXPECT_EQ(leaf["tan_member"], 2);
  const json tan = Get("/api/v1/jobs/7/tan");
  EXPECT_EQ(tan, json::parse(R"({"job": 7, "root": true, "mode": "remote",
      "address": "10.0.9.50", "port": 47000, "resolved": false, "member": null,
      "chosen_by": "config", "strategy": "least_load", "candidates": [
        {"address": "10.0.9.50", "port": 47000, "hops": 0},
        {"address": "10.0.9.51", "port": 47001, "hops": 1}]})"));
}

// The config's rules, with the config's messages, each under the body's key.
TEST_F(JobControlTreeTest, ConfigRulesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"switches": [{"node": 100, "covers": [0]}, {"node": 101, "covers": [101]}]})",
       R"(switches[1].covers[0]: expected the node ids below switch "101", not its own, got "101")"},
      {R"({"node_ids": [0, 1], "switches": [{"node": 100, "covers": [1]}]})",
       R"(switches[0].covers[0]: expected the node ids below switch "100", not a member of the job here, got "1" (also node_ids[1]))"},
      {R"({"switches": [{"node": 100, "covers": [0, 1]}, {"node": 101, "covers": [1]}]})",
       R"(switches[1].covers[0]: expected each node id below one child switch, once, got "1" again (also switches[0].covers[1]))"},
      {R"({"node_ids": ["0-3", 2]})",
       R"(node_ids[4]: expected each member's node id once in the job, got "2" again (also node_ids[2]))"},
      {R"({"members": 3, "node_ids": [0, 1]})",
       R"(members: expected members to equal the node ids and child switches listed (2 node_ids + 0 switches = 2), got "3")"},
      {R"({"members": 17})",
       R"(members: expected 1..16 members (aggregation.max_fan_in), got "17")"},
      {R"({"node_ids": []})",
       R"(node_ids: expected 1..16 members (aggregation.max_fan_in), got none (node_ids and switches are empty))"},
      {R"({"switches": [{"node": 100}]})",
       R"(switches[0]: expected covers, the node ids below switch "100" (aggregation.bypass.subswitch is nodes: a late child's entries are the nodes it covers), got none)"},
      {R"({"members": 2, "upstream": {"address": "10.0.9.2", "node": 5}, "tan": {"strategy": "self"}})",
       R"(tan: expected no tan: a TAN is chosen by the root; this job has an upstream (upstream))"},
      {R"({"node_ids": [0], "switches": [{"node": 100, "covers": [1]}], "tan_member": 100})",
       R"(tan_member: expected the node id of a worker of this job here (one that also runs the job's TAN), got "100")"},
      {R"({"members": 2, "tan_member": 5})",
       R"(tan_member: expected the node id of a worker of this job here (one that also runs the job's TAN), got "5")"},
      {R"({"members": 2, "tan": {"strategy": "self"}, "parameter_server": true})",
       R"(parameter_server: expected a remote tan for a parameter-server job (the job's tan, or aggregation.tan, with a strategy other than "self": the agg-ps --sgd that answers every chunk), got strategy "self" (tan))"},
      {R"({"members": 2, "ordered": true, "trigger": "incremental"})",
       R"(trigger: expected batch, or no trigger, for an ordered job (it reduces in member order), got "incremental")"},
      {R"({"members": 2, "upstream": {"address": "10.0.9.1", "node": 5}})",
       R"(upstream.address: expected the parent switch's aggregation address, got this switch's own aggregation address "10.0.9.1")"},
      {R"({"members": 2, "upstream": {"address": "0.0.0.0", "node": 5}})",
       R"(upstream.address: expected the parent switch's aggregation address, a unicast host address, got "0.0.0.0")"},
      {R"({"node_ids": ["0-3"], "upstream": {"address": "10.0.9.2", "node": 2}})",
       R"(upstream.node: expected this switch's node id in the parent, not one of this job's members, got "2" (also node_ids[2]))"},
      {R"({"members": 2, "upstream": {"address": "10.0.9.2", "node": 5, "vlan": 20}})",
       R"(upstream.vlan: expected a VLAN that some port carries, got "20")"},
      {R"({"members": 2, "tan": {"strategy": "random"}})",
       R"(tan.candidates: expected 1..64 candidates for strategy "random" (or strategy "self"), got none)"},
      {R"({"members": 2, "tan": {"strategy": "self", "candidates": [{"address": "10.0.9.50"}]}})",
       R"(tan.candidates: expected no candidates with strategy "self" (this switch is the TAN), got 1)"},
      {R"({"members": 2, "tan": {"candidates": [{"address": "10.0.9.50"}, {"address": "10.0.9.50", "port": 47000}]}})",
       R"(tan.candidates[1]: expected each candidate once, got 10.0.9.50:47000 again (also tan.candidates[0]))"},
      {R"({"members": 2, "tan": {"candidates": [{"address": "224.0.0.1"}]}})",
       R"(tan.candidates[0].address: expected a TAN's address (strategy "self" makes this switch the TAN), a unicast host address, got "224.0.0.1")"},
      // Every mistake at once, in the config's order.
      {R"({"node_ids": [0, 0], "members": 3})",
       R"(members: expected members to equal the node ids and child switches listed (2 node_ids + 0 switches = 2), got "3"; node_ids[1]: expected each member's node id once in the job, got "0" again (also node_ids[0]))"},
  };
  for (const auto& [fields, message] : cases) {
    std::string body = std::string(R"({"id": 9, "key": 1, )") + (fields + 1);
    const HttpResponse r = Post("/api/v1/jobs", body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    const std::string error = json::parse(r.body).value("error", "");
    EXPECT_EQ(error.substr(0, std::string(message).size()), message) << body;
  }
  EXPECT_EQ(table_->Find(9), nullptr) << "a refused job never reaches the table";
  EXPECT_EQ(changes_.load(), 0);
}

// Timers and upstreams need the switch's own aggregation address.
TEST_F(JobControlTreeTest, TimersNeedTheAggregationAddress) {
  Start(Load(kNoAddressConfig));
  HttpResponse r = Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2, "timeout_ms": 20})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"],
            "timeout_ms: expected aggregation.address to be set: job 9 has timers on (timeout_ms "
            "20) (a switch sends partials, and first data to the TAN, from its own address)");
  r = Post("/api/v1/jobs",
           R"({"id": 9, "key": 1, "members": 2, "upstream": {"address": "10.0.9.2", "node": 5}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"],
            "upstream: expected aggregation.address to be set: job 9 has an upstream (a switch "
            "sends partials, and first data to the TAN, from its own address)");
  r = Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2})");
  EXPECT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(json::parse(r.body)["timeout_ms"], 0);
}

// A choice posted to the root is picked as ChooseTan picks among the
// candidates; least_load counts what the table holds at that moment.
TEST_F(JobControlTreeTest, TanChoicesPickAsTheConfigDoesAndCountTheLoad) {
  const std::string both = R"({"strategy": "least_load", "candidates": [
      {"address": "10.0.9.50"}, {"address": "10.0.9.51", "port": 47001}]})";
  // Job 7 (config) took .50; API jobs take the default, least_load, in turn.
  ASSERT_EQ(Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2})").status, 201);
  ASSERT_EQ(Post("/api/v1/jobs", R"({"id": 10, "key": 1, "members": 2})").status, 201);
  EXPECT_EQ(TanAddress(9), "10.0.9.51");
  EXPECT_EQ(TanAddress(10), "10.0.9.50") << "a tie: list order";
  const int adds = changes_.load();

  // Job 10 left out, each candidate has one job: the first.
  HttpResponse r = Post("/api/v1/jobs/10/tan", both);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["address"], "10.0.9.50");
  EXPECT_EQ(j["chosen_by"], "api");
  EXPECT_EQ(j["strategy"], "least_load");
  EXPECT_EQ(changes_.load(), adds + 1) << "the tree resolves the new TAN now";
  // A removed job no longer counts: .51 is free.
  ASSERT_EQ(HandleRequest("DELETE", "/api/v1/jobs/9", "", source_).status, 204);
  r = Post("/api/v1/jobs/10/tan", both);
  EXPECT_EQ(json::parse(r.body)["address"], "10.0.9.51");
  EXPECT_EQ(table_->Find(10)->tan_peer().ip, Ip("10.0.9.51"));
  EXPECT_EQ(table_->Find(10)->tan_peer().udp_port, 47001);
  // Nor does a job whose TAN moved: the management node's own pick for job
  // 7 (one candidate, fixed) takes it off .50.
  r = Post("/api/v1/jobs/7/tan", R"({"candidates": [{"address": "10.0.9.60", "port": 47100}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["address"], "10.0.9.60");
  EXPECT_EQ(j["port"], 47100);
  EXPECT_EQ(j["strategy"], "fixed");
  EXPECT_EQ(j["resolved"], false) << "a new TAN is resolved anew";
  r = Post("/api/v1/jobs/10/tan", both);
  EXPECT_EQ(json::parse(r.body)["address"], "10.0.9.50");

  // fewest_hops and random pick what ChooseTan picks.
  config::TanConfig three;
  for (const auto& [ip, hops] : {std::pair{"10.0.9.50", 3}, {"10.0.9.51", 1}, {"10.0.9.52", 1}}) {
    config::TanCandidate c;
    c.address = *common::Ipv4Addr::Parse(ip);
    c.hops = static_cast<uint16_t>(hops);
    three.candidates.push_back(c);
  }
  const std::string candidates = R"([{"address": "10.0.9.50", "hops": 3},
      {"address": "10.0.9.51", "hops": 1}, {"address": "10.0.9.52", "hops": 1}])";
  r = Post("/api/v1/jobs/10/tan",
           R"({"strategy": "fewest_hops", "candidates": )" + candidates + "}");
  EXPECT_EQ(json::parse(r.body)["address"], "10.0.9.51");
  three.strategy = config::TanStrategy::kRandom;
  for (uint32_t id : {7u, 10u}) {
    r = Post("/api/v1/jobs/" + std::to_string(id) + "/tan",
             R"({"strategy": "random", "candidates": )" + candidates + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(table_->Find(id)->tan_peer().ip, ChooseTan(&three, id, {}).peer.ip) << id;
  }
  // The root is its own TAN.
  r = Post("/api/v1/jobs/10/tan", R"({"strategy": "self"})");
  j = json::parse(r.body);
  EXPECT_EQ(j["mode"], "self");
  EXPECT_TRUE(j["address"].is_null());
  EXPECT_EQ(j["strategy"], "self");
  EXPECT_EQ(table_->Find(10)->tan(), JobSpec::Tan::kSelf);
  // Once ARP resolves a remote TAN, the report says so.
  const aggregator::Job* job7 = table_->Find(7);
  const aggregator::JobPeer peer = job7->tan_peer();
  job7->SetHop(aggregator::Job::kTanHop, {0x02a99c000950ull, 1, 10, peer.ip, peer.udp_port});
  EXPECT_EQ(Get("/api/v1/jobs/7/tan")["resolved"], true);
}

// Who may take a choice, and what a member must be; a request is applied
// whole or not at all.
TEST_F(JobControlTreeTest, TanChangesAreCheckedWhole) {
  const aggregator::Job* root = table_->Find(7);
  const aggregator::Job* leaf = table_->Find(8);
  const uint32_t root_tan = root->tan_peer().ip;

  HttpResponse r = Post("/api/v1/jobs/8/tan", R"({"strategy": "self"})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(json::parse(r.body)["error"],
            "job 8 has an upstream here (10.0.9.2:47000): its TAN is chosen at its root; here only "
            "the member may be set");
  r = Post("/api/v1/jobs/8/tan", R"({"member": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["member"], 3);
  EXPECT_EQ(leaf->tan_member(), 3);
  r = Post("/api/v1/jobs/8/tan", R"({"strategy": "self", "member": 1})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(leaf->tan_member(), 3) << "nothing of a refused request applies";
  r = Post("/api/v1/jobs/8/tan", R"({"member": 100})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"],
            "member: expected the node id of a worker of job 8 at this switch, got 100");
  r = Post("/api/v1/jobs/8/tan", R"({"member": null})");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(json::parse(r.body)["member"].is_null());
  EXPECT_EQ(leaf->tan_member(), aggregator::kNoNode);

  // Node 100 is a child switch of job 7, not a worker.
  r = Post("/api/v1/jobs/7/tan", R"({"strategy": "self", "member": 100})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(root->tan(), JobSpec::Tan::kRemote) << "nothing of a refused request applies";
  // The config's rules for a tan, under the body's keys.
  const std::pair<const char*, const char*> cases[] = {
      {R"({"candidates": [{"address": "10.0.9.1"}]})",
       R"(candidates[0].address: expected a TAN's address (strategy "self" makes this switch the TAN), got this switch's own aggregation address "10.0.9.1")"},
      {R"({"strategy": "fixed"})",
       R"(candidates: expected 1..64 candidates for strategy "fixed" (or strategy "self"), got none)"},
      {R"({"strategy": "self", "candidates": [{"address": "10.0.9.50"}]})",
       R"(candidates: expected no candidates with strategy "self" (this switch is the TAN), got 1)"},
      {R"({"candidates": [{"address": "10.0.9.50"}, {"address": "10.0.9.50"}]})",
       R"(candidates[1]: expected each candidate once, got 10.0.9.50:47000 again (also candidates[0]))"},
      {R"({"candidates": [{"address": "127.0.0.1"}], "member": 100})",
       R"(candidates[0].address: expected a TAN's address (strategy "self" makes this switch the TAN), a unicast host address, got "127.0.0.1")"},
  };
  for (const auto& [body, message] : cases) {
    r = Post("/api/v1/jobs/7/tan", body);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.body;
    const std::string error = json::parse(r.body).value("error", "");
    EXPECT_EQ(error.substr(0, std::string(message).size()), message) << body;
  }
  std::string many = R"({"candidates": [)";
  for (int i = 0; i < 65; ++i)
    many += (i ? "," : "") + std::string(R"({"address": "10.0.8.)") + std::to_string(i + 1) + "\"}";
  r = Post("/api/v1/jobs/7/tan", many + "]}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"], "candidates: expected at most 64 candidates, got 65");
  EXPECT_EQ(Post("/api/v1/jobs/99/tan", R"({"member": 1})").status, 404);
  EXPECT_EQ(Post("/api/v1/jobs/99/tan", R"({"strategy": "self"})").status, 404);
  EXPECT_EQ(root->tan_peer().ip, root_tan);
  EXPECT_EQ(changes_.load(), 0) << "no TAN changed";
}

// A job removed and added again under its id starts from its own choice.
TEST_F(JobControlTreeTest, AJobAddedAgainDoesNotInheritTheChoice) {
  ASSERT_EQ(Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2,
      "tan": {"candidates": [{"address": "10.0.9.60"}]}})")
                .status,
            201);
  EXPECT_EQ(Get("/api/v1/jobs/9/tan")["chosen_by"], "api");
  ASSERT_EQ(Post("/api/v1/jobs/9/tan", R"({"strategy": "self"})").status, 200);
  ASSERT_EQ(HandleRequest("DELETE", "/api/v1/jobs/9", "", source_).status, 204);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/9/tan", "", source_).status, 404);
  ASSERT_EQ(Post("/api/v1/jobs", R"({"id": 9, "key": 1, "members": 2})").status, 201);
  const json j = Get("/api/v1/jobs/9/tan");
  EXPECT_EQ(j["chosen_by"], "config");
  EXPECT_EQ(j["strategy"], "least_load");
  EXPECT_EQ(j["mode"], "remote");
}

TEST(ApiIntTest, ParseWatchBodyReadsEveryKeyAndNamesTheBadOne) {
  auto watch = ParseWatchBody(
      R"({"watch": [{"name": "g", "vlan": 10, "src": "10.0.0.0/8", "dst": "10.1.2.0/24",
                     "port": 5000, "sample": 100, "instructions": "both"},
                    {"name": "j", "job": 7}]})");
  ASSERT_TRUE(watch.ok()) << watch.status().ToString();
  ASSERT_EQ(watch->size(), 2u);
  EXPECT_EQ((*watch)[0].vlan, 10);
  EXPECT_EQ((*watch)[0].src->ToString(), "10.0.0.0/8");
  EXPECT_EQ((*watch)[0].dst->ToString(), "10.1.2.0/24");
  EXPECT_EQ((*watch)[0].port, 5000);
  EXPECT_EQ((*watch)[0].sample, 100u);
  EXPECT_EQ((*watch)[0].instructions, config::IntInstructions::kBoth);
  EXPECT_EQ((*watch)[1].job, 7u);
  EXPECT_EQ((*watch)[1].instructions, config::IntInstructions::kLatency);
  ASSERT_TRUE(ParseWatchBody(R"({"watch": []})").ok());

  const auto error = [](std::string_view body) {
    auto r = ParseWatchBody(body);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(error(R"({"watch": [{"name": "g", "sample": 0}]})").find("watch[0].sample must be 1.."),
            std::string::npos);
  EXPECT_NE(error(R"({"watch": [{"name": "g", "instructions": "jitter"}]})")
                .find("watch[0].instructions must be"),
            std::string::npos);
  EXPECT_NE(error(R"({"watch": [{"name": "g", "dst": "10.1.2"}]})").find("watch[0].dst must be"),
            std::string::npos);
  EXPECT_NE(error(R"({"watch": [{"name": "g", "colour": 1}]})").find("unknown field \"watch[0].colour\""),
            std::string::npos);
  EXPECT_NE(error(R"({"watch": [{"port": 1}]})").find("watch[0].name is required"), std::string::npos);
  EXPECT_NE(error(R"({"list": []})").find("unknown field"), std::string::npos);
  EXPECT_NE(error(R"([1])").find("JSON object"), std::string::npos);
}

TEST(ApiIntTest, TheRouteShowsAndReplacesTheWatchList) {
  std::vector<config::WatchEntry> in_force;
  DataSource source = Source(
      [&] {
        StatsSnapshot snap = SyntheticSnapshot();
        IntSnapshot& t = snap.telemetry.emplace();
        t.node_id = 4;
        t.int_port = 7700;
        t.max_hops = 8;
        t.collector = "10.0.0.9:32766";
        t.fabric_ports = {"uplink"};
        t.watch = in_force;
        t.inserted = 12;
        t.reports_sent = 30;
        return snap;
      },
      [] { return SyntheticMacs(); });
  HttpResponse r = HandleRequest("GET", "/api/v1/int", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(HasNumber(r.body, "node_id", "4"));
  EXPECT_TRUE(HasNumber(r.body, "inserted", "12"));
  EXPECT_TRUE(HasNumber(r.body, "sent", "30"));
  EXPECT_NE(r.body.find("\"fabric_ports\":[\"uplink\"]"), std::string::npos);
  EXPECT_NE(r.body.find("\"watch\":[]"), std::string::npos);

  EXPECT_EQ(HandleRequest("PUT", "/api/v1/int", "", R"({"watch": []})", source).status, 503)
      << "no setter: telemetry off";
  source.set_watch = [&](const std::vector<config::WatchEntry>& w) {
    if (!w.empty() && w[0].name == "bad") return common::InvalidArgument("watch[0].vlan: no port carries it");
    in_force = w;
    return common::Status::Ok();
  };
  r = HandleRequest("PUT", "/api/v1/int", "", R"({"watch": [{"name": "g", "port": 5000}]})", source);
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(in_force.size(), 1u);
  EXPECT_NE(r.body.find("\"name\":\"g\""), std::string::npos) << r.body;
  EXPECT_TRUE(HasNumber(r.body, "port", "5000"));
  r = HandleRequest("PUT", "/api/v1/int", "", R"({"watch": [{"name": "bad", "vlan": 9}]})", source);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("no port carries it"), std::string::npos);
  EXPECT_EQ(in_force.size(), 1u) << "refused: the list in force stays";
  r = HandleRequest("DELETE", "/api/v1/int", "", source);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, PUT");

  DataSource off = SyntheticSource();
  EXPECT_EQ(HandleRequest("GET", "/api/v1/int", "", off).status, 503);
}

TEST(ApiIntTest, ParseDecisionsBodyTakesPortsByNameOrIndex) {
  auto ok = ParseDecisionsBody(
      R"({"decisions": [{"dst": "10.0.80.2/32", "port": "s2"}, {"dst": "10.0.81.0/24", "port": 3}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].dst.ToString(), "10.0.80.2/32");
  EXPECT_EQ((*ok)[0].port, "s2");
  EXPECT_FALSE((*ok)[0].port_index.has_value());
  EXPECT_EQ((*ok)[1].port_index, 3);
  const auto error = [](std::string_view body) {
    auto r = ParseDecisionsBody(body);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(error(R"({"decisions": [{"dst": "10.0.80.2/33", "port": 1}]})").find("decisions[0].dst must be an IPv4 prefix"),
            std::string::npos);
  EXPECT_NE(error(R"({"decisions": [{"dst": "10.0.80.2/32"}]})").find("decisions[0].port is required"),
            std::string::npos);
  EXPECT_NE(error(R"({"decisions": [{"dst": "10.0.80.2/32", "port": -1}]})").find("decisions[0].port"),
            std::string::npos);
  EXPECT_NE(error(R"({"decisions": [{"dst": "10.0.80.2/32", "port": 1, "via": 2}]})").find("decisions[0].via"),
            std::string::npos);
  EXPECT_NE(error(R"({"paths": []})").find("paths"), std::string::npos);
  EXPECT_NE(error(R"({"decisions": 1})").find("decisions must be a list"), std::string::npos);
}

TEST(ApiIntTest, TheDecisionsRouteShowsAndReplacesThem) {
  DataSource source = SyntheticSource();
  EXPECT_EQ(HandleRequest("GET", "/api/v1/int/decisions", "", source).status, 503);
  std::vector<PathDecisionEntry> in_force;
  source.decisions = [&] {
    PathDecisionsView view;
    view.groups.push_back({"spines", {"s1", "s2"}});
    for (PathDecisionEntry e : in_force) {
      e.port_index = e.port == "s2" ? 2 : 1;
      e.group = "spines";
      view.decisions.push_back(e);
    }
    return view;
  };
  source.set_decisions = [&](const std::vector<PathDecisionEntry>& d) {
    if (!d.empty() && d[0].port == "nope") {
      return common::InvalidArgument("decisions[0].port: expected a port of this switch, got \"nope\"");
    }
    in_force = d;
    return common::Status::Ok();
  };
  HttpResponse r = HandleRequest("PUT", "/api/v1/int/decisions", "",
                                 R"({"decisions": [{"dst": "10.0.80.2/32", "port": "s2"}]})", source);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body,
            R"({"groups":[{"name":"spines","ports":["s1","s2"]}],"decisions":[{"dst":"10.0.80.2/32",)"
            R"("port":"s2","port_index":2,"group":"spines"}]})"
            "\n");
  r = HandleRequest("PUT", "/api/v1/int/decisions", "", R"({"decisions": [{"dst": "10.0.0.1/32", "port": "nope"}]})",
                    source);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("decisions[0].port"), std::string::npos);
  EXPECT_EQ(in_force.size(), 1u) << "refused: the decisions in force stay";
  r = HandleRequest("POST", "/api/v1/int/decisions", "", "{}", source);
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.allow, "GET, PUT");
}

TEST(CountTanLoadTest, CountsRemoteTansOfTheTable) {
  auto table = aggregator::JobTable::Create(8, 8);
  ASSERT_TRUE(table.ok());
  const uint32_t a = common::Ipv4Addr::Parse("10.0.9.50")->addr;
  const uint32_t b = common::Ipv4Addr::Parse("10.0.9.51")->addr;
  for (const auto& [id, tan, ip] : {std::tuple{1u, JobSpec::Tan::kRemote, a},
                                    {2u, JobSpec::Tan::kRemote, a},
                                    {3u, JobSpec::Tan::kRemote, b},
                                    {4u, JobSpec::Tan::kSelf, 0u},
                                    {5u, JobSpec::Tan::kNone, 0u}}) {
    JobSpec spec;
    spec.id = id;
    spec.members = 1;
    spec.tan = tan;
    spec.tan_peer.ip = ip;
    spec.tan_peer.udp_port = 47000;
    ASSERT_TRUE((*table)->Add(spec).ok());
  }
  EXPECT_EQ(CountTanLoad(**table), (TanLoad{{a, 2}, {b, 1}}));
  EXPECT_EQ(CountTanLoad(**table, 1), (TanLoad{{a, 1}, {b, 1}}));
  (*table)->Find(2)->SetTan(JobSpec::Tan::kRemote, {b, 47000, 0, 0});
  EXPECT_EQ(CountTanLoad(**table), (TanLoad{{a, 1}, {b, 2}}));
  ASSERT_TRUE((*table)->Remove(3).ok());
  EXPECT_EQ(CountTanLoad(**table), (TanLoad{{a, 1}, {b, 1}}));
}

}  // namespace
}  // namespace aggswitch::control
