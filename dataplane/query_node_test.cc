// A member's question about a chunk (query_node.h) in the running
// aggregation path on net_ring ports (tree_test_fixture.h): answered from
// the chunk's slot (its result, held, missing), NACK result_lost where a
// float sum's result only some members hold cannot be had again, a kept
// result at a root without a TAN, and the parent or TAN asked.
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

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment("query_node_test"));

// Job 7 of three members at a root that is its own TAN, with a 10 ms slot
// timer.
aggregator::JobSpec OwnTanJobWithTimer() {
  aggregator::JobSpec spec;
  spec.id = 7;
  spec.key = 0x5eed;
  spec.members = 3;
  spec.tan = aggregator::JobSpec::Tan::kSelf;
  spec.timeout_cycles = rte_get_tsc_hz() / 100;
  return spec;
}

// A member's QUERY about a chunk it sent (a header, no data) is answered
// from the chunk's slot: NOTICE held while the slot waits for others,
// NOTICE missing when the switch lacks its contribution (or the job), its
// result again once the slot is complete. A QUERY is never counted into a
// slot, and carries the key like any datagram from a member.
TEST_F(AggregationTest, QueriesAreAnsweredFromTheChunksSlot) {
  AddJob(7, 3);
  const auto query = [](uint32_t job, uint32_t seq, uint16_t node, uint64_t key = 0x5eed) {
    return Datagram(QueryFields(job, seq, node, key));
  };
  const auto notice = [](const Frame& f) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNotice);
    EXPECT_TRUE(r.payload.empty());
    return r;
  };
  Inject(0, Contribution(7, 1, 0, Int32Payload({1, 2})));
  Inject(0, query(7, 1, 0));  // node 0 contributed: held, 2 members awaited
  Inject(0, query(7, 1, 1));  // node 1 did not: missing
  Inject(0, query(7, 2, 0));  // a chunk nobody sent: missing
  Inject(0, query(9, 1, 0));  // a job the switch does not know: missing
  Step();
  auto out = Drain();
  // Answers leave in the order the stages make them: each one by its chunk.
  ASSERT_EQ(out[0].size(), 4u);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Result> answers;  // job, seq, member IP
  for (const Frame& f : out[0]) {
    const Result r = notice(f);
    EXPECT_EQ(r.fields.job_key, 0u) << "answers carry no key";
    answers[{r.fields.job_id, r.fields.seq, r.dst_ip}] = r;
  }
  const auto kind = [&](uint32_t job, uint32_t seq, uint16_t node) {
    const auto it = answers.find({job, seq, MemberIp(node)});
    return it == answers.end() ? 0u : it->second.fields.aux;
  };
  const auto held = static_cast<uint32_t>(aggregator::NoticeKind::kHeld);
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  EXPECT_EQ(kind(7, 1, 0), held);
  const Result& held_one = answers[std::make_tuple(7u, 1u, MemberIp(0))];
  EXPECT_EQ(held_one.fields.expected, 2u) << "members still awaited";
  EXPECT_EQ(kind(7, 1, 1), missing);
  EXPECT_EQ(kind(7, 2, 0), missing);
  EXPECT_EQ(kind(9, 1, 0), missing);
  EXPECT_EQ(Agg().queries.Get(), 4u);
  EXPECT_EQ(Agg().held_notices.Get(), 1u);
  EXPECT_EQ(Agg().missing_notices.Get(), 3u);
  EXPECT_EQ(Agg().contributions.Get(), 1u) << "a query counts for nothing";
  EXPECT_EQ(Agg().unknown_jobs.Get(), 0u) << "a query for an unknown job is answered, not refused";

  Inject(0, Contribution(7, 1, 1, Int32Payload({10, 20})));
  Inject(0, Contribution(7, 1, 2, Int32Payload({100, 200})));
  Step();
  ASSERT_EQ(Drain()[0].size(), 3u);
  Inject(0, query(7, 1, 2));  // its result was lost: sent again, to it alone
  Inject(0, query(7, 1, 0, /*key=*/0xbad));
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 2u);
  Result again{}, refused{};
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    (r.fields.opcode == aggregator::Opcode::kResult ? again : refused) = r;
  }
  EXPECT_EQ(again.fields.opcode, aggregator::Opcode::kResult);
  EXPECT_EQ(again.dst_ip, MemberIp(2));
  EXPECT_EQ(again.payload, Int32Payload({111, 222}));
  EXPECT_EQ(refused.fields.opcode, aggregator::Opcode::kNack);
  EXPECT_EQ(refused.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kKeyMismatch));
  EXPECT_EQ(Agg().duplicate_results.Get(), 1u);
  EXPECT_EQ(Agg().contributions.Get(), 3u);
}

