// What goes on unreduced (tree_bound_node.h), in the running aggregation
// path on net_ring ports (tree_test_fixture.h): a main server's DISTRIBUTE
// reaching every member once, data for the parameter node summed there,
// a retransmission releasing a partly filled slot to it, and a child's late
// data for a rank its counted partial held going no further.
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
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("tree_bound_node_test"));

// A member sends its chunks in order. When its chunk seq arrives and the
// slot of chunk seq - 3 still waits without it, that contribution was lost:
// the switch tells the member at once, NOTICE missing, unasked. Nothing is
// said about a slot the member counts in, a complete slot, or on a
// retransmission (those come out of order).
// A job with a main server at 10.1.0.200:45000 (not a member).
TEST_F(AggregationTest, DistributeFromTheMainServerReachesEveryMemberOnce) {
  aggregator::JobSpec spec;
  spec.id = 9;
  spec.key = 0x5eed;
  spec.members = 3;
  spec.main_server_ip = 0x0a0100c8;
  spec.main_server_port = 45000;
  ASSERT_TRUE(jobs_->Add(spec).ok());
  const common::MacAddr server_mac = common::MacAddr::FromU64(0x020000200000ULL);
  aggregator::AggFields d;
  d.opcode = aggregator::Opcode::kDistribute;
  d.job_id = 9;
  d.job_key = 0x5eed;
  d.seq = 4;
  d.aux = 128;  // the offset of this shard in the model
  d.elem_count = 3;
  const std::vector<uint8_t> shard = Int32Payload({7, -8, 9});

  // Members 0 and 1 have sent from their addresses, member 2 not yet.
  for (uint16_t node = 0; node < 2; ++node) Inject(0, Contribution(9, 1, node, Int32Payload({1})));
  Step();
  Drain();
  Inject(1, DatagramFrom(d, shard, server_mac, 0x0a0100c8, 45000));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  Result r = ParseResult(out[1][0]);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNack);
  EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kMembersUnbound));
  EXPECT_EQ(r.dst_ip, 0x0a0100c8u);
  EXPECT_EQ(out[0].size(), 0u) << "nobody gets part of it";
  EXPECT_EQ(Agg().distribute_refused.Get(), 1u);

  Inject(0, Contribution(9, 1, 2, Int32Payload({1})));
  Step();
  Drain();
  const uint64_t results = Agg().results_sent.Get();
  Inject(1, DatagramFrom(d, shard, server_mac, 0x0a0100c8, 45000));
  Step();
  out = Drain();
  const std::vector<Result> copies = WithOpcode(out[0], aggregator::Opcode::kDistribute);
  ASSERT_EQ(copies.size(), 3u);
  std::set<uint32_t> to;
  for (const Result& c : copies) {
    to.insert(c.dst_ip);
    EXPECT_EQ(c.fields.seq, 4u);
    EXPECT_EQ(c.fields.aux, 128u);
    EXPECT_EQ(c.fields.job_key, 0u) << "members get it without the key";
    EXPECT_EQ(c.payload, shard);
  }
  EXPECT_EQ(to, (std::set<uint32_t>{MemberIp(0), MemberIp(1), MemberIp(2)}));
  ASSERT_EQ(out[1].size(), 1u);
  r = ParseResult(out[1][0]);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kAck);
  EXPECT_EQ(r.fields.seq, 4u);
  EXPECT_EQ(r.fields.aux, 3u) << "the copies sent";
  EXPECT_EQ(r.dst_port, 45000);
  EXPECT_EQ(Agg().distributions.Get(), 1u);
  EXPECT_EQ(Agg().distribution_copies.Get(), 3u);
  EXPECT_EQ(Agg().results_sent.Get(), results) << "a distribution is not a result";

  // From anyone else, or with the wrong key: refused.
  Inject(1, DatagramFrom(d, shard, server_mac, 0x0a0100c9, 45000));
  d.job_key = 0xbad;
  Inject(1, DatagramFrom(d, shard, server_mac, 0x0a0100c8, 45000));
  Step();
  out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(ParseResult(out[1][0]).fields.aux, static_cast<uint32_t>(aggregator::NackReason::kNotMainServer));
  EXPECT_EQ(ParseResult(out[1][1]).fields.aux, static_cast<uint32_t>(aggregator::NackReason::kKeyMismatch));
  EXPECT_EQ(out[0].size(), 0u);
  EXPECT_EQ(Agg().distribute_refused.Get(), 2u);
}

