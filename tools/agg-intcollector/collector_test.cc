#include "tools/agg-intcollector/collector.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace aggswitch::tools {
namespace {

using telemetry::HopReport;
namespace instr = telemetry::instr;

// The datagram's IPv4 and UDP headers: 10.0.0.1:5000 -> 10.0.0.2:47000.
const uint8_t kInner[telemetry::kReportInnerBytes] = {
    0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    0x13, 0x88, 0xb7, 0x98, 0, 40, 0, 0};

constexpr uint32_t kLoopback = 0x7f000001;

class CollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/agg_intcollector_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    CollectorOptions o;
    o.listen = *common::Ipv4Endpoint::Parse("127.0.0.1:0");
    o.db_path = dir_ + "/int.db";
    // The switches of these tests, all reporting from this host.
    for (uint32_t node = 1; node <= 9; ++node) o.reporters.push_back({node, kLoopback});
    auto c = Collector::Open(o);
    ASSERT_TRUE(c.ok()) << c.status().message();
    collector_ = std::move(c).value();
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    close(fd_);
    collector_.reset();
    (void)std::system(("rm -rf " + dir_).c_str());
  }

  void Send(const std::vector<uint8_t>& d) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(collector_->port());
    ASSERT_EQ(sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(d.size()));
  }
  // One hop's report of datagram `path_seq` on a path of `of` hops through
  // `nodes`, hop `index` (1-based) taking `latency_ns`.
  void SendHop(const std::vector<uint32_t>& nodes, uint32_t index, uint32_t path_seq,
               uint32_t latency_ns, uint32_t report_seq) {
    HopReport r;
    r.node_id = nodes[index - 1];
    r.sequence = report_seq;
    r.last_hop = index == nodes.size();
    r.instructions = instr::kBothSets;
    r.hop.ingress_port = 1;
    r.hop.egress_port = static_cast<uint16_t>(index < nodes.size() ? nodes[index] : 0);
    r.hop.hop_latency_ns = latency_ns;
    r.hop.tx_utilization = 100000;
    r.source_node = nodes[0];
    r.path_seq = path_seq;
    r.hop_index = index;
    r.inner = kInner;
    r.has_inner = true;
    std::vector<uint8_t> b(telemetry::ReportBytes(r.instructions, true));
    ASSERT_EQ(telemetry::BuildReport(r, b.data(), b.size()), b.size());
    Send(b);
  }
  // Polls until `n` datagrams were taken (loopback delivers at once).
  void Take(size_t n) {
    size_t got = 0;
    for (int i = 0; i < 100 && got < n; ++i) got += collector_->Poll(20);
    ASSERT_EQ(got, n);
  }
  nlohmann::json Get(const char* path) {
    const common::HttpResponse r = collector_->Handle("GET", path, "", "");
    EXPECT_EQ(r.status, 200) << path;
    return nlohmann::json::parse(r.body);
  }

  std::string dir_;
  std::unique_ptr<Collector> collector_;
  int fd_ = -1;
};

