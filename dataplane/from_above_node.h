// The aggregation path's node for what comes down about what this switch
// sent up (docs/stragglers.md, docs/aggregation.md): the parent's (or, at
// the root, the TAN's) NACK "not now" or run ended, and its NOTICE missing
// or forgotten about a partial; and the chunks that find no slot here, sent
// up as missing with the members' data after them as late data, in the jobs
// that do so (Job::NoSlot::kUpAsMissing). It keeps a few chunks the parent
// said it lacks that no slot here held.
//
//   FromAboveNode above(slots, notices, tree, stats, clock, rebind_ticks);
//   if (FromAboveNode::AboutPartialSentUp(opcode, aux)) ...   // the checks
//   above.Missing(f);                                         // a NOTICE missing at its slot
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/wire.h"
#include "dataplane/agg_frame.h"
#include "dataplane/counters.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/member_notices.h"
#include "dataplane/tree_stage.h"
#include "dataplane/worker_slots.h"

namespace aggswitch::dataplane {

class FromAboveNode {
 public:
  // `rebind_ticks`: AggregationSetup::rebind_ticks (Job::SlotWatermark).
  FromAboveNode(WorkerSlots& slots, MemberNotices& notices, TreeStage& tree, LcoreStats& stats,
                const LcoreClock& clock, uint32_t rebind_ticks)
      : slots_(slots),
        notices_(notices),
        tree_(tree),
        stats_(stats),
        clock_(clock),
        rebind_ticks_(rebind_ticks) {}

  // The parent (or, at the root, the TAN) refused the partial of a chunk
  // for now (AboutPartialSentUp): a forwarded slot that holds the chunk sends it again
  // after the first resend gap, not a backed-off one
  // (SlotTable::RefusedAbove). Consumes the datagram.
  void Refused(const AggFrame& f);
  // Whether a NACK or NOTICE from above (`aux`, its reason or kind) is
  // about a partial this switch sent up: a NACK "not now" (a quota or a busy
  // slot there, or a new run starting), a NACK run ended (RunEnded), or
  // a NOTICE missing. The others mean nothing to a switch (an unsupported
  // opcode, as before).
  static bool AboutPartialSentUp(aggregator::Opcode opcode, uint32_t aux);
  // The parent (or, at the root, the TAN) refused what this switch sent up
  // under its run label with NACK run_ended: a newer run of the job holds
  // the tree above, and will take nothing of this run. The run ends here
  // too (Job::EndRunAbove: the control thread renews the job), so that the
  // members are told, NACK run_ended, rather than left to time out.
  // Consumes the datagram.
  void RunEnded(const AggFrame& f);
  // The parent (or, at the root, the TAN) lacks the partial of a chunk (a
  // NOTICE missing, the answer to this switch's QUERY or a gap it saw): it
  // was lost on the way. A forwarded slot that holds the chunk sends it
  // again now, at most once per first resend gap (SlotTable::MissedAbove),
  // and keeps the chunk. Without a slot holding it (it gave way, and every
  // member's data goes around one as late data), the chunk is marked
  // lacked above (where the switch sends a chunk that finds no slot up as
  // missing, Job::NoSlot::kUpAsMissing): the next member's data to it,
  // whose header has the chunk's shape (the NOTICE and a QUERY do not),
  // sends it up as missing (UpAsMissingIfLacked). A complete or aggregating
  // slot's answer or partial is on its way: nothing. A NOTICE forgotten
  // (the root lost the chunk's result, and members here have it): a
  // forwarded slot's partial goes again as for a missing one, and the
  // members past the chunk that no aggregating or forwarded slot counted
  // are asked for their data (NoticeForgotten). Consumes the datagram.
  void Missing(const AggFrame& f);
  // Before member data `f` to a chunk no slot holds goes on as late data:
  // when the parent said it lacks the chunk (Missing) and it did not
  // go up as missing within the first resend gap, it does now
  // (TreeStage::SendUpAsMissing), so that the parent counts this switch and
  // completes the chunk without its members, whose data follows.
  void UpAsMissingIfLacked(const AggFrame& f);
  // A contribution (or a child's partial) to a chunk that has no slot here,
  // in a job that sends such chunks up as missing: the first sends the
  // chunk up (TreeStage::SendUpAsMissing), and each goes on as late data
  // behind it. False when the chunk could not be sent up.
  bool UpAsMissing(const AggFrame& f);
  // Whether chunk `seq` of `job` went up as missing from this worker in the
  // job's current run (LackedAbove::went_up). A member's data for it that
  // finds its slot free would otherwise claim the slot once the chunk's
  // short-lived bypass entries are gone, and that slot's partial (the
  // members' data reduced together) is a repeat to the parent, which counted
  // this switch's empty share already: dropped there, or, sent on, dropped
  // by the TAN, which holds some of those members' lates merged already.
  // The member whose late was lost, counted in that slot, is then told
  // `held` and never sends its data alone again. O(1).
  bool WentUpAsMissing(const aggregator::Job& job, uint32_t seq) const {
    const LackedAbove& e = LackedAboveOf(job, seq);
    return e.went_up && e.job_id == job.id() && e.job_generation == job.generation() &&
           e.seq == seq && e.label == job.label();
  }

