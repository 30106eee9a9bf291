// The INT stage in a switch on ring ports: the first hop inserts the INT
// headers toward a fabric port and reports hop 1, a transit datagram from a
// fabric port leaves an edge port as the original bytes with the path's end
// reported, unwatched traffic is untouched, sampling takes 1 in N, and the
// watch list can be replaced while the switch runs.
#include "dataplane/int_stage.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dataplane/dataplane_test_fixture.h"
#include "telemetry/int_frame.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::DataplaneTest;
using fixtures::kH0;
using fixtures::kH1;
using testframes::Frame;
using testframes::UdpDatagram;

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("int_stage_test", "0,1"));

constexpr size_t kL3 = 14;

uint16_t Get16(const Frame& f, size_t at) { return static_cast<uint16_t>(f[at] << 8 | f[at + 1]); }

// Port a0 faces hosts, a1 another switch (both access VLAN 10); node 7.
class IntStageTest : public DataplaneTest {
 protected:
  void SetUp() override { BuildWith("[{name: w, dst: 10.0.10.2/32, port: 5000}]"); }

  void BuildWith(const std::string& watch, const std::string& a1_extra = "") {
    std::string yaml = DefaultYaml(
        "telemetry: {node_id: 7, collector: \"127.0.0.1:32766\", max_hops: 6, watch: " + watch + "}\n");
    const std::string a1 = "devargs: net_ring_" + names_[1] + ", access: 10";
    yaml.replace(yaml.find(a1), a1.size(), a1 + ", role: fabric" + a1_extra);
    Build(yaml);
    // The hosts' MACs: kH0 behind a0, kH1 behind a1.
    Inject(0, Untagged(kH0, fixtures::kBroadcast));
    Inject(1, Untagged(kH1, fixtures::kBroadcast));
    Step();
    Drain();
  }

  std::vector<IntHopRecord> Records() {
    std::vector<IntHopRecord> out;
    dp_->ProcessIntRecords([&](const IntHopRecord& r) { out.push_back(r); });
    return out;
  }
  const IntCounters& Int() { return dp_->worker_stats(0).lcore.int_; }
};

TEST_F(IntStageTest, TheFirstHopInsertsTowardTheFabricAndReportsHopOne) {
  const Frame original = UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5000, 100);
  Inject(0, original);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  Frame sent = out[1][0];
  ASSERT_EQ(sent.size(), original.size() + telemetry::kInsertedBytes);
  EXPECT_EQ(Get16(sent, kL3 + 22), 7700) << "the INT port";
  telemetry::IntView view;
  size_t len = sent.size() - kL3;
  ASSERT_EQ(telemetry::ViewInt(sent.data() + kL3, len, 7700, &view), telemetry::FrameError::kNone);
  EXPECT_EQ(view.shim->original_port.host(), 5000);
  EXPECT_EQ(view.md->remaining, 5) << "the first hop counted itself off the budget of 6";
  EXPECT_EQ(view.md->instructions.host(), telemetry::instr::kLatencySet);
  EXPECT_EQ(view.source_node, 7u);
  EXPECT_EQ(view.hop_bytes, 0u) << "no hop metadata on the link";
  // Stripped, it is the original datagram.
  ASSERT_EQ(telemetry::StripInt(sent.data() + kL3, &len), telemetry::FrameError::kNone);
  EXPECT_TRUE(std::equal(original.begin(), original.end(), sent.begin()));

  const auto records = Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].hop_index, 1u);
  EXPECT_EQ(records[0].last_hop, 0);
  EXPECT_EQ(records[0].source_node, 7u);
  EXPECT_EQ(records[0].path_seq, view.path_seq);
  EXPECT_EQ(records[0].in_port, 0);
  EXPECT_EQ(records[0].out_port, 1);
  EXPECT_EQ(records[0].instructions, telemetry::instr::kLatencySet);
  EXPECT_TRUE(std::equal(records[0].inner, records[0].inner + 28, original.begin() + kL3))
      << "the report carries the original headers";
  EXPECT_EQ(Int().watched.Get(), 1u);
  EXPECT_EQ(Int().inserted.Get(), 1u);
  EXPECT_EQ(Int().exported.Get(), 1u);
}

