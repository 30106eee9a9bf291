// A worker's slot clocks (slot_timers.h) in the running aggregation path on
// net_ring ports (tree_test_fixture.h): a slot that waits only for excluded
// members goes on, a timer whose partial could not list the members it lacks
// waits on, the members past a chunk whose slot timed out are asked for it,
// and completions land in the latency histogram.
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
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("slot_timers_test"));

// A straggler prediction applied after a chunk's slot took its first
// contributions: the slot counted on the member it then excludes, whose data
// now goes around it, and it has no timer. Once every member it awaits is in
// or excluded, it goes on as its timer would: first data to the TAN listing
// the excluded member, whose data the TAN folds in.
TEST_F(ParameterNodeTest, ASlotWaitingOnlyForExcludedMembersGoesOn) {
  AddJobWithPs(13, 3);
  Inject(0, Contribution(13, 5, 0, Int32Payload({1})));
  Inject(0, Contribution(13, 5, 1, Int32Payload({20})));
  Step();
  EXPECT_TRUE(Drain()[1].empty()) << "waits for member 2";
  ASSERT_TRUE(jobs_->Find(13)->SetExcluded(2, true));  // the control thread's apply
  for (uint32_t i = 0; i < 64 && Agg().excluded_sent_on.Get() == 0; ++i) Step();
  EXPECT_EQ(Agg().excluded_sent_on.Get(), 1u);
  std::vector<Result> up = ThroughPs(Drain()[1]);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.opcode, aggregator::Opcode::kPartial);
  // Member 2's data, flagged by now, goes around the slot to the TAN.
  Frame late = Contribution(13, 5, 2, Int32Payload({300}));
  HeaderOf(late)->flags = common::be16_t::FromHost(aggregator::flags::kBypass);
  Inject(0, late);
  Step();
  up = ThroughPs(Drain()[1]);
  ASSERT_EQ(up.size(), 1u);
  EXPECT_EQ(up[0].fields.opcode, aggregator::Opcode::kLate);
  auto out = Drain();
  const std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 3u);
  for (const Result& r : results) EXPECT_EQ(r.payload, Int32Payload({321}));
}

// A slot timer fires while the chunk's first data could not list the
// members it lacks beside its payload (39 ids beside 340 int32 elements).
// The switch used to end the chunk INCOMPLETE for the one member it held
// (missing_list_overflow), and the others' data then went to the TAN as
// late data of a chunk it never had, unanswered until their timeout (seed
// 815331: an in-band job of 39 members whose first member registered 20 ms
// before the rest resent). The slot waits for them instead, its timer
// armed again, and the whole sum goes to every member.
TEST_F(ParameterNodeTest, ASlotTimerWaitsOnWhenItsMissingListWouldNotFit) {
  BuildAggregation("");
  constexpr uint16_t kMembers = 40;
  aggregator::JobSpec spec;
  spec.id = 7;
  spec.key = 0x5eed;
  spec.members = kMembers;
  spec.timeout_cycles = rte_get_tsc_hz() / 100;  // a 10 ms slot timer
  spec.tan = aggregator::JobSpec::Tan::kRemote;
  spec.tan_peer = {MemberIp(kPs), aggregator::kAggUdpPort, 0, 0};
  ASSERT_TRUE(jobs_->Add(spec).ok());
  jobs_->Find(7)->SetHop(aggregator::Job::kTanHop, PsHop());
  Heard(7, kMembers);
  constexpr size_t kElems = 340;  // 1360 bytes: 30 ids fit beside them, not 39
  Inject(0, Contribution(7, 0, 0, Int32Payload(std::vector<int32_t>(kElems, 1))));
  Step();
  rte_delay_ms(15);  // the slot's timer fires
  Step();
  auto out = Drain();
  EXPECT_TRUE(out[0].empty()) << "member 0 is not told INCOMPLETE";
  EXPECT_TRUE(out[1].empty()) << "no first data to the TAN";
  EXPECT_EQ(Agg().timers_postponed.Get(), 1u);
  EXPECT_EQ(Agg().timeouts.Get(), 0u);
  EXPECT_EQ(Agg().missing_list_overflow.Get(), 0u);

  for (uint16_t m = 1; m < kMembers; ++m) {
    Inject(0, Contribution(7, 0, m, Int32Payload(std::vector<int32_t>(kElems, 1))));
  }
  Step();
  const std::vector<Result> results = WithOpcode(Drain()[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), kMembers);
  for (const Result& r : results) {
    EXPECT_EQ(r.payload, Int32Payload(std::vector<int32_t>(kElems, kMembers)));
    EXPECT_FALSE(r.fields.flags & aggregator::flags::kIncomplete);
  }
}

