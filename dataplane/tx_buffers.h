// Where every frame a worker handles ends: queued for its egress port and sent
// in one tx_burst per port, or dropped and counted with its reason. The last
// stage of every worker: the others hand it their frames, it calls nobody.
//
//   TxBuffers tx(port_ids, tx_queue, pool, stats, faults);
//   tx.Enqueue(out_port, m);                    // a frame to send
//   tx.Drop(in_port, DropReason::kHairpin, m);  // a frame to drop: counted on its ingress port
//   tx.Flush();                                 // end of a burst: one tx_burst per port
//
// A full buffer is flushed before it takes another frame (a result goes to
// many members). A chained frame (a result: its own headers, then the payload
// every member's copy shares) bound for a port whose driver sends only
// single-buffer frames (`linear_ports`, e.g. net_af_xdp) is first copied into
// its header buffer. Ports with fault injection (ports[].faults) pass their
// frames through their injector, which may hold some back: Release() sends
// those even when nothing else goes out.
//
// Thread safety: one TxBuffers per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>
#include <memory>

#include "common/clock.h"
#include "config/config.h"
#include "dataplane/eal.h"
#include "dataplane/counters.h"
#include "dataplane/fault_injector.h"
#include "dataplane/int_stage.h"

namespace aggswitch::dataplane {

inline constexpr uint16_t kBurstSize = 32;
// The "ingress port" of a frame the switch made itself (a partial, a result):
// its drops are counted by the stage that made it, not on a port.
inline constexpr uint16_t kOwnFrame = 0xFFFF;

class TxBuffers {
 public:
  // `port_ids` maps port index -> DPDK port id; `faults` holds ports[].faults
  // by port index (null: none), read by the constructor only, which seeds
  // each injector with FaultStream(lcore, port, true). `linear_ports`: bit p
  // set when port p's driver cannot send chained mbufs. `clock`: the
  // injectors' (the worker's).
  TxBuffers(const uint16_t (&port_ids)[config::kMaxPorts], uint16_t tx_queue, rte_mempool* pool,
            LcoreStats& stats, const config::FaultConfig* const (&faults)[config::kMaxPorts],
            unsigned lcore, uint64_t linear_ports = 0, const common::Clock& clock = TscClock());

  // Queues `m` for `out_port`.
  void Enqueue(uint16_t out_port, rte_mbuf* m) {
    if (__builtin_expect(((linear_ports_ >> out_port) & 1) != 0 && m->nb_segs > 1, 0) &&
        rte_pktmbuf_linearize(m) != 0) {
      Drop(out_port, DropReason::kNoTailroom, m);
      return;
    }
    if (__builtin_expect(count_[out_port] == kBurstSize, 0)) FlushPort(out_port);
    frames_[out_port][count_[out_port]++] = m;
    bytes_[out_port] += m->pkt_len;
    dirty_ |= uint64_t{1} << out_port;
  }
  // Drops `m`, counted on `port`: the ingress port (the egress port for
  // tx_full), or kOwnFrame for a frame the switch made.
  void Drop(uint16_t port, DropReason reason, rte_mbuf* m) {
    CountDrop(port, reason);
    rte_pktmbuf_free(m);
  }
  // Counts a drop of a frame that is already gone (a copy never made).
  void CountDrop(uint16_t port, DropReason reason) {
    if (port != kOwnFrame) stats_.ports[port].drops[static_cast<size_t>(reason)].Add(1);
  }
  // Frees a frame whose content the switch took (a contribution reduced into
  // a slot, an ACK read, a report passed up): not a drop.
  static void Consumed(rte_mbuf* m) { rte_pktmbuf_free(m); }
  // Sends every port's queued frames.
  void Flush() {
    while (dirty_) FlushPort(static_cast<uint16_t>(__builtin_ctzll(dirty_)));
  }
  // Sends what a TX injector held back, on ports with nothing else queued.
  void Release();
  bool pending() const { return dirty_ != 0; }
  // Frames a TX injector holds back, on some port.
  bool holding() const;
  // In-band telemetry: marked frames go through `stage` right before they
  // are sent, while it says marked frames may wait (null: none).
  void set_int(IntStage* stage) { int_ = stage; }

 private:
  [[gnu::noinline]] void FlushPort(uint16_t port);

  uint16_t port_ids_[config::kMaxPorts];
  const uint16_t tx_queue_;
  rte_mempool* const pool_;
  LcoreStats& stats_;
  rte_mbuf* frames_[config::kMaxPorts][kBurstSize];
  uint16_t count_[config::kMaxPorts] = {};
  uint64_t bytes_[config::kMaxPorts] = {};
  uint64_t dirty_ = 0;
  std::unique_ptr<FaultInjector> faults_[config::kMaxPorts];
  uint64_t fault_ports_ = 0;  // ports with a TX injector
  const uint64_t linear_ports_;
  const common::Clock& clock_;  // the fault injectors' delays
  IntStage* int_ = nullptr;
};

}  // namespace aggswitch::dataplane
