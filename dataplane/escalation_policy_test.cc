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

Escalation At(const Job& job, uint32_t seq) {
  return Escalation{FrameRef{}, job.id(), job.generation(), seq, seq % 32};
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

}  // namespace
}  // namespace aggswitch::dataplane
