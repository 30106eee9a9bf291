// What comes down about what a switch sent up (from_above_node.h), in the
// running aggregation path on net_ring ports (tree_test_fixture.h): the
// parent's NOTICE missing of a partial (sent again at once, or the awaited
// chunk's), its refusal "not now" (sent again unasked, the backoff undone),
// a root's NOTICE forgotten (the members past the chunk asked for their
// data), and the chunks that find no slot sent up as missing, the members'
// data after them as late data.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include <rte_cycles.h>

#include "dataplane/tree_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("from_above_node_test"));

// The parent says it lacks a leaf's partial (NOTICE missing, its answer
// to the leaf's QUERY or a gap it saw): the partial was lost on the way.
// The forwarded slot sends it again at once, without waiting for a
// member's question (none may come: the excluded members' data goes around
// the slot, seed 400550), once per first resend gap however many notices
// come, and keeps its chunk. A notice from another address, or one that
// is no NOTICE missing, changes nothing.
TEST_F(InBandTest, AParentsNoticeMissingOfAPartialSendsItAgainAtOnce) {
  Result first;
  ASSERT_NO_FATAL_FAILURE(LeafPartialUp(&first));

  // The parent's NOTICE (of `kind`, from `from_ip`) about chunk 0: how many
  // partials go up.
  auto notice = [&](aggregator::NoticeKind kind, uint32_t from_ip) {
    AboutPartial(aggregator::Opcode::kNotice, static_cast<uint32_t>(kind), from_ip,
                 first.fields.incarnation);
    return PartialsSent();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  EXPECT_EQ(notice(aggregator::NoticeKind::kMissing, kParentIp + 7), 0u) << "from elsewhere";
  EXPECT_EQ(notice(aggregator::NoticeKind::kHeld, kParentIp), 0u) << "no NOTICE missing";
  EXPECT_EQ(Agg().results_refused.Get(), 1u);
  EXPECT_EQ(Agg().unsupported.Get(), 1u);
  EXPECT_EQ(Agg().partials_missing_above.Get(), 0u);

  ASSERT_EQ(notice(aggregator::NoticeKind::kMissing, kParentIp), 1u) << "lost: sent again at once";
  EXPECT_EQ(Agg().partials_missing_above.Get(), 1u);
  EXPECT_EQ(notice(aggregator::NoticeKind::kMissing, kParentIp), 0u)
      << "a burst of notices sends it once";
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  EXPECT_EQ(notice(aggregator::NoticeKind::kMissing, kParentIp), 1u) << "a gap later, again";
  EXPECT_EQ(Agg().partials_missing_above.Get(), 2u);
}

// The parent says it lacks a leaf's partial of chunk 2, which the leaf's
// ranks have not sent: they wait for chunk 0's result (their watermark),
// whose partial went up and whose answer never came (lost on the way
// down). The parent is past chunk 0: the forwarded slot sends its partial
// again at once, which the parent answers with the result, once per first
// resend gap. Left to the ranks' next question, after a dead rank's chunk
// had held the parent's slot for seconds, it waited for their backed-off
// timers, past their timeout (seed 1730185). A notice about the awaited
// chunk itself goes its own way (above).
TEST_F(InBandTest, AParentsNoticeMissingOfALaterChunkSendsTheAwaitedChunksPartialAgain) {
  Result first;
  ASSERT_NO_FATAL_FAILURE(LeafPartialUp(&first));
  auto later = [&](uint32_t seq) {
    AboutPartial(aggregator::Opcode::kNotice, static_cast<uint32_t>(aggregator::NoticeKind::kMissing),
                 kParentIp, first.fields.incarnation, seq);
    size_t partials = 0;
    for (const auto& [port, frames] : Drain()) {
      for (const Result& r : Results(frames)) {
        if (r.fields.opcode != aggregator::Opcode::kPartial) continue;
        EXPECT_EQ(r.fields.seq, 0u) << "the awaited chunk's partial";
        EXPECT_EQ(r.payload, first.payload);
        ++partials;
      }
    }
    return partials;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  ASSERT_EQ(later(2), 1u) << "the chunk the ranks wait for goes again";
  EXPECT_EQ(Agg().partials_missing_above.Get(), 1u);
  EXPECT_EQ(later(3), 0u) << "a burst of notices sends it once";
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  EXPECT_EQ(later(2), 1u) << "a gap later, again";
  EXPECT_EQ(Agg().partials_missing_above.Get(), 2u);
}

// The parent refuses a leaf's partial for now (NACK slot quota: the chunk
// lies too far ahead of its slowest leaf there). Nothing was lost: the
// partial goes again on the members' next question after the first resend
// gap, as a client sends its data again soon after such a NACK, not after
// the gap its earlier resends backed off to (up to 160 ms: a root whose
// quota was smaller than the ranks' window stalled every chunk past it that
// long, seed 331507). A refusal from another address, and a NACK that is no
// refusal for now, change nothing.
TEST_F(InBandTest, AParentsRefusalForNowOfAPartialUndoesItsResendBackoff) {
  ASSERT_NO_FATAL_FAILURE(LeafPartialUp());

  // Rank 4 asks after chunk 0; whether the partial goes up again with the
  // answer.
  auto ask = [&] {
    aggregator::AggFields f = LeafChunk0(4);
    f.opcode = aggregator::Opcode::kQuery;
    Inject(0, Datagram(f));
    Step();
    return PartialsSent();
  };
  // Asked after each gap, the partial goes up three times, the gap doubling
  // to 40 ms.
  for (int gap_ms : {5, 10, 20}) {
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms + 1));
    Step();
    ASSERT_EQ(ask(), 1u) << "after " << gap_ms << " ms";
  }
  EXPECT_EQ(Agg().partials_resent.Get(), 3u);

  NackPartial(aggregator::NackReason::kSlotQuota, kParentIp + 7);
  NackPartial(aggregator::NackReason::kKeyMismatch);
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  EXPECT_EQ(ask(), 0u) << "still within the 40 ms gap";
  EXPECT_EQ(Agg().partials_refused_above.Get(), 0u);
  EXPECT_EQ(Agg().results_refused.Get(), 1u) << "the refusal from elsewhere";
  EXPECT_EQ(Agg().unsupported.Get(), 1u) << "a NACK that is no refusal for now";

  NackPartial(aggregator::NackReason::kSlotQuota);
  EXPECT_EQ(Agg().partials_refused_above.Get(), 1u);
  EXPECT_EQ(ask(), 0u) << "within the first gap of the refusal";
  std::this_thread::sleep_for(std::chrono::milliseconds(6));
  Step();
  EXPECT_EQ(ask(), 1u) << "the first gap after the refusal";
  EXPECT_EQ(Agg().partials_resent.Get(), 4u);
}

