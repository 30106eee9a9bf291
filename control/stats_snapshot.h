// A plain, self-contained copy of everything the observability side shows:
// ports, worker lcores, the MAC table, the job table, the aggregation engine's
// totals and build information.
//
// CollectSnapshot() reads the dataplane once through its [any] accessors
// (relaxed counter loads, rte_eth_stats_get) and copies the values out. The
// renderers (metrics.h, api.h) take a snapshot, never the Dataplane, so they
// are unit-testable without EAL: a test fills a StatsSnapshot by hand. This header
// needs no DPDK headers.
//
// Counters of different lcores are read one after another while the workers
// run, so a snapshot is not one instant; each counter is exact and monotonic.
//
//   StatsSnapshot snap = CollectSnapshot(*dataplane);       // any thread
//   std::string text = RenderPrometheus(snap);               // metrics.h
//   std::vector<MacEntrySnapshot> macs = CollectMacEntries(*dataplane);
//   JobCounterValues c = CollectJobCounters(*dataplane, job.index());  // control thread
//
// The job table (StatsSnapshot::jobs) and each job's counters are not read
// here but by JobControl on the control thread (job_control.h), which is what
// keeps a job's counters under the right job id; the own TAN's counters
// (AggregationSnapshot::tan) come from TreeControl in the same control-thread
// step (http_server.cc).
//
// Thread safety: the types are plain values. CollectSnapshot() and
// CollectMacEntries() may be called from any thread (control thread, civetweb
// threads, DPDK's telemetry thread) while the workers run. CollectJobCounters()
// may be called from any thread too, but only the control thread knows which
// job owns an index (see JobControl).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aggregator/tan_engine.h"
#include "common/net_addr.h"
#include "config/config.h"
#include "common/http_refusals.h"
#include "dataplane/counters.h"
#include "dataplane/port_stats.h"

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

using dataplane::DropReasonText;
using dataplane::kDropReasonText;

struct BuildInfo {
  std::string version;       // aggswitch version, e.g. "0.1.0"
  std::string dpdk_version;  // rte_version(), e.g. "DPDK 22.11.4"
};

// One port: identity and state (PortInfo), counters summed over every worker
// lcore plus the device's own counters (PortTotals), and its index.
struct PortSnapshot : dataplane::PortInfo, dataplane::PortTotals {
  size_t index = 0;  // position in the config's port list; MAC entries use it

  // Sum of drops[] (the dataplane's own drops, not the device counters).
  uint64_t TotalDrops() const {
    uint64_t sum = 0;
    for (uint64_t d : drops) sum += d;
    return sum;
  }
};

// One worker lcore: what it polls and its counters (dataplane::LcoreCounters).
struct LcoreSnapshot : dataplane::WorkerInfo {
  uint64_t agg[dataplane::kNumAggCounters] = {};  // indexed by dataplane::AggCounter
  uint64_t malformed[dataplane::kNumMalformedReasons] = {};  // by dataplane::MalformedReason
  uint32_t slots = 0;           // aggregation slots this lcore owns (0: aggregation off)
  uint32_t slots_busy = 0;      // of those, aggregating or holding a result
  uint32_t slots_complete = 0;  // of those, holding a result
  uint32_t slot_timers = 0;     // slots whose timer is armed
  uint32_t bypass_entries = 0;  // live bypass entries (docs/stragglers.md)
  uint32_t store_buffers = 0;       // parameter store buffers (0: no store)
  uint32_t store_buffers_used = 0;  // of those, taken
  std::vector<dataplane::RingFill> rings;  // how full each of its rings is

#define AGG_LCORE_SNAPSHOT_FIELD(name, help) uint64_t name = 0;
  AGG_LCORE_COUNTERS(AGG_LCORE_SNAPSHOT_FIELD)
#undef AGG_LCORE_SNAPSHOT_FIELD

  // busy_cycles / busy_packets; 0 before the first packet.
  double CyclesPerPacket() const {
    return busy_packets == 0 ? 0.0 : static_cast<double>(busy_cycles) / busy_packets;
  }
  // Share of polling cycles spent on polls that found packets, 0..100; 0
  // before the first poll.
  double BusyPercent() const {
    const uint64_t all = busy_cycles + idle_cycles;
    return all == 0 ? 0.0 : 100.0 * static_cast<double>(busy_cycles) / all;
  }
};

// MAC table occupancy and the control thread's MacEventCounters.
struct MacTableSnapshot {
  uint32_t entries = 0;  // learned + static
  uint32_t capacity = 0;
  uint32_t static_entries = 0;
  uint32_t aging_seconds = 0;  // 0: aging disabled
  uint64_t learned = 0;
  uint64_t moved = 0;
  uint64_t aged = 0;
  uint64_t static_conflicts = 0;
  uint64_t learn_refused = 0;  // learn requests refused because the table was full
};

