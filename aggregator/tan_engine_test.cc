// The timeout aggregation node's merge logic, driven with real datagrams
// (BuildAggregation) parsed by ParseAggregation, its RESULTs parsed back.
#include "aggregator/tan_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "aggregator/half.h"
#include "aggregator/reduce.h"

namespace aggswitch::aggregator {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint64_t kKey = 0x5eed;
constexpr uint32_t kJob = 7;
constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kGiveUp = 100 * kMs;
constexpr TanPeer kRoot{0x0a000afe, 47000};
constexpr TanPeer kOtherRoot{0x0a000afd, 47001};

template <typename T>
Bytes Pack(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <typename T>
std::vector<T> Unpack(const Bytes& b) {
  std::vector<T> out(b.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

// One datagram to feed, before it is built.
struct Spec {
  Opcode opcode = Opcode::kPartial;
  uint16_t flags = 0;
  uint16_t node = 0;
  uint32_t job = kJob;
  uint32_t seq = 1;
  uint64_t key = kKey;
  DType dtype = DType::kInt32;
  ReduceOp op = ReduceOp::kSum;
  int8_t scale = 0;
  uint32_t aux = 0;  // the chunk's element offset
  uint32_t incarnation = 0;  // the root's run label
  std::vector<uint16_t> missing;
  Bytes payload;
};

// The root's first data: its reduction and the ids it still misses.
Spec First(Bytes payload, std::vector<uint16_t> missing, DType dtype = DType::kInt32) {
  Spec s;
  s.opcode = Opcode::kPartial;
  s.node = 1;  // the root's own node id; the TAN does not care
  s.dtype = dtype;
  s.missing = std::move(missing);
  s.payload = std::move(payload);
  return s;
}

// Late data of `node`, as the switch forwards it (LATE, BYPASS).
Spec Late(uint16_t node, Bytes payload, std::vector<uint16_t> missing = {},
          DType dtype = DType::kInt32) {
  Spec s;
  s.opcode = Opcode::kLate;
  s.flags = flags::kBypass;
  s.node = node;
  s.dtype = dtype;
  s.missing = std::move(missing);
  s.payload = std::move(payload);
  return s;
}

// `s` under op `op`.
Spec WithOp(Spec s, ReduceOp op) {
  s.op = op;
  return s;
}

Bytes Build(const Spec& s) {
  AggFields f;
  f.opcode = s.opcode;
  f.flags = s.flags;
  f.node_id = s.node;
  f.job_id = s.job;
  f.seq = s.seq;
  f.job_key = s.key;
  f.dtype = s.dtype;
  f.op = s.op;
  f.scale = s.scale;
  f.aux = s.aux;
  f.incarnation = s.incarnation;
  f.elem_count = static_cast<uint16_t>(s.payload.size() / ElementSize(s.dtype));
  Bytes buf(sizeof(AggHeader) + 2 * s.missing.size() + s.payload.size());
  const uint32_t n = BuildAggregation(f, s.missing.data(), static_cast<uint8_t>(s.missing.size()),
                                      s.payload.data(), static_cast<uint32_t>(s.payload.size()),
                                      buf.data(), static_cast<uint32_t>(buf.size()));
  EXPECT_EQ(n, buf.size());
  return buf;
}

// A RESULT the engine produced, parsed back.
struct Parsed {
  TanPeer to;
  AggFields f;
  std::vector<uint16_t> missing;
  Bytes payload;
  Bytes datagram;
};

Parsed ParseOutput(const TanOutput& o) {
  Parsed p;
  p.to = o.to;
  p.datagram = o.datagram;
  AggPacket pkt;
  EXPECT_EQ(ParseAggregation(o.datagram.data(), static_cast<uint32_t>(o.datagram.size()), &pkt),
            WireError::kOk);
  if (pkt.header == nullptr) return p;
  p.f = ReadAggFields(*pkt.header);
  for (uint32_t i = 0; i < pkt.header->missing_count; ++i) p.missing.push_back(pkt.MissingNode(i));
  p.payload.assign(pkt.payload, pkt.payload + pkt.payload_len);
  EXPECT_EQ(o.datagram.size(), sizeof(AggHeader) + 2 * p.missing.size() + p.payload.size());
  return p;
}

// A TanEngine fed with built datagrams.
class Tan {
 public:
  explicit Tan(TanOptions o = Defaults()) : engine_(o) {}
  static TanOptions Defaults() {
    TanOptions o;
    o.give_up_ns = kGiveUp;
    return o;
  }
  static TanOptions Batch() {
    TanOptions o = Defaults();
    o.trigger = TanTrigger::kBatch;
    return o;
  }

  std::vector<TanOutput> Feed(const Spec& s, uint64_t now_ns, TanPeer from = kRoot) {
    const Bytes b = Build(s);
    AggPacket pkt;
    EXPECT_EQ(ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &pkt), WireError::kOk);
    std::vector<TanOutput> out;
    engine_.OnDatagram(pkt, from, now_ns, &out);
    return out;
  }
  std::vector<TanOutput> Expire(uint64_t now_ns) {
    std::vector<TanOutput> out;
    engine_.Expire(now_ns, &out);
    return out;
  }
  // Feeds `s`, expecting exactly one RESULT back.
  Parsed FeedForResult(const Spec& s, uint64_t now_ns, TanPeer from = kRoot) {
    const std::vector<TanOutput> out = Feed(s, now_ns, from);
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? Parsed{} : ParseOutput(out[0]);
  }

  // The TAN's own worker offers its contribution (OfferOwn).
  bool OfferOwn(const Spec& s, uint64_t now_ns, std::vector<TanOutput>* out) {
    const Bytes b = Build(s);
    AggPacket pkt;
    EXPECT_EQ(ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &pkt), WireError::kOk);
    return engine_.OfferOwn(pkt, now_ns, out);
  }

  TanEngine& engine() { return engine_; }
  const TanCounters& counters() const { return engine_.counters(); }

 private:
  TanEngine engine_;
};

void ExpectCompleteResult(const Parsed& r, uint32_t seq = 1) {
  EXPECT_EQ(r.f.opcode, Opcode::kResult);
  EXPECT_EQ(r.f.node_id, 0xFFFE);
  EXPECT_EQ(r.f.job_id, kJob);
  EXPECT_EQ(r.f.seq, seq);
  EXPECT_EQ(r.f.job_key, kKey);
  EXPECT_EQ(r.f.flags & flags::kIncomplete, 0);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.to, kRoot);
}

// A job run again: the root's partials come under a new run label. The
// engine forgets the job's chunks of the old run (their cached results
// included, which the new run must never get) and drops the old label's
// datagrams from then on. Label 0 belongs to the current run.
TEST(TanEngineTest, ANewRunLabelForgetsTheJobsChunksAndEndsTheOldLabel) {
  Tan tan;
  auto with = [](Spec s, uint32_t label) {
    s.incarnation = label;
    return s;
  };
  EXPECT_TRUE(tan.Feed(with(First(Pack<int32_t>({76}), {112}), 0xa), 0).empty());
  Parsed r = tan.FeedForResult(with(Late(112, Pack<int32_t>({2})), 0xa), 1 * kMs);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{78});
  EXPECT_EQ(r.f.incarnation, 0xau) << "the result answers the root's run";
  // Another chunk of the old run left open, and one of another job.
  Spec other = First(Pack<int32_t>({5}), {9});
  other.seq = 2;
  EXPECT_TRUE(tan.Feed(with(other, 0xa), 2 * kMs).empty());
  Spec job8 = First(Pack<int32_t>({1}), {9});
  job8.job = 8;
  EXPECT_TRUE(tan.Feed(with(job8, 0xa), 2 * kMs).empty());
  EXPECT_EQ(tan.engine().pending(), 2u);

  // The new run's chunk 1: first data again, not answered from the old run.
  EXPECT_TRUE(tan.Feed(with(First(Pack<int32_t>({10}), {112}), 0xb), 3 * kMs).empty());
  EXPECT_EQ(tan.counters().new_runs, 1u);
  EXPECT_EQ(tan.counters().repeat_first, 0u);
  EXPECT_EQ(tan.engine().pending(), 2u) << "job 7's old chunk 2 went, job 8's stayed";
  // The old run's late data is dropped; the new run's completes the chunk.
  EXPECT_TRUE(tan.Feed(with(Late(9, Pack<int32_t>({4}), {}), 0xa), 4 * kMs).empty());
  EXPECT_EQ(tan.counters().run_ended, 1u);
  r = tan.FeedForResult(with(Late(112, Pack<int32_t>({20})), 0), 5 * kMs);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{30});
  EXPECT_EQ(r.f.incarnation, 0xbu);
}

// Three levels: switch 102 covers ranks 2 and 3, through switch 105 (rank
// 2) and its own rank 3. 102's late partial misses 105, which took rank 2
// with it: the partial holds rank 3's data alone, and 105's own late
// partial brings rank 2's. The sum counts each once.
TEST(TanEngineTest, ALatePartialThatMissesASwitchLacksWhatThatSwitchCovers) {
  Tan tan;
  tan.engine().SetCovers(kJob, 102, {2, 3});
  tan.engine().SetCovers(kJob, 105, {2});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1}), {102}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(102, Pack<int32_t>({30}), {105}), 1 * kMs).empty())
      << "105 (and rank 2 with it) still outstanding";
  const Parsed r = tan.FeedForResult(Late(105, Pack<int32_t>({200})), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{231});
  EXPECT_EQ(tan.counters().duplicate_late, 0u);
}