// The parent refuses a leaf's partial for now, and nobody asks: its members
// were all counted, and ask again only at their retransmission timeout,
// backed off to hundreds of milliseconds while the job stood still. The
// partial goes again on the slot's own timer a resend gap after the
// refusal, once per refusal (seed 1303202: a root whose slot quota was
// smaller than the ranks' window refused a leaf's partial at the window's
// edge about every 16 chunks, and each waited 180 to 800 ms). A refusal
// that is no "not now" (a new run) arms nothing.
TEST_F(InBandTest, AParentsRefusalForNowOfAPartialSendsItAgainUnasked) {
  ASSERT_NO_FATAL_FAILURE(LeafPartialUp());
  // Partials that left since the last look, nobody asking.
  auto partials_after = [&](int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    Step();
    return PartialsSent();
  };
  NackPartial(aggregator::NackReason::kSlotQuota);
  EXPECT_EQ(Agg().partials_refused_above.Get(), 1u);
  EXPECT_EQ(partials_after(6), 1u) << "a resend gap after the refusal, unasked";
  EXPECT_EQ(Agg().partials_resent.Get(), 1u);
  EXPECT_EQ(partials_after(12), 0u) << "once per refusal";

  NackPartial(aggregator::NackReason::kSlotBusy);
  EXPECT_EQ(partials_after(6), 1u) << "refused again, sent again";
  EXPECT_EQ(Agg().partials_resent.Get(), 2u);

  NackPartial(aggregator::NackReason::kNewRun);
  EXPECT_EQ(Agg().partials_refused_above.Get(), 3u);
  EXPECT_EQ(partials_after(12), 0u) << "a new run is no refusal for now";
}

