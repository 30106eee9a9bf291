// The store's node (store_node.h) in the running aggregation path, on
// net_ring ports (dataplane_test_fixture.h): contributions kept and ACKed,
// fetched by members and the main server, refused when the store is full,
// and final results delivered to the main server until its ACK.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include <rte_cycles.h>

#include "dataplane/dataplane_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment("store_node_test"));

// Store mode, and both: a job's members' contributions kept in the switch
// (docs/protocol.md, "Store").
class StoreTest : public AggregationTest {
 protected:
  static constexpr uint32_t kServerIp = 0x0a0100c8;  // 10.1.0.200, not a member
  static constexpr uint16_t kServerPort = 45000;
  static common::MacAddr ServerMac() { return common::MacAddr::FromU64(0x020000200000ULL); }

  const aggregator::Job* AddModeJob(uint32_t id, uint16_t members, aggregator::JobSpec::Mode mode,
                                    uint32_t store_quota = 0) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = members;
    spec.mode = mode;
    spec.store_quota = store_quota;
    spec.main_server_ip = kServerIp;
    spec.main_server_port = kServerPort;
    auto job = jobs_->Add(spec);
    EXPECT_TRUE(job.ok());
    return job.ok() ? *job : nullptr;
  }
  // A FETCH of member `owner`'s contribution to `seq`, from member `node`.
  static aggregator::AggFields Fetch(uint32_t job, uint32_t seq, uint16_t node, uint16_t owner,
                                     bool release = false) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kFetch;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.aux = owner;
    f.flags = release ? aggregator::flags::kRelease : 0;
    return f;
  }
  uint32_t StoreBuffers(const aggregator::Job& job) {
    return dp_->JobStoreBuffers(job.index(), job.generation());
  }
  // The one datagram the switch sent, on `port`.
  Result Only(std::map<int, std::vector<Frame>>& out, int port) {
    EXPECT_EQ(out[port].size(), 1u);
    return out[port].empty() ? Result{} : ParseResult(out[port][0]);
  }
};

// Four members each store a vector: each is ACKed, nothing is reduced, and
// every copy can be fetched, by a member and by the main server, bit for bit.
TEST_F(StoreTest, StoreModeKeepsEveryMembersContributionForFetch) {
  const aggregator::Job* job = AddModeJob(11, 4, aggregator::JobSpec::Mode::kStore);
  std::vector<std::vector<uint8_t>> sent;
  for (uint16_t m = 0; m < 4; ++m) {
    sent.push_back(Int32Payload({m + 1, -(m + 1) * 1000, 7 * m}));
    Inject(0, Contribution(11, 3, m, sent.back()));
  }
  Step();
  auto out = Drain();
  const std::vector<Result> acks = WithOpcode(out[0], aggregator::Opcode::kAck);
  ASSERT_EQ(acks.size(), 4u);
  std::set<uint32_t> acked;
  for (const Result& a : acks) acked.insert(a.dst_ip);
  EXPECT_EQ(acked.size(), 4u) << "each member its own ACK";
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kResult).empty()) << "store mode reduces nothing";
  EXPECT_EQ(Agg().stored.Get(), 4u);
  EXPECT_EQ(Agg().contributions.Get(), 0u);
  EXPECT_EQ(StoreBuffers(*job), 4u);

  // Member 0 fetches member 2's copy.
  Inject(0, Datagram(Fetch(11, 3, 0, 2)));
  Step();
  out = Drain();
  Result r = Only(out, 0);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kFetch);
  EXPECT_EQ(r.dst_ip, MemberIp(0));
  EXPECT_EQ(r.fields.aux, 2u);
  EXPECT_EQ(r.fields.seq, 3u);
  EXPECT_EQ(r.fields.job_key, 0u);
  EXPECT_EQ(r.fields.elem_count, 3u);
  EXPECT_EQ(r.payload, sent[2]);
  EXPECT_EQ(r.fields.flags, 0) << "to a member: no FINAL";
  // The main server takes member 3's copy, which frees it.
  Inject(1, DatagramFrom(Fetch(11, 3, 0, 3, true), {}, ServerMac(), kServerIp, kServerPort));
  Step();
  out = Drain();
  r = Only(out, 1);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kFetch);
  EXPECT_EQ(r.dst_ip, kServerIp);
  EXPECT_EQ(r.dst_port, kServerPort);
  EXPECT_EQ(r.payload, sent[3]);
  EXPECT_EQ(r.fields.flags, aggregator::flags::kFinal | aggregator::flags::kRelease)
      << "to the main server flagged FINAL (the switches on its way let it cross), and RELEASE: the copy is freed";
  EXPECT_EQ(StoreBuffers(*job), 3u);
  EXPECT_EQ(Agg().store_released.Get(), 1u);
  // Gone now; and nothing was kept of chunk 4.
  Inject(1, DatagramFrom(Fetch(11, 3, 0, 3), {}, ServerMac(), kServerIp, kServerPort));
  Inject(0, Datagram(Fetch(11, 4, 1, 1)));
  Step();
  out = Drain();
  EXPECT_EQ(Only(out, 1).fields.aux, static_cast<uint32_t>(aggregator::NackReason::kNotStored));
  r = Only(out, 0);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNack);
  EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kNotStored));
  EXPECT_EQ(Agg().fetches.Get(), 2u);
  EXPECT_EQ(Agg().fetch_misses.Get(), 2u);
  // A member's second contribution to chunk 3 replaces its copy.
  Inject(0, Contribution(11, 3, 1, Int32Payload({5, 5, 5})));
  Inject(0, Datagram(Fetch(11, 3, 0, 1)));
  Step();
  out = Drain();
  const std::vector<Result> fetched = WithOpcode(out[0], aggregator::Opcode::kFetch);
  ASSERT_EQ(fetched.size(), 1u);
  EXPECT_EQ(fetched[0].payload, Int32Payload({5, 5, 5}));
  EXPECT_EQ(Agg().store_replaced.Get(), 1u);
  EXPECT_EQ(StoreBuffers(*job), 3u);
}