// A switch's late partial that holds a rank the first data holds already:
// the chunk lacks rank 1 only, and switch 105's partial holds ranks 0 and
// 1 (its slot forwarded it as late data where the first data later came
// from a second slot of 105's, which had rank 0 alone). Merged, it would
// count rank 0 twice and return a wrong sum as complete; rank 1's own data
// completes the chunk.
TEST(TanEngineTest, ALateThatOverlapsTheFirstDataIsADuplicate) {
  Tan tan;
  tan.engine().SetCovers(kJob, 105, {0, 1});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1}), {1}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(105, Pack<int32_t>({21})), 1 * kMs).empty())
      << "rank 0 is in the first data";
  EXPECT_EQ(tan.counters().duplicate_late, 1u);
  const Parsed r = tan.FeedForResult(Late(1, Pack<int32_t>({20})), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{21});
}

// A leaf switch found no slot for a chunk and sent it up as missing (its
// partial of the op's identity, naming every member), and that partial was
// lost on its way here; its members' data went around it, each as late data.
// Every rank the switch covers is here on its own: they are the switch's
// whole share, counted once each, and the chunk completes. The switch's
// partial, should it still come, would count them twice: a duplicate.
TEST(TanEngineTest, AnOutstandingSwitchIsResolvedByEveryRanksOwnData) {
  Tan tan;
  tan.engine().SetCovers(kJob, 101, {0, 1, 2});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {101}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1})), 1 * kMs).empty());
  EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({20})), 2 * kMs).empty());
  EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({20})), 3 * kMs).empty()) << "a resend, parked once";
  EXPECT_EQ(tan.counters().by_members, 0u) << "rank 2 is not here yet";
  const Parsed r = tan.FeedForResult(Late(2, Pack<int32_t>({300})), 4 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1321});
  EXPECT_EQ(tan.counters().by_members, 1u);
  // The switch's lost partial comes after all: the result again, unchanged.
  const Parsed again = tan.FeedForResult(Late(101, Pack<int32_t>({0}), {0, 1, 2}), 5 * kMs);
  EXPECT_EQ(again.datagram, r.datagram);
}

// A root that lists the ranks a timed-out child covers (bypass.subswitch
// nodes) as missing, and is its own TAN: it knows what its child 101
// covers, not what 101's child 103 does. 101's late partial lacks 103, and
// 103's lacks nothing: together they are 101's whole share.
TEST(TanEngineTest, ALatePartialAndTheLatesOfWhatItLacksResolveTheRanksListed) {
  Tan tan;
  tan.engine().SetCovers(kJob, 101, {3, 4});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {3, 4}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(101, Pack<int32_t>({30}), {103}), 1 * kMs).empty())
      << "103 is no id the chunk awaits, and which ranks 101 lacks with it is unknown";
  const Parsed r = tan.FeedForResult(Late(103, Pack<int32_t>({400})), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1430});
  EXPECT_EQ(tan.counters().by_members, 1u);
}

// Ranks 6 and 7 (predicted stragglers, under switch 106 under 102) came on
// their own and were merged. Two late partials of 106 are here: one that
// holds them too (from before they were excluded) and one that lacks them.
// Only the second may complete 102's share; the first would count 6 and 7
// twice, and alone it leaves the chunk open (given up on, never wrong).
TEST(TanEngineTest, ALateHoldingRanksMergedAlreadyIsNeverCountedWithThem) {
  for (const bool lacking_comes : {false, true}) {
    SCOPED_TRACE(lacking_comes ? "the partial lacking 6 and 7 comes" : "it does not");
    Tan tan;
    tan.engine().SetCovers(kJob, 102, {2, 4, 6, 7});
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {2, 4, 6, 7}), 0).empty());
    EXPECT_TRUE(tan.Feed(Late(6, Pack<int32_t>({60})), 1 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(7, Pack<int32_t>({700})), 1 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(102, Pack<int32_t>({2}), {106}), 2 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(106, Pack<int32_t>({764})), 3 * kMs).empty())
        << "106's partial that holds 4, 6 and 7: 6 and 7 would count twice";
    if (!lacking_comes) {
      const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1 * kMs);
      ASSERT_EQ(out.size(), 1u);
      const Parsed r = ParseOutput(out[0]);
      EXPECT_NE(r.f.flags & flags::kIncomplete, 0);
      EXPECT_EQ(tan.counters().by_members, 0u);
      continue;
    }
    const Parsed r = tan.FeedForResult(Late(106, Pack<int32_t>({4}), {6, 7}), 4 * kMs);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1766});
    EXPECT_EQ(tan.counters().by_members, 1u);
  }
}

// A child's late partial that held nothing (the chunk found no slot there:
// it went up as missing), sent on by a root that names what it holds
// (CONTENT, naming no rank): it resolves no rank of the child. The chunk
// completes only with the rank's own data.
TEST(TanEngineTest, ALateNamingNoRankHoldsNoRanksData) {
  Tan tan;
  tan.engine().SetCovers(kJob, 101, {1, 2, 3});
  tan.engine().SetCovers(kJob, 102, {0});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {0}), 0).empty());
  Spec empty = Late(102, Pack<int32_t>({0}), {});
  empty.flags |= flags::kContent;
  EXPECT_TRUE(tan.Feed(empty, 1 * kMs).empty()) << "rank 0's data is not in it";
  EXPECT_EQ(tan.counters().by_members, 0u);
  const Parsed r = tan.FeedForResult(Late(0, Pack<int32_t>({5})), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1005});
}

// The root sent the chunk as first data while a child's partial was lost
// (or the chunk found no slot there), and the lates that would make up for
// it never came. Its slot reduced the chunk again, each child's partial in,
// and sends it with nothing missing: the chunk is that, what was merged
// here already included in it.
TEST(TanEngineTest, AFirstDataAgainWithNothingMissingCompletesTheChunk) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({0}), {101, 102}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(102, Pack<int32_t>({20})), 1 * kMs).empty());
  const Parsed r = tan.FeedForResult(First(Pack<int32_t>({21}), {}), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{21});
  EXPECT_EQ(tan.counters().complete_again, 1u);
  // A first data again that still lacks someone does not complete it.
  Tan other;
  EXPECT_TRUE(other.Feed(First(Pack<int32_t>({0}), {101, 102}), 0).empty());
  EXPECT_TRUE(other.Feed(First(Pack<int32_t>({1}), {102}), 1 * kMs).empty());
  EXPECT_EQ(other.counters().complete_again, 0u);
  EXPECT_EQ(other.counters().repeat_first, 1u);
}

// Seed 360566: an in-band job's root, its own TAN (which knows no covers),
// sent a chunk that found no slot there up as missing, every child listed.
// Two children's late partials came; the third's partial came after the
// root's entries had gone and took a slot there anew, which reduced the
// chunk again, every child's partial in but for a rank that child lacked
// (an excluded straggler, its data sent around it as a late). That first
// data again takes the first one's place: the rank's parked late completes
// it. Before, the TAN waited for the child's late partial until its give-up.
TEST(TanEngineTest, AFirstDataAgainLackingOnlyParkedLatesTakesTheFirstOnesPlace) {
  for (const bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "batch" : "incremental");
    Tan tan(batch ? Tan::Batch() : Tan::Defaults());
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({0}), {100, 101, 102}), 0).empty());
    EXPECT_TRUE(tan.Feed(Late(101, Pack<int32_t>({30})), 1 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(102, Pack<int32_t>({400})), 2 * kMs).empty());
    // Child 100's ranks 0 and 1, each its own late: nothing the TAN awaits.
    EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1})), 3 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({2})), 4 * kMs).empty());
    // A repeat that lacks an id neither awaited, merged nor parked here
    // changes nothing.
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({431}), {5}), 5 * kMs).empty());
    const Parsed r = tan.FeedForResult(First(Pack<int32_t>({432}), {0}), 6 * kMs);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{433});
    EXPECT_EQ(tan.counters().repeat_first, 2u);
    EXPECT_EQ(tan.counters().complete_again, 0u);
    EXPECT_EQ(tan.engine().held_lates(), 0u);
    EXPECT_EQ(tan.engine().pending(), 0u);
  }
}

// The same, where the root's slot anew timed out on a child whose late
// partial was merged here already: that child's data is awaited again (its
// ranks have no result, it sends the partial again, now a late), in batch
// mode taken from the lates held here.
TEST(TanEngineTest, AFirstDataAgainLackingAMergedIdAwaitsItAgain) {
  for (const bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "batch" : "incremental");
    Tan tan(batch ? Tan::Batch() : Tan::Defaults());
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({0}), {100, 101, 102}), 0).empty());
    EXPECT_TRUE(tan.Feed(Late(101, Pack<int32_t>({30})), 1 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(102, Pack<int32_t>({400})), 2 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1})), 3 * kMs).empty());
    EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({2})), 4 * kMs).empty());
    std::vector<TanOutput> out = tan.Feed(First(Pack<int32_t>({402}), {101, 0}), 5 * kMs);
    if (!batch) {
      EXPECT_TRUE(out.empty()) << "child 101's data was folded; it comes again";
      out = tan.Feed(Late(101, Pack<int32_t>({30})), 6 * kMs);
    }
    ASSERT_EQ(out.size(), 1u);
    const Parsed r = ParseOutput(out[0]);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{433});
    EXPECT_EQ(tan.engine().held_lates(), 0u);
  }
}

// A first data again that lists what the one in use listed changes nothing,
// though a late's own missing list made another id outstanding since: that
// id may lie below the one it lists (no covers say), and the late's data,
// merged here, would be lost.
TEST(TanEngineTest, AFirstDataAgainListingTheSameChangesNothing) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {101}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(101, Pack<int32_t>({20}), {5}), 1 * kMs).empty());
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {101}), 2 * kMs).empty());
  const Parsed r = tan.FeedForResult(Late(5, Pack<int32_t>({3})), 3 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1023});
}

