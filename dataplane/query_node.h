// The aggregation path's node for a member's question about a chunk (a
// QUERY) and for what the switch answers from what it holds rather than
// from a slot that counts the datagram (docs/protocol.md, QUERY and NOTICE):
// the slot's cached result, NOTICE held or missing, NACK result_lost, a
// result a root without a TAN kept, and the parent or TAN asked after a
// chunk whose partial went up from here.
//
//   QueryNode queries(slots, notices, tree, answers, tx, stats, clock);
//   queries.Answer(f);   // a member's QUERY at its chunk's slot
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include "aggregator/job_table.h"
#include "aggregator/wire.h"
#include "dataplane/agg_frame.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/member_notices.h"
#include "dataplane/tree_stage.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_slots.h"

namespace aggswitch::dataplane {

class QueryNode {
 public:
  QueryNode(WorkerSlots& slots, MemberNotices& notices, TreeStage& tree, Answers& answers,
            TxBuffers& tx, LcoreStats& stats, const LcoreClock& clock)
      : slots_(slots),
        notices_(notices),
        tree_(tree),
        answers_(answers),
        tx_(tx),
        stats_(stats),
        clock_(clock) {}

  // A member's QUERY about a chunk it sent: the cached result when its slot
  // is complete, NOTICE held while the slot waits for others, else NOTICE
  // missing (send it again).
  void Answer(const AggFrame& f);
  // A question or resend of a chunk no slot holds, which a partial that
  // went up from here counted (TreeStage::CountedUp): NOTICE held, and the
  // parent asked after the partial.
  void HeldWithoutSlot(const AggFrame& f, const aggregator::MemberAddr& addr);
  // A member's data (or a child switch's partial) about a chunk no slot
  // holds, whose result a root without a TAN kept when the slot gave way
  // (TreeStage::LeaveResult): the member gets the result, and the datagram
  // is consumed. False when nothing is kept for it: it goes on its way.
  bool AnsweredFromKept(const AggFrame& f);

 private:
  WorkerSlots& slots_;
  MemberNotices& notices_;
  TreeStage& tree_;
  Answers& answers_;
  TxBuffers& tx_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
};

}  // namespace aggswitch::dataplane