// As above, but a float32 sum in arrival order: the data the members past
// the chunk would resend reduces, in another order, to other bytes than
// the result they hold, and the ranks would disagree. The root, which has
// no TAN that could still hold the result, asks none of them for its data
// and tells the member that asks after the chunk that its result is lost
// (NACK result_lost). A float max, the same in any order, is asked again.
TEST_F(AggregationTest, AFloatSumWhoseResultOnlySomeMembersHoldIsLost) {
  AddJob(7, 3);
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    const uint32_t seq = op == ReduceOp::kSum ? 5 : 15;
    MembersAroundALostResult(7, seq, op);
    const uint64_t resyncs = Agg().resync_notices.Get();
    auto out = AskAfter(7, seq, 2, /*watermark=*/seq);
    if (op == ReduceOp::kMax) {
      const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
      EXPECT_EQ(NoticeKinds(out[0], seq).at(MemberIp(0)), missing);
      EXPECT_EQ(Agg().resync_notices.Get(), resyncs + 1);
      continue;
    }
    ExpectResultLost(out[0], seq, 2);
    EXPECT_EQ(Agg().resync_notices.Get(), resyncs) << "nobody asked for data again";
    EXPECT_EQ(Agg().results_lost.Get(), 1u);
  }
}

// An ordered float32 sum at a root that is its own TAN. A slot reduces in
// member order, the TAN the first data and then the lates in node order:
// a chunk reduced anew from resent data may round otherwise than the
// result the members past it hold. The TAN keeps a finished chunk's
// result for whoever asks, but not across a restart of the switch. A
// member whose first watermark here was already past the chunk had its
// result from the process before: the member that asks after the chunk
// is told its result is lost. One that moved past the chunk since is
// asked for its data, as without a TAN.
TEST_F(AggregationTest, AnOrderedFloatSumAtItsOwnTanIsLostOnlyAcrossARestart) {
  const std::vector<uint8_t> f = Float32Payload({0.1f});
  for (const bool restarted : {true, false}) {
    const uint32_t id = restarted ? 7 : 8;
    AddJob(id, 3, /*ordered=*/true, 0x5eed, aggregator::JobSpec::Tan::kSelf);
    const uint32_t seq = 5;
    const auto send = [&](uint32_t s, uint16_t node, uint32_t ack, bool resend) {
      Inject(0, Flagged(Contribution(id, s, node, f, DType::kFloat32, ReduceOp::kSum, 0x5eed, -1, ack),
                        true, resend));
    };
    // Member 2 resends chunk seq, whose result it lacks; member 1 is behind.
    // Member 0 has the result: its first datagram here is past the chunk
    // (the switch started after), or it sent before the chunk first.
    send(seq, 2, seq, true);
    if (!restarted) send(seq - 1, 0, seq - 1, false);
    send(seq + 4, 0, seq + 4, false);
    send(seq - 1, 1, seq - 1, false);
    Step();
    (void)Drain();
    const uint64_t resyncs = Agg().resync_notices.Get();
    const uint64_t lost = Agg().results_lost.Get();
    auto out = AskAfter(id, seq, 2, /*watermark=*/seq);
    if (!restarted) {
      const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
      EXPECT_EQ(NoticeKinds(out[0], seq).at(MemberIp(0)), missing);
      EXPECT_EQ(Agg().resync_notices.Get(), resyncs + 1);
      EXPECT_EQ(Agg().results_lost.Get(), lost);
      continue;
    }
    ExpectResultLost(out[0], seq, 2);
    EXPECT_EQ(Agg().resync_notices.Get(), resyncs) << "nobody asked for data again";
    EXPECT_EQ(Agg().results_lost.Get(), lost + 1);
  }
}

