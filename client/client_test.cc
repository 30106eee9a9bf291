// Whole clients, one thread per rank, against TestSwitch on loopback UDP.
#include "client/client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "aggregator/half.h"
#include "aggregator/reduce.h"
#include "client/chunking.h"
#include "client/fixed_point.h"
#include "client/test_switch.h"

namespace aggswitch::client {
namespace {

// Elements of a full 32-bit chunk under the default options (the MTU less
// the room kept for a missing list).
const uint32_t kFullChunk =
    ElementsPerChunk(aggregator::DType::kInt32, 1500, ClientOptions{}.reserve_missing_ids);

using aggregator::DType;
using aggregator::ReduceOp;
using common::StatusCode;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kKey = 0x5eed;

// A switch that loses and duplicates datagrams at these rates.
TestSwitch::Options Lossy(double drop_in, double drop_out, double duplicate_out, uint64_t seed) {
  TestSwitch::Options o;
  o.drop_in = drop_in;
  o.drop_out = drop_out;
  o.duplicate_out = duplicate_out;
  o.seed = seed;
  return o;
}

// A switch that knows `job` from the start.
TestSwitch::Options WithJob(const TestSwitch::Job& job) {
  TestSwitch::Options o;
  o.jobs = {job};
  return o;
}

ClientOptions Options(std::vector<SwitchAddress> switches, uint32_t job, uint16_t world) {
  ClientOptions o;
  o.switches = std::move(switches);
  o.bind_ip = common::Ipv4Addr{0x7F000001};
  o.job_id = job;
  o.job_key = kKey;
  o.world = world;
  o.window = 32;
  o.retransmit_timeout = milliseconds(5);
  o.max_retransmit_timeout = milliseconds(100);
  o.progress_timeout = milliseconds(5000);
  return o;
}

// Runs `body` once per rank in `ranks`, each with its own client and thread.
std::vector<common::Status> RunRanks(const ClientOptions& base, const std::vector<uint16_t>& ranks,
                                     const std::function<common::Status(Client&)>& body) {
  std::vector<common::Status> status(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      ClientOptions o = base;
      o.rank = ranks[i];
      auto client = Client::Create(o);
      status[i] = client.ok() ? body(**client) : client.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

std::vector<uint16_t> AllRanks(uint16_t world) {
  std::vector<uint16_t> r(world);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

void ExpectAllOk(const std::vector<common::Status>& status) {
  for (size_t i = 0; i < status.size(); ++i) {
    EXPECT_TRUE(status[i].ok()) << i << ": " << status[i].ToString();
  }
}

// Polls `done` for up to a second: the switch thread may still be taking in
// the last datagrams when the clients return.
bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 100 && !done(); ++i) std::this_thread::sleep_for(milliseconds(10));
  return done();
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The switch's reduction in rank order (its ordered mode), with its own
// reference kernels: what an ordered allreduce must return bit for bit, and
// what any allreduce whose result does not depend on order must return.
template <typename T>
std::vector<T> RankOrderReduce(DType dtype, ReduceOp op, const std::vector<std::vector<T>>& in) {
  const uint32_t n = static_cast<uint32_t>(in[0].size());
  std::vector<uint8_t> acc(size_t{n} * aggregator::AccumulatorElementSize(dtype));
  aggregator::reference::LoadFirst(dtype, Bytes(in[0]).data(), n, acc.data());
  for (size_t r = 1; r < in.size(); ++r) {
    (void)aggregator::reference::Accumulate(dtype, op, acc.data(), Bytes(in[r]).data(), n);
  }
  std::vector<T> out(n);
  aggregator::reference::StoreResult(dtype, acc.data(), n, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

// The fixed-point sum the client computes through the switch, done locally.
std::vector<float> FixedPointSum(const std::vector<std::vector<float>>& in, int headroom) {
  int32_t e = kExponentOfZero;
  for (const auto& v : in) e = std::max(e, MaxExponent(v));
  const int8_t scale = *FixedPointScale(e, headroom);
  std::vector<float> out(in[0].size());
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t sum = 0;
    for (const auto& v : in) sum += ToFixed(v[i], scale);
    out[i] = FromFixed(static_cast<int32_t>(sum), scale);
  }
  return out;
}

std::vector<float> RandomFloats(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-12, 6);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mant(rng), exp(rng));
  return v;
}

std::vector<int32_t> RandomInts(uint32_t seed, size_t n, int32_t bound) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(-bound, bound);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = d(rng);
  return v;
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(ClientTest, Int32OpsAreExactAndSequenceNumbersContinueAcrossCalls) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 4;
  const std::pair<ReduceOp, size_t> calls[] = {{ReduceOp::kSum, 1000},
                                               {ReduceOp::kMin, 357},
                                               {ReduceOp::kMax, kFullChunk},
                                               {ReduceOp::kAnd, 1},
                                               {ReduceOp::kOr, 2000}};
  std::vector<std::vector<std::vector<int32_t>>> results(std::size(calls),
                                                         std::vector<std::vector<int32_t>>(world));
  const auto status = RunRanks(Options({sw.address()}, 11, world), AllRanks(world), [&](Client& c) {
    for (size_t i = 0; i < std::size(calls); ++i) {
      std::vector<int32_t> v = RandomInts(100 * i + c.options().rank, calls[i].second, 1 << 28);
      RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), calls[i].first));
      results[i][c.options().rank] = std::move(v);
    }
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  uint32_t chunks = 0;
  for (size_t i = 0; i < std::size(calls); ++i) {
    std::vector<std::vector<int32_t>> in;
    for (uint16_t r = 0; r < world; ++r) {
      in.push_back(RandomInts(100 * i + r, calls[i].second, 1 << 28));
    }
    const std::vector<int32_t> want = RankOrderReduce(DType::kInt32, calls[i].first, in);
    for (uint16_t r = 0; r < world; ++r) EXPECT_EQ(results[i][r], want) << "call " << i;
    chunks += static_cast<uint32_t>(ChunkCount(calls[i].second, kFullChunk));
  }
  // One sequence number per chunk, continuing from call to call, and one ACK
  // per rank after each call.
  std::vector<uint32_t> seqs = sw.CompletedSeqs(11);
  std::sort(seqs.begin(), seqs.end());
  std::vector<uint32_t> want(chunks);
  std::iota(want.begin(), want.end(), 0u);
  EXPECT_EQ(seqs, want);
  // Each chunk names where it starts in its call's buffer.
  std::map<uint32_t, uint32_t> want_offsets;
  uint32_t seq = 0;
  for (const auto& call : calls) {
    for (uint32_t k = 0; k < ChunkCount(call.second, kFullChunk); ++k) {
      want_offsets[seq++] = k * kFullChunk;
    }
  }
  EXPECT_EQ(sw.CompletedOffsets(11), want_offsets);
  // An ACK per rank after each call, and the last call's two repeats (the
  // next tests); a call whose next one starts a retransmission timeout or
  // more later (a slow machine) has its repeats too.
  EXPECT_TRUE(Eventually([&] { return sw.acks() >= world * (std::size(calls) + 2); }))
      << sw.acks();
  EXPECT_LE(sw.acks(), world * 3 * std::size(calls));
}

// An int32 sum of exactly INT32_MAX or INT32_MIN is exact. One past either
// end saturates at the switch: the allreduce completes, then fails with
// kOutOfRange naming the first overflowed chunk and its elements (the
// buffer holds the clamped values), and the client goes on.
TEST(ClientTest, AnInt32SumThatOverflowsFailsNamingTheChunkAndTheClientGoesOn) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 2;
  const size_t n = kFullChunk + 10;  // two chunks
  std::vector<common::Status> overflowed(world);
  std::vector<ClientStats> stats(world);
  const auto status = RunRanks(Options({sw.address()}, 21, world), AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    std::vector<int32_t> v(n, 1);
    v[0] = r == 0 ? INT32_MAX - 1 : 1;
    v[1] = r == 0 ? INT32_MIN + 1 : -1;
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    if (v[0] != INT32_MAX || v[1] != INT32_MIN || v[n - 1] != 2) {
      return common::Internal("the boundary sums are " + std::to_string(v[0]) + " and " +
                              std::to_string(v[1]));
    }
    std::vector<int32_t> w(n, 1);
    w[kFullChunk + 3] = r == 0 ? INT32_MAX : 1;   // one past the top, in the second chunk
    w[kFullChunk + 4] = r == 0 ? INT32_MIN : -1;  // one past the bottom
    overflowed[r] = c.AllReduce(std::span<int32_t>(w), ReduceOp::kSum);
    if (w[kFullChunk + 3] != INT32_MAX || w[kFullChunk + 4] != INT32_MIN || w[0] != 2) {
      return common::Internal("not the clamped sums");
    }
    std::vector<float> y(n, 0.5f);  // a fixed-point sum: its own saturation state
    RETURN_IF_ERROR(c.AllReduce(std::span<float>(y), ReduceOp::kSum));
    if (y[n - 1] != 1.0f) return common::Internal("the float sum after the overflow is wrong");
    std::vector<int32_t> x(n, 3);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(x), ReduceOp::kSum));
    if (x[n - 1] != 6) return common::Internal("the allreduce after the overflow is wrong");
    stats[r] = c.stats();
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  for (uint16_t r = 0; r < world; ++r) {
    EXPECT_EQ(overflowed[r].code(), common::StatusCode::kOutOfRange) << overflowed[r].ToString();
    const std::string& m = overflowed[r].message();
    EXPECT_NE(m.find("overflowed in 1 of 2 chunks"), std::string::npos) << m;
    EXPECT_NE(m.find("elements " + std::to_string(kFullChunk) + ".." + std::to_string(n - 1)),
              std::string::npos)
        << m;
    EXPECT_EQ(stats[r].saturated_chunks, 1u);
    EXPECT_EQ(stats[r].allreduces, 4u);
  }
}

