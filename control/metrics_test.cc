#include "control/metrics.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/lib/promtool.h"

namespace aggswitch::control {
namespace {

using dataplane::DropReason;
using testing::PromtoolResult;
using testing::RunPromtool;

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
  p0.faults[static_cast<size_t>(dataplane::Fault::kDuplicate)] = 4;
  p0.dev_missed_packets = 3;
  p0.dev_rx_errors = 2;
  p0.dev_tx_errors = 1;
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
  l.slot_timers = 2;
  l.bypass_entries = 5;
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
          R"(aggswitch_aggregation_slot_timers{lcore="1"} 2)",
          R"(aggswitch_aggregation_bypass_entries{lcore="1"} 5)",
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

TEST(MetricsTest, EveryInjectedFaultForEveryPort) {
  const StatsSnapshot snap = SyntheticSnapshot();
  const std::string text = RenderPrometheus(snap);
  EXPECT_TRUE(HasLine(text, "aggswitch_port_injected_faults_total{port=\"" + snap.ports[0].name +
                                "\",fault=\"duplicate\"} 4"));
  for (const PortSnapshot& p : snap.ports) {
    for (size_t f = 0; f < dataplane::kNumFaults; ++f) {
      const std::string line = "aggswitch_port_injected_faults_total{port=\"" + p.name +
                               "\",fault=\"" + dataplane::kFaultText[f].label + "\"} " +
                               std::to_string(p.faults[f]);
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
// samples, and every sample belongs to the family declared last (a
// histogram's samples are its _bucket, _sum and _count series). Returns the
// families seen.
std::set<std::string> ExpectWellFormed(const std::string& text) {
  std::map<std::string, int> help_count;
  std::map<std::string, int> type_count;
  std::string current;
  std::string current_type;
  for (const std::string& line : Lines(text)) {
    EXPECT_FALSE(line.empty());
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++help_count[name];
      current.clear();
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      ++type_count[name];
      EXPECT_EQ(help_count[name], 1) << "# TYPE before # HELP for " << name;
      const std::string type = line.substr(7 + name.size() + 1);
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      if (type == "counter") {
        EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
      }
      current = name;
      current_type = type;
    } else {
      const std::string name = line.substr(0, line.find_first_of("{ "));
      if (current_type == "histogram") {
        EXPECT_TRUE(name == current + "_bucket" || name == current + "_sum" ||
                    name == current + "_count")
            << "sample outside its histogram: " << line;
      } else {
        EXPECT_EQ(name, current) << "sample outside its family: " << line;
      }
      // Ours, or the standard process_* families every exporter shares.
      EXPECT_TRUE(name.rfind("aggswitch_", 0) == 0 || name.rfind("process_", 0) == 0) << line;
    }
  }
  std::set<std::string> families;
  for (const auto& [name, n] : help_count) {
    EXPECT_EQ(n, 1) << name;
    EXPECT_EQ(type_count[name], 1) << name;
    families.insert(name);
  }
  return families;
}

TEST(MetricsTest, FamiliesAreWellFormed) {
  const std::set<std::string> families = ExpectWellFormed(RenderPrometheus(SyntheticSnapshot()));
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
    EXPECT_EQ(families.count(family), 1u) << "missing family " << family;
  }
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
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
  a.mode = "both";
  a.store_buffers = 12;
  a.store_quota = 256;
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
           R"(aggswitch_job_info{job="7",origin="config",nodes="1",ordered="false",mode="both"} 1)",
           R"(aggswitch_job_info{job="4294967295",origin="in-band",nodes="2",ordered="true",mode="aggregate"} 1)",
           "# TYPE aggswitch_job_store_buffers gauge",
           R"(aggswitch_job_store_buffers{job="7"} 12)",
           R"(aggswitch_job_store_quota_buffers{job="7"} 256)",
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

// --- Aggregation: per-job counters, the latency histogram, registrations ------------

constexpr size_t kLast = dataplane::kSlotLatencyBuckets - 1;  // the +Inf bucket

size_t JobCounterIndex(dataplane::JobCounter c) {
  return static_cast<size_t>(c);
}

// WithJobs() plus aggregation on: counters for job 7 (none for the other job,
// as when the control thread has no counter reader), nine completions in the
// latency histogram and some registrations.
StatsSnapshot WithAggregation(StatsSnapshot s) {
  s = WithJobs(std::move(s));
  JobCounterValues c{};
  c[JobCounterIndex(dataplane::JobCounter::contributions)] = 40;
  c[JobCounterIndex(dataplane::JobCounter::completions)] = 10;
  c[JobCounterIndex(dataplane::JobCounter::duplicates)] = 3;
  c[JobCounterIndex(dataplane::JobCounter::collisions)] = 1;
  c[JobCounterIndex(dataplane::JobCounter::key_failures)] = 2;
  c[JobCounterIndex(dataplane::JobCounter::reduced_bytes)] = 56960;
  s.jobs->jobs[0].counters = c;

  AggregationSnapshot a;
  a.slot_latency.buckets[0] = 2;      // <= 1 us
  a.slot_latency.buckets[3] = 5;      // (5 us, 10 us]
  a.slot_latency.buckets[9] = 1;      // (0.5 ms, 1 ms]
  a.slot_latency.buckets[kLast] = 1;  // > 1 s
  a.slot_latency.count = 9;
  a.slot_latency.sum_seconds = 3.25;
  a.registrations[static_cast<size_t>(dataplane::RegistrationResult::admitted)] = 4;
  a.registrations[static_cast<size_t>(dataplane::RegistrationResult::existing)] = 2;
  a.registrations[static_cast<size_t>(dataplane::RegistrationResult::key_mismatch)] = 1;
  OwnTanSnapshot tan;
  tan.counters.first_data = 12;
  tan.counters.late = 9;
  tan.counters.merged = 8;
  tan.counters.completed = 7;
  tan.counters.gave_up = 1;
  tan.pending = 3;
  a.tan = tan;
  s.aggregation = a;
  s.lcores[0].agg[static_cast<size_t>(dataplane::AggCounter::acks)] = 5;
  s.lcores[0].agg[static_cast<size_t>(dataplane::AggCounter::nacks_sent)] = 6;
  return s;
}

constexpr char kLatency[] = "aggswitch_aggregation_slot_completion_latency_seconds";

// The value of the sample line that starts with `series` followed by a space.
std::optional<std::string> SampleValue(const std::string& text, const std::string& series) {
  for (const std::string& l : Lines(text)) {
    if (l.size() > series.size() && l.compare(0, series.size(), series) == 0 &&
        l[series.size()] == ' ') {
      return l.substr(series.size() + 1);
    }
  }
  return std::nullopt;
}

TEST(MetricsTest, PerJobCountersCarryTheJobLabel) {
  const std::string text = RenderPrometheus(WithAggregation(SyntheticSnapshot()));
  for (const char* line : {
           "# TYPE aggswitch_aggregation_job_contributions_total counter",
           R"(aggswitch_aggregation_job_contributions_total{job="7"} 40)",
           R"(aggswitch_aggregation_job_completions_total{job="7"} 10)",
           R"(aggswitch_aggregation_job_duplicates_total{job="7"} 3)",
           R"(aggswitch_aggregation_job_collisions_total{job="7"} 1)",
           R"(aggswitch_aggregation_job_key_failures_total{job="7"} 2)",
           "# TYPE aggswitch_aggregation_job_reduced_bytes_total counter",
           R"(aggswitch_aggregation_job_reduced_bytes_total{job="7"} 56960)",
           "# HELP aggswitch_aggregation_job_key_failures_total Datagrams with the job's id and "
           "the wrong key.",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
  // Every job counter has its family; a job without counters has no samples.
  for (const dataplane::AggCounterText& t : dataplane::kJobCounterText) {
    const std::string family = std::string("aggswitch_aggregation_job_") + t.name + "_total";
    EXPECT_TRUE(HasLine(text, "# TYPE " + family + " counter")) << family;
    EXPECT_FALSE(SampleValue(text, family + R"({job="4294967295"})")) << family;
  }
}

TEST(MetricsTest, LatencyHistogramIsCumulative) {
  const std::string text = RenderPrometheus(WithAggregation(SyntheticSnapshot()));
  EXPECT_TRUE(HasLine(text, std::string("# TYPE ") + kLatency + " histogram"));
  const std::string bucket = std::string(kLatency) + "_bucket";
  for (const char* line : {
           R"({le="1e-06"} 2)",
           R"({le="2e-06"} 2)",
           R"({le="5e-06"} 2)",
           R"({le="1e-05"} 7)",
           R"({le="0.0005"} 7)",
           R"({le="0.001"} 8)",
           R"({le="0.1"} 8)",
           R"({le="1"} 8)",
           R"({le="+Inf"} 9)",
       }) {
    EXPECT_TRUE(HasLine(text, bucket + line)) << "missing line: " << bucket << line;
  }
  EXPECT_EQ(SampleValue(text, std::string(kLatency) + "_sum"), "3.25");
  EXPECT_EQ(SampleValue(text, std::string(kLatency) + "_count"), "9");

  // One bucket per bound plus +Inf, in order, each `le` reading back as its
  // bound, the counts never falling.
  std::vector<std::pair<std::string, uint64_t>> buckets;
  for (const std::string& l : Lines(text)) {
    if (l.rfind(bucket + "{le=\"", 0) != 0) continue;
    const size_t open = bucket.size() + 5;
    const size_t close = l.find('"', open);
    buckets.emplace_back(l.substr(open, close - open), std::stoull(l.substr(close + 3)));
  }
  ASSERT_EQ(buckets.size(), dataplane::kSlotLatencyBuckets);
  for (size_t b = 0; b + 1 < buckets.size(); ++b) {
    EXPECT_EQ(std::strtod(buckets[b].first.c_str(), nullptr),
              dataplane::kSlotLatencyBoundsSeconds[b])
        << buckets[b].first;
    EXPECT_LE(buckets[b].second, buckets[b + 1].second) << buckets[b].first;
  }
  EXPECT_EQ(buckets.back().first, "+Inf");
}

// The count is read apart from the buckets while workers complete chunks;
// _count follows the buckets so that it always equals the +Inf bucket.
TEST(MetricsTest, LatencyCountIsTheInfBucket) {
  StatsSnapshot s = WithAggregation(SyntheticSnapshot());
  s.aggregation->slot_latency.count = 10;  // one completion more than the buckets show
  s.aggregation->slot_latency.sum_seconds = 0.000123;
  const std::string text = RenderPrometheus(s);
  EXPECT_EQ(SampleValue(text, std::string(kLatency) + R"(_bucket{le="+Inf"})"), "9");
  EXPECT_EQ(SampleValue(text, std::string(kLatency) + "_count"), "9");
  EXPECT_EQ(SampleValue(text, std::string(kLatency) + "_sum"), "0.000123");
}

TEST(MetricsTest, EmptyHistogramHasEveryBucketAtZero) {
  StatsSnapshot s = SyntheticSnapshot();
  s.aggregation = AggregationSnapshot{};
  const std::string text = RenderPrometheus(s);
  EXPECT_TRUE(HasLine(text, std::string(kLatency) + R"(_bucket{le="+Inf"} 0)"));
  EXPECT_TRUE(HasLine(text, std::string(kLatency) + R"(_bucket{le="1e-06"} 0)"));
  EXPECT_TRUE(HasLine(text, std::string(kLatency) + "_sum 0"));
  EXPECT_TRUE(HasLine(text, std::string(kLatency) + "_count 0"));
}

TEST(MetricsTest, ProcessPoolsAndHttpRefusals) {
  StatsSnapshot snap = SyntheticSnapshot();
  snap.process.start_time_seconds = 1.5e9;
  snap.process.resident_memory_bytes = 123456;
  snap.pools = {{"mbuf", 16383, 16000}, {"hold", 8192, 8190}};
  snap.lcores[0].rings = {{"learn", 0, 4095}, {"handoff", 17, 4095}};
  snap.http.emplace();
  snap.http->threads = 64;
  snap.http->refused[static_cast<size_t>(common::Refusal::kBadToken) - 1] = 3;
  const std::string text = RenderPrometheus(snap);
  for (const char* line : {
           "# TYPE process_start_time_seconds gauge",
           "process_start_time_seconds 1.5e+09",
           "process_resident_memory_bytes 123456",
           R"(aggswitch_pool_capacity_buffers{pool="mbuf"} 16383)",
           R"(aggswitch_pool_available_buffers{pool="hold"} 8190)",
           "# TYPE aggswitch_lcore_ring_entries gauge",
           R"(aggswitch_lcore_ring_entries{lcore="1",ring="handoff"} 17)",
           R"(aggswitch_lcore_ring_capacity_entries{lcore="1",ring="learn"} 4095)",
           R"(aggswitch_http_requests_refused_total{reason="bad_token"} 3)",
           R"(aggswitch_http_requests_refused_total{reason="origin"} 0)",
           "aggswitch_http_threads 64",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
  // Without an HTTP server (telemetry, tests) the family is left out.
  snap.http.reset();
  EXPECT_EQ(RenderPrometheus(snap).find("aggswitch_http_"), std::string::npos);
}

TEST(MetricsTest, RegistrationsByResult) {
  const std::string text = RenderPrometheus(WithAggregation(SyntheticSnapshot()));
  for (const char* line : {
           "# TYPE aggswitch_aggregation_registrations_total counter",
           R"(aggswitch_aggregation_registrations_total{result="admitted"} 4)",
           R"(aggswitch_aggregation_registrations_total{result="existing"} 2)",
           R"(aggswitch_aggregation_registrations_total{result="table_full"} 0)",
           R"(aggswitch_aggregation_registrations_total{result="key_mismatch"} 1)",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
  // Every result of the dataplane's list, zeros included.
  for (size_t r = 0; r < dataplane::kNumRegistrationResults; ++r) {
    const std::string series =
        std::string(R"(aggswitch_aggregation_registrations_total{result=")") +
        dataplane::kRegistrationResultText[r].name + "\"}";
    using dataplane::RegistrationResult;
    const auto result = static_cast<RegistrationResult>(r);
    const uint64_t expected = result == RegistrationResult::admitted       ? 4
                              : result == RegistrationResult::existing     ? 2
                              : result == RegistrationResult::key_mismatch ? 1
                                                                           : 0;
    EXPECT_EQ(SampleValue(text, series), std::to_string(expected)) << series;
  }
  std::string help;
  for (const std::string& l : Lines(text)) {
    if (l.rfind("# HELP aggswitch_aggregation_registrations_total ", 0) == 0) help = l;
  }
  for (const dataplane::AggCounterText& t : dataplane::kRegistrationResultText) {
    EXPECT_NE(help.find(std::string(t.name) + " (" + t.help + ")"), std::string::npos) << t.name;
  }
}

// Malformed aggregation datagrams: one series per reason of the dataplane's
// list (the wire parser's among them), summed over the lcores.
TEST(MetricsTest, MalformedByReasonSummedOverTheLcores) {
  StatsSnapshot s = WithAggregation(SyntheticSnapshot());
  s.lcores.push_back(s.lcores[0]);
  s.lcores[1].lcore = s.lcores[0].lcore + 1;
  using dataplane::MalformedReason;
  s.lcores[0].malformed[static_cast<size_t>(MalformedReason::kBadMagic)] = 3;
  s.lcores[1].malformed[static_cast<size_t>(MalformedReason::kBadMagic)] = 4;
  s.lcores[1].malformed[static_cast<size_t>(MalformedReason::kFragment)] = 1;
  const std::string text = RenderPrometheus(s);
  EXPECT_TRUE(HasLine(text, "# TYPE aggswitch_aggregation_malformed_total counter"));
  for (size_t r = 0; r < dataplane::kNumMalformedReasons; ++r) {
    const auto reason = static_cast<MalformedReason>(r);
    const std::string series = std::string(R"(aggswitch_aggregation_malformed_total{reason=")") +
                               dataplane::kMalformedText[r].name + "\"}";
    const uint64_t expected = reason == MalformedReason::kBadMagic   ? 7
                              : reason == MalformedReason::kFragment ? 1
                                                                     : 0;
    EXPECT_EQ(SampleValue(text, series), std::to_string(expected)) << series;
  }
  for (const char* wire : {"truncated", "bad_magic", "bad_version", "unknown_opcode",
                           "unknown_dtype", "unknown_op", "bad_type_op", "count_mismatch"}) {
    EXPECT_NE(text.find(std::string(R"(reason=")") + wire + "\""), std::string::npos) << wire;
  }
}

// The switch's own TAN: every counter, zeros included, and its pending gauge;
// nothing of it without tree control.
TEST(MetricsTest, OwnTanCountersAndPendingGauge) {
  StatsSnapshot s = WithAggregation(SyntheticSnapshot());
  const std::string text = RenderPrometheus(s);
  for (const char* line : {
           "# TYPE aggswitch_tan_first_data_total counter",
           "aggswitch_tan_first_data_total 12",
           "aggswitch_tan_late_data_total 9",
           "aggswitch_tan_merged_total 8",
           "aggswitch_tan_completed_chunks_total 7",
           "aggswitch_tan_gave_up_chunks_total 1",
           "aggswitch_tan_duplicate_late_total 0",
           "aggswitch_tan_ignored_total 0",
           "# TYPE aggswitch_tan_pending_chunks gauge",
           "aggswitch_tan_pending_chunks 3",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
  const std::set<std::string> families = ExpectWellFormed(text);
  EXPECT_EQ(families.count("aggswitch_tan_repeated_first_data_total"), 1u);
  s.aggregation->tan.reset();
  EXPECT_EQ(RenderPrometheus(s).find("aggswitch_tan_"), std::string::npos);
}

TEST(MetricsTest, NewLcoreCountersFlowThroughTheXMacro) {
  const std::string text = RenderPrometheus(WithAggregation(SyntheticSnapshot()));
  for (const char* line : {
           R"(aggswitch_aggregation_acks_total{lcore="1"} 5)",
           R"(aggswitch_aggregation_nacks_sent_total{lcore="1"} 6)",
           R"(aggswitch_aggregation_nacks_suppressed_total{lcore="1"} 0)",
           R"(aggswitch_aggregation_registration_ring_full_total{lcore="1"} 0)",
           "# HELP aggswitch_aggregation_contributions_total Contributions counted into a slot.",
           "# HELP aggswitch_aggregation_acks_total ACK datagrams (ack watermark only) received.",
       }) {
    EXPECT_TRUE(HasLine(text, line)) << "missing line: " << line;
  }
}

// Without aggregation the new families are absent, even for jobs that carry
// counters; the job table's gauges stay.
TEST(MetricsTest, AggregationOffLeavesItsFamiliesOut) {
  StatsSnapshot s = WithAggregation(SyntheticSnapshot());
  s.aggregation.reset();
  const std::string text = RenderPrometheus(s);
  for (const char* absent : {"aggswitch_aggregation_job_", "slot_completion_latency",
                             "aggswitch_aggregation_registrations_total"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  }
  EXPECT_TRUE(HasLine(text, R"(aggswitch_job_members{job="7"} 3)"));
}

TEST(MetricsTest, AggregationFamiliesAreWellFormed) {
  const std::set<std::string> families =
      ExpectWellFormed(RenderPrometheus(WithAggregation(SyntheticSnapshot())));
  EXPECT_EQ(families.count(kLatency), 1u);
  EXPECT_EQ(families.count("aggswitch_aggregation_registrations_total"), 1u);
  EXPECT_EQ(families.count("aggswitch_aggregation_job_reduced_bytes_total"), 1u);
  EXPECT_EQ(families.count("aggswitch_aggregation_slots_busy"), 1u);
}

TEST(PromtoolTest, SyntheticSnapshotPassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(SyntheticSnapshot()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(PromtoolTest, AggregationAndOwnTanPassCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(WithAggregation(SyntheticSnapshot())));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(PromtoolTest, EscapedLabelsPassCheckMetrics) {
  StatsSnapshot snap = SyntheticSnapshot();
  snap.ports[0].name = "we\"ird\\port\nname";
  snap.ports[0].vlan_mode = "trunk \"all\"";
  const PromtoolResult r = RunPromtool(RenderPrometheus(snap));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(PromtoolTest, JobTablePassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(WithJobs(SyntheticSnapshot())));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(PromtoolTest, AggregationPassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(WithAggregation(SyntheticSnapshot())));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(PromtoolTest, EmptySnapshotPassesCheckMetrics) {
  const PromtoolResult r = RunPromtool(RenderPrometheus(StatsSnapshot{}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

// The harness itself: promtool must reject broken input, or the checks above
// prove nothing.
TEST(PromtoolTest, RejectsACounterWithoutTotal) {
  const PromtoolResult r = RunPromtool(
      "# HELP aggswitch_bad_packets x\n# TYPE aggswitch_bad_packets counter\n"
      "aggswitch_bad_packets 1\n");
  EXPECT_NE(r.output, "");
}

}  // namespace
}  // namespace aggswitch::control