// A leaf's partial was lost on the way (here: dropped), listing member 1
// missing, and its expired slot gave way to another chunk. Member 1's data
// then goes around a slot as late data by its entry, as does every
// excluded member's, and nothing sent the chunk up again: the parent
// waited for this leaf for good (seed 400550). Its NOTICE missing marks
// the chunk, and the next member data to it sends the chunk up as missing
// (the NOTICE has no chunk's shape; the data has), once, before the data
// goes on late.
TEST_F(ParameterNodeTest, AParentsNoticeMissingOfAChunkWithNoSlotSendsItUpAsMissing) {
  auto ParseAll = [](const std::vector<Frame>& frames) {
    std::vector<Result> out;
    for (const Frame& f : frames) out.push_back(ParseResult(f));
    return out;
  };
  const uint32_t s7 = TimedOutChunkGaveWay();
  auto notice = [&] {
    Inject(1, MissingFromParent(7, s7));
    Step();
  };
  notice();
  notice();
  EXPECT_TRUE(Drain().empty()) << "nothing to send it with yet";
  EXPECT_EQ(Agg().unsupported.Get(), 0u);

  Inject(0, Contribution(7, s7, 1, Int32Payload({2})));
  Step();
  std::vector<Result> up = ParseAll(Drain()[1]);
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[0].fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_TRUE(up[0].fields.flags & aggregator::flags::kConflict) << "up as missing";
  EXPECT_EQ(up[0].fields.seq, s7);
  EXPECT_EQ(up[1].fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(Agg().partials_missing_above.Get(), 1u);

  // Member 0's resend goes on late by the entries that partial wrote, and
  // sends nothing up again.
  Frame again = Contribution(7, s7, 0, Int32Payload({1}));
  HeaderOf(again)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, again);
  Step();
  up = ParseAll(Drain()[1]);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(Agg().partials_missing_above.Get(), 1u);
}