// A result flagged RECOVERED waited for some member's retransmission: its
// round trip is no sample of this rank's timeout, which would otherwise grow
// with the other members' losses (each waited out at the timeout of the
// member that lost it) until a lost chunk took a second to be asked after.
TEST(ClientTest, AResultThatWaitedForARecoveryIsNoRoundTripSample) {
  for (const bool recovered : {false, true}) {
    TestSwitch::Options so;
    so.flag_recovered = recovered;
    TestSwitch sw(so);
    ASSERT_TRUE(sw.ok());
    std::vector<ClientStats> stats(2);
    const auto status = RunRanks(Options({sw.address()}, 12, 2), AllRanks(2), [&](Client& c) {
      // Several allreduces: the first chunks may wait for the job's
      // registration past the initial timeout, and a chunk asked after
      // is no sample either way.
      for (int i = 0; i < 5; ++i) {
        std::vector<int32_t> v(3000, 1);
        RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
      }
      stats[c.options().rank] = c.stats();
      return common::Status::Ok();
    });
    ExpectAllOk(status);
    for (const ClientStats& s : stats) {
      EXPECT_EQ(s.round_trip_us == 0, recovered) << "recovered results: " << recovered;
    }
  }
}

TEST(ClientTest, TheLastAckIsRepeatedTwiceWhileTheClientIsIdle) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 2;
  const auto status = RunRanks(Options({sw.address()}, 12, world), AllRanks(world), [&](Client& c) {
    std::vector<int32_t> v = RandomInts(c.options().rank, 3000, 1000);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    // Idle for 40 retransmission timeouts: the ACK and its two repeats, no more.
    std::this_thread::sleep_for(milliseconds(200));
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  EXPECT_EQ(sw.acks(), world * 3u);
}

TEST(ClientTest, AClientDestroyedRightAfterItsLastAllreduceSendsTheAckRepeatsAtOnce) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 2;
  const auto status = RunRanks(Options({sw.address()}, 13, world), AllRanks(world), [&](Client& c) {
    std::vector<int32_t> v = RandomInts(c.options().rank, 3000, 1000);
    return c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);  // destroyed at once
  });
  ExpectAllOk(status);
  EXPECT_TRUE(Eventually([&] { return sw.acks() == world * 3u; })) << sw.acks();
}

TEST(ClientTest, FixedPointSumIsExactUnderLossAndDuplication) {
  TestSwitch sw(Lossy(0.05, 0.05, 0.05, 7));
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 4;
  const size_t n = 5000;
  const int iterations = 3;
  std::vector<std::vector<std::vector<float>>> got(iterations,
                                                   std::vector<std::vector<float>>(world));
  std::vector<ClientStats> stats(world);
  const auto status = RunRanks(Options({sw.address()}, 12, world), AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> v = RandomFloats(1000 * it + r, n);
      RETURN_IF_ERROR(c.AllReduce(std::span<float>(v), ReduceOp::kSum));
      got[it][r] = std::move(v);
    }
    stats[r] = c.stats();
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  uint64_t retransmissions = 0, duplicates = 0;
  for (const ClientStats& s : stats) {
    EXPECT_EQ(s.scale_exchanges, uint64_t{iterations});
    EXPECT_EQ(s.allreduces, uint64_t{iterations});
    EXPECT_EQ(s.overflow_redos, 0u);
    retransmissions += s.retransmissions;
    duplicates += s.duplicate_results;
  }
  EXPECT_GT(retransmissions, 0u);  // the loss was there, and was repaired
  EXPECT_GT(duplicates, 0u);
  EXPECT_GT(sw.retransmissions(), 0u);  // flagged as such
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::vector<float>> in;
    for (uint16_t r = 0; r < world; ++r) in.push_back(RandomFloats(1000 * it + r, n));
    const std::vector<float> want = FixedPointSum(in, DefaultHeadroom(world));
    for (uint16_t r = 0; r < world; ++r) EXPECT_TRUE(SameBits(got[it][r], want)) << it << " " << r;
  }
}

TEST(ClientTest, OverflowedChunksAreRedoneAsOrderedFloat32) {
  // Lost results make each rank see the OVERFLOW flags in its own order; the
  // redos must still line up.
  TestSwitch sw(Lossy(0, 0.2, 0, 13));
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 4;
  const size_t per_chunk = kFullChunk;
  const size_t chunks = 12;
  // The even chunks hold values in [0.5, 1), whose fixed-point sum over four
  // ranks exceeds INT32_MAX without headroom; the odd ones small values that
  // cannot overflow in any order.
  auto make = [&](uint16_t rank) {
    std::mt19937 rng(rank + 1);
    std::uniform_real_distribution<float> big(0.5f, 1.0f), small(-0.1f, 0.1f);
    std::vector<float> v(chunks * per_chunk);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i / per_chunk) % 2 == 0 ? big(rng) : small(rng);
    return v;
  };
  ClientOptions o = Options({sw.address()}, 13, world);
  o.headroom = 0;
  std::vector<std::vector<float>> got(world);
  std::vector<ClientStats> stats(world);
  ExpectAllOk(RunRanks(o, AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    got[r] = make(r);
    RETURN_IF_ERROR(c.AllReduce(std::span<float>(got[r]), ReduceOp::kSum));
    stats[r] = c.stats();
    return common::Status::Ok();
  }));
  std::vector<std::vector<float>> in;
  for (uint16_t r = 0; r < world; ++r) in.push_back(make(r));
  const std::vector<float> fixed = FixedPointSum(in, 0);
  const std::vector<float> ordered = RankOrderReduce(DType::kFloat32, ReduceOp::kSum, in);
  std::vector<float> want(fixed);
  for (size_t i = 0; i < want.size(); ++i) {
    if ((i / per_chunk) % 2 == 0) want[i] = ordered[i];
  }
  for (uint16_t r = 0; r < world; ++r) {
    EXPECT_TRUE(SameBits(got[r], want)) << r;
    EXPECT_EQ(stats[r].overflow_redos, chunks / 2);
  }
  // The exchange, the fixed-point chunks, the redos: one sequence number each.
  std::vector<uint32_t> seqs = sw.CompletedSeqs(13);
  std::sort(seqs.begin(), seqs.end());
  std::vector<uint32_t> expected(1 + chunks + chunks / 2);
  std::iota(expected.begin(), expected.end(), 0u);
  EXPECT_EQ(seqs, expected);
  EXPECT_EQ(sw.ordered_flags(), chunks / 2 * world);  // the redos
}