// One member of a job whose address or ack watermark the switch has learned.
struct JobMemberSnapshot {
  uint16_t node = 0;         // the member's node id (its rank; for a flat job, its index)
  bool has_address = false;  // the fields below up to udp_port are valid
  common::MacAddr mac;
  uint8_t port_index = 0;
  std::string port;   // the ingress port's name
  uint16_t vlan = 0;  // 0: untagged
  common::Ipv4Addr ip;
  uint16_t udp_port = 0;
  std::optional<uint32_t> ack_watermark;  // nullopt before the member's first
};

// A job's counters summed over every worker lcore (dataplane::JobCounters),
// indexed by dataplane::JobCounter.
using JobCounterValues = std::array<uint64_t, dataplane::kNumJobCounters>;

// A job's TAN at this switch: where its root sends first data (docs/stragglers.md).
struct JobTanSnapshot {
  std::string mode = "none";  // "none", "remote" (an agg-ps or worker) or "self" (this switch)
  common::Ipv4Addr address;   // remote: the TAN's aggregation address and UDP port
  uint16_t port = 0;
  bool resolved = false;  // remote: its MAC is known (ARP answered)
};

// A child switch that is a member of the job here (aggregation.jobs[].switches[]).
struct JobChildSwitchSnapshot {
  uint16_t node = 0;
  std::vector<uint16_t> covers;  // the node ids below it; empty when none were given
};

// A parent switch of a job that is not rooted here: its one upstream
// (aggregation.jobs[].upstream), or one of the switch's aggregation.upstreams
// (an in-band job of several nodes).
struct JobUpstreamSnapshot {
  common::Ipv4Addr address;
  uint16_t port = 0;
  uint16_t node = 0;  // this switch's node id there
  uint16_t vlan = 0;  // 0: the aggregation address's VLAN
  bool resolved = false;
};

// One job of the job table (the key, a shared secret, is not part of it).
struct JobSnapshot {
  uint32_t id = 0;
  uint16_t index = 0;    // stable slot of the job's per-lcore counters
  std::string origin;    // "config", "api" or "in-band"
  uint16_t members = 0;  // expected members at this switch
  uint16_t nodes = 1;    // switches taking part; 1 = this switch is the root
  bool ordered = false;
  uint16_t learned = 0;                            // members with a learned address
  std::optional<uint32_t> min_ack;                 // MinAck(): nullopt before any watermark
  std::vector<JobMemberSnapshot> learned_members;  // by node; members seen so far
  // What the dataplane counted for this job, read on the control thread
  // together with the job itself; nullopt when the source has no dataplane
  // counters (aggregation off, or no counter reader).
  std::optional<JobCounterValues> counters;

  // The tree, under the names of the config's aggregation.jobs[] keys.
  std::vector<uint16_t> node_ids;                // the workers' node ids, by member index
  std::vector<JobChildSwitchSnapshot> switches;  // the child switches, by member index
  // Its parents; empty: this switch is the job's root. Chunk s goes to
  // upstreams[addr_low mod size], addr_low the chunk's.
  std::vector<JobUpstreamSnapshot> upstreams;
  std::optional<uint32_t> timeout_ms;            // slot timer; nullopt: unknown TSC frequency
  bool batch = false;                            // trigger: batch (else incremental)
  JobTanSnapshot tan;                            // mode "none" unless rooted here
  std::optional<uint16_t> tan_member;            // the worker here that runs the TAN
  bool parameter_server = false;                 // root jobs: the TAN answers every chunk
  bool verify = false;                           // root jobs: the TAN checks every complete chunk
  std::string main_server;                       // "a.b.c.d:port" (port 0: any); "": none
  std::string_view mode = "aggregate";           // "aggregate", "store", "both"
  // The store buffers (aggregation.store) it holds now, over every worker,
  // and may hold at once.
  uint32_t store_buffers = 0;
  uint32_t store_quota = 0;
  // Where its chunks land (aggregator/slot_placement.h): its slot region
  // and the slot of its sequence number 0; with hash placement (span 0)
  // chunk s takes slot first + (base - first + s) mod size, in a partition
  // of `span` slots first + (base - first + s mod span) mod size. 0/0/0
  // without a region. `placed` says how: hash, round_robin, random, hint.
  uint32_t slot_region_first = 0;
  uint32_t slot_region_size = 0;
  uint32_t slot_base = 0;
  uint32_t slot_span = 0;
  std::string placed = "hash";
  // The job's move (docs/aggregation.md, "Moves"): its chunks from `cut` on
  // that took no slot at home went to the partition of slot_quota slots
  // from global slot `base` (wrapping in the region).
  struct Moved {
    uint32_t cut = 0;
    uint32_t base = 0;
  };
  std::optional<Moved> moved;
  uint32_t slot_quota = 0;  // chunks it may keep ahead of its slowest member (0: no bound)
  uint32_t hold_quota = 0;  // ordered contributions it may hold (0: no bound)
};

// The job table as the API and the metrics show it.
struct JobTableSnapshot {
  uint32_t capacity = 0;  // aggregation.max_jobs
  uint16_t max_fan_in = 0;
  bool in_band_registration = false;
  uint32_t in_band_capacity = 0;   // aggregation.in_band.max_jobs (0: no in-band admission)
  uint64_t in_band_expired = 0;    // in-band jobs removed for being idle
  uint64_t in_band_displaced = 0;  // in-band jobs removed to make room for config or API jobs
  std::vector<JobSnapshot> jobs;  // by id
};