TEST_F(IntStageTest, ATransitDatagramLeavesAnEdgePortAsTheOriginal) {
  // What a first hop elsewhere sent: 10.0.10.2 -> 10.0.10.1, INT inserted, one hop taken.
  const Frame original = UdpDatagram(kH1, kH0, "10.0.10.2", "10.0.10.1", 4000, 6000, 33);
  Frame with_int = original;
  with_int.resize(original.size() + telemetry::kInsertedBytes);
  size_t len = original.size() - kL3;
  ASSERT_EQ(telemetry::InsertInt(with_int.data() + kL3, &len, with_int.size() - kL3,
                                 {7700, telemetry::instr::kBothSets, 6, 3, 99}),
            telemetry::FrameError::kNone);
  telemetry::HopTaken taken;
  ASSERT_EQ(telemetry::TakeHop(with_int.data() + kL3, len, &taken), telemetry::FrameError::kNone);
  Inject(1, with_int);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0], original) << "bit for bit";
  const auto records = Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].hop_index, 2u);
  EXPECT_EQ(records[0].last_hop, 1) << "out an edge port: the end of the path";
  EXPECT_EQ(records[0].source_node, 3u);
  EXPECT_EQ(records[0].path_seq, 99u);
  EXPECT_EQ(records[0].instructions, telemetry::instr::kBothSets);
  EXPECT_EQ(records[0].in_port, 1);
  EXPECT_EQ(records[0].out_port, 0);
  EXPECT_TRUE(std::equal(records[0].inner, records[0].inner + 28, original.begin() + kL3));
  EXPECT_EQ(Int().transit.Get(), 1u);
  EXPECT_EQ(Int().stripped.Get(), 1u);
  EXPECT_EQ(Int().watched.Get(), 0u);
}

TEST_F(IntStageTest, UnwatchedTrafficIsUntouched) {
  const Frame other_port = UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5001, 64);
  const Frame other_host = UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.3", 4000, 5000, 64);
  Inject(0, other_port);
  Inject(0, other_host);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(out[1][0], other_port);
  EXPECT_EQ(out[1][1], other_host);
  EXPECT_TRUE(Records().empty());
  EXPECT_EQ(Int().watched.Get(), 0u);
}

TEST_F(IntStageTest, ADatagramToTheIntPortWithoutIntFromTheFabricIsDropped) {
  Inject(1, UdpDatagram(kH1, kH0, "10.0.10.2", "10.0.10.1", 4000, 7700, 40));
  Step();
  EXPECT_TRUE(Drain()[0].empty());
  EXPECT_EQ(DropCount(1, DropReason::kIntMalformed), 1u);
  // From an edge port the INT port is just a port.
  Inject(0, UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 7700, 40));
  Step();
  EXPECT_EQ(Drain()[1].size(), 1u);
}

TEST_F(IntStageTest, NoRoomWithinTheMtuSendsTheDatagramOnWithoutInt) {
  // 1480 bytes of IPv4: 24 more do not fit a1's MTU of 1500.
  const Frame big = UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5000, 1452);
  Inject(0, big);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0], big);
  EXPECT_EQ(Int().no_room.Get(), 1u);
  EXPECT_TRUE(Records().empty());
}

TEST_F(IntStageTest, SamplingTakesAboutOneInN) {
  BuildWith("[{name: w, dst: 10.0.10.2/32, sample: 50, instructions: bandwidth}]");
  constexpr int kFrames = 5000;
  for (int i = 0; i < kFrames; ++i) {
    Inject(0, UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5000, 18));
    if (i % 128 == 127) Step();
  }
  Step();
  (void)Drain();
  const auto records = Records();
  // 100 expected; the countdown is random around 50.
  EXPECT_GT(records.size(), 50u);
  EXPECT_LT(records.size(), 200u);
  for (const IntHopRecord& r : records) EXPECT_EQ(r.instructions, telemetry::instr::kBandwidthSet);
  EXPECT_EQ(Int().watched.Get(), records.size());
}

TEST_F(IntStageTest, TheWatchListCanBeReplacedWhileRunning) {
  config::WatchEntry e;
  e.name = "other";
  e.port = 5001;
  e.instructions = config::IntInstructions::kBoth;
  ASSERT_TRUE(dp_->SetWatchList({e}).ok());
  ASSERT_EQ(dp_->watch_entries().size(), 1u);
  EXPECT_EQ(dp_->watch_entries()[0].name, "other");
  Inject(0, UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5000, 20));
  Inject(0, UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.2", 4000, 5001, 20));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(Get16(out[1][0], kL3 + 22), 5000) << "no longer watched";
  EXPECT_EQ(Get16(out[1][1], kL3 + 22), 7700);
  const auto records = Records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].instructions, telemetry::instr::kBothSets);
}

