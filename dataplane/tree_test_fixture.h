// Fixtures of the tests of a switch in a tree (dataplane_test_fixture.h):
// InBandTest, jobs registered in-band from task info, at a leaf below a
// parent switch; ParameterNodeTest, the parameter node (docs/parameter-node.md)
// in process behind the switch, with child switches and a parent.
//
// Thread safety: test code; everything runs on the test's main thread.
#pragma once

#include <gtest/gtest.h>
#include <rte_cycles.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregator/ps_engine.h"
#include "dataplane/dataplane_test_fixture.h"
#include "dataplane/udp_headers.h"

namespace aggswitch::dataplane::fixtures {

// The number of missing ids in the header of `f`.
inline int MissingCount(Frame f) { return HeaderOf(f)->missing_count; }

class InBandTest : public AggregationTest {
 protected:
  static constexpr uint64_t kKey = 0x5eed;

  // A contribution that carries its task info (variant A): `members` expected
  // at this switch, `nodes` switches taking part.
  static Frame WithTaskInfo(uint32_t job, uint32_t seq, uint16_t node, uint16_t members, int32_t value,
                            uint64_t key = kKey, uint16_t nodes = 1, uint16_t more_flags = 0) {
    aggregator::AggFields f;
    f.flags = aggregator::flags::kTaskInfo | more_flags;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = key;
    f.expected = members;
    f.node_count = nodes;
    f.elem_count = 1;
    return Datagram(f, Int32Payload({value}));
  }
  // The control unit's TASK_INFO datagram (variant B): no payload.
  static Frame TaskInfo(uint32_t job, uint16_t node, uint16_t members, uint64_t key = kKey) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kTaskInfo;
    f.flags = aggregator::flags::kTaskInfo;
    f.node_id = node;
    f.job_id = job;
    f.job_key = key;
    f.expected = members;
    f.node_count = 1;
    return Datagram(f);
  }

  // A worker pass, the control thread's registrations, and a second pass
  // that takes the handed-back datagrams.
  void StepWithRegistration() {
    Step();
    Register();
    Step();
  }

  std::vector<Result> Results(const std::vector<Frame>& frames) {
    std::vector<Result> out;
    for (const Frame& f : frames) out.push_back(ParseResult(f));
    return out;
  }

  // The leaf of the refusal tests: job 31, two nodes of four ranks, ranks 4
  // to 7 here, its parent at kParentIp.
  static constexpr uint32_t kParentIp = 0x0a001401;
  static common::MacAddr ParentMac() { return common::MacAddr::FromU64(0x0200000014a1ULL); }
  // Rank `node`'s datagram about chunk 0, with its task info.
  static aggregator::AggFields LeafChunk0(uint16_t node) {
    aggregator::AggFields f;
    f.flags = aggregator::flags::kTaskInfo;
    f.node_id = node;
    f.job_id = 31;
    f.seq = 0;
    f.job_key = kKey;
    f.expected = 4;
    f.node_count = 2;
    return f;
  }
  // The four ranks complete chunk 0, and its partial goes up (`*partial`).
  void LeafPartialUp(Result* partial = nullptr) {
    BuildAggregation(", upstreams: [{address: 10.0.20.1}]");
    const auto send = [&](uint16_t node) {
      aggregator::AggFields f = LeafChunk0(node);
      f.elem_count = 1;
      Inject(0, Datagram(f, Int32Payload({node})));
    };
    send(4);
    StepWithRegistration();
    const aggregator::Job* job = jobs_->Find(31);
    ASSERT_NE(job, nullptr);
    job->SetHop(job->ParentHop(0), {ParentMac().ToU64(), 0, 0, kParentIp, aggregator::kAggUdpPort});
    for (uint16_t node = 5; node < 8; ++node) send(node);
    Step();
    auto out = Drain();
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].size(), 1u);
    const Result up = ParseResult(out[0][0]);
    ASSERT_EQ(up.fields.opcode, aggregator::Opcode::kPartial);
    if (partial != nullptr) *partial = up;
  }
  // The parent's word (`opcode`, `aux`) on chunk `seq`'s partial, from
  // `from_ip`, and a worker pass.
  void AboutPartial(aggregator::Opcode opcode, uint32_t aux, uint32_t from_ip,
                    uint32_t incarnation = 0, uint32_t seq = 0) {
    aggregator::AggFields f;
    f.opcode = opcode;
    f.job_id = 31;
    f.seq = seq;
    f.node_id = static_cast<uint16_t>(control::kInBandLeafBase + 1);
    f.aux = aux;
    f.incarnation = incarnation;
    Inject(0, DatagramFrom(f, {}, ParentMac(), from_ip, aggregator::kAggUdpPort));
    Step();
  }
  // A NACK `why` of chunk 0's partial from `from_ip`: nothing answers it.
  void NackPartial(aggregator::NackReason why, uint32_t from_ip = kParentIp) {
    AboutPartial(aggregator::Opcode::kNack, static_cast<uint32_t>(why), from_ip);
    EXPECT_TRUE(Drain().empty()) << "nothing answers a NACK";
  }
  // Partials sent since the last Drain.
  size_t PartialsSent() {
    size_t partials = 0;
    for (const auto& [port, frames] : Drain()) {
      for (const Result& r : Results(frames)) {
        partials += r.fields.opcode == aggregator::Opcode::kPartial;
      }
    }
    return partials;
  }
};

