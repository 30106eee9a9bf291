// What a worker tells its members, unasked or on their questions, about
// the data a slot lacks (docs/protocol.md, NOTICE): NOTICE missing to the
// members a waiting slot lacks (after a gap in a member's chunks, a refusal
// slot_busy or slot_quota, a question), NOTICE missing or forgotten to the
// members past a chunk whose result an earlier life of its slot gave them,
// and the parent asked for a result it keeps. It sends through Answers and
// TreeStage and holds no state of its own.
//
//   MemberNotices notices(slots, jobs, answers, tree, stats, clock, n_workers);
//   notices.NoticeGap(job, seq, ack, first, node);   // a member's datagram at its slot
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"
#include "dataplane/agg_frame.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/tree_stage.h"
#include "dataplane/worker_slots.h"

namespace aggswitch::dataplane {

class MemberNotices {
 public:
  MemberNotices(WorkerSlots& slots, const aggregator::JobTable* jobs, Answers& answers,
                TreeStage& tree, LcoreStats& stats, const LcoreClock& clock, uint16_t n_workers)
      : slots_(slots),
        jobs_(jobs),
        answers_(answers),
        tree_(tree),
        stats_(stats),
        clock_(clock),
        gap_distance_((kGapChunks + n_workers - 1) / n_workers * n_workers) {}

