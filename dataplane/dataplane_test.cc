// In-process dataplane tests on net_ring ports: frames are injected into a
// port's RX ring, one worker pass runs on the test thread, and the test reads
// exactly which frames left which port's TX ring, with which tags.
#include "dataplane/dataplane.h"

#include <gtest/gtest.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <chrono>
#include <cstring>
#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/reduce.h"
#include "aggregator/wire.h"
#include "config/loader.h"
#include "dataplane/eal.h"
#include "dataplane/test_frames.h"

namespace aggswitch::dataplane {
namespace {

using testframes::Frame;

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string prefix = "agg_dp_test_" + std::to_string(getpid());
    auto eal = EalSession::Init("dataplane_test", {"--no-huge", "-m", "256", "--no-pci", "--no-shconf",
                                                   "--no-telemetry", "--lcores", "0",
                                                   "--file-prefix", prefix, "--log-level", "lib.*:error"});
    ASSERT_TRUE(eal.ok()) << eal.status().ToString();
    eal_ = std::move(eal).value();
  }
  void TearDown() override { eal_.reset(); }

 private:
  std::unique_ptr<EalSession> eal_;
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

common::MacAddr Mac(const char* text) { return *common::MacAddr::Parse(text); }

const common::MacAddr kSwitchMac = Mac("02:a9:9c:00:00:01");
const common::MacAddr kH0 = Mac("02:00:00:00:00:a0");
const common::MacAddr kH1 = Mac("02:00:00:00:00:a1");
const common::MacAddr kH2 = Mac("02:00:00:00:00:a2");
const common::MacAddr kH3 = Mac("02:00:00:00:00:a3");
const common::MacAddr kBroadcast = Mac("ff:ff:ff:ff:ff:ff");

// Four ring ports:
//   a0, a1: access VLAN 10     b: access VLAN 20     t: trunk [10, 20], native 30
class DataplaneTest : public ::testing::Test {
 protected:
  static constexpr int kPorts = 4;

  void SetUp() override { Build(DefaultYaml()); }

  std::string DefaultYaml(const std::string& extra = "", const std::string& mac_table = "") {
    static int instance = 0;
    ++instance;
    names_.clear();
    // rte_eth_from_rings("x") creates the ethdev "net_ring_x".
    for (int p = 0; p < kPorts; ++p) names_.push_back("t" + std::to_string(instance) + "_" + std::to_string(p));
    return "eal: {lcores: \"0,1\"}\n"
           "switch:\n"
           "  mac: 02:a9:9c:00:00:01\n"
           "  addresses: [10.0.10.254/24, {address: 10.0.20.254/24, vlan: 20}]\n"
           "ports:\n"
           "  - {name: a0, devargs: net_ring_" + names_[0] + ", access: 10}\n"
           "  - {name: a1, devargs: net_ring_" + names_[1] + ", access: 10}\n"
           "  - {name: b, devargs: net_ring_" + names_[2] + ", access: 20}\n"
           "  - {name: t, devargs: net_ring_" + names_[3] + ", trunk: [10, 20], native: 30}\n"
           "workers: [{lcore: 1, rx: [a0, a1, b, t]}]\n"
           "mempool: {mbufs: 2047, cache: 0}\n"
           "mac_table: {size: 1024" + mac_table + "}\n" + extra;
  }

