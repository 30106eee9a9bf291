// Test fixtures for the in-process dataplane tests on net_ring ports: frames
// are injected into a port's RX ring, one worker pass runs on the test thread,
// and the test reads exactly which frames left which port's TX ring.
//
//   DataplaneTest       four ring ports (two access VLAN 10, access VLAN 20, a trunk)
//   AggregationTest     the same switch with an aggregation: section and a job table
//
// Thread safety: test code; everything runs on the test's main thread.
#pragma once

#include <gtest/gtest.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/reduce.h"
#include "aggregator/wire.h"
#include "config/loader.h"
#include "control/in_band_admission.h"
#include "control/job_control.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"
#include "dataplane/test_frames.h"

namespace aggswitch::dataplane::fixtures {

using testframes::Frame;
using aggregator::DType;
using aggregator::ReduceOp;

// Starts DPDK once per test binary, on virtual devices only, with the main
// lcore alone or the `lcores` given (EAL's --lcores syntax):
//   const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment("my_test"));
class EalEnvironment : public ::testing::Environment {
 public:
  explicit EalEnvironment(std::string name, std::string lcores = "0")
      : name_(std::move(name)), lcores_(std::move(lcores)) {}
  void SetUp() override {
    const std::string prefix = name_ + "_" + std::to_string(getpid());
    auto eal = EalSession::Init(name_.c_str(), {"--no-huge", "-m", "256", "--no-pci", "--no-shconf",
                                                   "--no-telemetry", "--lcores", lcores_,
                                                   "--file-prefix", prefix, "--log-level", "lib.*:error"});
    ASSERT_TRUE(eal.ok()) << eal.status().ToString();
    eal_ = std::move(eal).value();
  }
  void TearDown() override { eal_.reset(); }

 private:
  std::string name_;
  std::string lcores_;
  std::unique_ptr<EalSession> eal_;
};

inline common::MacAddr Mac(const char* text) { return *common::MacAddr::Parse(text); }

inline const common::MacAddr kSwitchMac = Mac("02:a9:9c:00:00:01");
inline const common::MacAddr kH0 = Mac("02:00:00:00:00:a0");
inline const common::MacAddr kH1 = Mac("02:00:00:00:00:a1");
inline const common::MacAddr kH2 = Mac("02:00:00:00:00:a2");
inline const common::MacAddr kH3 = Mac("02:00:00:00:00:a3");
inline const common::MacAddr kBroadcast = Mac("ff:ff:ff:ff:ff:ff");

// Four ring ports:
//   a0, a1: access VLAN 10     b: access VLAN 20     t: trunk [10, 20], native 30
class DataplaneTest : public ::testing::Test {
 protected:
  static constexpr int kPorts = 4;

  void SetUp() override { Build(DefaultYaml()); }

  std::string DefaultYaml(const std::string& extra = "", const std::string& mac_table = "") {
    static int instance = 0;
    ++instance;
    names_.clear();
    // rte_eth_from_rings("x") creates the ethdev "net_ring_x".
    for (int p = 0; p < kPorts; ++p) names_.push_back("t" + std::to_string(instance) + "_" + std::to_string(p));
    return "eal: {lcores: \"0,1\"}\n"
           "switch:\n"
           "  mac: 02:a9:9c:00:00:01\n"
           "  addresses: [10.0.10.254/24, {address: 10.0.20.254/24, vlan: 20}]\n"
           "ports:\n"
           "  - {name: a0, devargs: net_ring_" + names_[0] + ", access: 10}\n"
           "  - {name: a1, devargs: net_ring_" + names_[1] + ", access: 10}\n"
           "  - {name: b, devargs: net_ring_" + names_[2] + ", access: 20}\n"
           "  - {name: t, devargs: net_ring_" + names_[3] + ", trunk: [10, 20], native: 30}\n"
           "workers: [{lcore: 1, rx: [a0, a1, b, t]}]\n"
           "mempool: {mbufs: 2047, cache: 0}\n"
           "mac_table: {size: 1024" + mac_table + "}\n" + extra;
  }

