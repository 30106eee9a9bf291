// In-process dataplane tests of the L2 switch on net_ring ports
// (dataplane_test_fixture.h): learning, flooding, VLAN tagging, the switch's
// own ARP and ping answers, counters and aging.
#include "dataplane/dataplane.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dataplane/dataplane_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment("dataplane_test"));

TEST_F(DataplaneTest, UnknownUnicastFloodsWithinVlanWithPerPortTagging) {
  Inject(0, Untagged(kH0, kH1));
  Step();
  auto out = Drain();
  // a1 (same VLAN, untagged) and the trunk (tagged 10); not b (VLAN 20), not back to a0.
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0], Untagged(kH0, kH1));
  ASSERT_EQ(out[3].size(), 1u);
  EXPECT_EQ(out[3][0], Tagged(kH0, kH1, 10));
  EXPECT_EQ(dp_->GetPortTotals(0).flooded_packets, 1u);
}

TEST_F(DataplaneTest, LearnedDestinationIsUnicastOnly) {
  Inject(1, Untagged(kH1, kH0));  // learns h1 on a1
  Step();
  Drain();
  Inject(0, Untagged(kH0, kH1));
  Step();
  auto out = Drain();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0], Untagged(kH0, kH1));
  EXPECT_EQ(dp_->mac_events().learned.Get(), 2u);
  EXPECT_EQ(dp_->mac_table().size(), 2u);
}

TEST_F(DataplaneTest, TrunkToAccessUntagsAndAccessToTrunkTags) {
  Inject(3, Tagged(kH3, kH2, 20, /*pcp=*/5));  // h3 on the trunk, VLAN 20
  Step();
  auto out = Drain();
  ASSERT_EQ(out.size(), 1u) << "VLAN 20 only reaches b";
  ASSERT_EQ(out[2].size(), 1u);
  EXPECT_EQ(out[2][0], Untagged(kH3, kH2));

  Inject(2, Untagged(kH2, kH3));  // reply from b: h3 was learned on the trunk
  Step();
  out = Drain();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[3].size(), 1u);
  EXPECT_EQ(out[3][0], Tagged(kH2, kH3, 20));
}

TEST_F(DataplaneTest, BurstWithInterleavedFlowsSendsEachFrameToItsOwnPort) {
  Inject(1, Untagged(kH1, kBroadcast));        // h1 on a1
  Inject(3, Tagged(kH3, kBroadcast, 10));      // h3 on the trunk
  Step();
  Drain();
  // One burst from a0: runs of identical frames reuse one lookup, but every
  // change of destination must be looked up again.
  const Frame to_h1 = Untagged(kH0, kH1), to_h3 = Untagged(kH0, kH3);
  for (const Frame& f : {to_h1, to_h1, to_h3, to_h1, to_h3, to_h3}) Inject(0, f);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 3u);
  for (const Frame& f : out[1]) EXPECT_EQ(f, to_h1);
  ASSERT_EQ(out[3].size(), 3u);
  for (const Frame& f : out[3]) EXPECT_EQ(f, Tagged(kH0, kH3, 10));
  EXPECT_EQ(dp_->mac_events().learned.Get(), 3u);
  EXPECT_EQ(dp_->worker_stats(0).lcore.learn_requests.Get(), 3u) << "one request per new source";
}

TEST_F(DataplaneTest, NativeVlanTravelsUntaggedOnTheTrunk) {
  // VLAN 30 is native on the trunk and carried nowhere else.
  Inject(3, Untagged(kH3, kBroadcast));
  Step();
  auto out = Drain();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(DropCount(3, DropReason::kNoEgress), 1u);
  EXPECT_EQ(dp_->mac_table().size(), 1u) << "the source is still learned";
}

TEST_F(DataplaneTest, NoLeakAcrossVlans) {
  Inject(0, Untagged(kH0, kBroadcast));  // VLAN 10 broadcast (a0 is polled first)
  Inject(2, Untagged(kH2, kBroadcast));  // VLAN 20 broadcast
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[1][0], Untagged(kH0, kBroadcast)) << "a1 only sees VLAN 10";
  ASSERT_EQ(out[2].size(), 0u) << "b sees nothing of VLAN 10";
  ASSERT_EQ(out[3].size(), 2u);
  EXPECT_EQ(out[3][0], Tagged(kH0, kBroadcast, 10));
  EXPECT_EQ(out[3][1], Tagged(kH2, kBroadcast, 20));
  EXPECT_EQ(out[0].size(), 0u) << "no hairpin for a flood";
}

