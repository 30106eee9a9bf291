// The aggregation path on 1, 2 and 3 worker lcores running at once
// (Dataplane::Start), each polling its own RX queue of every port, as RSS
// spreads the members' flows over a NIC's queues: a member's datagrams always
// reach the same worker, and a chunk's slot belongs to one worker, so most
// contributions cross to their slot's owner through its hand-off ring. On
// this 2-CPU machine the lcores share CPUs (--lcores 0@0,1@1,2@1,3@0); the
// test thread is the control thread (in-band registration) and the NIC: it
// feeds the net_ring RX rings and reads every TX queue's ring.
//
// Checks: every result exact and sent once to each member, float sums in
// member order bit for bit whichever lcore took each contribution, a
// retransmission on another lcore counted once, in-band registration while
// the workers run, and hand-off counters that show the cross-lcore traffic.
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ring.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)
using aggregator::DType;
using aggregator::ReduceOp;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(
    new EalEnvironment("aggregation_multicore_test", "0@0,1@1,2@1,3@0"));

constexpr int kPorts = 2;            // a0 and a1, access VLAN 10
constexpr uint16_t kMembers = 4;     // members 0, 2 on a0; 1, 3 on a1
constexpr uint32_t kChunks = 64;
constexpr uint16_t kElems = 64;
constexpr uint64_t kKey = 0x5eed;

// The header of member `m`'s datagram for chunk `seq` of `job`: the ack
// watermark says every earlier chunk's result arrived.
aggregator::AggFields Fields(uint32_t job, uint32_t seq, uint16_t m, uint16_t flags, DType dtype,
                             uint16_t elems) {
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kContribution;
  f.flags = flags;
  f.node_id = m;
  f.job_id = job;
  f.seq = seq;
  f.job_key = kKey;
  f.ack_watermark = seq;
  f.dtype = dtype;
  f.elem_count = elems;
  return f;
}

// The value member `m` contributes at element `e` of chunk `seq`.
int32_t IntValue(uint16_t m, uint32_t seq, uint16_t e) {
  return static_cast<int32_t>((m + 1) * 100000 + seq * 97 + e * 3);
}
// Float values whose sum depends on the order of the additions.
float FloatValue(uint16_t m, uint32_t seq, uint16_t e) {
  const float scale[kMembers] = {1e8f, 1.0f, -1e8f, 3.25f};
  return scale[m] * (1.0f + static_cast<float>((seq * 31 + e) % 17) / 7.0f);
}

class MulticoreTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    workers_ = GetParam();
    static int instance = 0;
    ++instance;
    std::string ports, workers;
    for (int p = 0; p < kPorts; ++p) {
      const std::string name = "mc" + std::to_string(instance) + "_" + std::to_string(p);
      ports += "  - {name: a" + std::to_string(p) + ", devargs: net_ring_" + name + ", access: 10}\n";
      std::vector<rte_ring*> rx, tx;
      for (int q = 0; q < workers_; ++q) {
        const std::string ring = name + "_" + std::to_string(q);
        rx.push_back(rte_ring_create((ring + "_rx").c_str(), 1024, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ));
        tx.push_back(rte_ring_create((ring + "_tx").c_str(), 1024, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ));
        ASSERT_NE(rx.back(), nullptr);
        ASSERT_NE(tx.back(), nullptr);
      }
      ASSERT_GE(rte_eth_from_rings(name.c_str(), rx.data(), static_cast<unsigned>(rx.size()),
                                   tx.data(), static_cast<unsigned>(tx.size()), SOCKET_ID_ANY),
                0);
      rx_.push_back(std::move(rx));
      tx_.push_back(std::move(tx));
    }
    for (int w = 0; w < workers_; ++w) {
      const std::string q = std::to_string(w);
      workers += "  - {lcore: " + std::to_string(w + 1) + ", rx: [\"a0:" + q + "\", \"a1:" + q + "\"]}\n";
    }
    const std::string yaml =
        "eal: {lcores: \"0-3\"" + EalExtra() + "}\n"
        "switch: {mac: 02:a9:9c:00:00:01, addresses: [10.0.10.254/24]}\n"
        "ports:\n" + ports +
        "workers:\n" + workers +
        "mempool: {mbufs: 4095, cache: 0}\n"
        "aggregation: {address: 10.0.10.253, slots: 1024}\n";
    config::ConfigLoad load = config::LoadConfigText(yaml, "multicore.yaml");
    ASSERT_TRUE(load.ok()) << load.FormatErrors();
    config_ = load.config;
    auto jobs = aggregator::JobTable::Create(16, 64);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    auto dp = Dataplane::Create(config_, jobs_.get());
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dp_ = std::move(dp).value();
    in_band_ = std::make_unique<InBandControl>(*jobs_, config_);
    ASSERT_TRUE(dp_->Start().ok());
  }

  // More keys of the eal section (", key: value").
  virtual std::string EalExtra() const { return ""; }

  void TearDown() override {
    if (dp_ != nullptr) dp_->Stop();
    dp_.reset();
    in_band_.reset();
    jobs_.reset();
    for (auto* rings : {&rx_, &tx_}) {
      for (auto& per_port : *rings) {
        for (rte_ring* r : per_port) Frames::DrainRing(r), rte_ring_free(r);
      }
      rings->clear();
    }
  }

  // `partition`: the job's slots (slot_placement.h); none: hash placement.
  // `quota`: its slot quota (0: none; a job without one never moves).
  void AddJob(uint32_t id, bool ordered = false,
              std::optional<aggregator::Partition> partition = std::nullopt, uint32_t quota = 0,
              aggregator::JobSpec::Mode mode = aggregator::JobSpec::Mode::kAggregate) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.mode = mode;
    spec.key = kKey;
    spec.members = kMembers;
    spec.ordered = ordered;
    spec.partition = partition;
    spec.slot_quota = quota;
    spec.placed = aggregator::JobSpec::Placed::kHint;
    ASSERT_TRUE(jobs_->Add(spec).ok());
  }

  // Member m's contribution to chunk `seq` of int32 job `job` (its value
  // names all three), acknowledging every chunk before it; and the sum of
  // the chunk's contributions.
  static Frame IntChunk(uint32_t job, uint32_t seq, uint16_t m) {
    return Frames::Contribution(job, seq, m,
                                Frames::Int32Payload({static_cast<int32_t>(job * 1000 + seq * 10 + m)}),
                                DType::kInt32, ReduceOp::kSum, kKey, -1, seq);
  }
  static int32_t IntChunkSum(uint32_t job, uint32_t seq) {
    int32_t s = 0;
    for (uint16_t m = 0; m < kMembers; ++m) s += static_cast<int32_t>(job * 1000 + seq * 10 + m);
    return s;
  }
  // The chunks each (job, member) got a result of.
  using Answered = std::map<std::pair<uint32_t, uint16_t>, std::set<uint32_t>>;
  // Collects `count` results of IntChunk contributions: each must be the
  // chunk's sum and the first for its member, and `check` sees it too.
  void TakeIntResults(size_t count, Answered& answered,
                      const std::function<void(const Frames::Result&)>& check = {}) {
    const auto out = Collect(count);
    size_t got = 0;
    for (const auto& [port, frames] : out) {
      for (const Frame& f : frames) {
        const Frames::Result r = Frames::ParseResult(f);
        ASSERT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
        const auto member = static_cast<uint16_t>(r.dst_port - Frames::MemberPort(0));
        EXPECT_EQ(r.payload, Frames::Int32Payload({IntChunkSum(r.fields.job_id, r.fields.seq)}))
            << "job " << r.fields.job_id << " seq " << r.fields.seq;
        if (check) check(r);
        const std::pair<uint32_t, uint16_t> who{r.fields.job_id, member};
        EXPECT_TRUE(answered[who].insert(r.fields.seq).second)
            << "a second result for job " << r.fields.job_id << ", member " << member;
        ++got;
      }
    }
    ASSERT_EQ(got, count);
  }

  // Chunks 0..chunks-1 of jobs 7 and 8, which share their slots: job 7's
  // first two members' contributions, then (once counted) all of job 8's,
  // whose chunk finds its slot held, then job 7's other two. Every member
  // of both jobs must get each chunk's exact sum once (TakeIntResults).
  void HalfHeldChunks(uint32_t chunks, const std::function<void(const Frames::Result&)>& check = {}) {
    Answered answered;
    for (uint32_t seq = 0; seq < chunks; ++seq) {
      const uint64_t before = Total(&AggregationCounters::contributions);
      for (uint16_t m : {0, 1}) Inject(PortOf(m), QueueOf(m), IntChunk(7, seq, m));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (Total(&AggregationCounters::contributions) < before + 2) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "job 7's first half of chunk " << seq;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      for (uint16_t m = 0; m < kMembers; ++m) Inject(PortOf(m), QueueOf(m), IntChunk(8, seq, m));
      TakeIntResults(kMembers, answered, check);  // job 8's chunk, wherever it went
      for (uint16_t m : {2, 3}) Inject(PortOf(m), QueueOf(m), IntChunk(7, seq, m));
      TakeIntResults(kMembers, answered, check);  // job 7's, at home
    }
    for (const uint32_t job : {7u, 8u}) {
      for (uint16_t m = 0; m < kMembers; ++m) {
        const std::pair<uint32_t, uint16_t> who{job, m};
        EXPECT_EQ(answered[who].size(), chunks) << "job " << job << ", member " << m;
      }
    }
  }

  // Member m's port, and the RX queue (worker) its flow hashes to.
  static int PortOf(uint16_t m) { return m % 2; }
  int QueueOf(uint16_t m) const { return (m / 2) % workers_; }

  void Inject(int port, int queue, const Frame& frame) {
    // One pool for the injected frames, shared by every test of the process.
    static rte_mempool* pool = rte_pktmbuf_pool_create("mc_test_pool", 4095, 0, 0,
                                                       RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    ASSERT_NE(pool, nullptr);
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    ASSERT_NE(m, nullptr);
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    ASSERT_NE(data, nullptr);
    std::memcpy(data, frame.data(), frame.size());
    // The rings hold 1023: wait for the worker rather than fail.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (rte_ring_enqueue(rx_[port][queue], m) != 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "RX ring stays full";
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Every frame the switch sends until `count` arrived or 20 s passed, by
  // port; runs in-band registration meanwhile, as the control loop would.
  std::map<int, std::vector<Frame>> Collect(size_t count) {
    std::map<int, std::vector<Frame>> out;
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (got < count && std::chrono::steady_clock::now() < deadline) {
      in_band_->Register(*dp_);
      dp_->ProcessEscalations(std::chrono::steady_clock::now());
      bool any = false;
      for (int p = 0; p < kPorts; ++p) {
        for (rte_ring* r : tx_[p]) {
          void* obj;
          while (rte_ring_dequeue(r, &obj) == 0) {
            auto* m = static_cast<rte_mbuf*>(obj);
            Frame f(m->pkt_len);
            const auto* d = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, f.data()));
            if (d != f.data()) std::memcpy(f.data(), d, m->pkt_len);
            rte_pktmbuf_free(m);
            any = true;
            // While an in-band job registers, its first contributions wait in
            // the control thread's ring and later ones pass them: the switch
            // may take that for a loss and say NOTICE missing, which a member
            // would answer with a resend. These tests resend nothing.
            // A chunk moved to a spare slot tells its members where it went
            // (NOTICE relocated), which they would use as a hint; these
            // tests send without one, and the switch finds the chunk anyway.
            const Frames::Result r = Frames::ParseResult(f);
            if (r.fields.opcode == aggregator::Opcode::kNotice &&
                (r.fields.aux == static_cast<uint32_t>(aggregator::NoticeKind::kMissing) ||
                 r.fields.aux == static_cast<uint32_t>(aggregator::NoticeKind::kRelocated))) {
              ++notices_;
              continue;
            }
            out[p].push_back(std::move(f));
            ++got;
          }
        }
      }
      if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return out;
  }

  // A counter summed over the workers, and each worker's.
  uint64_t Total(Counter AggregationCounters::*c) const {
    uint64_t sum = 0;
    for (int w = 0; w < workers_; ++w) sum += (dp_->worker_stats(w).lcore.agg.*c).Get();
    return sum;
  }
  uint64_t Lcore(int w, Counter LcoreCounters::*c) const { return (dp_->worker_stats(w).lcore.*c).Get(); }
  uint64_t Of(int w, Counter AggregationCounters::*c) const {
    return (dp_->worker_stats(w).lcore.agg.*c).Get();
  }

  // Checks that every member got exactly one result per chunk, from its own
  // port, and returns them by (member, seq).
  std::map<std::pair<uint16_t, uint32_t>, Frames::Result> ByMemberAndSeq(
      const std::map<int, std::vector<Frame>>& out) {
    std::map<std::pair<uint16_t, uint32_t>, Frames::Result> results;
    for (const auto& [port, frames] : out) {
      for (const Frame& f : frames) {
        const Frames::Result r = Frames::ParseResult(f);
        EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
        const auto member = static_cast<uint16_t>(r.dst_port - Frames::MemberPort(0));
        EXPECT_LT(member, kMembers);
        EXPECT_EQ(PortOf(member), port) << "member " << member << " is behind port a" << PortOf(member);
        EXPECT_TRUE(results.emplace(std::pair{member, r.fields.seq}, r).second)
            << "a second result for member " << member << ", seq " << r.fields.seq;
      }
    }
    return results;
  }

  // The chunk contributions of every member, member-major per chunk.
  template <typename Build>
  void InjectChunks(Build build) {
    for (uint32_t seq = 0; seq < kChunks; ++seq) {
      for (uint16_t m = 0; m < kMembers; ++m) Inject(PortOf(m), QueueOf(m), build(seq, m));
    }
  }

  void ExpectCrossLcoreTraffic() {
    if (workers_ == 1) {
      EXPECT_EQ(Total(&AggregationCounters::handoffs), 0u) << "one worker owns every slot";
      return;
    }
    EXPECT_GT(Total(&AggregationCounters::handoffs), 0u);
    EXPECT_EQ(Total(&AggregationCounters::handoff_full), 0u);
    for (int w = 0; w < workers_; ++w) {
      EXPECT_GT(Of(w, &AggregationCounters::completions), 0u) << "worker " << w << " owns slots";
    }
  }

  int workers_ = 1;
  size_t notices_ = 0;  // NOTICEs missing and relocated that Collect left out
  config::Config config_;
  std::vector<std::vector<rte_ring*>> rx_, tx_;  // [port][queue]
  std::unique_ptr<aggregator::JobTable> jobs_;
  std::unique_ptr<Dataplane> dp_;
  std::unique_ptr<InBandControl> in_band_;
};

