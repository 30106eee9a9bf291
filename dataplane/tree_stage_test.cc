// The tree stage alone: a leaf sends a finished chunk upstream as a partial
// with the job key, its node id and the missing list (and a timeout leaves
// bypass entries that late data then matches); a root without a TAN tells
// its members a chunk is INCOMPLETE; late data with nowhere to go, or to an
// unresolved hop, is dropped with its reason; results from above reach every
// member without the key.
#include "dataplane/tree_stage.h"

#include <gtest/gtest.h>
#include <rte_cycles.h>
#include <rte_ring.h>

#include <array>
#include <cstring>
#include <vector>

#include "aggregator/relocation_map.h"
#include "aggregator/tan_engine.h"
#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::Frames;
using fixtures::kAggIp;
using fixtures::StageTest;
using testframes::Frame;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("tree_stage_test"));

constexpr uint64_t kKey = fixtures::kStageKey;
constexpr uint32_t kUpstreamIp = 0x0a000a01;  // 10.0.10.1

class TreeStageTest : public StageTest {
 protected:
  // The own TAN's RESULT of one int32, 60, for chunk `seq` of job `id`
  // under run `label`, into `down`, the ring the tree stage drains.
  // `hint`: the spare slot the control thread leased the chunk.
  void OwnTanResult(rte_ring* down, uint32_t id, uint32_t seq, uint32_t label,
                    uint16_t hint = aggregator::kNoSlotHint) {
    aggregator::AggFields f;
    f.slot_hint = hint;
    f.opcode = aggregator::Opcode::kResult;
    f.node_id = 0xfffe;
    f.job_id = id;
    f.seq = seq;
    f.elem_count = 1;
    f.incarnation = label;
    const std::vector<uint8_t> payload = Frames::Int32Payload({60});
    uint8_t buf[sizeof(aggregator::AggHeader) + 4];
    ASSERT_EQ(aggregator::BuildAggregation(f, nullptr, 0, payload.data(), 4, buf, sizeof(buf)), sizeof(buf));
    rte_mbuf* m = rte_pktmbuf_alloc(Pool());
    ASSERT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, sizeof(buf)), buf, sizeof(buf));
    ASSERT_EQ(rte_ring_sp_enqueue(down, m), 0);
  }

  void SetUp() override {
    StageTest::SetUp();
    auto jobs = aggregator::JobTable::Create(8, 16);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    aggregator::SlotTableConfig sc;
    sc.slots = 4;
    sc.max_fan_in = 16;
    slots_ = std::make_unique<aggregator::SlotTable>(sc);
    bypass_ = std::make_unique<aggregator::BypassTable>(64, rte_get_tsc_hz());
    clock_.tsc = rte_rdtsc();
    answers_ = std::make_unique<Answers>(plan(), Pool(), stats(), tx(),
                                         Answers::Source{kAggIp, aggregator::kAggUdpPort}, clock_);
    tree_ = std::make_unique<TreeStage>(OwnTanSetup(nullptr, nullptr), Pool(), stats(), tx(),
                                        *answers_, clock_);
  }
  void TearDown() override {
    tree_.reset();
    answers_.reset();
    bypass_.reset();
    slots_.reset();
    jobs_.reset();
    StageTest::TearDown();
  }

  // Job `id` with three members on ports a0, a1 and a0; a leaf (upstream
  // resolved on port 1 unless `resolved` is false) or a root.
  const aggregator::Job* AddJob(uint32_t id, bool leaf, bool resolved = true) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = kKey;
    spec.members = 3;
    if (leaf) {
      spec.nodes = 2;
      spec.upstreams = {aggregator::JobPeer{kUpstreamIp, aggregator::kAggUdpPort, 5, 0}};
    }
    auto added = jobs_->Add(spec);
    EXPECT_TRUE(added.ok());
    const aggregator::Job* job = *added;
    for (uint16_t m = 0; m < 3; ++m) {
      const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), static_cast<uint8_t>(m % 2),
                                        10, Frames::MemberIp(m), Frames::MemberPort(m)};
      EXPECT_EQ(job->BindMember(m, addr, 0, 1, 0), aggregator::Job::Bind::kBound);
    }
    if (leaf && resolved) {
      job->SetHop(job->ParentHop(0),
                  {0x0200000000aaULL, 1, 10, kUpstreamIp, aggregator::kAggUdpPort});
    }
    return job;
  }
  // Leaf job `id` (as AddJob) whose members [0, bound) are bound under
  // incarnations 0x100 + member; the others have not sent.
  const aggregator::Job* AddLeafJobSentBy(uint32_t id, uint16_t bound) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = kKey;
    spec.members = 3;
    spec.nodes = 2;
    spec.upstreams = {aggregator::JobPeer{kUpstreamIp, aggregator::kAggUdpPort, 5, 0}};
    auto added = jobs_->Add(spec);
    EXPECT_TRUE(added.ok());
    const aggregator::Job* job = *added;
    for (uint16_t m = 0; m < bound; ++m) BindWith(*job, m, 0x100 + m);
    job->SetHop(job->ParentHop(0), {0x0200000000aaULL, 1, 10, kUpstreamIp, aggregator::kAggUdpPort});
    return job;
  }
  static void BindWith(const aggregator::Job& job, uint16_t m, uint32_t incarnation) {
    const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), static_cast<uint8_t>(m % 2),
                                      10, Frames::MemberIp(m), Frames::MemberPort(m)};
    EXPECT_EQ(job.BindMember(m, addr, incarnation, 1, 0), aggregator::Job::Bind::kBound);
  }
  // The tree stage again, started `ago` cycles before now with a restart
  // grace of `grace` cycles.
  void StartedAgo(uint64_t ago, uint64_t grace) {
    TreeStage::Setup ts = OwnTanSetup(nullptr, nullptr);
    ts.started_tsc = clock_.tsc - ago;
    ts.settle_cycles = grace;
    tree_ = std::make_unique<TreeStage>(ts, Pool(), stats(), tx(), *answers_, clock_);
  }
  // Root job `id`, its own TAN, three members bound under incarnations
  // `incarnation` + member (0: none).
  const aggregator::Job* AddOwnTanJob(uint32_t id, uint32_t incarnation) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = kKey;
    spec.members = 3;
    spec.tan = aggregator::JobSpec::Tan::kSelf;
    auto added = jobs_->Add(spec);
    EXPECT_TRUE(added.ok());
    const aggregator::Job* job = *added;
    for (uint16_t m = 0; m < 3; ++m) {
      const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), static_cast<uint8_t>(m % 2), 10,
                                        Frames::MemberIp(m), Frames::MemberPort(m)};
      const uint32_t inc = incarnation == 0 ? 0 : incarnation + m;
      EXPECT_EQ(job->BindMember(m, addr, inc, 1, 0), aggregator::Job::Bind::kBound);
    }
    return job;
  }
  // The fixture's tables, with the rings to and from the control thread's
  // own TAN (null: none).
  TreeStage::Setup OwnTanSetup(rte_ring* up, rte_ring* down) {
    TreeStage::Setup ts;
    ts.jobs = jobs_.get();
    ts.slots = slots_.get();
    ts.bypass = bypass_.get();
    ts.regions = aggregator::SlotRegions::Make(4, 0);
    ts.tan_up = up;
    ts.tan_down = down;
    return ts;
  }
  const aggregator::Slot& Contribute(const aggregator::Job& job, uint32_t seq, uint16_t n) {
    return fixtures::ContributeInSlot0(*slots_, job, seq, n, clock_.tsc);
  }
  static aggregator::AggPacket Parse(const Frame& f, UdpInfo* udp) {
    L2Info l2;
    EXPECT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
    EXPECT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, udp), UdpParse::kOk);
    aggregator::AggPacket pkt;
    EXPECT_EQ(aggregator::ParseAggregation(f.data() + udp->payload_offset, udp->payload_len, &pkt),
              aggregator::WireError::kOk);
    return pkt;
  }

  // Flushes what the stage sent: one PARTIAL to the upstream, with the job
  // key (the parent checks it), parsed out of `sent`'s frame.
  aggregator::AggPacket PartialUp(std::map<int, std::vector<Frame>>& sent) {
    tx().Flush();
    sent = Sent();
    EXPECT_EQ(sent[1].size(), 1u);
    UdpInfo udp;
    const aggregator::AggPacket pkt = Parse(sent[1].at(0), &udp);
    EXPECT_EQ(udp.dst_ip, kUpstreamIp);
    EXPECT_EQ(pkt.opcode, aggregator::Opcode::kPartial);
    EXPECT_EQ(pkt.header->job_key.host(), kKey);
    return pkt;
  }

  std::unique_ptr<aggregator::JobTable> jobs_;
  std::unique_ptr<aggregator::SlotTable> slots_;
  std::unique_ptr<aggregator::BypassTable> bypass_;
  LcoreClock clock_;
  std::unique_ptr<Answers> answers_;
  std::unique_ptr<TreeStage> tree_;
};