// The overflow example through a parameter node: four ranks' 1.5e9, 1.0e9,
// 1.5e9, 1.0e9 as fixed point without headroom (scale 1) sum to integers of
// 2.5e9, which saturate; the answer is EXCEPTION_RETRANSMIT, and each rank
// resends its values in float32 marked AGGREGATE_AT_PS (no ORDERED: the
// parameter node reduces in rank order), which come back as 5e9.
TEST(ClientTest, AnExceptionRetransmitRedoesTheChunkInFloat32ForTheParameterNode) {
  TestSwitch::Options so;
  so.exception_retransmit = true;
  TestSwitch sw(so);
  ASSERT_TRUE(sw.ok());
  const size_t chunks = 3;
  const uint16_t world = 4;
  ClientOptions o = Options({sw.address()}, 19, world);
  o.headroom = 0;
  o.resend_to_parameter_node = true;
  std::vector<std::vector<float>> got(world);
  std::vector<ClientStats> stats(world);
  ExpectAllOk(RunRanks(o, AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    got[r].assign(chunks * kFullChunk, r % 2 == 0 ? 1.5e9f : 1.0e9f);
    RETURN_IF_ERROR(c.AllReduce(std::span<float>(got[r]), ReduceOp::kSum));
    stats[r] = c.stats();
    return common::Status::Ok();
  }));
  for (uint16_t r = 0; r < world; ++r) {
    EXPECT_EQ(got[r], std::vector<float>(chunks * kFullChunk, 5e9f)) << r;
    EXPECT_EQ(stats[r].overflow_redos, chunks);
  }
  // Every rank's redo of every chunk, and any resend (marked so too).
  EXPECT_GE(sw.for_parameter_node(), world * chunks);
  EXPECT_EQ(sw.for_parameter_node_malformed(), 0u);
  EXPECT_EQ(sw.ordered_flags(), 0u);
  // The exchange, the fixed-point chunks, the redos: one sequence number each.
  EXPECT_EQ(sw.CompletedSeqs(19).size(), 1 + 2 * chunks);
}

// Verify mode is asked for in task info; a job without task info has its
// mode in the switch's config.
TEST(ClientTest, VerifyModeTravelsInTaskInfo) {
  ClientOptions o = Options({SwitchAddress{common::Ipv4Addr{0x7F000001}, 47000}}, 20, 1);
  o.task_info = TaskInfoMode::kNone;
  o.verify = true;
  const auto refused = Client::Create(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("verify:"), std::string::npos);
}

TEST(ClientTest, AckWatermarksLetTheSwitchReuseItsSlots) {
  // 64 slots, 16 chunks in flight per rank, 177 chunks per allreduce: slots
  // are reused many times, which the switch allows only for chunks that every
  // rank acknowledged.
  TestSwitch::Options small;
  small.slots = 64;
  TestSwitch sw(small);
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 27, 4);
  o.window = 16;
  o.progress_timeout = milliseconds(2000);
  ExpectAllOk(RunRanks(o, AllRanks(4), [](Client& c) {
    std::vector<int32_t> v(60000, 1);
    for (int i = 0; i < 2; ++i) {
      RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    }
    return v[59999] == 16 ? common::Status::Ok() : common::Internal("wrong sum");
  }));
  EXPECT_EQ(sw.completed(), 2u * ChunkCount(60000, kFullChunk));
  EXPECT_EQ(ChunkCount(60000, kFullChunk), 177u);
}

TEST(ClientTest, ControlUnitAnnouncesTheJobAndOtherRanksWaitForIt) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 3;
  ClientOptions o = Options({sw.address()}, 14, world);
  o.task_info = TaskInfoMode::kControlUnit;
  std::vector<ClientStats> stats(world);
  ExpectAllOk(RunRanks(o, AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    if (r == 0) std::this_thread::sleep_for(milliseconds(100));  // the others start first
    std::vector<int32_t> v(700, r + 1);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    stats[r] = c.stats();
    for (int32_t x : v) {
      if (x != 6) return common::Internal("wrong sum " + std::to_string(x));
    }
    return common::Status::Ok();
  }));
  EXPECT_EQ(sw.registrations(), 1u);
  EXPECT_GE(sw.task_infos(), 1u);
  EXPECT_EQ(sw.task_info_flags(), 0u);  // contributions carry no task info
  EXPECT_EQ(stats[0].transient_nacks, 0u);
  EXPECT_GT(stats[1].transient_nacks + stats[2].transient_nacks, 0u);
}

TEST(ClientTest, InBandTaskInfoRegistersTheJob) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ExpectAllOk(RunRanks(Options({sw.address()}, 15, 2), AllRanks(2), [](Client& c) {
    std::vector<int32_t> v(1000, 1);
    return c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  }));
  EXPECT_EQ(sw.registrations(), 1u);
  EXPECT_EQ(sw.task_info_flags(), 2u * 3);  // every contribution of both ranks
}

// One rank's client against a switch that refuses it: the error names the
// NACK's reason and comes at once, not after the progress timeout.
void ExpectRefusal(const TestSwitch::Options& sw_options, ClientOptions o, StatusCode code,
                   const std::string& reason) {
  TestSwitch sw(sw_options);
  ASSERT_TRUE(sw.ok());
  o.switches = {sw.address()};
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<int32_t> v(10, 1);
  const auto start = Clock::now();
  const common::Status s = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(reason), std::string::npos) << s.message();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(ClientTest, RefusalsSurfaceWithTheirReason) {
  const TestSwitch::Options job7 = WithJob({.id = 7, .key = 1, .members = 2, .nodes = 1});
  ClientOptions o = Options({}, 7, 2);
  o.task_info = TaskInfoMode::kNone;
  o.job_key = 2;
  ExpectRefusal(job7, o, StatusCode::kFailedPrecondition, "key mismatch (NACK 2)");

  TestSwitch::Options no_registration;
  no_registration.in_band_registration = false;
  o = Options({}, 8, 2);
  ExpectRefusal(no_registration, o, StatusCode::kFailedPrecondition, "unknown job (NACK 1)");

  o = Options({}, 7, 2);
  o.job_key = 1;
  o.node_count = 2;
  ExpectRefusal(job7, o, StatusCode::kFailedPrecondition, "task info conflict (NACK 6)");

  o = Options({}, 7, 4);
  o.job_key = 1;
  o.rank = 3;
  o.task_info = TaskInfoMode::kNone;
  ExpectRefusal(job7, o, StatusCode::kFailedPrecondition, "malformed (NACK 3)");

  // Two nodes and no upper switch: never a partial sum as the result.
  o = Options({}, 9, 2);
  o.node_count = 2;
  ExpectRefusal({}, o, StatusCode::kFailedPrecondition, "no upstream (NACK 12)");

  TestSwitch::Options disagree;
  disagree.refuse_first = -1;
  disagree.refuse_with = aggregator::NackReason::kAddrLowMismatch;
  ExpectRefusal(disagree, Options({}, 10, 2), StatusCode::kFailedPrecondition,
                "addr_low mismatch (NACK 13)");
}

