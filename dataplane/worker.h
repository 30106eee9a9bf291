// A worker lcore: polls its (port, queue) pairs and switches each burst to
// completion.
//
// Per burst of up to 32 frames:
//   1. parse Ethernet/802.1Q, map the frame to its VLAN, drop what the port
//      does not accept (each drop counted with its reason);
//   2. look up every source and destination (VLAN, MAC) in one bulk call,
//      once per run of frames with the same addresses;
//   3. refresh known sources, queue learn requests for new or moved ones;
//      answer ARP/ping for the switch's own addresses; send known unicast to
//      its port, flood the rest to the VLAN's other ports, tagging or
//      untagging per egress port;
//   4. one tx_burst per egress port that received frames.
//
// No locks, no allocation (mbufs come from the preallocated pool), no
// syscalls, no exceptions, no unbounded loops. Everything a worker writes is
// its own: its counters, its TX queue on each port, its learn ring.
//
// Thread safety: a Worker is driven by exactly one thread: Run() on its lcore,
// or PollOnce() from a test while the dataplane is stopped.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "aggregator/bypass_table.h"
#include "aggregator/job_table.h"
#include "aggregator/slot_placement.h"
#include "aggregator/slot_table.h"
#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/fault_injector.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/hold_buffers.h"
#include "dataplane/mac_table.h"
#include "dataplane/packet.h"

namespace aggswitch::dataplane {

inline constexpr uint16_t kBurstSize = 32;
inline constexpr size_t kMaxRxQueuesPerWorker = 64;

// One element of a worker's learn ring: "key was seen on port".
struct LearnRequest {
  uint64_t key;
  uint16_t port;
  uint16_t pad[3];
};
static_assert(sizeof(LearnRequest) == 16);

// Checks the IPv4/UDP headers at `l3_offset` and the aggregation header
// behind them; false for anything that is not a valid aggregation datagram.
// [any thread]
inline bool ParseAggregationFrame(const uint8_t* frame, uint32_t len, uint32_t l3_offset, UdpInfo* udp,
                                  aggregator::AggPacket* pkt) {
  return ParseIpv4Udp(frame, len, l3_offset, udp) == UdpParse::kOk &&
         aggregator::ParseAggregation(frame + udp->payload_offset, udp->payload_len, pkt) ==
             aggregator::WireError::kOk;
}

// A datagram on its way between a worker and the control thread for in-band
// registration (Dataplane::ProcessRegistrations): up in a worker's upcall
// ring, back down in its reinject ring with the control thread's verdict.
struct Upcall {
  rte_mbuf* m;
  uint16_t in_port;   // ingress port index
  uint16_t vlan;      // VLAN it arrived on
  uint8_t l3_offset;  // of the IPv4 header in the frame
  uint8_t pad;
  // Down only: 0 when the job exists now; otherwise the NackReason to answer with.
  uint16_t verdict;
};
static_assert(sizeof(Upcall) == 16);

// An ARP reply to the switch, up to the control thread (neighbor resolution
// of the job trees' next hops, docs/stragglers.md).
struct NeighborReport {
  uint64_t mac48;
  uint32_t ip;  // host order
  uint16_t port_index;
  uint16_t vlan;
};
static_assert(sizeof(NeighborReport) == 16);

// The arrival offsets of one finished chunk, for straggler prediction
// (docs/stragglers.md): a worker fills one for every kOffsetSampleEvery-th
// chunk from a pool the control thread hands back after reading.
struct OffsetSample {
  uint32_t job_id;
  uint32_t job_generation;
  uint32_t seq;
  uint16_t members;
  uint16_t pad;
  // Per member index: 2^Slot::kOffsetShift TSC cycles after the chunk's
  // first contribution; kOffsetMissing for an excluded member. A member the
  // timer gave up on counts as arriving at the expiry.
  uint32_t* offsets;
};
inline constexpr uint32_t kOffsetMissing = UINT32_MAX;
inline constexpr uint32_t kOffsetSampleEvery = 8;  // a power of two

// Where a worker copies out part of its state when the control side asks
// (Dataplane::DumpSlots, Dataplane::DumpBypass). The requester writes
// `limit`, then bumps `requested`; the worker notices within 16 polls, copies
// a bounded share per pass so that a dump never stalls it, and publishes
// `done` = the generation it served (release). The entries are the worker's
// until then, and the requester's after, until its next request.
template <typename EntryT>
struct alignas(64) DumpExchange {
  using Entry = EntryT;
  explicit DumpExchange(uint32_t capacity_) : capacity(capacity_), entries(new Entry[capacity_]) {}

