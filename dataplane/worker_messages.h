// What travels between a worker lcore and the rest of the process: the
// elements of its rings (worker_channels.h) and the exchanges through which
// the control side asks a worker for a copy of its state.
//
// Every ring has one producer and one consumer side, named with each type
// below; only the hand-off rings have many producers (every worker) and one
// consumer (the slot owner).
//
// Thread safety: plain data, except DumpExchange, whose methods say who calls
// them.
#pragma once

#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

#include "aggregator/bypass_table.h"
#include "aggregator/slot_table.h"

namespace aggswitch::dataplane {

// One element of a worker's learn ring (worker -> control): "key was seen on port".
struct LearnRequest {
  uint64_t key;
  uint16_t port;
  uint16_t pad[3];
};
static_assert(sizeof(LearnRequest) == 16);

// A received frame on its way between two threads, with what its receiver
// learned of it:
//   - hand-off (worker -> the worker that owns the datagram's slot): an
//     aggregation datagram that passed its checks where it arrived;
//   - upcall (worker -> control) and reinject (control -> the same worker):
//     a datagram that registers a job in-band, and back with the verdict;
//   - control TX (control -> worker 0): a frame the switch floods on `vlan`;
//   - escalation (worker -> control) and relocation (control -> the same
//     worker): a contribution whose slot holds another chunk, and back with
//     the spare slot its chunk moves to, or word that its job moved
//     (Escalation, Relocation).
// How a datagram handed to another worker finds its slot there
// (FrameRef::via; docs/aggregation.md, "Collisions" and "Moves").
enum class Via : uint8_t {
  // Its chunk's home slot (Job::placement()), or where its own slot hint
  // says: a spare slot, or its job's moved partition.
  kPlacement = 0,
  // Sent on by the switch, which decided where its chunk is: the spare slot
  // in FrameRef::verdict_or_spare, or (none there) its job's moved
  // partition. It may take the slot.
  kSwitch = 1,
  // Back to its home slot, its hint ignored: the slot the hint named did not
  // hold its chunk.
  kHome = 2,
};

struct FrameRef {
  rte_mbuf* m;
  uint16_t in_port;   // ingress port index (control TX: unused)
  uint16_t vlan;      // VLAN it arrived on, or to flood on
  uint8_t l3_offset;  // of the IPv4 header in the frame
  Via via;            // hand-off only
  // Reinject: 0 when the job exists now; otherwise the NackReason to answer
  // with. Hand-off: the spare slot (its hint) the switch sent the datagram's
  // chunk to, or RelocationMap::kNone.
  uint16_t verdict_or_spare;
};
static_assert(sizeof(FrameRef) == 16);

// A contribution whose placed slot holds another chunk (worker -> control).
struct Escalation {
  FrameRef frame;
  uint32_t job_id;
  uint32_t job_generation;
  uint32_t seq;
  uint32_t placed_slot;  // global
  // Whether the datagram, refused a slot, goes on without one
  // (Job::GoesOnWithoutSlot): a child switch's partial at a root whose
  // chunks go to the parameter node does not, and waits for a slot.
  bool goes_on;
};
static_assert(sizeof(Escalation) == 40);

// The control thread's answer to an escalation, or its word that a chunk
// moved earlier has lost its spare slot (control -> the worker that owns the
// chunk's placed slot).
struct Relocation {
  enum class Kind : uint16_t {
    kPlace,   // the chunk moves to spare slot `hint`; `frame` goes there
    kRefuse,  // no spare slot is free: answer `frame` with NACK slot_busy
    kForget,  // the chunk's lease on `hint` ended: erase it (no frame)
    // The job moved (Job::move()): from now on this worker sends the chunks
    // at or after the cut whose home slot it owns and that do not hold it
    // to the moved partition (no frame; `seq` unused). Every worker gets
    // one, before any answer that counts on it.
    kMove,
    // The chunk lies at or after its job's cut: `frame` goes back through
    // its home slot, which sends it to the moved partition.
    kMoved,
  };
  FrameRef frame;  // m == nullptr for kForget
  uint32_t job_id;
  uint32_t job_generation;
  uint32_t seq;
  uint16_t hint;
  Kind kind;
};
static_assert(sizeof(Relocation) == 32);

// An ARP reply to the switch (worker -> control): neighbor resolution of the
// job trees' next hops (docs/stragglers.md).
struct NeighborReport {
  uint64_t mac48;
  uint32_t ip;  // host order
  uint16_t port_index;
  uint16_t vlan;
};
static_assert(sizeof(NeighborReport) == 16);

// One hop of one watched datagram (worker -> control, the int_records ring):
// what the control thread needs for its Telemetry Report (int_stage.h).
struct IntHopRecord {
  uint64_t latency_cycles;    // TSC cycles from the RX burst to TX
  uint32_t source_node;       // path id
  uint32_t path_seq;
  uint32_t hop_index;         // 1 for the first hop
  uint32_t queue_occupancy;   // frames ahead of it on the egress queue
  uint16_t instructions;      // telemetry::instr bits
  uint16_t in_port;           // port indices
  uint16_t out_port;
  uint8_t last_hop;           // out an edge port: the end-of-path notice
  uint8_t pad;
  uint8_t inner[28];          // the original IPv4 and UDP headers
  uint32_t pad2;
};
static_assert(sizeof(IntHopRecord) == 64);

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

}  // namespace aggswitch::dataplane
