// What one host or tenant can do to the aggregation path, in process on
// net_ring ports (docs/security.md): held contributions never keep the mbufs
// they arrived in and stay within their job's hold window and in-band share;
// a chunk beyond its job's slot quota is refused; members are bound to the
// address they first sent from; in-band and provisioned jobs use separate
// slot regions; answers carry no key; frames that claim to come from the
// switch, or from a group MAC, are dropped.
#include <gtest/gtest.h>
#include <rte_mempool.h>

#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "dataplane/dataplane_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT: the test vocabulary
using aggregator::NackReason;
using aggregator::Opcode;

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("aggregation_defence_test"));

class DefenceTest : public AggregationTest {
 protected:
  // Member `node` of job `id` sends chunk `seq` (an int32 1), acknowledging
  // up to `ack`.
  void ContributeOne(uint32_t id, uint32_t seq, uint16_t node, uint32_t ack) {
    Inject(0, Contribution(id, seq, node, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                           -1, ack));
  }

  // Job `id` with `members`, ordered, and the given quotas.
  void AddLimitedJob(uint32_t id, uint16_t members, bool ordered, uint32_t slot_quota,
                     uint32_t hold_quota) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = members;
    spec.ordered = ordered;
    spec.slot_quota = slot_quota;
    spec.hold_quota = hold_quota;
    ASSERT_TRUE(jobs_->Add(spec).ok());
  }
  static Frame Ordered(uint32_t job, uint32_t seq, uint16_t node, int32_t value, uint32_t ack = 0,
                       uint16_t extra_flags = 0) {
    aggregator::AggFields f;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.ack_watermark = ack;
    f.flags = aggregator::flags::kOrdered | extra_flags;
    f.elem_count = 1;
    return Datagram(f, Int32Payload({value}));
  }
  // A contribution of `elems` elements from job 7's member 0, for
  // DatagramFrom (the sender's addresses are the test's to choose).
  static aggregator::AggFields Member0Of7(uint32_t seq, uint16_t elems) {
    aggregator::AggFields f;
    f.node_id = 0;
    f.job_id = 7;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.elem_count = elems;
    return f;
  }
  uint64_t HoldAvailable() {
    for (const PoolStats& p : dp_->PoolStatsNow()) {
      if (p.name == "hold") return p.available;
    }
    ADD_FAILURE() << "no hold pool";
    return 0;
  }
  // The NACK reasons of the frames that left `port`.
  static std::vector<uint32_t> NackReasons(const std::vector<Frame>& frames) {
    std::vector<uint32_t> out;
    for (const Frame& f : frames) {
      const Result r = ParseResult(f);
      if (r.fields.opcode == Opcode::kNack) out.push_back(r.fields.aux);
    }
    return out;
  }
  // Lets `ms` pass on the worker's clock: it reads the time once per poll,
  // so an empty poll after the sleep brings it up to date.
  void Wait(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    Step();
  }
  void InjectAll(int port, const std::vector<Frame>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      Inject(port, frames[i]);
      if (i % 32 == 31) Step();
    }
    Step();
  }
};

// An ordered slot keeps a copy of each contribution in the hold pool: every
// mbuf that brought one goes back to its pool at once, so no number of held
// contributions can empty the pool RX draws from.
TEST_F(DefenceTest, HeldContributionsNeverKeepTheirMbufs) {
  AddLimitedJob(7, 4, /*ordered=*/true, 0, 0);
  const unsigned injected_pool_before = rte_mempool_avail_count(pool_);
  const uint64_t hold_before = HoldAvailable();
  std::vector<Frame> frames;
  for (uint32_t seq = 0; seq < 200; ++seq) {
    for (uint16_t node = 0; node < 3; ++node) frames.push_back(Ordered(7, seq, node, 1));
  }
  InjectAll(0, frames);
  EXPECT_TRUE(Drain().empty()) << "no chunk is complete";
  EXPECT_EQ(rte_mempool_avail_count(pool_), injected_pool_before)
      << "every mbuf that carried a held contribution is free again";
  EXPECT_EQ(HoldAvailable(), hold_before - 600);
  // The fourth member completes each chunk: no buffer for it, every buffer back.
  frames.clear();
  for (uint32_t seq = 0; seq < 200; ++seq) frames.push_back(Ordered(7, seq, 3, 1));
  InjectAll(0, frames);
  auto out = Drain();
  EXPECT_EQ(out[0].size(), 800u) << "200 chunks, 4 results each";
  EXPECT_EQ(HoldAvailable(), hold_before);
  EXPECT_EQ(Agg().hold_refused.Get(), 0u);
}