// A chunk that finds no slot at a switch of a tree (no spare slot, no room
// to move) goes up as if its slot had timed out with nobody in: a partial of
// the sum's identity, flagged CONFLICT, that lists every member, and their
// data after it as late data through the bypass entries it left. The TAN
// (here the parameter node's, standing in for the tree above) folds them in,
// and the result from above reaches both members, exact; nobody is refused.
TEST_F(ParameterNodeTest, ALeafSendsAChunkWithNoSlotUpAsMissing) {
  BuildAggregation(", spare_slots: 0");
  AddLeafJob(7, 2);
  AddLeafJob(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  Inject(0, Contribution(7, s7, 0, Int32Payload({1})));  // holds the slot
  Inject(0, Contribution(8, s8, 0, Int32Payload({100})));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  const Result up = ParseResult(out[1][0]);
  EXPECT_EQ(up.fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(up.fields.flags, aggregator::flags::kConflict);
  EXPECT_EQ(up.fields.node_id, kLeafNode);
  EXPECT_EQ(up.fields.seq, s8);
  EXPECT_EQ(up.payload, Int32Payload({0}));
  const Result late = ParseResult(out[1][1]);
  EXPECT_EQ(late.fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(late.fields.node_id, 0);
  EXPECT_NE(late.fields.flags & aggregator::flags::kBypass, 0);
  Inject(0, Contribution(8, s8, 1, Int32Payload({200})));
  Step();
  auto second = Drain();
  ASSERT_EQ(second[1].size(), 1u) << "late data behind the partial, no second partial";
  EXPECT_EQ(ParseResult(second[1][0]).fields.opcode, aggregator::Opcode::kLate);
  out[1].push_back(second[1][0]);
  const std::vector<Result> sent = ThroughPs(out[1]);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(ps_.tan().counters().first_data, 1u);
  ExpectResults(8, 300, 2);
  EXPECT_EQ(Agg().conflicts_up.Get(), 1u);
  EXPECT_EQ(Agg().collisions.Get(), 1u) << "the second member matched its bypass entry first";
  EXPECT_EQ(Agg().slot_busy.Get(), 0u);
  Inject(0, Contribution(7, s7, 1, Int32Payload({2})));
  Step();
  out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(ParseResult(out[1][0]).payload, Int32Payload({3})) << "job 7's partial, as usual";
}

// A FINAL chunk that goes up as missing stays FINAL: the TAN returns FINAL
// with its result, and the root delivers that to the main server.
TEST_F(ParameterNodeTest, AFinalChunkGoesUpAsMissingStillFinal) {
  BuildAggregation(", spare_slots: 0");
  AddLeafJob(7, 2);
  AddLeafJob(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  Inject(0, Contribution(7, s7, 0, Int32Payload({1})));  // holds the slot
  Inject(0, Final(Contribution(8, s8, 0, Int32Payload({100}))));
  Step();
  const std::vector<Result> up = WithOpcode(Drain()[1], aggregator::Opcode::kPartial);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.seq, s8);
  EXPECT_EQ(up[0].fields.flags, aggregator::flags::kConflict | aggregator::flags::kFinal);
}

// A root that restarted after a chunk's result reached this leaf's members
// lacks the leaf's data, and the leaf's complete slot still holds the
// result: the members' resends would be answered with it, and their data
// never go up. The root's NOTICE forgotten makes the slot give way and
// asks each member past the chunk for its kept data (NOTICE missing), not
// one behind it; the resends complete a slot claimed anew, whose partial
// goes up.
TEST_F(ParameterNodeTest, ARootsNoticeForgottenAsksTheMembersPastTheChunkForTheirData) {
  AddLeafJob(7, 3);
  const uint32_t seq = 5;
  for (uint16_t m = 0; m < 3; ++m) Inject(0, Contribution(7, seq, m, Int32Payload({1})));
  Step();
  ASSERT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u);
  Inject(1, ResultFromParent(7, seq, 3));
  Step();
  ExpectResults(7, 3, 3);
  // Members 0 and 1 move on past the chunk; member 2 acknowledges nothing.
  Inject(0, MemberAck(7, 0, seq + 1));
  Inject(0, MemberAck(7, 1, seq + 1));
  Step();
  (void)Drain();

  Inject(1, ForgottenFromParent(7, seq));
  Step();
  auto out = Drain();
  EXPECT_EQ(Agg().unsupported.Get(), 0u);
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  EXPECT_EQ(NoticeKinds(out[0], seq),
            (std::map<uint32_t, uint32_t>{{MemberIp(0), missing}, {MemberIp(1), missing}}));
  EXPECT_EQ(Agg().resync_notices.Get(), 2u);
  EXPECT_EQ(Agg().forgotten_released.Get(), 1u);
  EXPECT_TRUE(out[1].empty());

  for (uint16_t m = 0; m < 2; ++m) {
    Frame again = Contribution(7, seq, m, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                               -1, /*ack=*/seq + 1);
    HeaderOf(again)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
    Inject(0, again);
  }
  Inject(0, Contribution(7, seq, 2, Int32Payload({1})));
  Step();
  out = Drain();
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kResult).empty()) << "no stale result";
  const std::vector<Result> up = WithOpcode(out[1], aggregator::Opcode::kPartial);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.seq, seq);
  EXPECT_EQ(up[0].payload, Int32Payload({3}));
}