// The main server is bound as a member is: its first datagram with the
// job's key binds it to that datagram's port, VLAN and MAC. Another host
// that sends from the main server's address and UDP port, with the key, is
// refused (NACK not_main_server) whatever it asks: a member's kept vector,
// a distribution to every member, or the end of a final delivery.
TEST_F(StoreTest, TheMainServerIsBoundToWhereItFirstSentFrom) {
  BuildAggregation(", store: {final_timeout_ms: 5000}");
  const aggregator::Job* job = AddModeJob(24, 2, aggregator::JobSpec::Mode::kBoth);
  job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  const common::MacAddr spoofer = common::MacAddr::FromU64(0x02000020beefULL);
  for (uint16_t m = 0; m < 2; ++m) {
    Frame f = Contribution(24, 3, m, Int32Payload({m + 1}));
    HeaderOf(f)->flags = common::be16_t::FromHost(aggregator::flags::kFinal);
    Inject(0, f);
  }
  Step();
  auto out = Drain();
  const Result delivery = Only(out, 1);
  ASSERT_EQ(delivery.fields.opcode, aggregator::Opcode::kResult);
  // The main server reads member 1's copy: bound now.
  Inject(1, DatagramFrom(Fetch(24, 3, 0, 1), {}, ServerMac(), kServerIp, kServerPort));
  Step();
  out = Drain();
  EXPECT_EQ(Only(out, 1).payload, Int32Payload({2}));
  // The same address and UDP port from another port and MAC, with the key.
  aggregator::AggFields ack = FinalAck(24, 3);
  ack.aux = delivery.fields.aux;
  aggregator::AggFields distribute;
  distribute.opcode = aggregator::Opcode::kDistribute;
  distribute.job_id = 24;
  distribute.job_key = 0x5eed;
  distribute.seq = 9;
  distribute.elem_count = 1;
  Inject(0, DatagramFrom(Fetch(24, 3, 0, 0), {}, spoofer, kServerIp, kServerPort));
  Inject(0, DatagramFrom(distribute, Int32Payload({666}), spoofer, kServerIp, kServerPort));
  Inject(0, DatagramFrom(ack, {}, spoofer, kServerIp, kServerPort));
  Step();
  out = Drain();
  ASSERT_EQ(out[0].size(), 3u) << "three answers to the spoofer, nothing to the members";
  for (const Frame& f : out[0]) {
    const Result r = ParseResult(f);
    EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNack);
    EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kNotMainServer));
    EXPECT_TRUE(r.payload.empty()) << "no member's vector";
  }
  EXPECT_EQ(Agg().main_server_refused.Get(), 3u);
  EXPECT_EQ(Agg().distributions.Get(), 0u);
  EXPECT_EQ(Agg().final_acked.Get(), 0u);
  // The delivery goes on to the real main server, whose ACK ends it.
  rte_delay_ms(15);
  Step();
  out = Drain();
  EXPECT_EQ(Only(out, 1).fields.seq, 3u) << "sent again";
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  EXPECT_EQ(Agg().final_acked.Get(), 1u);
}