  void Build(const std::string& yaml, unsigned tx_ring_size = 256,
             aggregator::JobTable* jobs = nullptr) {
    dp_.reset();
    FreeRings();
    config::ConfigLoad load = config::LoadConfigText(yaml, "test.yaml");
    ASSERT_TRUE(load.ok()) << load.FormatErrors();
    for (int p = 0; p < kPorts; ++p) {
      rte_ring* rx = rte_ring_create((names_[p] + "_rx").c_str(), 256, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
      rte_ring* tx = rte_ring_create((names_[p] + "_tx").c_str(), tx_ring_size, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      ASSERT_NE(rx, nullptr);
      ASSERT_NE(tx, nullptr);
      rx_.push_back(rx);
      tx_.push_back(tx);
      ASSERT_GE(rte_eth_from_rings(names_[p].c_str(), &rx, 1, &tx, 1, SOCKET_ID_ANY), 0);
    }
    if (pool_ == nullptr) {
      // One pool for the injected frames, shared by every test of the process.
      static rte_mempool* shared = rte_pktmbuf_pool_create("dp_test_pool", 1023, 0, 0,
                                                           RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
      pool_ = shared;
      ASSERT_NE(pool_, nullptr);
    }
    config_ = load.config;
    auto dp = Dataplane::Create(load.config, jobs);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    dp_ = std::move(dp).value();
  }

  void TearDown() override {
    dp_.reset();
    FreeRings();
  }

  void FreeRings() {
    // Ports the dataplane did not take over (a failed Create) are closed here.
    for (const std::string& name : names_) {
      uint16_t port_id;
      if (rte_eth_dev_get_port_by_name(("net_ring_" + name).c_str(), &port_id) == 0) {
        rte_eth_dev_close(port_id);
      }
    }
    for (rte_ring* r : rx_) DrainRing(r), rte_ring_free(r);
    for (rte_ring* r : tx_) DrainRing(r), rte_ring_free(r);
    rx_.clear();
    tx_.clear();
  }

  static void DrainRing(rte_ring* r) {
    void* obj;
    while (rte_ring_dequeue(r, &obj) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(obj));
  }

  void Inject(int port, const Frame& frame) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    ASSERT_NE(m, nullptr);
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    ASSERT_NE(data, nullptr);
    std::memcpy(data, frame.data(), frame.size());
    ASSERT_EQ(rte_ring_enqueue(rx_[port], m), 0);
  }

  // Runs worker passes until the worker has looked at its control rings
  // once (Worker::kControlEvery), and lets the control thread learn.
  void Step() {
    for (uint32_t i = 0; i < Worker::kControlEvery; ++i) dp_->PollWorkerOnce(0);
    dp_->ProcessLearnRequests();
  }

  // A poll, the control thread's answers to what the worker escalated (as
  // of `now`), and a poll that takes them.
  void StepThroughControl(
      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
    Step();
    dp_->ProcessEscalations(now);
    Step();
  }

  // Everything that left each port since the last call.
  std::map<int, std::vector<Frame>> Drain() {
    std::map<int, std::vector<Frame>> out;
    for (int p = 0; p < static_cast<int>(tx_.size()); ++p) {
      void* obj;
      while (rte_ring_dequeue(tx_[p], &obj) == 0) {
        auto* m = static_cast<rte_mbuf*>(obj);
        Frame f(m->pkt_len);
        // Results are chained mbufs: a header segment and the shared payload.
        const auto* d = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, f.data()));
        if (d != f.data()) std::memcpy(f.data(), d, m->pkt_len);
        out[p].push_back(std::move(f));
        rte_pktmbuf_free(m);
      }
    }
    return out;
  }

  uint64_t DropCount(int port, DropReason reason) {
    return dp_->GetPortTotals(port).drops[static_cast<size_t>(reason)];
  }