// A switch that aggregates: port a1 faces another switch.
class IntAggregationTest : public fixtures::AggregationTest {
 protected:
  void SetUp() override {
    auto jobs = aggregator::JobTable::Create(64, 256);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    std::string yaml = DefaultYaml(
        "aggregation: {address: 10.0.10.253, slots: 1024}\n"
        "telemetry: {node_id: 9, collector: \"127.0.0.1:32766\"}\n");
    const std::string a1 = "devargs: net_ring_" + names_[1] + ", access: 10";
    yaml.replace(yaml.find(a1), a1.size(), a1 + ", role: fabric");
    Build(yaml, 1024, jobs_.get());
    in_band_ = std::make_unique<fixtures::InBandControl>(*jobs_, config_);
  }
};

// A contribution that a leaf gave INT to on its way here ends its path at
// this switch: stripped before the aggregation path reads it, its last hop
// reported with egress port 0xFFFF, and the sum is right.
TEST_F(IntAggregationTest, AContributionWithIntEndsItsPathHereAndIsReduced) {
  AddJob(5, 2);
  Frame with_int = Contribution(5, 1, 1, Int32Payload({10, 20}));
  // Member 1 sits behind the fabric port: its frames come in on a1.
  const size_t original = with_int.size();
  with_int.resize(original + telemetry::kInsertedBytes);
  size_t len = original - kL3;
  ASSERT_EQ(telemetry::InsertInt(with_int.data() + kL3, &len, with_int.size() - kL3,
                                 {7700, telemetry::instr::kLatencySet, 8, 4, 17}),
            telemetry::FrameError::kNone);
  telemetry::HopTaken taken;
  ASSERT_EQ(telemetry::TakeHop(with_int.data() + kL3, len, &taken), telemetry::FrameError::kNone);
  Inject(1, with_int);
  Inject(0, Contribution(5, 1, 0, Int32Payload({1, 2})));
  Step();
  auto out = Drain();
  std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
  const std::vector<Result> more = WithOpcode(out[1], aggregator::Opcode::kResult);
  results.insert(results.end(), more.begin(), more.end());
  ASSERT_EQ(results.size(), 2u) << "one result per member";
  for (const Result& r : results) EXPECT_EQ(r.payload, Int32Payload({11, 22}));
  std::vector<IntHopRecord> records;
  dp_->ProcessIntRecords([&](const IntHopRecord& r) { records.push_back(r); });
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].hop_index, 2u);
  EXPECT_EQ(records[0].last_hop, 1);
  EXPECT_EQ(records[0].out_port, kIntLocalPort);
  EXPECT_EQ(records[0].in_port, 1);
  EXPECT_EQ(records[0].source_node, 4u);
  EXPECT_EQ(records[0].path_seq, 17u);
  EXPECT_EQ(dp_->worker_stats(0).lcore.int_.stripped.Get(), 1u);
  EXPECT_EQ(Malformed(), 0u);
}

TEST(WatchList, MatchesEveryGivenFieldAndTakesTheFirstRule) {
  std::vector<config::WatchEntry> entries(3);
  entries[0].name = "job";
  entries[0].job = 9;
  entries[1].name = "subnet";
  entries[1].src = common::Ipv4Prefix::Parse("10.1.0.0/16");
  entries[1].vlan = 20;
  entries[2].name = "port";
  entries[2].port = 53;
  const auto list = WatchList::Build(entries, 47000);
  const auto match = [&](const Frame& f, uint16_t vlan) {
    return list->Match(f.data() + kL3, f.data() + kL3 + 20, f.data() + f.size(), vlan);
  };
  Frame job = UdpDatagram(kH0, kH1, "10.9.0.1", "10.9.0.2", 40000, 47000, 40);
  testframes::PutBe32(job.data() + kL3 + 28 + offsetof(aggregator::AggHeader, job_id), 9);
  EXPECT_EQ(match(job, 10), 0u);
  testframes::PutBe32(job.data() + kL3 + 28 + offsetof(aggregator::AggHeader, job_id), 8);
  EXPECT_EQ(match(job, 10), WatchList::kNoMatch);
  const Frame subnet = UdpDatagram(kH0, kH1, "10.1.2.3", "10.9.0.2", 1, 2, 8);
  EXPECT_EQ(match(subnet, 20), 1u);
  EXPECT_EQ(match(subnet, 10), WatchList::kNoMatch) << "another VLAN";
  EXPECT_EQ(match(UdpDatagram(kH0, kH1, "10.2.0.1", "10.9.0.2", 53, 9999, 8), 10), 2u)
      << "the source port";
  EXPECT_EQ(match(UdpDatagram(kH0, kH1, "10.1.0.1", "10.9.0.2", 9999, 53, 8), 10), 2u)
      << "the destination port, the subnet rule's VLAN not matching";
  EXPECT_EQ(list->base(), 1u);
}

}  // namespace
}  // namespace aggswitch::dataplane