TEST_P(MulticoreTest, Int32SumsAreExactOnEveryLcore) {
  AddJob(7);
  InjectChunks([](uint32_t seq, uint16_t m) {
    std::vector<int32_t> v(kElems);
    for (uint16_t e = 0; e < kElems; ++e) v[e] = IntValue(m, seq, e);
    return Frames::Contribution(7, seq, m, Frames::Int32Payload(v), DType::kInt32, ReduceOp::kSum,
                                kKey, -1, seq);
  });
  const auto results = ByMemberAndSeq(Collect(kMembers * kChunks));
  ASSERT_EQ(results.size(), kMembers * kChunks);
  for (const auto& [at, r] : results) {
    std::vector<int32_t> want(kElems);
    for (uint16_t e = 0; e < kElems; ++e) {
      for (uint16_t m = 0; m < kMembers; ++m) want[e] += IntValue(m, at.second, e);
    }
    ASSERT_EQ(r.payload, Frames::Int32Payload(want)) << "member " << at.first << ", seq " << at.second;
  }
  EXPECT_EQ(Total(&AggregationCounters::contributions), kMembers * kChunks);
  EXPECT_EQ(Total(&AggregationCounters::completions), kChunks);
  ExpectCrossLcoreTraffic();
}

// Ordered float sums come out in member order, bit for bit, whichever worker
// received each contribution and in whatever order they met.
TEST_P(MulticoreTest, OrderedFloatSumsAreBitExactAcrossLcores) {
  AddJob(8, /*ordered=*/true);
  InjectChunks([](uint32_t seq, uint16_t m) {
    std::vector<uint8_t> payload(kElems * 4);
    for (uint16_t e = 0; e < kElems; ++e) {
      const float v = FloatValue(m, seq, e);
      std::memcpy(&payload[e * 4], &v, 4);
    }
    return Frames::Datagram(Fields(8, seq, m, aggregator::flags::kOrdered, DType::kFloat32, kElems),
                            payload);
  });
  const auto results = ByMemberAndSeq(Collect(kMembers * kChunks));
  ASSERT_EQ(results.size(), kMembers * kChunks);
  for (const auto& [at, r] : results) {
    std::vector<uint8_t> want(kElems * 4);
    for (uint16_t e = 0; e < kElems; ++e) {
      // Each value rounded to float before it is added, as on the wire (no
      // multiply-add fused across the two).
      volatile float v[kMembers];
      for (uint16_t m = 0; m < kMembers; ++m) v[m] = FloatValue(m, at.second, e);
      float sum = v[0];
      for (uint16_t m = 1; m < kMembers; ++m) sum += v[m];
      std::memcpy(&want[e * 4], &sum, 4);
    }
    ASSERT_EQ(r.payload, want) << "member " << at.first << ", seq " << at.second;
  }
  ExpectCrossLcoreTraffic();
}

