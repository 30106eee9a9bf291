// The L2 switch: learns each frame's source, sends known unicast to its port
// and floods the rest to the VLAN's other ports, adding, rewriting or
// removing the 802.1Q tag per egress port. Frames to the switch's MAC, and
// broadcasts, go to the own-address stage first.
//
// Per vector: one bulk lookup of every source and destination (VLAN, MAC),
// once per run of frames with the same addresses; then per frame: refresh a
// known source or queue a learn request for a new or moved one, and forward.
//
//   L2Stage l2(plan, macs, channels.learn.get(), pool, stats, tx, own);
//   l2.Process(in_port, burst.l2, now_tick);
//   l2.FlushLearn();   // after the burst: one enqueue of its learn requests
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstdint>

#include "dataplane/classify.h"
#include "dataplane/counters.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/mac_table.h"
#include "dataplane/own_address_stage.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

class L2Stage {
 public:
  L2Stage(const ForwardingPlan& plan, MacTable& macs, rte_ring* learn_ring, rte_mempool* pool,
          LcoreStats& stats, TxBuffers& tx, OwnAddressStage& own)
      : plan_(plan), macs_(macs), learn_ring_(learn_ring), pool_(pool), stats_(stats), tx_(tx),
        own_(own) {}

  // Switches the frames of `v`, all received on `in_port`; `now_tick` is the
  // MAC table's clock.
  void Process(uint16_t in_port, const L2Vector& v, uint32_t now_tick);
  // Floods an untagged frame of the switch's own (an ARP request) on `vlan`.
  void FloodFromSwitch(rte_mbuf* m, uint16_t vlan);
  // Queues this burst's learn requests for the control thread.
  void FlushLearn();

 private:
  void Forward(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta, uint16_t out_port);
  void Flood(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta);
  // Adds, rewrites or removes the 802.1Q tag for `out_port`. False: no headroom.
  bool FitTag(rte_mbuf* m, const FrameMeta& meta, uint16_t out_port);
  void RequestLearn(uint64_t key, uint16_t port, uint32_t now_tick);

  const ForwardingPlan& plan_;
  MacTable& macs_;
  rte_ring* const learn_ring_;
  rte_mempool* const pool_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  OwnAddressStage& own_;

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