// A float sum is never computed again (its order would change its bytes),
// so a root never asks for one; a NOTICE forgotten for one leaves its
// complete slot here, which answers the members' resends with the result
// they share, and asks nobody for data.
TEST_F(ParameterNodeTest, ANoticeForgottenLeavesAFloatSumsCompleteSlot) {
  AddLeafJob(7, 3);
  const uint32_t seq = 5;
  for (uint16_t m = 0; m < 3; ++m) {
    Inject(0, Contribution(7, seq, m, Float32Payload({0.1f}), DType::kFloat32));
  }
  Step();
  ASSERT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u);
  aggregator::AggFields r;
  r.opcode = aggregator::Opcode::kResult;
  r.job_id = 7;
  r.seq = seq;
  r.elem_count = 1;
  r.dtype = DType::kFloat32;
  r.incarnation = jobs_->Find(7)->label();
  const std::vector<uint8_t> sum = Float32Payload({0.3f});
  Inject(1, DatagramFrom(r, sum, MemberMac(kPs), MemberIp(kPs), aggregator::kAggUdpPort));
  Step();
  ASSERT_EQ(WithOpcode(Drain()[0], aggregator::Opcode::kResult).size(), 3u);
  Inject(0, MemberAck(7, 0, seq + 1));
  Step();
  (void)Drain();

  Inject(1, ForgottenFromParent(7, seq));
  Step();
  auto out = Drain();
  EXPECT_TRUE(out[0].empty()) << "nobody asked for data";
  EXPECT_TRUE(out[1].empty());
  EXPECT_EQ(Agg().forgotten_released.Get(), 0u);
  EXPECT_EQ(Agg().resync_notices.Get(), 0u);

  Frame again = Contribution(7, seq, 2, Float32Payload({0.1f}), DType::kFloat32);
  HeaderOf(again)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, again);
  Step();
  const std::vector<Result> results = WithOpcode(Drain()[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 1u) << "the kept result";
  EXPECT_EQ(results[0].payload, sum);
}

