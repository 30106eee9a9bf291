#include "dataplane/member_notices.h"

#include <algorithm>
#include <optional>

#include "aggregator/reduce.h"

namespace aggswitch::dataplane {

using aggregator::SameInAnyOrder;

void MemberNotices::NoticeGap(const aggregator::Job& job, uint32_t seq, uint32_t ack, bool first,
                              uint16_t node) {
  const aggregator::SlotRegion& region = slots_.regions().For(job.in_band());
  if (region.size <= gap_distance_ || job.Excluded(node)) return;
  const uint32_t earlier = seq - gap_distance_;
  if (first) {
    if (LacksContribution(job, earlier, node)) SendGapNotice(job, earlier, node);
    return;
  }
  // A resend or a QUERY: the first transmissions that would have revealed
  // a gap may have gone before the earlier chunk's slot took anybody, or
  // been refused (the slot quota that chunk holds back), and none is left
  // to come once the member's window is full. The member's oldest chunk
  // without a result, as far behind as a gap, went before this one: its
  // loss would otherwise show only to the member's retransmission timer,
  // backed off while the job stood still.
  if (!aggregator::SeqBefore(earlier, ack) && LacksContribution(job, ack, node)) {
    SendGapNotice(job, ack, node);
  }
}

bool MemberNotices::LacksContribution(const aggregator::Job& job, uint32_t seq,
                                      uint16_t node) const {
  const aggregator::Slot* s = slots_.OwnSlotOf(job, seq);
  return s != nullptr && s->state() == aggregator::Slot::State::kAggregating &&
         !s->HasContributed(node);
}

void MemberNotices::SendGapNotice(const aggregator::Job& job, uint32_t seq, uint16_t node) {
  aggregator::MemberAddr addr;
  if (job.GetMember(node, &addr) &&
      answers_.SendNotice(job, job.NodeId(node), seq, aggregator::NoticeKind::kMissing, addr)) {
    stats_.lcore.agg.gap_notices.Add(1);
  }
}

void MemberNotices::NoticeAbsent(const AggFrame& f) {
  if (!slots_.Owns(f.slot)) return;
  NoticeAbsentAt(slots_.Local(f.slot), stats_.lcore.agg.busy_notices);
}

void MemberNotices::NoticeQuotaHolder(const aggregator::Job& job, uint32_t ack) {
  // The chunk the member waits for: in its home slot, or in the job's moved
  // partition (where OwnSlotOf looks), when this lcore owns that slot.
  const auto notice_at = [&](uint32_t at) {
    if (!slots_.Owns(at) ||
        slots_.table().Holding(slots_.Local(at), job.id(), job.generation(), ack) == nullptr) {
      return false;
    }
    NoticeAbsentAt(slots_.Local(at), stats_.lcore.agg.busy_notices);
    return true;
  };
  if (notice_at(slots_.regions().Of(job.in_band(), job.placement(), ack))) return;
  if (slots_.MoveApplied(job) && job.MovedFrom(ack)) (void)notice_at(slots_.Moved(job, ack));
}

void MemberNotices::NoticeAbsentAt(uint32_t local, Counter& sent, bool forwarded_too) {
  const aggregator::Slot& slot = slots_.table().slot(local);
  if (slot.state() != aggregator::Slot::State::kAggregating &&
      !(forwarded_too && slot.state() == aggregator::Slot::State::kForwarded)) {
    return;
  }
  const aggregator::Job* holder = jobs_->Find(slot.job_id());
  if (holder == nullptr || holder->generation() != slot.job_generation() ||
      !slots_.table().TellAbsent(local, clock_.tsc)) {
    return;
  }
  const uint32_t seq = slot.seq();
  const uint16_t members = std::min(holder->members(), slot.expected());
  for (uint16_t node = 0; node < members; ++node) {
    // A child switch too: its partial, refused while the slot was busy,
    // goes again at once (FromAboveNode::Missing) rather than when its members next
    // ask after the chunk.
    if (slot.HasContributed(node) || holder->Excluded(node)) continue;
    const std::optional<uint32_t> ack = holder->GetAck(node);
    aggregator::MemberAddr addr;
    if ((ack && aggregator::SeqBefore(seq, *ack)) || !holder->GetMember(node, &addr)) continue;
    if (answers_.SendNotice(*holder, holder->NodeId(node), seq, aggregator::NoticeKind::kMissing,
                            addr)) {
      sent.Add(1);
    }
  }
}

void MemberNotices::NoticeForgotten(const aggregator::Job& job, uint32_t seq,
                                    const aggregator::Slot* slot, bool below, bool first_ack) {
  if (slot != nullptr && job.is_root() && job.tan() == aggregator::JobSpec::Tan::kRemote &&
      !SameInAnyOrder(slot->dtype(), slot->op())) {
    return;
  }
  // Excluded members too: one flags its own data late only when it sends
  // it, and a member past the chunk sends nothing unasked. The slot's first
  // data (or partial) listed it missing, and the TAN waits for its data.
  for (uint16_t node = 0; node < job.members(); ++node) {
    // A child switch keeps no data of a chunk that went up: asked, it asks
    // its own members past the chunk (FromAboveNode::Missing). Asked too when its
    // counted partial listed ranks missing (their data went around it, and
    // may have been lost).
    const bool ask_below = below && job.IsSwitch(node);
    if (slot != nullptr && slot->HasContributed(node) &&
        !(ask_below && LackedBelow(job, *slot, node))) {
      continue;
    }
    const std::optional<uint32_t> ack = first_ack ? job.FirstAck(node) : job.GetAck(node);
    aggregator::MemberAddr addr;
    if (!ack || !aggregator::SeqBefore(seq, *ack) || !job.GetMember(node, &addr)) continue;
    const aggregator::NoticeKind kind =
        ask_below ? aggregator::NoticeKind::kForgotten : aggregator::NoticeKind::kMissing;
    if (answers_.SendNotice(job, job.NodeId(node), seq, kind, addr)) {
      stats_.lcore.agg.resync_notices.Add(1);
    }
  }
}

bool MemberNotices::LackedBelow(const aggregator::Job& job, const aggregator::Slot& slot,
                                uint16_t child) {
  if (slot.inherited_overflow()) return true;
  for (uint16_t i = 0; i < slot.inherited_count(); ++i) {
    if (job.CoveringChild(slot.inherited(i)) == child) return true;
  }
  return false;
}

bool MemberNotices::AsksBelow(const aggregator::Job& job, const aggregator::Slot& slot) {
  // Nothing above a root that is its own TAN or has none holds a result it
  // lost, nor does a remote TAN (agg-ps) a result the root's slot made.
  // Integers, fixed point, min and max give the same bytes from the same
  // data in any order and grouping (ResultLost): computed again, here or at
  // the TAN, the chunk's result is the one the members past it hold; where
  // the TAN holds it already, their data is a repeat it drops. A float sum
  // never is (its ResultLost, or the TAN's node order against a slot's).
  if (!job.is_root()) return false;
  return SameInAnyOrder(slot.dtype(), slot.op());
}

bool MemberNotices::ResultLost(const aggregator::Job& job, const aggregator::Slot& slot,
                               bool forwarded) {
  // Below the root the parent, and at a root a remote TAN, may still hold
  // the result and answer the slot's partial or first data with it.
  if (!job.is_root() || job.tan() == aggregator::JobSpec::Tan::kRemote) return false;
  // Integers, fixed point, min and max: the same bytes in any order.
  if (SameInAnyOrder(slot.dtype(), slot.op())) return false;
  // So does member order in a slot, the only place a root without a TAN
  // reduces. A root that is its own TAN may have sent the chunk to it, which
  // adds the lates to the first data in node order: other bytes than a
  // slot's. The TAN keeps a finished chunk's result for whoever asks after
  // it, as the slot it completed in does, unless this switch has started
  // since: a member whose first watermark here was past the chunk had its
  // result from the process before.
  const bool ordered = slot.ordered();
  if (ordered && job.tan() == aggregator::JobSpec::Tan::kNone) return false;
  const bool own_tan = job.tan() == aggregator::JobSpec::Tan::kSelf;
  const uint32_t seq = slot.seq();
  // Excluded members too, as NoticeForgotten asks them: one past the chunk
  // holds the earlier result as well.
  for (uint16_t node = 0; node < job.members(); ++node) {
    if (slot.HasContributed(node)) continue;
    const std::optional<uint32_t> ack =
        ordered || (forwarded && own_tan) ? job.FirstAck(node) : job.GetAck(node);
    if (ack && aggregator::SeqBefore(seq, *ack)) return true;
  }
  return false;
}

void MemberNotices::AskBelowIfForgotten(const aggregator::Job& job, const aggregator::Slot& slot,
                                        aggregator::Opcode opcode) {
  if (opcode != aggregator::Opcode::kPartial || !AsksBelow(job, slot)) return;
  NoticeForgotten(job, slot.seq(), &slot, /*below=*/true);
}

void MemberNotices::AskAboveIfDone(const aggregator::Job& job, const aggregator::Slot& slot,
                                   const aggregator::AggHeader& h) {
  if ((job.is_root() && job.tan() == aggregator::JobSpec::Tan::kNone) ||
      slot.state() != aggregator::Slot::State::kAggregating) {
    return;
  }
  const uint32_t seq = slot.seq();
  for (uint16_t node = 0; node < job.members(); ++node) {
    if (slot.HasContributed(node) || job.Excluded(node)) continue;
    const std::optional<uint32_t> ack = job.GetAck(node);
    if (ack && aggregator::SeqBefore(seq, *ack)) {
      tree_.AskAbove(job, h);
      return;
    }
  }
}

}  // namespace aggswitch::dataplane