// A float sum at a root that is its own TAN, without a restart: member 0's
// chunk times out alone, its first data goes to the TAN, and members 1 and
// 2 send theirs around the slot as late data; the TAN's result reaches
// them, and they move past the chunk. Member 0's copy is lost, and it asks
// after the chunk: the TAN still holds the result and answers the first
// data sent again with it, so the member is told `held`, not that its
// result is lost (seed 1491406: the query was refused NACK result_lost,
// which only a restart of the switch since the others had the result
// warrants, and the rank failed).
TEST_F(AggregationTest, AFloatSumAtItsOwnTanIsNotLostWithoutARestart) {
  ASSERT_TRUE(jobs_->Add(OwnTanJobWithTimer()).ok());
  const std::vector<uint8_t> f = Float32Payload({0.1f});
  const uint32_t seq = 5;
  const auto send = [&](uint32_t s, uint16_t node, uint32_t ack) {
    Inject(0, Contribution(7, s, node, f, DType::kFloat32, ReduceOp::kSum, 0x5eed, -1, ack));
  };
  // Members 1 and 2 are heard from before the chunk.
  send(seq - 1, 1, seq - 1);
  send(seq - 1, 2, seq - 1);
  send(seq, 0, seq);
  Step();
  rte_delay_ms(15);  // chunk seq times out with member 0 alone
  Step();
  (void)Drain();
  // The TAN's result reached members 1 and 2: they are past the chunk.
  send(seq + 1, 1, seq + 1);
  send(seq + 1, 2, seq + 1);
  Step();
  (void)Drain();
  const uint64_t resent = Agg().partials_resent.Get();
  auto out = AskAfter(7, seq, 0, /*watermark=*/seq);
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kNack).empty());
  const std::map<uint32_t, uint32_t> told = NoticeKinds(out[0], seq);
  ASSERT_EQ(told.count(MemberIp(0)), 1u);
  EXPECT_EQ(told.at(MemberIp(0)), static_cast<uint32_t>(aggregator::NoticeKind::kHeld));
  EXPECT_EQ(Agg().results_lost.Get(), 0u);
  EXPECT_EQ(Agg().partials_resent.Get(), resent + 1) << "the first data again, for the result";
}

