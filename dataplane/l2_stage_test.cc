// The L2 stage alone: unknown unicast floods to the VLAN's other ports with
// each egress port's tagging, known unicast goes to its port, a frame back
// to its ingress port is a hairpin drop, learn requests go once per run of
// one source, and frames to the switch reach the own-address stage.
#include "dataplane/l2_stage.h"

#include <gtest/gtest.h>

#include <map>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::kH0;
using fixtures::kH1;
using fixtures::kH2;
using fixtures::kSwitchMac;
using fixtures::StageTest;
using testframes::Frame;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("l2_stage_test"));

class L2StageTest : public StageTest {
 protected:
  void SetUp() override {
    StageTest::SetUp();
    learn_ = rte_ring_create_elem("l2_test_learn", sizeof(LearnRequest), 256, SOCKET_ID_ANY,
                                  RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(learn_, nullptr);
    macs_ = std::make_unique<MacTable>(1024);
    own_ = std::make_unique<OwnAddressStage>(plan(), stats(), tx(), nullptr);
    l2_ = std::make_unique<L2Stage>(plan(), *macs_, learn_, Pool(), stats(), tx(), *own_);
  }
  void TearDown() override {
    l2_.reset();
    own_.reset();
    rte_ring_free(learn_);
    StageTest::TearDown();
  }

  // Runs `frames`, received on `port`, through the stage as the classifier
  // would hand them over (untagged unless `vlan_tag`).
  void Run(uint16_t port, const std::vector<Frame>& frames, uint16_t vlan, bool tagged = false) {
    L2Vector v;
    for (const Frame& f : frames) {
      v.m[v.n] = Mbuf(f);
      v.meta[v.n] = FrameMeta{vlan, tagged, static_cast<uint8_t>(tagged ? 18 : 14)};
      v.src[v.n] = MacKey(vlan, SrcMac48(f.data()));
      v.dst[v.n] = MacKey(vlan, DstMac48(f.data()));
      ++v.n;
    }
    l2_->Process(port, v, /*now_tick=*/1);
    l2_->FlushLearn();
    tx().Flush();
  }
  std::vector<LearnRequest> Learned() {
    std::vector<LearnRequest> out;
    LearnRequest r;
    while (rte_ring_sc_dequeue_elem(learn_, &r, sizeof(r)) == 0) out.push_back(r);
    return out;
  }

  rte_ring* learn_ = nullptr;
  std::unique_ptr<MacTable> macs_;
  std::unique_ptr<OwnAddressStage> own_;
  std::unique_ptr<L2Stage> l2_;
};

TEST_F(L2StageTest, UnknownUnicastFloodsWithEachPortsTagging) {
  Run(0, {testframes::EthernetFrame(kH0, kH1, 0x0800, 46)}, 10);
  auto sent = Sent();
  EXPECT_EQ(sent.count(0), 0u) << "never back out the ingress port";
  ASSERT_EQ(sent[1].size(), 1u);
  EXPECT_EQ(sent[1][0][12], 0x08) << "access: untagged";
  EXPECT_EQ(sent.count(2), 0u) << "VLAN 20 only";
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(sent[3][0][12], 0x81) << "trunk: tagged";
  EXPECT_EQ(sent[3][0][15], 10);
  EXPECT_EQ(stats().ports[0].flooded_packets.Get(), 1u);
}

TEST_F(L2StageTest, KnownUnicastGoesToItsPortAndHairpinsAreDropped) {
  ASSERT_EQ(macs_->Learn(MacKey(10, kH1), 3, 1), MacTable::LearnResult::kAdded);
  ASSERT_EQ(macs_->Learn(MacKey(10, kH2), 0, 1), MacTable::LearnResult::kAdded);
  Run(0, {testframes::EthernetFrame(kH0, kH1, 0x0800, 46), testframes::EthernetFrame(kH0, kH2, 0x0800, 46)},
      10);
  auto sent = Sent();
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(sent[3][0][15], 10) << "tagged for the trunk";
  EXPECT_EQ(sent.count(1), 0u);
  EXPECT_EQ(Drops(0, DropReason::kHairpin), 1u);
}

TEST_F(L2StageTest, ARunOfOneSourceAsksToLearnItOnce) {
  std::vector<Frame> frames(5, testframes::EthernetFrame(kH0, kH1, 0x0800, 46));
  frames.push_back(testframes::EthernetFrame(kH2, kH1, 0x0800, 46));
  Run(1, frames, 10);
  const std::vector<LearnRequest> learned = Learned();
  ASSERT_EQ(learned.size(), 2u);
  EXPECT_EQ(learned[0].key, MacKey(10, kH0));
  EXPECT_EQ(learned[0].port, 1);
  EXPECT_EQ(learned[1].key, MacKey(10, kH2));
  EXPECT_EQ(stats().lcore.learn_requests.Get(), 2u);
  // The same source in the same tick again: no second request.
  Run(1, {testframes::EthernetFrame(kH0, kH1, 0x0800, 46)}, 10);
  EXPECT_TRUE(Learned().empty());
  Sent();
}

TEST_F(L2StageTest, FramesToTheSwitchReachTheOwnAddressStage) {
  Run(0, {testframes::IcmpEcho(kH0, kSwitchMac, "10.0.10.1", "10.0.10.254", 1, 1, 16),
          testframes::ArpRequest(kH0, "10.0.10.1", "10.0.10.254")},
      10);
  auto sent = Sent();
  ASSERT_EQ(sent[0].size(), 2u) << "both answered out the ingress port";
  EXPECT_EQ(stats().lcore.icmp_replies.Get(), 1u);
  EXPECT_EQ(stats().lcore.arp_replies.Get(), 1u);
  EXPECT_EQ(sent.count(1), 0u) << "an answered broadcast is not flooded";
}

TEST_F(L2StageTest, AVlanWithNoOtherPortIsANoEgressDrop) {
  // VLAN 30 is the trunk's native VLAN and no other port's.
  const unsigned in_use = InUse();
  Run(3, {testframes::EthernetFrame(kH0, kH1, 0x0800, 46)}, 30);
  EXPECT_TRUE(Sent().empty());
  EXPECT_EQ(Drops(3, DropReason::kNoEgress), 1u);
  EXPECT_EQ(InUse(), in_use);
}

TEST_F(L2StageTest, FramesOfTheSwitchFloodOnTheirVlan) {
  l2_->FloodFromSwitch(Mbuf(testframes::ArpRequest(kSwitchMac, "10.0.20.254", "10.0.20.9")), 20);
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[2].size(), 1u);
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(sent[3][0][12], 0x81);
  EXPECT_EQ(sent[3][0][15], 20);
  EXPECT_EQ(stats().lcore.agg.control_tx.Get(), 1u);
}

