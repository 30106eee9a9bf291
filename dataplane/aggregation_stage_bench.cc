// agg_path_bench: what the switch's own aggregation path costs per
// contribution, in-process on one lcore, without NICs, memif or a second CPU.
//
// A Dataplane on net_ring ports, polled on this thread (Dataplane::PollWorkerOnce)
// so that the real worker runs: RX burst, classify, the aggregation stage's
// checks, slot, reduce, the tree stage, the answers' result replication to
// every member, TX. Each round enqueues prebuilt contribution mbufs (every
// member of `chunks` chunks) on a port's RX ring, then times, with the TSC,
// the polls that take them all in, each followed by freeing what the poll
// sent (as the TX completion of a PMD that frees at tx_burst would). Building
// the mbufs is outside the timed part.
//
// Two baselines on the same frames, in the same run:
//   l2_cycles:   the same worker switching them at L2 (addressed to a host
//                behind another port instead of the aggregation address);
//   read_cycles: a plain read of each payload (summing its elements), the
//                least any reduction must do.
//
// Output, one line per case:
//   agg_path members=8 elems=256 dtype=int32 cycles_per_contribution=NNN l2_cycles=NNN read_cycles=NNN overhead=X.XX
// Each figure is the median over the measured rounds of cycles / contributions;
// overhead = cycles_per_contribution / (l2_cycles + read_cycles): what a
// contribution costs against forwarding it and reading its payload once, the
// least an aggregating switch does with it.
//
//   build/dataplane/agg_path_bench [--rounds 40] [--members 4,8,16,64] [--elems 64,256,356]
//                                  (up to 831: a 3400-byte packet)
//                                  [--dtypes int32,float32] [--huge] [--profile]
//
// --profile runs the aggregation rounds only, without the baselines, so that
// what a profiler samples under the timed polls is the aggregation path's
// (docs/benchmarks.md, "Where the cycles go"); it prints
// `agg_path_profile ... cycles_per_contribution=N`.
// --huge takes EAL's memory from hugepages (echo 256 > /proc/sys/vm/nr_hugepages)
// instead of --no-huge 4 KiB pages, as a production switch would.
//
// Thread safety: a program; everything runs on its main thread (lcore 0).
#include <rte_cycles.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/wire.h"
#include "config/loader.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"
#include "dataplane/packet.h"
#include "dataplane/worker.h"