TEST_F(TreeStageTest, ALeafSendsItsFinishedChunkUpstreamAsAPartial) {
  const aggregator::Job& job = *AddJob(3, true);
  const aggregator::Slot& slot = Contribute(job, 4, 3);
  EXPECT_FALSE(tree_->FinishSlot(job, 0, slot, false, nullptr, 0));
  EXPECT_EQ(slot.state(), aggregator::Slot::State::kForwarded);
  std::map<int, std::vector<Frame>> sent;
  const aggregator::AggPacket pkt = PartialUp(sent);
  EXPECT_EQ(pkt.header->node_id.host(), 5);
  EXPECT_EQ(pkt.header->missing_count, 0);
  EXPECT_EQ(pkt.payload_len, 4u);
  int32_t sum;
  std::memcpy(&sum, pkt.payload, 4);
  EXPECT_EQ(sum, 6);
  EXPECT_EQ(stats().lcore.agg.partials_sent.Get(), 1u);
}

TEST_F(TreeStageTest, ATimeoutNamesTheMissingAndLeavesABypassEntryForTheirLateData) {
  const aggregator::Job& job = *AddJob(3, true);
  const aggregator::Slot& slot = Contribute(job, 4, 2);
  (void)tree_->FinishSlot(job, 0, slot, /*expired=*/true, nullptr, 0);
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 1u);
  UdpInfo udp;
  const aggregator::AggPacket pkt = Parse(sent[1][0], &udp);
  ASSERT_EQ(pkt.header->missing_count, 1);
  EXPECT_EQ((pkt.missing[0] << 8) | pkt.missing[1], 2) << "node 2 missing";
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 1u) << "node 2's (the mark is no member's)";
  ASSERT_TRUE(tree_->bypass_live());
  EXPECT_FALSE(tree_->MatchBypass(job, 4, 1, 1)) << "node 1 was in";
  EXPECT_TRUE(tree_->MatchBypass(job, 4, 2, 2));
  EXPECT_TRUE(tree_->MatchBypass(job, 4, 2, 2))
      << "an entry stays until its TTL: a resend of the late data goes the same way";
}

// The chunk a timeout sent up, once its slot gives way: the mark that it
// went up tells the members it counted (no entry of their own) from those
// it lacked, for 50 ms, or until the parent says it lacks the partial
// (seed 760173: a counted member told `missing` sent its data up again as
// late data, which the TAN merged before the partial and then dropped the
// partial as overlapping it).
TEST_F(TreeStageTest, AChunkThatWentUpFromHereKnowsWhomItCountedForAWhile) {
  const aggregator::Job& job = *AddJob(3, true);
  const aggregator::Slot& slot = Contribute(job, 4, 2);
  (void)tree_->FinishSlot(job, 0, slot, /*expired=*/true, nullptr, 0);
  tx().Flush();
  ASSERT_EQ(Sent()[1].size(), 1u);
  EXPECT_TRUE(tree_->CountedUp(job, 4, 0, 0));
  EXPECT_TRUE(tree_->CountedUp(job, 4, 1, 1));
  EXPECT_FALSE(tree_->CountedUp(job, 4, 2, 2)) << "node 2's entry: it was lacked";
  EXPECT_FALSE(tree_->CountedUp(job, 5, 1, 1)) << "another chunk";
  tree_->ForgetCounted(job, 4);
  EXPECT_FALSE(tree_->CountedUp(job, 4, 1, 1)) << "the parent lacks the partial";
  EXPECT_TRUE(tree_->MatchBypass(job, 4, 2, 2)) << "node 2's entry stays";

  // The mark lasts 50 ms; the members' entries their TTL.
  const aggregator::Slot& again = fixtures::ContributeInSlot(*slots_, 1, job, 6, 2, clock_.tsc);
  aggregator::SlotUpdate expired;
  ASSERT_TRUE(slots_->Expire(1, &expired));
  (void)tree_->FinishSlot(job, 1, again, /*expired=*/true, nullptr, 0);
  EXPECT_TRUE(tree_->CountedUp(job, 6, 1, 1));
  clock_.tsc += clock_.hz() / 1000 * 51;
  EXPECT_FALSE(tree_->CountedUp(job, 6, 1, 1));
  EXPECT_TRUE(tree_->MatchBypass(job, 6, 2, 2));

  // A partial that did not go up leaves no mark (seed 200): here a leaf
  // back from a restart, within its grace, has no run label to send under
  // before every member has sent again.
  StartedAgo(clock_.hz() / 10, clock_.hz());
  const aggregator::Job& unlabelled = *AddLeafJobSentBy(9, 2);
  const aggregator::Slot& held = fixtures::ContributeInSlot(*slots_, 2, unlabelled, 4, 2, clock_.tsc);
  ASSERT_TRUE(slots_->Expire(2, &expired));
  (void)tree_->FinishSlot(unlabelled, 2, held, /*expired=*/true, nullptr, 0);
  ASSERT_EQ(stats().lcore.agg.up_unlabelled.Get(), 1u);
  EXPECT_FALSE(tree_->CountedUp(unlabelled, 4, 1, 1));
}