// Two paths of three hops between the same hosts, 40 us and 25 us end to
// end: every hop recorded, and the 25 us path decided for min latency.
TEST_F(CollectorTest, ReportsBecomeRecordsPathsAndDecisions) {
  std::map<uint32_t, uint32_t> seq;  // each switch numbers its own reports
  for (uint32_t d = 0; d < 3; ++d) {
    for (const std::vector<uint32_t>& nodes : {std::vector<uint32_t>{1, 2, 4}, {1, 3, 4}}) {
      const uint32_t latency = nodes[1] == 2 ? 40000 / 3 : 25000 / 3;
      const uint32_t path_seq = nodes[1] == 2 ? d : 100 + d;
      for (uint32_t i = 1; i <= 3; ++i) SendHop(nodes, i, path_seq, latency, seq[nodes[i - 1]]++);
    }
  }
  Take(18);
  ASSERT_TRUE(collector_->Flush().ok());
  ASSERT_TRUE(collector_->Analyse().ok());
  const Collector::Counts c = collector_->counts();
  EXPECT_EQ(c.reports[0], 18u);
  EXPECT_EQ(c.hop_records, 18u);
  EXPECT_EQ(c.path_ends, 6u);
  EXPECT_EQ(c.traversals, 6u);
  EXPECT_EQ(c.flows, 1u);
  EXPECT_EQ(c.paths, 2u);
  EXPECT_EQ(c.reports_lost, 0u);

  const nlohmann::json paths = Get("/api/v1/paths");
  ASSERT_EQ(paths["flows"].size(), 1u);
  const nlohmann::json& flow = paths["flows"][0];
  EXPECT_EQ(flow["src"], "10.0.0.1");
  EXPECT_EQ(flow["dst"], "10.0.0.2");
  ASSERT_EQ(flow["paths"].size(), 2u);
  EXPECT_EQ(flow["paths"][0]["samples"], 3);
  const nlohmann::json decisions = Get("/api/v1/decisions");
  const nlohmann::json& fastest = decisions["flows"][0]["decisions"]["min_latency"];
  EXPECT_EQ(fastest["route"][1]["node"], 3);
  EXPECT_NEAR(fastest["latency_ns"].get<double>(), 24999, 1);
  EXPECT_EQ(decisions["flows"][0]["decisions"]["fewest_hops"]["route"][1]["node"], 3);
  EXPECT_NEAR(decisions["flows"][0]["decisions"]["max_bandwidth"]["free_share"].get<double>(), 0.9,
              1e-9);
}

TEST_F(CollectorTest, BadReportsAreCountedByReasonAndDropped) {
  Send({});
  Send({0x20, 0, 0, 0, 0, 0, 0, 1});  // a group header alone
  Send(std::vector<uint8_t>(64, 0x10));  // version 1
  Take(3);
  SendHop({1}, 1, 0, 100, 0);
  Take(1);
  ASSERT_TRUE(collector_->Flush().ok());
  ASSERT_TRUE(collector_->Analyse().ok());
  const Collector::Counts c = collector_->counts();
  EXPECT_EQ(c.reports[static_cast<size_t>(telemetry::ReportError::kTruncated)], 2u);
  EXPECT_EQ(c.reports[static_cast<size_t>(telemetry::ReportError::kBadVersion)], 1u);
  EXPECT_EQ(c.reports[0], 1u);
  EXPECT_EQ(c.hop_records, 1u);
  EXPECT_EQ(c.traversals, 1u) << "a one-hop path";
}

TEST_F(CollectorTest, GapsInASwitchsReportSequenceAreCountedLost) {
  SendHop({7}, 1, 0, 100, 10);
  SendHop({7}, 1, 1, 100, 11);
  SendHop({7}, 1, 2, 100, 15);  // 12, 13 and 14 lost
  SendHop({8}, 1, 3, 100, 0);   // another switch: its own numbers
  SendHop({7}, 1, 4, 100, 3);   // restarted: counts afresh
  SendHop({7}, 1, 5, 100, 4);
  // Far past the expected number: a restart, or a report far out of
  // order, not two million lost reports.
  SendHop({7}, 1, 6, 100, 4 + (1u << 20));
  SendHop({7}, 1, 7, 100, 6 + (1u << 20));  // one lost
  Take(8);
  EXPECT_EQ(collector_->counts().reports_lost, 4u);
}

