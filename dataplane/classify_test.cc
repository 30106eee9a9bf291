// The classifier alone: each frame of a burst lands in exactly one place (the
// L2 vector, the aggregation vector, or a drop counted with its reason), RX
// is counted per port, and aggregation traffic is told apart by the
// aggregation address or the UDP port, switch-bound opcodes excepted.
#include "dataplane/classify.h"

#include <gtest/gtest.h>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::Frames;
using fixtures::kAggIp;
using fixtures::kH0;
using fixtures::kH1;
using fixtures::kSwitchMac;
using fixtures::StageTest;
using testframes::Frame;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("classify_test"));

class ClassifyTest : public StageTest {
 protected:
  Classifier Make(uint32_t address = kAggIp) {
    return Classifier(plan(), {true, address, aggregator::kAggUdpPort, address}, stats(), tx());
  }
  // Sorts `frames` received on `port`.
  Burst Sort(Classifier& c, uint16_t port, const std::vector<Frame>& frames) {
    rte_mbuf* pkts[kBurstSize];
    for (size_t i = 0; i < frames.size(); ++i) pkts[i] = Mbuf(frames[i]);
    Burst burst;
    c.Sort(port, pkts, static_cast<uint16_t>(frames.size()), &burst);
    return burst;
  }
  static void Free(const Burst& b) {
    for (uint16_t i = 0; i < b.l2.n; ++i) rte_pktmbuf_free(b.l2.m[i]);
    for (uint16_t i = 0; i < b.agg.n; ++i) rte_pktmbuf_free(b.agg.m[i]);
  }
  static Frame Contribution(uint16_t node, uint32_t dst_ip = kAggIp,
                            aggregator::Opcode opcode = aggregator::Opcode::kContribution,
                            uint16_t flags = 0) {
    aggregator::AggFields f;
    f.opcode = opcode;
    f.flags = flags;
    f.node_id = node;
    f.job_id = 1;
    f.elem_count = 1;
    Frame frame = Frames::DatagramFrom(f, {1, 0, 0, 0}, Frames::MemberMac(node), Frames::MemberIp(node),
                                       40000, -1);
    // Re-address: destination IP at 14 + 16, header checksum recomputed.
    testframes::PutBe32(frame.data() + 30, dst_ip);
    frame[24] = frame[25] = 0;
    const uint16_t csum = InternetChecksum(frame.data() + 14, 20);
    std::memcpy(frame.data() + 24, &csum, 2);
    return frame;
  }
};

TEST_F(ClassifyTest, EachFrameGoesToOneVectorOrOneCountedDrop) {
  Classifier c = Make();
  const unsigned in_use = InUse();
  Frame runt(10, 0);
  Frame multicast_src = testframes::EthernetFrame(*common::MacAddr::Parse("01:00:5e:00:00:01"), kH1, 0x0800, 46);
  Frame from_switch = testframes::EthernetFrame(kSwitchMac, kH1, 0x0800, 46);
  Frame tagged_on_access = testframes::EthernetFrame(kH0, kH1, 0x0800, 46, 10);
  Frame vlan_4095 = testframes::EthernetFrame(kH0, kH1, 0x0800, 46, 4095);
  Frame plain = testframes::EthernetFrame(kH0, kH1, 0x0800, 46);
  Burst b = Sort(c, 0, {runt, multicast_src, from_switch, tagged_on_access, vlan_4095, plain,
                        Contribution(3)});
  EXPECT_EQ(b.l2.n, 1);
  EXPECT_EQ(b.agg.n, 1);
  EXPECT_EQ(Drops(0, DropReason::kRunt), 1u);
  EXPECT_EQ(Drops(0, DropReason::kSrcMulticast), 1u);
  EXPECT_EQ(Drops(0, DropReason::kSrcSpoofed), 1u);
  EXPECT_EQ(Drops(0, DropReason::kVlanNotAllowed), 1u);
  EXPECT_EQ(Drops(0, DropReason::kBadVlan), 1u);
  EXPECT_EQ(stats().ports[0].rx_packets.Get(), 7u);
  // The L2 vector carries the frame's VLAN and its MAC table keys.
  EXPECT_EQ(b.l2.meta[0].vlan, 10);
  EXPECT_EQ(b.l2.src[0], MacKey(10, kH0));
  EXPECT_EQ(b.l2.dst[0], MacKey(10, kH1));
  EXPECT_EQ(b.agg.meta[0].l3_offset, 14);
  Free(b);
  EXPECT_EQ(InUse(), in_use);
}