TEST_F(DataplaneTest, TaggedFrameToTrunkKeepsPriority) {
  Inject(0, Untagged(kH0, kH1));
  Step();
  Drain();
  Inject(3, Tagged(kH3, kH0, 10, /*pcp=*/6));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(out[0][0], Untagged(kH3, kH0));
  // And back: access -> trunk gets PCP 0 and VID 10.
  Inject(0, Untagged(kH0, kH3));
  Step();
  out = Drain();
  ASSERT_EQ(out[3].size(), 1u);
  EXPECT_EQ(out[3][0], Tagged(kH0, kH3, 10));
}

TEST_F(DataplaneTest, HairpinIsDropped) {
  Inject(0, Untagged(kH0, kH1));
  Step();
  Drain();
  Inject(0, Untagged(kH1, kH0));  // h0 is on a0: hairpin; h1 is learned on a0
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(DropCount(0, DropReason::kHairpin), 1u);
  Inject(0, Untagged(kH0, kH1));  // both on a0
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(DropCount(0, DropReason::kHairpin), 2u);
}

TEST_F(DataplaneTest, MacMoveFollowsTheHost) {
  Inject(0, Untagged(kH0, kBroadcast));
  Step();
  Drain();
  Inject(1, Untagged(kH0, kBroadcast));  // h0 moved to a1
  Step();
  Drain();
  EXPECT_EQ(dp_->mac_events().moved.Get(), 1u);
  Inject(3, Tagged(kH3, kH0, 10));
  Step();
  auto out = Drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[1].size(), 1u);
}

TEST_F(DataplaneTest, StaticEntriesForwardFromTheStartAndResistMoves) {
  Build(DefaultYaml("", ", static: [{mac: \"02:00:00:00:00:a1\", vlan: 10, port: a1}]"));
  Inject(0, Untagged(kH0, kH1));
  Step();
  auto out = Drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[1].size(), 1u);
  Inject(3, Tagged(kH1, kH0, 10));  // the static MAC shows up on the trunk
  Step();
  Drain();
  EXPECT_EQ(dp_->mac_events().static_conflicts.Get(), 1u);
  Inject(0, Untagged(kH0, kH1));
  Step();
  out = Drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[1].size(), 1u) << "static entry did not move";
}

TEST_F(DataplaneTest, MalformedFramesAreCountedAndDropped) {
  Frame runt = Untagged(kH0, kH1);
  runt.resize(13);
  Inject(0, runt);
  Frame broken_tag = Tagged(kH3, kH1, 10);
  broken_tag.resize(16);
  Inject(3, broken_tag);
  Inject(3, Tagged(kH3, kH1, 4095));
  Inject(0, Tagged(kH0, kH1, 10));  // tag on an access port
  Inject(3, Tagged(kH3, kH1, 99));  // VLAN not on the trunk
  Frame src_mcast = Untagged(Mac("01:00:5e:00:00:01"), kH1);
  Inject(0, src_mcast);
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(DropCount(0, DropReason::kRunt), 1u);
  EXPECT_EQ(DropCount(3, DropReason::kBadVlan), 2u);
  EXPECT_EQ(DropCount(0, DropReason::kVlanNotAllowed), 1u);
  EXPECT_EQ(DropCount(3, DropReason::kVlanNotAllowed), 1u);
  EXPECT_EQ(DropCount(0, DropReason::kSrcMulticast), 1u);
  EXPECT_EQ(dp_->GetPortTotals(0).rx_packets, 3u);
  EXPECT_EQ(dp_->GetPortTotals(3).rx_packets, 3u);
  EXPECT_EQ(dp_->mac_table().size(), 0u) << "nothing is learned from dropped frames";
}