  // Requester side.
  std::atomic<uint64_t> requested{0};
  std::atomic<uint32_t> limit{0};
  // Worker side.
  alignas(64) std::atomic<uint64_t> done{0};
  uint64_t serving = 0;  // the generation being copied; 0: none
  uint32_t served_limit = 0;
  uint32_t cursor = 0;   // where the next pass starts
  uint32_t n = 0;        // entries filled
  uint64_t busy = 0;     // items seen (also beyond the limit)
  uint64_t now_tsc = 0;  // when the copy finished
  const uint32_t capacity;
  const std::unique_ptr<Entry[]> entries;

  // Whether a request waits (or is being served). [worker]
  bool Pending() const {
    return serving != 0 ||
           requested.load(std::memory_order_acquire) != done.load(std::memory_order_relaxed);
  }
  // Starts serving the latest request when none is being served. [worker]
  void Begin() {
    if (serving != 0) return;
    serving = requested.load(std::memory_order_acquire);
    served_limit = std::min(limit.load(std::memory_order_relaxed), capacity);
    cursor = 0;
    n = 0;
    busy = 0;
  }
  // Takes one item; false past the limit (still counted in `busy`). [worker]
  bool Add(const Entry& e) {
    ++busy;
    if (n == served_limit) return false;
    entries[n++] = e;
    return true;
  }
  void Finish(uint64_t tsc) {
    now_tsc = tsc;
    done.store(serving, std::memory_order_release);
    serving = 0;
  }
};

// One busy slot, as DumpSlots copies it.
struct SlotDumpEntry {
  static constexpr uint32_t kScanPerPass = 256;  // slots looked at per pass
  uint32_t index;  // local slot index
  uint32_t job_id;
  uint32_t seq;
  uint16_t count;
  uint16_t expected;
  uint16_t elem_count;
  uint8_t dtype;
  uint8_t op;
  bool complete;
  bool forwarded;
  bool overflow;
  uint64_t first_tsc;

