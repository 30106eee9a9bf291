// The dataplane: mempool, ports, MAC table, learn rings and the worker lcores.
//
// Startup follows DPDK's canonical order (EAL is already up, see eal.h):
// mbuf pool, then for each port configure / adjust descriptors / queue setup on
// the port's socket / promiscuous / start; then Start() launches one Worker per
// worker lcore. Stop() raises the quit flag, waits for every lcore to finish
// its burst, and stops the ports.
//
// The control thread feeds the MAC table from the workers' learn rings
// (ProcessLearnRequests) and ages it (AgeMacTable); nothing else writes shared
// state. Metrics, the API and telemetry read counters and the MAC table
// through the [any] accessors without touching the hot path.
//
//   ASSIGN_OR_RETURN(auto dp, Dataplane::Create(config));
//   RETURN_IF_ERROR(dp->Start());
//   while (running) { dp->ProcessLearnRequests(); dp->AgeMacTable(); sleep(1ms); }
//   dp->Stop();
//
// Thread safety: each method says [control] (the main lcore's control thread),
// or [any] (safe from any thread, e.g. HTTP handlers, while workers run).
#pragma once

#include <rte_ethdev.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aggregator/bypass_table.h"
#include "aggregator/job_table.h"
#include "aggregator/relocation_map.h"
#include "aggregator/slot_table.h"
#include "common/clock.h"
#include "common/status.h"
#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/escalation_policy.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/mac_table.h"
#include "dataplane/port_stats.h"
#include "dataplane/hold_buffers.h"
#include "dataplane/kept_results.h"
#include "dataplane/parameter_store.h"
#include "dataplane/int_stage.h"
#include "dataplane/worker.h"
#include "dataplane/worker_channels.h"
#include "dataplane/xsk_stats.h"

namespace aggswitch::dataplane {

// MAC table events counted by the control thread.
struct MacEventCounters {
  Counter learned;          // new entries
  Counter moved;            // entries that changed port
  Counter aged;             // entries removed by aging
  Counter static_conflicts; // a static MAC seen on another port
  Counter table_full;       // learn requests refused: table full
};

class Dataplane {
 public:
  // Builds everything but launches nothing. EAL must be initialised. With a
  // job table, the workers also run the aggregation path; the table must
  // outlive the dataplane. [control]
  // The largest MTU a net_af_xdp port takes: its frames are received into
  // mbufs, each one 4 KiB UMEM chunk. [after EAL init]
  static uint16_t MaxAfXdpMtu();

  // `clock` (must outlive the dataplane): what the workers and the control
  // side read the time from (common/clock.h); null: the TSC (TscClock).
  static common::Result<std::unique_ptr<Dataplane>> Create(const config::Config& config,
                                                          aggregator::JobTable* jobs = nullptr,
                                                          const common::Clock* clock = nullptr);
  ~Dataplane();
  Dataplane(const Dataplane&) = delete;
  Dataplane& operator=(const Dataplane&) = delete;

  // Launches every worker on its lcore. [control]
  common::Status Start();
  // Asks workers to finish their current burst, waits for them, stops the ports.
  // Idempotent. [control]
  void Stop();
  bool running() const { return running_; }

  // One pass of worker `index` over its RX queues on the calling thread; for
  // deterministic tests. Only while not running. [control]
  void PollWorkerOnce(size_t index);

  // Drains the workers' learn rings into the MAC table. [control]
  void ProcessLearnRequests();
  // Ages a bounded share of the MAC table (the whole table about every
  // aging_seconds / 4). [control]
  void AgeMacTable();
  // Replaces the static MAC entries and the aging time (SIGHUP reload). [control]
  common::Status ApplyMacTableConfig(const config::MacTableConfig& mac_config);

