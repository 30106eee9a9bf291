// In-band network telemetry in a worker lcore (docs/telemetry.md): which
// frames get INT, and what each hop does to them on the way out.
//
// At RX, from the classifier, for each frame it keeps (before it looks for
// aggregation datagrams):
//   - from a fabric port (another switch), a datagram to the INT port
//     carries INT: it is checked (a malformed one is dropped, counted as
//     int_malformed) and marked as a transit hop. One for this switch's own
//     aggregation (its original port the aggregation port, to the
//     aggregation address) ends its path here: INT is stripped at once and
//     its hop reported as the last, egress port 0xFFFF (the switch itself),
//     and the aggregation path gets the original datagram;
//   - from an edge port (hosts), a per-lcore countdown picks 1 in N frames,
//     N the smallest `sample` of the watch list, drawn at random around N
//     so that sampling never locks onto a traffic pattern. It counts whole
//     bursts down at once, and only the burst it runs out in is looked at
//     frame by frame. Only a picked frame is matched against the watch
//     list (first entry that matches; IPv4/UDP only), and an entry with a
//     larger sample takes 1 in sample/N of those. A chosen frame is marked
//     as a first hop with its entry's instructions.
//   A mark is a dynamic mbuf flag plus a dynamic field: the RX burst's TSC,
//   the ingress port and the instructions. Unwatched frames from edge
//   ports pay the countdown alone, per burst.
//
// At TX, from TxBuffers right before tx_burst (so after a port's link
// delay, which counts as time in the switch), for each marked frame:
//   - its hop: latency from the RX burst to now, the frames ahead of it in
//     the port's TX burst (the TX queue this worker fills), ports, index on
//     the path; queued for the control thread (IntHopRecord), which adds
//     the egress TX utilisation and sends the Telemetry Report;
//   - out a fabric port: a first hop inserts the INT headers; a transit hop
//     counts itself off the remaining hop count (TakeHop): the datagram
//     carries the INT headers and no hop metadata, whatever the hop count;
//   - out an edge port: INT is stripped (the host gets the original bytes)
//     and the record is the path's end (the end-of-path notice). A first
//     hop out an edge port is a path of one hop: nothing inserted.
//
//   IntStage int_stage(settings, lcore_index, stats, records_ring);
//   int_stage.BeginBurst(in_port, rx_tsc, n);       // the worker, per burst
//   if (int_stage.looking() && !int_stage.OnFrame(m, data, len, l3, ipv4, vlan)) drop;
//                                                   // the classifier, per frame it keeps
//   int_stage.OnTx(port, frames, n);                // TxBuffers, while marked frames may wait
//   int_stage.FlushRecords();                       // after the poll's TX
//
// Thread safety: one IntStage per worker, used by that worker's thread only.
// The watch list it reads is an immutable snapshot the control side
// publishes (IntSettings::watch) and frees after a grace period
// (UnmapGuard::Synchronize).
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

// The watch list, compiled: what the worker matches a picked frame with.
class WatchList {
 public:
  struct Rule {
    uint32_t src = 0, src_mask = 0;  // host order
    uint32_t dst = 0, dst_mask = 0;
    uint32_t job = 0;
    bool match_job = false;
    uint16_t vlan = 0;   // 0: any
    uint16_t port = 0;   // UDP source or destination; 0: any
    uint32_t every = 1;  // take 1 in `every` picked matching frames (sample / base)
    uint16_t instructions = 0;
  };
  static constexpr uint32_t kNoMatch = UINT32_MAX;

  // `agg_udp_port`: the aggregation UDP port, which a `job` rule also needs.
  // [control]
  static std::unique_ptr<const WatchList> Build(const std::vector<config::WatchEntry>& entries,
                                                uint16_t agg_udp_port);

  // The index of the first rule a UDP datagram matches, or kNoMatch. `ip`
  // points at its IPv4 header, `l4` at its UDP header, `end` past the frame.
  // [any]
  uint32_t Match(const uint8_t* ip, const uint8_t* l4, const uint8_t* end, uint16_t vlan) const;

  uint32_t size() const { return static_cast<uint32_t>(rules_.size()); }
  const Rule& rule(uint32_t i) const { return rules_[i]; }
  // N of the countdown: the smallest sample of any rule (0: no rule).
  uint32_t base() const { return base_; }

 private:
  std::vector<Rule> rules_;
  uint32_t base_ = 0;
  uint16_t agg_udp_port_ = 0;
};