// Two jobs placed on the same slots: each chunk of job 8 arrives while job
// 7's chunk holds the slot, half aggregated. The worker that owns the slot
// escalates it; the control thread leases a spare slot, which may belong to
// another worker; the members that arrive later are escalated or redirected
// there by the relocation map. Every member of both jobs gets its chunk's
// exact sum once.
TEST_P(MulticoreTest, CollidedChunksMeetInASpareSlotWhicheverLcoreOwnsIt) {
  constexpr uint32_t kCollided = 16;
  AddJob(7, false, aggregator::Partition{0, 128});
  AddJob(8, false, aggregator::Partition{0, 128});
  HalfHeldChunks(kCollided);
  EXPECT_GE(Total(&AggregationCounters::collisions), kCollided);
  EXPECT_EQ(dp_->escalation_stats().granted, kCollided) << "one spare slot per collided chunk";
  EXPECT_EQ(dp_->escalation_stats().refused, 0u);
  EXPECT_EQ(Total(&AggregationCounters::slot_busy), 0u);
  EXPECT_EQ(Total(&AggregationCounters::completions), 2 * kCollided);
  EXPECT_EQ(Total(&AggregationCounters::relocated), kMembers * kCollided)
      << "every contribution of job 8 went on to its chunk's spare slot";
}