// A job holds contributions only for the chunks of its hold window,
// hold_quota / (members - 1) chunks from its slowest member's watermark on:
// at most hold_quota buffers, and its oldest chunk can always complete.
TEST_F(DefenceTest, TheHoldWindowBoundsWhatOneJobHolds) {
  AddLimitedJob(7, 4, true, 0, /*hold_quota=*/30);  // a window of 10 chunks
  const uint64_t hold_before = HoldAvailable();
  std::vector<Frame> frames;
  for (uint32_t seq = 0; seq < 20; ++seq) {
    for (uint16_t node = 0; node < 2; ++node) frames.push_back(Ordered(7, seq, node, 1));
  }
  InjectAll(0, frames);
  const std::vector<uint32_t> reasons = NackReasons(Drain()[0]);
  ASSERT_EQ(reasons.size(), 20u) << "chunks 10..19, two members each";
  for (const uint32_t r : reasons) EXPECT_EQ(r, static_cast<uint32_t>(NackReason::kHoldQuota));
  EXPECT_EQ(Agg().hold_refused.Get(), 20u);
  EXPECT_EQ(HoldAvailable(), hold_before - 20);
  EXPECT_EQ(JobCounts(7)[static_cast<size_t>(JobCounter::quota_refused)], 20u);
  // The oldest chunk completes; once every member has its result (ACKs
  // move the watermark), the window moves on.
  Inject(0, Ordered(7, 0, 2, 1));
  Inject(0, Ordered(7, 0, 3, 1));
  Step();
  EXPECT_EQ(Drain()[0].size(), 4u);
  for (uint16_t node = 0; node < 4; ++node) {
    aggregator::AggFields ack;
    ack.opcode = Opcode::kAck;
    ack.node_id = node;
    ack.job_id = 7;
    ack.job_key = 0x5eed;
    ack.ack_watermark = 1;
    Inject(0, Datagram(ack));
  }
  Step();
  Wait(3);  // the watermark cache's next tick
  for (uint16_t node = 0; node < 4; ++node) Inject(0, Ordered(7, 10, node, 1, 1));
  Step();
  auto out = Drain();
  EXPECT_TRUE(NackReasons(out[0]).empty()) << "chunk 10 lies in the window now";
  size_t results = 0, gap_notices = 0;
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    if (r.fields.opcode == Opcode::kResult) ++results;
    // Nodes 2 and 3 never sent chunk 7, whose slot waits for them.
    if (r.fields.opcode == Opcode::kNotice && r.fields.seq == 7) ++gap_notices;
  }
  EXPECT_EQ(results, 4u);
  EXPECT_EQ(gap_notices, 2u);
  EXPECT_EQ(out[0].size(), 6u);
}

// The contribution that completes a slot is reduced from its mbuf: a job
// makes progress even with the hold pool empty.
TEST_F(DefenceTest, AnEmptyHoldPoolStillLetsChunksComplete) {
  BuildAggregation(", hold: {buffers: 64, per_job: 64}, in_band: {held_total: 16, held_per_job: 16}");
  AddLimitedJob(7, 2, true, 0, 0);
  std::vector<Frame> frames;
  for (uint32_t seq = 0; seq < 64; ++seq) frames.push_back(Ordered(7, seq, 0, 1));
  InjectAll(0, frames);
  EXPECT_EQ(HoldAvailable(), 0u);
  Inject(0, Ordered(7, 64, 0, 1));
  Step();
  EXPECT_EQ(NackReasons(Drain()[0]), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kHoldQuota)});
  Inject(0, Ordered(7, 0, 1, 41));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 2u);
  EXPECT_EQ(ParseResult(out[0][0]).payload, Int32Payload({42}));
  EXPECT_EQ(HoldAvailable(), 1u) << "chunk 0's held contribution went back";
}

