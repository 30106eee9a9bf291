// Answers alone: a result reaches every member at its bound address, tagged
// as its port wants, without the job key, written into the completing
// contribution when it fits and shared by every copy; NACKs beyond the
// lcore's rate are dropped and counted; SendTo puts headers in front of a
// UDP payload.
#include "dataplane/answers.h"

#include <gtest/gtest.h>
#include <rte_cycles.h>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::Frames;
using fixtures::kAggIp;
using fixtures::StageTest;
using testframes::Frame;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("answers_test"));

constexpr uint32_t kJob = 7;
constexpr uint64_t kKey = fixtures::kStageKey;

class AnswersTest : public StageTest {
 protected:
  void SetUp() override {
    StageTest::SetUp();
    auto jobs = aggregator::JobTable::Create(8, 16);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    aggregator::JobSpec spec;
    spec.id = kJob;
    spec.key = kKey;
    spec.members = 3;
    ASSERT_TRUE(jobs_->Add(spec).ok());
    job_ = jobs_->Find(kJob);
    // Members 0 and 1 on access ports of VLAN 10, member 2 on the trunk in VLAN 20.
    const uint8_t ports[3] = {0, 1, 3};
    const uint16_t vlans[3] = {10, 10, 20};
    for (uint16_t m = 0; m < 3; ++m) {
      const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), ports[m], vlans[m],
                                        Frames::MemberIp(m), Frames::MemberPort(m)};
      ASSERT_EQ(job_->BindMember(m, addr, 0, 1, 0), aggregator::Job::Bind::kBound);
    }
    aggregator::SlotTableConfig sc;
    sc.slots = 4;
    sc.max_fan_in = 16;
    slots_ = std::make_unique<aggregator::SlotTable>(sc);
    clock_.tsc = rte_rdtsc();
    answers_ = std::make_unique<Answers>(plan(), Pool(), stats(), tx(),
                                         Answers::Source{kAggIp, aggregator::kAggUdpPort}, clock_);
  }
  void TearDown() override {
    answers_.reset();
    slots_.reset();
    jobs_.reset();
    StageTest::TearDown();
  }

  // Completes chunk 9 with members' values 1, 2, 3 (one int32 each).
  const aggregator::Slot& Complete() {
    const aggregator::Slot& slot = fixtures::ContributeInSlot0(*slots_, *job_, 9, 3, clock_.tsc);
    EXPECT_EQ(slot.state(), aggregator::Slot::State::kComplete);
    return slot;
  }

  std::unique_ptr<aggregator::JobTable> jobs_;
  const aggregator::Job* job_ = nullptr;
  std::unique_ptr<aggregator::SlotTable> slots_;
  LcoreClock clock_;
  std::unique_ptr<Answers> answers_;
};

TEST_F(AnswersTest, AResultReachesEveryMemberAtItsAddressWithoutTheKey) {
  const aggregator::Slot& slot = Complete();
  const unsigned in_use = InUse();
  EXPECT_FALSE(answers_->SendResult(*job_, slot, -1, nullptr, 0)) << "no carrier to consume";
  tx().Flush();
  auto sent = Sent();
  EXPECT_EQ(InUse(), in_use) << "the copies shared one payload, now freed";
  const int ports[3] = {0, 1, 3};
  for (uint16_t m = 0; m < 3; ++m) {
    ASSERT_EQ(sent[ports[m]].size(), 1u) << "member " << m;
    const Frames::Result r = Frames::ParseResult(sent[ports[m]][0]);
    EXPECT_EQ(r.dst_mac, Frames::MemberMac(m));
    EXPECT_EQ(r.dst_ip, Frames::MemberIp(m));
    EXPECT_EQ(r.dst_port, Frames::MemberPort(m));
    EXPECT_EQ(r.tagged, m == 2);
    if (m == 2) {
      EXPECT_EQ(r.vid, 20);
    }
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
    EXPECT_EQ(r.fields.job_key, 0u);
    EXPECT_EQ(r.fields.seq, 9u);
    EXPECT_EQ(r.payload, Frames::Int32Payload({6}));
  }
  EXPECT_EQ(stats().lcore.agg.results_sent.Get(), 3u);
}

TEST_F(AnswersTest, TheCompletingContributionCarriesTheResult) {
  const aggregator::Slot& slot = Complete();
  aggregator::AggFields f;
  f.job_id = kJob;
  f.job_key = kKey;
  f.seq = 9;
  f.node_id = 1;
  f.elem_count = 1;
  const Frame contribution = Frames::Datagram(f, Frames::Int32Payload({2}));
  rte_mbuf* carrier = Mbuf(contribution);
  EXPECT_TRUE(answers_->SendResult(*job_, slot, 1, carrier, 42)) << "the carrier was used";
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 1u);
  EXPECT_EQ(Frames::ParseResult(sent[1][0]).payload, Frames::Int32Payload({6}));
  EXPECT_TRUE(sent[0].empty() && sent[3].empty()) << "to member 1 only";
}