// The parameter node (docs/parameter-node.md) in process: a PsEngine at
// node 50's addresses, on port 1. What the switch sends there goes into it,
// and what it answers comes back from there.
class ParameterNodeTest : public AggregationTest {
 protected:
  static constexpr uint16_t kPs = 50;

  // Job `id` of `members` members, a root whose TAN (resolved) is node 50.
  // `partition` and `quota`: its slots and slot quota (none: hash placement,
  // no quota).
  void AddJobWithPs(uint32_t id, uint16_t members, bool verify = false,
                    std::optional<aggregator::Partition> partition = std::nullopt,
                    uint32_t quota = 0) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = members;
    spec.verify = verify;
    spec.partition = partition;
    if (partition) spec.placed = aggregator::JobSpec::Placed::kHint;
    spec.slot_quota = quota;
    spec.tan = aggregator::JobSpec::Tan::kRemote;
    spec.tan_peer.ip = MemberIp(kPs);
    spec.tan_peer.udp_port = aggregator::kAggUdpPort;
    ASSERT_TRUE(jobs_->Add(spec).ok());
    jobs_->Find(id)->SetHop(aggregator::Job::kTanHop, PsHop());
    Heard(id, members);
  }

  // Each member of job `id` sends an ACK: every member has sent in this
  // generation, so the job has its run label, without which nothing of it
  // goes to the TAN or up the tree (docs/protocol.md, "Runs").
  void Heard(uint32_t id, uint16_t members) {
    for (uint16_t m = 0; m < members; ++m) Inject(0, MemberAck(id, m, 0));
    Step();
    (void)Drain();
  }

  // Member `node` of job `id` (incarnation 0x1000 + node) ACKs up to
  // `watermark`.
  static Frame MemberAck(uint32_t id, uint16_t node, uint32_t watermark) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kAck;
    f.node_id = node;
    f.job_id = id;
    f.job_key = 0x5eed;
    f.seq = watermark != 0 ? watermark - 1 : 0;
    f.ack_watermark = watermark;
    f.incarnation = 0x1000u + node;
    return Datagram(f);
  }

  // The RESULT of one int32 `value` for chunk `seq` of leaf job `id`, from
  // its parent (node 50), under the job's run label: to inject on port 1.
  Frame ResultFromParent(uint32_t id, uint32_t seq, int32_t value) const {
    aggregator::AggFields r;
    r.opcode = aggregator::Opcode::kResult;
    r.job_id = id;
    r.seq = seq;
    r.elem_count = 1;
    r.incarnation = jobs_->Find(id)->label();
    return DatagramFrom(r, Int32Payload({value}), MemberMac(kPs), MemberIp(kPs),
                        aggregator::kAggUdpPort);
  }

  // A NOTICE `kind` for chunk `seq` of leaf job `id` from its parent (node
  // 50), under the job's run label: to inject on port 1.
  Frame NoticeFromParent(uint32_t id, uint32_t seq, aggregator::NoticeKind kind) const {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kNotice;
    f.job_id = id;
    f.seq = seq;
    f.node_id = kLeafNode;
    f.aux = static_cast<uint32_t>(kind);
    f.incarnation = jobs_->Find(id)->label();
    return DatagramFrom(f, {}, MemberMac(kPs), MemberIp(kPs), aggregator::kAggUdpPort);
  }
  Frame ForgottenFromParent(uint32_t id, uint32_t seq) const {
    return NoticeFromParent(id, seq, aggregator::NoticeKind::kForgotten);
  }
  Frame MissingFromParent(uint32_t id, uint32_t seq) const {
    return NoticeFromParent(id, seq, aggregator::NoticeKind::kMissing);
  }

  // On a table without spare slots, leaf jobs 7 (two members, a 10 ms slot
  // timer) and 8 (two) on colliding chunks: job 7's chunk times out with
  // member 0's data alone, its partial goes up listing member 1 (whose
  // bypass entry is written), and its forwarded slot gives way to job 8's
  // chunk, which goes up too. Returns job 7's chunk.
  uint32_t TimedOutChunkGaveWay() {
    BuildAggregation(", spare_slots: 0");
    AddLeafJob(7, 2, rte_get_tsc_hz() / 100);
    AddLeafJob(8, 2);
    const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
    Inject(0, Contribution(7, s7, 0, Int32Payload({1})));
    Step();
    rte_delay_ms(15);  // the slot times out without member 1
    Step();
    const std::vector<Frame> up = Drain()[1];
    EXPECT_EQ(up.size(), 1u);
    if (!up.empty()) EXPECT_EQ(MissingCount(up[0]), 1);
    for (uint16_t m = 0; m < 2; ++m) Inject(0, Contribution(8, s8, m, Int32Payload({100})));
    Step();
    EXPECT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u) << "job 8's";
    return s7;
  }

  // Leaf jobs 7 (three members) and 8 (two) on colliding chunks: job 7's
  // chunk, a 1 from each member, goes up, and its forwarded slot gives way
  // to job 8's, which goes up too. Returns job 7's chunk.
  uint32_t GiveWayAfterGoingUp() {
    AddLeafJob(7, 3);
    AddLeafJob(8, 2);
    const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
    for (uint16_t m = 0; m < 3; ++m) Inject(0, Contribution(7, s7, m, Int32Payload({1})));
    Step();
    EXPECT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u);
    for (uint16_t m = 0; m < 2; ++m) Inject(0, Contribution(8, s8, m, Int32Payload({100})));
    Step();
    EXPECT_EQ(WithOpcode(Drain()[1], aggregator::Opcode::kPartial).size(), 1u);
    return s7;
  }

  static constexpr uint16_t kLeafNode = 100;  // a leaf job's node id at its parent
  static constexpr uint16_t kChild = 101;     // a child switch of a root job

  // Node 50 on port 1, resolved: the TAN hop, or a leaf's parent.
  aggregator::MemberAddr PsHop() const {
    aggregator::MemberAddr hop;
    hop.mac48 = MemberMac(kPs).ToU64();
    hop.port_index = 1;
    hop.ip = MemberIp(kPs);
    hop.udp_port = aggregator::kAggUdpPort;
    return hop;
  }

  // Job `id`, a leaf of `members` members under node 50 (the parameter
  // node stands in for the tree above), with slot timers of
  // `timeout_cycles` (1 s by default: none fires in a test); its members
  // heard from (Heard) unless `heard` is false.
  void AddLeafJob(uint32_t id, uint16_t members, uint64_t timeout_cycles = rte_get_tsc_hz(),
                  bool heard = true) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = members;
    spec.nodes = 2;
    spec.upstreams = {aggregator::JobPeer{MemberIp(kPs), aggregator::kAggUdpPort, kLeafNode, 0}};
    spec.timeout_cycles = timeout_cycles;
    ASSERT_TRUE(jobs_->Add(spec).ok());
    const aggregator::Job* job = jobs_->Find(id);
    job->SetHop(job->ParentHop(0), PsHop());
    if (heard) Heard(id, members);
  }

  // Jobs 7 and 8, leaves of two members without slot timers, on a table
  // without spare slots. Returns a chunk of each, both placed on one slot.
  std::pair<uint32_t, uint32_t> LeafJobsWithoutTimersOnOneSlot() {
    BuildAggregation(", spare_slots: 0");
    AddLeafJob(7, 2, 0);
    AddLeafJob(8, 2, 0);
    return CollidingSeqs(*jobs_, config_, 7, 8);
  }

  // What the switch sent since the last Drain: to the members (port 0),
  // `count` results of job `job` carrying the int32 sum `sum`.
  void ExpectResults(uint32_t job, int32_t sum, size_t count) {
    auto out = Drain();
    ASSERT_EQ(out[0].size(), count);
    for (const Frame& f : out[0]) {
      const Result r = ParseResult(f);
      EXPECT_EQ(r.fields.job_id, job);
      EXPECT_EQ(r.payload, Int32Payload({sum}));
    }
  }

  // Jobs 7, 8 and 9 (each added by `add`) on a table with one spare slot:
  // job 7's chunk s7 holds the slot that job 8's chunk s8 and job 9's need,
  // and job 9's took the spare slot. Returns {s7, s8}.
  template <typename AddJob>
  std::pair<uint32_t, uint32_t> OnlySpareSlotLeased(AddJob add) {
    BuildAggregation(", spare_slots: 1");
    for (const uint32_t id : {7u, 8u, 9u}) add(id);
    const auto [s7, s8] = CollidingSeqs(*jobs_, config_, 7, 8);
    const uint32_t s9 = CollidingSeqs(*jobs_, config_, 7, 9).second;
    Inject(0, Contribution(7, s7, 0, Int32Payload({1})));  // holds the slot
    Step();
    Inject(0, Contribution(9, s9, 0, Int32Payload({1000})));  // collides: the spare slot
    StepThroughControl();
    EXPECT_EQ(dp_->escalation_stats().granted, 1u);
    return {s7, s8};
  }

  // The main server of the jobs AddFinalJob adds.
  static constexpr uint32_t kServer = 0x0a0100c8;

  // A root job of two members whose TAN is the parameter node, with a main
  // server (kServer:45000, resolved), and a slot timer of `timeout_cycles`
  // (0: none).
  void AddFinalJob(uint32_t id, uint64_t timeout_cycles = 0) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = 2;
    spec.timeout_cycles = timeout_cycles;
    spec.tan = aggregator::JobSpec::Tan::kRemote;
    spec.tan_peer = {MemberIp(kPs), aggregator::kAggUdpPort, 0, 0};
    spec.main_server_ip = kServer;
    spec.main_server_port = 45000;
    ASSERT_TRUE(jobs_->Add(spec).ok());
    const aggregator::Job* job = jobs_->Find(id);
    job->SetHop(aggregator::Job::kTanHop, PsHop());
    job->SetHop(job->main_server_hop(), {MemberMac(60).ToU64(), 1, 0, kServer, 45000});
    Heard(id, 2);
  }

  // A root job whose TAN is the parameter node, of two members: worker 0
  // and the child switch kChild, which covers node ids 4 and 5.
  // `names_ranks` false: the child covers only itself, as an in-band leaf
  // does at its root (its ranks are not named here).
  void AddRootOverChild(uint32_t id, bool names_ranks = true) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = 2;
    spec.member_nodes = {0, kChild};
    spec.covers = {{}, names_ranks ? std::vector<uint16_t>{4, 5} : std::vector<uint16_t>{kChild}};
    spec.tan = aggregator::JobSpec::Tan::kRemote;
    spec.tan_peer = {MemberIp(kPs), aggregator::kAggUdpPort, 0, 0};
    ASSERT_TRUE(jobs_->Add(spec).ok());
    jobs_->Find(id)->SetHop(aggregator::Job::kTanHop, PsHop());
  }

  // A datagram of the child switch kChild (AddRootOverChild) under run
  // `label`: of node `node`, for chunk `seq` of job `id`; a LATE flagged
  // BYPASS, as a switch sends late data on.
  static aggregator::AggFields FromChild(aggregator::Opcode opcode, uint32_t id, uint16_t node,
                                         uint32_t seq, uint32_t label) {
    aggregator::AggFields f;
    f.opcode = opcode;
    f.flags = opcode == aggregator::Opcode::kLate ? aggregator::flags::kBypass : 0;
    f.node_id = node;
    f.job_id = id;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.elem_count = 1;
    f.incarnation = label;
    return f;
  }

  // Each LATE among `frames`: its CONTENT list, or {0xffff} without one.
  static std::vector<std::vector<uint16_t>> LateContents(const std::vector<Frame>& frames) {
    std::vector<std::vector<uint16_t>> named;
    for (const Frame& frame : frames) {
      L2Info l2;
      UdpInfo udp;
      aggregator::AggPacket pkt;
      EXPECT_EQ(ParseL2(frame.data(), static_cast<uint32_t>(frame.size()), &l2), ParseStatus::kOk);
      EXPECT_EQ(ParseIpv4Udp(frame.data(), static_cast<uint32_t>(frame.size()), l2.l3_offset, &udp),
                UdpParse::kOk);
      EXPECT_EQ(aggregator::ParseAggregation(frame.data() + udp.payload_offset, udp.payload_len, &pkt),
                aggregator::WireError::kOk);
      if (pkt.opcode != aggregator::Opcode::kLate) continue;
      if ((pkt.header->flags.host() & aggregator::flags::kContent) == 0) {
        named.push_back({0xffff});
        continue;
      }
      std::vector<uint16_t> ids;
      for (uint8_t i = 0; i < pkt.header->missing_count; ++i) {
        ids.push_back(static_cast<uint16_t>(pkt.missing[2 * i] << 8 | pkt.missing[2 * i + 1]));
      }
      named.push_back(ids);
    }
    return named;
  }

  // `f` (one int32, 40) with `missing`, as the child switch kChild sends it.
  static Frame ChildFrame(const aggregator::AggFields& f, const std::vector<uint16_t>& missing) {
    std::vector<uint8_t> dgram(256);
    dgram.resize(aggregator::BuildAggregation(f, missing.data(),
                                              static_cast<uint32_t>(missing.size()),
                                              Int32Payload({40}).data(), 4, dgram.data(), 256));
    Frame frame(46 + dgram.size());
    const uint32_t hdr = WriteUdpHeaders(frame.data(), kSwitchMac.bytes.data(),
                                         MemberMac(kChild).bytes.data(), 0, MemberIp(kChild),
                                         kAggIp, MemberPort(kChild), aggregator::kAggUdpPort, 1,
                                         static_cast<uint32_t>(dgram.size()));
    frame.resize(hdr + dgram.size());
    std::memcpy(frame.data() + hdr, dgram.data(), dgram.size());
    return frame;
  }

  // `f`, marked FINAL.
  static Frame Final(Frame f) {
    HeaderOf(f)->flags = common::be16_t::FromHost(HeaderOf(f)->flags.host() | aggregator::flags::kFinal);
    return f;
  }

  // Hands what the switch sent the parameter node to it, injects its
  // answers back, and returns what the switch had sent, parsed.
  std::vector<Result> ThroughPs(const std::vector<Frame>& frames) {
    std::vector<Result> sent;
    std::vector<aggregator::TanOutput> answers;
    for (const Frame& f : frames) {
      const Result r = ParseResult(f);
      EXPECT_EQ(r.dst_ip, MemberIp(kPs));
      sent.push_back(r);
      L2Info l2;
      EXPECT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
      UdpInfo u;
      EXPECT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &u),
                UdpParse::kOk);
      aggregator::AggPacket pkt;
      EXPECT_EQ(aggregator::ParseAggregation(f.data() + u.payload_offset, u.payload_len, &pkt),
                aggregator::WireError::kOk);
      ps_.OnDatagram(pkt, {kAggIp, aggregator::kAggUdpPort}, ++now_ns_, &answers);
    }
    for (const aggregator::TanOutput& o : answers) {
      EXPECT_EQ(o.to.ip, kAggIp);
      Frame frame(46 + o.datagram.size());
      const uint32_t hdr = WriteUdpHeaders(
          frame.data(), kSwitchMac.bytes.data(), MemberMac(kPs).bytes.data(), 0, MemberIp(kPs),
          kAggIp, aggregator::kAggUdpPort, aggregator::kAggUdpPort, 1,
          static_cast<uint32_t>(o.datagram.size()));
      frame.resize(hdr + o.datagram.size());
      std::memcpy(frame.data() + hdr, o.datagram.data(), o.datagram.size());
      Inject(1, frame);
    }
    if (!answers.empty()) Step();
    return sent;
  }

  static Frame ForPs(uint32_t job, uint32_t seq, uint16_t node, uint16_t world,
                     const std::vector<int32_t>& values) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.flags = aggregator::flags::kAggregateAtPs | aggregator::flags::kRetransmission;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.expected = world;
    f.elem_count = static_cast<uint16_t>(values.size());
    return Datagram(f, Int32Payload(values));
  }

  // The switch of BuildAggregation(extra) on two worker lcores: worker 0
  // polls a0, a1 and b, worker 1 the trunk. Each owns every other slot
  // (global slot % 2) and keeps its own bypass entries. Both TX queues of a
  // port share its ring: the workers are polled in turn on this thread
  // (StepWorkers), never at once.
  void BuildAggregationOnTwoWorkers(const std::string& extra) {
    dp_.reset();
    FreeRings();
    auto jobs = aggregator::JobTable::Create(64, 256);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    std::string yaml =
        DefaultYaml("aggregation: {address: 10.0.10.253, slots: 1024" + extra + "}\n");
    const auto replace = [&](const std::string& from, const std::string& to) {
      const size_t at = yaml.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      yaml.replace(at, from.size(), to);
    };
    replace("lcores: \"0,1\"", "lcores: \"0,1,2\"");
    replace("workers: [{lcore: 1, rx: [a0, a1, b, t]}]",
            "workers: [{lcore: 1, rx: [a0, a1, b]}, {lcore: 2, rx: [t]}]");
    config::ConfigLoad load = config::LoadConfigText(yaml, "test.yaml");
    ASSERT_TRUE(load.ok()) << load.FormatErrors();
    for (int p = 0; p < kPorts; ++p) {
      rte_ring* rx = rte_ring_create((names_[p] + "_rx").c_str(), 256, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      rte_ring* tx = rte_ring_create((names_[p] + "_tx").c_str(), 1024, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      ASSERT_NE(rx, nullptr);
      ASSERT_NE(tx, nullptr);
      rx_.push_back(rx);
      tx_.push_back(tx);
      rte_ring* txs[2] = {tx, tx};
      ASSERT_GE(rte_eth_from_rings(names_[p].c_str(), &rx, 1, txs, 2, SOCKET_ID_ANY), 0);
    }
    config_ = load.config;
    auto dp = Dataplane::Create(load.config, jobs_.get());
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dp_ = std::move(dp).value();
    ASSERT_EQ(dp_->worker_count(), 2u);
    in_band_ = std::make_unique<InBandControl>(*jobs_, config_);
  }

  // Step on a switch of two workers: both polled in turn, so that what one
  // hands the other is taken in the same step.
  void StepWorkers() {
    for (uint32_t i = 0; i < Worker::kControlEvery; ++i) {
      dp_->PollWorkerOnce(0);
      dp_->PollWorkerOnce(1);
    }
    dp_->ProcessLearnRequests();
  }

  aggregator::PsEngine ps_{aggregator::PsOptions{}};
  uint64_t now_ns_ = 1;
};

}  // namespace aggswitch::dataplane::fixtures