// A late partial flagged CONTENT names the ranks it holds: the TAN needs no
// covers for its sender (a switch two levels down, whose parent listed its
// ranks as missing).
TEST(TanEngineTest, ALateThatNamesItsContentResolvesThoseIds) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1}), {7, 8, 9}), 0).empty());
  Spec late = Late(102, Pack<int32_t>({20}), {7, 9});
  late.flags |= flags::kContent;
  EXPECT_TRUE(tan.Feed(late, 1 * kMs).empty()) << "8 is still outstanding, and no more";
  const Parsed r = tan.FeedForResult(Late(8, Pack<int32_t>({300})), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{321});
}

// Ranks 3 and 4 came around their switch's slot as lates and were merged;
// then the slot took all three ranks' resends and its partial comes on as a
// late naming 3, 4 and 5. Where the same data reduced twice gives the same
// bytes (an or) it completes the chunk; a sum would count 3 and 4 twice, so
// there it is dropped and the chunk waits for rank 5's own data.
TEST(TanEngineTest, ALateOverlappingMergedIdsCompletesAnOrButNeverASum) {
  for (const ReduceOp op : {ReduceOp::kOr, ReduceOp::kSum}) {
    SCOPED_TRACE(op == ReduceOp::kOr ? "or" : "sum");
    Tan tan;
    auto with_op = [op](Spec s) { return WithOp(std::move(s), op); };
    EXPECT_TRUE(tan.Feed(with_op(First(Pack<int32_t>({0x1}), {3, 4, 5})), 0).empty());
    EXPECT_TRUE(tan.Feed(with_op(Late(3, Pack<int32_t>({0x10}))), 1 * kMs).empty());
    EXPECT_TRUE(tan.Feed(with_op(Late(4, Pack<int32_t>({0x100}))), 1 * kMs).empty());
    Spec slot = with_op(Late(102, Pack<int32_t>({0x1110}), {3, 4, 5}));
    slot.flags |= flags::kContent;
    const std::vector<TanOutput> out = tan.Feed(slot, 2 * kMs);
    if (op == ReduceOp::kOr) {
      ASSERT_EQ(out.size(), 1u);
      const Parsed r = ParseOutput(out[0]);
      ExpectCompleteResult(r);
      EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{0x1111});
      continue;
    }
    EXPECT_TRUE(out.empty()) << "3 and 4 would count twice";
    EXPECT_EQ(tan.counters().duplicate_late, 1u);
    const Parsed r = tan.FeedForResult(with_op(Late(5, Pack<int32_t>({0x1000}))), 3 * kMs);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{0x1111});
  }
}

// A late of ids that were all merged already is a duplicate whatever the
// op: it resolves nothing and is not held.
TEST(TanEngineTest, ALateOfOnlyMergedIdsIsADuplicateEvenForAnOr) {
  Tan tan;
  auto with_or = [](Spec s) { return WithOp(std::move(s), ReduceOp::kOr); };
  EXPECT_TRUE(tan.Feed(with_or(First(Pack<int32_t>({0x1}), {3, 4, 5})), 0).empty());
  EXPECT_TRUE(tan.Feed(with_or(Late(3, Pack<int32_t>({0x10}))), 1 * kMs).empty());
  EXPECT_TRUE(tan.Feed(with_or(Late(4, Pack<int32_t>({0x100}))), 1 * kMs).empty());
  Spec both = with_or(Late(102, Pack<int32_t>({0x110}), {3, 4}));
  both.flags |= flags::kContent;
  EXPECT_TRUE(tan.Feed(both, 2 * kMs).empty());
  EXPECT_EQ(tan.counters().duplicate_late, 1u);
  EXPECT_EQ(tan.engine().held_lates(), 0u);
  const Parsed r = tan.FeedForResult(with_or(Late(5, Pack<int32_t>({0x1000}))), 3 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{0x1111});
}

// Leaf 103 (ranks 1, 3 and 11) sent its late partial lacking rank 3, and
// later one holding rank 3 alone (its slot took rank 3's data once the
// prediction included it again). The switch's id stands for no data: the
// second holds the rest of the leaf's share, and completes the chunk. Sent
// again, it is a duplicate; so is a late of the leaf that holds nothing
// awaited, and neither is held.
TEST(TanEngineTest, ASwitchsSecondLatePartialHoldingTheRestOfItsShareCompletesTheChunk) {
  Tan tan;
  tan.engine().SetCovers(kJob, 103, {1, 3, 11});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({100}), {103}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(103, Pack<int32_t>({20}), {3}), 1 * kMs).empty()) << "3 is awaited";
  const Parsed r = tan.FeedForResult(Late(103, Pack<int32_t>({3}), {1, 11}), 2 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{123});

  Tan again;
  again.engine().SetCovers(kJob, 103, {1, 3, 11});
  EXPECT_TRUE(again.Feed(First(Pack<int32_t>({100}), {103}), 0).empty());
  EXPECT_TRUE(again.Feed(Late(103, Pack<int32_t>({20}), {3}), 1 * kMs).empty());
  EXPECT_TRUE(again.Feed(Late(103, Pack<int32_t>({20}), {3}), 2 * kMs).empty());
  EXPECT_EQ(again.counters().duplicate_late, 1u) << "1 and 11 would count twice";
  EXPECT_TRUE(again.Feed(Late(103, Pack<int32_t>({0}), {1, 3, 11}), 3 * kMs).empty());
  EXPECT_EQ(again.counters().duplicate_late, 2u) << "it holds nothing awaited";
  EXPECT_EQ(again.engine().held_lates(), 0u);
}

TEST(TanEngineTest, SeedExampleFirstData76PlusLate2From112Is78) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  EXPECT_EQ(tan.engine().pending(), 1u);
  const Parsed r = tan.FeedForResult(Late(112, Pack<int32_t>({2})), 3 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(r.f.dtype, DType::kInt32);
  EXPECT_EQ(r.f.op, ReduceOp::kSum);
  EXPECT_EQ(r.f.elem_count, 1);
  EXPECT_EQ(r.f.flags, 0);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{78});
  const TanCounters& c = tan.counters();
  EXPECT_EQ(c.first_data, 1u);
  EXPECT_EQ(c.late, 1u);
  EXPECT_EQ(c.merged, 1u);
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(c.gave_up, 0u);
  EXPECT_EQ(tan.engine().pending(), 0u);
  EXPECT_EQ(tan.engine().finished(), 1u);
}

TEST(TanEngineTest, ScaleAndTypeAreCarriedIntoTheResult) {
  Tan tan;
  Spec first = First(Pack<int32_t>({1, 2}), {3});
  first.scale = -8;
  first.op = ReduceOp::kMax;
  Spec late = Late(3, Pack<int32_t>({5, -1}));
  late.scale = -8;
  late.op = ReduceOp::kMax;
  EXPECT_TRUE(tan.Feed(first, 0).empty());
  const Parsed r = tan.FeedForResult(late, 1);
  ExpectCompleteResult(r);
  EXPECT_EQ(r.f.scale, -8);
  EXPECT_EQ(r.f.op, ReduceOp::kMax);
  EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{5, 2}));
}

TEST(TanEngineTest, SeveralStragglersBatchAndIncrementalGiveTheSameResult) {
  const Spec first = First(Pack<int32_t>({10, 20, -30}), {4, 11, 6});
  const std::vector<Spec> lates = {Late(11, Pack<int32_t>({1, 2, 3})),
                                   Late(4, Pack<int32_t>({100, -200, 300})),
                                   Late(6, Pack<int32_t>({-7, 7, 1 << 20}))};
  const std::vector<int32_t> expected = {104, -171, (1 << 20) + 273};
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    SCOPED_TRACE(o.trigger == TanTrigger::kBatch ? "batch" : "incremental");
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(first, 0).empty());
    // Nothing before the last straggler, the result exactly with it.
    EXPECT_TRUE(tan.Feed(lates[0], 1).empty());
    EXPECT_TRUE(tan.Feed(lates[1], 2).empty());
    EXPECT_EQ(tan.engine().pending(), 1u);
    const Parsed r = tan.FeedForResult(lates[2], 3);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), expected);
    EXPECT_EQ(tan.counters().merged, 3u);
    EXPECT_EQ(tan.engine().pending(), 0u);
    EXPECT_EQ(tan.engine().held_lates(), 0u);
  }
}

TEST(TanEngineTest, FirstDataWithNothingMissingIsTheResultAtOnce) {
  Tan tan;
  const Parsed r = tan.FeedForResult(First(Pack<int32_t>({5, 6}), {}), 0);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{5, 6}));
}

// The completion hook (agg-ps --sgd): called once per complete chunk with the
// RESULT's fields and the reduced payload, which it may rewrite.
struct HookCall {
  AggFields fields;
  Bytes payload;
};

TanOptions WithHook(std::vector<HookCall>* calls, bool accept, TanOptions o = Tan::Defaults()) {
  o.on_complete = [calls, accept](const AggFields& f, std::span<uint8_t> payload) {
    calls->push_back(HookCall{f, Bytes(payload.begin(), payload.end())});
    // Rewrites every int32 element to its negation.
    std::vector<int32_t> v(payload.size() / 4);
    std::memcpy(v.data(), payload.data(), payload.size());
    for (int32_t& x : v) x = -x;
    std::memcpy(payload.data(), v.data(), payload.size());
    return accept;
  };
  return o;
}