// In-band jobs together hold at most their share of the pool
// (aggregation.in_band.held_total); a config job still holds.
TEST_F(DefenceTest, InBandJobsHoldTheirShareOnly) {
  BuildAggregation(", hold: {buffers: 64, per_job: 64}, in_band: {held_total: 8, held_per_job: 8}");
  // Two in-band jobs, six chunks each from one of their two members: the
  // first holds 6, the second the 2 left of the share.
  for (const uint32_t job : {30u, 31u}) {
    std::vector<Frame> frames;
    for (uint32_t seq = 0; seq < 6; ++seq) {
      aggregator::AggFields f;
      f.node_id = 0;
      f.job_id = job;
      f.seq = seq;
      f.job_key = 0x5eed;
      f.flags = aggregator::flags::kOrdered | aggregator::flags::kTaskInfo;
      f.expected = 2;
      f.node_count = 1;
      f.elem_count = 1;
      frames.push_back(Datagram(f, Int32Payload({1})));
    }
    Inject(0, frames[0]);
    Step();
    Register();
    InjectAll(0, std::vector<Frame>(frames.begin() + 1, frames.end()));
    ASSERT_NE(jobs_->Find(job), nullptr);
    ASSERT_TRUE(jobs_->Find(job)->in_band());
  }
  EXPECT_EQ(HoldAvailable(), 64u - 8u);
  EXPECT_EQ(Agg().hold_refused.Get(), 4u);
  AddLimitedJob(7, 2, true, 0, 0);
  Inject(0, Ordered(7, 0, 0, 1));
  Step();
  EXPECT_EQ(HoldAvailable(), 64u - 9u) << "the config job still holds";
}

// A job keeps at most slot_quota chunks ahead of its slowest member.
TEST_F(DefenceTest, ChunksBeyondTheSlotQuotaAreRefused) {
  AddLimitedJob(7, 2, false, /*slot_quota=*/8, 0);
  Inject(0, Contribution(7, 7, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 0));
  Inject(0, Contribution(7, 8, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 0));
  Step();
  EXPECT_EQ(NackReasons(Drain()[0]), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kSlotQuota)});
  EXPECT_EQ(Agg().slot_quota_refused.Get(), 1u);
  // Both members move their watermark to 4: chunk 11 fits now (a tick later).
  Wait(3);
  Inject(0, Contribution(7, 7, 1, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 4));
  Inject(0, Contribution(7, 11, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1, 4));
  Step();
  EXPECT_TRUE(NackReasons(Drain()[0]).empty());
  EXPECT_EQ(Agg().slot_quota_refused.Get(), 1u);
}

