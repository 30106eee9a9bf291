// What the switch tells its members about the data a slot lacks
// (member_notices.h), in the running aggregation path on net_ring ports
// (dataplane_test_fixture.h): a gap in a member's chunks, a resend or QUERY
// past its watermark, a member asking after a waiting chunk, a refusal
// slot_busy: each has the members the chunk lacks told NOTICE missing; and
// not at a root whose TAN is remote, for a float sum.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include <rte_cycles.h>

#include "dataplane/dataplane_test_fixture.h"
#include "dataplane/tree_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("member_notices_test"));

TEST_F(AggregationTest, ALaterChunkRevealsAMembersLostContribution) {
  AddJob(7, 2);
  const std::vector<uint8_t> one = Int32Payload({1});
  Inject(0, Contribution(7, 10, 1, one));  // node 0's chunk 10 is lost
  Inject(0, Contribution(7, 20, 0, one));  // and its 20 complete...
  Inject(0, Contribution(7, 20, 1, one));
  for (uint32_t seq = 11; seq <= 13; ++seq) Inject(0, Contribution(7, seq, 0, one));
  Frame resent = Contribution(7, 23, 0, one);  // a retransmission: no conclusion
  HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resent);
  Inject(0, Contribution(7, 23, 1, one));  // ...so chunk 23 says nothing of 20
  Step();
  auto out = Drain();
  const std::vector<Result> notices = WithOpcode(out[0], aggregator::Opcode::kNotice);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].dst_ip, MemberIp(0));
  EXPECT_EQ(notices[0].fields.seq, 10u);
  EXPECT_EQ(notices[0].fields.aux, static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
  EXPECT_EQ(notices[0].fields.job_key, 0u);
  EXPECT_EQ(Agg().gap_notices.Get(), 1u);
  // Node 1 moves on past chunks 11..13, which it never sent: three notices.
  for (uint32_t seq = 14; seq <= 16; ++seq) Inject(0, Contribution(7, seq, 1, one));
  Step();
  out = Drain();
  std::set<uint32_t> told;
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    if (r.fields.opcode != aggregator::Opcode::kNotice) continue;
    EXPECT_EQ(r.dst_ip, MemberIp(1));
    told.insert(r.fields.seq);
  }
  EXPECT_EQ(told, (std::set<uint32_t>{11, 12, 13}));
  EXPECT_EQ(Agg().gap_notices.Get(), 4u);
  EXPECT_EQ(Agg().nacks_suppressed.Get(), 0u);
}

// A member whose contribution to the chunk at its ack watermark was lost,
// and whose later chunks went long ago (so no first transmission of one
// can reveal it), is told on any datagram it sends about a chunk a gap
// past it, a resend or a QUERY: it sent that chunk before. Else only its
// retransmission timer, backed off while the job stood still, asks after
// the chunk, and a TAN may give up on it first (seed 310576).
TEST_F(AggregationTest, AResendOrQueryPastAMembersWatermarkRevealsItsLostContribution) {
  AddJob(7, 2);
  const std::vector<uint8_t> one = Int32Payload({1});
  Inject(0, Contribution(7, 10, 1, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/10));
  Step();  // node 0's chunk 10 is lost
  (void)Drain();
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  const auto told_10 = [&](const std::vector<Frame>& frames, uint16_t node) {
    size_t n = 0;
    for (const Result& r : WithOpcode(frames, aggregator::Opcode::kNotice)) {
      if (r.fields.seq == 10 && r.dst_ip == MemberIp(node) && r.fields.aux == missing) ++n;
    }
    return n;
  };
  // Within reordering distance of its watermark: no conclusion.
  auto out = AskAfter(7, 12, 0, /*watermark=*/10);
  EXPECT_EQ(told_10(out[0], 0), 0u);
  EXPECT_EQ(Agg().gap_notices.Get(), 0u);
  // A QUERY about chunk 13, a gap past chunk 10, which it still waits for.
  out = AskAfter(7, 13, 0, /*watermark=*/10);
  EXPECT_EQ(told_10(out[0], 0), 1u);
  EXPECT_EQ(Agg().gap_notices.Get(), 1u);
  // So does a resend of chunk 15.
  Frame resent = Contribution(7, 15, 0, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/10);
  HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resent);
  Step();
  out = Drain();
  EXPECT_EQ(told_10(out[0], 0), 1u);
  EXPECT_EQ(Agg().gap_notices.Get(), 2u);
  // Node 1, counted in chunk 10, is told nothing about it.
  out = AskAfter(7, 14, 1, /*watermark=*/10);
  EXPECT_EQ(told_10(out[0], 1), 0u);
  EXPECT_EQ(Agg().gap_notices.Get(), 2u);
  // Node 0 resends chunk 10: complete, and a later query says nothing of it.
  Inject(0, Contribution(7, 10, 0, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/10));
  Step();
  out = Drain();
  EXPECT_EQ(WithOpcode(out[0], aggregator::Opcode::kResult).size(), 2u);
  out = AskAfter(7, 13, 0, /*watermark=*/10);
  EXPECT_EQ(told_10(out[0], 0), 0u);
  EXPECT_EQ(Agg().gap_notices.Get(), 2u);
}