// "Not now" refusals (a quota, a rate, a binding, a root with no room yet
// to deliver a FINAL chunk to the main server) are retried on the
// retransmission timer; when nothing moves, the error says why.
TEST(ClientTest, TransientRefusalsAreRetriedAndNamedWhenTheyLast) {
  for (const aggregator::NackReason reason :
       {aggregator::NackReason::kHoldQuota, aggregator::NackReason::kStoreFull}) {
    TestSwitch::Options some;
    some.refuse_first = 5;
    some.refuse_with = reason;
    TestSwitch sw(some);
    ASSERT_TRUE(sw.ok());
    ClientOptions o = Options({sw.address()}, 40, 1);
    o.retransmit_timeout = std::chrono::microseconds(2000);
    auto client = Client::Create(o);
    ASSERT_TRUE(client.ok());
    std::vector<int32_t> v(kFullChunk * 3, 7);
    const common::Status status = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
    EXPECT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(v[0], 7);
    EXPECT_EQ((*client)->stats().transient_nacks, 5u);
  }

  for (const auto& [reason, text] :
       {std::pair{aggregator::NackReason::kSlotQuota, "slot quota (NACK 9)"},
        std::pair{aggregator::NackReason::kMemberBound, "member bound elsewhere (NACK 11)"},
        std::pair{aggregator::NackReason::kSlotBusy, "slot busy (NACK 14)"},
        std::pair{aggregator::NackReason::kStoreFull, "store full (NACK 18)"},
        std::pair{aggregator::NackReason::kRateLimited, "registration rate limited (NACK 7)"}}) {
    TestSwitch::Options always;
    always.refuse_first = -1;
    always.refuse_with = reason;
    TestSwitch stuck(always);
    ASSERT_TRUE(stuck.ok());
    ClientOptions s = Options({stuck.address()}, 41, 1);
    s.progress_timeout = milliseconds(300);
    auto c = Client::Create(s);
    ASSERT_TRUE(c.ok());
    std::vector<int32_t> w(10, 1);
    const common::Status status = (*c)->AllReduce(std::span<int32_t>(w), ReduceOp::kSum);
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
    EXPECT_NE(status.message().find(std::string("the switch last refused a chunk: ") + text),
              std::string::npos)
        << status.message();
  }
}

// A chunk the switch moved to a spare slot (NOTICE relocated) is asked
// after and resent with that slot's hint; its first transmission never
// carries one.
TEST(ClientTest, AChunkMovedToASpareSlotIsAskedAfterWithItsHint) {
  TestSwitch::Options moved;
  moved.relocate_hint = 3;
  moved.drop_out = 0.2;  // lost results make the members ask after their chunks
  moved.seed = 11;
  TestSwitch sw(moved);
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 2;
  std::vector<ClientStats> stats(world);
  const auto status = RunRanks(Options({sw.address()}, 43, world), AllRanks(world), [&](Client& c) {
    std::vector<int32_t> v(kFullChunk * 40, 1);
    for (int i = 0; i < 3; ++i) {
      RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
      std::fill(v.begin(), v.end(), 1);
    }
    stats[c.options().rank] = c.stats();
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  EXPECT_EQ(sw.first_sends_hinted(), 0u);
  EXPECT_GT(sw.hinted(), 0u);
  EXPECT_LE(sw.hinted(), sw.queries() + sw.retransmissions());
  EXPECT_EQ(stats[0].relocated_notices + stats[1].relocated_notices, sw.relocated_notices());
}

// A switch that moved the job to a partition of its own says so in its
// results (slot hint kMovedSlotHint): each rank's later chunks carry the
// hint, so that they go there straight, never a chunk it sent before it
// heard; once results of chunks that carried the hint come back without it
// (the switch no longer has the move), new chunks go without it again.
TEST(ClientTest, AfterAResultSaysTheJobMovedLaterChunksCarryTheHint) {
  TestSwitch::Options options;
  options.move_after = 20;   // chunks completed
  options.move_until = 100;
  TestSwitch sw(options);
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 2;
  constexpr int kAllreduces = 4;
  const auto status = RunRanks(Options({sw.address()}, 44, world), AllRanks(world), [&](Client& c) {
    std::vector<int32_t> v(kFullChunk * 40, 1);
    for (int i = 0; i < kAllreduces; ++i) {
      RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
      std::fill(v.begin(), v.end(), 1);
    }
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  const std::vector<TestSwitch::FirstSend> sends = sw.FirstSends();
  ASSERT_FALSE(sends.empty());
  uint32_t first_seq = sends.front().seq;
  for (const auto& f : sends) first_seq = std::min(first_seq, f.seq);
  // Chunks 0..19 of the run completed before any result carried the hint:
  // none of them was sent with it; of the second allreduce's (40..79), sent
  // once results carried it, every one; of the fourth (120..159), sent after
  // results without it came back for hinted chunks, none.
  size_t hinted = 0;
  for (const auto& f : sends) {
    const uint32_t chunk = f.seq - first_seq;
    const bool moved = f.slot_hint == aggregator::kMovedSlotHint;
    hinted += moved;
    if (chunk < 20) {
      EXPECT_FALSE(moved) << "chunk " << chunk;
    }
    if (chunk >= 40 && chunk < 80) {
      EXPECT_TRUE(moved) << "chunk " << chunk;
    }
    if (chunk >= 120) {
      EXPECT_FALSE(moved) << "chunk " << chunk;
    }
  }
  EXPECT_GE(hinted, 2u * 40u);
}

// Answers carry no job key; what makes one this rank's is that the switch
// sent it. A result from any other address is a stray, whatever it says.
TEST(ClientTest, AResultFromAnywhereButTheSwitchIsNotTaken) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 42, 2);
  auto c0 = Client::Create(o);
  o.rank = 1;
  auto c1 = Client::Create(o);
  ASSERT_TRUE(c0.ok() && c1.ok());
  std::vector<int32_t> v0(10, 1), v1(10, 2);
  Pending p0 = (*c0)->Start(std::span<int32_t>(v0), ReduceOp::kSum);
  // Rank 0's chunk waits for rank 1: meanwhile a forger answers it, with and
  // without the key, from another socket on the same host.
  const int forger = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons((*c0)->local_port());
  for (const uint64_t key : {uint64_t{0}, kKey}) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kResult;
    f.job_id = 42;
    f.seq = 0;
    f.job_key = key;
    f.elem_count = 10;
    std::vector<int32_t> lie(10, 666);
    uint8_t buf[256];
    const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0,
                                                    reinterpret_cast<const uint8_t*>(lie.data()),
                                                    40, buf, sizeof(buf));
    ASSERT_GT(n, 0u);
    sendto(forger, buf, n, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }
  close(forger);
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE((*c1)->AllReduce(std::span<int32_t>(v1), ReduceOp::kSum).ok());
  ASSERT_TRUE(p0.Wait().ok());
  EXPECT_EQ(v0, std::vector<int32_t>(10, 3));
  EXPECT_EQ(v1, std::vector<int32_t>(10, 3));
  EXPECT_GE((*c0)->stats().stray_datagrams, 2u);
}

TEST(ClientTest, AMissingMemberFailsTheOthersWithinTheProgressTimeout) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 16, 3);
  o.progress_timeout = milliseconds(300);
  const auto start = Clock::now();
  std::vector<common::Status> second(2);
  const auto status = RunRanks(o, {0, 1}, [&](Client& c) {
    std::vector<float> v(2000, 1.0f);
    common::Status s = c.AllReduce(std::span<float>(v), ReduceOp::kSum);
    second[c.options().rank] = c.AllReduce(std::span<float>(v), ReduceOp::kSum);
    return s;
  });
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(status[i].code(), StatusCode::kUnavailable);
    EXPECT_NE(status[i].message().find("a member of the job stopped sending"), std::string::npos)
        << status[i].message();
    // The switch said so when the rank's chunk went again.
    EXPECT_NE(status[i].message().find("holds this rank's contribution and waits for 1 more "
                                       "members"),
              std::string::npos)
        << status[i].message();
    // Sequence numbers may disagree after a failure: the client refuses to go on.
    EXPECT_EQ(second[i].code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(second[i].message().find("an earlier allreduce of this client failed"),
              std::string::npos);
  }
}