// The chunk at a refused member's watermark holds the quota with the job's
// other oldest chunks: while it waits, the members it lacks are told NOTICE
// missing, as on a refusal slot_busy and at its rate, so that one whose data
// was lost sends it again now rather than at its retransmission timeout,
// while the others' chunks past the quota are refused every quota retry
// (seed 673699). Not within a resend gap (5 ms) of the chunk's first
// contribution, nor again within the next gap.
TEST_F(DefenceTest, AQuotaRefusalTellsTheMembersTheChunkAtTheWatermarkLacksTheirDataIsMissing) {
  AddLimitedJob(7, 3, false, /*slot_quota=*/8, 0);
  auto contribute = [&](uint32_t seq, uint16_t node, uint32_t ack) {
    ContributeOne(7, seq, node, ack);
  };
  for (uint16_t node = 0; node < 3; ++node) contribute(0, node, 0);
  Step();
  ASSERT_EQ(WithOpcode(Drain()[0], Opcode::kResult).size(), 3u);
  // Member 2's data for chunk 1 is lost; member 2 has not acknowledged
  // chunk 0 yet, so the chunks from 8 on lie beyond the quota.
  contribute(1, 0, 1);
  contribute(1, 1, 1);
  Step();
  (void)Drain();
  // Member 0's chunk 9 is refused, and tells nobody within a resend gap of
  // chunk 1's first contribution.
  const auto refused = [&](uint32_t seq, uint16_t node) {
    contribute(seq, node, 1);
    Step();
    const std::vector<Frame> out = Drain()[0];
    EXPECT_EQ(NackReasons(out), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kSlotQuota)});
    std::vector<uint16_t> told;
    for (const Result& r : WithOpcode(out, Opcode::kNotice)) {
      EXPECT_EQ(r.fields.seq, 1u);
      EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NoticeKind::kMissing));
      EXPECT_EQ(r.dst_port, MemberPort(r.fields.node_id));
      told.push_back(r.fields.node_id);
    }
    return told;
  };
  EXPECT_TRUE(refused(9, 0).empty()) << "within a resend gap of the chunk's first contribution";
  Wait(6);
  // A gap later: member 2, which chunk 1 lacks, is told; then nobody within
  // the next gap.
  EXPECT_EQ(refused(9, 0), std::vector<uint16_t>{2});
  EXPECT_TRUE(refused(10, 1).empty());
  EXPECT_EQ(Agg().busy_notices.Get(), 1u);
  EXPECT_EQ(Agg().slot_quota_refused.Get(), 3u);
  // Its resend completes the chunk.
  contribute(1, 2, 1);
  Step();
  EXPECT_EQ(WithOpcode(Drain()[0], Opcode::kResult).size(), 3u);
}

// A rank may get more than a quota of results in one tick of the members'
// clock (a 4 MiB allreduce of one rank: about 240 chunks a millisecond, with
// 256 in-band slots a job). The watermarks its chunks carry move the quota
// on at once: a chunk refused until the next tick would stall its window for
// a retransmission timeout.
TEST_F(DefenceTest, TheSlotQuotaFollowsTheWatermarkWithinATick) {
  AddLimitedJob(7, 1, false, /*slot_quota=*/8, 0);
  // One poll, so one tick: chunk s is sent once chunk s - 4 was answered.
  for (uint32_t seq = 0; seq < 24; ++seq) {
    Inject(0, Contribution(7, seq, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed,
                           -1, seq < 4 ? 0 : seq - 3));
  }
  Step();
  EXPECT_TRUE(NackReasons(Drain()[0]).empty());
  EXPECT_EQ(Agg().slot_quota_refused.Get(), 0u);
  // Beyond the latest watermark's quota: refused still.
  Inject(0, Contribution(7, 28, 0, Int32Payload({1}), DType::kInt32, ReduceOp::kSum, 0x5eed, -1,
                         20));
  Step();
  EXPECT_EQ(NackReasons(Drain()[0]), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kSlotQuota)});
}

// A new run of a job starts far past the last one; a rank that is late to
// it still has the old run's watermark, but silent for member_rebind_ms it
// is presumed gone and holds nobody back. Before, every rank was refused
// (slot quota) until the late one spoke.
TEST_F(DefenceTest, ALateRanksOldWatermarkHoldsNoRunBack) {
  BuildAggregation(", member_rebind_ms: 20");
  AddLimitedJob(7, 3, false, /*slot_quota=*/8, 0);
  auto contribute = [&](uint32_t seq, uint16_t node, uint32_t ack) {
    ContributeOne(7, seq, node, ack);
  };
  for (uint16_t node = 0; node < 3; ++node) contribute(0, node, 0);
  Step();
  ASSERT_EQ(Drain()[0].size(), 3u);  // the first run's one result, to each rank
  Wait(40);
  contribute(1000, 0, 1000);
  contribute(1000, 1, 1000);
  contribute(1007, 1, 1000);
  Step();
  EXPECT_TRUE(NackReasons(Drain()[0]).empty());
  EXPECT_EQ(Agg().slot_quota_refused.Get(), 0u);
  contribute(1000, 2, 1000);
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 3u);
  for (const Frame& f : out[0]) EXPECT_EQ(ParseResult(f).payload, Int32Payload({3}));
  // The quota still holds, from the current ranks' watermark.
  contribute(1008, 0, 1000);
  Step();
  EXPECT_EQ(NackReasons(Drain()[0]), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kSlotQuota)});
}