  // The copy of busy slot `local_index`. [the slot's owner]
  static SlotDumpEntry Of(uint32_t local_index, const aggregator::Slot& slot) {
    return SlotDumpEntry{local_index, slot.job_id(), slot.seq(), slot.count(), slot.expected(),
                         slot.elem_count(), static_cast<uint8_t>(slot.dtype()),
                         static_cast<uint8_t>(slot.op()),
                         slot.state() == aggregator::Slot::State::kComplete,
                         slot.state() == aggregator::Slot::State::kForwarded, slot.overflow(),
                         slot.first_tsc()};
  }
};
using SlotDumpExchange = DumpExchange<SlotDumpEntry>;

// One live bypass entry, as DumpBypass copies it.
struct BypassDumpEntry {
  static constexpr uint32_t kScanPerPass = 512;  // buckets looked at per pass
  aggregator::BypassKey key;
  uint64_t expiry_tsc;
};
using BypassDumpExchange = DumpExchange<BypassDumpEntry>;

// The aggregation path of one worker (docs/aggregation.md). jobs == nullptr:
// aggregation is off and every frame is switched at L2.
struct AggregationSetup {
  aggregator::JobTable* jobs = nullptr;
  aggregator::SlotTable* slots = nullptr;  // this worker's share of the slots
  uint32_t reader_id = 0;                  // this worker's QSBR id in the job table
  uint32_t total_slots = 0;                // all workers' slots; a power of two
  aggregator::SlotRegions regions;         // where each job's chunks live (slot_placement.h)
  HoldBuffers* holds = nullptr;            // copies of the contributions ordered slots hold
  // Members are bound to the address they send from (Job::BindMember) on a
  // clock of TSC >> seen_shift (about a millisecond a tick); a bound address
  // silent for rebind_ticks is presumed gone: it may be replaced, and its
  // watermark holds no slot of the job (Job::SlotWatermark; 0: never).
  uint32_t seen_shift = 21;
  uint32_t rebind_ticks = 0;
  uint16_t n_workers = 1;
  uint16_t index = 0;                      // this worker's position; owns slots i % n_workers == index
  rte_ring* handoff[config::kMaxWorkers] = {};  // each worker's hand-off ring (MP/SC)
  uint32_t address = 0;                    // aggregation IPv4 address (host order); 0: none
  uint16_t udp_port = 0;
  uint32_t result_src_ip = 0;              // source address of results
  // In-band registration; both nullptr when aggregation.in_band_registration is off.
  rte_ring* upcall = nullptr;    // to the control thread (SP/SC, Upcall elements)
  rte_ring* reinject = nullptr;  // back from it (SP/SC, Upcall elements)
  SlotDumpExchange* dump = nullptr;
  BypassDumpExchange* bypass_dump = nullptr;
  JobCounters* job_counters = nullptr;  // JobTable::max_jobs() entries, by Job::index()
  aggregator::BypassTable* bypass = nullptr;  // this worker's bypass entries
  // A root that is its own TAN (docs/stragglers.md): first data and late
  // data go up to the control thread's TAN engine (mbufs trimmed to the
  // aggregation header), and its results come back down (the same).
  rte_ring* tan_up = nullptr;    // SP/SC, mbuf pointers
  rte_ring* tan_down = nullptr;  // SP/SC, mbuf pointers
  rte_ring* neighbors = nullptr;  // SP/SC, NeighborReport elements, to the control thread
  // Worker 0 only: frames the control thread floods on a VLAN (ARP
  // requests), Upcall elements with `vlan` set.
  rte_ring* control_tx = nullptr;
  // Straggler prediction: OffsetSample pointers, free ones down from the
  // control thread, filled ones up (both SP/SC).
  rte_ring* samples_free = nullptr;
  rte_ring* samples_full = nullptr;
};

struct WorkerSetup {
  unsigned lcore = 0;
  uint16_t tx_queue = 0;  // this worker's TX queue on every port
  struct Rx {
    uint16_t port_index;  // index into the config's ports
    uint16_t queue;
  };
  Rx rx[kMaxRxQueuesPerWorker];
  uint16_t n_rx = 0;
  uint16_t port_ids[config::kMaxPorts];  // port index -> DPDK port id
  uint32_t tick_shift = 30;              // MAC table tick = TSC >> tick_shift
  AggregationSetup agg;
  // ports[].faults by port index, null for none. Read by the Worker
  // constructor only, which builds its own injectors from them.
  const config::FaultConfig* faults[config::kMaxPorts] = {};
};

class alignas(64) Worker {
 public:
  Worker(const WorkerSetup& setup, const ForwardingPlan& plan, MacTable& macs,
         rte_ring* learn_ring, rte_mempool* pool, LcoreStats& stats,
         const std::atomic<bool>& quit);

  // Polls until the quit flag is raised. [worker lcore]
  void Run();
  // One pass over every RX queue. [the worker's thread]
  void PollOnce();
  // Entry point for rte_eal_remote_launch: `arg` is a Worker*.
  static int LaunchEntry(void* arg);

 private:
  struct Meta {
    uint16_t vlan;
    bool has_tag;
    uint8_t l3_offset;
  };

  // Where an aggregation datagram comes from: this worker's RX, another
  // worker's hand-off (already checked and learned there), or the control
  // thread after in-band registration.
  enum class AggSource : uint8_t { kRx, kHandoff, kReinject };