TEST_F(AnswersTest, NacksBeyondTheRateAreDroppedAndCounted) {
  aggregator::AggFields f;
  f.job_id = 99;
  f.node_id = 0;
  const Frame request = Frames::Datagram(f);
  const aggregator::MemberAddr to{Frames::MemberMac(0).ToU64(), 0, 10, Frames::MemberIp(0),
                                  Frames::MemberPort(0)};
  const unsigned in_use = InUse();
  for (int i = 0; i < 70; ++i) {
    rte_mbuf* m = Mbuf(request);
    const auto* h = rte_pktmbuf_mtod_offset(m, const aggregator::AggHeader*, 42);
    answers_->Nack(m, *h, aggregator::NackReason::kUnknownJob, to);
  }
  tx().Flush();
  auto sent = Sent();
  EXPECT_EQ(sent[0].size(), 64u) << "a burst of 64 at one instant";
  EXPECT_EQ(stats().lcore.agg.nacks_sent.Get(), 64u);
  EXPECT_EQ(stats().lcore.agg.nacks_suppressed.Get(), 6u);
  EXPECT_EQ(Drops(0, DropReason::kNackLimited), 6u);
  EXPECT_EQ(InUse(), in_use);
  const Frames::Result r = Frames::ParseResult(sent[0][0]);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNack);
  EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kUnknownJob));
  EXPECT_EQ(r.fields.job_key, 0u);
}

TEST_F(AnswersTest, SendToPutsHeadersInFrontOfAUdpPayload) {
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kPartial;
  f.job_id = kJob;
  f.job_key = kKey;
  f.seq = 3;
  f.elem_count = 1;
  uint8_t datagram[64];
  const uint32_t len = aggregator::BuildAggregation(f, nullptr, 0, Frames::Int32Payload({5}).data(),
                                                    4, datagram, sizeof(datagram));
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), datagram, len);
  const aggregator::MemberAddr hop{0x0200000000ffULL, 3, 20, 0x0a001401, 47000};
  answers_->SendTo(m, hop, 3);
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[3].size(), 1u);
  L2Info l2;
  ASSERT_EQ(ParseL2(sent[3][0].data(), static_cast<uint32_t>(sent[3][0].size()), &l2), ParseStatus::kOk);
  EXPECT_EQ(l2.vid, 20);
  UdpInfo u;
  ASSERT_EQ(ParseIpv4Udp(sent[3][0].data(), static_cast<uint32_t>(sent[3][0].size()), l2.l3_offset, &u),
            UdpParse::kOk);
  EXPECT_EQ(u.dst_ip, 0x0a001401u);
  EXPECT_EQ(u.dst_port, 47000);
  EXPECT_EQ(u.src_ip, kAggIp);
  EXPECT_EQ(u.payload_len, len);
}

// a0 and a1 as an uplink group toward two spines: the parent switch was
// learned on a1, and the datagrams up to it take the member a path decision
// names for its address.
class AnswersGroupTest : public AnswersTest {
 protected:
  void SetUp() override {
    a_group_ = "up";
    AnswersTest::SetUp();
  }
  rte_mbuf* Partial() {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kPartial;
    f.job_id = kJob;
    f.seq = 3;
    uint8_t datagram[64];
    const uint32_t len = aggregator::BuildAggregation(f, nullptr, 0, nullptr, 0, datagram, sizeof(datagram));
    rte_mbuf* m = rte_pktmbuf_alloc(Pool());
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), datagram, len);
    return m;
  }
};

TEST_F(AnswersGroupTest, TheUpstreamTakesTheDecidedMemberOfTheGroupItWasLearnedOn) {
  const aggregator::MemberAddr parent{0x0200000000ffULL, 1, 10, 0x0a000a63, 47000};  // 10.0.10.99
  for (int i = 0; i < 4; ++i) answers_->SendTo(Partial(), parent, 3);
  tx().Flush();
  auto sent = Sent();
  EXPECT_EQ(sent[0].size() + sent[1].size(), 4u);
  EXPECT_TRUE(sent[0].empty() || sent[1].empty()) << "one flow: one member, by the hash";

  for (const uint16_t member : {uint16_t{0}, uint16_t{1}}) {
    auto table = PathDecisions::Build(std::vector<PathDecision>{{*common::Ipv4Prefix::Parse("10.0.10.99/32"), member}});
    ASSERT_TRUE(table.ok());
    plan_->groups().Publish(std::move(*table));
    answers_->SendTo(Partial(), parent, 3);
    tx().Flush();
    sent = Sent();
    ASSERT_EQ(sent[member].size(), 1u) << "decided: port " << member;
    EXPECT_EQ(stats().ports[member].uplink_decided_packets.Get(), 1u);
  }
}

}  // namespace
}  // namespace aggswitch::dataplane
