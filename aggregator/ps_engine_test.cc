// The parameter node's engine, driven with real datagrams (BuildAggregation)
// parsed by ParseAggregation, its RESULTs parsed back: the aggregation of
// contributions no switch reduced, alone and together with the TAN's first
// data.
#include "aggregator/ps_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <random>
#include <vector>

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
std::vector<T> Unpack(const uint8_t* p, size_t bytes) {
  std::vector<T> out(bytes / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(T));
  return out;
}

// A member's contribution as a switch forwards it to the parameter node.
AggFields Direct(uint16_t node, uint16_t expected, uint16_t flags = flags::kAggregateAtPs) {
  AggFields f;
  f.opcode = Opcode::kContribution;
  f.flags = flags;
  f.node_id = node;
  f.job_id = kJob;
  f.seq = 1;
  f.job_key = kKey;
  f.expected = expected;
  f.aux = 512;  // the chunk's element offset: the result carries it
  f.addr_low = 0x40;
  return f;
}

// A root's complete reduction of the chunk, to be checked: it counts
// `counted` of the job's `nodes` nodes.
AggFields Verify(uint16_t nodes, uint16_t counted, uint16_t flags = 0) {
  AggFields f;
  f.opcode = Opcode::kVerify;
  f.flags = flags;
  f.node_id = 0xFFFE;
  f.job_id = kJob;
  f.seq = 1;
  f.job_key = kKey;
  f.expected = nodes;
  f.node_count = counted;
  f.aux = 512;
  return f;
}

// A root's first data: its reduction, and the node ids it still misses.
AggFields First() {
  AggFields f;
  f.opcode = Opcode::kPartial;
  f.node_id = 0xFFFE;
  f.job_id = kJob;
  f.seq = 1;
  f.job_key = kKey;
  return f;
}

Bytes Build(AggFields f, const Bytes& payload, std::vector<uint16_t> missing = {}) {
  f.elem_count = static_cast<uint16_t>(payload.size() / ElementSize(f.dtype));
  Bytes buf(sizeof(AggHeader) + 2 * missing.size() + payload.size());
  const uint32_t n = BuildAggregation(f, missing.data(), static_cast<uint8_t>(missing.size()),
                                      payload.data(), static_cast<uint32_t>(payload.size()),
                                      buf.data(), static_cast<uint32_t>(buf.size()));
  EXPECT_EQ(n, buf.size());
  return buf;
}

class PsEngineTest : public ::testing::Test {
 protected:
  PsEngineTest() : ps_(Options()) {}

  static PsOptions Options() {
    PsOptions o;
    o.tan.give_up_ns = kGiveUp;
    o.tan.max_pending = 8;
    o.tan.max_held_lates = 16;
    return o;
  }

  // Feeds one datagram; what the engine sent is in out_.
  void Feed(const Bytes& datagram, uint64_t now_ns = 0, TanPeer from = kRoot) {
    AggPacket pkt;
    ASSERT_EQ(ParseAggregation(datagram.data(), static_cast<uint32_t>(datagram.size()), &pkt),
              WireError::kOk);
    ps_.OnDatagram(pkt, from, now_ns, &out_);
  }
  void FeedInt(uint16_t node, uint16_t expected, std::vector<int32_t> values, uint64_t now_ns = 0,
               TanPeer from = kRoot) {
    Feed(Build(Direct(node, expected), Pack(values)), now_ns, from);
  }

  // The one RESULT sent since the last call, parsed.
  struct Result {
    TanPeer to;
    AggHeader h;
    Bytes payload;
  };
  Result TakeResult(Opcode opcode = Opcode::kResult) {
    Result r{};
    EXPECT_EQ(out_.size(), 1u);
    if (out_.empty()) return r;
    const TanOutput o = out_.front();
    out_.clear();
    AggPacket pkt;
    EXPECT_EQ(ParseAggregation(o.datagram.data(), static_cast<uint32_t>(o.datagram.size()), &pkt),
              WireError::kOk);
    EXPECT_EQ(pkt.opcode, opcode);
    r.to = o.to;
    r.h = *pkt.header;
    r.payload.assign(pkt.payload, pkt.payload + pkt.payload_len);
    return r;
  }
  std::vector<int32_t> Ints(const Result& r) {
    return Unpack<int32_t>(r.payload.data(), r.payload.size());
  }

  PsEngine ps_;
  std::vector<TanOutput> out_;
};