// A FETCH names the member whose copy it wants by node id in `aux`, 32
// bits on the wire: one past 16 bits names nobody, not the member its low
// bits would.
TEST_F(StoreTest, AFetchForANodeIdPastSixteenBitsIsRefused) {
  AddModeJob(25, 2, aggregator::JobSpec::Mode::kStore);
  Inject(0, Contribution(25, 1, 0, Int32Payload({42})));
  Inject(0, Contribution(25, 1, 1, Int32Payload({43})));
  Step();
  (void)Drain();
  aggregator::AggFields f = Fetch(25, 1, 1, 0);
  f.aux = 0x10000;
  Inject(0, Datagram(f));
  Step();
  auto out = Drain();
  Result r = Only(out, 0);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kNack);
  EXPECT_EQ(r.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kNotStored));
  EXPECT_EQ(Agg().fetches.Get(), 0u);
  EXPECT_EQ(Agg().fetch_misses.Get(), 1u);
  Inject(0, Datagram(Fetch(25, 1, 1, 0)));
  Step();
  out = Drain();
  EXPECT_EQ(Only(out, 0).payload, Int32Payload({42})) << "node 0 itself";
}

// Both mode: every member gets the sum, and every member's own vector stays
// fetchable.
TEST_F(StoreTest, BothModeStoresAndAggregates) {
  const aggregator::Job* job = AddModeJob(12, 4, aggregator::JobSpec::Mode::kBoth);
  std::vector<std::vector<uint8_t>> sent;
  std::vector<int32_t> sum(3, 0);
  for (uint16_t m = 0; m < 4; ++m) {
    const std::vector<int32_t> v{m * 3, m * m, -m};
    for (size_t e = 0; e < 3; ++e) sum[e] += v[e];
    sent.push_back(Int32Payload(v));
    Inject(0, Contribution(12, 8, m, sent.back()));
  }
  Step();
  auto out = Drain();
  const std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 4u);
  for (const Result& r : results) EXPECT_EQ(r.payload, Int32Payload(sum));
  EXPECT_EQ(StoreBuffers(*job), 4u);
  for (uint16_t m = 0; m < 4; ++m) Inject(0, Datagram(Fetch(12, 8, static_cast<uint16_t>(3 - m), m)));
  Step();
  out = Drain();
  const std::vector<Result> copies = WithOpcode(out[0], aggregator::Opcode::kFetch);
  ASSERT_EQ(copies.size(), 4u);
  for (const Result& c : copies) EXPECT_EQ(c.payload, sent[c.fields.aux]);
}