// Anyone with the key could claim a member: the address that sent first
// keeps it. A forged contribution is refused and never counted.
TEST_F(DefenceTest, AMemberIsBoundToTheAddressItFirstSentFrom) {
  AddJob(7, 2);
  Inject(0, Contribution(7, 1, 0, Int32Payload({1, 2})));
  Step();
  // Node 0 again, from another port, then from another UDP port on its own.
  Inject(1, Contribution(7, 1, 0, Int32Payload({100, 100})));
  Inject(0, DatagramFrom(Member0Of7(2, 2), Int32Payload({100, 100}), MemberMac(0), MemberIp(0), 41234));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[1].size(), 1u);
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(ParseResult(out[1][0]).fields.aux, static_cast<uint32_t>(NackReason::kMemberBound));
  EXPECT_EQ(ParseResult(out[0][0]).fields.aux, static_cast<uint32_t>(NackReason::kMemberBound));
  EXPECT_EQ(ParseResult(out[0][0]).dst_port, 41234) << "the forger is told, not the member";
  EXPECT_EQ(Agg().member_refused.Get(), 2u);
  EXPECT_EQ(JobCounts(7)[static_cast<size_t>(JobCounter::member_refused)], 2u);
  // The real member 1 completes the chunk with member 0's real data.
  Inject(0, Contribution(7, 1, 1, Int32Payload({10, 20})));
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 2u);
  for (const Frame& fr : out[0]) {
    const Result r = ParseResult(fr);
    EXPECT_EQ(r.payload, Int32Payload({11, 22}));
    EXPECT_NE(r.dst_port, 41234);
  }
}

// A member that restarted (a new UDP port) is taken back once its old
// address has been silent for aggregation.member_rebind_ms.
TEST_F(DefenceTest, ASilentMemberRebinds) {
  BuildAggregation(", member_rebind_ms: 20");
  AddJob(7, 1);
  aggregator::AggFields f = Member0Of7(0, 1);
  Inject(0, DatagramFrom(f, Int32Payload({1}), MemberMac(0), MemberIp(0), 40000));
  Step();
  ASSERT_EQ(Drain()[0].size(), 1u);
  f.seq = 1;
  Inject(0, DatagramFrom(f, Int32Payload({1}), MemberMac(0), MemberIp(0), 40001));
  Step();
  EXPECT_EQ(NackReasons(Drain()[0]), std::vector<uint32_t>{static_cast<uint32_t>(NackReason::kMemberBound)});
  Wait(40);
  Inject(0, DatagramFrom(f, Int32Payload({1}), MemberMac(0), MemberIp(0), 40001));
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 1u);
  EXPECT_EQ(ParseResult(out[0][0]).fields.opcode, Opcode::kResult);
  EXPECT_EQ(ParseResult(out[0][0]).dst_port, 40001);
  EXPECT_EQ(Agg().member_rebinds.Get(), 1u);
}

// What the switch sends members carries no job key: a copy that reaches
// somebody else gives the key away to nobody.
TEST_F(DefenceTest, ResultsAndAnswersCarryNoKey) {
  AddJob(7, 2);
  Inject(0, Contribution(7, 1, 0, Int32Payload({1})));
  Inject(0, Contribution(7, 1, 1, Int32Payload({2})));
  Inject(0, Contribution(7, 2, 0, Int32Payload({1}), DType::kFloat32));  // 2 members, other type
  Inject(0, Contribution(7, 2, 1, Int32Payload({1}), DType::kInt32));    // refused: type mismatch
  Step();
  auto out = Drain();
  ASSERT_EQ(out[0].size(), 3u);
  for (const Frame& fr : out[0]) EXPECT_EQ(ParseResult(fr).fields.job_key, 0u);
}