// The switch restarted after sending a chunk's result to some members
// only: member 2 lost it and resends the chunk, whose slot times out
// waiting for the others and sends its first data to the TAN without them.
// Member 0 has the result (its watermark is past the chunk) and sends no
// more of it unasked; the TAN would wait for it until its give-up. When
// member 2 asks after the chunk and the partial goes again, member 0 is
// told the switch lacks its data (a resync notice: it has the result), and
// so is member 1, whose watermark is not past the chunk, as a member the
// partial lacked while another asks after it. Their data goes on late,
// and the TAN answers with the whole sum.
TEST_F(ParameterNodeTest, MembersPastAChunkWhoseSlotTimedOutAreAskedForIt) {
  BuildAggregation("");
  aggregator::JobSpec spec;
  spec.id = 7;
  spec.key = 0x5eed;
  spec.members = 3;
  spec.timeout_cycles = rte_get_tsc_hz() / 100;  // a 10 ms slot timer
  spec.tan = aggregator::JobSpec::Tan::kRemote;
  spec.tan_peer = {MemberIp(kPs), aggregator::kAggUdpPort, 0, 0};
  ASSERT_TRUE(jobs_->Add(spec).ok());
  jobs_->Find(7)->SetHop(aggregator::Job::kTanHop, PsHop());
  Heard(7, 3);
  Inject(0, MemberAck(7, 0, 9));
  Inject(0, MemberAck(7, 1, 4));
  Frame resent = Contribution(7, 5, 2, Int32Payload({4}));
  HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, resent);
  Step();
  rte_delay_ms(15);  // the slot times out without members 0 and 1
  Step();
  const std::vector<Frame> first = Drain()[1];
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(MissingCount(first[0]), 2);
  std::vector<Result> up = ThroughPs(first);
  EXPECT_EQ(up[0].fields.opcode, aggregator::Opcode::kPartial);

  rte_delay_ms(6);  // past the resend gap
  auto out = AskAfter(7, 5, 2, /*watermark=*/5);
  const std::map<uint32_t, uint32_t> told = NoticeKinds(out[0], 5);
  const auto held = static_cast<uint32_t>(aggregator::NoticeKind::kHeld);
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  EXPECT_EQ(told, (std::map<uint32_t, uint32_t>{
                      {MemberIp(2), held}, {MemberIp(0), missing}, {MemberIp(1), missing}}));
  EXPECT_EQ(Agg().resync_notices.Get(), 1u);
  EXPECT_EQ(Agg().asked_notices.Get(), 1u);
  EXPECT_EQ(WithOpcode(out[1], aggregator::Opcode::kPartial).size(), 1u) << "the partial again";

  // Member 0 resends its kept chunk 5, member 1 sends its own: late, to the TAN.
  Frame again = Contribution(7, 5, 0, Int32Payload({1}));
  HeaderOf(again)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
  Inject(0, again);
  Inject(0, Contribution(7, 5, 1, Int32Payload({2})));
  Step();
  up = ThroughPs(Drain()[1]);
  ASSERT_EQ(up.size(), 2u);
  for (const Result& r : up) EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kLate);
  const std::vector<Result> results = WithOpcode(Drain()[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 3u);
  for (const Result& r : results) {
    EXPECT_EQ(r.payload, Int32Payload({7}));
    EXPECT_FALSE(r.fields.flags & aggregator::flags::kIncomplete);
  }
}

TEST_F(AggregationTest, PerJobCountersAndCompletionLatency) {
  AddJob(7, 2);
  AddJob(8, 2);
  const Frame a = Contribution(7, 1, 0, Int32Payload({1, 2, 3}));
  Inject(0, a);
  Inject(0, a);
  Inject(0, Contribution(7, 1, 1, Int32Payload({1, 2, 3})));
  Inject(0, Contribution(8, 1, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, /*key=*/0xbad));
  Step();
  Drain();
  const auto seven = JobCounts(7);
  EXPECT_EQ(seven[static_cast<size_t>(JobCounter::contributions)], 2u);
  EXPECT_EQ(seven[static_cast<size_t>(JobCounter::completions)], 1u);
  EXPECT_EQ(seven[static_cast<size_t>(JobCounter::duplicates)], 1u);
  EXPECT_EQ(seven[static_cast<size_t>(JobCounter::reduced_bytes)], 24u);
  EXPECT_EQ(seven[static_cast<size_t>(JobCounter::key_failures)], 0u);
  const auto eight = JobCounts(8);
  EXPECT_EQ(eight[static_cast<size_t>(JobCounter::key_failures)], 1u);
  EXPECT_EQ(eight[static_cast<size_t>(JobCounter::contributions)], 0u);
  const SlotLatencyTotals latency = dp_->ReadSlotLatency();
  EXPECT_EQ(latency.count, 1u);
  uint64_t in_buckets = 0;
  for (uint64_t b : latency.buckets) in_buckets += b;
  EXPECT_EQ(in_buckets, 1u);
  EXPECT_GT(latency.sum_seconds, 0.0);
  EXPECT_LT(latency.sum_seconds, 10.0);
}

}  // namespace
}  // namespace aggswitch::dataplane