  // A member sends its chunks in order, so when its first transmission of
  // chunk `seq` arrives while the slot of chunk seq - gap_distance_ still
  // waits without it, that earlier contribution was lost: the member is told
  // at once (NOTICE missing, unasked) and resends it about a round trip
  // before its own loss detection, which needs later results, would.
  // Likewise, on its resends and QUERYs (not `first`, a first
  // transmission), for the chunk at its ack watermark `ack`, when that lies
  // gap_distance_ or more before `seq`: the chunk it waits for, whose loss
  // no first transmission may be left to reveal. At most one NOTICE per
  // datagram.
  void NoticeGap(const aggregator::Job& job, uint32_t seq, uint32_t ack, bool first, uint16_t node);
  // `f` is refused slot_busy at its placed slot: when this lcore owns that
  // slot and the chunk there aggregates, the members that chunk lacks are
  // told NOTICE missing (SlotTable::TellAbsent says when): the chunk keeps
  // the slot from the refused one until they send, and a member whose data
  // was lost, or whose own refused resend went unanswered, would wait its
  // backed-off timeout before it asked again. Not those that are excluded,
  // hold the chunk's result already (past it by their ack watermark:
  // NoticeForgotten's), or are switches below (Job::IsSwitch, an in-band
  // job's leaves too: a NOTICE missing from here is a lost partial to them;
  // they send theirs again on their own members' questions). O(members).
  void NoticeAbsent(const AggFrame& f);
  // NoticeAbsent's notices for this lcore's slot `local`, whatever chunk it
  // holds while it aggregates (or, with `forwarded_too`, while its partial
  // awaits the answer from above), each counted in `sent`. Also while a
  // member the slot counted asks after its chunk (answered held): the
  // members it waits for are as likely to have lost their data, and with a
  // window no larger than the gap notices' distance no later chunk of
  // theirs comes to tell.
  void NoticeAbsentAt(uint32_t local, Counter& sent, bool forwarded_too = false);
  // A member's chunk was refused NACK slot_quota: the chunk at the member's
  // ack watermark `ack` (the oldest it has no result of) holds the quota
  // with the job's other oldest chunks. When this lcore owns its slot (home,
  // or the moved partition) and it aggregates, the members it lacks are
  // told NOTICE missing, as by NoticeAbsent and at its rate: the refused
  // chunks, resent every quota retry, wait for them, and a member whose
  // data was lost would otherwise send it again only at its own
  // retransmission timeout. O(members).
  void NoticeQuotaHolder(const aggregator::Job& job, uint32_t ack);
  // A member whose ack watermark is past a slot's chunk has that chunk's
  // result, yet the slot lacks its data: the result came from an earlier
  // life of the slot (the switch restarted, or the job was added again)
  // and did not reach every member. The member reduced it into its buffer
  // and will not send the chunk again unless told: each such member gets
  // a NOTICE missing, and resends the contribution it kept. An excluded
  // member too (a predicted straggler): its data goes around the slot to
  // the TAN once it sends it, but with the result it sends nothing. Its data
  // completes an aggregating slot, or goes on as late data after a
  // forwarded one's partial (its slot timed out waiting for it). Called
  // while a held member asks after the chunk (a QUERY): each time for an
  // aggregating slot, at most once per resend gap for a forwarded one.
  // `slot` null: no slot holds the chunk's data here, and every member past
  // it is asked. With `below`, a child switch past the chunk is told
  // NOTICE forgotten instead (it keeps no data of a chunk that went up, and
  // asks its own members in turn, FromAboveNode::Missing): only where AsksBelow, or
  // on a root's NOTICE forgotten. With `first_ack`, past the chunk means
  // a member's first watermark here (Job::FirstAck): it had the result
  // before this switch knew it. Nobody is asked at a root whose TAN is
  // remote (agg-ps) for a chunk whose result depends on the order of the
  // data (a float sum, SameInAnyOrder): the TAN answers the slot's partial
  // with the result it keeps of a finished chunk, and a chunk it does not
  // hold finished (the root's slot completed it before the switch
  // restarted, or the TAN's kept result expired) it would reduce anew from
  // the members' data in its own order, other bytes than the members past
  // the chunk hold; the members the slot counted get its INCOMPLETE at its
  // give-up instead (seed 1795673). O(members).
  void NoticeForgotten(const aggregator::Job& job, uint32_t seq, const aggregator::Slot* slot,
                       bool below, bool first_ack = false);
  // Whether a child switch past `slot`'s chunk is told NOTICE forgotten
  // (NoticeForgotten's `below`): at a root, for a chunk computed again to
  // the same bytes (not a float sum). O(1).
  static bool AsksBelow(const aggregator::Job& job, const aggregator::Slot& slot);
  // A counted child's repeated partial (`opcode`) of `slot`'s chunk at a
  // root: the members past the chunk the slot lacks had its result from
  // before the switch restarted, which nothing above may hold (a TAN asked
  // by AskAboveIfDone may never have had the chunk). They are asked for
  // their data again (NoticeForgotten, below) where AsksBelow: a child
  // switch below asks its own members. O(members).
  void AskBelowIfForgotten(const aggregator::Job& job, const aggregator::Slot& slot,
                           aggregator::Opcode opcode);
  // Whether `slot`'s chunk is such a chunk (a member past it lacks from the
  // slot) whose result this switch would compute anew, at a root that is
  // its own TAN or has none, and whose reduction depends on the order of
  // the data: a float sum not in member order, or an ordered one at a root
  // that is its own TAN, which started after a member past the chunk had
  // its result (Job::FirstAck), excluded members too. The members past the
  // chunk hold the earlier result; a new one from their resent data would
  // round otherwise, and the ranks would hold different bytes. The members
  // that ask after the chunk get NACK result_lost instead, and none is
  // asked for its data again. `forwarded`: the slot's first data went to
  // this switch's own TAN, which keeps a finished chunk's result and
  // answers a repeat of the first data with it; only a start of this
  // switch since a member past the chunk had its result loses it
  // (Job::FirstAck), whatever the order (seed 1491406: members whose data
  // went around the slot as late data had the TAN's result, and the one
  // member the slot counted, whose copy was lost, was refused).
  // O(members).
  static bool ResultLost(const aggregator::Job& job, const aggregator::Slot& slot,
                         bool forwarded = false);
  // A member the aggregating `slot` lacks that has moved past its chunk
  // (its ack watermark says it holds the result) means the chunk completed
  // before: its slot here gave way once the partial (at a root, the first
  // data) went up, the result came down and missed a child switch, and
  // that child's partial, sent again, claimed a slot for the chunk anew,
  // which the members that moved on never complete (a child switch keeps
  // nothing to resend: only a NOTICE forgotten from a root reaches its
  // members, AskBelowIfForgotten).
  // The parent keeps the result until every member below has acknowledged
  // it, a TAN a finished chunk's for its give-up time: it is asked for it
  // (TreeStage::AskAbove), and its answer reaches every member here. Not
  // at a root without a TAN. Called on a counted child's repeated partial,
  // and on a counted member's QUERY (a member whose result was lost, whose
  // resend claimed the slot after the result came down); O(members).
  void AskAboveIfDone(const aggregator::Job& job, const aggregator::Slot& slot,
                      const aggregator::AggHeader& h);

 private:
  // Whether this lcore's slot of chunk `seq` still waits without `node`.
  bool LacksContribution(const aggregator::Job& job, uint32_t seq, uint16_t node) const;
  void SendGapNotice(const aggregator::Job& job, uint32_t seq, uint16_t node);
  // Whether `slot` inherited a missing id (one a counted partial listed)
  // that member `child`, a switch, covers, or inherited too many to tell.
  // O(inherited ids × log covered ids).
  static bool LackedBelow(const aggregator::Job& job, const aggregator::Slot& slot, uint16_t child);

  // How far a member's chunks may arrive out of order before a gap counts
  // as a loss (NoticeGap): like TCP's three duplicate ACKs.
  static constexpr uint32_t kGapChunks = 3;

  WorkerSlots& slots_;
  const aggregator::JobTable* const jobs_;
  Answers& answers_;
  TreeStage& tree_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
  // kGapChunks rounded up to a multiple of n_workers: chunk seq - gap_distance_
  // then lies in this worker's slots too (unless the region wraps there).
  const uint32_t gap_distance_;
};

}  // namespace aggswitch::dataplane