namespace aggswitch::dataplane {
namespace {

using aggregator::DType;

constexpr uint32_t kJob = 7;
constexpr uint64_t kKey = 0x5eed;
constexpr uint32_t kAggIp = 0x0a000afd;     // 10.0.10.253
constexpr uint32_t kHostIp = 0x0a000a63;    // 10.0.10.99, behind port 1
constexpr uint8_t kSwitchMac[6] = {0x02, 0xa9, 0x9c, 0x00, 0x00, 0x01};
constexpr uint8_t kHostMac[6] = {0x02, 0x00, 0x00, 0x00, 0x00, 0xb1};
// Contributions per round: enough bursts that one poll's fixed cost is amortised,
// few enough that a round's frames and results fit the pool and the rings.
constexpr uint32_t kRoundContributions = 512;
constexpr unsigned kRingSize = 4096;
// 1500-byte MTU: IPv4 20 + UDP 8 + aggregation header 48, 4-byte elements.
constexpr uint32_t kMtuElems = (1500 - 20 - 8 - sizeof(aggregator::AggHeader)) / 4;
// The largest chunk: a 3400-byte packet, the largest frame of the AF_XDP
// transport here (the switch's ports take it).
constexpr uint32_t kLargeMtu = 3400;
constexpr uint32_t kMaxElems = (kLargeMtu - 20 - 8 - sizeof(aggregator::AggHeader)) / 4;

struct Case {
  uint16_t members;
  uint32_t elems;
  DType dtype;
};

struct Options {
  int rounds = 40;
  std::vector<uint16_t> members = {4, 8, 16, 64};
  std::vector<uint32_t> elems = {64, 256, kMtuElems};
  std::vector<DType> dtypes = {DType::kInt32, DType::kFloat32};
  bool huge = false;  // EAL memory from hugepages instead of --no-huge
  bool profile = false;  // the aggregation rounds only, for a profiler
};

void MemberMac(uint16_t node, uint8_t out[6]) {
  const uint8_t mac[6] = {0x02, 0x00, 0x00, 0x01, static_cast<uint8_t>(node >> 8),
                          static_cast<uint8_t>(node)};
  std::memcpy(out, mac, 6);
}

// One contribution as a member's kernel would send it, or with `l2` the same
// bytes to the host behind port 1 and another UDP port (the aggregation
// port alone would make it aggregation traffic: docs/protocol.md).
std::vector<uint8_t> Frame(const Case& c, uint32_t seq, uint16_t node, bool l2) {
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kContribution;
  f.node_id = node;
  f.job_id = kJob;
  f.seq = seq;
  f.job_key = kKey;
  f.ack_watermark = seq;  // every earlier chunk's result arrived: its slot may be reused
  f.dtype = c.dtype;
  f.elem_count = static_cast<uint16_t>(c.elems);
  std::vector<uint8_t> payload(c.elems * 4);
  for (uint32_t e = 0; e < c.elems; ++e) {
    if (c.dtype == DType::kInt32) {
      const int32_t v = static_cast<int32_t>(node + e);
      std::memcpy(&payload[e * 4], &v, 4);
    } else {
      const float v = static_cast<float>(node) * 0.5f + static_cast<float>(e);
      std::memcpy(&payload[e * 4], &v, 4);
    }
  }
  std::vector<uint8_t> agg(kLargeMtu);
  const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, payload.data(),
                                                 static_cast<uint32_t>(payload.size()), agg.data(),
                                                 static_cast<uint32_t>(agg.size()));
  std::vector<uint8_t> frame(64 + n);
  uint8_t src[6];
  MemberMac(node, src);
  const uint32_t hdr =
      WriteUdpHeaders(frame.data(), l2 ? kHostMac : kSwitchMac, src, 0, 0x0a000a00u + 10 + node,
                      l2 ? kHostIp : kAggIp, static_cast<uint16_t>(40000 + node),
                      l2 ? aggregator::kAggUdpPort + 1 : aggregator::kAggUdpPort, 1, n);
  frame.resize(hdr + n);
  std::memcpy(frame.data() + hdr, agg.data(), n);
  return frame;
}

uint64_t Median(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

class Bench {
 public:
  // A switch of two access ports on VLAN 10 (members on port 0, the L2
  // baseline's host on port 1), one worker, aggregation on.
  bool Build() {
    static int instance = 0;
    ++instance;
    const std::string yaml =
        "eal: {lcores: \"0,1\"}\n"
        "switch: {mac: 02:a9:9c:00:00:01, addresses: [10.0.10.254/24]}\n"
        "ports:\n"
        "  - {name: members, devargs: net_ring_apb" + std::to_string(instance) + "_0, access: 10, mtu: " +
        std::to_string(kLargeMtu) + "}\n"
        "  - {name: host, devargs: net_ring_apb" + std::to_string(instance) + "_1, access: 10, mtu: " +
        std::to_string(kLargeMtu) + "}\n"
        "workers: [{lcore: 1, rx: [members, host]}]\n"
        "mempool: {mbufs: 8191, cache: 256}\n"
        "aggregation: {address: 10.0.10.253, slots: 4096, max_fan_in: 64}\n";
    config::ConfigLoad load = config::LoadConfigText(yaml, "agg_path_bench.yaml");
    if (!load.ok()) return Fail(load.FormatErrors());
    for (int p = 0; p < 2; ++p) {
      const std::string name = "apb" + std::to_string(instance) + "_" + std::to_string(p);
      rx_[p] = rte_ring_create((name + "_rx").c_str(), kRingSize, SOCKET_ID_ANY,
                               RING_F_SP_ENQ | RING_F_SC_DEQ);
      tx_[p] = rte_ring_create((name + "_tx").c_str(), kRingSize, SOCKET_ID_ANY,
                               RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (rx_[p] == nullptr || tx_[p] == nullptr) return Fail("ring: " + name);
      if (rte_eth_from_rings(name.c_str(), &rx_[p], 1, &tx_[p], 1, SOCKET_ID_ANY) < 0) {
        return Fail("rte_eth_from_rings: " + name);
      }
    }
    auto jobs = aggregator::JobTable::Create(16, 64);
    if (!jobs.ok()) return Fail(jobs.status().ToString());
    jobs_ = std::move(jobs).value();
    auto dp = Dataplane::Create(load.config, jobs_.get());
    if (!dp.ok()) return Fail(dp.status().ToString());
    dp_ = std::move(dp).value();
    frames_ = rte_pktmbuf_pool_create("apb_frames", 2047, 256, 0,
                                      RTE_PKTMBUF_HEADROOM + kLargeMtu + 18, SOCKET_ID_ANY);
    if (frames_ == nullptr) return Fail("frame pool");
    // The L2 baseline's destination, learned on port 1.
    Case any{1, 1, DType::kInt32};
    std::vector<uint8_t> from_host = Frame(any, 0, 0, true);
    std::memcpy(from_host.data(), kSwitchMac, 6);
    std::memcpy(from_host.data() + 6, kHostMac, 6);
    if (!Enqueue(1, {from_host})) return false;
    Poll();
    dp_->ProcessLearnRequests();
    return true;
  }

  ~Bench() {
    dp_.reset();
    for (rte_ring* r : {rx_[0], rx_[1], tx_[0], tx_[1]}) {
      if (r == nullptr) continue;
      FreeAll(r);
      rte_ring_free(r);
    }
    rte_mempool_free(frames_);
  }

  // The median cycles per contribution of one case: the aggregation path,
  // the L2 baseline and the plain read.
  // With `profile`, the aggregation rounds only: what a profiler samples in
  // Poll is the aggregation path's.
  bool Run(const Case& c, int rounds, bool profile, uint64_t* agg, uint64_t* l2, uint64_t* read) {
    aggregator::JobSpec spec;
    spec.id = kJob;
    spec.key = kKey;
    spec.members = c.members;
    if (auto added = jobs_->Add(spec); !added.ok()) return Fail(added.status().ToString());
    const uint32_t chunks = std::max<uint32_t>(1, kRoundContributions / c.members);
    std::vector<uint64_t> agg_samples, l2_samples, read_samples;
    const int warmup = 3;
    for (int r = 0; r < warmup + rounds; ++r) {
      // Aggregation: every member of `chunks` fresh chunks, members interleaved
      // as they arrive from a real job.
      std::vector<std::vector<uint8_t>> round;
      for (uint32_t k = 0; k < chunks; ++k) {
        for (uint16_t m = 0; m < c.members; ++m) round.push_back(Frame(c, seq_ + k, m, false));
      }
      seq_ += chunks;
      const uint32_t n = static_cast<uint32_t>(round.size());
      if (!Enqueue(0, round)) return false;
      uint64_t t0 = rte_rdtsc_precise();
      const uint32_t results = Poll();
      uint64_t t1 = rte_rdtsc_precise();
      if (results != n) {
        return Fail("case members=" + std::to_string(c.members) + ": " + std::to_string(n) +
                    " contributions, " + std::to_string(results) + " results");
      }
      if (r >= warmup) agg_samples.push_back((t1 - t0) / n);
      if (profile) continue;


      // L2: the same frames to the host behind port 1.
      for (uint32_t i = 0; i < n; ++i) {
        const uint16_t node = static_cast<uint16_t>(i % c.members);
        round[i] = Frame(c, seq_, node, true);
      }
      if (!Enqueue(0, round)) return false;
      t0 = rte_rdtsc_precise();
      const uint32_t forwarded = Poll();
      t1 = rte_rdtsc_precise();
      if (forwarded != n) return Fail("L2 baseline: " + std::to_string(forwarded) + " of " + std::to_string(n));
      if (r >= warmup) l2_samples.push_back((t1 - t0) / n);


      // Plain read of each payload of the same frames.
      std::vector<rte_mbuf*> held;
      if (!Load(round, &held)) return false;
      const uint32_t payload_offset = 14 + 20 + 8 + sizeof(aggregator::AggHeader);
      t0 = rte_rdtsc_precise();
      uint32_t sink = 0;
      for (rte_mbuf* m : held) {
        const auto* p = rte_pktmbuf_mtod_offset(m, const uint32_t*, payload_offset);
        uint32_t s = 0;
        for (uint32_t e = 0; e < c.elems; ++e) s += p[e];
        sink += s;
      }
      t1 = rte_rdtsc_precise();
      sink_ += sink;
      for (rte_mbuf* m : held) rte_pktmbuf_free(m);
      if (r >= warmup) read_samples.push_back((t1 - t0) / n);
    }
    *agg = Median(agg_samples);
    *l2 = profile ? 0 : Median(l2_samples);
    *read = profile ? 0 : Median(read_samples);
    return true;
  }

 private:
  bool Fail(const std::string& what) {
    std::fprintf(stderr, "agg_path_bench: %s\n", what.c_str());
    return false;
  }

  // Fresh mbufs holding `frames`, in order; false when the pool has too few.
  bool Load(const std::vector<std::vector<uint8_t>>& frames, std::vector<rte_mbuf*>* out) {
    out->resize(frames.size());
    if (rte_pktmbuf_alloc_bulk(frames_, out->data(), static_cast<unsigned>(out->size())) != 0) {
      return Fail("the frame pool is exhausted");
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      char* d = rte_pktmbuf_append((*out)[i], static_cast<uint16_t>(frames[i].size()));
      std::memcpy(d, frames[i].data(), frames[i].size());
    }
    return true;
  }

  // `frames` onto port `port`'s RX ring, as its NIC would receive them.
  bool Enqueue(int port, const std::vector<std::vector<uint8_t>>& frames) {
    std::vector<rte_mbuf*> m;
    if (!Load(frames, &m)) return false;
    const unsigned n = static_cast<unsigned>(m.size());
    if (rte_ring_enqueue_burst(rx_[port], reinterpret_cast<void* const*>(m.data()), n, nullptr) != n) {
      return Fail("an RX ring is full");
    }
    return true;
  }

  // Polls until both RX rings are empty, freeing what each poll sent as a
  // PMD's TX completion would; returns how many frames left the switch.
  uint32_t Poll() {
    uint32_t sent = 0;
    while (rte_ring_count(rx_[0]) != 0 || rte_ring_count(rx_[1]) != 0) {
      dp_->PollWorkerOnce(0);
      sent += DrainTx();
    }
    return sent;
  }

  // Frees everything the ports sent; returns how many frames that was.
  uint32_t DrainTx() { return FreeAll(tx_[0]) + FreeAll(tx_[1]); }

  static uint32_t FreeAll(rte_ring* r) {
    void* burst[64];
    uint32_t total = 0;
    unsigned n;
    while ((n = rte_ring_dequeue_burst(r, burst, 64, nullptr)) != 0) {
      rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(burst), n);
      total += n;
    }
    return total;
  }

  rte_ring* rx_[2] = {};
  rte_ring* tx_[2] = {};
  rte_mempool* frames_ = nullptr;
  std::unique_ptr<aggregator::JobTable> jobs_;
  std::unique_ptr<Dataplane> dp_;
  uint32_t seq_ = 1;
  uint64_t sink_ = 0;
};

template <typename T>
bool ParseList(const char* arg, std::vector<T>* out, T (*parse)(const std::string&, bool*)) {
  out->clear();
  std::stringstream ss(arg);
  std::string item;
  while (std::getline(ss, item, ',')) {
    bool ok = true;
    out->push_back(parse(item, &ok));
    if (!ok) return false;
  }
  return !out->empty();
}

uint16_t ParseMembers(const std::string& s, bool* ok) {
  const long v = std::strtol(s.c_str(), nullptr, 10);
  *ok = v >= 1 && v <= 64;
  return static_cast<uint16_t>(v);
}
uint32_t ParseElems(const std::string& s, bool* ok) {
  const long v = std::strtol(s.c_str(), nullptr, 10);
  *ok = v >= 1 && v <= static_cast<long>(kMaxElems);
  return static_cast<uint32_t>(v);
}
DType ParseDType(const std::string& s, bool* ok) {
  *ok = s == "int32" || s == "float32";
  return s == "float32" ? DType::kFloat32 : DType::kInt32;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "--huge") {
      o.huge = true;
      continue;
    }
    if (a == "--profile") {
      o.profile = true;
      continue;
    }
    if (a == "--rounds" && ok) {
      o.rounds = std::atoi(v);
      ok = o.rounds >= 1;
    } else if (a == "--members" && ok) {
      ok = ParseList(v, &o.members, ParseMembers);
    } else if (a == "--elems" && ok) {
      ok = ParseList(v, &o.elems, ParseElems);
    } else if (a == "--dtypes" && ok) {
      ok = ParseList(v, &o.dtypes, ParseDType);
    } else {
      std::fprintf(stderr,
                   "usage: agg_path_bench [--rounds N] [--members 4,8,16,64] "
                   "[--elems 64,256,%u (at most %u)] [--dtypes int32,float32] [--huge] "
                   "[--profile]\n",
                   kMtuElems, kMaxElems);
      return a == "--help" ? 0 : 2;
    }
    if (!ok) {
      std::fprintf(stderr, "agg_path_bench: bad value for %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  const std::string prefix = "agg_path_bench_" + std::to_string(getpid());
  std::vector<std::string> eal_args = {"--no-pci", "--no-shconf", "--no-telemetry", "--lcores",
                                       "0", "--file-prefix", prefix, "--log-level", "lib.*:error"};
  if (!o.huge) eal_args.insert(eal_args.begin(), {"--no-huge", "-m", "1024"});
  auto eal = EalSession::Init("agg_path_bench", eal_args);
  if (!eal.ok()) {
    std::fprintf(stderr, "agg_path_bench: %s\n", eal.status().ToString().c_str());
    return 1;
  }
  std::printf("# TSC %.2f GHz; medians of %d rounds of %u contributions; replication included\n",
              static_cast<double>(rte_get_tsc_hz()) / 1e9, o.rounds, kRoundContributions);
  for (DType dtype : o.dtypes) {
    for (uint32_t elems : o.elems) {
      for (uint16_t members : o.members) {
        Bench bench;
        if (!bench.Build()) return 1;
        uint64_t agg = 0, l2 = 0, read = 0;
        if (!bench.Run({members, elems, dtype}, o.rounds, o.profile, &agg, &l2, &read)) return 1;
        const char* type = dtype == DType::kInt32 ? "int32" : "float32";
        if (o.profile) {
          std::printf("agg_path_profile members=%u elems=%u dtype=%s cycles_per_contribution=%llu\n",
                      members, elems, type, static_cast<unsigned long long>(agg));
          std::fflush(stdout);
          continue;
        }
        std::printf(
            "agg_path members=%u elems=%u dtype=%s cycles_per_contribution=%llu l2_cycles=%llu "
            "read_cycles=%llu overhead=%.2f\n",
            members, elems, type, static_cast<unsigned long long>(agg), static_cast<unsigned long long>(l2),
            static_cast<unsigned long long>(read),
            static_cast<double>(agg) / static_cast<double>(std::max<uint64_t>(l2 + read, 1)));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace aggswitch::dataplane

int main(int argc, char** argv) { return aggswitch::dataplane::Main(argc, argv); }