// A rank whose partner starts late resends its first chunk; the switch
// answers that it holds it and waits, and the allreduce completes when the
// partner comes.
TEST(ClientTest, ARankWaitingForALateOneIsToldThatItsChunkIsHeld) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const ClientOptions o = Options({sw.address()}, 17, 2);
  std::vector<ClientStats> stats(2);
  std::vector<std::vector<int32_t>> got(2);
  const auto status = RunRanks(o, {0, 1}, [&](Client& c) {
    const uint16_t r = c.options().rank;
    if (r == 1) std::this_thread::sleep_for(milliseconds(150));
    std::vector<int32_t> v = RandomInts(r, 3000, 1000);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    got[r] = std::move(v);
    stats[r] = c.stats();
    return common::Status::Ok();
  });
  ExpectAllOk(status);
  std::vector<int32_t> want = RandomInts(0, 3000, 1000);
  const std::vector<int32_t> one = RandomInts(1, 3000, 1000);
  for (size_t i = 0; i < want.size(); ++i) want[i] += one[i];
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
  EXPECT_GT(stats[0].queries, 0u) << "the early rank's timer fired while it waited";
  EXPECT_GT(stats[0].held_notices, 0u);
  EXPECT_LE(stats[0].held_notices, stats[0].queries + stats[0].retransmissions)
      << "one answer per question at most";
  EXPECT_LT(stats[0].retransmissions, stats[0].queries) << "it asked, and mostly did not resend";
  EXPECT_EQ(stats[0].missing_notices, 0u);
  EXPECT_EQ(stats[0].stray_datagrams, 0u) << "every notice matched a chunk in flight";
  EXPECT_EQ(sw.held_notices(), stats[0].held_notices + stats[1].held_notices);
}

// A contribution lost on its way with nothing after it to reveal the loss
// (a one-chunk allreduce): its timeout asks the switch, which says it lacks
// it, and the chunk goes again.
TEST(ClientTest, ALostLoneChunkIsAskedAfterAndResentWhenTheSwitchLacksIt) {
  TestSwitch::Options so;
  so.lose_first = 1;
  TestSwitch sw(so);
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 18, 1);
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<int32_t> v = {7, -3};
  ASSERT_TRUE((*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum).ok());
  EXPECT_EQ(v, (std::vector<int32_t>{7, -3}));
  const ClientStats s = (*client)->stats();
  EXPECT_GE(s.queries, 1u);
  EXPECT_GE(s.missing_notices, 1u) << "the switch said it lacked the chunk";
  EXPECT_GE(s.retransmissions, 1u);
  EXPECT_EQ(sw.queries(), s.queries);
}

// A switch that restarted after sending a chunk's result to this rank but
// not to the others asks for the chunk again (NOTICE missing) once this rank
// has moved on to the next allreduce. The rank resends the contribution it
// kept, the data it sent and not the result it reduced in place, flagged a
// retransmission. A "missing" about a chunk it never sent changes nothing.
// The kept datagram carries the spare slot hint the switch gave before it
// restarted; refused there (NOTICE relocated without a hint), it goes again
// without it, or it would be refused at every request and never counted.
// Here the test itself is the switch, on a plain UDP socket.
TEST(ClientTest, AChunkAnsweredBeforeTheSwitchRestartedIsResentWhenAskedFor) {
  const int sw = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(sw, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(sw, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(sw, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const timeval two_seconds{2, 0};
  ASSERT_EQ(setsockopt(sw, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof(two_seconds)), 0);
  ClientOptions o = Options({{common::Ipv4Addr{0x7F000001}, ntohs(addr.sin_port)}}, 31, 2);
  o.task_info = TaskInfoMode::kNone;
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  sockaddr_in peer{};
  uint8_t buf[2048];
  uint32_t incarnation = 0;  // the client's, which every answer must carry
  // The next contribution the client sends (ACKs and queries skipped).
  const auto next_contribution = [&](aggregator::AggPacket* pkt) {
    for (;;) {
      socklen_t peer_len = sizeof(peer);
      const ssize_t n = recvfrom(sw, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&peer), &peer_len);
      if (n <= 0) return false;
      if (aggregator::ParseAggregation(buf, static_cast<uint32_t>(n), pkt) != aggregator::WireError::kOk) {
        return false;
      }
      if (pkt->opcode == aggregator::Opcode::kContribution) {
        incarnation = pkt->header->incarnation.host();
        return true;
      }
    }
  };
  const auto send_to_client = [&](aggregator::Opcode opcode, uint32_t seq, uint32_t aux,
                                  const std::vector<int32_t>& payload, uint32_t run_delta = 0,
                                  uint16_t slot_hint = aggregator::kNoSlotHint) {
    aggregator::AggFields f;
    f.opcode = opcode;
    f.slot_hint = slot_hint;
    f.node_id = 0;
    f.job_id = 31;
    f.seq = seq;
    f.aux = aux;
    f.incarnation = incarnation + run_delta;
    f.elem_count = static_cast<uint16_t>(payload.size());
    uint8_t out[256];
    const uint32_t n = aggregator::BuildAggregation(
        f, nullptr, 0, reinterpret_cast<const uint8_t*>(payload.data()),
        static_cast<uint32_t>(payload.size() * sizeof(int32_t)), out, sizeof(out));
    ASSERT_GT(n, 0u);
    ASSERT_EQ(sendto(sw, out, n, 0, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer)),
              static_cast<ssize_t>(n));
  };
  const auto ints = [](const aggregator::AggPacket& p) {
    std::vector<int32_t> v(p.header->elem_count.host());
    std::memcpy(v.data(), p.payload, v.size() * sizeof(int32_t));
    return v;
  };

  // Allreduce 0 (seq 0): answered with the sum.
  std::vector<int32_t> first = {1, 2, 3};
  Pending p0 = (*client)->Start(std::span<int32_t>(first), ReduceOp::kSum);
  aggregator::AggPacket pkt;
  ASSERT_TRUE(next_contribution(&pkt));
  ASSERT_EQ(pkt.header->seq.host(), 0u);
  EXPECT_NE(incarnation, 0u) << "a client draws its incarnation";
  // A result for another run of the job (another incarnation), from the
  // switch's own address: not this process's, so not taken.
  send_to_client(aggregator::Opcode::kResult, 0, 0, {666, 666, 666}, 1);
  EXPECT_FALSE(p0.WaitFor(milliseconds(50)));
  // The chunk collided and went to spare slot 3: the hint its datagram keeps.
  const auto relocated = static_cast<uint32_t>(aggregator::NoticeKind::kRelocated);
  send_to_client(aggregator::Opcode::kNotice, 0, relocated, {}, 0, 3);
  send_to_client(aggregator::Opcode::kResult, 0, 0, {10, 20, 30});
  ASSERT_TRUE(p0.Wait().ok());
  EXPECT_EQ(first, (std::vector<int32_t>{10, 20, 30}));

  // Allreduce 1 (seq 1) in flight; the restarted switch lacks chunk 0, and
  // asks after chunk 7, which was never sent.
  std::vector<int32_t> second = {4, 5, 6};
  Pending p1 = (*client)->Start(std::span<int32_t>(second), ReduceOp::kSum);
  ASSERT_TRUE(next_contribution(&pkt));
  ASSERT_EQ(pkt.header->seq.host(), 1u);
  const auto missing = static_cast<uint32_t>(aggregator::NoticeKind::kMissing);
  send_to_client(aggregator::Opcode::kNotice, 7, missing, {});
  send_to_client(aggregator::Opcode::kNotice, 0, missing, {});
  // The client may ask after chunk 1 meanwhile (its contribution is
  // retransmitted only when asked for): the next contribution is chunk 0's.
  do {
    ASSERT_TRUE(next_contribution(&pkt));
  } while (pkt.header->seq.host() == 1);
  EXPECT_EQ(pkt.header->seq.host(), 0u);
  EXPECT_EQ(ints(pkt), (std::vector<int32_t>{1, 2, 3})) << "the data sent, not the result";
  EXPECT_NE(pkt.header->flags.host() & aggregator::flags::kRetransmission, 0);
  EXPECT_EQ(pkt.header->ack_watermark.host(), 1u) << "the current watermark";
  EXPECT_EQ(pkt.header->slot_hint.host(), 3u) << "the hint the switch gave before";
  // That spare slot does not hold the chunk at the restarted switch, which
  // refuses the hint: the datagram goes again, to the chunk's own slot.
  send_to_client(aggregator::Opcode::kNotice, 0, relocated, {});
  do {
    ASSERT_TRUE(next_contribution(&pkt));
  } while (pkt.header->seq.host() == 1);
  EXPECT_EQ(pkt.header->seq.host(), 0u);
  EXPECT_EQ(pkt.header->slot_hint.host(), aggregator::kNoSlotHint);
  EXPECT_EQ(ints(pkt), (std::vector<int32_t>{1, 2, 3}));
  send_to_client(aggregator::Opcode::kResult, 1, 0, {40, 50, 60});
  ASSERT_TRUE(p1.Wait().ok());
  EXPECT_EQ(second, (std::vector<int32_t>{40, 50, 60}));
  const ClientStats s = (*client)->stats();
  EXPECT_EQ(s.answered_resends, 2u);
  EXPECT_GE(s.stray_datagrams, 2u) << "the other run's result, the notice about chunk 7";
  close(sw);
}

// With a run id, every datagram a rank sends carries it as its incarnation,
// flagged RUN_ID, and the ranks' allreduce completes as ever.
TEST(ClientTest, ARunIdIsEveryRanksIncarnation) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 19, 2);
  o.run_id = 0x5a5a0001;
  const auto status = RunRanks(o, {0, 1}, [](Client& c) {
    std::vector<int32_t> v(500, 1);
    common::Status s = c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
    if (s.ok() && v != std::vector<int32_t>(500, 2)) return common::Internal("wrong sum");
    return s;
  });
  for (const common::Status& st : status) ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(sw.incarnations(), std::set<uint32_t>{0x5a5a0001u});
  EXPECT_TRUE(sw.saw_flags() & aggregator::flags::kRunId);
}