// A full store refuses with NACK store_full and keeps nothing; in both mode
// the refused contribution is not reduced either, so the stored copies and
// the sum never disagree.
TEST_F(StoreTest, AFullStoreRefusesAndKeepsNothing) {
  BuildAggregation(", store: {buffers: 4, per_job: 3}");
  const aggregator::Job* a = AddModeJob(13, 4, aggregator::JobSpec::Mode::kStore, 3);
  for (uint16_t m = 0; m < 4; ++m) Inject(0, Contribution(13, 1, m, Int32Payload({m})));
  Step();
  auto out = Drain();
  EXPECT_EQ(WithOpcode(out[0], aggregator::Opcode::kAck).size(), 3u);
  std::vector<Result> nacks = WithOpcode(out[0], aggregator::Opcode::kNack);
  ASSERT_EQ(nacks.size(), 1u);
  EXPECT_EQ(nacks[0].fields.aux, static_cast<uint32_t>(aggregator::NackReason::kStoreFull));
  EXPECT_EQ(nacks[0].dst_ip, MemberIp(3));
  EXPECT_EQ(Agg().store_full.Get(), 1u);
  EXPECT_EQ(StoreBuffers(*a), 3u);

  const aggregator::Job* b = AddModeJob(14, 2, aggregator::JobSpec::Mode::kBoth, 3);
  Inject(0, Contribution(14, 1, 0, Int32Payload({1})));
  Inject(0, Contribution(14, 1, 1, Int32Payload({2})));
  Step();
  out = Drain();
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kResult).empty())
      << "the second member's contribution was refused, not reduced";
  nacks = WithOpcode(out[0], aggregator::Opcode::kNack);
  ASSERT_EQ(nacks.size(), 1u);
  EXPECT_EQ(nacks[0].fields.aux, static_cast<uint32_t>(aggregator::NackReason::kStoreFull));
  EXPECT_EQ(Agg().store_full.Get(), 2u);
  EXPECT_EQ(StoreBuffers(*b), 1u);
  // Member 0 of job 13 releases its copy: member 1 of job 14 gets in.
  Inject(0, Datagram(Fetch(13, 1, 0, 0, true)));
  Inject(0, Contribution(14, 1, 1, Int32Payload({2})));
  Step();
  out = Drain();
  const std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].payload, Int32Payload({3}));
}

// Final delivery: a chunk its members mark FINAL goes, once complete, to the
// job's main server too, again and again until the main server ACKs it
// (echoing aux); one never ACKed is given up after final_timeout_ms.
TEST_F(StoreTest, AFinalResultIsResentToTheMainServerUntilItsAck) {
  BuildAggregation(", store: {final_timeout_ms: 300}");
  const aggregator::Job* job = AddModeJob(15, 2, aggregator::JobSpec::Mode::kAggregate);
  job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  auto final_contribution = [&](uint32_t seq, uint16_t node, int32_t v) {
    Frame f = Contribution(15, seq, node, Int32Payload({v, 2 * v}));
    HeaderOf(f)->flags = common::be16_t::FromHost(aggregator::flags::kFinal);
    return f;
  };
  Inject(0, final_contribution(1, 0, 10));
  Inject(0, final_contribution(1, 1, 5));
  Inject(0, Contribution(15, 2, 0, Int32Payload({1, 1})));  // not final: members only
  Inject(0, Contribution(15, 2, 1, Int32Payload({1, 1})));
  Step();
  auto out = Drain();
  EXPECT_EQ(WithOpcode(out[0], aggregator::Opcode::kResult).size(), 4u);
  Result r = Only(out, 1);
  EXPECT_EQ(r.fields.opcode, aggregator::Opcode::kResult);
  EXPECT_TRUE(r.fields.flags & aggregator::flags::kFinal);
  EXPECT_EQ(r.fields.seq, 1u);
  EXPECT_EQ(r.dst_ip, kServerIp);
  EXPECT_EQ(r.dst_port, kServerPort);
  EXPECT_EQ(r.payload, Int32Payload({15, 30}));
  EXPECT_EQ(Agg().final_deliveries.Get(), 1u);
  EXPECT_EQ(StoreBuffers(*job), 1u) << "the root keeps a copy until the ACK";
  // No ACK: sent again after about 10 ms.
  rte_delay_ms(15);
  Step();
  out = Drain();
  r = Only(out, 1);
  EXPECT_EQ(r.payload, Int32Payload({15, 30}));
  EXPECT_EQ(Agg().final_resends.Get(), 1u);
  // The ACK echoes aux; nothing more is sent, and the copy is freed.
  aggregator::AggFields ack = FinalAck(15, 1);
  ack.aux = r.fields.aux;
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  rte_delay_ms(50);
  Step();
  out = Drain();
  EXPECT_TRUE(out[1].empty());
  EXPECT_EQ(Agg().final_acked.Get(), 1u);
  EXPECT_EQ(StoreBuffers(*job), 0u);
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));  // a second ACK
  Step();
  EXPECT_EQ(Agg().final_ack_unmatched.Get(), 1u);
  EXPECT_EQ(Agg().final_acked.Get(), 1u);

  // Chunk 3 is never ACKed: given up within the time.
  Inject(0, final_contribution(3, 0, 1));
  Inject(0, final_contribution(3, 1, 1));
  for (int i = 0; i < 40 && Agg().final_given_up.Get() == 0; ++i) {
    Step();
    rte_delay_ms(20);
  }
  Step();
  EXPECT_EQ(Agg().final_given_up.Get(), 1u);
  EXPECT_GE(Agg().final_resends.Get(), 4u);
  EXPECT_EQ(StoreBuffers(*job), 0u);
}

