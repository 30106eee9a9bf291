#include "control/api.h"

#include <gtest/gtest.h>

#include <cctype>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "control/metrics.h"

namespace aggswitch::control {
namespace {

using dataplane::DropReason;
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

DataSource SyntheticSource() {
  return {[] { return SyntheticSnapshot(); }, [] { return SyntheticMacs(); }};
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
  EXPECT_EQ(j["routes"].size(), 5u);
  EXPECT_EQ(HandleRequest("GET", "/", "", SyntheticSource()).status, 404);
  EXPECT_EQ(HandleRequest("GET", "/api/v1/ports/", "", SyntheticSource()).status, 404);
}

TEST(ApiTest, NonGetIs405) {
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD"}) {
    const HttpResponse r = HandleRequest(method, "/api/v1/ports", "", SyntheticSource());
    EXPECT_EQ(r.status, 405) << method;
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
  const DataSource source{[&] {
                            ++snapshot_calls;
                            return SyntheticSnapshot();
                          },
                          [&] {
                            ++mac_calls;
                            return SyntheticMacs();
                          }};
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
  const DataSource source{[]() -> StatsSnapshot { throw std::runtime_error("boom"); },
                          [] { return SyntheticMacs(); }};
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

}  // namespace
}  // namespace aggswitch::control