// A test switch that loses the first contribution it receives.
TestSwitch::Options LosingTheFirstContribution() {
  TestSwitch::Options so;
  so.lose_first = 1;
  return so;
}

// One rank of job `job` at `sw`, whose resends are marked for the
// parameter node.
ClientOptions ResendingToTheParameterNode(const TestSwitch& sw, uint32_t job) {
  ClientOptions o = Options({sw.address()}, job, 1);
  o.resend_to_parameter_node = true;
  return o;
}

// With a parameter node, what is resent after a loss is marked for it, with
// the allreduce's rank count; first transmissions are not.
TEST(ClientTest, AResendIsMarkedForTheParameterNodeWhenTheJobHasOne) {
  TestSwitch sw(LosingTheFirstContribution());
  ASSERT_TRUE(sw.ok());
  auto client = Client::Create(ResendingToTheParameterNode(sw, 18));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<int32_t> v(3000, 2);
  ASSERT_TRUE((*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum).ok());
  EXPECT_EQ(v, std::vector<int32_t>(3000, 2));
  const ClientStats s = (*client)->stats();
  EXPECT_GE(s.retransmissions, 1u);
  EXPECT_EQ(sw.for_parameter_node(), sw.retransmissions());
  EXPECT_GE(sw.for_parameter_node(), 1u);
  EXPECT_EQ(sw.for_parameter_node_malformed(), 0u);
}

// An in-band job whose only datagram, the one that would register it, is
// lost: the resend for the parameter node carries no task info, and the
// switch, which does not know the job, refuses it (unknown job). The chunk
// goes again with its task info, registers the job and completes (seeds
// 200101 and 230190).
TEST(ClientTest, AResendForTheParameterNodeToAnUnknownJobGoesAgainWithItsTaskInfo) {
  TestSwitch sw(LosingTheFirstContribution());
  ASSERT_TRUE(sw.ok());
  auto client = Client::Create(ResendingToTheParameterNode(sw, 21));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<int32_t> v(10, 2);  // one chunk
  const common::Status s = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(v, std::vector<int32_t>(10, 2));
  EXPECT_EQ(sw.registrations(), 1u);
  EXPECT_GE(sw.nacks(), 1u);
  EXPECT_GE((*client)->stats().transient_nacks, 1u);
}

TEST(ClientTest, AnUnreachableSwitchFailsWithinTheProgressTimeout) {
  // A port nobody listens on.
  uint16_t port;
  {
    TestSwitch gone({});
    ASSERT_TRUE(gone.ok());
    port = gone.address().port;
  }
  ClientOptions o = Options({SwitchAddress{common::Ipv4Addr{0x7F000001}, port}}, 17, 2);
  o.progress_timeout = milliseconds(300);
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  std::vector<int32_t> v(10, 1);
  const auto start = Clock::now();
  const common::Status s = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no result from switch 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << s.message();

  o.task_info = TaskInfoMode::kControlUnit;
  client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  const common::Status a = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  EXPECT_EQ(a.code(), StatusCode::kUnavailable);
  EXPECT_NE(a.message().find("task-info announcement"), std::string::npos) << a.message();
}

TEST(ClientTest, TheDeadlineBoundsOneAllReduce) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 18, 2);
  o.deadline = milliseconds(200);
  auto client = Client::Create(o);
  ASSERT_TRUE(client.ok());
  std::vector<int32_t> v(10, 1);
  const auto start = Clock::now();
  const common::Status s = (*client)->AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("deadline of 200 ms"), std::string::npos) << s.message();
}

TEST(ClientTest, SeveralSwitchesShareTheAllReducesByAddrLow) {
  TestSwitch a({}), b({});
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectAllOk(RunRanks(Options({a.address(), b.address()}, 19, 2), AllRanks(2), [](Client& c) {
    std::vector<int32_t> v(10, 1);
    for (int i = 0; i < 4; ++i) RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum, 5));  // odd: switch 1
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum, 6));  // even: switch 0
    for (int32_t x : v) {
      if (x != 64) return common::Internal("wrong sum " + std::to_string(x));
    }
    return common::Status::Ok();
  }));
  // Calls 0 and 2 (by call index) and 6 (explicit) on switch 0; one sequence
  // space across both switches.
  EXPECT_EQ(a.CompletedSeqs(19), (std::vector<uint32_t>{0, 2, 5}));
  EXPECT_EQ(b.CompletedSeqs(19), (std::vector<uint32_t>{1, 3, 4}));
  EXPECT_EQ(a.registrations(), 1u);  // each switch registered the job itself
  EXPECT_EQ(b.registrations(), 1u);
}