// A contribution from a group MAC is dropped, like any such frame at L2:
// the switch would otherwise answer a broadcast address.
TEST_F(DefenceTest, GroupSourceMacsAreDroppedOnTheAggregationPathToo) {
  AddJob(7, 1);
  const aggregator::AggFields f = Member0Of7(0, 1);
  Inject(0, DatagramFrom(f, Int32Payload({1}), kBroadcast, MemberIp(0), MemberPort(0)));
  Inject(0, DatagramFrom(f, Int32Payload({1}), Mac("01:00:5e:00:00:01"), MemberIp(0), MemberPort(0)));
  Step();
  EXPECT_TRUE(Drain().empty());
  EXPECT_EQ(DropCount(0, DropReason::kSrcMulticast), 2u);
  EXPECT_EQ(Agg().contributions.Get(), 0u);
}

// Nothing but the switch sends from its MAC or its aggregation address: a
// host that does (forging results to a job's members) is dropped.
TEST_F(DefenceTest, FramesImpersonatingTheSwitchAreDropped) {
  aggregator::AggFields f;
  f.opcode = Opcode::kResult;
  f.job_id = 7;
  f.elem_count = 1;
  std::vector<uint8_t> agg(256);
  const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, Int32Payload({666}).data(), 4,
                                                 agg.data(), static_cast<uint32_t>(agg.size()));
  // A forged result from the aggregation address to a member, from host H1.
  Frame forged(46 + n);
  uint32_t hdr = WriteUdpHeaders(forged.data(), kH0.bytes.data(), kH1.bytes.data(), 0, kAggIp,
                                 MemberIp(0), aggregator::kAggUdpPort, MemberPort(0), 1, n);
  forged.resize(hdr + n);
  std::memcpy(forged.data() + hdr, agg.data(), n);
  Inject(1, forged);
  // The same from the switch's own MAC.
  Frame own_mac = Untagged(kSwitchMac, kH0);
  Inject(1, own_mac);
  Step();
  EXPECT_TRUE(Drain().empty()) << "neither leaves the switch";
  EXPECT_EQ(DropCount(1, DropReason::kSrcSpoofed), 2u);
}

// In-band jobs and provisioned jobs never share a slot.
TEST_F(DefenceTest, InBandAndProvisionedJobsUseSeparateSlotRegions) {
  const aggregator::SlotRegions& regions = dp_->slot_regions();
  EXPECT_EQ(regions.provisioned.size + regions.in_band.size + regions.spare.size, 1024u);
  EXPECT_EQ(regions.in_band.size, 256u) << "a quarter by default";
  EXPECT_EQ(regions.spare.size, 64u) << "a sixteenth by default";
  EXPECT_EQ(regions.spare.first, regions.in_band.first + regions.in_band.size) << "the last slots";
  AddJob(7, 2);
  aggregator::AggFields f;
  f.node_id = 0;
  f.job_id = 30;
  f.job_key = 0x5eed;
  f.flags = aggregator::flags::kTaskInfo;
  f.expected = 2;
  f.node_count = 1;
  f.elem_count = 1;
  for (uint32_t seq = 0; seq < 300; ++seq) {
    f.seq = seq;
    Inject(0, Datagram(f, Int32Payload({1})));
    Inject(1, Contribution(7, seq, 0, Int32Payload({1})));
    if (seq == 0) {
      Step();
      Register();
    }
    if (seq % 16 == 15) Step();
  }
  Step();
  auto dump = dp_->DumpSlots(10000, std::chrono::milliseconds(100));
  ASSERT_TRUE(dump.ok());
  size_t provisioned = 0, in_band = 0;
  for (const SlotInfo& s : dump->slots) {
    if (s.job_id == 7) {
      ++provisioned;
      EXPECT_LT(s.index, regions.in_band.first);
    } else {
      ++in_band;
      EXPECT_GE(s.index, regions.in_band.first);
    }
  }
  EXPECT_EQ(provisioned, 300u);
  EXPECT_EQ(in_band, 256u) << "the in-band job's quota (256 chunks) and region";
}

}  // namespace
}  // namespace aggswitch::dataplane