// Data marked AGGREGATE_AT_PS never takes a slot: the switch forwards every
// member's to the parameter node unreduced, which sums them (the members'
// node bits fill in 0001, 0101, 0111, 1111) and returns one VERIFIED result
// that the switch gives every member.
TEST_F(ParameterNodeTest, DataForTheParameterNodeIsSummedThereAndReachesEveryMember) {
  AddJobWithPs(7, 4);
  for (const uint16_t m : {0, 2, 1, 3}) {
    Inject(0, ForPs(7, 3, m, 4, {1 << m, 10 * m}));
  }
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 4u);
  EXPECT_EQ(out.count(0), 0u) << "no member is answered before the parameter node";
  EXPECT_EQ(Agg().contributions.Get(), 0u);
  EXPECT_EQ(Agg().at_ps_forwarded.Get(), 4u);
  for (const Result& r : ThroughPs(out[1])) {
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kContribution);
    EXPECT_TRUE(r.fields.flags & aggregator::flags::kAggregateAtPs);
    EXPECT_EQ(r.fields.expected, 4u);
  }
  EXPECT_EQ(ps_.counters().reduced, 1u);
  out = Drain();
  ASSERT_EQ(out[0].size(), 4u);
  std::set<uint32_t> to;
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
    EXPECT_EQ(r.fields.flags, aggregator::flags::kVerified);
    EXPECT_EQ(r.payload, Int32Payload({15, 60}));
    to.insert(r.dst_ip);
  }
  EXPECT_EQ(to.size(), 4u);
  EXPECT_EQ(Agg().results_down.Get(), 1u);
}

// A retransmission marked AGGREGATE_AT_PS that finds its chunk partly
// aggregated releases the slot at once: the partial goes to the parameter
// node listing the members it lacks, the retransmission after it as late
// data, and the last member's data follows by its bypass entry. Every member
// gets the full sum once.
TEST_F(ParameterNodeTest, ARetransmissionReleasesAPartlyFilledSlotToTheParameterNode) {
  AddJobWithPs(7, 4);
  Inject(0, Contribution(7, 4, 0, Int32Payload({1})));
  Inject(0, Contribution(7, 4, 1, Int32Payload({2})));
  Step();
  EXPECT_TRUE(Drain().empty());
  Inject(0, ForPs(7, 4, 2, 4, {4}));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  const std::vector<Result> sent = ThroughPs(out[1]);
  EXPECT_EQ(sent[0].fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(MissingCount(out[1][0]), 2);
  EXPECT_EQ(sent[0].payload, Int32Payload({3}));
  EXPECT_EQ(sent[1].fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(sent[1].fields.node_id, 2u);
  EXPECT_EQ(Agg().released_to_ps.Get(), 1u);
  EXPECT_TRUE(Drain().empty()) << "member 3 is still missing";
  // Member 3's data, sent as usual, meets its bypass entry and follows as
  // late data.
  Inject(0, Contribution(7, 4, 3, Int32Payload({8})));
  Step();
  out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(ThroughPs(out[1])[0].fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(Agg().late_flagged.Get(), 1u);
  out = Drain();
  ASSERT_EQ(out[0].size(), 4u);
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
    EXPECT_EQ(r.payload, Int32Payload({15}));
  }
  EXPECT_EQ(ps_.tan().counters().completed, 1u);
  // Member 2's result was lost: the slot did not count it (its data went
  // around as late data), yet its query and its resend get the result,
  // not another trip to the parameter node.
  Inject(0, Datagram(QueryFields(7, 4, 2)));
  Inject(0, ForPs(7, 4, 2, 4, {4}));
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 2u);
  EXPECT_EQ(out.count(1), 0u);
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
    EXPECT_EQ(r.dst_ip, MemberIp(2));
    EXPECT_EQ(r.payload, Int32Payload({15}));
  }
}