  void Build(const std::string& yaml, unsigned tx_ring_size = 256,
             aggregator::JobTable* jobs = nullptr) {
    dp_.reset();
    FreeRings();
    config::ConfigLoad load = config::LoadConfigText(yaml, "test.yaml");
    ASSERT_TRUE(load.ok()) << load.FormatErrors();
    for (int p = 0; p < kPorts; ++p) {
      rte_ring* rx = rte_ring_create((names_[p] + "_rx").c_str(), 256, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
      rte_ring* tx = rte_ring_create((names_[p] + "_tx").c_str(), tx_ring_size, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      ASSERT_NE(rx, nullptr);
      ASSERT_NE(tx, nullptr);
      rx_.push_back(rx);
      tx_.push_back(tx);
      ASSERT_GE(rte_eth_from_rings(names_[p].c_str(), &rx, 1, &tx, 1, SOCKET_ID_ANY), 0);
    }
    if (pool_ == nullptr) {
      // One pool for the injected frames, shared by every test of the process.
      static rte_mempool* shared = rte_pktmbuf_pool_create("dp_test_pool", 1023, 0, 0,
                                                           RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
      pool_ = shared;
      ASSERT_NE(pool_, nullptr);
    }
    config_ = load.config;
    auto dp = Dataplane::Create(load.config, jobs);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dp_ = std::move(dp).value();
  }

  void TearDown() override {
    dp_.reset();
    FreeRings();
  }

  void FreeRings() {
    // Ports the dataplane did not take over (a failed Create) are closed here.
    for (const std::string& name : names_) {
      uint16_t port_id;
      if (rte_eth_dev_get_port_by_name(("net_ring_" + name).c_str(), &port_id) == 0) {
        rte_eth_dev_close(port_id);
      }
    }
    for (rte_ring* r : rx_) DrainRing(r), rte_ring_free(r);
    for (rte_ring* r : tx_) DrainRing(r), rte_ring_free(r);
    rx_.clear();
    tx_.clear();
  }

  static void DrainRing(rte_ring* r) {
    void* obj;
    while (rte_ring_dequeue(r, &obj) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(obj));
  }

  void Inject(int port, const Frame& frame) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    ASSERT_NE(m, nullptr);
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    ASSERT_NE(data, nullptr);
    std::memcpy(data, frame.data(), frame.size());
    ASSERT_EQ(rte_ring_enqueue(rx_[port], m), 0);
  }

  // Runs one worker pass and lets the control thread learn.
  void Step() {
    dp_->PollWorkerOnce(0);
    dp_->ProcessLearnRequests();
  }

  // Everything that left each port since the last call.
  std::map<int, std::vector<Frame>> Drain() {
    std::map<int, std::vector<Frame>> out;
    for (int p = 0; p < static_cast<int>(tx_.size()); ++p) {
      void* obj;
      while (rte_ring_dequeue(tx_[p], &obj) == 0) {
        auto* m = static_cast<rte_mbuf*>(obj);
        Frame f(m->pkt_len);
        // Results are chained mbufs: a header segment and the shared payload.
        const auto* d = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, f.data()));
        if (d != f.data()) std::memcpy(f.data(), d, m->pkt_len);
        out[p].push_back(std::move(f));
        rte_pktmbuf_free(m);
      }
    }
    return out;
  }

  uint64_t DropCount(int port, DropReason reason) {
    return dp_->GetPortTotals(port).drops[static_cast<size_t>(reason)];
  }

  static Frame Untagged(const common::MacAddr& src, const common::MacAddr& dst) {
    return testframes::EthernetFrame(src, dst, 0x0800, 46);
  }
  static Frame Tagged(const common::MacAddr& src, const common::MacAddr& dst, int vlan, int pcp = 0) {
    return testframes::EthernetFrame(src, dst, 0x0800, 46, vlan, pcp);
  }

  config::Config config_;
  std::vector<std::string> names_;
  std::vector<rte_ring*> rx_, tx_;
  rte_mempool* pool_ = nullptr;
  std::unique_ptr<Dataplane> dp_;
};

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

// --- The aggregation path ---------------------------------------------------

using aggregator::DType;
using aggregator::ReduceOp;

constexpr uint32_t kAggIp = 0x0a000afd;  // 10.0.10.253, the aggregation address

class AggregationTest : public DataplaneTest {
 protected:
  void SetUp() override {
    auto jobs = aggregator::JobTable::Create(64, 256);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    Build(DefaultYaml("aggregation: {address: 10.0.10.253, slots: 1024}\n"), 1024, jobs_.get());
  }
  void TearDown() override {
    DataplaneTest::TearDown();
    jobs_.reset();
  }

  void AddJob(uint32_t id, uint16_t members, bool ordered = false, uint64_t key = 0x5eed) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = key;
    spec.members = members;
    spec.ordered = ordered;
    ASSERT_TRUE(jobs_->Add(spec).ok());
  }

  static common::MacAddr MemberMac(uint16_t node) {
    return common::MacAddr::FromU64(0x020000100000ULL + node);
  }
  static uint32_t MemberIp(uint16_t node) { return 0x0a000a00u + 10 + node; }
  static uint16_t MemberPort(uint16_t node) { return static_cast<uint16_t>(40000 + node); }

