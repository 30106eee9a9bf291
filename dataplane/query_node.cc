#include "dataplane/query_node.h"

#include "aggregator/reduce.h"

namespace aggswitch::dataplane {

using aggregator::SameInAnyOrder;

void QueryNode::Answer(const AggFrame& f) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::Job& job = *f.job;
  const aggregator::AggHeader& h = *f.pkt.header;
  rte_mbuf* m = f.m;
  c.queries.Add(1);
  const auto node = static_cast<uint16_t>(f.member);
  aggregator::MemberAddr addr;
  if (!job.GetMember(node, &addr)) {
    tx_.Drop(f.in_port, DropReason::kAggRejected, m);
    return;
  }
  const aggregator::Slot* slot =
      slots_.table().Holding(slots_.Local(f.slot), job.id(), job.generation(), h.seq.host());
  if (slot != nullptr && slot->state() == aggregator::Slot::State::kComplete) {
    // Its result was lost on the way: sent again, to it alone. A member the
    // slot did not count gets it too: its data reached the result another
    // way (late data, the parameter node).
    c.duplicate_results.Add(1);
    if (!answers_.SendResult(job, *slot, node, m, f.header_offset)) TxBuffers::Consumed(m);
    return;
  }
  if (slot != nullptr && slot->HasContributed(node)) {
    if (slot->state() == aggregator::Slot::State::kForwarded) {
      // Its partial went up (or, at a root in verify mode, its VERIFY to
      // the parameter node), and the answer has not come down: the chunk is
      // held, and the member's data would change nothing. The partial goes
      // again, at most once per resend gap, as for a resend of the data
      // (SlotOutcome::kForwardedAgain): it or the answer may have been lost,
      // and the parent answers a repeat with its cached result. Members
      // past the chunk that the slot lacks have its result from before the
      // switch restarted, and the answer from above waits for their data:
      // they are asked for it, as for an aggregating slot, at the same rate.
      if (notices_.ResultLost(job, *slot, /*forwarded=*/true)) {
        c.results_lost.Add(1);
        answers_.Nack(m, h, aggregator::NackReason::kResultLost, addr);
        return;
      }
      const uint32_t local = slots_.Local(f.slot);
      if (slots_.table().ResendForwarded(local, clock_.tsc)) {
        c.partials_resent.Add(1);
        (void)tree_.FinishSlot(job, local, *slot, false, nullptr, 0);
        notices_.NoticeForgotten(job, slot->seq(), slot, notices_.AsksBelow(job, *slot));
      }
      answers_.NoticeInPlace(m, h, aggregator::NoticeKind::kHeld, 0, addr,
                             Answers::To::kBoundMember);
      // The answer from above waits for the members the partial lacked:
      // their data goes on as late data once they send it again.
      notices_.NoticeAbsentAt(local, c.asked_notices, /*forwarded_too=*/true);
      return;
    }
    if (slot->state() == aggregator::Slot::State::kAggregating) {
      // Members that moved past the chunk may have its result from a slot
      // that went up and gave way; this one, a resend's, waits for them in
      // vain, and the result that came down (or the parent's answer to the
      // member's query) missed this member. Asked for again, it completes
      // this slot (TreeStage::ResultFromAbove).
      if (notices_.ResultLost(job, *slot)) {
        c.results_lost.Add(1);
        answers_.Nack(m, h, aggregator::NackReason::kResultLost, addr);
        return;
      }
      notices_.AskAboveIfDone(job, *slot, h);
      answers_.NoticeInPlace(m, h, aggregator::NoticeKind::kHeld, slot->needed() - slot->count(),
                             addr, Answers::To::kBoundMember);
      notices_.NoticeForgotten(job, slot->seq(), slot, notices_.AsksBelow(job, *slot));
      notices_.NoticeAbsentAt(slots_.Local(f.slot), c.asked_notices);
      return;
    }
  }
  // A root without a TAN kept the result when its slot gave way (two jobs
  // held each other's oldest chunks back): the member gets it from there.
  if (slot == nullptr && tree_.SendKept(job, h.seq.host(), addr)) {
    c.duplicate_results.Add(1);
    TxBuffers::Consumed(m);
    return;
  }
  // No slot holds the chunk, but the member's data is in it: counted by a
  // partial that went up from here (TreeStage::CountedUp), whose fate the
  // parent is asked.
  if (slot == nullptr && tree_.CountedUp(job, h.seq.host(), f.member, h.node_id.host())) {
    HeldWithoutSlot(f, addr);
    return;
  }
  // The member sends its data again. Or the chunk completed, and its
  // slot here gave way once the partial went up: the parent still has the
  // result. At the root, a chunk that went to the TAN (it found no slot
  // here, or its slot gave way once the first data went): the TAN keeps
  // the result of a finished chunk for its give-up time. So at a root whose
  // slot went to the TAN without this member: its data followed there as
  // late data, or is told missing below, and the TAN's answer completes
  // the slot (its result, should the one it sent not have reached the slot).
  const bool to_tan = job.is_root() && job.tan() != aggregator::JobSpec::Tan::kNone;
  if ((slot == nullptr && (!job.is_root() || to_tan)) ||
      (slot != nullptr && to_tan && !job.verify() &&
       slot->state() == aggregator::Slot::State::kForwarded)) {
    tree_.AskAbove(job, h);
  }
  // The members past the chunk before this switch knew them may hold the
  // only copy of its result: no slot waits for them (a member's resends
  // for the parameter node, AGGREGATE_AT_PS, take none), and the parameter
  // node would wait for their data until its give-up. Asked only where
  // their data reduces anew to the bytes they hold (not a float sum).
  if (slot == nullptr && SameInAnyOrder(f.pkt.dtype, f.pkt.op)) {
    notices_.NoticeForgotten(job, h.seq.host(), nullptr, /*below=*/false, /*first_ack=*/true);
  }
  answers_.NoticeInPlace(m, h, aggregator::NoticeKind::kMissing, 0, addr,
                         Answers::To::kBoundMember);
}

void QueryNode::HeldWithoutSlot(const AggFrame& f, const aggregator::MemberAddr& addr) {
  const aggregator::Job& job = *f.job;
  const aggregator::AggHeader& h = *f.pkt.header;
  stats_.lcore.agg.held_without_slot.Add(1);
  if (!job.is_root() || job.tan() != aggregator::JobSpec::Tan::kNone) tree_.AskAbove(job, h);
  answers_.NoticeInPlace(f.m, h, aggregator::NoticeKind::kHeld, 0, addr, Answers::To::kBoundMember);
}

bool QueryNode::AnsweredFromKept(const AggFrame& f) {
  if (!tree_.HasKept() || f.member < 0 ||
      (f.pkt.opcode != aggregator::Opcode::kContribution &&
       f.pkt.opcode != aggregator::Opcode::kPartial)) {
    return false;
  }
  const aggregator::Job& job = *f.job;
  const uint32_t seq = f.pkt.header->seq.host();
  aggregator::MemberAddr addr;
  if (slots_.table().Holding(slots_.Local(f.slot), job.id(), job.generation(), seq) != nullptr ||
      !job.GetMember(static_cast<uint16_t>(f.member), &addr) || !tree_.SendKept(job, seq, addr)) {
    return false;
  }
  stats_.lcore.agg.duplicate_results.Add(1);
  TxBuffers::Consumed(f.m);
  return true;
}

}  // namespace aggswitch::dataplane
