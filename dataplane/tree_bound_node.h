// The aggregation path's node for what goes on unreduced, towards the
// tree above or to the job's members (docs/stragglers.md,
// docs/parameter-node.md, docs/protocol.md): a main server's DISTRIBUTE
// replicated to every member, late data from a child switch on to the TAN,
// and contributions for the parameter node.
//
//   TreeBoundNode bound(slots, timers, above, tree, answers, tx, stats, clock);
//   bound.Late(f);   // a child switch's LATE at its chunk's home slot owner
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/wire.h"
#include "dataplane/agg_frame.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/from_above_node.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/slot_timers.h"
#include "dataplane/tree_stage.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_slots.h"

namespace aggswitch::dataplane {

class TreeBoundNode {
 public:
  TreeBoundNode(WorkerSlots& slots, SlotTimers& timers, FromAboveNode& above, TreeStage& tree,
                Answers& answers, TxBuffers& tx, LcoreStats& stats, const LcoreClock& clock)
      : slots_(slots),
        timers_(timers),
        above_(above),
        tree_(tree),
        answers_(answers),
        tx_(tx),
        stats_(stats),
        clock_(clock) {}

  // A DISTRIBUTE from a job's main server (its key checked): replicated to
  // every member when each has an address, and ACKed to the main server
  // with the copies sent in `aux`; else a NACK (not_main_server,
  // members_unbound). Consumes `m`.
  void Distribute(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt,
                  uint32_t header_offset, const aggregator::MemberAddr& sender, uint16_t in_port);
  // Binds the job's main server to `sender`, a datagram from its address
  // and port with the job's key, or checks it against its binding
  // (Job::BindMainServer); false, counted as main_server_refused, when
  // another ingress port, VLAN, MAC or UDP port holds it.
  bool MainServerBound(const aggregator::Job& job, const aggregator::MemberAddr& sender);
  // Late data of a rank from a child switch, at its chunk's home slot
  // owner: on towards the TAN unreduced (TreeStage::ForwardLate), unless the
  // slot here counted it already (LateCountedHere: dropped as a duplicate,
  // counted late_counted). A late partial naming its content holds only
  // ranks its switch's partial lacked, never counted here. Consumes `f.m`.
  void Late(const AggFrame& f);
  // A contribution marked AGGREGATE_AT_PS at its chunk's slot (release at a
  // retransmission): with nothing of the chunk here it goes on to the
  // parameter node; a slot aggregating the chunk sends its partial on at
  // once and the contribution after it as late data. Returns false when the
  // slot holds the chunk complete or forwarded: the usual path answers it.
  bool ToParameterNode(const AggFrame& f);

 private:
  // Late data of rank `node` from a child switch, for a chunk whose slot on
  // this lcore (still waiting for its answer: aggregating or forwarded)
  // counted the partial of the child that covers `node` without the child
  // listing `node` missing: that partial holds the rank's data already, and
  // the slot's partial carries it on. The child's slot gave way once its
  // partial went up, and the rank's resend found no slot there and went up
  // as late data (a CONFLICT partial, which the slot takes as a repeat):
  // sent on, the TAN would get the rank twice, and whichever of the two
  // came second it would drop, with every other rank the partial holds.
  // False when the slot's inherited missing ids name `node`, or an id no
  // child covers (a switch below a child: its ranks are unknown here), or
  // overflowed. O(inherited ids × log covered ids).
  bool LateCountedHere(const aggregator::Job& job, uint32_t seq, uint16_t node) const;

  WorkerSlots& slots_;
  SlotTimers& timers_;
  FromAboveNode& above_;
  TreeStage& tree_;
  Answers& answers_;
  TxBuffers& tx_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
};

}  // namespace aggswitch::dataplane
