#include "dataplane/escalation_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

namespace aggswitch::dataplane {
namespace {

using aggregator::Job;
using aggregator::JobSpec;
using aggregator::JobTable;
using aggregator::SlotRegions;
using Kind = Relocation::Kind;

std::unique_ptr<JobTable> MakeTable() {
  auto table = JobTable::Create(16, 256);
  EXPECT_TRUE(table.ok()) << table.status().ToString();
  return std::move(table).value();
}

// A job of two members at a switch below the root, without a slot timer:
// a chunk that finds no slot is refused (NACK slot_busy). Its members have
// acknowledged every chunk before `acked`.
const Job* AddLeafJob(JobTable& jobs, uint32_t id, uint32_t acked) {
  JobSpec spec;
  spec.id = id;
  spec.key = 0xfeed000000000000ull | id;
  spec.members = 2;
  spec.nodes = 2;
  spec.upstreams = {aggregator::JobPeer{0x0a000001, 47000, 100, 0}};
  auto added = jobs.Add(spec);
  EXPECT_TRUE(added.ok()) << added.status().ToString();
  const Job* job = *added;
  job->UpdateAck(0, acked);
  job->UpdateAck(1, acked);
  return job;
}

// A job of two child switches at the root, with agg-ps its TAN and no
// covers known (as an in-band job registered by its leaves' partials): a
// chunk that finds no slot goes to the parameter node, which takes only
// members' contributions.
const Job* AddRootJobOfLeaves(JobTable& jobs, uint32_t id) {
  JobSpec spec;
  spec.id = id;
  spec.key = 0xbeef000000000000ull | id;
  spec.members = 2;
  spec.nodes = 1;
  spec.member_nodes = {1000, 1001};
  spec.tan = JobSpec::Tan::kRemote;
  spec.tan_peer = aggregator::JobPeer{0x0a000009, 47100, 0, 0};
  auto added = jobs.Add(spec);
  EXPECT_TRUE(added.ok()) << added.status().ToString();
  return added.ok() ? *added : nullptr;
}

Escalation At(const Job& job, uint32_t seq) {
  return Escalation{FrameRef{}, job.id(), job.generation(), seq, seq % 32,
                    job.WhenNoSlot() != Job::NoSlot::kRefuse};
}

// The only spare slot, too, is kept for a job's oldest chunk. Leased to a
// chunk behind it, complete and kept until the job's watermark passes it,
// it would leave none for the chunk the job's members wait for, while
// another job's chunk holds that chunk's home slot for as long.
TEST(EscalationPolicyTest, TheOnlySpareSlotIsKeptForAnOldestChunk) {
  auto jobs = MakeTable();
  const Job* a = AddLeafJob(*jobs, 7, 10);
  const SlotRegions regions = SlotRegions::Make(33, 0, 1);
  EscalationPolicy policy(*jobs, regions, std::chrono::milliseconds(1000));
  const EscalationPolicy::Clock::time_point now{};

  EXPECT_EQ(policy.Decide(At(*a, 12), now).kind, Kind::kRefuse);
  const EscalationPolicy::Answer oldest = policy.Decide(At(*a, 10), now);
  EXPECT_EQ(oldest.kind, Kind::kPlace);
  EXPECT_EQ(oldest.hint, 0u);
}

// The control thread names the spare slot leased to a chunk to whoever
// asks (Dataplane::SendTanResult sends its own TAN's result there).
TEST(EscalationPolicyTest, TheSpareSlotLeasedToAChunkIsFoundByItsKey) {
  auto jobs = MakeTable();
  const Job* a = AddLeafJob(*jobs, 7, 10);
  const SlotRegions regions = SlotRegions::Make(33, 0, 2);
  EscalationPolicy policy(*jobs, regions, std::chrono::milliseconds(1000));
  const EscalationPolicy::Clock::time_point now{};
  EXPECT_EQ(policy.SpareOf({a->id(), a->generation(), 10}), aggregator::SpareSlots::kNone);
  const EscalationPolicy::Answer placed = policy.Decide(At(*a, 10), now);
  ASSERT_EQ(placed.kind, Kind::kPlace);
  EXPECT_EQ(policy.SpareOf({a->id(), a->generation(), 10}), placed.hint);
  EXPECT_EQ(policy.SpareOf({a->id(), a->generation(), 11}), aggregator::SpareSlots::kNone);
  EXPECT_EQ(policy.SpareOf({a->id(), a->generation() + 1, 10}), aggregator::SpareSlots::kNone)
      << "another registration of the job";
}

// A child switch's partial that finds no slot at a root whose chunks go to
// the parameter node goes nowhere: it is refused, and its chunk is not one
// that went on without a slot, so its retry may take a spare slot freed
// since. Taken for gone on, it was refused every spare slot for as long as
// twice stale_slot_ms, and its members' data waited at their leaf.
TEST(EscalationPolicyTest, APartialRefusedAtTheRootMayTakeASpareSlotLater) {
  auto jobs = MakeTable();
  const Job* holder = AddLeafJob(*jobs, 7, 10);
  const Job* root = AddRootJobOfLeaves(*jobs, 8);
  ASSERT_NE(root, nullptr);
  root->UpdateAck(0, 3);  // chunk 3 is the one its leaves wait for
  root->UpdateAck(1, 3);
  ASSERT_EQ(root->WhenNoSlot(), Job::NoSlot::kToParameterNode);
  const SlotRegions regions = SlotRegions::Make(33, 0, 1);
  EscalationPolicy policy(*jobs, regions, std::chrono::milliseconds(1000));
  const EscalationPolicy::Clock::time_point now{};
  ASSERT_EQ(policy.Decide(At(*holder, 10), now).kind, Kind::kPlace);

  Escalation partial = At(*root, 3);
  partial.goes_on = root->GoesOnWithoutSlot(aggregator::Opcode::kPartial);
  EXPECT_FALSE(partial.goes_on);
  Escalation contribution = At(*root, 4);
  contribution.goes_on = root->GoesOnWithoutSlot(aggregator::Opcode::kContribution);
  EXPECT_TRUE(contribution.goes_on);
  EXPECT_EQ(policy.Decide(partial, now).kind, Kind::kRefuse);
  EXPECT_EQ(policy.Decide(contribution, now).kind, Kind::kRefuse);

  // The holder's job is gone, and its lease with it.
  ASSERT_TRUE(jobs->Remove(holder->id()).ok());
  // The contribution's chunk went to the parameter node, and goes there
  // whole; the partial's takes the spare slot.
  EXPECT_EQ(policy.Decide(contribution, now).kind, Kind::kRefuse);
  const EscalationPolicy::Answer retry = policy.Decide(partial, now);
  EXPECT_EQ(retry.kind, Kind::kPlace);
  EXPECT_EQ(retry.hint, 0u);
}

}  // namespace
}  // namespace aggswitch::dataplane