// At a root that is its own TAN, member 0's chunk times out alone and its
// first data goes to the TAN; the slot waits there for the answer. Member 1
// asks after the chunk: its data is not in the slot, but may have reached
// the TAN as late data, which then holds the result. It is told to send its
// data (NOTICE missing), and the TAN is asked too: its answer completes the
// slot and reaches the member. Told only `missing`, a child switch whose
// own slot had given way began the chunk anew below, and waited for members
// that had all moved past it (seed 1655072).
TEST_F(AggregationTest, AMemberARootsSlotLacksAsksTheTanToo) {
  ASSERT_TRUE(jobs_->Add(OwnTanJobWithTimer()).ok());
  const uint32_t seq = 5;
  Inject(0, Contribution(7, seq, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, seq));
  Step();
  rte_delay_ms(15);  // chunk seq times out with member 0 alone: on to the TAN
  Step();
  (void)Drain();
  const uint64_t asked = Agg().queries_up.Get();
  auto out = AskAfter(7, seq, 1, /*watermark=*/seq);
  const std::map<uint32_t, uint32_t> told = NoticeKinds(out[0], seq);
  ASSERT_EQ(told.count(MemberIp(1)), 1u);
  EXPECT_EQ(told.at(MemberIp(1)), static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
  EXPECT_EQ(Agg().queries_up.Get(), asked + 1) << "the TAN is asked after the chunk";
}

// The same two jobs, neither with a TAN: job 7's result that gives way is
// the only copy of it, and the root keeps it (KeptResults), under the job's
// run label. Member 1 lost its copy: its resend, and its question, get the
// result from there, not a slot claimed anew that would wait for member 0,
// which moved past the chunk (seed 1740234: the child switch's resent
// partial waited so until its rank gave up).
TEST_F(AggregationTest, AResultThatGivesWayAtARootWithoutATanIsKeptForAMemberThatLostIt) {
  BuildAggregation(", spare_slots: 0");
  AddJob(7, 2);
  AddJob(8, 2);
  const auto [s7, s8] = HoldEachOthersOldest();
  const uint32_t region = dp_->slot_regions().provisioned.size;
  EXPECT_EQ(Agg().results_kept.Get(), 0u);
  // Job 8's oldest takes the slot of job 7's result of s7 + 1: kept.
  ContributeAll(8, s8 + 1, s8 + 1, 1000);
  Drain();
  EXPECT_EQ(Agg().results_kept.Get(), 1u);
  const auto expect_result_to_member_1 = [&](std::map<int, std::vector<Frame>> out,
                                             const char* what) {
    const std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
    ASSERT_EQ(results.size(), 1u) << what;
    EXPECT_EQ(results[0].fields.job_id, 7u) << what;
    EXPECT_EQ(results[0].fields.seq, s7 + 1) << what;
    EXPECT_EQ(results[0].payload, Int32Payload({2})) << what;
    EXPECT_EQ(results[0].dst_ip, MemberIp(1)) << what;
  };
  // Member 1 lost its copy and sends its data again.
  Inject(0, Contribution(7, s7 + 1, 1, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                         -1, /*ack=*/s7));
  Step();
  expect_result_to_member_1(Drain(), "a resend");
  const aggregator::Slot* claimed = nullptr;
  for (uint32_t i = 0; i < region && claimed == nullptr; ++i) {
    claimed = dp_->worker_slots(0)->Holding(i, 7, jobs_->Find(7)->generation(), s7 + 1);
  }
  EXPECT_EQ(claimed, nullptr) << "no slot is claimed for the chunk again";
  // And asks after it.
  expect_result_to_member_1(AskAfter(7, s7 + 1, 1, /*watermark=*/s7), "a question");
  EXPECT_EQ(Agg().kept_results_sent.Get(), 2u);
}

// A leaf's slot times out without member 1 (its bypass entry written), its
// partial goes up, and the slot gives way to another chunk. Member 0, which
// the partial counted, asks after the chunk and resends it: no slot holds
// the chunk, but member 0's data is in the partial, which may still wait
// for a spare slot above. It is told `held` and the parent asked, rather
// than told `missing`, its data sent up again as late data, which the TAN
// would merge before the partial and then drop the partial as overlapping
// it (seed 760173). Member 1's data goes on late by its entry. Once the
// parent says it lacks the partial, member 0 is told `missing` again.
TEST_F(ParameterNodeTest, AMemberAPartialThatWentUpCountedIsToldHeldUntilTheParentLacksIt) {
  const uint32_t s7 = TimedOutChunkGaveWay();

  const auto expect_answer = [&](aggregator::NoticeKind kind, size_t asked_up) {
    Step();
    auto out = Drain();
    ASSERT_EQ(out[0].size(), 1u);
    const Result r = ParseResult(out[0][0]);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNotice);
    EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(kind));
    EXPECT_EQ(r.fields.node_id, 0u);
    EXPECT_EQ(WithOpcode(out[1], aggregator::Opcode::kQuery).size(), asked_up);
    EXPECT_EQ(out[1].size(), asked_up) << "no partial, no late data";
  };
  Inject(0, Datagram(QueryFields(7, s7, 0)));
  expect_answer(aggregator::NoticeKind::kHeld, 1);
  Frame resend = Contribution(7, s7, 0, Int32Payload({1}));
  HeaderOf(resend)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resend);
  expect_answer(aggregator::NoticeKind::kHeld, 1);
  EXPECT_EQ(Agg().held_without_slot.Get(), 2u);

  Inject(0, Contribution(7, s7, 1, Int32Payload({2})));
  Step();
  const std::vector<Result> late = WithOpcode(Drain()[1], aggregator::Opcode::kLate);
  ASSERT_EQ(late.size(), 1u) << "member 1's data, by its entry";
  EXPECT_EQ(late[0].fields.node_id, 1u);

  Inject(1, MissingFromParent(7, s7));
  Step();
  (void)Drain();
  Inject(0, Datagram(QueryFields(7, s7, 0)));
  expect_answer(aggregator::NoticeKind::kMissing, 1);
  EXPECT_EQ(Agg().held_without_slot.Get(), 2u);
}

