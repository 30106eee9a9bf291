#include "dataplane/store_node.h"

#include "dataplane/mac_table.h"
#include "dataplane/packet.h"

namespace aggswitch::dataplane {

bool StoreNode::Keep(const AggFrame& f) {
  using aggregator::NackReason;
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::Job& job = *f.job;
  const auto member = static_cast<uint16_t>(f.member);
  const ParameterStore::Kept kept =
      store_ != nullptr ? store_->Keep(job, member, f.pkt) : ParameterStore::Kept::kFull;
  switch (kept) {
    case ParameterStore::Kept::kStored:
    case ParameterStore::Kept::kReplaced:
      (kept == ParameterStore::Kept::kStored ? c.stored : c.store_replaced).Add(1);
      break;
    case ParameterStore::Kept::kJobFull:
    case ParameterStore::Kept::kFull:
      c.store_full.Add(1);
      answers_.NackMember(f, NackReason::kStoreFull, DropReason::kAggRejected);
      return false;
  }
  if (job.aggregates()) return true;
  // Store mode: the ACK tells the member its contribution is kept.
  aggregator::MemberAddr addr;
  if (job.GetMember(member, &addr)) {
    answers_.Answer(f.m, *f.pkt.header, aggregator::Opcode::kAck, NackReason{0}, addr);
  } else {
    TxBuffers::Consumed(f.m);
  }
  return false;
}

void StoreNode::Fetch(const AggFrame& f) {
  using aggregator::NackReason;
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::Job& job = *f.job;
  const aggregator::AggHeader& h = *f.pkt.header;
  // Who asks: a member at its bound address, or the main server at the
  // address it sent from.
  aggregator::MemberAddr to;
  if (f.main_server) {
    const uint8_t* frame = rte_pktmbuf_mtod(f.m, const uint8_t*);
    UdpInfo udp;
    (void)ParseIpv4Udp(frame, rte_pktmbuf_data_len(f.m), f.meta.l3_offset, &udp);
    to = aggregator::MemberAddr{Mac48(frame + 6), static_cast<uint8_t>(f.in_port), f.meta.vlan,
                                udp.src_ip, udp.src_port};
  } else if (!job.GetMember(static_cast<uint16_t>(f.member), &to)) {
    tx_.Drop(f.in_port, DropReason::kAggRejected, f.m);
    return;
  }
  // A node id no member can have (above 16 bits) names nobody: not one
  // whose low bits name a member.
  const uint32_t node = h.aux.host();
  const int owner = node > UINT16_MAX ? -1 : job.LocalIndex(static_cast<uint16_t>(node));
  const ParameterStore::Copy* copy =
      store_ == nullptr || owner < 0 || !job.stores()
          ? nullptr
          : store_->Find(job, h.seq.host(), static_cast<uint16_t>(owner));
  if (copy == nullptr) {
    c.fetch_misses.Add(1);
    answers_.Nack(f.m, h, NackReason::kNotStored, to);
    return;
  }
  aggregator::AggFields out = aggregator::ReadAggFields(h);
  out.job_key = 0;
  // To the main server flagged FINAL as its FETCH was: it crosses the
  // switches on the way instead of being taken for a member's FETCH. With
  // RELEASE when the copy goes with it: the asker tells the answer that
  // freed it from a late duplicate of an earlier answer.
  const bool release = (h.flags.host() & aggregator::flags::kRelease) != 0;
  out.flags = static_cast<uint16_t>((f.main_server ? aggregator::flags::kFinal : 0) |
                                    (release ? aggregator::flags::kRelease : 0));
  out.elem_count = copy->elem_count;
  out.dtype = static_cast<aggregator::DType>(copy->dtype);
  out.op = static_cast<aggregator::ReduceOp>(copy->op);
  out.scale = copy->scale;
  if (answers_.SendData(out, copy->data, copy->len(), to)) {
    c.fetches.Add(1);
    if (release) {
      store_->Release(copy);
      c.store_released.Add(1);
    }
  }
  TxBuffers::Consumed(f.m);
}

void StoreNode::FinalAck(const AggFrame& f) {
  const aggregator::AggHeader& h = *f.pkt.header;
  if (finals_ == nullptr || !finals_->Acked(*f.job, h.seq.host(), h.incarnation.host())) {
    stats_.lcore.agg.final_ack_unmatched.Add(1);
  }
  TxBuffers::Consumed(f.m);
}

}  // namespace aggswitch::dataplane