// Four members' data, none reduced by a switch: their node ids' bits fill in
// 0001 -> 0101 -> 0111 -> 1111, and only the last brings the result.
TEST_F(PsEngineTest, FourMembersAggregateHereAndCompleteWithTheLast) {
  FeedInt(0, 4, {1, 10});
  FeedInt(2, 4, {3, 30});
  FeedInt(1, 4, {2, 20});
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.pending(), 1u);
  EXPECT_EQ(ps_.kept(), 3u);
  FeedInt(3, 4, {4, 40}, 0, kOtherRoot);
  const Result r = TakeResult();
  EXPECT_EQ(r.to, kRoot);  // where the chunk's first contribution came from
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{10, 100}));
  EXPECT_EQ(r.h.flags.host(), flags::kVerified);
  EXPECT_EQ(r.h.job_id.host(), kJob);
  EXPECT_EQ(r.h.seq.host(), 1u);
  EXPECT_EQ(r.h.aux.host(), 512u);
  EXPECT_EQ(r.h.addr_low.host(), 0x40u);
  EXPECT_EQ(ps_.counters().direct, 4u);
  EXPECT_EQ(ps_.counters().reduced, 1u);
  EXPECT_EQ(ps_.pending(), 0u);
  EXPECT_EQ(ps_.kept(), 0u);
}

// A job run again (a new run label from its root): the contributions kept
// for the old run and its answers are forgotten, so the new run's chunk is
// reduced from the new run's data alone; the old label's datagrams drop.
TEST_F(PsEngineTest, ANewRunForgetsWhatTheOldRunLeftHere) {
  auto direct = [&](uint16_t node, uint32_t label, int32_t value) {
    AggFields f = Direct(node, 2);
    f.incarnation = label;
    Feed(Build(f, Pack(std::vector<int32_t>{value})));
  };
  direct(0, 0xa, 1);
  direct(1, 0xa, 2);
  EXPECT_EQ(Ints(TakeResult()), std::vector<int32_t>{3});
  direct(0, 0xa, 100);  // a second chunk of the old run, half in
  AggFields other = Direct(0, 2);
  other.seq = 2;
  other.incarnation = 0xa;
  Feed(Build(other, Pack(std::vector<int32_t>{100})));
  EXPECT_EQ(out_.size(), 1u) << "a repeat of chunk 1 gets its answer again; chunk 2 waits";
  out_.clear();
  // The new run's chunk 1: neither the old answer nor the old data.
  direct(0, 0xb, 11);
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.pending(), 1u) << "the old run's chunk 2 is gone";
  direct(1, 0xa, 50);  // the old run's, late
  EXPECT_TRUE(out_.empty());
  direct(1, 0xb, 12);
  const Result r = TakeResult();
  EXPECT_EQ(Ints(r), std::vector<int32_t>{23});
  EXPECT_EQ(r.h.incarnation.host(), 0xbu);
}

// A node's second contribution to a chunk is not counted again.
TEST_F(PsEngineTest, ANodesRepeatIsNotCountedTwice) {
  FeedInt(0, 2, {5});
  FeedInt(0, 2, {5});
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.counters().duplicates, 1u);
  FeedInt(1, 2, {7});
  EXPECT_EQ(Ints(TakeResult()), (std::vector<int32_t>{12}));
}

// Float data reduced here in ascending node id: the same bits whatever
// order the members' data arrives in.
TEST_F(PsEngineTest, FloatSumsAreTheSameBitsInAnyArrivalOrder) {
  const std::vector<float> values = {1e8f, 1.0f, -1e8f, 3.5f, 1e-3f, 7e7f};
  std::vector<uint16_t> order = {0, 1, 2, 3, 4, 5};
  std::mt19937 rng(5);
  Bytes first_bits;
  for (int run = 0; run < 20; ++run) {
    std::shuffle(order.begin(), order.end(), rng);
    for (const uint16_t node : order) {
      AggFields f = Direct(node, 6);
      f.dtype = DType::kFloat32;
      f.seq = static_cast<uint32_t>(run + 1);
      Feed(Build(f, Pack(std::vector<float>{values[node]})));
    }
    const Result r = TakeResult();
    if (run == 0) first_bits = r.payload;
    EXPECT_EQ(r.payload, first_bits) << "run " << run;
  }
  float expected = values[0];
  for (size_t i = 1; i < values.size(); ++i) expected += values[i];
  EXPECT_EQ(std::bit_cast<uint32_t>(Unpack<float>(first_bits.data(), 4)[0]),
            std::bit_cast<uint32_t>(expected));
}