  // A contribution from `node`, as its kernel would send it to the aggregation address.
  static Frame Contribution(uint32_t job, uint32_t seq, uint16_t node, const std::vector<uint8_t>& payload,
                            DType dtype = DType::kInt32, ReduceOp op = ReduceOp::kSum,
                            uint64_t key = 0x5eed, int vlan = -1, uint32_t ack = 0) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = key;
    f.ack_watermark = ack;
    f.dtype = dtype;
    f.op = op;
    f.elem_count = static_cast<uint16_t>(payload.size() / aggregator::ElementSize(dtype));
    std::vector<uint8_t> agg(2048);
    const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, payload.data(),
                                                   static_cast<uint32_t>(payload.size()),
                                                   agg.data(), static_cast<uint32_t>(agg.size()));
    Frame frame(46 + n);
    const common::MacAddr mac = MemberMac(node);
    const uint32_t hdr = WriteUdpHeaders(frame.data(), kSwitchMac.bytes.data(), mac.bytes.data(),
                                         vlan < 0 ? 0 : static_cast<uint16_t>(vlan), MemberIp(node),
                                         kAggIp, MemberPort(node), aggregator::kAggUdpPort, 1, n);
    frame.resize(hdr + n);
    std::memcpy(frame.data() + hdr, agg.data(), n);
    return frame;
  }

  static std::vector<uint8_t> Int32Payload(const std::vector<int32_t>& v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }

  struct Result {
    common::MacAddr dst_mac;
    uint32_t dst_ip;
    uint16_t dst_port;
    bool tagged;
    uint16_t vid;
    aggregator::AggFields fields;
    std::vector<uint8_t> payload;
  };

  // Parses a frame the switch sent as a result datagram.
  static Result ParseResult(const Frame& f) {
    Result r{};
    L2Info l2;
    EXPECT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
    std::memcpy(r.dst_mac.bytes.data(), f.data(), 6);
    r.tagged = l2.has_tag;
    r.vid = l2.vid;
    UdpInfo u;
    EXPECT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &u), UdpParse::kOk);
    r.dst_ip = u.dst_ip;
    r.dst_port = u.dst_port;
    EXPECT_EQ(u.src_ip, kAggIp);
    EXPECT_EQ(u.src_port, aggregator::kAggUdpPort);
    aggregator::AggPacket pkt;
    EXPECT_EQ(aggregator::ParseAggregation(f.data() + u.payload_offset, u.payload_len, &pkt),
              aggregator::WireError::kOk);
    if (pkt.header == nullptr) return r;
    r.fields = aggregator::ReadAggFields(*pkt.header);
    r.payload.assign(pkt.payload, pkt.payload + pkt.payload_len);
    return r;
  }

  const AggregationCounters& Agg() { return dp_->worker_stats(0).lcore.agg; }

  std::unique_ptr<aggregator::JobTable> jobs_;
};

class AggregationFanInTest : public AggregationTest, public ::testing::WithParamInterface<int> {};

// N members on one access port each send one int32 chunk, in a shuffled
// order; each gets exactly one result, addressed to it, equal to the sum.
TEST_P(AggregationFanInTest, EveryMemberGetsTheExactSumOnce) {
  const uint16_t n = static_cast<uint16_t>(GetParam());
  AddJob(7, n);
  std::mt19937 rng(n);
  std::vector<int32_t> sum(64, 0);
  std::vector<Frame> frames;
  for (uint16_t m = 0; m < n; ++m) {
    std::vector<int32_t> v(64);
    for (size_t e = 0; e < v.size(); ++e) {
      v[e] = static_cast<int32_t>(rng() % 20001) - 10000;
      sum[e] += v[e];
    }
    frames.push_back(Contribution(7, 3, m, Int32Payload(v)));
  }
  std::shuffle(frames.begin(), frames.end(), rng);
  for (size_t i = 0; i < frames.size(); ++i) {
    Inject(0, frames[i]);
    if (i % 32 == 31) Step();
  }
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), n) << "one result per member, all on a0";
  EXPECT_EQ(out.size(), 1u) << "nothing leaks to other ports";
  std::set<uint16_t> ports_seen;
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
    EXPECT_EQ(r.fields.job_id, 7u);
    EXPECT_EQ(r.fields.seq, 3u);
    EXPECT_FALSE(r.tagged);
    const uint16_t node = static_cast<uint16_t>(r.dst_port - 40000);
    EXPECT_EQ(r.dst_mac, MemberMac(node));
    EXPECT_EQ(r.dst_ip, MemberIp(node));
    ports_seen.insert(r.dst_port);
    ASSERT_EQ(r.payload, Int32Payload(sum));
  }
  EXPECT_EQ(ports_seen.size(), n);
  EXPECT_EQ(Agg().contributions.Get(), n);
  EXPECT_EQ(Agg().completions.Get(), 1u);
  EXPECT_EQ(Agg().results_sent.Get(), n);
}

INSTANTIATE_TEST_SUITE_P(Members, AggregationFanInTest, ::testing::Values(1, 2, 3, 8, 64, 256));