// Two jobs with slot quotas placed on the same partition: job 8's first
// chunk arrives while job 7's holds its slot, half aggregated, and job 8
// moves to a partition of its own ("Moves"). Every worker learns of the move
// and sends job 8's chunks whose home slot it owns there: job 8's later
// chunks meet job 7's half-filled ones at home no more, and every member of
// both jobs gets its chunk's exact sum once, whichever lcores own the slots.
TEST_P(MulticoreTest, AJobThatCollidesMovesWhicheverLcoresOwnItsSlots) {
  constexpr uint32_t kChunks = 16;
  AddJob(7, false, aggregator::Partition{0, 32}, 32);
  AddJob(8, false, aggregator::Partition{0, 32}, 32);
  HalfHeldChunks(kChunks, [](const Frames::Result& r) {
    if (r.fields.job_id == 8) {
      EXPECT_EQ(r.fields.slot_hint, aggregator::kMovedSlotHint);
    }
  });
  const std::optional<aggregator::Job::Move> move = jobs_->Find(8)->move();
  ASSERT_TRUE(move.has_value());
  EXPECT_EQ(move->cut, 0u);
  EXPECT_EQ(move->base, 32u);
  EXPECT_EQ(dp_->escalation_stats().moves, 1u);
  EXPECT_EQ(dp_->escalation_stats().granted, 0u) << "no spare slot needed";
  EXPECT_EQ(Total(&AggregationCounters::slot_busy), 0u);
  EXPECT_EQ(Total(&AggregationCounters::completions), 2 * kChunks);
  EXPECT_EQ(Total(&AggregationCounters::moved), kMembers * kChunks)
      << "every contribution of job 8 went on from its home slot";
  // Chunk 0's members may each collide before the move reaches their
  // workers; the chunks after it find their home's owner told.
  EXPECT_LE(Total(&AggregationCounters::collisions), 2u * kMembers);
}