// The same, the result down before the resend claimed the slot again (or
// the parent's answer to the leaf's question lost): the slot counts the
// member whose copy was lost and waits for the others, which have moved
// past the chunk. Its question about the chunk asks the parent too, whose
// answer completes the slot and reaches it.
TEST_F(ParameterNodeTest, AHeldMemberOfAChunkOthersHaveAsksAbove) {
  const uint32_t s7 = GiveWayAfterGoingUp();
  Inject(1, ResultFromParent(7, s7, 3));
  Step();
  ExpectResults(7, 3, 3);  // member 2's copy is lost on the way
  // Members 0 and 1 moved on: their watermarks are past s7.
  for (uint16_t m = 0; m < 2; ++m) {
    Inject(0, Contribution(7, s7 + 1, m, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                           -1, /*ack=*/s7 + 1));
  }
  Step();
  (void)Drain();
  Frame resent = Contribution(7, s7, 2, Int32Payload({1}));
  HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resent);
  Step();
  (void)Drain();
  const uint64_t asked = Agg().queries_up.Get();
  Inject(0, Datagram(QueryFields(7, s7, 2)));
  Step();
  auto out = Drain();
  std::map<uint32_t, uint32_t> told;  // member IP -> NOTICE kind (members past it: missing)
  for (const Frame& f : out[0]) {
    const Result n = ParseResult(f);
    ASSERT_EQ(n.fields.opcode, aggregator::Opcode::kNotice);
    told[n.dst_ip] = n.fields.aux;
  }
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  EXPECT_EQ(told, (std::map<uint32_t, uint32_t>{
                      {MemberIp(0), missing},
                      {MemberIp(1), missing},
                      {MemberIp(2), static_cast<uint32_t>(aggregator::NoticeKind::kHeld)}}));
  const std::vector<Result> up = WithOpcode(out[1], aggregator::Opcode::kQuery);
  ASSERT_EQ(up.size(), 1u) << "the question to the parent";
  EXPECT_EQ(up[0].fields.seq, s7);
  EXPECT_EQ(Agg().queries_up.Get(), asked + 1);
  Inject(1, ResultFromParent(7, s7, 3));
  Step();
  ExpectResults(7, 3, 3);
  Inject(0, Datagram(QueryFields(7, s7, 2)));
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(ParseResult(out[0][0]).fields.opcode, aggregator::Opcode::kResult)
      << "the slot holds the result now";
}