TEST_F(AggregationTest, DuplicatesCountOnceAndLateOnesGetTheCachedResult) {
  AddJob(7, 2);
  const Frame a = Contribution(7, 1, 0, Int32Payload({1, 2}));
  Inject(0, a);
  Inject(0, a);  // retransmission before completion
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(Agg().duplicates.Get(), 1u);
  Inject(0, Contribution(7, 1, 1, Int32Payload({10, 20})));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 2u);
  EXPECT_EQ(ParseResult(out[0][0]).payload, Int32Payload({11, 22}));
  Inject(0, a);  // node 0 lost its result and asks again
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  const Result r = ParseResult(out[0][0]);
  EXPECT_EQ(r.dst_ip, MemberIp(0));
  EXPECT_EQ(r.payload, Int32Payload({11, 22}));
  EXPECT_EQ(Agg().duplicate_results.Get(), 1u);
  EXPECT_EQ(Agg().contributions.Get(), 2u);
}

TEST_F(AggregationTest, WrongKeyAndUnknownJobAreDroppedAndCounted) {
  AddJob(7, 1);
  Inject(0, Contribution(7, 1, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, /*key=*/0xbad));
  Inject(0, Contribution(8, 1, 0, Int32Payload({1})));
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(Agg().key_failures.Get(), 1u);
  EXPECT_EQ(Agg().unknown_jobs.Get(), 1u);
  EXPECT_EQ(Agg().contributions.Get(), 0u);
}

TEST_F(AggregationTest, TwoConcurrentJobsDoNotMix) {
  AddJob(7, 2);
  AddJob(8, 2);
  Inject(0, Contribution(7, 5, 0, Int32Payload({1})));
  Inject(0, Contribution(8, 5, 0, Int32Payload({100})));
  Inject(0, Contribution(8, 5, 1, Int32Payload({200})));
  Inject(0, Contribution(7, 5, 1, Int32Payload({2})));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 4u);
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.payload, Int32Payload({r.fields.job_id == 7 ? 3 : 300})) << r.fields.job_id;
  }
}

TEST_F(AggregationTest, TrunkMembersGetTaggedResults) {
  AddJob(7, 2);
  Inject(0, Contribution(7, 1, 0, Int32Payload({1})));
  Inject(3, Contribution(7, 1, 1, Int32Payload({2}), DType::kInt32, ReduceOp::kSum, 0x5eed, 10));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  ASSERT_EQ(out[3].size(), 1u);
  EXPECT_FALSE(ParseResult(out[0][0]).tagged);
  const Result r = ParseResult(out[3][0]);
  EXPECT_TRUE(r.tagged);
  EXPECT_EQ(r.vid, 10);
  EXPECT_EQ(r.payload, Int32Payload({3}));
}

// Ordered mode: float32 results are bit-identical to the member-order
// reduction whatever the arrival order.
TEST_F(AggregationTest, OrderedFloatResultsDoNotDependOnArrivalOrder) {
  constexpr uint16_t kMembers = 8;
  AddJob(9, kMembers, /*ordered=*/true);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1e7f, 1e7f);
  std::vector<std::vector<uint8_t>> payloads;
  for (uint16_t m = 0; m < kMembers; ++m) {
    std::vector<float> v(32);
    for (float& x : v) x = dist(rng) * (m % 2 ? 1e-7f : 1.0f);
    std::vector<uint8_t> bytes(128);
    std::memcpy(bytes.data(), v.data(), 128);
    payloads.push_back(bytes);
  }
  std::vector<uint8_t> acc(128), want(128);
  aggregator::LoadFirst(DType::kFloat32, payloads[0].data(), 32, acc.data());
  for (uint16_t m = 1; m < kMembers; ++m) {
    (void)aggregator::Accumulate(DType::kFloat32, ReduceOp::kSum, acc.data(), payloads[m].data(), 32);
  }
  aggregator::StoreResult(DType::kFloat32, acc.data(), 32, want.data());
  std::vector<uint16_t> order(kMembers);
  std::iota(order.begin(), order.end(), 0);
  for (uint32_t seq = 0; seq < 6; ++seq) {
    if (seq == 1) std::reverse(order.begin(), order.end());
    if (seq > 1) std::shuffle(order.begin(), order.end(), rng);
    for (uint16_t m : order) {
      // Every chunk also acknowledges the one before, so its slot can be reused.
      Inject(0, Contribution(9, seq, m, payloads[m], DType::kFloat32, ReduceOp::kSum, 0x5eed, -1, seq));
    }
    Step();
    auto out = Drain();
    ASSERT_EQ(out[0].size(), kMembers) << "seq " << seq;
    EXPECT_EQ(ParseResult(out[0][0]).payload, want) << "seq " << seq;
  }
}

}  // namespace
}  // namespace aggswitch::dataplane