// The switch's own TAN (the root of jobs with tan: {strategy: self}): its
// counters and open chunks, read on the control thread that runs it.
struct OwnTanSnapshot {
  aggregator::TanCounters counters;
  uint64_t pending = 0;  // chunks waiting for late data or their first data
};

// The aggregation engine's switch-wide totals: the slot completion latency
// histogram summed over the worker lcores, the control thread's in-band
// registration outcomes, and the own TAN.
struct AggregationSnapshot {
  dataplane::SlotLatencyTotals slot_latency;
  uint64_t registrations[dataplane::kNumRegistrationResults] = {};  // by RegistrationResult
  dataplane::EscalationStats spare;  // the spare slots' leases
  // nullopt: no tree control (tests, tools), or the control thread did not
  // answer in time; /metrics then leaves the aggswitch_tan_ families out.
  std::optional<OwnTanSnapshot> tan;
};

// This process, as the standard process_* metrics show it, with its pid so
// that a client can tell which process answers on the HTTP port.
struct ProcessSnapshot {
  int64_t pid = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  uint64_t resident_memory_bytes = 0;
  uint64_t virtual_memory_bytes = 0;
  uint64_t open_fds = 0;
};

// A pool of packet or payload buffers (an rte_mempool): "mbuf" (every frame
// received, sent or copied) or "hold" (contributions an ordered slot keeps
// until it reduces them in member order; docs/aggregation.md).
struct PoolSnapshot {
  std::string name;
  uint64_t capacity = 0;   // buffers in all
  uint64_t available = 0;  // free, in the pool and in the lcores' caches
};

// The HTTP server's own counts: requests it refused before routing them.
using HttpSnapshot = common::HttpCounts;

// In-band telemetry (dataplane/int_stage.h, control/int_exporter.h): the
// lcores' INT counters summed, and what the exporter sent.
struct IntSnapshot {
  uint32_t node_id = 0;
  uint16_t int_port = 0;
  uint8_t max_hops = 0;
  std::string collector;                 // "a.b.c.d:port"; empty: none
  std::vector<std::string> fabric_ports;  // names
  std::vector<config::WatchEntry> watch;
  uint32_t watch_entries = 0;
#define AGG_INT_SNAPSHOT_FIELD(name, help) uint64_t name = 0;
  AGG_INT_COUNTERS(AGG_INT_SNAPSHOT_FIELD)
#undef AGG_INT_SNAPSHOT_FIELD
  uint64_t records_lost = 0;  // reports dropped: the ring to the control thread was full
  uint64_t reports_sent = 0;
  uint64_t send_failed = 0;   // reports dropped: the socket refused them
};

struct StatsSnapshot {
  BuildInfo build;
  ProcessSnapshot process;
  uint64_t tsc_hz = 0;
  std::vector<PortSnapshot> ports;
  std::vector<LcoreSnapshot> lcores;
  MacTableSnapshot mac_table;
  // The job table; nullopt when the source has none (or the control thread
  // did not answer in time), and then /metrics leaves the job families out.
  std::optional<JobTableSnapshot> jobs;
  // nullopt when aggregation is off (no aggregation: section); /metrics then
  // leaves out the families that only mean something with it on.
  std::optional<AggregationSnapshot> aggregation;
  std::vector<PoolSnapshot> pools;
  // nullopt when in-band telemetry is off (no telemetry: section).
  std::optional<IntSnapshot> telemetry;
  // Filled by the HTTP server that serves the snapshot; nullopt elsewhere.
  std::optional<HttpSnapshot> http;
};

// One MAC table entry as the API shows it.
struct MacEntrySnapshot {
  uint16_t vlan = 0;
  common::MacAddr mac;
  uint16_t port_index = 0;
  std::string port;  // the port's name
  bool is_static = false;
  // Seconds since a worker last saw the MAC as a source; 0 for static entries.
  double age_seconds = 0;
};

// Copies every counter and port state out of the dataplane, and reads this
// process's state (CollectProcess). [any]
StatsSnapshot CollectSnapshot(const dataplane::Dataplane& dp);

// This process's pid, start time, memory and open descriptors, from /proc;
// fields it cannot read stay 0. [any]
ProcessSnapshot CollectProcess();

// Job index `index`'s counters summed over every lcore; all zero when
// aggregation is off. Which job owns the index is only certain on the control
// thread, between its table commands (JobControl reads them there). [any]
JobCounterValues CollectJobCounters(const dataplane::Dataplane& dp, uint16_t index);

// Every MAC table entry, sorted by (VLAN, MAC). [any]
// The table is read bucket by bucket while the control thread may learn and
// age, so an entry that moves during the walk can appear once or be missed.
std::vector<MacEntrySnapshot> CollectMacEntries(const dataplane::Dataplane& dp);

}  // namespace aggswitch::control