// A leaf's slot gives way to another chunk once its partial went up. When
// the result then comes down, nothing holds it here; a member whose copy
// was lost asks after the chunk. It is told to resend its data (which the
// leaf cannot tell apart from a lost contribution), and the leaf asks its
// parent, which keeps the chunk until every member below acknowledged it:
// the parent's answer reaches the member. Without the question the
// member's resend would start the chunk again here, waiting for a member
// that has its result and never sends again.
TEST_F(ParameterNodeTest, ALeafAsksItsParentAfterAChunkWhoseSlotGaveWay) {
  AddLeafJob(7, 2);
  AddLeafJob(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  Inject(0, Contribution(7, s7, 0, Int32Payload({1})));
  Inject(0, Contribution(7, s7, 1, Int32Payload({2})));
  Step();
  ASSERT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u);
  Inject(0, Contribution(8, s8, 0, Int32Payload({100})));  // takes the forwarded slot
  Step();
  EXPECT_TRUE(Drain()[1].empty()) << "job 8's chunk waits for its member 1";
  Inject(1, ResultFromParent(7, s7, 3));
  Step();
  ExpectResults(7, 3, 2);  // member 1's copy is lost on the way
  aggregator::AggFields q = QueryFields(7, s7, 1);
  Inject(0, Datagram(q));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  const Result notice = ParseResult(out[0][0]);
  EXPECT_EQ(notice.fields.opcode, aggregator::Opcode::kNotice);
  EXPECT_EQ(notice.fields.aux, static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
  ASSERT_EQ(out[1].size(), 1u) << "the question to the parent";
  const Result up = ParseResult(out[1][0]);
  EXPECT_EQ(up.dst_ip, MemberIp(kPs));
  EXPECT_EQ(up.fields.opcode, aggregator::Opcode::kQuery);
  EXPECT_EQ(up.fields.node_id, kLeafNode);
  EXPECT_EQ(up.fields.job_id, 7u);
  EXPECT_EQ(up.fields.seq, s7);
  EXPECT_EQ(up.fields.job_key, 0x5eedu) << "the parent checks it";
  EXPECT_EQ(up.fields.incarnation, jobs_->Find(7)->label()) << "this switch's run";
  EXPECT_EQ(up.fields.slot_hint, aggregator::kNoSlotHint);
  EXPECT_EQ(Agg().queries_up.Get(), 1u);
  EXPECT_EQ(Agg().partials_sent.Get(), 1u) << "a question is no partial";
  // The parent answers with the chunk's result, as it answers a member.
  Inject(1, ResultFromParent(7, s7, 3));
  Step();
  ExpectResults(7, 3, 2);
  // A root asks its TAN, which keeps a finished chunk's result (a chunk
  // that went there leaves no slot at the root).
  AddJobWithPs(9, 2);
  q.job_id = 9;
  q.seq = 1;
  Inject(0, Datagram(q));
  Step();
  const std::vector<Result> asked = WithOpcode(Drain()[1], aggregator::Opcode::kQuery);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].dst_ip, MemberIp(kPs));
  EXPECT_EQ(asked[0].fields.job_id, 9u);
  EXPECT_EQ(asked[0].fields.job_key, 0x5eedu);
  EXPECT_EQ(Agg().queries_up.Get(), 2u);
}

// A leaf asks its parent only under its run's label. Before every member
// has sent in this generation (a leaf back from a restart, a member still
// backing off), a member's question is not passed up: a label fixed from
// some members would differ from the run's, the parent would take it for a
// new run, and a parameter server would apply a chunk's step again. The
// member asks again; once every member has sent, the question goes up
// under the run's label.
TEST_F(ParameterNodeTest, ALeafAsksItsParentOnlyUnderItsRunsLabel) {
  AddLeafJob(9, 2, rte_get_tsc_hz(), /*heard=*/false);
  const aggregator::Job* job = jobs_->Find(9);
  aggregator::AggFields q = QueryFields(9, 4, 0);
  q.incarnation = 0x1000;
  Inject(0, Datagram(q));
  Step();
  auto out = Drain();
  ASSERT_EQ(WithOpcode(out[0], aggregator::Opcode::kNotice).size(), 1u) << "missing, to the member";
  EXPECT_TRUE(out[1].empty()) << "member 1 has not sent: nothing goes up";
  EXPECT_EQ(job->label(), 0u) << "and no label is fixed";
  Inject(0, MemberAck(9, 1, 0));
  Inject(0, Datagram(q));
  Step();
  const uint32_t label = job->label();
  ASSERT_NE(label, 0u);
  const std::vector<Result> up = WithOpcode(Drain()[1], aggregator::Opcode::kQuery);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.incarnation, label);
}

}  // namespace
}  // namespace aggswitch::dataplane
