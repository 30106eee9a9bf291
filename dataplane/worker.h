// A worker lcore: polls its (port, queue) pairs and runs each burst through
// the stages. The classifier, L2 and aggregation stages take a vector of
// frames and hand their output on; after its checks and slot lookups the
// aggregation path hands each datagram (an AggFrame) to the node that deals
// with it, one at a time.
//
//   RX burst ─► Classifier ─┬─► AggregationStage ─┬─► (hand-off to the slot's owner)
//                           │   checks, reduce    ├─► StoreNode ───────────────────┐
//                           │                     ├─► FromAboveNode ─► TreeStage ──┤
//                           │                     ├─► SlotTimers ─► TreeStage ─────┤
//                           │                     ├─► MemberNotices ─► Answers ────┤
//                           │                     ├─► QueryNode ─► Answers ────────┤
//                           │                     ├─► TreeBoundNode ─► TreeStage ──┤
//                           │                     └─► TreeStage ─► Answers ────────┤
//                           └─► L2Stage ─► OwnAddressStage ────────────────────────┴─► TxBuffers ─► tx_burst
//
// With in-band telemetry, the classifier hands the INT stage each IPv4 frame
// bound for L2 (a countdown, or a transit check on fabric ports), and
// TxBuffers hands it the frames it marked right before tx_burst.
//
// Per poll: the hand-offs other workers queued for this one's slots, the
// slots' timers, then every RX queue: one burst each, classified, the
// aggregation datagrams and then the L2 frames processed, TX flushed. Every
// 16th poll it reports a QSBR quiescent state and looks at its control
// rings: reinjected registrations, its TAN's results, frames to flood, dumps.
//
// No locks, no allocation (mbufs come from the preallocated pool), no
// syscalls, no exceptions, no unbounded loops. Everything a worker writes is
// its own: its counters, its TX queue on each port, its rings' producer side.
// The one syscall is off the packet path: with eal.idle_sleep_us, a worker
// whose last kPollsBeforeSleep polls found no packet sleeps that long, so
// that a switch sharing its CPUs with other work gives them back while no
// traffic comes.
//
// Thread safety: a Worker is driven by exactly one thread: Run() on its lcore,
// or PollOnce() from a test while the dataplane is stopped.
#pragma once

#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "common/clock.h"
#include "config/config.h"
#include "dataplane/aggregation_stage.h"
#include "dataplane/answers.h"
#include "dataplane/classify.h"
#include "dataplane/counters.h"
#include "dataplane/fault_injector.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/int_stage.h"
#include "dataplane/l2_stage.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/mac_table.h"
#include "dataplane/own_address_stage.h"
#include "dataplane/tree_stage.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_channels.h"

namespace aggswitch::dataplane {

inline constexpr size_t kMaxRxQueuesPerWorker = 64;

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
  // Bit p: port p's driver sends only single-buffer frames (no
  // RTE_ETH_TX_OFFLOAD_MULTI_SEGS), so chained results are copied flat first.
  uint64_t linear_tx_ports = 0;
  // eal.idle_sleep_us: how long to sleep after kPollsBeforeSleep empty polls; 0: never.
  uint32_t idle_sleep_us = 0;
  // In-band telemetry (telemetry: in the config), shared by every worker;
  // null: off. `worker_index` interleaves the workers' path sequence numbers.
  const IntSettings* int_settings = nullptr;
  uint16_t worker_index = 0;
  // The switch's clock (common/clock.h), read once per poll; null: the TSC.
  const common::Clock* clock = nullptr;
};

class alignas(64) Worker {
 public:
  Worker(const WorkerSetup& setup, const ForwardingPlan& plan, MacTable& macs,
         WorkerChannels& channels, rte_mempool* pool, LcoreStats& stats,
         const std::atomic<bool>& quit);

  // Polls until the quit flag is raised. [worker lcore]
  void Run();
  // One pass over every RX queue; returns whether any packet arrived. [the
  // worker's thread]
  bool PollOnce();
  // Entry point for rte_eal_remote_launch: `arg` is a Worker*.
  static int LaunchEntry(void* arg);

  // Polls between two looks at the control rings and two QSBR reports.
  static constexpr uint32_t kControlEvery = 16;
  // Empty polls in a row before an idle sleep (eal.idle_sleep_us): a few
  // microseconds of polling, so that a steady stream never waits on a sleep.
  static constexpr uint32_t kPollsBeforeSleep = 64;
  // Parameter store positions ServeControl() examines for removed jobs'
  // copies (ParameterStore::Sweep).
  static constexpr uint32_t kStoreSweepPerServe = 64;

 private:
  void ProcessBurst(uint16_t in_port, rte_mbuf* const* pkts, uint16_t n, uint32_t now_tick);
  // The control rings and dumps, every kControlEvery polls.
  [[gnu::noinline]] void ServeControl();
  bool aggregation() const { return setup_.agg.jobs != nullptr; }

  WorkerSetup setup_;
  WorkerChannels& channels_;
  rte_mempool* const pool_;
  LcoreStats& stats_;
  const std::atomic<bool>& quit_;
  LcoreClock clock_;
  bool reader_online_ = false;
  uint32_t polls_ = 0;
  uint32_t empty_polls_ = 0;  // in a row

  // The stages, each calling only those below it.
  TxBuffers tx_;
  Answers answers_;
  FinalDelivery finals_;
  TreeStage tree_;
  AggregationStage agg_;
  OwnAddressStage own_;
  L2Stage l2_;
  Classifier classify_;
  // In-band telemetry; null when the config has none.
  std::unique_ptr<IntStage> int_;
  // RX fault injection (ports[].faults) by port index; null for most ports.
  std::unique_ptr<FaultInjector> rx_faults_[config::kMaxPorts];
};

}  // namespace aggswitch::dataplane
