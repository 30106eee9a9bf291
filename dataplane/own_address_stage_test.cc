// The own-address stage alone: ARP requests for the switch's addresses and
// pings to them are answered out the ingress port, ARP replies to the switch
// go up to the control thread, what is addressed to the switch but answers
// nothing is dropped with its reason, and everything else is left to L2.
#include "dataplane/own_address_stage.h"

#include <gtest/gtest.h>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::kH0;
using fixtures::kSwitchMac;
using fixtures::StageTest;
using testframes::Frame;

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("own_address_stage_test"));

class OwnAddressStageTest : public StageTest {
 protected:
  void SetUp() override {
    StageTest::SetUp();
    neighbors_ = rte_ring_create_elem("own_test_neigh", sizeof(NeighborReport), 16, SOCKET_ID_ANY,
                                      RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(neighbors_, nullptr);
    own_ = std::make_unique<OwnAddressStage>(plan(), stats(), tx(), neighbors_);
  }
  void TearDown() override {
    own_.reset();
    rte_ring_free(neighbors_);
    StageTest::TearDown();
  }
  static FrameMeta Meta(uint16_t vlan, bool tagged = false) {
    return FrameMeta{vlan, tagged, static_cast<uint8_t>(tagged ? 18 : 14)};
  }

  rte_ring* neighbors_ = nullptr;
  std::unique_ptr<OwnAddressStage> own_;
};

TEST_F(OwnAddressStageTest, ArpRequestForTheSwitchIsAnsweredOutTheIngressPort) {
  EXPECT_TRUE(own_->Handle(1, Mbuf(testframes::ArpRequest(kH0, "10.0.10.1", "10.0.10.254")),
                           Meta(10), true));
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 1u);
  const Frame& reply = sent[1][0];
  EXPECT_TRUE(std::equal(kH0.bytes.begin(), kH0.bytes.end(), reply.begin())) << "to the asker";
  EXPECT_TRUE(std::equal(kSwitchMac.bytes.begin(), kSwitchMac.bytes.end(), reply.begin() + 6));
  EXPECT_EQ(reply[21], 2) << "an ARP reply";
  EXPECT_EQ(stats().lcore.arp_replies.Get(), 1u);
}

TEST_F(OwnAddressStageTest, ArpForAnotherHostAndOtherBroadcastsAreLeftToL2) {
  rte_mbuf* other = Mbuf(testframes::ArpRequest(kH0, "10.0.10.1", "10.0.10.7"));
  EXPECT_FALSE(own_->Handle(0, other, Meta(10), true));
  // The address of VLAN 20 is not the switch's on VLAN 10.
  rte_mbuf* wrong_vlan = Mbuf(testframes::ArpRequest(kH0, "10.0.10.1", "10.0.20.254"));
  EXPECT_FALSE(own_->Handle(0, wrong_vlan, Meta(10), true));
  rte_pktmbuf_free(other);
  rte_pktmbuf_free(wrong_vlan);
  tx().Flush();
  EXPECT_TRUE(Sent().empty());
}

TEST_F(OwnAddressStageTest, PingToTheSwitchIsAnsweredTaggedAsItCame) {
  ASSERT_TRUE(own_->Handle(3,
                           Mbuf(testframes::IcmpEcho(kH0, kSwitchMac, "10.0.20.1", "10.0.20.254", 7,
                                                     1, 32, 20)),
                           Meta(20, true), false));
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(sent[3][0][12], 0x81) << "still tagged";
  EXPECT_EQ(sent[3][0][18 + 20], 0) << "an echo reply";
  EXPECT_EQ(stats().lcore.icmp_replies.Get(), 1u);
}

TEST_F(OwnAddressStageTest, ArpReplyToTheSwitchGoesUpToTheControlThread) {
  Frame reply = testframes::ArpRequest(kH0, "10.0.10.9", "10.0.10.254");
  std::copy(kSwitchMac.bytes.begin(), kSwitchMac.bytes.end(), reply.begin());  // unicast to us
  reply[21] = 2;  // oper: reply
  const unsigned in_use = InUse();
  EXPECT_TRUE(own_->Handle(1, Mbuf(reply), Meta(10), false));
  EXPECT_EQ(InUse(), in_use) << "consumed";
  NeighborReport r{};
  ASSERT_EQ(rte_ring_sc_dequeue_elem(neighbors_, &r, sizeof(r)), 0);
  EXPECT_EQ(r.mac48, kH0.ToU64());
  EXPECT_EQ(r.ip, 0x0a000a09u);
  EXPECT_EQ(r.port_index, 1);
  EXPECT_EQ(r.vlan, 10);
  EXPECT_EQ(stats().lcore.agg.neighbor_reports.Get(), 1u);
}

// A neighbor ring the control thread does not drain: the replies past its
// size are counted, and their mbufs still go back to the pool.
TEST_F(OwnAddressStageTest, ArpRepliesBeyondAFullNeighborRingAreCounted) {
  Frame reply = testframes::ArpRequest(kH0, "10.0.10.9", "10.0.10.254");
  std::copy(kSwitchMac.bytes.begin(), kSwitchMac.bytes.end(), reply.begin());
  reply[21] = 2;
  const unsigned in_use = InUse();
  const unsigned room = rte_ring_free_count(neighbors_);
  for (unsigned i = 0; i < room + 3; ++i) EXPECT_TRUE(own_->Handle(1, Mbuf(reply), Meta(10), false));
  EXPECT_EQ(InUse(), in_use);
  EXPECT_EQ(stats().lcore.agg.neighbor_reports.Get(), room);
  EXPECT_EQ(stats().lcore.agg.neighbor_ring_full.Get(), 3u);
}

TEST_F(OwnAddressStageTest, UnansweredFramesToTheSwitchAreDroppedWithTheirReason) {
  // An IPv6 frame to the switch's MAC: nothing answers it.
  EXPECT_TRUE(own_->Handle(0, Mbuf(testframes::EthernetFrame(kH0, kSwitchMac, 0x86dd, 46)), Meta(10),
                           false));
  // A ping whose IPv4 header is cut short.
  Frame cut = testframes::IcmpEcho(kH0, kSwitchMac, "10.0.10.1", "10.0.10.254", 1, 1, 8);
  cut.resize(14 + 12);
  EXPECT_TRUE(own_->Handle(0, Mbuf(cut), Meta(10), false));
  EXPECT_EQ(Drops(0, DropReason::kToSwitchUnhandled), 1u);
  EXPECT_EQ(Drops(0, DropReason::kToSwitchMalformed), 1u);
  tx().Flush();
  EXPECT_TRUE(Sent().empty());
}

}  // namespace
}  // namespace aggswitch::dataplane