// A slot takes the count it needs from the participation when it takes its
// chunk. Claimed while member 2 was excluded, it completes with members 0
// and 1; when member 2 has been included again meanwhile (the prediction
// changed), it is listed missing and its data comes unflagged: a bypass
// entry makes it late data, also once the forwarded slot has gone to
// another chunk (seed 700556: the chunk's data went into a new slot and up
// as a repeat the root dropped, and the TAN waited for it until its
// give-up). A member still excluded flags its own data: no entry for it.
TEST_F(TreeStageTest, AMemberIncludedAgainSinceTheClaimGetsABypassEntryWhenTheSlotGoesOnWithoutIt) {
  const aggregator::Job& job = *AddJob(3, true);
  auto contribute = [&](uint32_t seq) -> const aggregator::Slot& {
    return fixtures::ContributeInSlot0(*slots_, job, seq, 2, clock_.tsc,
                                       static_cast<uint16_t>(job.members() - job.excluded_count()));
  };
  ASSERT_TRUE(job.SetExcluded(2, true));
  // Still excluded: listed, no entry.
  const aggregator::Slot& kept_out = contribute(4);
  ASSERT_EQ(kept_out.state(), aggregator::Slot::State::kComplete) << "2 of 2 needed";
  (void)tree_->FinishSlot(job, 0, kept_out, /*expired=*/false, nullptr, 0);
  std::map<int, std::vector<Frame>> sent;
  aggregator::AggPacket pkt = PartialUp(sent);
  ASSERT_EQ(pkt.header->missing_count, 1);
  EXPECT_EQ((pkt.missing[0] << 8) | pkt.missing[1], 2);
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 0u) << "an excluded member flags its data";
  slots_->Release(0);

  // Included again between the claim and the completion.
  const aggregator::Slot* slot = nullptr;
  {
    const int32_t v = 1;
    aggregator::Contribution c;
    c.job_id = job.id();
    c.job_generation = job.generation();
    c.seq = 5;
    c.node = 0;
    c.expected = job.members();
    c.needed = static_cast<uint16_t>(job.members() - job.excluded_count());
    c.elem_count = 1;
    c.payload = reinterpret_cast<const uint8_t*>(&v);
    slot = slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).slot;
    ASSERT_TRUE(job.SetExcluded(2, false));
    const int32_t w = 2;
    c.node = 1;
    c.needed = static_cast<uint16_t>(job.members() - job.excluded_count());
    c.payload = reinterpret_cast<const uint8_t*>(&w);
    slot = slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).slot;
  }
  ASSERT_EQ(slot->state(), aggregator::Slot::State::kComplete)
      << "the count it needed when it took the chunk";
  (void)tree_->FinishSlot(job, 0, *slot, /*expired=*/false, nullptr, 0);
  pkt = PartialUp(sent);
  ASSERT_EQ(pkt.header->missing_count, 1);
  EXPECT_EQ((pkt.missing[0] << 8) | pkt.missing[1], 2);
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 1u) << "node 2's (the mark is no member's)";
  ASSERT_TRUE(tree_->bypass_live());
  EXPECT_FALSE(tree_->MatchBypass(job, 5, 0, 0)) << "node 0 was in";
  EXPECT_TRUE(tree_->MatchBypass(job, 5, 2, 2)) << "its unflagged data is late";
}

// A slot that goes up lacking an excluded member keeps its chunk until the
// answer comes down: the member gets no bypass entry (it flags its own
// data), so the slot is what remembers it is missing. Given way, the chunk
// was claimed anew here by the member's resend once the prediction had
// included it again (no longer flagged), and that slot's partial was a
// repeat the parent dropped: the TAN, missing only that member, gave the
// chunk up (seeds 665239, 1108950). A slot whose missing members all have
// entries goes on giving way.
TEST_F(TreeStageTest, ASlotThatWentUpWithoutAnExcludedMemberKeepsItsChunk) {
  const aggregator::Job& job = *AddJob(3, true);
  ASSERT_TRUE(job.SetExcluded(2, true));
  const aggregator::Slot& slot =
      fixtures::ContributeInSlot0(*slots_, job, 4, 2, clock_.tsc,
                                  static_cast<uint16_t>(job.members() - job.excluded_count()));
  ASSERT_EQ(slot.state(), aggregator::Slot::State::kComplete) << "2 of 2 needed";
  (void)tree_->FinishSlot(job, 0, slot, /*expired=*/false, nullptr, 0);
  std::map<int, std::vector<Frame>> sent;
  aggregator::AggPacket pkt = PartialUp(sent);
  ASSERT_EQ(pkt.header->missing_count, 1);
  EXPECT_EQ((pkt.missing[0] << 8) | pkt.missing[1], 2);
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 0u);
  EXPECT_TRUE(slot.kept());
  EXPECT_EQ(stats().lcore.agg.slots_kept.Get(), 1u);
  const int32_t v = 7;
  aggregator::Contribution c;
  c.job_id = job.id();
  c.job_generation = job.generation();
  c.node = 0;
  c.expected = job.members();
  c.elem_count = 1;
  c.payload = reinterpret_cast<const uint8_t*>(&v);
  c.seq = 4 + 64;
  EXPECT_EQ(slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).outcome,
            aggregator::SlotOutcome::kCollision)
      << "another chunk waits as for an aggregating slot";
  // Included again, the member's resend comes unflagged: the slot knows it
  // as late.
  ASSERT_TRUE(job.SetExcluded(2, false));
  c.seq = 4;
  c.node = 2;
  EXPECT_EQ(slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).outcome,
            aggregator::SlotOutcome::kLateForwarded);

  // Its missing member with an entry, a slot gives way as before.
  const aggregator::Slot& timed_out = fixtures::ContributeInSlot(*slots_, 1, job, 9, 2, clock_.tsc);
  aggregator::SlotUpdate u;
  ASSERT_TRUE(slots_->Expire(1, &u));
  (void)tree_->FinishSlot(job, 1, timed_out, /*expired=*/true, nullptr, 0);
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 1u);
  EXPECT_FALSE(timed_out.kept());
  c.seq = 9 + 64;
  c.node = 0;
  EXPECT_EQ(slots_->Contribute(1, c, clock_.tsc, fixtures::KeepSlots, nullptr).outcome,
            aggregator::SlotOutcome::kAccumulated);
}