  // --- Readers [any] ---
  const ForwardingPlan& plan() const { return *plan_; }
  const MacTable& mac_table() const { return *mac_table_; }
  const MacEventCounters& mac_events() const { return mac_events_; }
  uint32_t aging_seconds() const { return aging_seconds_.load(std::memory_order_relaxed); }
  size_t port_count() const { return ports_.size(); }
  // The buffer pools and how full they are: "mbuf", and "hold" when the
  // aggregation path holds contributions. [any]
  std::vector<PoolStats> PoolStatsNow() const;
  PortInfo GetPortInfo(size_t port_index) const;
  PortTotals GetPortTotals(size_t port_index) const;
  size_t worker_count() const { return workers_.size(); }
  WorkerInfo GetWorkerInfo(size_t index) const { return workers_[index].info; }
  const LcoreStats& worker_stats(size_t index) const { return *workers_[index].stats; }
  // How full each of worker `index`'s rings is now. [any]
  std::vector<RingFill> WorkerRingsNow(size_t index) const;
  // Worker `index`'s aggregation slots, or nullptr when aggregation is off. [any]
  const aggregator::SlotTable* worker_slots(size_t index) const {
    return index < workers_.size() ? workers_[index].slots.get() : nullptr;
  }
  // Worker `index`'s share of the parameter store, or nullptr without one. [any]
  const ParameterStore* worker_store(size_t index) const {
    return index < workers_.size() ? workers_[index].store.get() : nullptr;
  }
  // Store buffers job `index` of `generation` holds, over every worker. [any]
  uint32_t JobStoreBuffers(uint16_t index, uint32_t generation) const;

  // --- Aggregation ---

  // Whether the workers run the aggregation path (the config has an
  // aggregation: section and Create() got a job table). [any]
  bool aggregation_enabled() const { return jobs_ != nullptr; }
  // Job index `index`'s counters summed over every lcore, added to out[]
  // (indexed by JobCounter). Nothing when aggregation is off. [any]
  void ReadJobCounters(uint16_t index, uint64_t (&out)[kNumJobCounters]) const;
  // The slot completion latency histogram summed over every lcore. [any]
  SlotLatencyTotals ReadSlotLatency() const;
  // In-band registrations by outcome, indexed by RegistrationResult. [any]
  uint64_t registrations(RegistrationResult r) const {
    return registrations_[static_cast<size_t>(r)].Get();
  }
  // Hands the task info of each datagram the workers passed up (a
  // contribution with the TASK_INFO flag, or a TASK_INFO datagram, naming an
  // unknown job) to `admit`, the control side's admission
  // (JobControl::RegisterInBand), and hands each datagram back to its
  // worker: to be counted and answered when the job now exists, or refused
  // with a NACK that says why (the result's NackReason). The dataplane
  // decides nothing about the job itself. Returns the datagrams handled.
  // [control]
  using Admission = std::function<RegistrationResult(const RegistrationRequest& request)>;
  size_t ProcessRegistrations(const Admission& admit);
  // Answers the contributions the workers escalated (their slot held
  // another chunk) as the EscalationPolicy decides: the job moves to a
  // partition of its own (every worker is told first), or the chunk gets a
  // spare slot, or it is refused (a CONFLICT to the parameter node, or NACK
  // slot_busy, at its worker). Each goes back to the worker that escalated
  // it. Returns the contributions handled. [control]
  size_t ProcessEscalations(std::chrono::steady_clock::time_point now);
  // What the control thread did with collisions. [any]
  EscalationStats escalation_stats() const {
    return escalations_ ? escalations_->stats() : EscalationStats{};
  }
  // EscalationPolicy::LiveLeases. [control]
  uint32_t LiveSpareLeases(std::chrono::steady_clock::time_point now) const {
    return escalations_ ? escalations_->LiveLeases(now) : 0;
  }
  // A copy of up to `limit` busy slots of every worker. While the workers run,
  // each copies its own slots when asked (a few hundred per poll loop, so a
  // dump never stalls a worker) and this call waits for all of them, up to
  // `timeout`: Unavailable when one did not answer. Stopped workers' slots are
  // read directly. Callers are serialised. [any thread but a worker]
  common::Result<SlotDump> DumpSlots(size_t limit, std::chrono::milliseconds timeout) const;
  // --- The tree (docs/stragglers.md) [control] ---