TEST_F(DataplaneTest, AnswersArpAndPingForOwnAddressOnIngressPort) {
  Inject(0, testframes::ArpRequest(kH0, "10.0.10.1", "10.0.10.254"));
  Step();
  auto out = Drain();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), 1u);
  Frame reply = out[0][0];
  const auto* arp = reinterpret_cast<const ArpHdr*>(reply.data() + 14);
  EXPECT_EQ(arp->oper, kArpOpReply);
  EXPECT_EQ(0, std::memcmp(arp->sha, kSwitchMac.bytes.data(), 6));

  Inject(3, testframes::IcmpEcho(kH3, kSwitchMac, "10.0.20.3", "10.0.20.254", 9, 1, 32, /*vlan=*/20));
  Step();
  out = Drain();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[3].size(), 1u) << "reply leaves the trunk, tagged as the request came";
  L2Info l2;
  ASSERT_EQ(ParseL2(out[3][0].data(), out[3][0].size(), &l2), ParseStatus::kOk);
  EXPECT_TRUE(l2.has_tag);
  EXPECT_EQ(l2.vid, 20);
  const auto* icmp = reinterpret_cast<const IcmpHdr*>(out[3][0].data() + 18 + 20);
  EXPECT_EQ(icmp->type, kIcmpEchoReply);
  EXPECT_EQ(dp_->worker_stats(0).lcore.arp_replies.Get(), 1u);
  EXPECT_EQ(dp_->worker_stats(0).lcore.icmp_replies.Get(), 1u);
}

TEST_F(DataplaneTest, ArpForAddressBoundToOtherVlanIsFloodedNotAnswered) {
  Inject(0, testframes::ArpRequest(kH0, "10.0.20.1", "10.0.20.254"));  // VLAN 10 asks a VLAN 20 address
  Step();
  auto out = Drain();
  EXPECT_EQ(out[0].size(), 0u);
  EXPECT_EQ(out[1].size(), 1u);
  EXPECT_EQ(dp_->worker_stats(0).lcore.arp_replies.Get(), 0u);
}

TEST_F(DataplaneTest, UnhandledTrafficToSwitchIsCounted) {
  Inject(0, Untagged(kH0, kSwitchMac));  // IPv4 ethertype, garbage header
  Inject(0, testframes::EthernetFrame(kH0, kSwitchMac, 0x86dd, 46));  // IPv6 to us
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(DropCount(0, DropReason::kToSwitchMalformed), 1u);
  EXPECT_EQ(DropCount(0, DropReason::kToSwitchUnhandled), 1u);
}

TEST_F(DataplaneTest, CountsPacketsAndBytesPerPort) {
  Inject(0, Untagged(kH0, kH1));
  Inject(0, Untagged(kH0, kH1));
  Step();
  Drain();
  const PortTotals a0 = dp_->GetPortTotals(0);
  EXPECT_EQ(a0.rx_packets, 2u);
  EXPECT_EQ(a0.rx_bytes, 2u * 60);
  EXPECT_EQ(dp_->GetPortTotals(1).tx_packets, 2u);
  EXPECT_EQ(dp_->GetPortTotals(1).tx_bytes, 2u * 60);
  EXPECT_EQ(dp_->GetPortTotals(3).tx_packets, 2u);
  EXPECT_EQ(dp_->GetPortTotals(3).tx_bytes, 2u * 64) << "the trunk copy carries a tag";
  EXPECT_GT(dp_->worker_stats(0).lcore.busy_cycles.Get(), 0u);
  EXPECT_EQ(dp_->worker_stats(0).lcore.busy_packets.Get(), 2u);
}

TEST_F(DataplaneTest, FullTxQueueIsCountedOnEgressPort) {
  Build(DefaultYaml(), /*tx_ring_size=*/8);  // usable capacity 7
  for (int i = 0; i < 10; ++i) Inject(2, Untagged(kH2, kBroadcast));
  Step();
  auto out = Drain();
  EXPECT_EQ(out[3].size(), 7u);
  EXPECT_EQ(DropCount(3, DropReason::kTxFull), 3u);
  EXPECT_EQ(dp_->GetPortTotals(3).tx_packets, 7u);
}