TEST(ClientTest, StartedAllReducesRunInOrderAndMayBeWaitedForInAnyOrder) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ExpectAllOk(RunRanks(Options({sw.address()}, 20, 2), AllRanks(2), [](Client& c) {
    const uint16_t r = c.options().rank;
    std::vector<int32_t> ints(3000, r + 1);
    std::vector<float> floats(1000, r == 0 ? -2.0f : 3.0f);
    auto storage = std::make_unique<bool[]>(5000);  // all false
    std::span<bool> bools(storage.get(), 5000);
    bools[4999] = r == 1;
    Pending p1 = c.Start(std::span<int32_t>(ints), ReduceOp::kSum);
    Pending p2 = c.Start(std::span<float>(floats), ReduceOp::kMax);
    Pending p3 = c.Start(bools, ReduceOp::kOr);
    RETURN_IF_ERROR(p3.Wait());
    if (!p1.WaitFor(std::chrono::seconds(0))) return common::Internal("ran out of order");
    RETURN_IF_ERROR(p2.Wait());
    RETURN_IF_ERROR(p1.Wait());
    if (ints[2999] != 3 || floats[0] != 3.0f || bools[4998] || !bools[4999]) {
      return common::Internal("wrong result");
    }
    return common::Status::Ok();
  }));
}

// The same bits in another element type of the same size.
template <typename To, typename From>
std::vector<To> Retype(const std::vector<From>& v) {
  static_assert(sizeof(To) == sizeof(From));
  std::vector<To> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(From));
  return out;
}

// Allreduces 0/1 bytes as bools; the result as 0/1 bytes.
common::Status AllReduceBools(Client& c, std::vector<uint8_t>& bytes, ReduceOp op) {
  auto bools = std::make_unique<bool[]>(bytes.size());
  std::memcpy(bools.get(), bytes.data(), bytes.size());
  RETURN_IF_ERROR(c.AllReduce(std::span<bool>(bools.get(), bytes.size()), op));
  std::memcpy(bytes.data(), bools.get(), bytes.size());
  return common::Status::Ok();
}

TEST(ClientTest, SixteenBitFloatsAndBoolsMatchTheReferenceBitForBit) {
  TestSwitch sw(Lossy(0.03, 0, 0, 3));
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 4;
  const size_t n = 3000;
  auto halves = [](uint16_t rank, bool bf16) {
    const std::vector<float> f = RandomFloats(rank + 50, n);
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) {
      h[i] = bf16 ? aggregator::FloatToBFloat16(f[i]) : aggregator::FloatToHalf(f[i]);
    }
    return h;
  };
  auto bits = [](uint16_t rank) {
    std::mt19937 rng(rank + 90);
    std::vector<uint8_t> b(n);
    for (uint8_t& x : b) x = (rng() & 3) != 0;
    return b;
  };
  struct Got {
    std::vector<Float16> f16_sum;
    std::vector<BFloat16> bf16_sum, bf16_max;
    std::vector<uint8_t> all, any;
  };
  std::vector<Got> got(world);
  ExpectAllOk(RunRanks(Options({sw.address()}, 21, world), AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    Got& g = got[r];
    g.f16_sum = Retype<Float16>(halves(r, false));
    g.bf16_sum = Retype<BFloat16>(halves(r, true));
    g.bf16_max = g.bf16_sum;
    g.all = bits(r);
    g.any = bits(r);
    RETURN_IF_ERROR(c.AllReduce(std::span<Float16>(g.f16_sum), ReduceOp::kSum));
    RETURN_IF_ERROR(c.AllReduce(std::span<BFloat16>(g.bf16_sum), ReduceOp::kSum));
    RETURN_IF_ERROR(c.AllReduce(std::span<BFloat16>(g.bf16_max), ReduceOp::kMax));
    RETURN_IF_ERROR(AllReduceBools(c, g.all, ReduceOp::kAnd));
    return AllReduceBools(c, g.any, ReduceOp::kOr);
  }));
  std::vector<std::vector<uint16_t>> f16, bf16;
  std::vector<std::vector<uint8_t>> b;
  for (uint16_t r = 0; r < world; ++r) {
    f16.push_back(halves(r, false));
    bf16.push_back(halves(r, true));
    b.push_back(bits(r));
  }
  const auto f16_sum = RankOrderReduce(DType::kFloat16, ReduceOp::kSum, f16);
  const auto bf16_sum = RankOrderReduce(DType::kBFloat16, ReduceOp::kSum, bf16);
  const auto bf16_max = RankOrderReduce(DType::kBFloat16, ReduceOp::kMax, bf16);
  const auto all = RankOrderReduce(DType::kBool, ReduceOp::kAnd, b);
  const auto any = RankOrderReduce(DType::kBool, ReduceOp::kOr, b);
  for (uint16_t r = 0; r < world; ++r) {
    EXPECT_EQ(Retype<uint16_t>(got[r].f16_sum), f16_sum);
    EXPECT_EQ(Retype<uint16_t>(got[r].bf16_sum), bf16_sum);
    EXPECT_EQ(Retype<uint16_t>(got[r].bf16_max), bf16_max);
    EXPECT_EQ(got[r].all, all);
    EXPECT_EQ(got[r].any, any);
  }
  // 16-bit float sums go ordered in the default (fixed-point) mode; max needs no order.
  EXPECT_EQ(sw.ordered_flags(), 2u * 5 * world);  // 3000 halves: 5 chunks per sum
}

TEST(ClientTest, OrderedFloat32IsTheRankOrderSumBitForBit) {
  TestSwitch sw(Lossy(0.05, 0, 0, 5));
  ASSERT_TRUE(sw.ok());
  const uint16_t world = 4;
  ClientOptions o = Options({sw.address()}, 22, world);
  o.float_mode = FloatMode::kFloatOrdered;
  std::vector<std::vector<float>> got(world);
  ExpectAllOk(RunRanks(o, AllRanks(world), [&](Client& c) {
    const uint16_t r = c.options().rank;
    got[r] = RandomFloats(r + 7, 4000);
    return c.AllReduce(std::span<float>(got[r]), ReduceOp::kSum);
  }));
  std::vector<std::vector<float>> in;
  for (uint16_t r = 0; r < world; ++r) in.push_back(RandomFloats(r + 7, 4000));
  const std::vector<float> want = RankOrderReduce(DType::kFloat32, ReduceOp::kSum, in);
  for (uint16_t r = 0; r < world; ++r) EXPECT_TRUE(SameBits(got[r], want)) << r;
}

TEST(ClientTest, NaNOrInfSendsAFixedPointSumAsFloat32) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  std::vector<std::vector<float>> in = {RandomFloats(1, 500), RandomFloats(2, 500)};
  in[1][3] = std::nanf("");
  in[1][7] = INFINITY;
  std::vector<std::vector<float>> got(2);
  std::vector<ClientStats> stats(2);
  ExpectAllOk(RunRanks(Options({sw.address()}, 23, 2), AllRanks(2), [&](Client& c) {
    const uint16_t r = c.options().rank;
    got[r] = in[r];
    RETURN_IF_ERROR(c.AllReduce(std::span<float>(got[r]), ReduceOp::kSum));
    stats[r] = c.stats();
    return common::Status::Ok();
  }));
  const std::vector<float> want = RankOrderReduce(DType::kFloat32, ReduceOp::kSum, in);
  for (uint16_t r = 0; r < 2; ++r) {
    EXPECT_TRUE(SameBits(got[r], want));
    EXPECT_EQ(stats[r].float_fallbacks, 1u);
    EXPECT_EQ(std::bit_cast<uint32_t>(got[r][3]), aggregator::kCanonicalNaNBits);
    EXPECT_EQ(got[r][7], INFINITY);
  }
}