  static Frame Untagged(const common::MacAddr& src, const common::MacAddr& dst) {
    return testframes::EthernetFrame(src, dst, 0x0800, 46);
  }
  static Frame Tagged(const common::MacAddr& src, const common::MacAddr& dst, int vlan, int pcp = 0) {
    return testframes::EthernetFrame(src, dst, 0x0800, 46, vlan, pcp);
  }

  config::Config config_;
  std::vector<std::string> names_;
  std::vector<rte_ring*> rx_, tx_;
  rte_mempool* pool_ = nullptr;
  std::unique_ptr<Dataplane> dp_;
};

inline constexpr uint32_t kAggIp = 0x0a000afd;  // 10.0.10.253, the aggregation address

// The control side of in-band registration, as the control loop runs it:
// the in-band policy of `config` and JobControl's admission.
struct InBandControl {
  InBandControl(aggregator::JobTable& jobs, const config::Config& config)
      : admission(jobs, control::InBandAdmission::OptionsFrom(config.aggregation)),
        job_control(jobs, Options(config)) {
    job_control.SetInBandAdmission(&admission);
  }
  // The control thread's pass over the registrations the workers passed up.
  size_t Register(Dataplane& dp) {
    return dp.ProcessRegistrations([this](const RegistrationRequest& request) {
      return job_control.RegisterInBand(request, std::chrono::steady_clock::now());
    });
  }
  static control::JobControl::Options Options(const config::Config& config) {
    control::JobControl::Options options;
    options.config = config;
    options.tsc_hz = rte_get_tsc_hz();
    return options;
  }

  control::InBandAdmission admission;
  control::JobControl job_control;
};

// The aggregation header of a frame the fixture built or the switch sent.
inline aggregator::AggHeader* HeaderOf(Frame& f) {
  L2Info l2;
  EXPECT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
  UdpInfo u;
  EXPECT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &u), UdpParse::kOk);
  return reinterpret_cast<aggregator::AggHeader*>(f.data() + u.payload_offset);
}

// `f` flagged ORDERED when `ordered` and as a retransmission when `resend`.
inline Frame Flagged(Frame f, bool ordered, bool resend) {
  HeaderOf(f)->flags = common::be16_t::FromHost(static_cast<uint16_t>(
      (ordered ? aggregator::flags::kOrdered : 0) | (resend ? aggregator::flags::kRetransmission : 0)));
  return f;
}

// Chunk seqs of jobs `a` and `b` whose placed slots are the same: b's chunk
// finds a's holding it (a collision). Provisioned jobs, this switch's regions.
inline std::pair<uint32_t, uint32_t> CollidingSeqs(const aggregator::JobTable& jobs,
                                            const config::Config& config, uint32_t a, uint32_t b) {
  const aggregator::SlotRegions regions = aggregator::SlotRegions::Make(
      config.aggregation.slots, config.aggregation.InBandSlots(), config.aggregation.SpareSlots());
  const uint32_t slot = regions.Of(false, jobs.Find(a)->placement(), 0);
  for (uint32_t seq = 0;; ++seq) {
    if (regions.Of(false, jobs.Find(b)->placement(), seq) == slot) return {0, seq};
  }
}

class AggregationTest : public DataplaneTest {
 protected:
  void SetUp() override { BuildAggregation(); }

  // (Re)builds the switch with a fresh job table of `max_jobs` and the
  // aggregation section {address: 10.0.10.253, slots: 1024, <extra>}: no
  // restart grace (restart_grace_ms: 0) unless `extra` gives one, so that
  // a test's switch fixes its run labels early from its start.
  void BuildAggregation(const std::string& extra = "", uint32_t max_jobs = 64) {
    dp_.reset();
    auto jobs = aggregator::JobTable::Create(max_jobs, 256);
    ASSERT_TRUE(jobs.ok());
    jobs_ = std::move(jobs).value();
    const std::string grace =
        extra.find("restart_grace_ms") == std::string::npos ? ", restart_grace_ms: 0" : "";
    Build(DefaultYaml("aggregation: {address: 10.0.10.253, slots: 1024" + grace + extra + "}\n"),
          1024, jobs_.get());
    in_band_ = std::make_unique<InBandControl>(*jobs_, config_);
  }
  void TearDown() override {
    DataplaneTest::TearDown();
    in_band_.reset();
    jobs_.reset();
  }