TEST(TanEngineTest, CompletionHookSeesTheReducedChunkOnceAndItsRewriteIsTheResult) {
  for (const TanOptions& base : {Tan::Defaults(), Tan::Batch()}) {
    SCOPED_TRACE(base.trigger == TanTrigger::kBatch ? "batch" : "incremental");
    std::vector<HookCall> calls;
    Tan tan(WithHook(&calls, true, base));
    Spec first = First(Pack<int32_t>({76, 10}), {112});
    first.aux = 4096;
    first.scale = -3;
    EXPECT_TRUE(tan.Feed(first, 0).empty());
    EXPECT_TRUE(calls.empty()) << "not before the chunk completes";
    Spec late = Late(112, Pack<int32_t>({2, -30}));
    late.aux = 4096;
    late.scale = -3;
    const Parsed r = tan.FeedForResult(late, 1);
    ASSERT_EQ(calls.size(), 1u);
    const AggFields& f = calls[0].fields;
    EXPECT_EQ(f.opcode, Opcode::kResult);
    EXPECT_EQ(f.job_id, kJob);
    EXPECT_EQ(f.seq, 1u);
    EXPECT_EQ(f.job_key, kKey);
    EXPECT_EQ(f.aux, 4096u);
    EXPECT_EQ(f.elem_count, 2);
    EXPECT_EQ(f.dtype, DType::kInt32);
    EXPECT_EQ(f.op, ReduceOp::kSum);
    EXPECT_EQ(f.scale, -3);
    EXPECT_EQ(f.flags, 0);
    EXPECT_EQ(Unpack<int32_t>(calls[0].payload), (std::vector<int32_t>{78, -20}));
    // The rewrite is what the RESULT carries; aux goes back with it.
    ExpectCompleteResult(r);
    EXPECT_EQ(r.f.aux, 4096u);
    EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{-78, 20}));
    // A repeated first data gets the cached datagram; the hook is not called again.
    EXPECT_EQ(tan.FeedForResult(first, 2, kOtherRoot).datagram, r.datagram);
    EXPECT_EQ(tan.FeedForResult(first, 3).datagram, r.datagram);
    EXPECT_EQ(calls.size(), 1u);
    EXPECT_EQ(tan.counters().completed, 1u);
    EXPECT_EQ(tan.counters().repeat_first, 2u);
    EXPECT_EQ(tan.counters().completion_refused, 0u);
  }
}

// A parameter-server job sends every chunk as first data with an empty missing list.
TEST(TanEngineTest, CompletionHookRunsForFirstDataWithNothingMissing) {
  std::vector<HookCall> calls;
  Tan tan(WithHook(&calls, true));
  Spec first = First(Pack<int32_t>({5, 6}), {});
  first.aux = 0xFFFF0000u;
  const Parsed r = tan.FeedForResult(first, 0);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].fields.aux, 0xFFFF0000u);
  EXPECT_EQ(Unpack<int32_t>(calls[0].payload), (std::vector<int32_t>{5, 6}));
  ExpectCompleteResult(r);
  EXPECT_EQ(r.f.aux, 0xFFFF0000u);
  EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{-5, -6}));
  EXPECT_EQ(tan.engine().pending(), 0u);
  EXPECT_EQ(tan.FeedForResult(first, 1).datagram, r.datagram);
  EXPECT_EQ(calls.size(), 1u);
}

TEST(TanEngineTest, CompletionHookRefusalMakesTheResultIncompleteWithNoMissingIds) {
  std::vector<HookCall> calls;
  Tan tan(WithHook(&calls, false));
  Spec first = First(Pack<int32_t>({5, 6}), {});
  first.flags = flags::kOrdered;
  const Parsed r = tan.FeedForResult(first, 0);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].fields.flags, flags::kOrdered) << "the hook sees no INCOMPLETE";
  EXPECT_EQ(r.f.opcode, Opcode::kResult);
  EXPECT_EQ(r.f.flags, flags::kOrdered | flags::kIncomplete);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.to, kRoot);
  const TanCounters& c = tan.counters();
  EXPECT_EQ(c.completion_refused, 1u);
  EXPECT_EQ(c.completed, 0u);
  EXPECT_EQ(c.gave_up, 0u);
  // Cached like any result: the same INCOMPLETE again, no second call.
  EXPECT_EQ(tan.FeedForResult(first, 1).datagram, r.datagram);
  EXPECT_EQ(calls.size(), 1u);
}

TEST(TanEngineTest, CompletionHookIsNotCalledOnGiveUp) {
  std::vector<HookCall> calls;
  Tan tan(WithHook(&calls, true));
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  const Parsed r = ParseOutput(out[0]);
  EXPECT_EQ(r.f.flags, flags::kIncomplete);
  EXPECT_EQ(r.missing, std::vector<uint16_t>{112});
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{76}) << "not rewritten";
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(tan.counters().gave_up, 1u);
  EXPECT_EQ(tan.counters().completion_refused, 0u);
}

// First data, then nodes 3, 5, 9 (ordered: ((first + l3) + l5) + l9).
struct OrderedCase {
  std::vector<float> first = {1e8f, 0.1f, 1.0f, -0.0f};
  std::vector<float> l3 = {1.0f, 0.2f, 1e-8f, 0.0f};
  std::vector<float> l5 = {-1e8f, 0.3f, -1.0f, -0.0f};
  std::vector<float> l9 = {1.0f, 1e7f, 1e-8f, 0.0f};

  std::vector<float> Sum(const std::vector<int>& order) const {
    std::vector<float> acc = first;
    for (int node : order) {
      const std::vector<float>& v = node == 3 ? l3 : node == 5 ? l5 : l9;
      for (size_t i = 0; i < acc.size(); ++i) {
        volatile float s = acc[i] + v[i];  // float32 arithmetic, no excess precision
        acc[i] = s;
      }
    }
    return acc;
  }
  Spec FirstSpec(bool ordered) const {
    Spec s = First(Pack(first), {3, 5, 9}, DType::kFloat32);
    if (ordered) s.flags |= flags::kOrdered;
    return s;
  }
  Spec LateSpec(int node) const {
    const std::vector<float>& v = node == 3 ? l3 : node == 5 ? l5 : l9;
    return Late(static_cast<uint16_t>(node), Pack(v), {}, DType::kFloat32);
  }
};

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

TEST(TanEngineTest, OrderedFloatsAreBitIdenticalWhateverTheArrivalOrder) {
  const OrderedCase k;
  const std::vector<uint32_t> expected = Bits(k.Sum({3, 5, 9}));
  std::mt19937 rng(2024);
  // The first data takes part in the shuffle: lates before it are held.
  std::vector<int> arrivals = {0, 3, 5, 9};
  for (int round = 0; round < 20; ++round) {
    std::shuffle(arrivals.begin(), arrivals.end(), rng);
    SCOPED_TRACE(::testing::Message() << "arrivals " << arrivals[0] << "," << arrivals[1] << ","
                                      << arrivals[2] << "," << arrivals[3]);
    Tan tan;  // incremental: ORDERED overrides it
    std::vector<TanOutput> out;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      const int a = arrivals[i];
      out = tan.Feed(a == 0 ? k.FirstSpec(true) : k.LateSpec(a), i);
      if (i + 1 < arrivals.size()) {
        EXPECT_TRUE(out.empty());
      }
    }
    ASSERT_EQ(out.size(), 1u);
    const Parsed r = ParseOutput(out[0]);
    ExpectCompleteResult(r);
    EXPECT_EQ(r.f.flags, flags::kOrdered);
    EXPECT_EQ(Bits(Unpack<float>(r.payload)), expected);
  }
}

TEST(TanEngineTest, ArrivalOrderFloatSumDependsOnTheOrder) {
  const OrderedCase k;
  // The crafted vector: 1e8 + 1 is 1e8 in float32, so where -1e8 comes matters.
  ASSERT_NE(Bits(k.Sum({5, 3, 9}))[0], Bits(k.Sum({3, 5, 9}))[0]);
  Tan tan;
  EXPECT_TRUE(tan.Feed(k.FirstSpec(false), 0).empty());
  EXPECT_TRUE(tan.Feed(k.LateSpec(5), 1).empty());
  EXPECT_TRUE(tan.Feed(k.LateSpec(3), 2).empty());
  const Parsed r = tan.FeedForResult(k.LateSpec(9), 3);
  EXPECT_EQ(r.f.flags, 0);
  EXPECT_EQ(Bits(Unpack<float>(r.payload)), Bits(k.Sum({5, 3, 9})));
  EXPECT_NE(Bits(Unpack<float>(r.payload)), Bits(k.Sum({3, 5, 9})));
  EXPECT_EQ(Unpack<float>(r.payload)[0], 2.0f);
  EXPECT_EQ(k.Sum({3, 5, 9})[0], 1.0f);
}

TEST(TanEngineTest, LateBeforeFirstDataIsHeldAndMerged) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(Late(112, Pack<int32_t>({2})), 0).empty());
    EXPECT_EQ(tan.engine().pending(), 1u);
    EXPECT_EQ(tan.engine().held_lates(), 1u);
    // A retransmission of it is a duplicate, not a second contribution.
    EXPECT_TRUE(tan.Feed(Late(112, Pack<int32_t>({2})), 1).empty());
    EXPECT_EQ(tan.counters().duplicate_late, 1u);
    const Parsed r = tan.FeedForResult(First(Pack<int32_t>({76}), {112}), 50 * kMs);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{78});
    EXPECT_EQ(tan.engine().pending(), 0u);
    EXPECT_EQ(tan.engine().held_lates(), 0u);
  }
}

// A child switch's late partial and some of its members' own data sent
// around it (a retransmission to the parameter node) all come before the
// first data: the partial, which holds the most, is merged first, so that
// the member only it holds (8) is not left out as a double count.
TEST(TanEngineTest, HeldLatesThatHoldTheMostAreMergedFirst) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(Late(7, Pack<int32_t>({1})), 0).empty());
    EXPECT_TRUE(tan.Feed(Late(9, Pack<int32_t>({100})), 1).empty());
    Spec partial = Late(102, Pack<int32_t>({111}), {7, 8, 9});
    partial.flags |= flags::kContent;  // holds 7, 8 (10) and 9
    EXPECT_TRUE(tan.Feed(partial, 2).empty());
    const Parsed r = tan.FeedForResult(First(Pack<int32_t>({1000}), {7, 8, 9}), 3);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1111});
    EXPECT_EQ(tan.counters().duplicate_late, 2u) << "7's and 9's own data, held by the partial";
  }
}