// A member's retransmission that RSS puts on another queue (its source port
// changed, say) still counts once; the member gets the cached result again.
TEST_P(MulticoreTest, ARetransmissionOnAnotherLcoreCountsOnce) {
  AddJob(9);
  auto chunk = [](uint32_t seq, uint16_t m) {
    return Frames::Contribution(9, seq, m, Frames::Int32Payload({m + 1}), DType::kInt32,
                                ReduceOp::kSum, kKey, -1, seq);
  };
  for (uint16_t m = 0; m < kMembers; ++m) Inject(PortOf(m), QueueOf(m), chunk(0, m));
  auto first = ByMemberAndSeq(Collect(kMembers));
  ASSERT_EQ(first.size(), kMembers);
  Inject(PortOf(0), (QueueOf(0) + 1) % workers_, chunk(0, 0));
  auto again = Collect(1);
  ASSERT_EQ(again[PortOf(0)].size(), 1u);
  const Frames::Result r = Frames::ParseResult(again[PortOf(0)][0]);
  EXPECT_EQ(r.payload, Frames::Int32Payload({1 + 2 + 3 + 4}));
  EXPECT_EQ(Total(&AggregationCounters::contributions), kMembers);
  EXPECT_EQ(Total(&AggregationCounters::duplicate_results), 1u);
}

// Both mode: each contribution is kept at its chunk's home slot owner,
// whichever lcore received it, and a FETCH, received by any lcore, finds it
// there; the sums are exact too.
TEST_P(MulticoreTest, KeptContributionsAreFoundFromEveryLcore) {
  AddJob(10, false, std::nullopt, 0, aggregator::JobSpec::Mode::kBoth);
  constexpr uint32_t kKept = 16;
  for (uint32_t seq = 0; seq < kKept; ++seq) {
    for (uint16_t m = 0; m < kMembers; ++m) Inject(PortOf(m), QueueOf(m), IntChunk(10, seq, m));
  }
  const auto results = ByMemberAndSeq(Collect(kMembers * kKept));
  ASSERT_EQ(results.size(), kMembers * kKept);
  for (const auto& [at, r] : results) {
    EXPECT_EQ(r.payload, Frames::Int32Payload({IntChunkSum(10, at.second)}));
  }
  EXPECT_EQ(Total(&AggregationCounters::stored), kMembers * kKept);
  // Member m asks, on another lcore's queue, for member (m + 1)'s copy.
  for (uint32_t seq = 0; seq < kKept; ++seq) {
    for (uint16_t m = 0; m < kMembers; ++m) {
      aggregator::AggFields f;
      f.opcode = aggregator::Opcode::kFetch;
      f.node_id = m;
      f.job_id = 10;
      f.seq = seq;
      f.job_key = kKey;
      f.aux = (m + 1) % kMembers;
      Inject(PortOf(m), (QueueOf(m) + 1) % workers_, Frames::Datagram(f));
    }
  }
  std::set<std::pair<uint16_t, uint32_t>> fetched;
  for (const auto& [port, frames] : Collect(kMembers * kKept)) {
    for (const Frame& frame : frames) {
      const Frames::Result r = Frames::ParseResult(frame);
      ASSERT_EQ(r.fields.opcode, aggregator::Opcode::kFetch) << "seq " << r.fields.seq;
      const auto owner = static_cast<uint16_t>(r.fields.aux);
      // IntChunk's value: job * 1000 + seq * 10 + member.
      EXPECT_EQ(r.payload, Frames::Int32Payload({static_cast<int32_t>(10 * 1000 + r.fields.seq * 10 + owner)}));
      EXPECT_TRUE(fetched.emplace(owner, r.fields.seq).second);
    }
  }
  EXPECT_EQ(fetched.size(), kMembers * kKept);
  EXPECT_EQ(Total(&AggregationCounters::fetches), kMembers * kKept);
  EXPECT_EQ(Total(&AggregationCounters::fetch_misses), 0u);
}