  // Drains the ARP replies the workers saw for the switch, one call each.
  size_t ProcessNeighborReports(const std::function<void(const NeighborReport&)>& fn);
  // Drains the workers' arrival-offset samples (straggler prediction), one
  // call each; the sample is only valid during the call.
  size_t ProcessOffsetSamples(const std::function<void(const OffsetSample&)>& fn);
  // Floods `len` bytes (an untagged Ethernet frame) on `vlan` through worker 0.
  // False when the mempool or the ring is full.
  bool SendFromSwitch(const uint8_t* frame, uint32_t len, uint16_t vlan);
  // Drains what the workers sent to this switch's own TAN: each datagram from
  // its aggregation header on.
  size_t ProcessTanInput(const std::function<void(const uint8_t* datagram, uint32_t len)>& fn);
  // Hands a result of this switch's own TAN (a datagram from the aggregation
  // header on) to the worker that owns the chunk's slot, which replicates it
  // down the tree: the spare slot leased to the chunk, named in the copy's
  // slot hint, or else its placed slot. False when the mempool or the ring
  // is full or it does not parse.
  bool SendTanResult(const uint8_t* datagram, uint32_t len);
  // Worker `index`'s bypass table, or nullptr when aggregation is off. [any:
  // only its relaxed gauges]
  const aggregator::BypassTable* worker_bypass(size_t index) const {
    return index < workers_.size() ? workers_[index].bypass.get() : nullptr;
  }

  // A copy of up to `limit` live bypass entries of every worker, the way
  // DumpSlots copies slots. [any thread but a worker]
  common::Result<BypassDump> DumpBypass(size_t limit, std::chrono::milliseconds timeout) const;

  // --- Uplink groups and path decisions (uplink_groups.h) ---

  // Publishes `decisions` as the uplink groups' path decision table and
  // frees the one it replaces once no worker can read it. InvalidArgument
  // naming the entry ("decisions[2].port: ...") for a port out of range, a
  // prefix with host bits, one prefix twice, or too many. Callers are
  // serialised. [any thread but a worker]
  common::Status SetPathDecisions(const std::vector<PathDecision>& decisions);
  // The decisions in force, as given. [any]
  std::vector<PathDecision> path_decisions() const;
  // Reads the link state of the uplink groups' members, at most every
  // 100 ms, and when it changed moves the flooding and the flows of a
  // member that went down to the others (UplinkGroups::SetDown). [control]
  void WatchGroupLinks();

  // --- In-band telemetry (int_stage.h) ---

  // The settings every worker's INT stage shares; null when the config has
  // no telemetry section. [any]
  const IntSettings* int_settings() const { return int_settings_.get(); }
  // Publishes a new watch list (entries validated as config's) and frees
  // the old one once no worker can read it. FailedPrecondition when
  // telemetry is off. Callers are serialised. [any thread but a worker]
  common::Status SetWatchList(const std::vector<config::WatchEntry>& entries);
  // The watch list in force, as configured. [any]
  std::vector<config::WatchEntry> watch_entries() const;
  // Drains the workers' hop records, one call each. [control]
  size_t ProcessIntRecords(const std::function<void(const IntHopRecord&)>& fn);
  // What the control side did with them: written by the exporter [control],
  // read [any].
  IntExportCounters& int_export() { return int_export_; }
  const IntExportCounters& int_export() const { return int_export_; }

  uint64_t tsc_hz() const { return tsc_hz_; }
  // The clock the workers read. [any]
  const common::Clock& clock() const { return *clock_; }
  // The MAC table's clock: TSC >> tick_shift, about one tick per second.
  uint32_t NowTick() const;
  double TickSeconds() const;
  // The clock of member bindings (Job::LastSeen): about a millisecond a
  // tick; and a span of milliseconds on it (0 stays 0). [any]
  uint32_t SeenTick() const;
  uint32_t MillisecondsToTicks(uint32_t ms) const;
  // Where each job's chunks live (slot_placement.h). [any]
  const aggregator::SlotRegions& slot_regions() const { return slot_regions_; }