TEST(TanEngineTest, NestedTimeoutMakesTheLatePartialsMissingIdsOutstanding) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {100}), 0).empty());
  // Switch 100 timed out on node 2 itself: its late partial lists 2.
  EXPECT_TRUE(tan.Feed(Late(100, Pack<int32_t>({20}), {2}), 1).empty());
  EXPECT_EQ(tan.engine().pending(), 1u);
  const Parsed r = tan.FeedForResult(Late(2, Pack<int32_t>({3})), 2);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1023});
  EXPECT_EQ(tan.counters().merged, 2u);
}

// Switch 102 sent the chunk up lacking ranks 0, 3 and 4; the root listed
// them missing, and its first data holds rank 8's data with 102's partial.
// Then 102 restarted, and its new slot sent the chunk up again holding rank
// 4 alone, which the root's bypass entry sent here as 102's late partial,
// listing 0, 3 and 8. Rank 8 is in the chunk already: awaited again, its
// resend (it has no result yet) would count it twice.
TEST(TanEngineTest, ALatePartialListingARankTheFirstDataHoldsDoesNotAwaitItAgain) {
  Tan tan;
  tan.engine().SetCovers(kJob, 102, {0, 3, 4, 8});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {0, 3, 4}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1})), 1 * kMs).empty());
  EXPECT_TRUE(tan.Feed(Late(3, Pack<int32_t>({30})), 2 * kMs).empty());
  const Parsed r = tan.FeedForResult(Late(102, Pack<int32_t>({400}), {0, 3, 8}), 3 * kMs);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1431});
  // Rank 8's resend finds the chunk done and gets the same result.
  const Parsed again = tan.FeedForResult(Late(8, Pack<int32_t>({8})), 4 * kMs);
  EXPECT_EQ(again.datagram, r.datagram);
  EXPECT_EQ(tan.counters().late_after_done, 1u);
}

// A leaf found no slot for the chunk and sent it up holding nobody's data
// (CONFLICT), its four ranks listed; three of them went around it as late
// data. Then the leaf reduced the fourth rank's resend in a slot after all:
// its partial holds that rank, though its sender's id was merged with the
// empty one. It resolves the rank, and nobody is counted twice.
TEST(TanEngineTest, ALatePartialAfterTheSameSwitchsEmptyOneHoldsTheRestOfItsShare) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {100}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(2, Pack<int32_t>({2})), 1).empty());
  EXPECT_TRUE(tan.Feed(Late(3, Pack<int32_t>({3})), 2).empty());
  Spec empty = Late(100, Pack<int32_t>({0}), {1, 2, 3, 4});
  empty.flags |= flags::kConflict;
  EXPECT_TRUE(tan.Feed(empty, 3).empty());
  EXPECT_TRUE(tan.Feed(Late(4, Pack<int32_t>({4})), 4).empty());
  // A resend of the empty one, or a partial lacking what it did not list,
  // holds nothing to take.
  EXPECT_TRUE(tan.Feed(empty, 5).empty());
  EXPECT_TRUE(tan.Feed(Late(100, Pack<int32_t>({50}), {2, 3, 4, 7}), 6).empty());
  const Parsed r = tan.FeedForResult(Late(100, Pack<int32_t>({10}), {2, 3, 4}), 7);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1019});
  EXPECT_EQ(tan.counters().merged, 5u);
}

// A late that came in a retransmission (its first send was lost) makes the
// chunk's result say it was recovered, as a slot's does; so does a first
// data that says so. A chunk whose lates came on their first sends says
// nothing.
TEST(TanEngineTest, AResultThatWaitedForARetransmissionSaysItWasRecovered) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {2}), 0).empty());
  const Parsed plain = tan.FeedForResult(Late(2, Pack<int32_t>({3})), 1);
  EXPECT_EQ(plain.f.flags & flags::kRecovered, 0);
  Spec first = First(Pack<int32_t>({1000}), {2});
  first.seq = 2;
  EXPECT_TRUE(tan.Feed(first, 2).empty());
  Spec resent = Late(2, Pack<int32_t>({3}));
  resent.seq = 2;
  resent.flags |= flags::kRetransmission;
  const Parsed recovered = tan.FeedForResult(resent, 3);
  EXPECT_NE(recovered.f.flags & flags::kRecovered, 0);
  Spec said = First(Pack<int32_t>({1000}), {});
  said.seq = 3;
  said.flags |= flags::kRecovered;
  EXPECT_NE(tan.FeedForResult(said, 4).f.flags & flags::kRecovered, 0);
}

TEST(TanEngineTest, LeafLateOvertakingItsSwitchsLatePartialStillCounts) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {100}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(2, Pack<int32_t>({3})), 1).empty());  // resolves nothing yet
  const Parsed r = tan.FeedForResult(Late(100, Pack<int32_t>({20}), {2}), 2);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1023});
  EXPECT_EQ(tan.counters().duplicate_late, 0u);
}

TEST(TanEngineTest, CoverageResolvesWhatTheLateSwitchCoversLessItsOwnMissing) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    tan.engine().SetCovers(kJob, 100, {3, 2, 1, 0});
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {0, 1, 2, 3}), 0).empty());
    // Switch 100's partial holds 0, 1, 3: it resolves them, 2 stays outstanding.
    EXPECT_TRUE(tan.Feed(Late(100, Pack<int32_t>({30}), {2}), 1).empty());
    // Node 0 alone again would count it twice: a duplicate.
    EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({7})), 2).empty());
    EXPECT_EQ(tan.counters().duplicate_late, 1u);
    const Parsed r = tan.FeedForResult(Late(2, Pack<int32_t>({4})), 3);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1034});
  }
}

// Three levels, the TAN knowing what switch 103 covers but not what the
// switch 105 under it does: 103's late partial misses 105, which took node
// 0 with it. Node 0's data is not in 103's payload, so 103's late cannot
// resolve it: 105's own late lists 0 as missing, and node 0's late brings it.
TEST(TanEngineTest, ALateMissingASwitchOfUnknownCoverageResolvesOnlyItsSender) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    tan.engine().SetCovers(kJob, 103, {0, 9});
    EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1})), 0).empty()) << "held for its first data";
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {103}), 1).empty());
    EXPECT_TRUE(tan.Feed(Late(103, Pack<int32_t>({90}), {105}), 2).empty()) << "node 9's data";
    const Parsed r = tan.FeedForResult(Late(105, Pack<int32_t>({0}), {0}), 3);
    ExpectCompleteResult(r);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{1091}) << "node 0's data counted";
  }
}

TEST(TanEngineTest, CoverageLeavesTheLateSwitchsMissingIdsOutstandingAtGiveUp) {
  Tan tan;
  tan.engine().SetCovers(kJob, 100, {0, 1, 2, 3});
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1000}), {0, 1, 2, 3}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(100, Pack<int32_t>({30}), {2}), 1).empty());
  const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  const Parsed r = ParseOutput(out[0]);
  EXPECT_NE(r.f.flags & flags::kIncomplete, 0);
  EXPECT_EQ(r.missing, std::vector<uint16_t>{2});
}

TEST(TanEngineTest, GiveUpSendsIncompleteWithTheOutstandingIdsSorted) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({10, 10}), {9, 4, 1}), 5).empty());
    EXPECT_TRUE(tan.Feed(Late(4, Pack<int32_t>({1, 2})), 6).empty());
    EXPECT_TRUE(tan.Expire(5 + kGiveUp).empty()) << "not more than give_up_ns yet";
    const std::vector<TanOutput> out = tan.Expire(5 + kGiveUp + 1);
    ASSERT_EQ(out.size(), 1u);
    const Parsed r = ParseOutput(out[0]);
    EXPECT_EQ(r.to, kRoot);
    EXPECT_EQ(r.f.opcode, Opcode::kResult);
    EXPECT_EQ(r.f.flags, flags::kIncomplete);
    EXPECT_EQ(r.missing, (std::vector<uint16_t>{1, 9}));
    // The partial reduction (workers must not use it).
    EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{11, 12}));
    EXPECT_EQ(tan.counters().gave_up, 1u);
    EXPECT_EQ(tan.counters().completed, 0u);
    EXPECT_EQ(tan.engine().pending(), 0u);
    // Late data after the give-up is late for a finished chunk: its answer
    // is the same INCOMPLETE result again.
    const std::vector<TanOutput> again = tan.Feed(Late(9, Pack<int32_t>({0, 0})), 5 + kGiveUp + 2);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].datagram, out[0].datagram);
    EXPECT_EQ(tan.counters().late_after_done, 1u);
    EXPECT_TRUE(tan.Expire(10 * kGiveUp).empty());
  }
}

TEST(TanEngineTest, GiveUpListsAtMost255Ids) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1}), {1000}), 0).empty());
  std::vector<uint16_t> a, b;
  for (uint16_t i = 0; i < 255; ++i) a.push_back(i);    // 0..254
  for (uint16_t i = 500; i < 700; ++i) b.push_back(i);  // 500..699
  EXPECT_TRUE(tan.Feed(Late(1000, Pack<int32_t>({1}), a), 1).empty());
  EXPECT_TRUE(tan.Feed(Late(0, Pack<int32_t>({1}), b), 2).empty());  // 454 outstanding now
  const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  const Parsed r = ParseOutput(out[0]);
  EXPECT_NE(r.f.flags & flags::kIncomplete, 0);
  ASSERT_EQ(r.missing.size(), 255u);
  EXPECT_EQ(r.missing.front(), 1);
  EXPECT_EQ(r.missing[253], 254);
  EXPECT_EQ(r.missing[254], 500);
  EXPECT_TRUE(std::is_sorted(r.missing.begin(), r.missing.end()));
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{3});
}

