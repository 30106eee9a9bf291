#include "dataplane/tree_bound_node.h"

#include "dataplane/packet.h"

namespace aggswitch::dataplane {

void TreeBoundNode::Distribute(rte_mbuf* m, const aggregator::Job& job,
                               const aggregator::AggPacket& pkt, uint32_t header_offset,
                               const aggregator::MemberAddr& sender, uint16_t in_port) {
  using aggregator::NackReason;
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  if (!job.FromMainServer(sender.ip, sender.udp_port) || !MainServerBound(job, sender)) {
    c.distribute_refused.Add(1);
    answers_.Nack(m, h, NackReason::kNotMainServer, sender);
    return;
  }
  if (job.LearnedMembers() != job.members()) {
    c.distribute_refused.Add(1);
    answers_.Nack(m, h, NackReason::kMembersUnbound, sender);
    return;
  }
  if (m->nb_segs != 1) {
    stats_.lcore.malformed[static_cast<size_t>(MalformedReason::kSegmented)].Add(1);
    tx_.Drop(in_port, DropReason::kAggMalformed, m);
    return;
  }
  aggregator::AggFields ack = aggregator::ReadAggFields(h);
  // The members get the datagram as the main server sent it, without the key.
  const uint32_t len = sizeof(aggregator::AggHeader) + 2u * h.missing_count + pkt.payload_len;
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  rte_pktmbuf_mtod(m, aggregator::AggHeader*)->job_key = common::be64_t{};
  const uint32_t copies =
      answers_.Replicate(job, m, 0, job.members(), static_cast<uint16_t>(ack.seq));
  c.distributions.Add(1);
  c.distribution_copies.Add(copies);
  ack.job_key = 0;
  ack.opcode = aggregator::Opcode::kAck;
  ack.flags = 0;
  ack.aux = copies;
  ack.elem_count = 0;
  answers_.Acknowledge(ack, sender);
}

bool TreeBoundNode::MainServerBound(const aggregator::Job& job,
                                    const aggregator::MemberAddr& sender) {
  if (job.BindMainServer(sender, clock_.SeenNow()) != aggregator::Job::Bind::kRefused) {
    return true;
  }
  stats_.lcore.agg.main_server_refused.Add(1);
  return false;
}

void TreeBoundNode::Late(const AggFrame& f) {
  if ((f.pkt.header->flags.host() & aggregator::flags::kContent) == 0 &&
      LateCountedHere(*f.job, f.pkt.header->seq.host(), f.pkt.header->node_id.host())) {
    stats_.lcore.agg.late_counted.Add(1);
    tx_.Drop(f.in_port, DropReason::kAggDuplicate, f.m);
    return;
  }
  tree_.ForwardLate(f.m, *f.job, f.header_offset, f.in_port);
}

bool TreeBoundNode::ToParameterNode(const AggFrame& f) {
  const aggregator::Job& job = *f.job;
  const uint32_t seq = f.pkt.header->seq.host();
  const uint32_t local = slots_.Local(f.slot);
  const aggregator::Slot* slot = slots_.table().Holding(local, job.id(), job.generation(), seq);
  if (slot == nullptr) {
    // Nothing of the chunk here. At the root: on to the parameter node,
    // unreduced. Below it, the chunk goes up as missing first (every member
    // listed, a partial of the op's identity), so that the parent counts
    // this switch and the parameter node waits for these members' data,
    // which follows as late data: sent on unreduced instead, it would meet
    // the other children's partials nowhere.
    if (job.is_root()) {
      tree_.ForwardToPs(f.m, job, f.header_offset, f.in_port, 0);
    } else if (!above_.UpAsMissing(f)) {
      answers_.NackSlotBusy(f);  // not now: the member sends it again
    }
    return true;
  }
  // A complete or forwarded slot answers it as any repeat: the cached
  // result, the partial again, or (not counted) its data on as late data.
  if (slot->state() != aggregator::Slot::State::kAggregating) return false;
  // A partial that cannot carry the list of the members it lacks would end
  // the chunk INCOMPLETE: the slot keeps aggregating instead, and counts the
  // member's data as any contribution (the others are still to come).
  if (!tree_.MissingListFits(job, *slot)) return false;
  // The chunk is partly here: its partial goes on now, as on a timeout
  // (bypass entries for the members it lacks), and this member's data after
  // it as late data, unless the partial holds it already.
  AggregationCounters& c = stats_.lcore.agg;
  const auto node = static_cast<uint16_t>(f.member);
  const bool counted = slot->HasContributed(node);
  (void)timers_.Expire(local, false);
  c.released_to_ps.Add(1);
  if (counted) {
    c.duplicates.Add(1);
    tx_.Drop(f.in_port, DropReason::kAggDuplicate, f.m);
    return true;
  }
  (void)tree_.MatchBypass(job, seq, f.member, f.pkt.header->node_id.host());
  tree_.ForwardLate(f.m, job, f.header_offset, f.in_port);
  return true;
}

bool TreeBoundNode::LateCountedHere(const aggregator::Job& job, uint32_t seq, uint16_t node) const {
  const int child = job.CoveringChild(node);
  if (child < 0) return false;
  // A spare slot's chunk, or another worker's, goes on as before.
  const aggregator::Slot* s = slots_.OwnSlotOf(job, seq);
  if (s == nullptr ||
      (s->state() != aggregator::Slot::State::kAggregating &&
       s->state() != aggregator::Slot::State::kForwarded) ||
      !s->HasContributed(static_cast<uint16_t>(child)) || s->inherited_overflow()) {
    return false;
  }
  for (uint16_t i = 0; i < s->inherited_count(); ++i) {
    const uint16_t id = s->inherited(i);
    if (id == node || job.CoveringChild(id) < 0) return false;
  }
  return true;
}

}  // namespace aggswitch::dataplane