// A member whose data the slot counted asks after the chunk: it is told
// held, and the members the chunk still lacks are told NOTICE missing, each
// of them likely to have lost its data: else it would send it again only at
// its own timeout, which, measured over chunks that waited for others'
// losses, may have grown to a second (seed 1352395: 52 ranks, a window of
// 4, so no later chunk of theirs arrives to tell). Not within a resend gap
// of the chunk's first contribution, then once per gap, doubling.
TEST_F(AggregationTest, AMemberAskingAfterAWaitingChunkHasTheMembersItLacksToldMissing) {
  BuildAggregation();
  AddJob(7, 3);
  const auto ask = [&](uint16_t node) {
    Inject(0, Datagram(QueryFields(7, 5, node)));
    Step();
    std::multiset<uint16_t> told;
    size_t held = 0;
    for (const Result& r : WithOpcode(Drain()[0], aggregator::Opcode::kNotice)) {
      EXPECT_EQ(r.fields.seq, 5u);
      if (r.fields.aux == static_cast<uint32_t>(aggregator::NoticeKind::kHeld)) {
        EXPECT_EQ(r.fields.node_id, node);
        ++held;
        continue;
      }
      EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
      EXPECT_EQ(r.dst_port, MemberPort(r.fields.node_id));
      told.insert(r.fields.node_id);
    }
    EXPECT_EQ(held, 1u);
    return told;
  };
  for (const uint16_t node : {0, 1, 2}) {
    Inject(0, Contribution(7, 4, node, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                           -1, 4));
  }
  Inject(0, Contribution(7, 5, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 5));
  Step();
  (void)Drain();
  EXPECT_TRUE(ask(0).empty()) << "within a resend gap of the chunk's first contribution";
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();  // a poll reads the clock for the next one
  EXPECT_EQ(ask(0), (std::multiset<uint16_t>{1, 2}));
  EXPECT_TRUE(ask(0).empty()) << "once per gap";
  EXPECT_EQ(Agg().asked_notices.Get(), 2u);
  // Member 1 resends; twice the gap later a question tells member 2 alone.
  Inject(0, Contribution(7, 5, 1, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 5));
  Step();
  (void)Drain();
  std::this_thread::sleep_for(std::chrono::milliseconds(11));
  Step();
  EXPECT_EQ(ask(1), (std::multiset<uint16_t>{2}));
  EXPECT_EQ(Agg().asked_notices.Get(), 3u);
}