// A report is accepted only from a switch the collector knows, its node id
// from the address listed for it: a forged one is counted and dropped, and
// counts no loss.
TEST_F(CollectorTest, AReportFromASenderTheCollectorDoesNotKnowIsCountedAndDropped) {
  SendHop({42}, 1, 0, 100, 0);        // a node nobody listed
  SendHop({42}, 1, 1, 100, 100000);   // its "gap"
  Take(2);
  CollectorOptions o;
  o.listen = *common::Ipv4Endpoint::Parse("127.0.0.1:0");
  o.db_path = dir_ + "/other.db";
  o.reporters.push_back({5, 0x0a000005});  // node 5 reports from 10.0.0.5
  auto other = Collector::Open(o);
  ASSERT_TRUE(other.ok()) << other.status().message();
  std::swap(collector_, *other);
  SendHop({5}, 1, 0, 100, 0);  // node 5's id, from this host
  Take(1);
  ASSERT_TRUE(collector_->Flush().ok());
  Collector::Counts c = collector_->counts();
  EXPECT_EQ(c.unknown_sender, 1u);
  EXPECT_EQ(c.reports[0], 0u);
  EXPECT_EQ(c.hop_records, 0u);
  const common::HttpResponse m = collector_->Handle("GET", "/metrics", "", "");
  EXPECT_NE(m.body.find("aggswitch_intcollector_reports_total{result=\"unknown_sender\"} 1\n"),
            std::string::npos);
  std::swap(collector_, *other);
  ASSERT_TRUE(collector_->Flush().ok());
  c = collector_->counts();
  EXPECT_EQ(c.unknown_sender, 2u);
  EXPECT_EQ(c.reports_lost, 0u);
  EXPECT_EQ(c.hop_records, 0u);
}

TEST_F(CollectorTest, WhoseReportsToAcceptMustBeSaid) {
  CollectorOptions o;
  o.listen = *common::Ipv4Endpoint::Parse("127.0.0.1:0");
  o.db_path = dir_ + "/other.db";
  auto none = Collector::Open(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--reporter: expected NODE=ADDR"), std::string::npos);
  o.any_reporter = true;
  o.apply = telemetry::Rule::kMinLatency;
  auto open_apply = Collector::Open(o);
  ASSERT_FALSE(open_apply.ok());
  EXPECT_NE(open_apply.status().message().find("not with --apply"), std::string::npos);
  auto r = ParseReporterOption("3=10.0.79.3");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node_id, 3u);
  EXPECT_EQ(r->ip, 0x0a004f03u);
  for (const char* bad : {"3", "x=10.0.0.1", "3=10.0.0", "=10.0.0.1", "3=10.0.0.1:5"}) {
    auto b = ParseReporterOption(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("expected NODE=ADDR"), std::string::npos) << bad;
  }
}

TEST_F(CollectorTest, MetricsAndRoutes) {
  SendHop({1}, 1, 0, 100, 0);
  Take(1);
  ASSERT_TRUE(collector_->Flush().ok());
  ASSERT_TRUE(collector_->Analyse().ok());
  const common::HttpResponse m = collector_->Handle("GET", "/metrics", "", "");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("aggswitch_intcollector_reports_total{result=\"accepted\"} 1\n"),
            std::string::npos);
  EXPECT_NE(m.body.find("aggswitch_intcollector_reports_total{result=\"no_path_id\"} 0\n"),
            std::string::npos);
  EXPECT_NE(m.body.find("# TYPE aggswitch_intcollector_traversals gauge\naggswitch_intcollector_traversals 1\n"),
            std::string::npos);
  const nlohmann::json stats = Get("/api/v1/stats");
  EXPECT_EQ(stats["reports"]["accepted"], 1);
  EXPECT_EQ(stats["hop_records"], 1);
  EXPECT_EQ(collector_->Handle("GET", "/api/v1/nothing", "", "").status, 404);
  EXPECT_EQ(collector_->Handle("POST", "/api/v1/paths", "", "{}").status, 405);
}

TEST_F(CollectorTest, AnAddressInUseOrAnUnusableFileIsAnErrorNamingIt) {
  CollectorOptions o;
  o.listen = *common::Ipv4Endpoint::Parse("127.0.0.1:" + std::to_string(collector_->port()));
  o.db_path = dir_ + "/other.db";
  o.any_reporter = true;
  auto busy = Collector::Open(o);
  ASSERT_FALSE(busy.ok());
  EXPECT_NE(busy.status().message().find("--listen 127.0.0.1:"), std::string::npos);
  o.listen.port = 0;
  o.db_path = dir_ + "/missing/int.db";
  auto bad = Collector::Open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("missing/int.db"), std::string::npos);
}

}  // namespace
}  // namespace aggswitch::tools
