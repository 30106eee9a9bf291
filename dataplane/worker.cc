#include "dataplane/worker.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <sys/prctl.h>

#include <algorithm>

#include "dataplane/unmap_guard.h"

namespace aggswitch::dataplane {

namespace {

AggregationSetup WithFinals(AggregationSetup setup, FinalDelivery* finals) {
  setup.finals = finals;
  return setup;
}

}  // namespace

Worker::Worker(const WorkerSetup& setup, const ForwardingPlan& plan, MacTable& macs,
               WorkerChannels& channels, rte_mempool* pool, LcoreStats& stats,
               const std::atomic<bool>& quit)
    : setup_(setup),
      channels_(channels),
      pool_(pool),
      stats_(stats),
      quit_(quit),
      clock_{0, setup.agg.seen_shift, setup.clock != nullptr ? setup.clock : &TscClock()},
      tx_(setup.port_ids, setup.tx_queue, pool, stats, setup.faults, setup.lcore,
          setup.linear_tx_ports, *clock_.source),
      answers_(plan, pool, stats, tx_, {setup.agg.result_src_ip, setup.agg.udp_port}, clock_),
      finals_(setup.agg.jobs, setup.agg.store, answers_, stats, clock_, setup.agg.final_retry_cycles,
              setup.agg.final_give_up_cycles),
      tree_({setup.agg.jobs, setup.agg.slots, setup.agg.bypass, setup.agg.regions,
             setup.agg.n_workers, setup.agg.index, setup.agg.rebind_ticks, setup.agg.started_tsc,
             setup.agg.settle_cycles, &finals_,
             channels.tan_up.get(), channels.tan_down.get(), setup.agg.holds,
             setup.agg.relocations, setup.agg.kept},
            pool, stats, tx_, answers_, clock_),
      agg_(WithFinals(setup.agg, &finals_), channels, stats, tx_, answers_, tree_, clock_),
      own_(plan, stats, tx_, channels.neighbors.get()),
      l2_(plan, macs, channels.learn.get(), pool, stats, tx_, own_),
      classify_(plan,
                {setup.agg.jobs != nullptr, setup.agg.address, setup.agg.udp_port,
                 setup.agg.result_src_ip},
                stats, tx_) {
  for (uint16_t p = 0; p < config::kMaxPorts; ++p) {
    const config::FaultConfig* f = setup.faults[p];
    if (f != nullptr && f->direction != config::FaultDirection::kTx) {
      rx_faults_[p] = std::make_unique<FaultInjector>(*f, FaultStream(setup.lcore, p, false), clock_.hz());
    }
  }
  std::fill(std::begin(setup_.faults), std::end(setup_.faults), nullptr);  // the config may go away
  if (setup.int_settings != nullptr) {
    int_ = std::make_unique<IntStage>(*setup.int_settings, setup.worker_index, stats,
                                      channels.int_records.get(), *clock_.source);
    classify_.set_int(int_.get());
    tx_.set_int(int_.get());
  }
}

int Worker::LaunchEntry(void* arg) {
  static_cast<Worker*>(arg)->Run();
  return 0;
}

void Worker::Run() {
  UnmapGuard::Online(setup_.lcore);
  // A sleep of a few microseconds should not last the kernel's default
  // timer slack (50 us) longer.
  if (setup_.idle_sleep_us != 0) (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  clock_.tsc = clock_.Read();
  while (!quit_.load(std::memory_order_relaxed)) {
    const bool got = PollOnce();
    UnmapGuard::Quiescent(setup_.lcore);  // no pointer into port memory is held here
    if (setup_.idle_sleep_us == 0) continue;
    if (got) {
      empty_polls_ = 0;
    } else if (++empty_polls_ >= kPollsBeforeSleep) {
      // Idle: give the CPU back for a while. The sleep counts as idle time.
      rte_delay_us_sleep(setup_.idle_sleep_us);
      const uint64_t now = clock_.Read();
      stats_.lcore.idle_cycles.Add(now - clock_.tsc);
      stats_.lcore.idle_sleeps.Add(1);
      clock_.tsc = now;
      empty_polls_ = 0;
    }
  }
  UnmapGuard::Offline(setup_.lcore);
  if (reader_online_) {
    setup_.agg.jobs->ReaderOffline(setup_.agg.reader_id);
    reader_online_ = false;
  }
}

bool Worker::PollOnce() {
  if (clock_.tsc == 0) clock_.tsc = clock_.Read();
  if (aggregation()) {
    if (!reader_online_) {
      setup_.agg.jobs->ReaderOnline(setup_.agg.reader_id);
      reader_online_ = true;
    }
    if (channels_.handoff != nullptr) agg_.DrainHandoffs();
    if (agg_.timers().armed()) agg_.timers().Run();
    if (finals_.pending()) finals_.Run();
    tree_.SweepBypass();
    tx_.Flush();
  }
  uint64_t busy = 0, idle = 0, busy_packets = 0;
  for (uint16_t i = 0; i < setup_.n_rx; ++i) {
    const WorkerSetup::Rx& rx = setup_.rx[i];
    rte_mbuf* pkts[kBurstSize];
    FaultInjector* faults = rx_faults_[rx.port_index].get();
    // Half a burst from a faulty port leaves room for its duplicates and held frames.
    uint16_t n = rte_eth_rx_burst(setup_.port_ids[rx.port_index], rx.queue, pkts,
                                  faults == nullptr ? kBurstSize : kBurstSize / 2);
    if (faults != nullptr) {
      n = faults->Apply(pkts, n, kBurstSize, pool_, stats_.ports[rx.port_index], clock_.tsc);
    }
    if (n > 0) {
      ProcessBurst(rx.port_index, pkts, n, static_cast<uint32_t>(clock_.tsc >> setup_.tick_shift));
      tx_.Flush();
      l2_.FlushLearn();
    }
    // One clock read per queue; the previous read starts this one's interval.
    const uint64_t now = clock_.Read();
    if (n > 0) {
      busy += now - clock_.tsc;
      busy_packets += n;
    } else {
      idle += now - clock_.tsc;
    }
    clock_.tsc = now;
  }
  // Frames a TX injector held back go out even when nothing else does.
  tx_.Release();
  if (int_ != nullptr) {
    int_->FlushRecords();
    if (int_->marked_any() && !tx_.holding()) int_->ClearMarked();
  }
  // No Job pointer is held past this point. Reporting it every 16th pass is
  // plenty for a grace period (microseconds) and keeps the shared QSBR
  // counter line out of most passes.
  if (++polls_ % kControlEvery == 0) ServeControl();
  LcoreCounters& c = stats_.lcore;
  if (busy) {
    c.busy_cycles.Add(busy);
    c.busy_packets.Add(busy_packets);
  }
  if (idle) c.idle_cycles.Add(idle);
  c.polls.Add(1);
  return busy_packets != 0;
}

void Worker::ProcessBurst(uint16_t in_port, rte_mbuf* const* pkts, uint16_t n, uint32_t now_tick) {
  Burst burst;
  if (int_ != nullptr) int_->BeginBurst(in_port, clock_.tsc, n);
  classify_.Sort(in_port, pkts, n, &burst);
  if (burst.agg.n != 0) agg_.Process(in_port, burst.agg);
  l2_.Process(in_port, burst.l2, now_tick);
}

void Worker::ServeControl() {
  if (channels_.control_tx != nullptr && rte_ring_count(channels_.control_tx.get()) != 0) {
    FrameRef frames[8];
    const unsigned n = rte_ring_sc_dequeue_burst_elem(channels_.control_tx.get(), frames,
                                                      sizeof(FrameRef), 8, nullptr);
    for (unsigned i = 0; i < n; ++i) l2_.FloodFromSwitch(frames[i].m, frames[i].vlan);
  }
  if (!reader_online_) {
    tx_.Flush();
    return;
  }
  if (channels_.reinject != nullptr) agg_.DrainReinjects();
  // The store's copies of removed jobs, a few table positions at a time.
  if (setup_.agg.store != nullptr) setup_.agg.store->Sweep(*setup_.agg.jobs, kStoreSweepPerServe);
  if (channels_.relocate != nullptr) agg_.DrainRelocations();
  // Dead chunks give back the contributions they hold.
  agg_.timers().SweepStale();
  agg_.timers().SweepExcluded();
  if (tree_.tan_results_waiting()) tree_.DrainTanResults();
  tx_.Flush();
  setup_.agg.jobs->Quiescent(setup_.agg.reader_id);
  if (channels_.slot_dump->Pending()) agg_.ContinueSlotDump(*channels_.slot_dump);
  if (channels_.bypass_dump->Pending()) tree_.ContinueBypassDump(*channels_.bypass_dump);
}

}  // namespace aggswitch::dataplane
