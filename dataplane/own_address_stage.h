// The switch's own addresses: answers ARP requests for them and pings to
// them, passes ARP replies to the switch up to the control thread (next-hop
// resolution of the job trees, docs/stragglers.md), and drops, counted, what
// is addressed to the switch but answers nothing.
//
//   OwnAddressStage own(plan, stats, tx, channels.neighbors.get());
//   if (!own.Handle(in_port, m, meta, broadcast)) flood(m);   // not the switch's
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <cstdint>

#include "dataplane/classify.h"
#include "dataplane/counters.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/tx_buffers.h"

namespace aggswitch::dataplane {

class OwnAddressStage {
 public:
  // `neighbors`: where ARP replies to the switch go (NeighborReport); null:
  // nowhere, they are dropped as unhandled.
  OwnAddressStage(const ForwardingPlan& plan, LcoreStats& stats, TxBuffers& tx, rte_ring* neighbors)
      : plan_(plan), stats_(stats), tx_(tx), neighbors_(neighbors) {}

  // A frame to the switch's MAC, or a broadcast or multicast one (`broadcast`
  // for ff:ff:ff:ff:ff:ff): answered, passed up or dropped, and true; false
  // when it is not the switch's, and the caller switches it at L2.
  bool Handle(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta, bool broadcast);

 private:
  // An ARP reply to the switch: passed up. False: not a reply.
  bool ReportNeighbor(uint16_t in_port, const uint8_t* data, uint32_t len, const FrameMeta& meta);

  const ForwardingPlan& plan_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  rte_ring* const neighbors_;
};

}  // namespace aggswitch::dataplane