// A chunk refused its slot (NACK slot_busy: no spare slot) waits for the
// chunk there, and that one for its members: those it lacks are told NOTICE
// missing, so that one whose data, or whose resend after a refusal of its
// own, was lost sends it again now instead of at its backed-off timeout (up
// to a second) while the refused chunk waits behind it (seed 270018). Not
// within a resend gap (5 ms) of the chunk's first contribution (the others'
// first sends are on their way), then once per gap, doubling: a refusal
// within it tells nobody again.
TEST_F(AggregationTest, ARefusalTellsTheMembersTheBusySlotsChunkLacksTheirDataIsMissing) {
  BuildAggregation(", spare_slots: 0");
  AddJob(7, 3);
  AddJob(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  // Job 7's members send from their addresses (the chunk before, complete).
  for (const uint16_t node : {0, 1, 2}) {
    Inject(0, Contribution(7, s7 - 1, node, Int32Payload({1}), DType::kInt32, ReduceOp::kSum,
                           0x5eed, -1, s7 - 1));
  }
  Step();
  (void)Drain();
  // Job 8's members `nodes` send chunk s8, in one burst (one reading of the
  // clock), after `first` when given; returns the node ids of job 7's
  // members told NOTICE missing about s7, and checks that each of job 8's
  // got NACK slot_busy.
  const auto refused = [&](std::vector<uint16_t> nodes, std::optional<Frame> first = {}) {
    if (first) Inject(0, *first);
    for (const uint16_t node : nodes) {
      Inject(0, Contribution(8, s8, node, Int32Payload({100}), DType::kInt32, ReduceOp::kSum,
                             0x5eed, -1, s8));
    }
    StepThroughControl();
    const auto out = Drain();
    const auto at = out.find(0);
    const std::vector<Frame> none;
    const std::vector<Frame>& frames = at == out.end() ? none : at->second;
    const std::vector<Result> nacks = WithOpcode(frames, aggregator::Opcode::kNack);
    EXPECT_EQ(nacks.size(), nodes.size());
    for (const Result& r : nacks) {
      EXPECT_EQ(r.fields.job_id, 8u);
      EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kSlotBusy));
    }
    std::multiset<uint16_t> told;
    for (const Result& r : WithOpcode(frames, aggregator::Opcode::kNotice)) {
      EXPECT_EQ(r.fields.job_id, 7u);
      EXPECT_EQ(r.fields.seq, s7);
      EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
      EXPECT_EQ(r.dst_port, MemberPort(r.fields.node_id));
      told.insert(r.fields.node_id);
    }
    return told;
  };
  // Member 0 starts chunk s7, and job 8's chunk s8 finds it in its slot at
  // once: the others' first sends may be on their way.
  EXPECT_TRUE(refused({0}, Contribution(7, s7, 0, Int32Payload({1}), DType::kInt32,
                                        ReduceOp::kSum, 0x5eed, -1, s7))
                  .empty())
      << "within a resend gap of the chunk's first contribution";
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();  // a poll reads the clock for the next one
  // A gap later: told, once for both refusals of the burst.
  EXPECT_EQ(refused({1, 0}), (std::multiset<uint16_t>{1, 2}));
  EXPECT_EQ(Agg().busy_notices.Get(), 2u);
  // Member 1's data comes; after twice the gap the next refusal tells
  // member 2 alone.
  Inject(0, Contribution(7, s7, 1, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1,
                         s7));
  Step();
  std::this_thread::sleep_for(std::chrono::milliseconds(11));
  Step();
  EXPECT_EQ(refused({1}), (std::multiset<uint16_t>{2}));
  EXPECT_EQ(Agg().busy_notices.Get(), 3u);
  // Member 2's data completes the chunk, whose result its slot keeps until
  // job 7's members move past it: a complete chunk lacks nobody.
  Inject(0, Contribution(7, s7, 2, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1,
                         s7));
  Step();
  EXPECT_EQ(WithOpcode(Drain()[0], aggregator::Opcode::kResult).size(), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(21));
  Step();
  EXPECT_TRUE(refused({0}).empty());
  EXPECT_EQ(Agg().busy_notices.Get(), 3u);
  EXPECT_EQ(Agg().slot_busy.Get(), 5u);
}

