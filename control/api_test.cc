#include "control/api.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/types.h"
#include "control/job_control.h"
#include "control/metrics.h"

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
  p0.dev_imissed = 3;
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
  EXPECT_EQ(m.content_type, kPrometheusContentType);
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
  EXPECT_EQ(j["routes"].size(), 11u);
  EXPECT_EQ(j["routes"][10], "/api/v1/bypass");
  EXPECT_EQ(j["routes"][5], "/api/v1/jobs");
  EXPECT_EQ(j["routes"][7], "/api/v1/jobs/<id>/stragglers");
  EXPECT_EQ(j["routes"][8], "/api/v1/jobs/<id>/tan");
  EXPECT_EQ(j["routes"][9], "/api/v1/slots");
  EXPECT_EQ(HandleRequest("GET", "/", "", SyntheticSource()).status, 404);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/ports/", "", SyntheticSource()).status, 404);
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
  JobSnapshot b;
  b.id = 9;
  b.index = 3;
  b.origin = "api";
  b.members = 4;
  b.nodes = 2;
  b.ordered = true;
  t.jobs = {a, b};
  return t;
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
      s.id = r.id;
      s.origin = "api";
      s.members = r.members;
      s.nodes = r.nodes;
      s.ordered = r.ordered;
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
  const json& b = j["jobs"][1];
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
  EXPECT_EQ(*r, (JobRequest{7, 12345, 4, 1, false}));
  r = ParseJobRequest(
      R"({"ordered": true, "nodes": 3, "members": 65535, "key": "0xFFFFFFFFFFFFFFFF", "id": 4294967295})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (JobRequest{4294967295u, ~0ull, 65535, 3, true}));
  r = ParseJobRequest(R"({"id": 1, "key": 18446744073709551615, "members": 1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, ~0ull);
  r = ParseJobRequest(R"({"id": 1, "key": "42", "members": 1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->key, 42u);
}

TEST(ApiJobsTest, ParseJobRequestRejectsMistakes) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "body is not JSON"},
      {"{", "body is not JSON"},
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
  EXPECT_EQ(fake.added[0], (JobRequest{12, 0xabc, 3, 1, true}));

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
  r = ParseStragglerBody(R"({"clear": true})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->clear);
  for (const char* bad : {"", "top=1&over=2", "top=0", "over=x", "top=1&color=red", "ops=-1"}) {
    EXPECT_EQ(ParseStragglerQuery(bad).status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
  for (const char* bad : {"[]", "{}", R"({"top": 0})", R"({"top": 1, "apply": 1})",
                          R"({"clear": true, "top": 1})", R"({"top": 1, "extra": 2})"}) {
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
  // Candidates alone: the management node's own pick (fixed).
  r = ParseTanBody(R"({"candidates": [{"address": "10.0.9.50"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kFixed);
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
}

TEST(ApiTanTest, BodyErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "the body must be a JSON object"},
      {"{}", "the body must set strategy (with candidates) or member"},
      {R"({"strategy": "closest", "candidates": [{"address": "10.0.9.50"}]})",
       "strategy must be fixed, random, least_load, fewest_hops or self, got \"closest\""},
      {R"({"strategy": "fixed"})", "candidates must list 1..64 TANs for strategy \"fixed\", got 0"},
      {R"({"strategy": "self", "candidates": [{"address": "10.0.9.50"}]})",
       "strategy \"self\" takes no candidates"},
      {R"({"candidates": {"address": "10.0.9.50"}})", "candidates must be an array"},
      {R"({"candidates": [{"port": 1}]})", "candidates[0].address is required"},
      {R"({"candidates": [{"address": "10.0.9"}]})",
       "candidates[0].address must be a unicast IPv4 address \"a.b.c.d\", got \"10.0.9\""},
      {R"({"candidates": [{"address": "224.0.0.1"}]})", "candidates[0].address must be a unicast"},
      {R"({"candidates": [{"address": "10.0.9.50", "port": 0}]})",
       "candidates[0].port must be 1..65535, got 0"},
      {R"({"candidates": [{"address": "10.0.9.50", "hops": 256}]})",
       "candidates[0].hops must be 0..255, got 256"},
      {R"({"candidates": [{"address": "10.0.9.50", "weight": 1}]})",
       "unknown field 'candidates[0].weight' (address, port, hops)"},
      {R"({"candidates": [{"address": "10.0.9.50"}, {"address": "10.0.9.50", "port": 47000}]})",
       "candidates[1] repeats candidates[0] (10.0.9.50:47000)"},
      {R"({"member": 65535})", "member must be 0..65534, got 65535"},
      {R"({"member": "3"})", "member must be an integer 0..65534"},
      {R"({"node": 3})", "unknown field 'node' (strategy, candidates, member)"},
  };
  for (const auto& [body, message] : cases) {
    const auto r = ParseTanBody(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

TEST(ApiTanTest, GetShowsAndPostChangesThroughTheControlThread) {
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
    report.mode = "remote";
    report.ip = 0x0a000932;  // 10.0.9.50
    report.port = 47000;
    report.resolved = true;
    if (request && request->choice) report.chosen = request->choice;
    if (request && request->set_member) report.member = request->member;
    return report;
  };
  HttpResponse r = HandleRequest("GET", "/api/v1/jobs/7/tan", "", source);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j, json::parse(R"({"job": 7, "root": true, "mode": "remote", "address": "10.0.9.50",
      "port": 47000, "resolved": true, "member": null, "chosen": null})"));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].second) << "GET changes nothing";
  r = HandleRequest("POST", "/api/v1/jobs/7/tan", "",
                    R"({"strategy": "fewest_hops", "candidates": [{"address": "10.0.9.50", "hops": 2}],
                        "member": 0})",
                    source);
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["chosen"], json::parse(R"({"strategy": "fewest_hops",
      "candidates": [{"address": "10.0.9.50", "port": 47000, "hops": 2}]})"));
  EXPECT_EQ(j["member"], 0);
  ASSERT_EQ(calls.size(), 2u);
  ASSERT_TRUE(calls[1].second && calls[1].second->choice);
  EXPECT_EQ(HandleRequest("POST", "/api/v1/jobs/8/tan", "", R"({"strategy": "self"})", source).status,
            409);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/9/tan", "", source).status, 404);
  EXPECT_EQ(HandleRequest("POST", "/api/v1/jobs/7/tan", "", R"({"strategy": "x"})", source).status,
            400);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/0/tan", "", source).status, 400);
  EXPECT_EQ(HandleRequest("DELETE", "/api/v1/jobs/7/tan", "", source).status, 405);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7/other", "", source).status, 404);
  EXPECT_EQ(calls.size(), 4u) << "only well-formed requests reach the control thread";
  EXPECT_EQ(HandleRequest("GET", "/api/v1/jobs/7/tan", "", SyntheticSource()).status, 503);
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
    jobs_ = std::make_unique<JobControl>(*table_, options);
    source_ = SyntheticSource();
    jobs_->Attach(source_);
  }
  void TearDown() override { StopControlThread(); }

  void StartControlThread() {
    stop_ = false;
    control_ = std::thread([this] {
      while (!stop_.load()) {
        jobs_->ProcessPending();
        table_->Reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void StopControlThread() {
    stop_ = true;
    if (control_.joinable()) control_.join();
  }

  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<JobControl> jobs_;
  DataSource source_;
  std::atomic<bool> stop_{false};
  std::thread control_;
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
                    R"({"id": 9, "key": "0x99", "members": 3, "nodes": 2})", source_);
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
  job->LearnMember(1, 0x020000000001ull, 1, 10, 0x0a000a05, 40000);
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
  auto added = jobs.Add({11, 1, 1, 1, false});
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
        if (jobs_->Add({id, 1, 1, 1, false}).ok()) created.fetch_add(1);
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
  EXPECT_EQ(reader_threads, std::set<std::thread::id>({control_.get_id()}));
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
  EXPECT_EQ(spec.upstream.ip, 0u) << "the root";
  EXPECT_EQ(spec.tan, JobSpec::Tan::kRemote);
  EXPECT_EQ(spec.timeout_cycles, 20'000'000u);
  EXPECT_TRUE(spec.batch);
  EXPECT_EQ(load.size(), 1u) << "the TAN's load counts the job";
  // A second root job goes to another candidate under least_load.
  spine.id = 8;
  EXPECT_NE(JobSpecFromConfig(spine, agg, 1'000'000'000, load).tan_peer.ip, spec.tan_peer.ip);

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
  EXPECT_EQ(spec.upstream.ip, up.address.addr);
  EXPECT_EQ(spec.upstream.node, 101);
  EXPECT_EQ(spec.upstream.udp_port, 47000);
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

}  // namespace
}  // namespace aggswitch::control