TEST(TanEngineTest, GiveUpListFitsThePathOfTheFirstData) {
  Tan tan;
  const std::vector<int32_t> full(340, 1);  // 1360 bytes: a full chunk at a 1500-byte MTU
  EXPECT_TRUE(tan.Feed(First(Pack(full), {1000}), 0).empty());
  std::vector<uint16_t> nested;
  for (uint16_t i = 0; i < 100; ++i) nested.push_back(i);
  EXPECT_TRUE(tan.Feed(Late(1000, Pack(full), nested), 1).empty());
  const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_LE(out[0].datagram.size(), 1472u);
  const Parsed r = ParseOutput(out[0]);
  EXPECT_NE(r.f.flags & flags::kIncomplete, 0);
  EXPECT_EQ(r.missing.size(), (1472u - sizeof(AggHeader) - 1360) / 2);
  EXPECT_EQ(r.missing.front(), 0);
}

TEST(TanEngineTest, OrphanLateIsDroppedAfterTheGiveUpTime) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(Late(112, Pack<int32_t>({2})), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(113, Pack<int32_t>({5})), 60 * kMs).empty());
  EXPECT_TRUE(tan.Expire(kGiveUp + 1).empty());
  EXPECT_EQ(tan.counters().orphan_late, 1u) << "only the older one is past give_up_ns";
  EXPECT_EQ(tan.engine().pending(), 1u);
  EXPECT_EQ(tan.engine().held_lates(), 1u);
  EXPECT_TRUE(tan.Expire(60 * kMs + kGiveUp + 1).empty());
  EXPECT_EQ(tan.counters().orphan_late, 2u);
  EXPECT_EQ(tan.engine().pending(), 0u);
  EXPECT_EQ(tan.engine().held_lates(), 0u);
  // The first data now waits in vain for 112 and gives up.
  const uint64_t t = 200 * kMs;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), t).empty());
  const std::vector<TanOutput> out = tan.Expire(t + kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(ParseOutput(out[0]).missing, std::vector<uint16_t>{112});
}

TEST(TanEngineTest, DuplicateLateIsCountedOnce) {
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({10}), {1, 2}), 0).empty());
    EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({5})), 1).empty());
    EXPECT_TRUE(tan.Feed(Late(1, Pack<int32_t>({5})), 2).empty());
    EXPECT_EQ(tan.counters().duplicate_late, 1u);
    // A node the chunk never waited for resolves nothing.
    EXPECT_TRUE(tan.Feed(Late(77, Pack<int32_t>({1000})), 3).empty());
    const Parsed r = tan.FeedForResult(Late(2, Pack<int32_t>({6})), 4);
    EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{21});
    EXPECT_EQ(tan.counters().duplicate_late, 2u);
    EXPECT_EQ(tan.counters().merged, 2u);
    EXPECT_EQ(tan.engine().held_lates(), 0u);
  }
}

// Late data for a finished chunk is not merged again: its sender lacks the
// result (lost on its way down), which goes again to the root.
TEST(TanEngineTest, LateAfterDoneGetsTheResultAgain) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  const Parsed r = tan.FeedForResult(Late(112, Pack<int32_t>({2})), 1);
  for (uint64_t t : {2, 3}) {
    const Parsed again = tan.FeedForResult(Late(t == 2 ? 112 : 5, Pack<int32_t>({2})), t);
    EXPECT_EQ(again.to, kRoot);
    EXPECT_EQ(again.datagram, r.datagram) << "the same result, not a new sum";
  }
  EXPECT_EQ(tan.counters().late_after_done, 2u);
  EXPECT_EQ(tan.counters().completed, 1u);
  // Still the same result for a repeated first data.
  EXPECT_EQ(tan.FeedForResult(First(Pack<int32_t>({76}), {112}), 4).datagram, r.datagram);
}

// A root asks after a chunk it no longer holds (a member lost its result):
// a finished chunk's result goes again to whoever asks with the key; an
// open chunk's comes when it is done.
TEST(TanEngineTest, AQueryForAFinishedChunkGetsItsResultAgain) {
  Tan tan;
  Spec query;
  query.opcode = Opcode::kQuery;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  EXPECT_TRUE(tan.Feed(query, 1).empty()) << "still open";
  const Parsed r = tan.FeedForResult(Late(112, Pack<int32_t>({2})), 2);
  const Parsed again = tan.FeedForResult(query, 3, kOtherRoot);
  EXPECT_EQ(again.datagram, r.datagram);
  EXPECT_EQ(again.to, kOtherRoot);
  Spec forged = query;
  forged.key = kKey + 1;
  EXPECT_TRUE(tan.Feed(forged, 4).empty());
  EXPECT_EQ(tan.counters().queries, 3u);
  EXPECT_EQ(tan.counters().completed, 1u);
}

TEST(TanEngineTest, RepeatedFirstDataGetsTheCachedResult) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  // Again while open: counted, nothing to answer yet.
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 1).empty());
  const Parsed r = tan.FeedForResult(Late(112, Pack<int32_t>({2})), 2);
  // Again when done, even with other contents and from elsewhere: the same bytes.
  const Parsed again =
      tan.FeedForResult(First(Pack<int32_t>({1}), {112, 113}), 3 * kMs, kOtherRoot);
  EXPECT_EQ(again.datagram, r.datagram);
  EXPECT_EQ(again.to, kOtherRoot);
  EXPECT_EQ(tan.counters().repeat_first, 2u);
  EXPECT_EQ(tan.counters().first_data, 3u);
  EXPECT_EQ(tan.counters().completed, 1u);
  // Remembered for give_up_ns only; then it is a new chunk.
  EXPECT_TRUE(tan.Expire(2 + kGiveUp + 1).empty());
  EXPECT_EQ(tan.engine().finished(), 0u);
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 2 * kGiveUp).empty());
  EXPECT_EQ(tan.engine().pending(), 1u);
}

TEST(TanEngineTest, RepeatedIncompleteResultIsTheSameToo) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  const std::vector<TanOutput> out = tan.Expire(kGiveUp + 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(tan.FeedForResult(First(Pack<int32_t>({76}), {112}), kGiveUp + 2).datagram,
            out[0].datagram);
}

TEST(TanEngineTest, KeyMismatchIsDropped) {
  Tan tan;
  Spec early = Late(113, Pack<int32_t>({1000}));
  early.key = 0xbad;
  EXPECT_TRUE(tan.Feed(early, 0).empty());
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112, 113}), 1).empty());
  EXPECT_EQ(tan.counters().key_mismatch, 1u) << "the early late, checked at the first data";
  Spec late = Late(112, Pack<int32_t>({1000}));
  late.key = 0xbad;
  EXPECT_TRUE(tan.Feed(late, 2).empty());
  EXPECT_EQ(tan.counters().key_mismatch, 2u);
  // A first data with another key gets no result either.
  Spec first = First(Pack<int32_t>({76}), {112, 113});
  first.key = 0xbad;
  EXPECT_TRUE(tan.Feed(first, 3).empty());
  EXPECT_EQ(tan.counters().key_mismatch, 3u);
  EXPECT_TRUE(tan.Feed(Late(112, Pack<int32_t>({2})), 4).empty());
  const Parsed r = tan.FeedForResult(Late(113, Pack<int32_t>({3})), 5);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{81});
  EXPECT_TRUE(tan.Feed(first, 6).empty()) << "no cached result for another key";
  EXPECT_EQ(tan.counters().key_mismatch, 4u);
}

TEST(TanEngineTest, TypeOrLengthMismatchIsMalformed) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76, 1}), {112}), 0).empty());
  EXPECT_TRUE(tan.Feed(Late(112, Pack<float>({2, 2}), {}, DType::kFloat32), 1).empty());
  EXPECT_TRUE(tan.Feed(Late(112, Pack<int32_t>({2})), 2).empty());
  Spec scaled = Late(112, Pack<int32_t>({2, 2}));
  scaled.scale = 3;
  EXPECT_TRUE(tan.Feed(scaled, 3).empty());
  Spec max = Late(112, Pack<int32_t>({2, 2}));
  max.op = ReduceOp::kMax;
  EXPECT_TRUE(tan.Feed(max, 4).empty());
  EXPECT_EQ(tan.counters().malformed, 4u);
  EXPECT_EQ(tan.counters().merged, 0u);
  const Parsed r = tan.FeedForResult(Late(112, Pack<int32_t>({2, 2})), 5);
  EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{78, 3}));
}

TEST(TanEngineTest, PayloadBeyondMaxPayloadIsMalformed) {
  TanOptions o = Tan::Defaults();
  o.max_payload = 8;
  Tan tan(o);
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1, 2, 3}), {112}), 0).empty());
  EXPECT_EQ(tan.counters().malformed, 1u);
  EXPECT_EQ(tan.engine().pending(), 0u);
}

TEST(TanEngineTest, MaxPendingRefusesNewChunks) {
  TanOptions o = Tan::Defaults();
  o.max_pending = 2;
  Tan tan(o);
  Spec first = First(Pack<int32_t>({76}), {112});
  for (uint32_t seq : {1u, 2u, 3u}) {
    first.seq = seq;
    EXPECT_TRUE(tan.Feed(first, seq).empty());
  }
  EXPECT_EQ(tan.counters().refused_full, 1u);
  EXPECT_EQ(tan.engine().pending(), 2u);
  Spec early = Late(112, Pack<int32_t>({2}));
  early.seq = 4;
  EXPECT_TRUE(tan.Feed(early, 4).empty());
  EXPECT_EQ(tan.counters().refused_full, 2u);
  // A late for a chunk it holds is still welcome; its completion frees room.
  Spec late = Late(112, Pack<int32_t>({2}));
  late.seq = 1;
  EXPECT_EQ(tan.FeedForResult(late, 5).f.seq, 1u);
  first.seq = 3;
  EXPECT_TRUE(tan.Feed(first, 6).empty());
  EXPECT_EQ(tan.engine().pending(), 2u);
  EXPECT_EQ(tan.counters().refused_full, 2u);
}

