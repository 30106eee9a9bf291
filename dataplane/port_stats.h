// What the dataplane reports about its ports and workers, as plain values:
// identity and state, counter totals summed over the worker lcores, and what
// each worker polls. No DPDK headers, so renderers and tests can use them.
//
//   dataplane::PortTotals t = dataplane.GetPortTotals(0);
//   uint64_t tx_full = t.drops[static_cast<size_t>(DropReason::kTxFull)];
//
// Thread safety: plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/net_addr.h"
#include "dataplane/counters.h"

namespace aggswitch::dataplane {

// What the API shows about a port.
struct PortInfo {
  std::string name;
  std::string devargs;
  std::string driver;
  uint16_t port_id = 0;
  common::MacAddr mac;
  bool link_up = false;
  uint32_t link_speed_mbps = 0;
  uint16_t rx_queues = 0;
  uint16_t tx_queues = 0;
  std::string vlan_mode;  // "access 10" or "trunk 10,20 native 1"
};

// Per-port totals summed over every worker lcore plus the device's own counters.
struct PortTotals {
#define AGG_PORT_TOTAL_FIELD(name, help) uint64_t name = 0;
  AGG_PORT_COUNTERS(AGG_PORT_TOTAL_FIELD)
#undef AGG_PORT_TOTAL_FIELD
  uint64_t drops[kNumDropReasons] = {};
  uint64_t faults[kNumFaults] = {};  // injected on purpose (ports[].faults)
  // From rte_eth_stats_get: frames the device itself dropped or failed on.
#define AGG_PORT_DEVICE_FIELD(name, stat, help) uint64_t dev_##name = 0;
  AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_FIELD)
#undef AGG_PORT_DEVICE_FIELD
};

// A buffer pool (rte_mempool) and how much of it is free now.
struct PoolStats {
  std::string name;        // "mbuf" or "hold"
  uint64_t capacity = 0;   // buffers in all
  uint64_t available = 0;  // free: in the pool and in the lcores' caches
};

// How full one of a worker lcore's rings is (worker_channels.h): the
// entries waiting in it, out of its capacity.
struct RingFill {
  const char* name = "";  // "learn", "handoff", ... (WorkerChannels::ForEachRing)
  uint32_t entries = 0;
  uint32_t capacity = 0;
};

// The slot completion latency histogram summed over every worker lcore.
struct SlotLatencyTotals {
  uint64_t buckets[kSlotLatencyBuckets] = {};  // not cumulative; the last is +Inf
  uint64_t count = 0;
  double sum_seconds = 0;
};

// What the control thread did with collided chunks (docs/aggregation.md,
// "Collisions" and "Moves"): the spare region's size, the spare slots leased
// now, leases granted, escalations refused, and jobs moved to a partition of
// their own, since the start.
struct EscalationStats {
  uint32_t slots = 0;
  uint32_t leased = 0;
  uint64_t granted = 0;
  uint64_t refused = 0;
  uint64_t moves = 0;
};

// A datagram's task info, passed up for in-band registration: what the
// sender says of its job. The control side decides (JobControl::RegisterInBand).
struct RegistrationRequest {
  uint32_t job_id = 0;
  uint64_t key = 0;
  uint16_t expected = 0;    // members at this switch
  uint16_t node_count = 0;  // switches taking part
  bool ordered = false;     // the ORDERED flag
  bool verify = false;      // the VERIFY_MODE flag
  uint32_t addr_low = 0;    // low bits of the sender's buffer address
  uint16_t node_id = 0;     // the sender's node id
  uint32_t src_ip = 0;      // the sender's IPv4 address, host order
};

// What in-band registration did (the control thread's counters), by outcome.
#define AGG_REGISTRATION_RESULTS(X)                                                   \
  X(admitted, "a new job was added from task info")                                  \
  X(existing, "the job was added by an earlier datagram; this one was handed back") \
  X(table_full, "refused: the job table is full")                                    \
  X(key_mismatch, "refused: a job with this id exists with another key")             \
  X(invalid, "refused: the task info is out of range, members or nodes")            \
  X(rate_limited, "refused: over the per-source or switch-wide registration rate")   \
  X(in_band_full, "refused: in-band jobs fill aggregation.in_band.max_jobs")         \
  X(no_upstream, "refused: the task info says more than one node and the switch has no upstream") \
  X(no_parameter_node, "refused: the task info asks for verify mode and the switch has no remote TAN")

enum class RegistrationResult : uint8_t {
#define AGG_REGISTRATION_ENUM(name, help) name,
  AGG_REGISTRATION_RESULTS(AGG_REGISTRATION_ENUM)
#undef AGG_REGISTRATION_ENUM
      kCount
};
inline constexpr size_t kNumRegistrationResults = static_cast<size_t>(RegistrationResult::kCount);
inline constexpr AggCounterText kRegistrationResultText[kNumRegistrationResults] = {
#define AGG_REGISTRATION_TEXT(name, help) {#name, help},
    AGG_REGISTRATION_RESULTS(AGG_REGISTRATION_TEXT)
#undef AGG_REGISTRATION_TEXT
};

// One busy aggregation slot, as a worker copied it out (Dataplane::DumpSlots).
struct SlotInfo {
  unsigned lcore = 0;        // the owning worker's lcore
  uint32_t index = 0;        // global slot index (SlotIndex(job, seq))
  bool complete = false;     // holding a result (else aggregating)
  bool forwarded = false;    // its partial went upstream (docs/stragglers.md); free for any chunk
  uint32_t job_id = 0;
  uint32_t seq = 0;
  uint16_t count = 0;        // members counted
  uint16_t expected = 0;
  uint8_t dtype = 0;         // aggregator::DType
  uint8_t op = 0;            // aggregator::ReduceOp
  uint16_t elem_count = 0;
  bool overflow = false;
  double age_seconds = 0;    // since the first contribution
};

struct SlotDump {
  std::vector<SlotInfo> slots;  // by lcore, then slot index
  uint64_t busy = 0;            // busy slots seen, including those beyond the limit
  bool truncated = false;       // more busy slots than the limit asked for
};

// One live bypass entry (docs/stragglers.md).
struct BypassInfo {
  unsigned lcore = 0;
  uint32_t job_id = 0;
  uint32_t seq = 0;
  uint16_t node = 0;         // the member that timed out
  double ttl_seconds = 0;    // until the entry expires
};

struct BypassDump {
  std::vector<BypassInfo> entries;  // by lcore
  uint64_t live = 0;                // entries seen, including those beyond the limit
  bool truncated = false;
};

struct WorkerInfo {
  unsigned lcore = 0;
  uint16_t tx_queue = 0;
  std::vector<std::pair<std::string, uint16_t>> rx;  // (port name, queue)
};

}  // namespace aggswitch::dataplane
