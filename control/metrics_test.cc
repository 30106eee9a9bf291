#include "control/metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace aggswitch::control {
namespace {

using dataplane::DropReason;

constexpr char kPromtool[] = "/usr/bin/promtool";

StatsSnapshot SyntheticSnapshot() {
  StatsSnapshot s;
  s.build = {"0.1.0", "DPDK 22.11.4"};
  s.tsc_hz = 2'400'000'000;

  PortSnapshot p0;
  p0.index = 0;
  p0.name = "uplink";
  p0.driver = "net_ring";
  p0.mac = *common::MacAddr::Parse("02:00:00:00:00:01");
  p0.link_up = true;
  p0.vlan_mode = "trunk 10,20 native 1";
  p0.rx_packets = 1000;
  p0.rx_bytes = 64000;
  p0.tx_packets = 900;
  p0.tx_bytes = 57600;
  p0.flooded_packets = 12;
  p0.drops[static_cast<size_t>(DropReason::kHairpin)] = 5;
  p0.drops[static_cast<size_t>(DropReason::kTxFull)] = 7;
  p0.dev_imissed = 3;
  p0.dev_ierrors = 2;
  p0.dev_oerrors = 1;
  p0.dev_rx_nombuf = 4;
  s.ports.push_back(p0);

  PortSnapshot p1;
  p1.index = 1;
  p1.name = "host1";
  p1.driver = "net_ring";
  p1.link_up = false;
  p1.vlan_mode = "access 10";
  p1.rx_packets = 5;
  s.ports.push_back(p1);

  LcoreSnapshot l;
  l.lcore = 1;
  l.rx = {{"uplink", 0}, {"host1", 0}};
  l.busy_cycles = 123456;
  l.idle_cycles = 654321;
  l.busy_packets = 1005;
  l.polls = 777;
  l.learn_requests = 9;
  l.learn_ring_full = 1;
  l.arp_replies = 2;
  l.icmp_replies = 3;
  l.agg[static_cast<size_t>(dataplane::AggCounter::contributions)] = 12;
  l.agg[static_cast<size_t>(dataplane::AggCounter::reduced_bytes)] = 3072;
  l.slots = 512;
  l.slots_busy = 3;
  s.lcores.push_back(l);

  s.mac_table = {/*entries=*/4,        /*capacity=*/8192,
                 /*static_entries=*/1, /*aging_seconds=*/300,
                 /*learned=*/10,       /*moved=*/2,
                 /*aged=*/6,           /*static_conflicts=*/1,
                 /*learn_refused=*/3};
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool HasLine(const std::string& text, const std::string& line) {
  for (const std::string& l : Lines(text)) {
    if (l == line) return true;
  }
  return false;
}

struct PromtoolResult {
  int exit_code = -1;
  std::string output;
};

// Pipes `text` into `promtool check metrics` and collects its exit code and
// everything it printed.
PromtoolResult RunPromtool(const std::string& text) {
  char out_path[] = "/tmp/metrics_test_promtool_XXXXXX";
  const int fd = mkstemp(out_path);
  if (fd < 0) return {};
  close(fd);
  const std::string cmd = std::string(kPromtool) + " check metrics >" + out_path + " 2>&1";
  PromtoolResult result;
  FILE* pipe = popen(cmd.c_str(), "w");
  if (pipe != nullptr) {
    fwrite(text.data(), 1, text.size(), pipe);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::ifstream in(out_path);
  std::stringstream buf;
  buf << in.rdbuf();
  result.output = buf.str();
  unlink(out_path);
  return result;
}

TEST(MetricsTest, ExactSeriesLines) {
  const std::string text = RenderPrometheus(SyntheticSnapshot());
  for (
      const char* line : {
          R"(aggswitch_build_info{version="0.1.0",dpdk_version="DPDK 22.11.4"} 1)",
          R"(aggswitch_port_info{port="uplink",driver="net_ring",mac="02:00:00:00:00:01",vlan_mode="trunk 10,20 native 1"} 1)",
          R"(aggswitch_port_link_up{port="uplink"} 1)",
          R"(aggswitch_port_link_up{port="host1"} 0)",
          R"(aggswitch_port_rx_packets_total{port="uplink"} 1000)",
          R"(aggswitch_port_rx_bytes_total{port="uplink"} 64000)",
          R"(aggswitch_port_tx_packets_total{port="uplink"} 900)",
          R"(aggswitch_port_tx_bytes_total{port="uplink"} 57600)",
          R"(aggswitch_port_flooded_packets_total{port="uplink"} 12)",
          R"(aggswitch_port_rx_packets_total{port="host1"} 5)",
          R"(aggswitch_port_dropped_packets_total{port="uplink",reason="hairpin"} 5)",
          R"(aggswitch_port_dropped_packets_total{port="uplink",reason="tx_full"} 7)",
          R"(aggswitch_port_dropped_packets_total{port="host1",reason="tx_full"} 0)",
          R"(aggswitch_port_device_missed_packets_total{port="uplink"} 3)",
          R"(aggswitch_port_device_rx_errors_total{port="uplink"} 2)",
          R"(aggswitch_port_device_tx_errors_total{port="uplink"} 1)",
          R"(aggswitch_port_device_rx_nombuf_total{port="uplink"} 4)",
          R"(aggswitch_lcore_busy_cycles_total{lcore="1"} 123456)",
          R"(aggswitch_lcore_idle_cycles_total{lcore="1"} 654321)",
          R"(aggswitch_lcore_busy_packets_total{lcore="1"} 1005)",
          R"(aggswitch_lcore_polls_total{lcore="1"} 777)",
          R"(aggswitch_lcore_learn_requests_total{lcore="1"} 9)",
          R"(aggswitch_lcore_learn_ring_full_total{lcore="1"} 1)",
          R"(aggswitch_lcore_arp_replies_total{lcore="1"} 2)",
          R"(aggswitch_lcore_icmp_replies_total{lcore="1"} 3)",
          R"(aggswitch_aggregation_contributions_total{lcore="1"} 12)",
          R"(aggswitch_aggregation_reduced_bytes_total{lcore="1"} 3072)",
          R"(aggswitch_aggregation_collisions_total{lcore="1"} 0)",
          R"(aggswitch_aggregation_slots{lcore="1"} 512)",
          R"(aggswitch_aggregation_slots_busy{lcore="1"} 3)",
          R"(aggswitch_lcore_tsc_hertz 2400000000)",
          R"(aggswitch_mac_table_entries 4)",
          R"(aggswitch_mac_table_capacity_entries 8192)",
          R"(aggswitch_mac_table_static_entries 1)",
          R"(aggswitch_mac_table_aging_seconds 300)",
          R"(aggswitch_mac_table_learned_total 10)",
          R"(aggswitch_mac_table_moved_total 2)",
          R"(aggswitch_mac_table_aged_total 6)",
          R"(aggswitch_mac_table_static_conflicts_total 1)",
          R"(aggswitch_mac_table_learn_refused_total 3)",
          "# TYPE aggswitch_port_rx_packets_total counter",
          "# TYPE aggswitch_port_link_up gauge",
          "# TYPE aggswitch_mac_table_entries gauge",
      }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
  EXPECT_EQ(text.back(), '\n');
}

TEST(MetricsTest, EveryDropReasonForEveryPort) {
  const StatsSnapshot snap = SyntheticSnapshot();
  const std::string text = RenderPrometheus(snap);
  for (const PortSnapshot& p : snap.ports) {
    for (size_t r = 0; r < dataplane::kNumDropReasons; ++r) {
      const std::string line = "aggswitch_port_dropped_packets_total{port=\"" + p.name +
                               "\",reason=\"" + kDropReasonText[r].label + "\"} " +
                               std::to_string(p.drops[r]);
      EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
    }
  }
}

TEST(MetricsTest, DropHelpExplainsEveryReason) {
  const std::string text = RenderPrometheus(SyntheticSnapshot());
  std::string help_line;
  for (const std::string& line : Lines(text)) {
    if (line.rfind("# HELP aggswitch_port_dropped_packets_total ", 0) == 0) help_line = line;
  }
  ASSERT_FALSE(help_line.empty());
  for (const DropReasonText& t : kDropReasonText) {
    EXPECT_NE(help_line.find(std::string(t.label) + " (" + t.help + ")"), std::string::npos)
        << t.label;
  }
}

TEST(MetricsTest, DropLabelsMatchTheDataplaneList) {
  EXPECT_STREQ(kDropReasonText[static_cast<size_t>(DropReason::kRunt)].label, "runt");
  EXPECT_STREQ(kDropReasonText[static_cast<size_t>(DropReason::kTxFull)].label, "tx_full");
  std::set<std::string> labels;
  for (const DropReasonText& t : kDropReasonText) labels.insert(t.label);
  EXPECT_EQ(labels.size(), dataplane::kNumDropReasons) << "drop labels must be distinct";
}

// Each family has exactly one # HELP and one # TYPE, directly followed by its
// samples, and every sample belongs to the family declared last.
TEST(MetricsTest, FamiliesAreWellFormed) {
  const std::string text = RenderPrometheus(SyntheticSnapshot());
  std::map<std::string, int> help_count;
  std::map<std::string, int> type_count;
  std::string current;
  for (const std::string& line : Lines(text)) {
    ASSERT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++help_count[name];
      current.clear();
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++type_count[name];
      EXPECT_EQ(help_count[name], 1) << "# TYPE before # HELP for " << name;
      const std::string type = line.substr(7 + name.size() + 1);
      EXPECT_TRUE(type == "counter" || type == "gauge") << line;
      if (type == "counter") {
        EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
      }
      current = name;
    } else {
      const std::string name = line.substr(0, line.find_first_of("{ "));
      EXPECT_EQ(name, current) << "sample outside its family: " << line;
      EXPECT_EQ(name.rfind("aggswitch_", 0), 0u) << line;
    }
  }
  for (const char* family : {
           "aggswitch_build_info",
           "aggswitch_port_info",
           "aggswitch_port_link_up",
           "aggswitch_port_rx_packets_total",
           "aggswitch_port_rx_bytes_total",
           "aggswitch_port_tx_packets_total",
           "aggswitch_port_tx_bytes_total",
           "aggswitch_port_flooded_packets_total",
           "aggswitch_port_dropped_packets_total",
           "aggswitch_port_device_missed_packets_total",
           "aggswitch_port_device_rx_errors_total",
           "aggswitch_port_device_tx_errors_total",
           "aggswitch_port_device_rx_nombuf_total",
           "aggswitch_lcore_busy_cycles_total",
           "aggswitch_lcore_idle_cycles_total",
           "aggswitch_lcore_busy_packets_total",
           "aggswitch_lcore_polls_total",
           "aggswitch_lcore_learn_requests_total",
           "aggswitch_lcore_learn_ring_full_total",
           "aggswitch_lcore_arp_replies_total",
           "aggswitch_lcore_icmp_replies_total",
           "aggswitch_lcore_tsc_hertz",
           "aggswitch_mac_table_entries",
           "aggswitch_mac_table_capacity_entries",
           "aggswitch_mac_table_static_entries",
           "aggswitch_mac_table_aging_seconds",
           "aggswitch_mac_table_learned_total",
           "aggswitch_mac_table_moved_total",
           "aggswitch_mac_table_aged_total",
           "aggswitch_mac_table_static_conflicts_total",
           "aggswitch_mac_table_learn_refused_total",
       }) {
    EXPECT_EQ(help_count.count(family), 1u) << "missing family " << family;
  }
  for (const auto& [name, n] : help_count) {
    EXPECT_EQ(n, 1) << name;
    EXPECT_EQ(type_count[name], 1) << name;
  }
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapePrometheusLabelValue("plain"), "plain");
  EXPECT_EQ(EscapePrometheusLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapePrometheusHelp("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");

  StatsSnapshot snap = SyntheticSnapshot();
  snap.ports[1].name = "we\"ird\\port\nname";
  const std::string text = RenderPrometheus(snap);
  EXPECT_TRUE(HasLine(text, R"(aggswitch_port_rx_packets_total{port="we\"ird\\port\nname"} 5)"))
      << text;
}

TEST(MetricsTest, EmptySnapshotStillDeclaresFamilies) {
  const std::string text = RenderPrometheus(StatsSnapshot{});
  EXPECT_TRUE(HasLine(text, "# TYPE aggswitch_port_dropped_packets_total counter"));
  EXPECT_TRUE(HasLine(text, "aggswitch_mac_table_entries 0"));
  EXPECT_TRUE(HasLine(text, R"(aggswitch_build_info{version="",dpdk_version=""} 1)"));
}

// The snapshot with a job table of two jobs, one of them with learned members.
StatsSnapshot WithJobs(StatsSnapshot s) {
  JobTableSnapshot t;
  t.capacity = 1024;
  t.max_fan_in = 256;
  JobSnapshot a;
  a.id = 7;
  a.origin = "config";
  a.members = 4;
  a.learned = 3;
  JobSnapshot b;
  b.id = 4294967295u;
  b.index = 1;
  b.origin = "in-band";
  b.members = 256;
  b.nodes = 2;
  b.ordered = true;
  t.jobs = {a, b};
  s.jobs = t;
  return s;
}

TEST(MetricsTest, JobGaugesComeFromTheTable) {
  const std::string text = RenderPrometheus(WithJobs(SyntheticSnapshot()));
  for (const char* line : {
           "# TYPE aggswitch_job_table_jobs gauge",
           "aggswitch_job_table_jobs 2",
           "aggswitch_job_table_capacity_jobs 1024",
           R"(aggswitch_job_info{job="7",origin="config",nodes="1",ordered="false"} 1)",
           R"(aggswitch_job_info{job="4294967295",origin="in-band",nodes="2",ordered="true"} 1)",
           "# TYPE aggswitch_job_expected_members gauge",
           R"(aggswitch_job_expected_members{job="7"} 4)",
           R"(aggswitch_job_expected_members{job="4294967295"} 256)",
           "# TYPE aggswitch_job_members gauge",
           R"(aggswitch_job_members{job="7"} 3)",
           R"(aggswitch_job_members{job="4294967295"} 0)",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
}

TEST(MetricsTest, NoJobTableNoJobFamilies) {
  EXPECT_EQ(RenderPrometheus(SyntheticSnapshot()).find("aggswitch_job"), std::string::npos);
  // An empty table still declares its families.
  StatsSnapshot s = SyntheticSnapshot();
  s.jobs = JobTableSnapshot{};
  const std::string text = RenderPrometheus(s);
  EXPECT_TRUE(HasLine(text, "aggswitch_job_table_jobs 0"));
  EXPECT_TRUE(HasLine(text, "# TYPE aggswitch_job_members gauge"));
}

class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPromtool, X_OK) != 0) GTEST_SKIP() << kPromtool << " is not installed";
  }
};

TEST_F(PromtoolTest, SyntheticSnapshotPassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(SyntheticSnapshot()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST_F(PromtoolTest, EscapedLabelsPassCheckMetrics) {
  StatsSnapshot snap = SyntheticSnapshot();
  snap.ports[0].name = "we\"ird\\port\nname";
  snap.ports[0].vlan_mode = "trunk \"all\"";
  const PromtoolResult r = RunPromtool(RenderPrometheus(snap));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST_F(PromtoolTest, JobTablePassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(WithJobs(SyntheticSnapshot())));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST_F(PromtoolTest, EmptySnapshotPassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(StatsSnapshot{}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

// The harness itself: promtool must reject broken input, or the checks above
// prove nothing.
TEST_F(PromtoolTest, RejectsACounterWithoutTotal) {
  const PromtoolResult r = RunPromtool(
      "# HELP aggswitch_bad_packets x\n# TYPE aggswitch_bad_packets counter\n"
      "aggswitch_bad_packets 1\n");
  EXPECT_NE(r.output, "");
}

}  // namespace
}  // namespace aggswitch::control