// Jobs that register themselves while every worker runs: the workers pass
// the task info up from whichever lcore got it, the control thread admits
// the job once, and every datagram comes back to be counted.
TEST_P(MulticoreTest, InBandRegistrationWhileTheWorkersRun) {
  InjectChunks([](uint32_t seq, uint16_t m) {
    aggregator::AggFields f = Fields(21, seq, m, aggregator::flags::kTaskInfo, DType::kInt32, 1);
    f.expected = kMembers;
    f.node_count = 1;
    return Frames::Datagram(f, Frames::Int32Payload({static_cast<int32_t>(seq * 10 + m)}));
  });
  const auto results = ByMemberAndSeq(Collect(kMembers * kChunks));
  ASSERT_EQ(results.size(), kMembers * kChunks);
  for (const auto& [at, r] : results) {
    const int32_t want = static_cast<int32_t>(at.second * 10 * kMembers + 0 + 1 + 2 + 3);
    ASSERT_EQ(r.payload, Frames::Int32Payload({want})) << "seq " << at.second;
  }
  EXPECT_EQ(dp_->registrations(RegistrationResult::admitted), 1u);
  const aggregator::Job* job = jobs_->Find(21);
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(job->in_band());
  ExpectCrossLcoreTraffic();
}

INSTANTIATE_TEST_SUITE_P(Workers, MulticoreTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_lcores";
                         });

// eal.idle_sleep_us: a worker with nothing to do sleeps between polls (and
// counts its sleeps as idle time), and still answers every chunk once
// traffic comes.
class IdleSleepTest : public MulticoreTest {
 protected:
  std::string EalExtra() const override { return ", idle_sleep_us: 200"; }
};

TEST_P(IdleSleepTest, AnIdleWorkerSleepsAndWakesForTraffic) {
  AddJob(7);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<uint64_t> sleeps(workers_);
  for (int w = 0; w < workers_; ++w) {
    sleeps[w] = Lcore(w, &LcoreCounters::idle_sleeps);
    // 100 ms of 200 us sleeps is up to 500; the polls between them add little.
    EXPECT_GT(sleeps[w], 10u) << "worker " << w;
    EXPECT_LT(sleeps[w], 600u) << "worker " << w;
    EXPECT_EQ(Lcore(w, &LcoreCounters::busy_packets), 0u);
  }
  InjectChunks([](uint32_t seq, uint16_t m) {
    return Frames::Contribution(7, seq, m, Frames::Int32Payload({static_cast<int32_t>(seq + m)}),
                                DType::kInt32, ReduceOp::kSum, kKey, -1, seq);
  });
  const auto results = ByMemberAndSeq(Collect(kMembers * kChunks));
  ASSERT_EQ(results.size(), kMembers * kChunks);
  for (const auto& [at, r] : results) {
    ASSERT_EQ(r.payload, Frames::Int32Payload({static_cast<int32_t>(4 * at.second + 6)}));
  }
  uint64_t polls = 0, idle = 0;
  for (int w = 0; w < workers_; ++w) {
    polls += Lcore(w, &LcoreCounters::polls);
    idle += Lcore(w, &LcoreCounters::idle_cycles);
  }
  EXPECT_GT(idle, 0u);
  // Busy-polling would make millions of passes in this time.
  EXPECT_LT(polls, 200000u * static_cast<uint64_t>(workers_));
}

INSTANTIATE_TEST_SUITE_P(Workers, IdleSleepTest, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_lcores";
                         });

}  // namespace
}  // namespace aggswitch::dataplane