 private:
  // The parent lacks this switch's partial of chunk `seq` (NOTICE missing),
  // which the members here have not sent because they wait for an earlier
  // chunk's result: the one at their watermark. When this lcore's slot of
  // that chunk went up and no answer came down (lost on the way), its
  // partial goes again, at most once per resend gap (SlotTable::MissedAbove):
  // the parent, past that chunk, answers it with the result. Left to the
  // members' next question, it waits for their backed-off timers.
  void ResendBehind(const aggregator::Job& job, uint32_t seq);
  // Chunks the parent said it lacks that no slot here held (Missing),
  // a few, by job and seq, each overwriting whichever it maps to: this
  // worker's only, as are the slots of the chunks they name.
  struct LackedAbove {
    uint32_t job_id = 0;
    uint32_t job_generation = 0;
    uint32_t seq = 0;
    uint32_t label = 0;     // the run it was noticed in
    bool armed = false;     // up as missing with the next member data
    uint64_t sent_tsc = 0;  // when it last went up as missing so
    // The chunk went up as missing from here (UpAsMissing) in run `label`:
    // the parent counted this switch with nobody's data, and the members'
    // data goes on as late data, never into a slot claimed anew
    // (WentUpAsMissing).
    bool went_up = false;
  };
  // Records that chunk `seq` of `job` went up as missing from here.
  void NoteUpAsMissing(const aggregator::Job& job, uint32_t seq) {
    LackedAbove& e = LackedAboveOf(job, seq);
    if (e.job_id != job.id() || e.job_generation != job.generation() || e.seq != seq ||
        e.label != job.label()) {
      e = LackedAbove{job.id(), job.generation(), seq, job.label()};
    }
    e.went_up = true;
  }
  static constexpr uint32_t kLackedAbove = 16;
  // Where chunk `seq` of `job` is kept in lacked_above_.
  static uint32_t LackedAboveIndex(const aggregator::Job& job, uint32_t seq) {
    return ((seq * 2654435761u) >> 28 ^ job.index()) % kLackedAbove;
  }
  LackedAbove& LackedAboveOf(const aggregator::Job& job, uint32_t seq) {
    return lacked_above_[LackedAboveIndex(job, seq)];
  }
  const LackedAbove& LackedAboveOf(const aggregator::Job& job, uint32_t seq) const {
    return lacked_above_[LackedAboveIndex(job, seq)];
  }
  LackedAbove lacked_above_[kLackedAbove] = {};

  WorkerSlots& slots_;
  MemberNotices& notices_;
  TreeStage& tree_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
  const uint32_t rebind_ticks_;
};

}  // namespace aggswitch::dataplane