// A chunk with no slot here goes up as a timeout with nobody in would send
// it: every member listed, an entry for each, and the op's identity as the
// payload (a float max: -Inf), in the chunk's own shape.
// A leaf back from a restart, within its restart grace: a slot whose timer
// fires before every member has sent again sends nothing up (up_unlabelled,
// the slot forwarded as if its partial were lost), rather than fix a label
// of the members that did, which the parent would take for a new run
// (docs/protocol.md, "Runs"; seeds 550246, 470838). Once the last member
// has sent, the resend goes under the run's label from before the restart.
TEST_F(TreeStageTest, WithinTheRestartGraceATimeoutFixesNoLabelOfSomeMembers) {
  const uint64_t hz = rte_get_tsc_hz();
  // The run's label before the restart, every member in.
  const uint32_t run_label = AddLeafJobSentBy(3, 3)->label();
  ASSERT_NE(run_label, 0u);
  // The restart: the job's table afresh, the stage started 100 ms ago with
  // a second's grace; members 0 and 1 have sent again, member 2 not yet.
  jobs_ = std::move(aggregator::JobTable::Create(8, 16)).value();
  StartedAgo(hz / 10, hz);
  const aggregator::Job& job = *AddLeafJobSentBy(3, 2);
  const aggregator::Slot& slot = Contribute(job, 4, 2);
  aggregator::SlotUpdate u;
  ASSERT_TRUE(slots_->Expire(0, &u));  // its timer fired
  EXPECT_FALSE(tree_->FinishSlot(job, 0, slot, /*expired=*/true, nullptr, 0));
  EXPECT_EQ(slot.state(), aggregator::Slot::State::kForwarded);
  tx().Flush();
  EXPECT_EQ(Sent()[1].size(), 0u) << "nothing up within the grace";
  EXPECT_EQ(stats().lcore.agg.up_unlabelled.Get(), 1u);
  EXPECT_EQ(job.label(), 0u) << "no label fixed";
  // Member 2 sends again: the label is the run's, and the partial (resent
  // on a member's retransmission) goes under it.
  BindWith(job, 2, 0x102);
  ASSERT_EQ(job.label(), run_label);
  (void)tree_->FinishSlot(job, 0, slot, false, nullptr, 0);
  std::map<int, std::vector<Frame>> sent;
  const aggregator::AggPacket pkt = PartialUp(sent);
  EXPECT_EQ(pkt.header->incarnation.host(), run_label);
  EXPECT_EQ(pkt.header->missing_count, 1) << "member 2's data goes as late data";
}

// After the grace (a switch up for longer, or a member that never came
// back), a timeout before every member has sent fixes the label of those
// that did, as it always did: the others' partials go on.
TEST_F(TreeStageTest, AfterTheRestartGraceATimeoutFixesTheLabelOfThoseThatSent) {
  const uint64_t hz = rte_get_tsc_hz();
  StartedAgo(2 * hz, hz);
  const aggregator::Job& job = *AddLeafJobSentBy(3, 2);
  const aggregator::Slot& slot = Contribute(job, 4, 2);
  (void)tree_->FinishSlot(job, 0, slot, /*expired=*/true, nullptr, 0);
  std::map<int, std::vector<Frame>> sent;
  const aggregator::AggPacket pkt = PartialUp(sent);
  EXPECT_NE(pkt.header->incarnation.host(), 0u);
  EXPECT_EQ(pkt.header->incarnation.host(), job.label()) << "fixed for the generation";
  EXPECT_EQ(stats().lcore.agg.up_unlabelled.Get(), 0u);
}

TEST_F(TreeStageTest, AChunkWithNoSlotGoesUpListingEveryMember) {
  const aggregator::Job& job = *AddJob(3, true);
  aggregator::AggFields f;
  f.job_id = 3;
  f.seq = 9;
  f.dtype = aggregator::DType::kFloat32;
  f.op = aggregator::ReduceOp::kMax;
  f.elem_count = 2;
  f.aux = 680;
  f.addr_low = 0;
  aggregator::AggHeader h;
  aggregator::WriteAggHeader(f, 0, &h);
  ASSERT_TRUE(tree_->SendUpAsMissing(job, h));
  std::map<int, std::vector<Frame>> sent;
  const aggregator::AggPacket pkt = PartialUp(sent);
  EXPECT_EQ(pkt.header->flags.host(), aggregator::flags::kConflict);
  EXPECT_EQ(pkt.header->seq.host(), 9u);
  EXPECT_EQ(pkt.header->aux.host(), 680u);
  ASSERT_EQ(pkt.header->missing_count, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((pkt.missing[2 * i] << 8) | pkt.missing[2 * i + 1], i);
  ASSERT_EQ(pkt.payload_len, 8u);
  float v[2];
  std::memcpy(v, pkt.payload, 8);
  EXPECT_EQ(v[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(stats().lcore.agg.bypass_created.Get(), 3u);
  for (uint16_t m = 0; m < 3; ++m) EXPECT_TRUE(tree_->MatchBypass(job, 9, m, m)) << m;
}

// A child switch's own up-as-missing partial (CONFLICT: the identity, its
// share listed) that finds no slot here either holds nothing: the partial
// that goes up lists what the child listed in the child's place, and the
// child gets no entry, so that nothing but the members' own data (late
// already) is left to reach the TAN (seed 100020: the child's partial, sent
// on as a late partial, was lost, and the root's own TAN, which knows no
// switch two levels down, gave up on the child).
TEST_F(TreeStageTest, AChildsEmptyPartialIsListedAsWhatItLists) {
  aggregator::JobSpec spec;
  spec.id = 4;
  spec.key = kKey;
  spec.members = 2;
  spec.member_nodes = {0, 7};
  spec.covers = {{}, {20, 21}};
  spec.nodes = 4;
  spec.upstreams = {aggregator::JobPeer{kUpstreamIp, aggregator::kAggUdpPort, 5, 0}};
  auto added = jobs_->Add(spec);
  ASSERT_TRUE(added.ok());
  const aggregator::Job& job = **added;
  for (uint16_t m = 0; m < 2; ++m) {
    const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), static_cast<uint8_t>(m % 2),
                                      10, Frames::MemberIp(m), Frames::MemberPort(m)};
    EXPECT_EQ(job.BindMember(m, addr, 0, 1, 0), aggregator::Job::Bind::kBound);
  }
  job.SetHop(job.ParentHop(0), {0x0200000000aaULL, 1, 10, kUpstreamIp, aggregator::kAggUdpPort});
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kPartial;
  f.flags = aggregator::flags::kConflict;
  f.node_id = 7;
  f.job_id = 4;
  f.job_key = kKey;
  f.seq = 9;
  f.elem_count = 1;
  const uint16_t child_missing[2] = {20, 21};
  const uint8_t identity[4] = {};
  uint8_t buf[128];
  const uint32_t len =
      aggregator::BuildAggregation(f, child_missing, 2, identity, sizeof identity, buf, sizeof buf);
  ASSERT_NE(len, 0u);
  aggregator::AggPacket child;
  ASSERT_EQ(aggregator::ParseAggregation(buf, len, &child), aggregator::WireError::kOk);
  bool flattened = false;
  ASSERT_TRUE(tree_->SendUpAsMissing(job, *child.header, &child, 1, &flattened));
  EXPECT_TRUE(flattened);
  std::map<int, std::vector<Frame>> sent;
  const aggregator::AggPacket pkt = PartialUp(sent);
  EXPECT_EQ(pkt.header->flags.host(), aggregator::flags::kConflict);
  ASSERT_EQ(pkt.header->missing_count, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pkt.MissingNode(static_cast<uint32_t>(i)), (std::array<uint16_t, 3>{0, 20, 21}[i]));
  }
  EXPECT_TRUE(tree_->MatchBypass(job, 9, 0, 0)) << "the worker's entry";
  EXPECT_FALSE(tree_->MatchBypass(job, 9, 1, 7)) << "none for the child";
}