TEST(TanEngineTest, MaxHeldLatesRefusesLatesBeforeTheirFirstData) {
  TanOptions o = Tan::Defaults();
  o.max_held_lates = 2;
  Tan tan(o);
  for (uint16_t node : {1, 2, 3})
    EXPECT_TRUE(tan.Feed(Late(node, Pack<int32_t>({1})), node).empty());
  EXPECT_EQ(tan.counters().refused_full, 1u);
  EXPECT_EQ(tan.engine().held_lates(), 2u);
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({1}), {1, 2, 3}), 4).empty());
  EXPECT_EQ(tan.engine().held_lates(), 0u);
  EXPECT_EQ(tan.FeedForResult(Late(3, Pack<int32_t>({1})), 5).payload, Pack<int32_t>({4}));
}

TEST(TanEngineTest, FinishedResultsAreBounded) {
  TanOptions o = Tan::Defaults();
  o.max_pending = 3;
  Tan tan(o);
  Spec first = First(Pack<int32_t>({1}), {});
  for (uint32_t seq = 1; seq <= 10; ++seq) {
    first.seq = seq;
    EXPECT_EQ(tan.Feed(first, seq).size(), 1u);
  }
  EXPECT_EQ(tan.engine().finished(), 3u);
  EXPECT_EQ(tan.counters().completed, 10u);
}

TEST(TanEngineTest, Int32SaturationSetsOverflow) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({kMax - 1, kMin + 1, 5}), {3}), 0).empty());
    const Parsed r = tan.FeedForResult(Late(3, Pack<int32_t>({5, -5, 5})), 1);
    EXPECT_EQ(r.f.flags, flags::kOverflow);
    EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{kMax, kMin, 10}));
  }
  // OVERFLOW on an input (the root's or a late partial's) stays on the result.
  Tan tan;
  Spec first = First(Pack<int32_t>({1}), {3});
  first.flags = flags::kOverflow;
  EXPECT_TRUE(tan.Feed(first, 0).empty());
  EXPECT_EQ(tan.FeedForResult(Late(3, Pack<int32_t>({1})), 1).f.flags, flags::kOverflow);
  Tan tan2;
  EXPECT_TRUE(tan2.Feed(First(Pack<int32_t>({1}), {3}), 0).empty());
  Spec late = Late(3, Pack<int32_t>({1}));
  late.flags |= flags::kOverflow;
  EXPECT_EQ(tan2.FeedForResult(late, 1).f.flags, flags::kOverflow);
}

// What the switch does with two members' data (slot_table.cc): LoadFirst,
// Accumulate, StoreResult.
Bytes SwitchReduce(DType dtype, const Bytes& a, const Bytes& b) {
  const uint32_t n = static_cast<uint32_t>(a.size() / ElementSize(dtype));
  std::vector<uint8_t> acc(n * AccumulatorElementSize(dtype));
  LoadFirst(dtype, a.data(), n, acc.data());
  EXPECT_FALSE(Accumulate(dtype, ReduceOp::kSum, acc.data(), b.data(), n));
  Bytes out(a.size());
  StoreResult(dtype, acc.data(), n, out.data());
  return out;
}

TEST(TanEngineTest, SixteenBitFloatsAccumulateInFloat32LikeTheSwitch) {
  const std::vector<float> a = {0.1f, 1.0f / 3, 60000.0f, -2.5f, 1e-7f, 0.0f};
  const std::vector<float> b = {0.2f, 1.0f / 3, 60000.0f, 2.5f, 1e-7f, -0.0f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<uint16_t> ha, hb;
    for (size_t i = 0; i < a.size(); ++i) {
      ha.push_back(dtype == DType::kFloat16 ? FloatToHalf(a[i]) : FloatToBFloat16(a[i]));
      hb.push_back(dtype == DType::kFloat16 ? FloatToHalf(b[i]) : FloatToBFloat16(b[i]));
    }
    Tan tan;
    EXPECT_TRUE(tan.Feed(First(Pack(ha), {1}, dtype), 0).empty());
    const Parsed r = tan.FeedForResult(Late(1, Pack(hb), {}, dtype), 1);
    EXPECT_EQ(r.f.dtype, dtype);
    EXPECT_EQ(r.payload, SwitchReduce(dtype, Pack(ha), Pack(hb)));
    // The same, spelled out: widen exactly, add in float32, narrow to nearest even.
    const std::vector<uint16_t> got = Unpack<uint16_t>(r.payload);
    for (size_t i = 0; i < a.size(); ++i) {
      const float wa = dtype == DType::kFloat16 ? HalfToFloat(ha[i]) : BFloat16ToFloat(ha[i]);
      const float wb = dtype == DType::kFloat16 ? HalfToFloat(hb[i]) : BFloat16ToFloat(hb[i]);
      volatile float sum = wa + wb;
      EXPECT_EQ(got[i], dtype == DType::kFloat16 ? FloatToHalf(sum) : FloatToBFloat16(sum)) << i;
    }
    if (dtype == DType::kFloat16) {
      EXPECT_EQ(Unpack<uint16_t>(r.payload)[2], 0x7C00) << "60000 + 60000 is +Inf in float16";
    }
  }
  // A lone first data comes back bit for bit, NaN payloads included.
  const std::vector<uint16_t> odd = {0x7E01, 0xFC00, 0x0001, 0x8000, 0x3555};
  Tan tan;
  EXPECT_EQ(tan.FeedForResult(First(Pack(odd), {}, DType::kFloat16), 0).payload, Pack(odd));
}

// A root whose chunk found no slot sends the op's identity as first data,
// flagged CONFLICT, and every member's data as late data. A chunk of one
// contribution must come back as a slot gives it, bit for bit as sent (NaN
// payloads too): a single-rank job's FINAL chunk completed from a slot and,
// once that slot went to a later chunk, again through here from a stale
// copy of its contribution, reached the job's main server twice, as two
// different NaNs, when the late was reduced into the identity.
TEST(TanEngineTest, AFirstDataThatHoldsNobodyTakesItsOneLateBitForBit) {
  struct Case {
    DType dtype;
    ReduceOp op;
    Bytes data;
  };
  const std::vector<Case> cases = {
      {DType::kFloat32, ReduceOp::kMax,
       Pack<uint32_t>({0xC2618000u, 0x7FAAF998u, 0x7F800000u, 0xC1970000u})},
      {DType::kFloat32, ReduceOp::kSum, Pack<uint32_t>({0xFFC00001u, 0x80000000u, 0x3F800000u})},
      {DType::kFloat32, ReduceOp::kMin, Pack<uint32_t>({0x7F800001u, 0x00000000u})},
      {DType::kFloat16, ReduceOp::kMax, Pack<uint16_t>({0x7F4E, 0x8000, 0x0000, 0x53E8})},
      {DType::kBFloat16, ReduceOp::kMin, Pack<uint16_t>({0xFFC1, 0x0001, 0x3F80})},
      {DType::kInt32, ReduceOp::kSum, Pack<int32_t>({-5, 0, std::numeric_limits<int32_t>::max()})},
  };
  for (const Case& k : cases) {
    for (const bool ordered : {false, true}) {
      for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
        SCOPED_TRACE(::testing::Message() << DTypeName(k.dtype) << " op " << static_cast<int>(k.op)
                                          << (ordered ? " ordered" : "")
                                          << (o.trigger == TanTrigger::kBatch ? " batch" : ""));
        Bytes identity(k.data.size());
        StoreIdentity(k.dtype, k.op, static_cast<uint32_t>(k.data.size() / ElementSize(k.dtype)),
                      identity.data());
        Spec first = First(identity, {4}, k.dtype);
        first.op = k.op;
        first.flags = static_cast<uint16_t>(flags::kConflict | flags::kFinal |
                                            (ordered ? flags::kOrdered : 0));
        Spec late = Late(4, k.data, {}, k.dtype);
        late.op = k.op;
        // The first data first, and the late before it (held until it comes).
        {
          Tan tan(o);
          EXPECT_TRUE(tan.Feed(first, 0).empty());
          const Parsed r = tan.FeedForResult(late, 1);
          ExpectCompleteResult(r);
          EXPECT_EQ(r.payload, k.data);
        }
        {
          Tan tan(o);
          EXPECT_TRUE(tan.Feed(late, 0).empty());
          const Parsed r = tan.FeedForResult(first, 1);
          ExpectCompleteResult(r);
          EXPECT_EQ(r.payload, k.data);
        }
      }
    }
  }
}

// Only the first late is taken as it is: two members' data is reduced (a NaN
// canonical, as a slot makes it), and a first data that holds members (no
// CONFLICT) is reduced with its late even when its values are the identity's.
TEST(TanEngineTest, AFirstDataThatHoldsNobodyReducesItsOtherLatesAsASlotWould) {
  const Bytes nan = Pack<uint32_t>({0x7FAAF998u, 0x3F800000u});
  const Bytes two = Pack<uint32_t>({0x40000000u, 0x40000000u});
  const Bytes identity = Pack<uint32_t>({0xFF800000u, 0xFF800000u});  // max's -Inf
  const Bytes expected = Pack<uint32_t>({kCanonicalNaNBits, 0x40000000u});
  for (const TanOptions& o : {Tan::Defaults(), Tan::Batch()}) {
    Tan tan(o);
    Spec first = First(identity, {4, 5}, DType::kFloat32);
    first.op = ReduceOp::kMax;
    first.flags = flags::kConflict;
    Spec a = Late(4, nan, {}, DType::kFloat32);
    Spec b = Late(5, two, {}, DType::kFloat32);
    a.op = b.op = ReduceOp::kMax;
    EXPECT_TRUE(tan.Feed(first, 0).empty());
    EXPECT_TRUE(tan.Feed(a, 1).empty());
    EXPECT_EQ(tan.FeedForResult(b, 2).payload, expected);

    Tan holds(o);
    first.flags = 0;  // -Inf from a member: it counts
    first.missing = {4};
    EXPECT_TRUE(holds.Feed(first, 0).empty());
    EXPECT_EQ(holds.FeedForResult(a, 1).payload,
              Pack<uint32_t>({kCanonicalNaNBits, 0x3F800000u}));
  }
}