// The root keeps at most 64 final results in delivery per worker, 16 of
// them one job's. A contribution that would complete one more while all are
// taken is refused for now (NACK store full, and the main server is told),
// not completed into a result the main server would never get; once the
// main server ACKs one, the member's retry goes in.
TEST_F(StoreTest, AFinalChunkWaitsWhileEveryDeliveryIsTaken) {
  BuildAggregation(", store: {final_timeout_ms: 5000}");
  auto final_contribution = [&](uint32_t job, uint32_t seq) {
    Frame f = Contribution(job, seq, 0, Int32Payload({static_cast<int32_t>(seq)}));
    HeaderOf(f)->flags = common::be16_t::FromHost(aggregator::flags::kFinal);
    return f;
  };
  for (uint32_t id = 17; id <= 21; ++id) {
    const aggregator::Job* job = AddModeJob(id, 1, aggregator::JobSpec::Mode::kAggregate);
    job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  }
  // Four jobs take a quarter each. (A chunk whose slot another job's
  // result holds is refused slot_busy: the next one goes in.)
  for (uint32_t id = 17; id <= 20; ++id) {
    const uint64_t want = uint64_t{FinalDelivery::kMaxPerJob} * (id - 16);
    for (uint32_t seq = 0; seq < 256 && Agg().final_deliveries.Get() < want; ++seq) {
      Inject(0, final_contribution(id, seq));
      Step();
    }
  }
  (void)Drain();
  EXPECT_EQ(Agg().final_deliveries.Get(), FinalDelivery::kMaxPending);
  EXPECT_EQ(Agg().final_deferred.Get(), 0u);
  uint32_t seq = 64;
  std::map<int, std::vector<Frame>> out;
  for (; seq < 256 && Agg().final_deferred.Get() == 0; ++seq) {
    Inject(0, final_contribution(21, seq));
    Step();
    out = Drain();
  }
  --seq;
  EXPECT_TRUE(WithOpcode(out[0], aggregator::Opcode::kResult).empty()) << "not completed";
  const std::vector<Result> nacks = WithOpcode(out[0], aggregator::Opcode::kNack);
  ASSERT_EQ(nacks.size(), 1u);
  EXPECT_EQ(nacks[0].fields.aux, static_cast<uint32_t>(aggregator::NackReason::kStoreFull));
  const std::vector<Result> told = WithOpcode(out[1], aggregator::Opcode::kNack);
  ASSERT_EQ(told.size(), 1u) << "the main server is told";
  EXPECT_EQ(told[0].fields.job_id, 21u);
  EXPECT_EQ(told[0].fields.seq, seq);
  EXPECT_EQ(told[0].fields.aux, static_cast<uint32_t>(aggregator::NackReason::kStoreFull));
  EXPECT_EQ(told[0].fields.flags, aggregator::flags::kFinal);
  EXPECT_EQ(Agg().final_deferred.Get(), 1u);
  EXPECT_EQ(Agg().final_refused.Get(), 0u);
  aggregator::AggFields ack = FinalAck(17, 0);
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  Inject(0, final_contribution(21, seq));
  Step();
  out = Drain();
  const std::vector<Result> results = WithOpcode(out[0], aggregator::Opcode::kResult);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].payload, Int32Payload({static_cast<int32_t>(seq)}));
  bool delivered = false;
  for (const Result& r : WithOpcode(out[1], aggregator::Opcode::kResult)) {
    delivered |= r.fields.job_id == 21 && r.fields.seq == seq;
  }
  EXPECT_TRUE(delivered) << "to the main server";
  EXPECT_EQ(Agg().final_refused.Get(), 0u);
}