TEST(ClientTest, ArgumentsAndOptionsAreChecked) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  const ClientOptions good = Options({sw.address()}, 24, 2);
  EXPECT_TRUE(ValidateClientOptions(good).ok());
  const std::pair<std::function<void(ClientOptions&)>, std::string> bad[] = {
      {[](ClientOptions& o) { o.switches.clear(); }, "switches"},
      {[](ClientOptions& o) { o.job_id = 0; }, "job_id"},
      {[](ClientOptions& o) { o.rank = 2; }, "rank: 0..1 expected"},
      {[](ClientOptions& o) { o.world = 0; }, "world"},
      {[](ClientOptions& o) { o.node_count = 0; }, "node_count: a divisor of world (2)"},
      {[](ClientOptions& o) { o.node_count = 3; }, "node_count: a divisor of world (2)"},
      {[](ClientOptions& o) { o.headroom = 30; }, "headroom"},
      {[](ClientOptions& o) {
         o.run_id = 7;
         o.incarnation = 8;
       },
       "run_id and incarnation"},
      {[](ClientOptions& o) { o.window = 0; }, "window"},
      {[](ClientOptions& o) { o.mtu = 9601; }, "mtu"},
      {[](ClientOptions& o) { o.reserve_missing_ids = 256; }, "reserve_missing_ids"},
      {[](ClientOptions& o) {
         o.mtu = 200;
         o.reserve_missing_ids = 70;
       },
       "leave no room"},
      {[](ClientOptions& o) { o.backoff = 0.5; }, "backoff"},
      {[](ClientOptions& o) { o.max_retransmit_timeout = milliseconds(1); }, "max_retransmit"},
      {[](ClientOptions& o) { o.progress_timeout = milliseconds(0); }, "progress_timeout"},
  };
  for (const auto& [mutate, what] : bad) {
    ClientOptions o = good;
    mutate(o);
    const common::Status s = ValidateClientOptions(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_FALSE(Client::Create(o).ok());
  }
  auto client = Client::Create(good);
  ASSERT_TRUE(client.ok());
  std::array<bool, 4> b{};
  const common::Status sum_of_bools = (*client)->AllReduce(std::span<bool>(b), ReduceOp::kSum);
  EXPECT_EQ(sum_of_bools.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(sum_of_bools.message().find("sum is not defined for bool"), std::string::npos);
  EXPECT_TRUE((*client)->AllReduce(std::span<float>(), ReduceOp::kSum).ok());  // nothing to do
  EXPECT_EQ(sw.contributions(), 0u);
  // 32 ids of room kept for a missing list: 1500 - 28 - 52 - 64 bytes.
  EXPECT_EQ((*client)->ChunkElements(DType::kBFloat16), 678u);
}

// A NOTICE tells a predicted straggler to flag its data BYPASS; the other
// ranks never flag theirs, and the allreduce is unaffected.
TEST(ClientTest, ANoticeMakesARankFlagItsContributions) {
  TestSwitch::Options options;
  options.notice_node = 1;
  TestSwitch sw(options);
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 28, 3);
  o.window = 1;  // one chunk at a time: the notice lands before the next chunk is built
  std::vector<ClientStats> stats(3);
  ExpectAllOk(RunRanks(o, AllRanks(3), [&](Client& c) {
    std::vector<int32_t> v(kFullChunk * 6, static_cast<int32_t>(c.options().rank) + 1);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    stats[c.options().rank] = c.stats();
    return v.back() == 6 ? common::Status::Ok() : common::Internal("wrong sum");
  }));
  EXPECT_GE(stats[1].notices, 1u);
  EXPECT_EQ(stats[0].notices, 0u);
  EXPECT_GE(sw.bypass_flags(), 5u) << "rank 1's chunks after the first carry the flag";
  EXPECT_LE(sw.bypass_flags(), 6u) << "only rank 1 flags";
}

// A rank that runs the job's TAN offers each contribution to it first; what
// the TAN takes is not sent (here: rank 1's first transmission of each chunk,
// so only its retransmissions reach the switch, and the sums still come out).
TEST(ClientTest, ContributionsTheLocalTanTakesAreNotSent) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 29, 3);
  std::mutex mu;
  std::set<std::pair<uint16_t, uint32_t>> offered;  // (rank, seq)
  uint32_t bad_offers = 0;
  o.offer_to_local_tan = [&](const uint8_t* data, uint32_t length) {
    aggregator::AggPacket pkt;
    std::lock_guard<std::mutex> lock(mu);
    if (aggregator::ParseAggregation(data, length, &pkt) != aggregator::WireError::kOk ||
        pkt.opcode != aggregator::Opcode::kContribution || pkt.header->job_id.host() != 29) {
      ++bad_offers;
      return false;
    }
    const uint16_t rank = pkt.header->node_id.host();
    return offered.emplace(rank, pkt.header->seq.host()).second && rank == 1;
  };
  const size_t chunks = 4;
  std::vector<ClientStats> stats(3);
  ExpectAllOk(RunRanks(o, AllRanks(3), [&](Client& c) {
    std::vector<int32_t> v(kFullChunk * chunks, static_cast<int32_t>(c.options().rank) + 1);
    RETURN_IF_ERROR(c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum));
    stats[c.options().rank] = c.stats();
    return v.front() == 6 && v.back() == 6 ? common::Status::Ok() : common::Internal("wrong sum");
  }));
  EXPECT_EQ(bad_offers, 0u);
  EXPECT_EQ(offered.size(), 3 * chunks) << "every rank offers every chunk";
  EXPECT_EQ(stats[1].kept_local, chunks);
  EXPECT_GE(stats[1].retransmissions, chunks);
  EXPECT_EQ(stats[0].kept_local, 0u);
  EXPECT_EQ(stats[2].kept_local, 0u);
}

TEST(ClientTest, DestroyingTheClientEndsItsAllReduces) {
  TestSwitch sw({});
  ASSERT_TRUE(sw.ok());
  auto client = Client::Create(Options({sw.address()}, 25, 2));  // rank 1 never comes
  ASSERT_TRUE(client.ok());
  std::vector<int32_t> a(10), b(10);
  Pending running = (*client)->Start(std::span<int32_t>(a), ReduceOp::kSum);
  Pending queued = (*client)->Start(std::span<int32_t>(b), ReduceOp::kSum);
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  client->reset();
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  EXPECT_EQ(running.Wait().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(running.Wait().message().find("destroyed during"), std::string::npos);
  EXPECT_NE(queued.Wait().message().find("destroyed before"), std::string::npos);
}

TEST(ClientTest, AReusedJobIdNeedsSequenceNumbersPastTheEarlierRun) {
  TestSwitch sw(WithJob({.id = 26, .key = kKey, .members = 2, .nodes = 1}));
  ASSERT_TRUE(sw.ok());
  ClientOptions o = Options({sw.address()}, 26, 2);
  o.task_info = TaskInfoMode::kNone;
  auto run = [&](size_t n, uint32_t first_seq) {
    o.first_seq = first_seq;
    return RunRanks(o, AllRanks(2), [n](Client& c) {
      std::vector<int32_t> v(n, 1);
      return c.AllReduce(std::span<int32_t>(v), ReduceOp::kSum);
    });
  };
  ExpectAllOk(run(10, 0));
  // The switch still holds seq 0's result: another chunk under it is refused.
  for (const common::Status& s : run(20, 0)) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("type mismatch"), std::string::npos) << s.message();
  }
  ExpectAllOk(run(20, 1));
}

}  // namespace
}  // namespace aggswitch::client