TEST_F(TreeStageTest, ARootWithoutATanTellsItsMembersTheChunkIsIncomplete) {
  const aggregator::Job& job = *AddJob(8, false);
  const aggregator::Slot& slot = Contribute(job, 1, 2);
  (void)tree_->FinishSlot(job, 0, slot, true, nullptr, 0);
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[0].size(), 2u) << "members 0 and 2";
  ASSERT_EQ(sent[1].size(), 1u);
  const Frames::Result r = Frames::ParseResult(sent[1][0]);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
  EXPECT_NE(r.fields.flags & aggregator::flags::kIncomplete, 0);
  EXPECT_TRUE(r.payload.empty());
}

// Listing the ranks a child switch covers as missing (bypass.subswitch:
// nodes), a switch sends that child's late partial on naming the ranks its
// payload holds, flagged CONTENT: the TAN above may not know what the child
// covers, and would otherwise take it to hold the child alone.
TEST_F(TreeStageTest, AChildSwitchsLatePartialGoesOnNamingWhatItHolds) {
  aggregator::JobSpec spec;
  spec.id = 12;
  spec.key = kKey;
  spec.members = 2;
  spec.nodes = 3;
  spec.member_nodes = {4, 101};
  spec.covers = {{}, {7, 8, 9}};
  spec.bypass_covered_nodes = true;
  spec.upstreams = {aggregator::JobPeer{kUpstreamIp, aggregator::kAggUdpPort, 5, 0}};
  const aggregator::Job& job = **jobs_->Add(spec);
  for (uint16_t m = 0; m < 2; ++m) {
    const aggregator::MemberAddr addr{Frames::MemberMac(m).ToU64(), 0, 10, Frames::MemberIp(m),
                                      Frames::MemberPort(m)};
    ASSERT_EQ(job.BindMember(m, addr, 0x77u + m, 1, 0), aggregator::Job::Bind::kBound);
  }
  job.SetHop(job.ParentHop(0), {0x0200000000aaULL, 1, 10, kUpstreamIp, aggregator::kAggUdpPort});
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kPartial;
  f.node_id = 101;
  f.job_id = 12;
  f.job_key = kKey;
  f.elem_count = 2;
  const uint16_t lacks[] = {8};  // the child's own timeout
  std::vector<uint8_t> datagram(256);
  datagram.resize(aggregator::BuildAggregation(f, lacks, 1, Frames::Int32Payload({30, 40}).data(), 8,
                                               datagram.data(), 256));
  Frame frame(42 + datagram.size());
  WriteUdpHeaders(frame.data(), fixtures::kSwitchMac.bytes.data(), Frames::MemberMac(1).bytes.data(), 0,
                  Frames::MemberIp(1), kAggIp, Frames::MemberPort(1), aggregator::kAggUdpPort, 1,
                  static_cast<uint32_t>(datagram.size()));
  std::memcpy(frame.data() + 42, datagram.data(), datagram.size());
  tree_->ForwardLate(Mbuf(frame), job, 42, 0);
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 1u);
  UdpInfo udp;
  const aggregator::AggPacket pkt = Parse(sent[1].at(0), &udp);
  EXPECT_EQ(pkt.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(pkt.header->flags.host(), aggregator::flags::kBypass | aggregator::flags::kContent);
  ASSERT_EQ(pkt.header->missing_count, 2);
  EXPECT_EQ(pkt.MissingNode(0), 7);
  EXPECT_EQ(pkt.MissingNode(1), 9);
  EXPECT_EQ(std::vector<uint8_t>(pkt.payload, pkt.payload + pkt.payload_len),
            Frames::Int32Payload({30, 40}));
  EXPECT_EQ(stats().lcore.agg.late_content_listed.Get(), 1u);
}

TEST_F(TreeStageTest, LateDataWithNowhereToGoIsDroppedWithItsReason) {
  const aggregator::Job& root = *AddJob(8, false);
  const aggregator::Job& unresolved = *AddJob(9, true, /*resolved=*/false);
  aggregator::AggFields f;
  f.job_id = 8;
  f.job_key = kKey;
  f.elem_count = 1;
  const unsigned in_use = InUse();
  tree_->ForwardLate(Mbuf(Frames::Datagram(f, Frames::Int32Payload({1}))), root, 42, 2);
  f.job_id = 9;
  tree_->ForwardLate(Mbuf(Frames::Datagram(f, Frames::Int32Payload({1}))), unresolved, 42, 0);
  EXPECT_EQ(Drops(2, DropReason::kAggNoTan), 1u);
  EXPECT_EQ(Drops(0, DropReason::kAggUnresolvedHop), 1u);
  EXPECT_EQ(stats().lcore.agg.late_no_tan.Get(), 1u);
  EXPECT_EQ(stats().lcore.agg.unresolved_next_hop.Get(), 1u);
  EXPECT_EQ(InUse(), in_use);
}

