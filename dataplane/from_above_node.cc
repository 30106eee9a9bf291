#include "dataplane/from_above_node.h"

#include <optional>

#include "aggregator/reduce.h"

namespace aggswitch::dataplane {

bool FromAboveNode::AboutPartialSentUp(aggregator::Opcode opcode, uint32_t aux) {
  using aggregator::NackReason;
  if (opcode == aggregator::Opcode::kNotice) {
    return aux == static_cast<uint32_t>(aggregator::NoticeKind::kMissing) ||
           aux == static_cast<uint32_t>(aggregator::NoticeKind::kForgotten);
  }
  return aux == static_cast<uint32_t>(NackReason::kSlotQuota) ||
         aux == static_cast<uint32_t>(NackReason::kSlotBusy) ||
         aux == static_cast<uint32_t>(NackReason::kHoldQuota) ||
         aux == static_cast<uint32_t>(NackReason::kNewRun) ||
         aux == static_cast<uint32_t>(NackReason::kRunEnded);
}

void FromAboveNode::RunEnded(const AggFrame& f) {
  // Check let it through only under the job's label now (or none): the
  // parent ended this switch's run, not an earlier one's.
  if (f.job->EndRunAbove(f.pkt.header->incarnation.host())) {
    stats_.lcore.agg.runs_ended_above.Add(1);
  }
  TxBuffers::Consumed(f.m);
}

void FromAboveNode::Refused(const AggFrame& f) {
  const aggregator::Job& job = *f.job;
  // "Not now" (not a new run): the partial goes again on the slot's timer
  // (RetryRefused), since the members, all counted, ask only at their
  // backed-off retransmission timeout.
  using aggregator::NackReason;
  const uint32_t aux = f.pkt.header->aux.host();
  const bool retry = aux == static_cast<uint32_t>(NackReason::kSlotQuota) ||
                     aux == static_cast<uint32_t>(NackReason::kSlotBusy) ||
                     aux == static_cast<uint32_t>(NackReason::kHoldQuota);
  if (slots_.table().RefusedAbove(slots_.Local(f.slot), job.id(), job.generation(),
                                  f.pkt.header->seq.host(), clock_.tsc, retry)) {
    stats_.lcore.agg.partials_refused_above.Add(1);
  }
  TxBuffers::Consumed(f.m);
}

void FromAboveNode::Missing(const AggFrame& f) {
  const aggregator::Job& job = *f.job;
  const uint32_t seq = f.pkt.header->seq.host();
  const uint32_t local = slots_.Local(f.slot);
  const aggregator::Slot* slot = slots_.table().Holding(local, job.id(), job.generation(), seq);
  if (f.pkt.header->aux.host() == static_cast<uint32_t>(aggregator::NoticeKind::kForgotten)) {
    // The root asks for data of a chunk whose result reached members here:
    // those past it kept theirs. A forwarded slot's partial goes again too.
    // Only a chunk computed again to the same bytes is asked for (AsksBelow):
    // a slot here that says otherwise keeps what it holds.
    if (slot != nullptr && !aggregator::SameInAnyOrder(slot->dtype(), slot->op())) {
      TxBuffers::Consumed(f.m);
      return;
    }
    tree_.ForgetCounted(job, seq);  // the members' data is asked for again
    if (slot != nullptr && slot->state() == aggregator::Slot::State::kForwarded &&
        slots_.table().MissedAbove(local, job.id(), job.generation(), seq, clock_.tsc)) {
      stats_.lcore.agg.partials_missing_above.Add(1);
      (void)tree_.FinishSlot(job, local, *slot, false, nullptr, 0);
    }
    // A complete slot holds the result, none of the members' data: it gives
    // way, or it would answer their resends and the partial they make with
    // that result, and their data would never go up. Every member that
    // lacks the result sends again into a slot claimed anew.
    if (slot != nullptr && slot->state() == aggregator::Slot::State::kComplete) {
      slots_.table().Release(local);
      stats_.lcore.agg.forgotten_released.Add(1);
      slot = nullptr;
    }
    notices_.NoticeForgotten(job, seq, slot, /*below=*/true);
    TxBuffers::Consumed(f.m);
    return;
  }
  if (slot == nullptr) tree_.ForgetCounted(job, seq);  // the partial was lost above
  ResendBehind(job, seq);
  if (slot != nullptr) {
    if (slot->state() == aggregator::Slot::State::kForwarded &&
        slots_.table().MissedAbove(local, job.id(), job.generation(), seq, clock_.tsc)) {
      stats_.lcore.agg.partials_missing_above.Add(1);
      (void)tree_.FinishSlot(job, local, *slot, false, nullptr, 0);
    }
  } else if (job.WhenNoSlot() == aggregator::Job::NoSlot::kUpAsMissing) {
    // The slot gave way (its partial lost on the way), and none may take
    // the chunk again: the members' data goes around it as late data (the
    // excluded ones', and that of those the lost partial listed missing).
    LackedAbove& e = LackedAboveOf(job, seq);
    if (e.job_id != job.id() || e.job_generation != job.generation() || e.seq != seq) {
      e = LackedAbove{job.id(), job.generation(), seq};
    }
    if (e.label != job.label()) e.went_up = false;  // of another run
    e.label = job.label();
    e.armed = true;
  }
  TxBuffers::Consumed(f.m);
}

void FromAboveNode::ResendBehind(const aggregator::Job& job, uint32_t seq) {
  const std::optional<uint32_t> watermark = job.SlotWatermark(clock_.SeenNow(), rebind_ticks_);
  if (!watermark || !aggregator::SeqBefore(*watermark, seq)) return;
  const aggregator::Slot* behind = slots_.OwnSlotOf(job, *watermark);
  if (behind == nullptr || behind->state() != aggregator::Slot::State::kForwarded) return;
  const uint32_t local = slots_.table().IndexOf(*behind);
  if (!slots_.table().MissedAbove(local, job.id(), job.generation(), *watermark, clock_.tsc))
    return;
  stats_.lcore.agg.partials_missing_above.Add(1);
  (void)tree_.FinishSlot(job, local, *behind, false, nullptr, 0);
}

void FromAboveNode::UpAsMissingIfLacked(const AggFrame& f) {
  const aggregator::Job& job = *f.job;
  const aggregator::AggHeader& h = *f.pkt.header;
  const uint32_t seq = h.seq.host();
  LackedAbove& e = LackedAboveOf(job, seq);
  if (!e.armed || e.job_id != job.id() || e.job_generation != job.generation() || e.seq != seq ||
      e.label != job.label() || f.pkt.opcode != aggregator::Opcode::kContribution || f.member < 0 ||
      slots_.table().Holding(slots_.Local(f.slot), job.id(), job.generation(), seq) != nullptr) {
    return;
  }
  // The notices that answered the questions asked before it went are no
  // news: once per first resend gap, as a slot resends its partial.
  if (e.sent_tsc != 0 && clock_.tsc - e.sent_tsc < slots_.table().resend_gap_cycles()) {
    e.armed = false;
    return;
  }
  // Not sent (no mbuf, no run label yet): the next member data tries again.
  if (!tree_.SendUpAsMissing(job, h)) return;
  e.armed = false;
  e.sent_tsc = clock_.tsc;
  stats_.lcore.agg.partials_missing_above.Add(1);
  stats_.lcore.agg.conflicts_up.Add(1);
}

bool FromAboveNode::UpAsMissing(const AggFrame& f) {
  const aggregator::Job& job = *f.job;
  const aggregator::AggHeader& h = *f.pkt.header;
  const uint32_t seq = h.seq.host();
  if (!tree_.MatchBypass(job, seq, f.member, h.node_id.host())) {
    // The chunk's first datagram here: up it goes with every member listed
    // and their entries written, this one's matched at once. A child
    // switch's own up-as-missing partial holds nothing: what it lists is
    // listed in its place, and it goes no further.
    const bool empty = f.pkt.opcode == aggregator::Opcode::kPartial &&
                       (h.flags.host() & aggregator::flags::kConflict) != 0;
    bool flattened = false;
    if (!tree_.SendUpAsMissing(job, h, empty ? &f.pkt : nullptr, f.member, &flattened)) {
      return false;
    }
    stats_.lcore.agg.conflicts_up.Add(1);
    NoteUpAsMissing(job, seq);
    if (flattened) {
      TxBuffers::Consumed(f.m);
      return true;
    }
    (void)tree_.MatchBypass(job, seq, f.member, h.node_id.host());
  }
  stats_.lcore.agg.late_flagged.Add(1);
  tree_.ForwardLate(f.m, job, f.header_offset, f.in_port);
  return true;
}

}  // namespace aggswitch::dataplane