TEST_F(DataplaneTest, LearnedEntriesAgeOut) {
  Build(DefaultYaml("", ", aging_seconds: 1"));
  Inject(0, Untagged(kH0, kBroadcast));
  Step();
  Drain();
  ASSERT_EQ(dp_->mac_table().size(), 1u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dp_->mac_table().size() != 0 && std::chrono::steady_clock::now() < deadline) {
    dp_->AgeMacTable();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(dp_->mac_table().size(), 0u);
  EXPECT_EQ(dp_->mac_events().aged.Get(), 1u);
  Inject(3, Tagged(kH3, kH0, 10));
  Step();
  auto out = Drain();
  EXPECT_EQ(out[0].size(), 1u) << "an aged destination floods again";
  EXPECT_EQ(out[1].size(), 1u);
}

TEST_F(DataplaneTest, ReloadReplacesStaticEntries) {
  config::MacTableConfig mt;
  mt.size = 1024;
  mt.aging_seconds = 300;
  mt.static_entries.push_back({kH2, 20, "b", {}});
  ASSERT_TRUE(dp_->ApplyMacTableConfig(mt).ok());
  EXPECT_EQ(dp_->mac_table().static_count(), 1u);
  mt.static_entries.clear();
  mt.static_entries.push_back({kH1, 10, "a1", {}});
  ASSERT_TRUE(dp_->ApplyMacTableConfig(mt).ok());
  EXPECT_EQ(dp_->mac_table().static_count(), 1u);
  EXPECT_EQ(dp_->mac_table().Lookup(MacKey(20, kH2)).port, kNoPort);
  EXPECT_EQ(dp_->mac_table().Lookup(MacKey(10, kH1)).port, 1);
}


// --- Fault injection (ports[].faults) ---------------------------------------

class FaultInjectionTest : public DataplaneTest {
 protected:
  // The default ports, with `faults` on port `port`. kH1 is learned on a1
  // first, so frames from kH0 on a0 go to a1 alone.
  void BuildWithFaults(const std::string& port, const std::string& faults) {
    std::string yaml = DefaultYaml();
    const size_t at = yaml.find("{name: " + port + ",");
    ASSERT_NE(at, std::string::npos);
    yaml.insert(yaml.find('}', at), ", faults: " + faults);
    Build(yaml);
  }

  void LearnH1OnA1() {
    Inject(1, Untagged(kH1, kBroadcast));
    Step();
    Step();  // releases anything a TX injector held back
    Drain();
  }

  // Sends `count` frames kH0 -> kH1 on a0, numbered 0.. in their last two
  // payload bytes, `per_step` per worker pass, then passes until nothing is
  // held. Returns the numbers of the frames that left a1, in order.
  std::vector<uint16_t> Send(uint16_t count, uint16_t per_step) {
    std::vector<uint16_t> arrived;
    const auto step = [&] {
      Step();
      auto out = Drain();
      for (const auto& [port, frames] : out) EXPECT_EQ(port, 1) << "a frame left another port";
      for (const Frame& f : out[1]) {
        arrived.push_back(static_cast<uint16_t>(f[f.size() - 2] << 8 | f[f.size() - 1]));
      }
    };
    for (uint16_t seq = 0; seq < count; ++seq) {
      Frame f = Untagged(kH0, kH1);
      f[f.size() - 2] = static_cast<uint8_t>(seq >> 8);
      f[f.size() - 1] = static_cast<uint8_t>(seq);
      Inject(0, f);
      if ((seq + 1) % per_step == 0) step();
    }
    for (int i = 0; i < 4; ++i) step();
    return arrived;
  }

  uint64_t Faults(int port, Fault f) { return dp_->GetPortTotals(port).faults[static_cast<size_t>(f)]; }
};

TEST_F(FaultInjectionTest, LossOneDropsEveryReceivedFrame) {
  BuildWithFaults("a0", "{loss: 1, direction: rx}");
  LearnH1OnA1();
  EXPECT_TRUE(Send(40, 10).empty());
  EXPECT_EQ(Faults(0, Fault::kDrop), 40u);
  EXPECT_EQ(dp_->GetPortTotals(0).rx_packets, 0u) << "an injected RX loss is never received";
  EXPECT_EQ(Faults(1, Fault::kDrop), 0u);
}

TEST_F(FaultInjectionTest, DuplicateOneDeliversEveryFrameTwiceInARow) {
  BuildWithFaults("a0", "{duplicate: 1, direction: rx}");
  LearnH1OnA1();
  std::vector<uint16_t> expected;
  for (uint16_t s = 0; s < 30; ++s) expected.insert(expected.end(), {s, s});
  EXPECT_EQ(Send(30, 16), expected);
  EXPECT_EQ(Faults(0, Fault::kDuplicate), 30u);
  EXPECT_EQ(dp_->GetPortTotals(1).tx_packets, 60u);
}

TEST_F(FaultInjectionTest, ReorderedFramesAreOvertakenButAllArriveOnce) {
  BuildWithFaults("a1", "{reorder: 0.5, direction: tx, seed: 3}");
  LearnH1OnA1();
  std::vector<uint16_t> seqs = Send(400, 8);
  EXPECT_FALSE(std::is_sorted(seqs.begin(), seqs.end())) << "nothing was overtaken";
  std::sort(seqs.begin(), seqs.end());
  std::vector<uint16_t> all(400);
  std::iota(all.begin(), all.end(), uint16_t{0});
  EXPECT_EQ(seqs, all) << "every frame exactly once";
  const uint64_t reordered = Faults(1, Fault::kReorder);
  EXPECT_GT(reordered, 140u);
  EXPECT_LT(reordered, 260u);
  EXPECT_EQ(Faults(1, Fault::kDrop), 0u);
  EXPECT_EQ(Faults(0, Fault::kReorder), 0u) << "a0 has no faults";
}

TEST_F(FaultInjectionTest, LossRateFollowsTheProbabilityAndEveryFrameIsAccountedFor) {
  BuildWithFaults("a1", "{loss: 0.25, duplicate: 0.1, direction: tx, seed: 11}");
  LearnH1OnA1();
  const std::vector<uint16_t> seqs = Send(2000, 16);
  const uint64_t dropped = Faults(1, Fault::kDrop);
  const uint64_t duplicated = Faults(1, Fault::kDuplicate);
  EXPECT_EQ(seqs.size() + dropped, 2000u + duplicated);
  EXPECT_GT(dropped, 420u);
  EXPECT_LT(dropped, 580u);
  EXPECT_GT(duplicated, 100u);
  EXPECT_LT(duplicated, 200u);
  EXPECT_EQ(dp_->GetPortTotals(1).tx_packets, seqs.size());
}

// A fixed delay: nothing leaves before it, then every frame in order, once.
TEST_F(FaultInjectionTest, DelayedFramesLeaveInOrderNoSoonerThanTheDelay) {
  for (const char* direction : {"tx", "rx"}) {
    SCOPED_TRACE(direction);
    BuildWithFaults(direction == std::string("tx") ? "a1" : "a0",
                    std::string("{delay_us: 30000, direction: ") + direction + "}");
    LearnH1OnA1();
    const int faulty = direction == std::string("tx") ? 1 : 0;
    for (uint16_t seq = 0; seq < 20; ++seq) {
      Frame f = Untagged(kH0, kH1);
      f[f.size() - 1] = static_cast<uint8_t>(seq);
      Inject(0, f);
    }
    const auto start = std::chrono::steady_clock::now();
    Step();
    EXPECT_TRUE(Drain()[1].empty()) << "delayed frames left at once";
    std::vector<uint8_t> arrived;
    while (arrived.size() < 20 && std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
      Step();
      auto out = Drain();
      for (const Frame& f : out[1]) {
        // The delay runs on the TSC, whose calibrated rate may be off from
        // the steady clock's by a fraction of a percent.
        EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(29));
        arrived.push_back(f[f.size() - 1]);
      }
    }
    std::vector<uint8_t> all(20);
    std::iota(all.begin(), all.end(), uint8_t{0});
    EXPECT_EQ(arrived, all);
    EXPECT_EQ(Faults(faulty, Fault::kDelay), 20u);
    EXPECT_EQ(Faults(faulty, Fault::kDrop), 0u);
  }
}