TEST_F(TreeStageTest, AResultFromAboveReachesEveryMemberWithoutTheKey) {
  const aggregator::Job& job = *AddJob(3, true);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kResult;
  f.job_id = 3;
  f.job_key = kKey;
  f.seq = 4;
  f.elem_count = 1;
  const Frame frame = Frames::DatagramFrom(f, Frames::Int32Payload({60}), Frames::MemberMac(9),
                                           kUpstreamIp, aggregator::kAggUdpPort);
  UdpInfo udp;
  const aggregator::AggPacket pkt = Parse(frame, &udp);
  rte_mbuf* m = Mbuf(frame);
  const aggregator::AggPacket in_mbuf = [&] {
    aggregator::AggPacket p;
    EXPECT_EQ(aggregator::ParseAggregation(rte_pktmbuf_mtod_offset(m, const uint8_t*, 42),
                                           pkt.payload_len + sizeof(aggregator::AggHeader), &p),
              aggregator::WireError::kOk);
    return p;
  }();
  tree_->ResultFromAbove(m, job, in_mbuf, 42, 1, /*local_slot=*/0);  // no slot holds chunk 4
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[0].size(), 2u);
  ASSERT_EQ(sent[1].size(), 1u);
  const Frames::Result r = Frames::ParseResult(sent[1][0]);
  EXPECT_EQ(r.fields.job_key, 0u);
  EXPECT_EQ(r.payload, Frames::Int32Payload({60}));
  EXPECT_EQ(stats().lcore.agg.results_down.Get(), 1u);
}

// This switch's own TAN answers under the run label the chunk's data went
// up with. An answer under another label (the run before: its late data
// came after the job's new run began here) never reaches the new run's
// members, as a remote TAN's would not; one under the job's label does.
TEST_F(TreeStageTest, AnOwnTansResultOfAnotherRunIsRefused) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0x100u);
  ASSERT_FALSE(HasFailure());
  ASSERT_NE(job.label(), 0u);
  rte_ring* down = rte_ring_create("tree_test_tan_down", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(down, nullptr);
  TreeStage tree(OwnTanSetup(nullptr, down), Pool(), stats(), tx(), *answers_, clock_);
  const auto result = [&](uint32_t label) {
    OwnTanResult(down, 6, 4, label);
    tree.DrainTanResults();
    tx().Flush();
  };
  result(0x5eed5eed);  // the run before's
  auto sent = Sent();
  EXPECT_TRUE(sent[0].empty() && sent[1].empty()) << "no member gets another run's result";
  EXPECT_EQ(stats().lcore.agg.results_refused.Get(), 1u);
  result(job.label());
  sent = Sent();
  EXPECT_EQ(sent[0].size() + sent[1].size(), 3u) << "every member gets its run's";
  rte_ring_free(down);
}

// The own TAN's result comes to the worker that owns the chunk's placed
// slot. A chunk moved off it to a spare slot (members' resends claimed a
// slot again after its first data went up, and another chunk held the
// placed one) completes there with that result, as it does with a remote
// parent's, which is sent on to the spare slot: left waiting, the spare
// slot lacked every member the result reached, and a member whose copy was
// lost, its resend counted there, was told result_lost while the TAN still
// held the result.
TEST_F(TreeStageTest, AnOwnTansResultCompletesTheSpareSlotItsChunkMovedTo) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  rte_ring* down = rte_ring_create("tree_test_tan_down3", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(down, nullptr);
  TreeStage::Setup ts = OwnTanSetup(nullptr, down);
  ts.regions = aggregator::SlotRegions::Make(4, 0, /*spare=*/1);
  aggregator::RelocationMap relocations(1);
  ts.relocations = &relocations;
  TreeStage tree(ts, Pool(), stats(), tx(), *answers_, clock_);
  constexpr uint32_t kSeq = 4;
  const uint32_t spare = ts.regions.Spare(0);
  ASSERT_NE(ts.regions.Of(job.in_band(), job.placement(), kSeq), spare);
  // Members 0 and 1 resent into the spare slot; member 2's result was lost.
  (void)fixtures::ContributeInSlot(*slots_, spare, job, kSeq, 2, clock_.tsc);
  ASSERT_TRUE(relocations.Insert({job.id(), job.generation(), kSeq}, 0));
  OwnTanResult(down, job.id(), kSeq, 0);
  tree.DrainTanResults();
  tx().Flush();
  const auto sent = Sent();
  EXPECT_EQ(sent.at(0).size() + sent.at(1).size(), 3u) << "every member gets the result";
  const aggregator::Slot* slot = slots_->Holding(spare, job.id(), job.generation(), kSeq);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->state(), aggregator::Slot::State::kComplete) << "the spare slot completes with it";
  rte_ring_free(down);
}

// At a root that is its own TAN, a chunk moved off its placed slot to a
// spare slot of another worker went to the TAN lacking a child switch whose
// partial had not come; that partial followed it there as late data. The
// TAN's result comes to the spare slot's worker, which the control thread
// names by its hint (Dataplane::SendTanResult), and completes the slot
// there. Left waiting, the slot lacked that child; when a rank below it
// lost the result and its switch asked after it, the root told the switch
// to send its data again, and the chunk began anew below, waiting for
// members that had all moved on (seed 1655072).
TEST_F(TreeStageTest, AnOwnTansResultCompletesTheSpareSlotItNamesOnAnotherWorker) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  rte_ring* down = rte_ring_create("tree_test_tan_down4", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(down, nullptr);
  TreeStage::Setup ts = OwnTanSetup(nullptr, down);
  ts.n_workers = 2;
  ts.index = 1;
  ts.regions = aggregator::SlotRegions::Make(8, 0, /*spare=*/2);
  TreeStage tree(ts, Pool(), stats(), tx(), *answers_, clock_);
  constexpr uint32_t kSeq = 4;
  ASSERT_EQ(ts.regions.Of(job.in_band(), job.placement(), kSeq) % 2, 0u)
      << "the placed slot is the other worker's";
  constexpr uint16_t kHint = 1;
  const uint32_t spare = ts.regions.Spare(kHint);
  ASSERT_EQ(spare % 2, 1u) << "the spare slot is this worker's";
  const uint32_t local = spare / 2;
  (void)fixtures::ContributeInSlot(*slots_, local, job, kSeq, 2, clock_.tsc);
  slots_->MarkForwarded(local, clock_.tsc);
  OwnTanResult(down, job.id(), kSeq, 0, kHint);
  tree.DrainTanResults();
  tx().Flush();
  const auto sent = Sent();
  EXPECT_EQ(sent.at(0).size() + sent.at(1).size(), 3u) << "every member gets the result";
  const aggregator::Slot* slot = slots_->Holding(local, job.id(), job.generation(), kSeq);
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(slot->state(), aggregator::Slot::State::kComplete)
      << "the spare slot completes with it, and answers the member it lacked";
  rte_ring_free(down);
}