// What every worker's IntStage shares, fixed while the workers run but the
// watch list, which the control side may swap.
struct IntSettings {
  uint32_t node_id = 0;
  common::Ipv4Endpoint collector;               // where the control thread sends reports (shown only)
  uint16_t int_port = 7700;
  uint8_t max_hops = 8;
  uint64_t fabric_ports = 0;                    // bit p: port p faces another switch
  uint16_t ip_mtu[config::kMaxPorts] = {};      // IPv4 bytes a port's frames may carry
  uint16_t n_workers = 1;                       // path sequence numbers interleave by worker
  // The datagrams this switch aggregates itself (aggregation: on): to
  // agg_udp_port, and to agg_address unless it is 0. A fabric port's INT
  // datagram among them ends its path here.
  bool aggregation = false;
  uint16_t agg_udp_port = 0;
  uint32_t agg_address = 0;                     // host order
  std::atomic<const WatchList*> watch{nullptr};  // the published snapshot; null: none
};

// The dynamic mbuf flag and field of a marked frame. Register() once,
// before any worker runs. [control]
struct IntMark {
  uint64_t rx_tsc;
  uint16_t in_port;
  uint16_t instructions;
  uint8_t transit;  // 1: INT came with it; 0: this switch is its first hop
  static common::Status Register();
  static bool Marked(const rte_mbuf* m) { return (m->ol_flags & flag) != 0; }
  static IntMark* Of(rte_mbuf* m) { return RTE_MBUF_DYNFIELD(m, offset, IntMark*); }
  static inline int offset = -1;
  static inline uint64_t flag = 0;
};

// The egress port of a hop whose datagram the switch took itself.
inline constexpr uint16_t kIntLocalPort = 0xFFFF;

class IntStage {
 public:
  // `clock`: the worker's (a hop's latency ends at its TX).
  IntStage(const IntSettings& settings, uint16_t worker_index, LcoreStats& stats,
           rte_ring* records, const common::Clock& clock);

  // A burst of `n` frames from `in_port` received at `rx_tsc` is about to
  // be classified. The countdown runs per burst: a burst from an edge port
  // that it does not run out in is not looked at frame by frame.
  void BeginBurst(uint16_t in_port, uint64_t rx_tsc, uint16_t n) {
    in_port_ = in_port;
    rx_tsc_ = rx_tsc;
    fabric_burst_ = ((settings_.fabric_ports >> in_port) & 1) != 0;
    looking_ = fabric_burst_ || countdown_ <= n;
    if (!looking_) countdown_ -= n;
  }
  // Whether the classifier hands this burst's frames to OnFrame.
  bool looking() const { return looking_; }
  // A frame of a burst being looked at, bound for L2, its header behind
  // Ethernet at `l3` (`ipv4`: an IPv4 one). False: drop it (counted as
  // DropReason::kIntMalformed by the caller).
  bool OnFrame(rte_mbuf* m, const uint8_t* data, uint32_t len, uint32_t l3, bool ipv4,
               uint16_t vlan) {
    if (fabric_burst_) return !ipv4 || OnFabric(m, data, len, l3);
    if (--countdown_ != 0) return true;
    Pick(m, data, len, l3, ipv4, vlan);
    return true;
  }
  // Whether marked frames may wait in TX queues (TxBuffers scans those).
  bool marked_any() const { return marked_; }
  void ClearMarked() { marked_ = false; }
  // The marked frames among frames[0, n), one tx_burst about to go out
  // `port` (frame i has i frames ahead of it). Records their hops, inserts
  // or strips INT, unmarks them; frames stay in place. Returns the bytes
  // the frames grew by (negative: shrank).
  int64_t OnTx(uint16_t port, rte_mbuf* const* frames, uint16_t n);
  // Queues the hop records of this poll for the control thread.
  void FlushRecords();

 private:
  [[gnu::noinline]] bool OnFabric(rte_mbuf* m, const uint8_t* data, uint32_t len, uint32_t l3);
  // An INT datagram from a fabric port for this switch's own aggregation.
  void EndHere(rte_mbuf* m, uint8_t* ip, size_t ip_len);
  void Queue(const IntHopRecord& r);
  [[gnu::noinline]] void Pick(rte_mbuf* m, const uint8_t* data, uint32_t len, uint32_t l3,
                              bool ipv4, uint16_t vlan);
  void Mark(rte_mbuf* m, uint16_t instructions, bool transit);
  void OneOnTx(uint16_t port, rte_mbuf* m, uint32_t ahead, uint64_t now);

  uint32_t NextCountdown(uint32_t base);

  const IntSettings& settings_;
  const common::Clock& clock_;
  const uint16_t worker_index_;
  LcoreStats& stats_;
  rte_ring* const records_;
  uint16_t in_port_ = 0;
  bool fabric_burst_ = false;
  bool marked_ = false;
  bool looking_ = false;
  uint64_t rx_tsc_ = 0;
  uint32_t countdown_ = 1;
  uint64_t rng_;
  uint32_t next_seq_ = 0;
  // Per rule of the current snapshot: picked matching frames left before the next taken.
  const WatchList* counted_for_ = nullptr;
  uint32_t rule_countdown_[config::kMaxWatchEntries] = {};
  IntHopRecord pending_[64];
  uint16_t n_pending_ = 0;
};

}  // namespace aggswitch::dataplane