  // The control thread's pass over the registrations the workers passed up.
  size_t Register() { return in_band_->Register(*dp_); }

  void AddJob(uint32_t id, uint16_t members, bool ordered = false, uint64_t key = 0x5eed,
              aggregator::JobSpec::Tan tan = aggregator::JobSpec::Tan::kNone) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = key;
    spec.members = members;
    spec.ordered = ordered;
    spec.tan = tan;
    ASSERT_TRUE(jobs_->Add(spec).ok());
  }

  // Members 0 and 1 of `job` contribute `v` to chunk `seq`, their ack
  // watermark `ack`; then a step through the control thread.
  void ContributeAll(uint32_t job, uint32_t seq, uint32_t ack, int32_t v) {
    for (const uint16_t node : {0, 1}) {
      Inject(0, Contribution(job, seq, node, Int32Payload({v}), DType::kInt32, ReduceOp::kSum,
                             0x5eed, -1, ack));
    }
    StepThroughControl();
  }

  // Jobs 7 and 8, two members each (added by the caller), at a root without
  // spare slots, holding each other's oldest chunk back: job 7 has the
  // result of s7 + 1 (2) and waits on s7 (its data refused NACK slot_busy),
  // whose slot job 8's result of s8 + region holds; job 8 waits on s8 + 1,
  // whose slot is s7 + 1's. Returns {s7, s8}; what the members got is
  // drained.
  std::pair<uint32_t, uint32_t> HoldEachOthersOldest() {
    const std::pair<uint32_t, uint32_t> seqs = CollidingSeqs(*jobs_, config_, 7, 8);
    const uint32_t region = dp_->slot_regions().provisioned.size;
    ContributeAll(7, seqs.first + 1, seqs.first, 1);
    ContributeAll(8, seqs.second + region, seqs.second + 1, 10);
    ContributeAll(7, seqs.first, seqs.first, 100);
    Drain();
    return seqs;
  }

  // A job whose TAN is remote, at the addresses the fixture gives node
  // `tan_node`, its hop resolved on port 1.
  void AddJobWithRemoteTan(uint32_t id, uint16_t members, uint16_t tan_node,
                           bool parameter_server = false) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 0x5eed;
    spec.members = members;
    spec.tan = aggregator::JobSpec::Tan::kRemote;
    spec.tan_peer.ip = MemberIp(tan_node);
    spec.tan_peer.udp_port = aggregator::kAggUdpPort;
    spec.parameter_server = parameter_server;
    ASSERT_TRUE(jobs_->Add(spec).ok());
    aggregator::MemberAddr hop;
    hop.mac48 = MemberMac(tan_node).ToU64();
    hop.port_index = 1;
    hop.ip = MemberIp(tan_node);
    hop.udp_port = aggregator::kAggUdpPort;
    jobs_->Find(id)->SetHop(aggregator::Job::kTanHop, hop);
  }

  static common::MacAddr MemberMac(uint16_t node) {
    return common::MacAddr::FromU64(0x020000100000ULL + node);
  }
  // 10.1.0.10 + node: never the switch's own address, however many members.
  static uint32_t MemberIp(uint16_t node) { return 0x0a010000u + 10 + node; }
  static uint16_t MemberPort(uint16_t node) { return static_cast<uint16_t>(40000 + node); }

  // A contribution from `node`, as its kernel would send it to the aggregation address.
  static Frame Contribution(uint32_t job, uint32_t seq, uint16_t node, const std::vector<uint8_t>& payload,
                            DType dtype = DType::kInt32, ReduceOp op = ReduceOp::kSum,
                            uint64_t key = 0x5eed, int vlan = -1, uint32_t ack = 0) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = key;
    f.ack_watermark = ack;
    f.dtype = dtype;
    f.op = op;
    f.elem_count = static_cast<uint16_t>(payload.size() / aggregator::ElementSize(dtype));
    return Datagram(f, payload, vlan);
  }

  // The main server's ACK of the final result of chunk `seq` of `job`.
  static aggregator::AggFields FinalAck(uint32_t job, uint32_t seq) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kAck;
    f.flags = aggregator::flags::kFinal;
    f.job_id = job;
    f.seq = seq;
    f.job_key = 0x5eed;
    return f;
  }

  // Member `node`'s QUERY about chunk `seq` of `job` (header only).
  static aggregator::AggFields QueryFields(uint32_t job, uint32_t seq, uint16_t node,
                                           uint64_t key = 0x5eed) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kQuery;
    f.node_id = node;
    f.job_id = job;
    f.seq = seq;
    f.job_key = key;
    return f;
  }

  // Any aggregation datagram from member f.node_id, with `payload` after the header.
  static Frame Datagram(const aggregator::AggFields& f, const std::vector<uint8_t>& payload = {},
                        int vlan = -1) {
    return DatagramFrom(f, payload, MemberMac(f.node_id), MemberIp(f.node_id),
                        MemberPort(f.node_id), vlan);
  }
  // The same from any source address: another host claiming a member.
  static Frame DatagramFrom(const aggregator::AggFields& f, const std::vector<uint8_t>& payload,
                            const common::MacAddr& mac, uint32_t ip, uint16_t port, int vlan = -1) {
    std::vector<uint8_t> agg(2048);
    const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, payload.data(),
                                                   static_cast<uint32_t>(payload.size()),
                                                   agg.data(), static_cast<uint32_t>(agg.size()));
    EXPECT_NE(n, 0u) << "payload does not match elem_count";
    Frame frame(46 + n);
    const uint32_t hdr = WriteUdpHeaders(frame.data(), kSwitchMac.bytes.data(), mac.bytes.data(),
                                         vlan < 0 ? 0 : static_cast<uint16_t>(vlan), ip, kAggIp,
                                         port, aggregator::kAggUdpPort, 1, n);
    frame.resize(hdr + n);
    std::memcpy(frame.data() + hdr, agg.data(), n);
    return frame;
  }

  static std::vector<uint8_t> Int32Payload(const std::vector<int32_t>& v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }
  static std::vector<uint8_t> Float32Payload(const std::vector<float>& v) {
    std::vector<uint8_t> out(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  }

  struct Result {
    common::MacAddr dst_mac;
    uint32_t dst_ip;
    uint16_t dst_port;
    bool tagged;
    uint16_t vid;
    aggregator::AggFields fields;
    std::vector<uint8_t> payload;
  };

  // The frames among `frames` that carry `opcode`, parsed (ParseResult).
  static std::vector<Result> WithOpcode(const std::vector<Frame>& frames,
                                        aggregator::Opcode opcode) {
    std::vector<Result> out;
    for (const Frame& f : frames) {
      Result r = ParseResult(f);
      if (r.fields.opcode == opcode) out.push_back(std::move(r));
    }
    return out;
  }

  // Chunk `seq` of job `job` (three members, a float32 `op` of 0.1) as a
  // switch that restarted after its result reached some members sees it:
  // member 2 lost the result with the old process and resends its data;
  // member 0 had it and is past the chunk; member 1 is behind. What the
  // switch sent meanwhile is drained.
  void MembersAroundALostResult(uint32_t job, uint32_t seq, aggregator::ReduceOp op) {
    std::vector<uint8_t> f(4);
    const float x = 0.1f;
    std::memcpy(f.data(), &x, 4);
    const aggregator::DType dtype = aggregator::DType::kFloat32;
    Frame resent = Contribution(job, seq, 2, f, dtype, op, 0x5eed, -1, /*ack=*/seq);
    HeaderOf(resent)->flags = common::be16_t::FromHost(aggregator::flags::kRetransmission);
    Inject(0, resent);
    Inject(0, Contribution(job, seq + 4, 0, f, dtype, op, 0x5eed, -1, /*ack=*/seq + 4));
    Inject(0, Contribution(job, seq - 1, 1, f, dtype, op, 0x5eed, -1, /*ack=*/seq - 1));
    Step();
    (void)Drain();
  }

  // Member `node` of job `job` asks after chunk `seq` (a QUERY carrying
  // ack watermark `watermark`); returns what the switch sent.
  std::map<int, std::vector<Frame>> AskAfter(uint32_t job, uint32_t seq, uint16_t node,
                                             uint32_t watermark) {
    aggregator::AggFields q = QueryFields(job, seq, node);
    q.ack_watermark = watermark;
    Inject(0, Datagram(q));
    Step();
    return Drain();
  }

  // `frames` (what the switch sent on a port) are one NACK result_lost
  // about chunk `seq`, to member `node`.
  static void ExpectResultLost(const std::vector<Frame>& frames, uint32_t seq, uint16_t node) {
    ASSERT_EQ(frames.size(), 1u) << "one answer, to the member that asked";
    const Result nack = ParseResult(frames[0]);
    EXPECT_EQ(nack.fields.opcode, aggregator::Opcode::kNack);
    EXPECT_EQ(nack.fields.aux, static_cast<uint32_t>(aggregator::NackReason::kResultLost));
    EXPECT_EQ(nack.fields.seq, seq);
    EXPECT_EQ(nack.dst_ip, MemberIp(node));
  }

  // The NOTICEs among `frames`, all about chunk `seq`: the kind each
  // member was told (NoticeKind), by its IP.
  static std::map<uint32_t, uint32_t> NoticeKinds(const std::vector<Frame>& frames, uint32_t seq) {
    std::map<uint32_t, uint32_t> told;
    for (const Result& r : WithOpcode(frames, aggregator::Opcode::kNotice)) {
      EXPECT_EQ(r.fields.seq, seq);
      told[r.dst_ip] = r.fields.aux;
    }
    return told;
  }

  // Parses a frame the switch sent as a result datagram.
  static Result ParseResult(const Frame& f) {
    Result r{};
    L2Info l2;
    EXPECT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
    std::memcpy(r.dst_mac.bytes.data(), f.data(), 6);
    r.tagged = l2.has_tag;
    r.vid = l2.vid;
    UdpInfo u;
    EXPECT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &u), UdpParse::kOk);
    r.dst_ip = u.dst_ip;
    r.dst_port = u.dst_port;
    EXPECT_EQ(u.src_ip, kAggIp);
    EXPECT_EQ(u.src_port, aggregator::kAggUdpPort);
    aggregator::AggPacket pkt;
    EXPECT_EQ(aggregator::ParseAggregation(f.data() + u.payload_offset, u.payload_len, &pkt),
              aggregator::WireError::kOk);
    if (pkt.header == nullptr) return r;
    r.fields = aggregator::ReadAggFields(*pkt.header);
    r.payload.assign(pkt.payload, pkt.payload + pkt.payload_len);
    return r;
  }

  const AggregationCounters& Agg() { return dp_->worker_stats(0).lcore.agg; }
  // Aggregation datagrams refused as malformed for `why`, and for any reason.
  uint64_t Malformed(MalformedReason why) {
    return dp_->worker_stats(0).lcore.malformed[static_cast<size_t>(why)].Get();
  }
  uint64_t Malformed() {
    uint64_t sum = 0;
    for (const Counter& c : dp_->worker_stats(0).lcore.malformed) sum += c.Get();
    return sum;
  }

  // Job `id`'s per-job counters summed over the lcores, indexed by JobCounter.
  std::array<uint64_t, kNumJobCounters> JobCounts(uint32_t id) {
    uint64_t out[kNumJobCounters] = {};
    const aggregator::Job* job = jobs_->Find(id);
    EXPECT_NE(job, nullptr) << "job " << id;
    if (job != nullptr) dp_->ReadJobCounters(job->index(), out);
    return std::to_array(out);
  }

  std::unique_ptr<aggregator::JobTable> jobs_;
  std::unique_ptr<InBandControl> in_band_;
};

}  // namespace aggswitch::dataplane::fixtures