// A float sum at a root whose TAN is remote (agg-ps), a member of which lost
// a chunk's result when the switch restarted (MembersAroundALostResult):
// member 0 is past the chunk, member 2 resends its data. The TAN answers
// the slot's partial with the result it keeps of a finished chunk; one it
// does not hold it would reduce anew, in its own order, from the members'
// data, to other bytes than member 0 holds: member 0 is not asked for its
// data, and the question goes to the TAN. The same chunk as a max (the same
// bytes in any order): member 0 is asked (seed 1795673).
TEST_F(ParameterNodeTest, ARootWithARemoteTanAsksNoMemberPastAFloatSumForItsData) {
  AddJobWithPs(7, 3);
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    const uint32_t seq = op == ReduceOp::kSum ? 5 : 15;
    MembersAroundALostResult(7, seq, op);
    const uint64_t resyncs = Agg().resync_notices.Get();
    const uint64_t asked = Agg().queries_up.Get();
    auto out = AskAfter(7, seq, 2, /*watermark=*/seq);
    const std::map<uint32_t, uint32_t> told = NoticeKinds(out[0], seq);
    EXPECT_EQ(Agg().results_lost.Get(), 0u) << "the TAN may hold the result";
    EXPECT_EQ(Agg().queries_up.Get(), asked + 1) << "the TAN is asked";
    if (op == ReduceOp::kMax) {
      ASSERT_EQ(told.count(MemberIp(0)), 1u);
      EXPECT_EQ(told.at(MemberIp(0)), static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
      EXPECT_EQ(Agg().resync_notices.Get(), resyncs + 1);
      continue;
    }
    EXPECT_EQ(told.count(MemberIp(0)), 0u) << "asked, its data would be reduced anew";
    EXPECT_EQ(Agg().resync_notices.Get(), resyncs) << "nobody asked for data again";
  }
}

// A switch that restarted after sending a chunk's result to some members
// only: those members reduced it in place and went on, the others resend
// the chunk to the new process, whose slot then waits for data the first
// ones will not send again unasked. A member whose ack watermark is past
// the chunk has its result: while a held member asks after the chunk, each
// such member is told the switch lacks its data (NOTICE missing); a member
// whose watermark is not past the chunk (not heard from, or behind) is
// not. With their resends the chunk completes.
TEST_F(AggregationTest, MembersPastAChunkTheSlotLacksAreAskedForIt) {
  AddJob(7, 4);
  const std::vector<uint8_t> one = Int32Payload({1});
  // Member 2 lost the result of chunk 5 with the old process and resends it;
  // member 0 had it, and sends chunk 9 with watermark 9; member 1 is
  // behind, at chunk 4 with watermark 4; member 3 sent nothing yet.
  Frame resent = Contribution(7, 5, 2, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/5);
  HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resent);
  Inject(0, Contribution(7, 9, 0, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/9));
  Inject(0, Contribution(7, 4, 1, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/4));
  Step();
  (void)Drain();
  EXPECT_EQ(Agg().resync_notices.Get(), 0u) << "nobody asked after chunk 5 yet";
  auto out = AskAfter(7, 5, 2, /*watermark=*/5);
  const std::map<uint32_t, uint32_t> told = NoticeKinds(out[0], 5);
  EXPECT_EQ(out[0].size(), told.size()) << "NOTICEs only";
  const auto held = static_cast<uint32_t>(aggregator::NoticeKind::kHeld);
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  EXPECT_EQ(told, (std::map<uint32_t, uint32_t>{{MemberIp(2), held}, {MemberIp(0), missing}}));
  EXPECT_EQ(Agg().resync_notices.Get(), 1u);
  EXPECT_EQ(Agg().gap_notices.Get(), 0u);

  // Member 0 resends its kept chunk 5; 1 and 3 send theirs: the sum of all four.
  Frame again = Contribution(7, 5, 0, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/10);
  HeaderOf(again)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, again);
  Inject(0, Contribution(7, 5, 1, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/5));
  Inject(0, Contribution(7, 5, 3, one, DType::kInt32, ReduceOp::kSum, 0x5eed, -1, /*ack=*/5));
  Step();
  const std::vector<Result> results = WithOpcode(Drain()[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 4u);
  for (const Result& r : results) EXPECT_EQ(r.payload, Int32Payload({4}));
  EXPECT_EQ(Agg().resync_notices.Get(), 1u);
}

}  // namespace
}  // namespace aggswitch::dataplane