// A job whose main server never ACKs holds back its own final chunks only:
// its deliveries take buffers within its store quota and at most a quarter
// of the delivery entries, and its held-back chunks are told to its main
// server; another job's final chunk is delivered all the same.
TEST_F(StoreTest, AJobWhoseMainServerNeverAcksHoldsBackOnlyItsOwnFinalChunks) {
  BuildAggregation(", store: {final_timeout_ms: 5000}");
  const aggregator::Job* greedy = AddModeJob(22, 1, aggregator::JobSpec::Mode::kAggregate, 8);
  const aggregator::Job* other = AddModeJob(23, 2, aggregator::JobSpec::Mode::kAggregate, 8);
  for (const aggregator::Job* job : {greedy, other}) {
    job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  }
  auto final_contribution = [&](uint32_t job, uint32_t seq, uint16_t node) {
    Frame f = Contribution(job, seq, node, Int32Payload({static_cast<int32_t>(seq)}));
    HeaderOf(f)->flags = common::be16_t::FromHost(aggregator::flags::kFinal);
    return f;
  };
  for (uint32_t seq = 0; seq < FinalDelivery::kMaxPending; ++seq) {
    Inject(0, final_contribution(22, seq, 0));
    Step();
  }
  auto out = Drain();
  EXPECT_EQ(Agg().final_deliveries.Get(), 8u) << "its store quota";
  EXPECT_EQ(StoreBuffers(*greedy), 8u);
  EXPECT_EQ(Agg().final_deferred.Get(), FinalDelivery::kMaxPending - 8);
  std::set<uint32_t> told;
  for (const Result& r : WithOpcode(out[1], aggregator::Opcode::kNack)) {
    if (r.fields.flags == aggregator::flags::kFinal && r.fields.job_id == 22) told.insert(r.fields.seq);
  }
  EXPECT_EQ(told.size(), FinalDelivery::kMaxPending - 8) << "each held-back chunk, to its main server";
  EXPECT_EQ(told.count(7), 0u);
  EXPECT_EQ(told.count(8), 1u);
  Inject(0, final_contribution(23, 5, 0));
  Inject(0, final_contribution(23, 5, 1));
  Step();
  out = Drain();
  EXPECT_EQ(WithOpcode(out[0], aggregator::Opcode::kResult).size(), 2u);
  bool delivered = false;
  for (const Result& r : WithOpcode(out[1], aggregator::Opcode::kResult)) {
    delivered |= r.fields.job_id == 23 && r.fields.seq == 5 && r.payload == Int32Payload({10});
  }
  EXPECT_TRUE(delivered) << "the other job's final result reaches its main server";
  EXPECT_EQ(StoreBuffers(*other), 1u);
  EXPECT_EQ(Agg().final_refused.Get(), 0u);
}

// A job's new runs do not multiply its share of the delivery entries: the
// deliveries of its earlier runs, which live on until ACKed or given up,
// count against the same 16.
TEST_F(StoreTest, ANewRunOfAJobTakesNoMoreDeliveriesThanItsShare) {
  BuildAggregation(", store: {final_timeout_ms: 5000}");
  const aggregator::Job* job = AddModeJob(26, 1, aggregator::JobSpec::Mode::kAggregate);
  job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  auto send = [&](uint32_t seq, uint32_t incarnation) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.flags = aggregator::flags::kFinal;
    f.job_id = 26;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.elem_count = 1;
    f.incarnation = incarnation;
    Inject(0, Datagram(f, Int32Payload({static_cast<int32_t>(seq)})));
    Step();
  };
  for (uint32_t seq = 0; seq < FinalDelivery::kMaxPerJob; ++seq) send(seq, 0x100);
  EXPECT_EQ(Agg().final_deliveries.Get(), FinalDelivery::kMaxPerJob);
  send(0, 0x200);  // a new run
  ASSERT_EQ(jobs_->TakeNewRuns(), std::vector<uint32_t>{26});
  ASSERT_TRUE(jobs_->Renew(26).ok());
  (void)Drain();
  send(0, 0x200);
  const auto out = Drain();
  EXPECT_TRUE(WithOpcode(out.at(0), aggregator::Opcode::kResult).empty()) << "held back";
  EXPECT_EQ(Agg().final_deliveries.Get(), FinalDelivery::kMaxPerJob);
  EXPECT_EQ(Agg().final_deferred.Get(), 1u);
}