// a0 and a1 as the uplink group "up" (two links to two spines).
class L2GroupTest : public L2StageTest {
 protected:
  void SetUp() override {
    a_group_ = "up";
    L2StageTest::SetUp();
  }
  // A datagram from h0 (behind the trunk) to h1 at 10.0.10.9, from UDP port `sport`.
  static Frame ToH1(uint16_t sport) {
    return testframes::UdpDatagram(kH0, kH1, "10.0.10.1", "10.0.10.9", sport, 5000, 32);
  }
  void Decide(std::vector<PathDecision> decisions) {
    auto table = PathDecisions::Build(decisions);
    ASSERT_TRUE(table.ok()) << table.status().message();
    plan_->groups().Publish(std::move(*table));  // no worker runs: the old one may go now
  }
};

TEST_F(L2GroupTest, MembersLearnAsTheGroupAndFloodOnlyThroughTheFirst) {
  Run(1, {testframes::EthernetFrame(kH1, kH2, 0x0800, 46)}, 10);
  const std::vector<LearnRequest> learned = Learned();
  ASSERT_EQ(learned.size(), 1u);
  EXPECT_EQ(learned[0].port, 0) << "learned on a1, recorded under the group's first member a0";
  auto sent = Sent();
  EXPECT_EQ(sent.count(0), 0u) << "never from a member back into its group";
  ASSERT_EQ(sent[3].size(), 1u);

  Run(3, {testframes::EthernetFrame(kH0, kH2, 0x0800, 46)}, 10);
  sent = Sent();
  EXPECT_EQ(sent[0].size(), 1u) << "the group's first member carries the flood";
  EXPECT_EQ(sent.count(1), 0u) << "the other member carries none: no loop through two spines";
}