// An int32 sum that saturates here is answered with OVERFLOW, never as
// verified: 1.5e9 + 1.0e9 does not fit. Exactly INT32_MAX does.
TEST_F(PsEngineTest, ASaturatedSumIsAnsweredOverflowNotVerified) {
  FeedInt(0, 2, {1'500'000'000, std::numeric_limits<int32_t>::max() - 5});
  FeedInt(1, 2, {1'000'000'000, 5});
  const Result r = TakeResult();
  EXPECT_EQ(r.h.flags.host(), flags::kOverflow);
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{std::numeric_limits<int32_t>::max(),
                                           std::numeric_limits<int32_t>::max()}));
  AggFields f = Direct(0, 2);
  f.seq = 2;
  Feed(Build(f, Pack(std::vector<int32_t>{-1'500'000'000})));
  f.node_id = 1;
  Feed(Build(f, Pack(std::vector<int32_t>{-1'000'000'000})));
  const Result negative = TakeResult();
  EXPECT_EQ(negative.h.flags.host(), flags::kOverflow);
  EXPECT_EQ(Ints(negative)[0], std::numeric_limits<int32_t>::min());
  f = Direct(0, 2);
  f.seq = 3;
  Feed(Build(f, Pack(std::vector<int32_t>{std::numeric_limits<int32_t>::max() - 5})));
  f.node_id = 1;
  Feed(Build(f, Pack(std::vector<int32_t>{5})));
  const Result exact = TakeResult();
  EXPECT_EQ(exact.h.flags.host(), flags::kVerified);
  EXPECT_EQ(Ints(exact)[0], std::numeric_limits<int32_t>::max());
}

// Release at the switch: the root's partial (members 0 and 1) comes as first
// data, and the members it lacks send their data straight here. Whichever
// comes first, the sum counts every member once.
TEST_F(PsEngineTest, ThePartialOfAReleasedSlotAndTheDirectDataMeetAtTheTan) {
  // The partial first, then the direct data (one repeat of a counted member).
  Feed(Build(First(), Pack(std::vector<int32_t>{3}), {2, 3}));
  EXPECT_TRUE(out_.empty());
  FeedInt(2, 4, {4});
  FeedInt(0, 4, {1});  // its data is in the partial already
  EXPECT_TRUE(out_.empty());
  FeedInt(3, 4, {8});
  Result r = TakeResult();
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{15}));
  EXPECT_EQ(ps_.counters().to_tan, 3u);
  EXPECT_EQ(ps_.tan().counters().completed, 1u);
  EXPECT_EQ(ps_.tan().counters().duplicate_late, 1u);

  // Direct data first, kept here; the partial then takes them over.
  AggFields f = Direct(3, 4);
  f.seq = 2;
  Feed(Build(f, Pack(std::vector<int32_t>{8})));
  f.node_id = 0;  // counted in the partial too
  Feed(Build(f, Pack(std::vector<int32_t>{1})));
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.kept(), 2u);
  AggFields first = First();
  first.seq = 2;
  Feed(Build(first, Pack(std::vector<int32_t>{3}), {2, 3}));
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.kept(), 0u);
  f.node_id = 2;
  Feed(Build(f, Pack(std::vector<int32_t>{4})));
  r = TakeResult();
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{15}));
}

// A chunk still short at the give-up is answered INCOMPLETE, and that answer
// is what a later contribution to it gets too.
TEST_F(PsEngineTest, AChunkStillShortAtTheGiveUpIsIncomplete) {
  FeedInt(0, 3, {1}, 0);
  FeedInt(1, 3, {2}, 10 * kMs);
  ps_.Expire(kGiveUp - 1, &out_);
  EXPECT_TRUE(out_.empty());
  ps_.Expire(kGiveUp + 1, &out_);
  const Result r = TakeResult();
  EXPECT_EQ(r.h.flags.host(), flags::kIncomplete);
  EXPECT_EQ(ps_.counters().gave_up, 1u);
  FeedInt(2, 3, {4}, kGiveUp + 2, kOtherRoot);
  const Result again = TakeResult();
  EXPECT_EQ(again.to, kOtherRoot);
  EXPECT_EQ(again.h.flags.host(), flags::kIncomplete);
  EXPECT_EQ(ps_.counters().results_again, 1u);
  // Forgotten give_up_ns later: a new chunk with that id starts afresh.
  ps_.Expire(3 * kGiveUp, &out_);
  EXPECT_TRUE(out_.empty());
  FeedInt(2, 1, {4}, 3 * kGiveUp);
  EXPECT_EQ(Ints(TakeResult()), (std::vector<int32_t>{4}));
}

// A member that did not get the result sends again: the same result goes to
// where the repeat came from, whether this engine or the TAN finished it.
TEST_F(PsEngineTest, ARepeatAfterTheResultGetsItAgain) {
  FeedInt(0, 2, {1});
  FeedInt(1, 2, {2});
  const Result r = TakeResult();
  FeedInt(1, 2, {2}, 1, kOtherRoot);
  const Result again = TakeResult();
  EXPECT_EQ(again.to, kOtherRoot);
  EXPECT_EQ(again.payload, r.payload);

  AggFields first = First();
  first.seq = 9;
  Feed(Build(first, Pack(std::vector<int32_t>{6}), {}));  // nothing missing: done at once
  const Result tan = TakeResult();
  AggFields f = Direct(0, 2);
  f.seq = 9;
  Feed(Build(f, Pack(std::vector<int32_t>{1})), 1, kOtherRoot);
  const Result tan_again = TakeResult();
  EXPECT_EQ(tan_again.to, kOtherRoot);
  EXPECT_EQ(tan_again.payload, tan.payload);
  EXPECT_EQ(ps_.counters().results_again, 2u);
}

// A switch's CONFLICT (no slot for the chunk) is direct data like any other.
TEST_F(PsEngineTest, ConflictsAreAggregatedHere) {
  Feed(Build(Direct(0, 2, flags::kConflict | flags::kAggregateAtPs),
             Pack(std::vector<int32_t>{1})));
  Feed(Build(Direct(1, 2, flags::kConflict), Pack(std::vector<int32_t>{2})));
  EXPECT_EQ(Ints(TakeResult()), (std::vector<int32_t>{3}));
  EXPECT_EQ(ps_.counters().conflicts, 2u);
}

// A parameter-server job's chunk that found no slot at its root is reduced
// here from its CONFLICT data: the TAN's completion hook (agg-ps --sgd) sees
// that sum as it sees the TAN's, once, and the members get what it wrote
// (the parameters), not the gradient's sum; a refusal makes it INCOMPLETE.
TEST_F(PsEngineTest, AChunkReducedHereGoesThroughTheCompletionHook) {
  struct Seen {
    int calls = 0;
    uint32_t aux = 0;
    std::vector<float> sum;
  };
  auto seen = std::make_shared<Seen>();
  auto accept = std::make_shared<bool>(true);
  PsOptions o = Options();
  o.tan.on_complete = [seen, accept](const AggFields& f, std::span<uint8_t> payload) {
    ++seen->calls;
    seen->aux = f.aux;
    seen->sum = Unpack<float>(payload.data(), payload.size());
    for (size_t i = 0; i < payload.size() / 4; ++i) {
      const float p = -0.5f * seen->sum[i];  // one step from zero, rate 0.5
      std::memcpy(payload.data() + 4 * i, &p, 4);
    }
    return *accept;
  };
  PsEngine ps(o);
  const auto feed = [&](uint16_t node, uint32_t seq, std::vector<float> values) {
    AggFields f = Direct(node, 2, flags::kConflict | flags::kAggregateAtPs);
    f.dtype = DType::kFloat32;
    f.seq = seq;
    const Bytes d = Build(f, Pack(values));
    AggPacket pkt;
    ASSERT_EQ(ParseAggregation(d.data(), static_cast<uint32_t>(d.size()), &pkt), WireError::kOk);
    ps.OnDatagram(pkt, kRoot, 0, &out_);
  };
  feed(0, 1, {1.0f, 2.0f});
  feed(1, 1, {3.0f, -6.0f});
  Result r = TakeResult();
  EXPECT_EQ(seen->calls, 1);
  EXPECT_EQ(seen->aux, 512u) << "the chunk's element offset: where in the model it goes";
  EXPECT_EQ(seen->sum, (std::vector<float>{4.0f, -4.0f}));
  EXPECT_EQ(Unpack<float>(r.payload.data(), r.payload.size()), (std::vector<float>{-2.0f, 2.0f}));
  EXPECT_EQ(r.h.flags.host(), flags::kVerified);
  // A repeat gets the kept answer: the hook ran once.
  feed(1, 1, {3.0f, -6.0f});
  EXPECT_EQ(Unpack<float>(TakeResult().payload.data(), 8), (std::vector<float>{-2.0f, 2.0f}));
  EXPECT_EQ(seen->calls, 1);
  // So does the root's first data for the chunk (a member's resend found a
  // slot there after all): not reduced, nor stepped, a second time.
  {
    AggFields f = First();
    f.dtype = DType::kFloat32;
    const Bytes d = Build(f, Pack(std::vector<float>{4.0f, -4.0f}));
    AggPacket pkt;
    ASSERT_EQ(ParseAggregation(d.data(), static_cast<uint32_t>(d.size()), &pkt), WireError::kOk);
    ps.OnDatagram(pkt, kRoot, 0, &out_);
  }
  EXPECT_EQ(Unpack<float>(TakeResult().payload.data(), 8), (std::vector<float>{-2.0f, 2.0f}));
  EXPECT_EQ(seen->calls, 1);
  EXPECT_EQ(ps.tan().counters().first_data, 0u);
  EXPECT_EQ(ps.counters().first_again, 1u);
  // Refused: INCOMPLETE, counted.
  *accept = false;
  feed(0, 2, {1.0f, 1.0f});
  feed(1, 2, {1.0f, 1.0f});
  EXPECT_EQ(TakeResult().h.flags.host() & (flags::kIncomplete | flags::kVerified), flags::kIncomplete);
  EXPECT_EQ(ps.counters().refused, 1u);
  EXPECT_EQ(ps.counters().reduced, 1u);
}

// What does not belong to the chunk is counted and left out.
TEST_F(PsEngineTest, DataThatDisagreesWithTheChunkIsRefused) {
  FeedInt(0, 2, {1, 2});
  AggFields f = Direct(1, 2);
  f.job_key = kKey + 1;
  Feed(Build(f, Pack(std::vector<int32_t>{1, 2})));
  EXPECT_EQ(ps_.counters().key_mismatch, 1u);
  Feed(Build(Direct(1, 2), Pack(std::vector<int32_t>{1})));  // one element, not two
  Feed(Build(Direct(1, 3), Pack(std::vector<int32_t>{1, 2})));  // another member count
  f = Direct(1, 2);
  f.dtype = DType::kFloat32;
  Feed(Build(f, Pack(std::vector<float>{1, 2})));
  Feed(Build(Direct(1, 0), Pack(std::vector<int32_t>{1, 2})));  // no member count
  EXPECT_EQ(ps_.counters().malformed, 4u);
  EXPECT_TRUE(out_.empty());
  FeedInt(1, 2, {10, 20});
  EXPECT_EQ(Ints(TakeResult()), (std::vector<int32_t>{11, 22}));
}

// Memory is bounded: chunks and kept contributions beyond the limits are refused.
TEST_F(PsEngineTest, ChunksAndKeptDataAreBounded) {
  for (uint32_t seq = 1; seq <= 9; ++seq) {
    AggFields f = Direct(0, 4);
    f.seq = seq;
    Feed(Build(f, Pack(std::vector<int32_t>{1})));
  }
  EXPECT_EQ(ps_.pending(), 8u);
  EXPECT_EQ(ps_.counters().refused_full, 1u);
  for (uint32_t seq = 1; seq <= 8; ++seq) {
    AggFields f = Direct(1, 4);
    f.seq = seq;
    Feed(Build(f, Pack(std::vector<int32_t>{1})));
  }
  EXPECT_EQ(ps_.kept(), 16u);
  AggFields f = Direct(2, 4);
  Feed(Build(f, Pack(std::vector<int32_t>{1})));
  EXPECT_EQ(ps_.kept(), 16u);
  EXPECT_EQ(ps_.counters().refused_full, 2u);
  ps_.Expire(kGiveUp + 1, &out_);
  EXPECT_EQ(out_.size(), 8u);
  EXPECT_EQ(ps_.kept(), 0u);
}

// Verify mode, all four nodes counted and no sum saturated: the root's
// reduction comes back as it went, flagged VERIFIED; a
// repeated VERIFY (the answer was lost) gets the same answer.
TEST_F(PsEngineTest, ACompleteReductionComesBackVerified) {
  Feed(Build(Verify(4, 4), Pack(std::vector<int32_t>{10, -3})));
  const Result r = TakeResult();
  EXPECT_EQ(r.to, kRoot);
  EXPECT_EQ(r.h.flags.host(), flags::kVerified);
  EXPECT_EQ(r.h.job_key.host(), kKey);  // the root strips it for the members
  EXPECT_EQ(r.h.seq.host(), 1u);
  EXPECT_EQ(r.h.aux.host(), 512u);
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{10, -3}));
  Feed(Build(Verify(4, 4), Pack(std::vector<int32_t>{10, -3})), 1, kOtherRoot);
  const Result again = TakeResult();
  EXPECT_EQ(again.to, kOtherRoot);
  EXPECT_EQ(again.payload, r.payload);
  EXPECT_EQ(ps_.counters().verify, 2u);
  EXPECT_EQ(ps_.counters().verified, 1u);
  EXPECT_EQ(ps_.counters().results_again, 1u);
}

// The omission example: W3's contribution (node 2) was lost, and the
// reduction counts 1011. The parameter node stays silent. The members' timers
// expire and all four resend, marked AGGREGATE_AT_PS: W3's completes the
// chunk, the others' are counted already, and the sum is verified.
TEST_F(PsEngineTest, AnOmissionIsAnsweredBySilenceAndTheResendsComplete) {
  const std::vector<int32_t> w = {1, 2, 4, 8};
  Feed(Build(Verify(4, 3), Pack(std::vector<int32_t>{w[0] + w[1] + w[3]}), {2}));
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.counters().verify_omissions, 1u);
  for (uint16_t node : {0, 1, 3}) {
    FeedInt(node, 4, {w[node]});
    EXPECT_TRUE(out_.empty()) << "node " << node;
  }
  FeedInt(2, 4, {w[2]});
  const Result r = TakeResult();
  EXPECT_EQ(Ints(r), (std::vector<int32_t>{15}));
  EXPECT_EQ(r.h.flags.host(), flags::kVerified);
  EXPECT_EQ(ps_.tan().counters().duplicate_late, 3u);

  // A reduction that counts too few nodes and cannot say which: dropped;
  // the members' direct data alone completes the chunk.
  AggFields v = Verify(2, 1);
  v.seq = 2;
  Feed(Build(v, Pack(std::vector<int32_t>{5})));
  EXPECT_TRUE(out_.empty());
  EXPECT_EQ(ps_.counters().verify_omissions, 2u);
  AggFields f = Direct(0, 2);
  f.seq = 2;
  Feed(Build(f, Pack(std::vector<int32_t>{5})));
  f.node_id = 1;
  Feed(Build(f, Pack(std::vector<int32_t>{6})));
  EXPECT_EQ(Ints(TakeResult()), (std::vector<int32_t>{11}));
}

// The overflow example: 1.5e9 + 1.0e9 saturated at the switch. The parameter
// node answers EXCEPTION_RETRANSMIT (OVERFLOW, the saturated sum); the members
// send their values again as float32 for it, and it returns 2.5e9, verified.
TEST_F(PsEngineTest, ASaturatedReductionIsRedoneInFloatHere) {
  const int32_t max = std::numeric_limits<int32_t>::max();
  Feed(Build(Verify(2, 2, flags::kOverflow), Pack(std::vector<int32_t>{max})));
  const Result exception = TakeResult(Opcode::kExceptionRetransmit);
  EXPECT_EQ(exception.h.flags.host(), flags::kOverflow);
  EXPECT_EQ(Ints(exception), (std::vector<int32_t>{max}));
  EXPECT_EQ(ps_.counters().verify_overflows, 1u);
  for (uint16_t node : {0, 1}) {
    AggFields f = Direct(node, 2);
    f.seq = 2;
    f.dtype = DType::kFloat32;
    Feed(Build(f, Pack(std::vector<float>{node == 0 ? 1.5e9f : 1.0e9f})));
  }
  const Result r = TakeResult();
  EXPECT_EQ(r.h.flags.host(), flags::kVerified);
  EXPECT_EQ(r.h.dtype, static_cast<uint8_t>(DType::kFloat32));
  EXPECT_EQ(Unpack<float>(r.payload.data(), r.payload.size()), (std::vector<float>{2.5e9f}));
}

}  // namespace
}  // namespace aggswitch::aggregator