 private:
  struct Port {
    config::PortConfig config;
    uint16_t port_id = 0;
    uint16_t rx_queues = 0;
    uint16_t tx_queues = 0;
    bool started = false;
    bool tx_chains = true;  // the driver sends chained mbufs (RTE_ETH_TX_OFFLOAD_MULTI_SEGS)
    std::vector<XskSocket> xsks;  // net_af_xdp: its AF_XDP sockets (xsk_stats.h)
  };

  Dataplane() = default;
  common::Status CreateMempool(const config::Config& config);
  common::Status OpenPort(const config::PortConfig& pc, uint16_t rx_queues, uint16_t tx_queues,
                          bool fast_free);
  common::Status CreateWorkers(const config::Config& config, aggregator::JobTable* jobs);
  common::Status SetUpTelemetry(const config::Config& config);
  void StopPorts();

  std::unique_ptr<ForwardingPlan> plan_;
  std::unique_ptr<MacTable> mac_table_;
  MacEventCounters mac_events_;
  std::atomic<uint32_t> aging_seconds_{0};
  MempoolPtr pool_;
  // Payload buffers for the contributions ordered slots hold until they
  // reduce them in member order: a pool of its own, so that no number of
  // held contributions can starve RX of mbufs (aggregation.hold).
  MempoolPtr hold_pool_;
  std::vector<Port> ports_;
  // Everything of one worker lcore; the Worker goes first (it refers to the rest).
  struct WorkerParts {
    WorkerInfo info;
    std::unique_ptr<LcoreStats> stats;
    std::unique_ptr<WorkerChannels> channels;
    // Aggregation only:
    std::unique_ptr<aggregator::SlotTable> slots;      // its share of the slots
    std::unique_ptr<aggregator::BypassTable> bypass;   // its bypass entries
    std::unique_ptr<HoldBuffers> holds;                // its view of the hold pool
    std::unique_ptr<ParameterStore> store;             // its share of the store; null: none
    // The chunks moved off the placed slots it owns; null without spare slots.
    std::unique_ptr<aggregator::RelocationMap> relocations;
    std::unique_ptr<KeptResults> kept;
    std::unique_ptr<Worker> worker;
  };
  std::vector<WorkerParts> workers_;
  aggregator::JobTable* jobs_ = nullptr;
  Counter registrations_[kNumRegistrationResults];
  // Spare slot leases and job moves (null without aggregation).
  std::unique_ptr<EscalationPolicy> escalations_;
  mutable std::mutex dump_mu_;  // serialises DumpSlots callers (never taken by a worker)
  // A fresh single-segment mbuf holding `len` bytes; nullptr when the pool is empty.
  rte_mbuf* CopyToMbuf(const uint8_t* bytes, uint32_t len) const;
  // Asks every worker to copy out its part into its exchange (`which`) and
  // waits for all of them, up to `timeout`. [under dump_mu_]
  template <typename Exchange>
  common::Status AwaitDumps(std::unique_ptr<Exchange> WorkerChannels::*which, uint32_t per_worker,
                            std::chrono::milliseconds timeout, const char* what) const;
  // In-band telemetry; null when off.
  std::unique_ptr<IntSettings> int_settings_;
  mutable std::mutex watch_mu_;  // serialises SetWatchList
  mutable std::mutex decisions_mu_;  // serialises SetPathDecisions
  uint64_t group_links_checked_tsc_ = 0;  // WatchGroupLinks [control]
  std::vector<config::WatchEntry> watch_entries_;
  IntExportCounters int_export_;
  uint16_t agg_udp_port_ = config::kDefaultAggregationUdpPort;
  uint16_t n_agg_workers_ = 0;
  aggregator::SlotRegions slot_regions_;
  uint32_t seen_shift_ = 21;
  std::atomic<bool> quit_{false};
  bool running_ = false;
  const common::Clock* clock_ = nullptr;
  uint64_t tsc_hz_ = 0;
  uint32_t tick_shift_ = 30;
};

}  // namespace aggswitch::dataplane