TEST_F(L2GroupTest, KnownUnicastSpreadsFlowsOverTheMembersAndKeepsEachOnOne) {
  ASSERT_EQ(macs_->Learn(MacKey(10, kH1), 0, 1), MacTable::LearnResult::kAdded);
  std::map<uint16_t, int> first_port;  // source port -> member
  for (int round = 0; round < 2; ++round) {
    std::vector<Frame> frames;
    for (uint16_t sport = 1000; sport < 1032; ++sport) frames.push_back(ToH1(sport));
    Run(3, frames, 10);
    auto sent = Sent();
    EXPECT_EQ(sent[0].size() + sent[1].size(), 32u);
    EXPECT_GE(sent[0].size(), 4u) << "32 flows over two members: both carry some";
    EXPECT_GE(sent[1].size(), 4u);
    for (int p = 0; p < 2; ++p) {
      for (const Frame& f : sent[p]) {
        const uint16_t sport = static_cast<uint16_t>(f[34] << 8 | f[35]);
        auto [it, fresh] = first_port.emplace(sport, p);
        EXPECT_EQ(it->second, p) << "flow from port " << sport << " changed member";
      }
    }
  }
  EXPECT_EQ(stats().ports[0].uplink_hashed_packets.Get() + stats().ports[1].uplink_hashed_packets.Get(), 64u);
  EXPECT_EQ(stats().ports[0].uplink_decided_packets.Get(), 0u);

  // A frame from a member to an address learned on the group turns back.
  Run(1, {ToH1(7)}, 10);
  EXPECT_TRUE(Sent().empty());
  EXPECT_EQ(Drops(1, DropReason::kHairpin), 1u);
}

TEST_F(L2GroupTest, APathDecisionNamesTheMemberForItsDestination) {
  ASSERT_EQ(macs_->Learn(MacKey(10, kH1), 0, 1), MacTable::LearnResult::kAdded);
  const common::Ipv4Prefix h1 = *common::Ipv4Prefix::Parse("10.0.10.9/32");
  for (const uint16_t member : {uint16_t{1}, uint16_t{0}}) {
    Decide({{h1, member}});
    std::vector<Frame> frames;
    for (uint16_t sport = 1000; sport < 1016; ++sport) frames.push_back(ToH1(sport));
    Run(3, frames, 10);
    auto sent = Sent();
    EXPECT_EQ(sent[member].size(), 16u) << "every flow to 10.0.10.9 takes port " << member;
    EXPECT_EQ(stats().ports[member].uplink_decided_packets.Get(), 16u);
  }
  // A decision for a port outside the group, or for another destination,
  // leaves the hash to pick.
  Decide({{h1, 3}, {*common::Ipv4Prefix::Parse("10.0.10.0/30"), 1}});
  Run(3, {ToH1(1000), ToH1(1001), ToH1(1002), ToH1(1003)}, 10);
  auto sent = Sent();
  EXPECT_EQ(sent[0].size() + sent[1].size(), 4u);
  EXPECT_EQ(sent.count(3), 0u);
  EXPECT_EQ(stats().ports[0].uplink_hashed_packets.Get() + stats().ports[1].uplink_hashed_packets.Get(), 4u);
}

TEST_F(L2GroupTest, AMemberWhoseLinkIsDownCarriesNothingUntilItIsUp) {
  ASSERT_EQ(macs_->Learn(MacKey(10, kH1), 0, 1), MacTable::LearnResult::kAdded);
  Decide({{*common::Ipv4Prefix::Parse("10.0.10.9/32"), 0}});
  plan_->groups().SetDown(uint64_t{1} << 0);  // a0, the first member

  Run(3, {testframes::EthernetFrame(kH0, kH2, 0x0800, 46)}, 10);
  auto sent = Sent();
  EXPECT_EQ(sent.count(0), 0u);
  EXPECT_EQ(sent[1].size(), 1u) << "the next member up carries the flood";

  std::vector<Frame> frames;
  for (uint16_t sport = 1000; sport < 1016; ++sport) frames.push_back(ToH1(sport));
  Run(3, frames, 10);
  sent = Sent();
  EXPECT_EQ(sent.count(0), 0u) << "neither the decision nor the hash sends to a member that is down";
  EXPECT_EQ(sent[1].size(), 16u);
  EXPECT_EQ(stats().ports[1].uplink_hashed_packets.Get(), 16u);

  plan_->groups().SetDown(0);
  Run(3, frames, 10);
  sent = Sent();
  EXPECT_EQ(sent[0].size(), 16u) << "up again: the decision holds";
  Run(3, {testframes::EthernetFrame(kH0, kH2, 0x0800, 46)}, 10);
  sent = Sent();
  EXPECT_EQ(sent[0].size(), 1u) << "and the first member floods again";
  EXPECT_EQ(sent.count(1), 0u);
}

}  // namespace
}  // namespace aggswitch::dataplane