TEST(TanEngineTest, BypassContributionIsLateData) {
  Tan tan;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76}), {112}), 0).empty());
  Spec worker = Late(112, Pack<int32_t>({2}));
  worker.opcode = Opcode::kContribution;
  const Parsed r = tan.FeedForResult(worker, 1);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{78});
}

// The seed's "TAN is late", case 2: node 121 runs the TAN and keeps its own
// data; only a chunk whose first data lists 121 takes it.
Spec Own(uint16_t node, Bytes payload, uint32_t seq = 1) {
  Spec s;
  s.opcode = Opcode::kContribution;
  s.node = node;
  s.seq = seq;
  s.payload = std::move(payload);
  return s;
}

constexpr TanPeer kOwnWorker{0x7f000001, 40121};

TEST(TanEngineTest, OwnDataOfALateTanCompletesItsChunk) {
  Tan tan;
  tan.engine().SetOwnWorker(kOwnWorker);
  std::vector<TanOutput> out;
  // Not late yet: no first data, so the worker sends it to its switch.
  EXPECT_FALSE(tan.OfferOwn(Own(121, Pack<int32_t>({5})), 0, &out));
  EXPECT_EQ(tan.engine().pending(), 0u);
  // The root gave up on 121 (and 130): the first data lists both.
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({70}), {121, 130}), kMs).empty());
  EXPECT_TRUE(tan.OfferOwn(Own(121, Pack<int32_t>({5})), 2 * kMs, &out));
  EXPECT_TRUE(out.empty());  // 130 is still out
  // Again (a retransmission): taken, nothing to send yet, not merged twice.
  EXPECT_TRUE(tan.OfferOwn(Own(121, Pack<int32_t>({5})), 3 * kMs, &out));
  EXPECT_TRUE(out.empty());
  // The result goes to the root, and to the own worker, whose switch never
  // learned its address from this chunk.
  const std::vector<TanOutput> done = tan.Feed(Late(130, Pack<int32_t>({3})), 4 * kMs);
  ASSERT_EQ(done.size(), 2u);
  const Parsed r = ParseOutput(done[0]);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), std::vector<int32_t>{78});
  EXPECT_EQ(done[1].to, kOwnWorker);
  EXPECT_EQ(done[1].datagram, r.datagram);
  EXPECT_EQ(tan.counters().own_data, 1u);
  EXPECT_EQ(tan.counters().merged, 2u);
  // Done: a retransmission gets the same result sent to the worker again.
  EXPECT_TRUE(tan.OfferOwn(Own(121, Pack<int32_t>({5})), 5 * kMs, &out));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].datagram, r.datagram);
  EXPECT_EQ(out[0].to, kOwnWorker);
  EXPECT_EQ(tan.counters().own_repeats, 2u);
  // Another node's data for the done chunk is not the TAN's own: not taken.
  out.clear();
  EXPECT_FALSE(tan.OfferOwn(Own(130, Pack<int32_t>({3})), 6 * kMs, &out));
  EXPECT_TRUE(out.empty());
}

TEST(TanEngineTest, OwnDataFinishingTheChunkReturnsTheResult) {
  Tan tan;
  std::vector<TanOutput> out;
  EXPECT_TRUE(tan.Feed(First(Pack<int32_t>({76, 1}), {121}), 0).empty());
  // A node the first data does not list, another chunk, another key: not taken.
  EXPECT_FALSE(tan.OfferOwn(Own(122, Pack<int32_t>({2, 2})), kMs, &out));
  EXPECT_FALSE(tan.OfferOwn(Own(121, Pack<int32_t>({2, 2}), 2), kMs, &out));
  Spec forged = Own(121, Pack<int32_t>({2, 2}));
  forged.key = kKey + 1;
  EXPECT_FALSE(tan.OfferOwn(forged, kMs, &out));
  // A late BYPASS copy is late data, not the worker's own contribution.
  Spec flagged = Late(121, Pack<int32_t>({2, 2}));
  EXPECT_FALSE(tan.OfferOwn(flagged, kMs, &out));
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(tan.OfferOwn(Own(121, Pack<int32_t>({2, 2})), 2 * kMs, &out));
  ASSERT_EQ(out.size(), 1u) << "no own worker address: the root only";
  const Parsed r = ParseOutput(out[0]);
  ExpectCompleteResult(r);
  EXPECT_EQ(Unpack<int32_t>(r.payload), (std::vector<int32_t>{78, 3}));
  EXPECT_EQ(tan.counters().own_data, 1u);
  EXPECT_EQ(tan.counters().late, 0u);
}

TEST(TanEngineTest, OtherOpcodesAreIgnored) {
  Tan tan;
  Spec contribution = Late(112, Pack<int32_t>({2}));
  contribution.opcode = Opcode::kContribution;
  contribution.flags = 0;
  Spec result = First(Pack<int32_t>({2}), {});
  result.opcode = Opcode::kResult;
  Spec ack = First({}, {});
  ack.opcode = Opcode::kAck;
  for (const Spec& s : {contribution, result, ack}) EXPECT_TRUE(tan.Feed(s, 0).empty());
  EXPECT_EQ(tan.counters().ignored, 3u);
  EXPECT_EQ(tan.engine().pending(), 0u);
}

// Random first data, late data (nested lists, coverage, duplicates, wrong
// keys and types, other opcodes) and expiries: the bookkeeping holds, each
// chunk gets one result whatever is repeated, and everything is let go.
TEST(TanEngineTest, RandomTrafficKeepsTheBookkeeping) {
  for (const size_t max_pending : {size_t{1000}, size_t{4}}) {
    SCOPED_TRACE(max_pending);
    TanOptions o = Tan::Defaults();
    o.max_pending = max_pending;
    o.max_held_lates = max_pending == 4 ? 6 : 16384;
    o.trigger = max_pending == 4 ? TanTrigger::kBatch : TanTrigger::kIncremental;
    Tan tan(o);
    tan.engine().SetCovers(kJob, 100, {0, 1, 2, 3});
    std::mt19937 rng(7);
    const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    const auto ids = [&] {
      std::vector<uint16_t> v;
      for (int i = pick(4); i > 0; --i) {
        v.push_back(static_cast<uint16_t>(pick(8) == 0 ? 100 : pick(8)));
      }
      return v;
    };
    std::map<uint32_t, Bytes> results;  // seq -> its one result
    const auto record = [&](const std::vector<TanOutput>& out) {
      for (const TanOutput& x : out) {
        const Parsed r = ParseOutput(x);
        ASSERT_EQ(r.f.opcode, Opcode::kResult);
        auto [it, fresh] = results.emplace(r.f.seq, x.datagram);
        if (!fresh && max_pending == 1000) {
          EXPECT_EQ(it->second, x.datagram) << "seq " << r.f.seq;
        }
      }
    };
    uint64_t now = 0;
    for (int step = 0; step < 3000; ++step) {
      now += static_cast<uint64_t>(pick(50)) * 1000;  // the run lasts less than give_up_ns
      const uint32_t seq = static_cast<uint32_t>(pick(40));
      const int kind = pick(20);
      Spec s;
      if (kind < 4) {
        s = First(Pack<int32_t>({pick(100)}), ids());
        if (pick(4) == 0) s.flags |= flags::kOrdered;
      } else if (kind < 18) {
        s = Late(static_cast<uint16_t>(pick(6) == 0 ? 100 : pick(8)), Pack<int32_t>({pick(100)}),
                 ids());
        if (kind == 17) s.opcode = Opcode::kContribution;
      } else {
        s = Late(1, Pack<int32_t>({1}));
        s.opcode = pick(2) == 0 ? Opcode::kResult : Opcode::kAck;
      }
      s.seq = seq;
      if (pick(50) == 0) s.key = 0xbad;
      if (pick(50) == 0) s.payload = Pack<int32_t>({1, 2});
      record(tan.Feed(s, now));
      if (pick(100) == 0) record(tan.Expire(now));
      ASSERT_LE(tan.engine().pending(), max_pending);
      ASSERT_LE(tan.engine().finished(), max_pending);
      ASSERT_LE(tan.engine().held_lates(), o.max_held_lates);
    }
    record(tan.Expire(now + kGiveUp + 1));
    EXPECT_EQ(tan.engine().pending(), 0u);
    EXPECT_EQ(tan.engine().held_lates(), 0u);
    record(tan.Expire(now + 3 * kGiveUp));
    EXPECT_EQ(tan.engine().finished(), 0u);
    const TanCounters& c = tan.counters();
    EXPECT_GT(c.completed, 0u);
    EXPECT_GT(c.merged, 0u);
    EXPECT_GT(c.duplicate_late, 0u);
    EXPECT_GT(c.key_mismatch, 0u);
    EXPECT_GT(c.malformed, 0u);
    EXPECT_GT(c.repeat_first, 0u);
    if (max_pending == 4) {
      EXPECT_GT(c.refused_full, 0u);
    }
  }
}

}  // namespace
}  // namespace aggswitch::aggregator