  void ProcessBurst(uint16_t in_port, rte_mbuf** pkts, uint16_t n, uint32_t now_tick);
  // Aggregation path. ClassifyIpv4 is the cheap test stage 1 runs on every
  // IPv4 frame: aggregation traffic, a forged source (the switch's own
  // address), or anything else; HandleAggregation parses, checks and
  // reduces (or hands off).
  enum class Ipv4Class : uint8_t { kOther, kAggregation, kSpoofed };
  Ipv4Class ClassifyIpv4(const uint8_t* data, uint32_t len, uint32_t l3_offset) const;
  // Kept out of line so the L2 loop of ProcessBurst stays small.
  [[gnu::noinline]] void HandleAggregation(rte_mbuf* m, uint16_t in_port, uint16_t vlan,
                                           uint32_t l3_offset, AggSource source);
  // A datagram for a job the table does not hold: up to the control thread
  // when it carries task info and registration is on, else a NACK.
  void HandleUnknownJob(rte_mbuf* m, const aggregator::AggPacket& pkt,
                        const aggregator::MemberAddr& sender, uint16_t in_port, uint16_t vlan,
                        uint32_t l3_offset, AggSource source);
  [[gnu::noinline]] void DrainHandoffs();
  [[gnu::noinline]] void DrainReinjects();
  [[gnu::noinline]] void ContinueSlotDump();
  [[gnu::noinline]] void ContinueBypassDump();
  [[gnu::noinline]] void DrainControl();
  [[gnu::noinline]] void RunTimers();
  void Contribute(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt,
                  int member);
  // --- The tree (docs/stragglers.md) ---
  // The slot's result went as far as this switch can take it: a partial
  // upstream, first data to the TAN, or (nothing missing at the root) the
  // result to every member. `carrier` as for SendResult. Returns whether
  // the carrier was consumed.
  bool FinishSlot(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot,
                  bool expired, rte_mbuf* carrier, uint32_t header_offset);
  // Sends a partial (non-root) or first data (root) with `missing` node ids.
  bool SendPartial(const aggregator::Job& job, const aggregator::Slot& slot, const uint16_t* missing,
                   uint32_t n_missing, rte_mbuf* carrier, uint32_t header_offset);
  // Turns a contribution (or partial) into a LATE datagram flagged BYPASS and
  // sends it towards the TAN. Consumes `m`.
  void ForwardLate(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset);
  // An ACK from a member of a non-root job: when it moves the members'
  // smallest watermark, an ACK with that watermark goes upstream (written
  // over `m`). Consumes `m`.
  void RelayAck(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset);
  // Rewrites the headers in front of the aggregation header at
  // `header_offset` to reach the job's `hop` and queues the frame. Consumes `m`.
  void SendToHop(rte_mbuf* m, const aggregator::Job& job, aggregator::Job::Hop hop,
                 uint32_t header_offset);
  // A RESULT from upstream or the TAN: cached in a forwarded slot, replicated
  // to every member. Consumes `m`.
  void ResultFromAbove(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt,
                       uint32_t header_offset);
  // Sends an INCOMPLETE result naming `missing` to every member.
  void SendIncomplete(const aggregator::Job& job, const aggregator::Slot& slot,
                      const uint16_t* missing, uint32_t n_missing);
  void SendNotice(const aggregator::Job& job, const aggregator::AggHeader& request,
                  aggregator::NoticeKind kind, const aggregator::MemberAddr& to);
  // Replicates `payload` (a UDP payload: aggregation header onwards) to
  // members [first, last). Consumes the caller's reference to `payload`.
  void Replicate(const aggregator::Job& job, rte_mbuf* payload, uint16_t first, uint16_t last,
                 uint16_t ip_id);
  // The missing list of a slot at this switch: every member that did not
  // contribute (a late child switch as itself or as the nodes it covers),
  // then the ids the children's partials named. With `entries`, writes a
  // bypass entry per missing non-excluded member. Returns the count, or
  // UINT32_MAX when more than `cap` ids.
  uint32_t CollectMissing(const aggregator::Job& job, const aggregator::Slot& slot, bool entries,
                          uint16_t* out, uint32_t cap);
  bool MatchBypass(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id);
  // Every kOffsetSampleEvery-th chunk: its members' arrival offsets, up to
  // the control thread, when a free sample is at hand.
  void SampleOffsets(const aggregator::Job& job, const aggregator::Slot& slot, bool expired);
  // The per-lcore token bucket of NACKs and NOTICEs.
  bool AnswerAllowed();
  // The clock of member bindings and slot quotas (about a millisecond a tick).
  uint32_t SeenNow() const { return static_cast<uint32_t>(last_tsc_ >> setup_.agg.seen_shift); }
  // Turns `m` into an answer to its sender, in place (header only, no
  // payload), and queues it on the sender's port: a NACK with `reason`, or
  // the echo of an accepted TASK_INFO. NACKs are rate limited per lcore.
  void Answer(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::Opcode opcode,
              aggregator::NackReason reason, const aggregator::MemberAddr& to);
  // Writes the header-only datagram `f` to `to` over `m` and queues it;
  // false (and `m` freed) when `m` cannot hold it.
  bool SendHeaderOnly(rte_mbuf* m, const aggregator::AggFields& f, const aggregator::MemberAddr& to);
  void Nack(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::NackReason reason,
            const aggregator::MemberAddr& to) {
    Answer(m, request, aggregator::Opcode::kNack, reason, to);
  }
  void RecordCompletion(const aggregator::Slot& slot);
  // Sends the result of a complete slot to one member, or to all (node < 0).
  // Sends the slot's result to every member (node < 0) or to `node`.
  // `carrier`, when not null, is a contribution to this slot (its aggregation
  // header at `header_offset`) that the caller is done with; the result is
  // written into it when it can be, and then it is consumed: returns whether.
  bool SendResult(const aggregator::Job& job, const aggregator::Slot& slot, int node,
                  rte_mbuf* carrier, uint32_t header_offset);
  // The result's UDP payload (aggregation header + elements), in `carrier`
  // when it can hold it, else in a new mbuf; nullptr when the pool is empty.
  rte_mbuf* ResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                          rte_mbuf* carrier, uint32_t header_offset);
  void WriteResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                          uint8_t* buf) const;
  // The header fields every datagram about the slot's chunk shares.
  static aggregator::AggFields ChunkFields(const aggregator::Job& job, const aggregator::Slot& slot);
  [[gnu::noinline]] void FlushPort(uint16_t port);
  void HandleLocal(uint16_t in_port, rte_mbuf* m, const Meta& meta, bool broadcast);
  void Forward(uint16_t in_port, rte_mbuf* m, const Meta& meta, uint16_t out_port);
  void Flood(uint16_t in_port, rte_mbuf* m, const Meta& meta);
  // Adds, rewrites or removes the 802.1Q tag for `out_port`. False: no headroom.
  bool FitTag(rte_mbuf* m, const Meta& meta, uint16_t out_port);
  void Enqueue(uint16_t out_port, rte_mbuf* m);
  void RequestLearn(uint64_t key, uint16_t port, uint32_t now_tick);
  void FlushTx();
  void FlushLearn();
  void FloodFromSwitch(rte_mbuf* m, uint16_t vlan);
  // An ARP reply to the switch: passed up for next-hop resolution. False: not a reply.
  bool ReportNeighbor(uint16_t in_port, const uint8_t* data, uint32_t len, const Meta& meta);
  void Drop(uint16_t port, DropReason reason, rte_mbuf* m) {
    stats_.ports[port].drops[static_cast<size_t>(reason)].Add(1);
    rte_pktmbuf_free(m);
  }

  WorkerSetup setup_;
  const ForwardingPlan& plan_;
  MacTable& macs_;
  rte_ring* learn_ring_;
  rte_mempool* pool_;
  LcoreStats& stats_;
  const std::atomic<bool>& quit_;
  uint64_t last_tsc_ = 0;
  bool reader_online_ = false;
  // NACK rate limit: a token bucket refilled from the TSC.
  uint64_t nack_tokens_ = 0;
  uint64_t nack_refill_tsc_ = 0;
  uint64_t nack_token_cycles_ = 0;  // cycles per token
  // Slot completion latency bucket bounds in TSC cycles (kSlotLatencyBoundsSeconds).
  uint64_t latency_bounds_[kSlotLatencyBuckets - 1] = {};
  uint32_t polls_since_quiescent_ = 0;

  // Frames waiting for this burst's tx_burst, per egress port. A full buffer
  // is flushed before it takes another frame (a result goes to many members).
  rte_mbuf* tx_[config::kMaxPorts][kBurstSize];
  uint16_t tx_count_[config::kMaxPorts] = {};
  uint64_t tx_bytes_[config::kMaxPorts] = {};
  uint64_t tx_dirty_ = 0;
  // Fault injection (ports[].faults) by port index; null for most ports.
  std::unique_ptr<FaultInjector> rx_faults_[config::kMaxPorts];
  std::unique_ptr<FaultInjector> tx_faults_[config::kMaxPorts];
  uint64_t tx_fault_ports_ = 0;  // ports with a TX injector

  LearnRequest learn_[kBurstSize];
  uint16_t n_learn_ = 0;
  // Direct-mapped memory of recent learn requests, so a stream of frames from
  // one new MAC sends one request per tick, not one per frame.
  struct RecentLearn {
    uint64_t key;
    uint32_t tick;
    uint16_t port;
  };
  static constexpr uint32_t kRecentLearnSlots = 256;
  RecentLearn recent_learn_[kRecentLearnSlots] = {};
};

}  // namespace aggswitch::dataplane