// A root that is its own TAN hands it first and late data through a ring
// the control thread drains. Late data, which its member resends, may fill
// three quarters of it; the last quarter is the first data's: lost there,
// a chunk waits for its slot's backed-off resend, and every late of the
// chunk with it. Beyond that, late data is dropped, counted tan_busy.
TEST_F(TreeStageTest, TheLastQuarterOfTheOwnTansRingIsKeptForFirstData) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  constexpr unsigned kRing = 16;  // holds 15
  rte_ring* up = rte_ring_create("tree_test_tan_up", kRing, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(up, nullptr);
  TreeStage tree(OwnTanSetup(up, nullptr), Pool(), stats(), tx(), *answers_, clock_);
  const auto late = [&](uint16_t node) {
    aggregator::AggFields f;
    f.node_id = node;
    f.job_id = 6;
    f.job_key = kKey;
    f.elem_count = 1;
    tree.ForwardLate(Mbuf(Frames::Datagram(f, Frames::Int32Payload({1}))), job, 42, 0);
  };
  const unsigned lates = rte_ring_get_capacity(up) - kRing / 4;
  for (unsigned i = 0; i < 20; ++i) late(static_cast<uint16_t>(i % 3));
  EXPECT_EQ(rte_ring_count(up), lates) << "late data stops where the last quarter begins";
  EXPECT_EQ(stats().lcore.agg.late_forwarded.Get(), lates);
  EXPECT_EQ(stats().lcore.agg.tan_busy.Get(), 20 - lates);
  EXPECT_EQ(Drops(0, DropReason::kAggTanBusy), 20 - lates);
  EXPECT_EQ(stats().lcore.agg.late_no_tan.Get(), 0u);
  // A slot's first data (a member missing: the slot timed out) still goes.
  const aggregator::Slot& slot = Contribute(job, 4, 2);
  (void)tree.FinishSlot(job, 0, slot, /*expired=*/true, nullptr, 0);
  EXPECT_EQ(stats().lcore.agg.first_data_sent.Get(), 1u);
  EXPECT_EQ(rte_ring_count(up), lates + 1);
  rte_mbuf* pkts[kRing];
  const unsigned n = rte_ring_sc_dequeue_burst(up, reinterpret_cast<void**>(pkts), kRing, nullptr);
  ASSERT_EQ(n, lates + 1);
  aggregator::AggPacket first;
  ASSERT_EQ(aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[n - 1], const uint8_t*),
                                         rte_pktmbuf_data_len(pkts[n - 1]), &first),
            aggregator::WireError::kOk);
  EXPECT_EQ(first.opcode, aggregator::Opcode::kPartial);
  for (unsigned i = 0; i < n; ++i) rte_pktmbuf_free(pkts[i]);
  rte_ring_free(up);
}

// An ORDERED float sum at a root that is its own TAN, whose slot went on
// with one member's data alone (a member's resend after a restart takes a
// slot by itself): the root sends first data holding nobody's data
// (CONFLICT) that lists that member missing too, and the member's data as
// its late. The TAN then reduces every member's data in node order, from
// the first one's bits, as a slot reduces in member order: the other
// members' resent data gives the bytes a slot completing with all three
// gives them. (First data holding member 2's data, the others' added to
// it, would give (2 + 0) + 1 in place of (0 + 1) + 2: 0 in place of 1.)
TEST_F(TreeStageTest, AnOrderedChunkWhoseSlotWentOnWithOneMemberReachesTheTanAsThatMembersLate) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  rte_ring* up = rte_ring_create("tree_test_alone", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(up, nullptr);
  TreeStage tree(OwnTanSetup(up, nullptr), Pool(), stats(), tx(), *answers_, clock_);
  // Values whose float sum depends on the order.
  const std::array<float, 3> values = {1e8f, -1e8f, 1.0f};
  aggregator::Contribution c;
  c.job_id = job.id();
  c.job_generation = job.generation();
  c.seq = 4;
  c.node = 2;
  c.expected = job.members();
  c.needed = job.members();
  c.elem_count = 1;
  c.dtype = aggregator::DType::kFloat32;
  c.op = aggregator::ReduceOp::kSum;
  c.ordered = true;
  c.payload = reinterpret_cast<const uint8_t*>(&values[2]);
  ASSERT_EQ(slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).outcome,
            aggregator::SlotOutcome::kHeld);
  aggregator::SlotUpdate expired;
  ASSERT_TRUE(slots_->Expire(0, &expired));
  (void)tree.FinishSlot(job, 0, *expired.slot, /*expired=*/true, nullptr, 0);

  rte_mbuf* pkts[16];
  const unsigned n = rte_ring_sc_dequeue_burst(up, reinterpret_cast<void**>(pkts), 16, nullptr);
  ASSERT_EQ(n, 2u) << "first data, then member 2's late";
  aggregator::TanOptions options;
  options.trigger = aggregator::TanTrigger::kIncremental;
  aggregator::TanEngine tan(options);
  std::vector<aggregator::TanOutput> out;
  std::vector<std::vector<uint8_t>> held;  // the datagrams the engine reads
  auto offer = [&](const uint8_t* data, uint32_t len) {
    held.emplace_back(data, data + len);
    aggregator::AggPacket pkt;
    ASSERT_EQ(aggregator::ParseAggregation(held.back().data(), len, &pkt), aggregator::WireError::kOk);
    tan.OnDatagram(pkt, aggregator::TanPeer{1, 2}, 0, &out);
  };
  aggregator::AggPacket first;
  ASSERT_EQ(aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[0], const uint8_t*),
                                         rte_pktmbuf_data_len(pkts[0]), &first),
            aggregator::WireError::kOk);
  EXPECT_EQ(first.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(first.header->flags.host() & (aggregator::flags::kConflict | aggregator::flags::kOrdered),
            aggregator::flags::kConflict | aggregator::flags::kOrdered);
  EXPECT_EQ(first.header->missing_count, 3) << "member 2 listed too";
  aggregator::AggPacket late;
  ASSERT_EQ(aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[1], const uint8_t*),
                                         rte_pktmbuf_data_len(pkts[1]), &late),
            aggregator::WireError::kOk);
  EXPECT_EQ(late.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(late.header->node_id.host(), job.NodeId(2));
  for (unsigned i = 0; i < n; ++i) {
    offer(rte_pktmbuf_mtod(pkts[i], const uint8_t*), rte_pktmbuf_data_len(pkts[i]));
    rte_pktmbuf_free(pkts[i]);
  }
  // Members 1 and 0 resend theirs, as late data.
  for (const uint16_t m : {uint16_t{1}, uint16_t{0}}) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kLate;
    f.flags = aggregator::flags::kBypass | aggregator::flags::kOrdered;
    f.node_id = job.NodeId(m);
    f.job_id = job.id();
    f.seq = 4;
    f.job_key = kKey;
    f.elem_count = 1;
    f.dtype = aggregator::DType::kFloat32;
    f.op = aggregator::ReduceOp::kSum;
    std::vector<uint8_t> dgram(128);
    dgram.resize(aggregator::BuildAggregation(f, nullptr, 0,
                                              reinterpret_cast<const uint8_t*>(&values[m]), 4,
                                              dgram.data(), 128));
    offer(dgram.data(), static_cast<uint32_t>(dgram.size()));
  }
  ASSERT_EQ(out.size(), 1u) << "one RESULT";
  aggregator::AggPacket result;
  ASSERT_EQ(aggregator::ParseAggregation(out[0].datagram.data(),
                                         static_cast<uint32_t>(out[0].datagram.size()), &result),
            aggregator::WireError::kOk);
  EXPECT_EQ(result.header->flags.host() & aggregator::flags::kIncomplete, 0);
  volatile float acc = values[0];
  acc = acc + values[1];
  acc = acc + values[2];
  const float in_member_order = acc;
  float got = 0;
  std::memcpy(&got, result.payload, 4);
  EXPECT_EQ(got, in_member_order) << "0 + 1 + 2, as a slot adds them";
  rte_ring_free(up);
}