TEST_F(ParameterNodeTest, ATreeRootSendsAChunkWithNoSlotToTheTanAsMissing) {
  BuildAggregation(", spare_slots: 0");
  AddJobWithPs(7, 2);
  AddRootOverChild(8);
  // Worker 0 has sent; the child's partial below is the last member's first.
  Heard(8, 1);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  Inject(0, Contribution(7, s7, 0, Int32Payload({1})));  // holds the slot
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kPartial;
  f.node_id = kChild;
  f.job_id = 8;
  f.seq = s8;
  f.job_key = 0x5eed;
  f.elem_count = 1;
  const uint16_t child_missing[] = {5};
  std::vector<uint8_t> partial(256);
  partial.resize(aggregator::BuildAggregation(f, child_missing, 1, Int32Payload({40}).data(), 4,
                                              partial.data(), 256));
  Frame frame(46 + partial.size());
  const uint32_t hdr = WriteUdpHeaders(frame.data(), kSwitchMac.bytes.data(),
                                       MemberMac(kChild).bytes.data(), 0, MemberIp(kChild), kAggIp,
                                       MemberPort(kChild), aggregator::kAggUdpPort, 1,
                                       static_cast<uint32_t>(partial.size()));
  frame.resize(hdr + partial.size());
  std::memcpy(frame.data() + hdr, partial.data(), partial.size());
  Inject(0, frame);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  const Result first = ParseResult(out[1][0]);
  EXPECT_EQ(first.fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(first.fields.flags, aggregator::flags::kConflict);
  EXPECT_EQ(ParseResult(out[1][1]).fields.opcode, aggregator::Opcode::kLate);
  Inject(0, Contribution(8, s8, 0, Int32Payload({3})));
  Step();
  auto more = Drain();
  ASSERT_EQ(more[1].size(), 1u);
  out[1].push_back(more[1][0]);
  (void)ThroughPs(out[1]);
  EXPECT_EQ(Drain().count(0), 0u) << "node 5, which the child's partial lacks, is still out";
  aggregator::AggFields late5 = f;
  late5.opcode = aggregator::Opcode::kLate;
  late5.flags = aggregator::flags::kBypass;
  late5.node_id = 5;
  std::vector<uint8_t> d(128);
  d.resize(aggregator::BuildAggregation(late5, nullptr, 0, Int32Payload({500}).data(), 4,
                                        d.data(), 128));
  aggregator::AggPacket pkt;
  ASSERT_EQ(aggregator::ParseAggregation(d.data(), static_cast<uint32_t>(d.size()), &pkt),
            aggregator::WireError::kOk);
  std::vector<aggregator::TanOutput> answers;
  ps_.OnDatagram(pkt, {MemberIp(kChild), aggregator::kAggUdpPort}, ++now_ns_, &answers);
  ASSERT_EQ(answers.size(), 1u);
  aggregator::AggPacket result;
  ASSERT_EQ(aggregator::ParseAggregation(answers[0].datagram.data(),
                                         static_cast<uint32_t>(answers[0].datagram.size()), &result),
            aggregator::WireError::kOk);
  EXPECT_EQ(result.opcode, aggregator::Opcode::kResult);
  int32_t sum = 0;
  std::memcpy(&sum, result.payload, 4);
  EXPECT_EQ(sum, 543);
  EXPECT_EQ(Agg().conflicts_up.Get(), 1u);
  EXPECT_EQ(Agg().slot_busy.Get(), 0u);
}

// An in-band job of two leaves is registered at its root by a leaf's
// partial, with the leaves as its members: child switches, as a configured
// tree's. A leaf's partial that finds no slot there (a result of another
// job holds it, no spare slot, no room to move) goes to the TAN as missing,
// a CONFLICT first data that lists both leaves, and the partials behind it
// as late data; nobody is refused. It was refused NACK slot_busy, and the
// leaf kept that partial's slot until the answer came down: a chunk of the
// other job refused there in turn kept its watermark, and with it the
// result that kept the partial out, until the TAN gave the chunk up
// (INCOMPLETE, seed 666491).
TEST_F(ParameterNodeTest, AnInBandTreeRootSendsALeafsPartialWithNoSlotToTheTanAsMissing) {
  BuildAggregation(", spare_slots: 0, tan: {strategy: fixed, candidates: [{address: 10.1.0.60}]}");
  ASSERT_EQ(MemberIp(kPs), 0x0a01003cu) << "the candidate above";
  const auto partial = [](uint32_t job, uint32_t seq, uint16_t leaf, int32_t value) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kPartial;
    f.flags = aggregator::flags::kTaskInfo;
    f.node_id = static_cast<uint16_t>(control::kInBandLeafBase + leaf);
    f.job_id = job;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.expected = 2;  // the leaves
    f.node_count = 1;
    f.elem_count = 1;
    return Datagram(f, Int32Payload({value}));
  };
  // Job 21's chunk 0 completes: its result stays in its slot until both
  // leaves acknowledge it.
  Inject(0, partial(21, 0, 0, 1));
  Inject(0, partial(21, 0, 1, 2));
  Step();
  Register();
  Step();
  const aggregator::Job* job21 = jobs_->Find(21);
  ASSERT_NE(job21, nullptr);
  EXPECT_TRUE(job21->is_root());
  EXPECT_TRUE(job21->IsSwitch(0));
  EXPECT_TRUE(job21->IsSwitch(1));
  EXPECT_EQ(WithOpcode(Drain()[0], aggregator::Opcode::kResult).size(), 2u);
  // Job 22, registered by an acknowledgement-free chunk elsewhere, then the
  // chunk whose home slot job 21's result holds.
  const aggregator::SlotRegions regions = aggregator::SlotRegions::Make(
      config_.aggregation.slots, config_.aggregation.InBandSlots(),
      config_.aggregation.SpareSlots());
  const uint32_t held = regions.Of(true, job21->placement(), 0);
  Inject(0, partial(22, 0, 0, 0));
  Step();
  Register();
  Step();
  const aggregator::Job* job22 = jobs_->Find(22);
  ASSERT_NE(job22, nullptr);
  job22->SetHop(aggregator::Job::kTanHop, PsHop());
  uint32_t s22 = 1;
  while (regions.Of(true, job22->placement(), s22) != held) ++s22;
  ASSERT_LT(s22, job22->slot_quota()) << "within the job's slot quota";
  (void)Drain();
  Inject(0, partial(22, s22, 0, 30));
  Step();
  auto out = Drain();
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kNack).empty()) << "no NACK slot_busy";
  ASSERT_EQ(out[1].size(), 2u);
  const Result first = ParseResult(out[1][0]);
  EXPECT_EQ(first.fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(first.fields.flags & aggregator::flags::kConflict, aggregator::flags::kConflict);
  EXPECT_EQ(first.fields.seq, s22);
  const aggregator::AggHeader* h = HeaderOf(out[1][0]);
  ASSERT_EQ(h->missing_count, 2);
  const auto* ids = reinterpret_cast<const uint8_t*>(h + 1);
  EXPECT_EQ(ids[0] << 8 | ids[1], control::kInBandLeafBase) << "every leaf listed";
  EXPECT_EQ(ids[2] << 8 | ids[3], control::kInBandLeafBase + 1);
  const Result late = ParseResult(out[1][1]);
  EXPECT_EQ(late.fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(late.fields.node_id, control::kInBandLeafBase);
  Inject(0, partial(22, s22, 1, 40));
  Step();
  auto second = Drain();
  ASSERT_EQ(second[1].size(), 1u) << "the other leaf's partial behind it, as late data";
  EXPECT_EQ(ParseResult(second[1][0]).fields.opcode, aggregator::Opcode::kLate);
  out[1].push_back(second[1][0]);
  (void)ThroughPs(out[1]);
  ExpectResults(22, 70, 2);
  EXPECT_EQ(Agg().conflicts_up.Get(), 1u);
  EXPECT_EQ(Agg().slot_busy.Get(), 0u);
}

// A member's data for a chunk that went up as missing here follows it as
// late data, even when the control thread has given the chunk a spare slot
// meanwhile. The chunk's first contributions waited for the control
// thread's answer when a member's resend for the parameter node sent the
// chunk up as missing (bypass entries for every member, on the worker that
// owns its home slot); the spare slot the answer brings belongs to the other
// worker, which has no entries. The held contributions go up behind the
// partial as late data: none is counted in the spare slot (and then again as
// late data), and no partial of the spare slot follows.
TEST_F(ParameterNodeTest, AMembersDataFollowsItsChunkUpAsMissingEvenWhenTheChunkGotASpareSlot) {
  BuildAggregationOnTwoWorkers(", spare_slots: 1");
  AddLeafJob(7, 2);
  AddLeafJob(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  const aggregator::SlotRegions& regions = dp_->slot_regions();
  const uint32_t home = regions.Of(false, jobs_->Find(8)->placement(), s8);
  ASSERT_EQ(home % 2, 0u) << "worker 0 owns the chunk's home slot";
  ASSERT_EQ(regions.Spare(0) % 2, 1u) << "worker 1 owns the spare slot";
  Inject(0, Contribution(7, s7, 0, Int32Payload({1})));  // holds the slot
  StepWorkers();
  Inject(0, Contribution(8, s8, 0, Int32Payload({100})));
  Inject(0, Contribution(8, s8, 1, Int32Payload({200})));
  StepWorkers();
  EXPECT_TRUE(Drain().empty()) << "both contributions wait for the control thread";
  EXPECT_EQ(Agg().escalations.Get(), 2u);
  // Member 1 resends for the parameter node: the chunk goes up as missing.
  Inject(0, ForPs(8, s8, 1, 2, {200}));
  StepWorkers();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  const Result up = ParseResult(out[1][0]);
  EXPECT_EQ(up.fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(up.fields.flags, aggregator::flags::kConflict);
  EXPECT_EQ(MissingCount(out[1][0]), 2);
  EXPECT_EQ(ParseResult(out[1][1]).fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(Agg().conflicts_up.Get(), 1u);
  // The control thread answers both escalations with the spare slot.
  EXPECT_EQ(dp_->ProcessEscalations(std::chrono::steady_clock::now()), 2u);
  EXPECT_EQ(dp_->escalation_stats().granted, 1u);
  StepWorkers();
  out = Drain();
  EXPECT_EQ(out.count(0), 0u) << "no member is told of the spare slot";
  EXPECT_TRUE(WithOpcode(out[1], aggregator::Opcode::kPartial).empty())
      << "no partial of the spare slot";
  std::set<uint32_t> late_from;
  for (const Result& r : WithOpcode(out[1], aggregator::Opcode::kLate)) {
    EXPECT_EQ(r.fields.seq, s8);
    late_from.insert(r.fields.node_id);
  }
  EXPECT_EQ(late_from, (std::set<uint32_t>{0, 1})) << "both held contributions, as late data";
  EXPECT_EQ(out[1].size(), 2u);
  EXPECT_EQ(Agg().late_flagged.Get(), 3u) << "the resend and both held contributions";
  EXPECT_EQ(dp_->worker_stats(1).lcore.agg.contributions.Get(), 0u)
      << "nothing counted in the spare slot";
  EXPECT_EQ(dp_->worker_stats(1).lcore.agg.partials_sent.Get(), 0u);
}
}  // namespace
}  // namespace aggswitch::dataplane