TEST_F(ClassifyTest, TrunkFramesKeepTheirTagAndNativeVlan) {
  Classifier c = Make();
  Burst b = Sort(c, 3, {testframes::EthernetFrame(kH0, kH1, 0x0800, 46, 20),
                        testframes::EthernetFrame(kH0, kH1, 0x0800, 46)});
  ASSERT_EQ(b.l2.n, 2);
  EXPECT_EQ(b.l2.meta[0].vlan, 20);
  EXPECT_TRUE(b.l2.meta[0].has_tag);
  EXPECT_EQ(b.l2.meta[0].l3_offset, 18);
  EXPECT_EQ(b.l2.meta[1].vlan, 30) << "untagged on the trunk: its native VLAN";
  EXPECT_FALSE(b.l2.meta[1].has_tag);
  Free(b);
}

TEST_F(ClassifyTest, AggregationTrafficByAddressOrPortButNotWhatGoesToAnotherSwitch) {
  Classifier c = Make();
  const uint32_t elsewhere = 0x0a000a63;  // 10.0.10.99
  Burst b = Sort(c, 0, {Contribution(1),                                    // to our address
                        Contribution(2, elsewhere),                         // to the port, a peer's address
                        Contribution(3, elsewhere, aggregator::Opcode::kResult),  // a switch's result to another switch
                        Contribution(4, kAggIp, aggregator::Opcode::kResult),     // a result to us
                        Contribution(5, elsewhere, aggregator::Opcode::kVerify),  // a root's VERIFY to its parameter node
                        Contribution(6, elsewhere, aggregator::Opcode::kExceptionRetransmit),
                        Contribution(7, elsewhere, aggregator::Opcode::kQuery),  // a worker's, to a peer
                        Contribution(8, elsewhere, aggregator::Opcode::kContribution,
                                     aggregator::flags::kAggregateAtPs),  // a root's, for its parameter node
                        // A root's QUERY to its TAN, after a chunk whose result a member lost.
                        Contribution(aggregator::kRootNodeId, elsewhere, aggregator::Opcode::kQuery)});
  EXPECT_EQ(b.agg.n, 4);
  EXPECT_EQ(b.l2.n, 5) << "what a switch or a parameter node sends another host crosses at L2";
  Free(b);
}

// A main server addresses the switch it means: its FETCH of a leaf's kept
// contribution, and its ACK of the root's final result, flagged FINAL, cross
// every other switch on the way. A worker's FETCH and ACK (no FINAL) to a
// peer are still taken by the port trigger, and what is addressed here is
// taken either way.
TEST_F(ClassifyTest, AMainServersFetchAndAckForAnotherSwitchCrossIt) {
  Classifier c = Make();
  const uint32_t leaf = 0x0a000a63;  // 10.0.10.99: another switch's address
  using aggregator::Opcode;
  using aggregator::flags::kFinal;
  using aggregator::flags::kRelease;
  Burst b = Sort(c, 0, {Contribution(1, leaf, Opcode::kFetch, kFinal),             // the main server's, to the leaf
                        Contribution(2, leaf, Opcode::kFetch, kFinal | kRelease),  // and with RELEASE
                        Contribution(3, leaf, Opcode::kAck, kFinal),               // its ACK, to the root
                        Contribution(4, leaf, Opcode::kFetch),                     // a worker's, to a peer
                        Contribution(5, leaf, Opcode::kAck),                       // a worker's, to a peer
                        Contribution(6, kAggIp, Opcode::kFetch, kFinal),           // the main server's, to us
                        Contribution(7, kAggIp, Opcode::kAck, kFinal)});           // its ACK, to us
  ASSERT_EQ(b.l2.n, 3);
  ASSERT_EQ(b.agg.n, 4);
  for (uint16_t i = 0; i < b.l2.n; ++i) {
    const auto* h = reinterpret_cast<const aggregator::AggHeader*>(rte_pktmbuf_mtod(b.l2.m[i], const uint8_t*) + 42);
    EXPECT_EQ(h->node_id.host(), i + 1) << "only the main server's datagrams for another switch cross";
  }
  Free(b);
}

TEST_F(ClassifyTest, NoAggregationAddressTakesThePortAloneAndOurSourceIsSpoofed) {
  Classifier c = Make(/*address=*/0);
  Burst b = Sort(c, 0, {Contribution(1, 0x0a000a63, aggregator::Opcode::kResult)});
  EXPECT_EQ(b.agg.n, 1) << "without an address, the UDP port decides";
  Free(b);
  Classifier with_address = Make();
  Frame spoofed = Contribution(1);
  testframes::PutBe32(spoofed.data() + 26, kAggIp);  // source: the aggregation address
  b = Sort(with_address, 0, {spoofed});
  EXPECT_EQ(b.agg.n + b.l2.n, 0);
  EXPECT_EQ(Drops(0, DropReason::kSrcSpoofed), 1u);
}

TEST_F(ClassifyTest, AggregationOffSendsEverythingToL2) {
  Classifier c(plan(), {}, stats(), tx());
  Burst b = Sort(c, 0, {Contribution(1)});
  EXPECT_EQ(b.l2.n, 1);
  EXPECT_EQ(b.agg.n, 0);
  Free(b);
}

}  // namespace
}  // namespace aggswitch::dataplane