// A new run of the job does not end the final delivery of the run before:
// that run completed, and its final result is the main server's. Each
// delivery carries its run's label, which the main server's ACK echoes, so
// the two runs' deliveries of the same seq are told apart.
TEST_F(StoreTest, AFinalDeliveryOutlivesANewRunOfItsJob) {
  BuildAggregation(", store: {final_timeout_ms: 5000}");
  const aggregator::Job* job = AddModeJob(16, 2, aggregator::JobSpec::Mode::kAggregate);
  job->SetHop(job->main_server_hop(), {ServerMac().ToU64(), 1, 0, kServerIp, kServerPort});
  auto send = [&](uint16_t node, uint32_t incarnation, int32_t value) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.flags = aggregator::flags::kFinal;
    f.node_id = node;
    f.job_id = 16;
    f.job_key = 0x5eed;
    f.elem_count = 1;
    f.incarnation = incarnation;
    Inject(0, Datagram(f, Int32Payload({value})));
    Step();
  };
  send(0, 0x100, 1);
  send(1, 0x101, 2);
  auto out = Drain();
  const Result first = Only(out, 1);
  EXPECT_EQ(first.payload, Int32Payload({3}));
  const uint32_t first_run = first.fields.incarnation;
  EXPECT_EQ(first_run, jobs_->Find(16)->label());
  // The next run, at the same seq, before the main server answered.
  send(0, 0x200, 11);
  (void)Drain();
  ASSERT_EQ(jobs_->TakeNewRuns(), std::vector<uint32_t>{16});
  ASSERT_TRUE(jobs_->Renew(16).ok());
  send(0, 0x200, 11);
  send(1, 0x201, 12);
  const std::vector<Result> second = WithOpcode(Drain()[1], aggregator::Opcode::kResult);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].payload, Int32Payload({23}));
  EXPECT_NE(second[0].fields.incarnation, first_run);
  // Both are sent again until their ACKs; the first run's ACK frees its own.
  rte_delay_ms(15);
  Step();
  std::vector<Result> again = WithOpcode(Drain()[1], aggregator::Opcode::kResult);
  ASSERT_EQ(again.size(), 2u) << "the first run's delivery lives on";
  aggregator::AggFields ack = FinalAck(16, 0);
  ack.aux = first.fields.aux;
  ack.incarnation = first_run;
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  rte_delay_ms(30);
  Step();
  again = WithOpcode(Drain()[1], aggregator::Opcode::kResult);
  ASSERT_FALSE(again.empty());
  for (const Result& r : again) EXPECT_EQ(r.payload, Int32Payload({23})) << "only the second run's";
  EXPECT_EQ(Agg().final_acked.Get(), 1u);
  EXPECT_EQ(Agg().final_given_up.Get(), 0u);
  // The first run's ACK again (a duplicate): it frees nothing, and the
  // second run's delivery goes on until its own ACK.
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  EXPECT_EQ(Agg().final_ack_unmatched.Get(), 1u);
  EXPECT_EQ(Agg().final_acked.Get(), 1u);
  rte_delay_ms(50);
  Step();
  again = WithOpcode(Drain()[1], aggregator::Opcode::kResult);
  ASSERT_FALSE(again.empty()) << "the second run's delivery lives on";
  for (const Result& r : again) EXPECT_EQ(r.payload, Int32Payload({23}));
  ack.incarnation = second[0].fields.incarnation;
  ack.aux = second[0].fields.aux;
  Inject(1, DatagramFrom(ack, {}, ServerMac(), kServerIp, kServerPort));
  Step();
  EXPECT_EQ(Agg().final_acked.Get(), 2u);
  EXPECT_EQ(StoreBuffers(*jobs_->Find(16)), 0u);
}

}  // namespace
}  // namespace aggswitch::dataplane