// A root that is its own TAN hands it first data through a ring, never
// over a link: a missing list that would not share a 1500-byte datagram
// with the chunk's payload still goes, whole, and the TAN waits for those
// members' late data. The switch used to end the chunk INCOMPLETE with no
// missing list (missing_list_overflow), though every member's data was on
// its way (seed 706110: 53 ids from the children's partials beside 333
// float32 elements).
TEST_F(TreeStageTest, AnOwnTansFirstDataCarriesAMissingListTheMtuWouldNot) {
  const aggregator::Job& job = *AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  rte_ring* up = rte_ring_create("tree_test_tan_up2", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(up, nullptr);
  TreeStage tree(OwnTanSetup(up, nullptr), Pool(), stats(), tx(), *answers_, clock_);
  // Members 0 and 1 send a full chunk (355 int32: 1420 bytes, what a
  // 1500-byte MTU holds with no list); member 2 times out.
  constexpr uint32_t kElems = 355;
  const std::vector<int32_t> values(kElems, 7);
  const aggregator::Slot* slot = nullptr;
  for (uint16_t m = 0; m < 2; ++m) {
    aggregator::Contribution c;
    c.job_id = job.id();
    c.job_generation = job.generation();
    c.seq = 4;
    c.node = m;
    c.expected = job.members();
    c.elem_count = kElems;
    c.payload = reinterpret_cast<const uint8_t*>(values.data());
    slot = slots_->Contribute(0, c, clock_.tsc, fixtures::KeepSlots, nullptr).slot;
    ASSERT_NE(slot, nullptr);
  }
  (void)tree.FinishSlot(job, 0, *slot, /*expired=*/true, nullptr, 0);
  tx().Flush();
  auto sent = Sent();
  EXPECT_TRUE(sent[0].empty() && sent[1].empty()) << "no member is told INCOMPLETE";
  EXPECT_EQ(stats().lcore.agg.missing_list_overflow.Get(), 0u);
  EXPECT_EQ(stats().lcore.agg.incomplete_results.Get(), 0u);
  EXPECT_EQ(stats().lcore.agg.first_data_sent.Get(), 1u);
  rte_mbuf* m = nullptr;
  ASSERT_EQ(rte_ring_sc_dequeue(up, reinterpret_cast<void**>(&m)), 0) << "the first data is in the ring";
  aggregator::AggPacket first;
  ASSERT_EQ(aggregator::ParseAggregation(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m),
                                         &first),
            aggregator::WireError::kOk);
  EXPECT_EQ(first.opcode, aggregator::Opcode::kPartial);
  ASSERT_EQ(first.header->missing_count, 1);
  EXPECT_EQ(first.MissingNode(0), 2) << "node 2 missing";
  EXPECT_EQ(first.payload_len, kElems * 4);
  EXPECT_GT(rte_pktmbuf_data_len(m), 1500u - 20 - 8) << "longer than a link would carry";
  rte_pktmbuf_free(m);
  rte_ring_free(up);
}

// What the own TAN answers INCOMPLETE lists the ids still outstanding, as
// many as its first data carried; that result goes down over links, so the
// switch keeps as many ids as a 1500-byte MTU holds beside the payload.
TEST_F(TreeStageTest, AnOwnTansIncompleteResultGoesDownWithinTheMtu) {
  (void)AddOwnTanJob(6, 0);
  ASSERT_FALSE(HasFailure());
  rte_ring* down = rte_ring_create("tree_test_tan_down2", 16, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(down, nullptr);
  TreeStage tree(OwnTanSetup(nullptr, down), Pool(), stats(), tx(), *answers_, clock_);
  constexpr uint32_t kElems = 354;  // 1416 bytes: room for 2 ids
  std::vector<int32_t> values(kElems);
  for (uint32_t i = 0; i < kElems; ++i) values[i] = static_cast<int32_t>(i);
  const std::vector<uint8_t> payload = Frames::Int32Payload(values);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kResult;
  f.flags = aggregator::flags::kIncomplete;
  f.node_id = 0xfffe;
  f.job_id = 6;
  f.seq = 4;
  f.elem_count = kElems;
  const uint16_t missing[] = {2, 5, 9};
  std::vector<uint8_t> buf(sizeof(aggregator::AggHeader) + 2 * 3 + payload.size());
  ASSERT_EQ(aggregator::BuildAggregation(f, missing, 3, payload.data(),
                                         static_cast<uint32_t>(payload.size()), buf.data(),
                                         static_cast<uint32_t>(buf.size())),
            buf.size());
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  ASSERT_NE(m, nullptr);
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(buf.size())), buf.data(), buf.size());
  ASSERT_EQ(rte_ring_sp_enqueue(down, m), 0);
  tree.DrainTanResults();
  tx().Flush();
  auto sent = Sent();
  ASSERT_EQ(sent[0].size() + sent[1].size(), 3u) << "every member is told";
  for (const auto& port : sent) {
    for (const Frame& frame : port.second) {
      UdpInfo udp;
      const aggregator::AggPacket pkt = Parse(frame, &udp);
      EXPECT_LE(udp.payload_len, 1500u - 20 - 8);
      EXPECT_NE(pkt.header->flags.host() & aggregator::flags::kIncomplete, 0);
      ASSERT_EQ(pkt.header->missing_count, 2) << "the first two ids, as many as fit";
      EXPECT_EQ(pkt.MissingNode(0), 2);
      EXPECT_EQ(pkt.MissingNode(1), 5);
      ASSERT_EQ(pkt.payload_len, payload.size());
      EXPECT_EQ(std::memcmp(pkt.payload, payload.data(), payload.size()), 0) << "the payload intact";
    }
  }
  rte_ring_free(down);
}

}  // namespace
}  // namespace aggswitch::dataplane