TEST_F(FaultInjectionTest, TheSameSeedGivesTheSameFaults) {
  std::vector<uint16_t> runs[2];
  for (auto& seqs : runs) {
    BuildWithFaults("a1", "{loss: 0.2, reorder: 0.2, duplicate: 0.2, direction: tx, seed: 5}");
    LearnH1OnA1();
    seqs = Send(300, 8);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
}  // namespace aggswitch::dataplane

namespace aggswitch::dataplane {
namespace {

// A net_af_xdp port receives each frame into one mbuf that is one 4 KiB UMEM
// chunk, after the mbuf's headroom and the kernel's XDP headroom: the MTU the
// switch allows such a port must fit, and be worth having.
TEST(AfXdpMtuTest, TheLargestAfXdpFrameFitsOneUmemChunk) {
  const uint16_t mtu = Dataplane::MaxAfXdpMtu();
  EXPECT_GE(mtu, 3400) << "about 3.5 KB frames are the point of AF_XDP here";
  const uint32_t room = RTE_PKTMBUF_HEADROOM + 256 + mtu + 14;
  EXPECT_LE(rte_mempool_calc_obj_size(sizeof(rte_mbuf) + room, 0, nullptr), 4096u);
}

}  // namespace
}  // namespace aggswitch::dataplane