// At the root, data for the parameter node whose chunk no slot holds any
// more goes there as its member sent it, even when the chunk's release left
// a bypass entry for that member. Here the partial that released the slot,
// and the member's data behind it as late data, were lost, and the slot went
// to another chunk: the members' resends for the parameter node all reach it
// unreduced, and it sums them. As late data, the member's resend would wait
// there for first data nobody sends again.
TEST_F(ParameterNodeTest, ARootSendsAResendForTheParameterNodeThereWhenNoSlotHoldsItsChunk) {
  constexpr uint16_t kMembers = 16;
  AddJobWithPs(7, kMembers);
  AddJobWithPs(8, 2);
  const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
  for (uint16_t m = 1; m < kMembers; ++m) {
    Inject(0, Contribution(7, s7, m, Int32Payload({1 << m})));
  }
  Step();
  EXPECT_TRUE(Drain().empty()) << "the slot waits for member 0";
  // Member 0's resend releases the slot: its partial (lacking member 0) and
  // the resend behind it as late data, both lost on the way.
  Inject(0, ForPs(7, s7, 0, kMembers, {1}));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 2u);
  EXPECT_EQ(ParseResult(out[1][0]).fields.opcode, aggregator::Opcode::kPartial);
  EXPECT_EQ(MissingCount(out[1][0]), 1);
  EXPECT_EQ(ParseResult(out[1][1]).fields.opcode, aggregator::Opcode::kLate);
  EXPECT_EQ(Agg().released_to_ps.Get(), 1u);
  // The forwarded slot gives way to job 8's chunk.
  Inject(0, Contribution(8, s8, 0, Int32Payload({100})));
  Step();
  EXPECT_TRUE(Drain().empty()) << "job 8's chunk waits for its member 1";
  const uint64_t late_flagged = Agg().late_flagged.Get();
  const uint64_t at_ps = Agg().at_ps_forwarded.Get();
  Inject(0, ForPs(7, s7, 0, kMembers, {1}));
  Step();
  out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  const Result again = ParseResult(out[1][0]);
  EXPECT_EQ(again.fields.opcode, aggregator::Opcode::kContribution) << "not as late data";
  EXPECT_NE(again.fields.flags & aggregator::flags::kAggregateAtPs, 0);
  EXPECT_EQ(again.fields.node_id, 0u);
  EXPECT_EQ(again.fields.expected, kMembers);
  EXPECT_EQ(again.payload, Int32Payload({1})) << "unreduced";
  EXPECT_EQ(Agg().late_flagged.Get(), late_flagged) << "its bypass entry not matched";
  EXPECT_EQ(Agg().at_ps_forwarded.Get(), at_ps + 1);
  // The other members resend theirs for the parameter node too: it sums
  // all sixteen, and every member gets the sum.
  std::vector<Frame> to_ps = out[1];
  for (uint16_t m = 1; m < kMembers; ++m) Inject(0, ForPs(7, s7, m, kMembers, {1 << m}));
  Step();
  out = Drain();
  ASSERT_EQ(out[1].size(), kMembers - 1u);
  to_ps.insert(to_ps.end(), out[1].begin(), out[1].end());
  for (const Result& r : ThroughPs(to_ps)) {
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kContribution);
  }
  ExpectResults(7, (1 << kMembers) - 1, kMembers);
}

// A child switch's slot gives way once its partial went up; a member's
// resend then finds no slot there and goes up as late data (behind a
// CONFLICT partial that lists every member, which the slot here takes as
// a repeat). Where the chunk's slot counted the child's partial without the
// child listing that member missing, the partial holds the member's data
// already: the late goes no further. Sent on, the TAN would get it twice
// and drop whichever came second: the rank's own data first, the partial
// after it, with every other rank only it held (seed 100114).
TEST_F(ParameterNodeTest, AChildsLateForARankItsCountedPartialHeldGoesNoFurther) {
  AddRootOverChild(9);
  auto from_child = [&](aggregator::Opcode opcode, uint16_t node, uint32_t seq,
                        std::vector<uint16_t> missing) {
    const aggregator::AggFields f = FromChild(opcode, 9, node, seq, 0xa1);
    Inject(0, ChildFrame(f, missing));
    Step();
    return WithOpcode(Drain()[1], aggregator::Opcode::kLate);
  };
  // Chunk 1: the child's partial holds ranks 4 and 5; worker 0 has not sent.
  EXPECT_TRUE(from_child(aggregator::Opcode::kPartial, kChild, 1, {}).empty());
  EXPECT_TRUE(from_child(aggregator::Opcode::kLate, 4, 1, {}).empty()) << "counted here already";
  EXPECT_EQ(Agg().late_counted.Get(), 1u);
  // Chunk 2: the child's partial lacks rank 5, whose late data goes on.
  EXPECT_TRUE(from_child(aggregator::Opcode::kPartial, kChild, 2, {5}).empty());
  EXPECT_EQ(from_child(aggregator::Opcode::kLate, 5, 2, {}).size(), 1u) << "the child lacked it";
  // Chunk 3: no slot here holds it: on to the TAN, as before.
  EXPECT_EQ(from_child(aggregator::Opcode::kLate, 4, 3, {}).size(), 1u);
  EXPECT_EQ(Agg().late_counted.Get(), 1u);
}

}  // namespace
}  // namespace aggswitch::dataplane
