#include "dataplane/answers.h"

#include <rte_cycles.h>
#include <rte_memcpy.h>

#include <algorithm>

#include "dataplane/packet.h"

namespace aggswitch::dataplane {
namespace {

// NACKs answer refused datagrams; a flood of bad datagrams must not turn the
// switch into a flood of NACKs. Per lcore: bursts of 64, 100 000 per second.
constexpr uint64_t kNackBurst = 64;
constexpr double kNacksPerSecond = 100000;
// A missing list holds at most 255 ids (missing_count is one byte).
constexpr uint32_t kMaxMissingIds = 255;

void MacBytes(uint64_t mac48, uint8_t (&out)[6]) {
  for (int i = 0; i < 6; ++i) out[i] = static_cast<uint8_t>(mac48 >> (40 - 8 * i));
}

}  // namespace

Answers::Answers(const ForwardingPlan& plan, rte_mempool* pool, LcoreStats& stats, TxBuffers& tx,
                 Source source, const LcoreClock& clock)
    : plan_(plan), pool_(pool), stats_(stats), tx_(tx), source_(source), clock_(clock) {
  token_cycles_ = static_cast<uint64_t>(static_cast<double>(clock.hz()) / kNacksPerSecond);
  tokens_ = kNackBurst;
}

aggregator::AggFields Answers::ChunkFields(const aggregator::Job& job, const aggregator::Slot& slot) {
  aggregator::AggFields f;
  f.job_id = job.id();
  f.seq = slot.seq();
  // No job key: what goes to members carries none, so that a result that
  // reaches somebody else (a diverted or flooded copy) gives the key away
  // to nobody. What goes to another switch or the TAN adds it.
  f.elem_count = slot.elem_count();
  f.dtype = slot.dtype();
  f.op = slot.op();
  f.scale = slot.scale();
  f.aux = slot.elem_offset();
  // Which parent a chunk took (Job::ParentHop): its result comes back from it.
  f.addr_low = slot.addr_low();
  return f;
}

aggregator::AggFields Answers::ResultFields(const aggregator::Job& job, const aggregator::Slot& slot) {
  aggregator::AggFields f = ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kResult;
  // A moved job's members learn where its later chunks go (docs/aggregation.md, "Moves").
  f.slot_hint = job.MoveHint(slot.seq());
  // A job in verify mode keeps only results its parameter node checked.
  f.flags = slot.overflow()  ? aggregator::flags::kOverflow
            : job.verify() ? aggregator::flags::kVerified
                           : 0;
  if (slot.recovered()) f.flags |= aggregator::flags::kRecovered;
  return f;
}

void Answers::WriteResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                 uint8_t* buf) {
  aggregator::WriteAggHeader(ResultFields(job, slot), 0, reinterpret_cast<aggregator::AggHeader*>(buf));
  rte_memcpy(buf + sizeof(aggregator::AggHeader), slot.result(), slot.result_len());
}

rte_mbuf* Answers::ResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                 rte_mbuf* carrier, uint32_t header_offset) {
  const uint32_t len = sizeof(aggregator::AggHeader) + slot.result_len();
  // The contribution's own frame holds a header, the same number of elements
  // and maybe a missing list: room enough, already in cache.
  if (carrier != nullptr && RTE_MBUF_DIRECT(carrier) && carrier->nb_segs == 1 &&
      rte_mbuf_refcnt_read(carrier) == 1 &&
      header_offset + len <= static_cast<uint32_t>(rte_pktmbuf_data_len(carrier))) {
    auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_adj(carrier, static_cast<uint16_t>(header_offset)));
    WriteResultPayload(job, slot, buf);
    carrier->data_len = static_cast<uint16_t>(len);
    carrier->pkt_len = len;
    return carrier;
  }
  rte_mbuf* payload = rte_pktmbuf_alloc(pool_);
  if (payload == nullptr) return nullptr;
  auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(payload, static_cast<uint16_t>(len)));
  if (buf == nullptr) {
    rte_pktmbuf_free(payload);
    return nullptr;
  }
  WriteResultPayload(job, slot, buf);
  return payload;
}

bool Answers::SendResult(const aggregator::Job& job, const aggregator::Slot& slot, int node,
                         rte_mbuf* carrier, uint32_t header_offset) {
  const uint16_t first = node < 0 ? 0 : static_cast<uint16_t>(node);
  const uint16_t last = node < 0 ? job.members() : static_cast<uint16_t>(node + 1);
  rte_mbuf* payload = ResultPayload(job, slot, carrier, header_offset);
  if (payload == nullptr) {
    stats_.lcore.agg.result_no_mbuf.Add(last - first);
    return false;
  }
  stats_.lcore.agg.results_sent.Add(Replicate(job, payload, first, last, static_cast<uint16_t>(slot.seq())));
  return payload == carrier;
}

uint32_t Answers::Replicate(const aggregator::Job& job, rte_mbuf* payload, uint16_t first,
                            uint16_t last, uint16_t ip_id) {
  AggregationCounters& c = stats_.lcore.agg;
  uint32_t sent = 0;
  // Each member's copy carries its own incarnation (its run), so the
  // aggregation header goes into each copy's header mbuf; the shared
  // segment holds what follows it.
  constexpr uint32_t kAggLen = sizeof(aggregator::AggHeader);
  if (payload->data_len < kAggLen) {
    rte_pktmbuf_free(payload);
    return 0;
  }
  aggregator::AggHeader agg;
  rte_memcpy(&agg, rte_pktmbuf_mtod(payload, const void*), kAggLen);
  rte_pktmbuf_adj(payload, static_cast<uint16_t>(kAggLen));
  const uint32_t payload_len = kAggLen + payload->pkt_len;
  // A header-only answer (an INCOMPLETE result without a missing list)
  // leaves nothing to share.
  const bool tail = payload->pkt_len != 0;
  for (uint16_t batch = first; batch < last; batch += kBurstSize) {
    const uint16_t n = static_cast<uint16_t>(std::min<uint32_t>(kBurstSize, last - batch));
    rte_mbuf* hdrs[kBurstSize];
    uint16_t out_ports[kBurstSize];
    if (rte_pktmbuf_alloc_bulk(pool_, hdrs, n) != 0) {
      c.result_no_mbuf.Add(n);
      continue;
    }
    uint16_t k = 0;
    for (uint16_t i = 0; i < n; ++i) {
      aggregator::MemberAddr member;
      if (!job.GetMember(static_cast<uint16_t>(batch + i), &member)) continue;
      rte_mbuf* hdr = hdrs[k];
      const bool tagged = plan_.EgressTagged(member.port_index, member.vlan);
      const uint16_t hdr_len = tagged ? 46 : 42;
      uint8_t dst[6];
      MacBytes(member.mac48, dst);
      uint8_t* out = rte_pktmbuf_mtod(hdr, uint8_t*);
      WriteUdpHeaders(out, dst, plan_.switch_mac().bytes.data(), tagged ? member.vlan : 0,
                      source_.ip, member.ip, source_.udp_port, member.udp_port, ip_id, payload_len);
      agg.incarnation = common::be32_t::FromHost(member.incarnation);
      rte_memcpy(out + hdr_len, &agg, kAggLen);
      hdr->data_len = static_cast<uint16_t>(hdr_len + kAggLen);
      hdr->pkt_len = hdr_len + payload_len;
      if (tail) {
        hdr->nb_segs = 2;
        hdr->next = payload;
      }
      out_ports[k++] = Egress(member);
    }
    // Referenced before any copy can reach a driver that frees it.
    if (k > 0 && tail) rte_mbuf_refcnt_update(payload, static_cast<int16_t>(k));
    for (uint16_t i = 0; i < k; ++i) tx_.Enqueue(out_ports[i], hdrs[i]);
    if (k < n) rte_pktmbuf_free_bulk(hdrs + k, n - k);
    sent += k;
  }
  rte_pktmbuf_free(payload);  // the copies hold it from here
  return sent;
}

void Answers::SendIncomplete(const aggregator::Job& job, const aggregator::Slot& slot,
                             const uint16_t* missing, uint32_t n_missing) {
  AggregationCounters& c = stats_.lcore.agg;
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    c.result_no_mbuf.Add(job.members());
    return;
  }
  // No payload: a worker must not use it. The missing list says who was missing.
  n_missing = std::min(n_missing, kMaxMissingIds);
  const uint32_t len = sizeof(aggregator::AggHeader) + 2 * n_missing;
  auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  aggregator::AggFields f = ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kResult;
  f.flags = aggregator::flags::kIncomplete;
  f.elem_count = 0;
  (void)aggregator::BuildAggregation(f, missing, static_cast<uint8_t>(n_missing), nullptr, 0, buf,
                                     len);
  c.incomplete_results.Add(1);
  c.results_sent.Add(Replicate(job, m, 0, job.members(), static_cast<uint16_t>(slot.seq())));
}

bool Answers::AnswerAllowed() {
  const uint64_t now = clock_.tsc;
  if (tokens_ < kNackBurst) {
    const uint64_t earned = (now - refill_tsc_) / token_cycles_;
    if (earned > 0) {
      tokens_ = std::min<uint64_t>(kNackBurst, tokens_ + earned);
      refill_tsc_ = now;
    }
  } else {
    refill_tsc_ = now;
  }
  if (tokens_ == 0) return false;
  --tokens_;
  return true;
}

void Answers::Answer(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::Opcode opcode,
                     aggregator::NackReason reason, const aggregator::MemberAddr& to) {
  AggregationCounters& c = stats_.lcore.agg;
  if (opcode == aggregator::Opcode::kNack && !AnswerAllowed()) {
    c.nacks_suppressed.Add(1);
    tx_.Drop(to.port_index, DropReason::kNackLimited, m);
    return;
  }
  // The request's header is read before the frame is overwritten. Answers
  // carry no key (ChunkFields).
  aggregator::AggFields f = aggregator::ReadAggFields(request);
  f.job_key = 0;
  f.opcode = opcode;
  f.aux = static_cast<uint32_t>(reason);
  f.elem_count = 0;
  if (opcode == aggregator::Opcode::kNack) f.flags = 0;
  if (SendHeaderOnly(m, f, to) && opcode == aggregator::Opcode::kNack) c.nacks_sent.Add(1);
}

void Answers::NoticeInPlace(rte_mbuf* m, const aggregator::AggHeader& request,
                            aggregator::NoticeKind kind, uint32_t awaited,
                            const aggregator::MemberAddr& to, To who) {
  AggregationCounters& c = stats_.lcore.agg;
  if (who == To::kUnverified && !AnswerAllowed()) {
    c.nacks_suppressed.Add(1);
    tx_.Drop(to.port_index, DropReason::kNackLimited, m);
    return;
  }
  aggregator::AggFields f = aggregator::ReadAggFields(request);
  f.job_key = 0;
  f.opcode = aggregator::Opcode::kNotice;
  f.flags = 0;
  f.aux = static_cast<uint32_t>(kind);
  f.expected = static_cast<uint16_t>(std::min<uint32_t>(awaited, UINT16_MAX));
  f.node_count = 0;
  f.elem_count = 0;
  if (SendHeaderOnly(m, f, to)) {
    (kind == aggregator::NoticeKind::kHeld ? c.held_notices : c.missing_notices).Add(1);
  }
}

void Answers::NackMember(const AggFrame& f, aggregator::NackReason reason, DropReason otherwise) {
  aggregator::MemberAddr addr;
  if (f.member >= 0 && f.job->GetMember(static_cast<uint16_t>(f.member), &addr)) {
    Nack(f.m, *f.pkt.header, reason, addr);
  } else {
    tx_.Drop(f.in_port, otherwise, f.m);
  }
}

bool Answers::Acknowledge(const aggregator::AggFields& f, const aggregator::MemberAddr& to) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    stats_.lcore.agg.result_no_mbuf.Add(1);
    return false;
  }
  return SendHeaderOnly(m, f, to);
}

bool Answers::SendData(const aggregator::AggFields& f, const uint8_t* payload, uint32_t len,
                       const aggregator::MemberAddr& to) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    stats_.lcore.agg.result_no_mbuf.Add(1);
    return false;
  }
  const uint32_t udp_len = sizeof(aggregator::AggHeader) + len;
  auto* buf = udp_len > UINT16_MAX
                  ? nullptr
                  : reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(udp_len)));
  if (buf == nullptr ||
      aggregator::BuildAggregation(f, nullptr, 0, payload, len, buf, udp_len) != udp_len) {
    rte_pktmbuf_free(m);
    stats_.lcore.agg.result_no_mbuf.Add(1);
    return false;
  }
  SendTo(m, to, static_cast<uint16_t>(f.seq));
  return true;
}

bool Answers::SendHeaderOnly(rte_mbuf* m, const aggregator::AggFields& f,
                             const aggregator::MemberAddr& to) {
  const bool tagged = plan_.EgressTagged(to.port_index, to.vlan);
  const uint32_t hdr_len = tagged ? 46 : 42;
  const uint32_t len = hdr_len + sizeof(aggregator::AggHeader);
  if (m->nb_segs != 1 ||
      len > static_cast<uint32_t>(rte_pktmbuf_data_len(m)) + rte_pktmbuf_tailroom(m)) {
    tx_.Drop(to.port_index, DropReason::kNoHeadroom, m);
    return false;
  }
  auto* out = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t dst[6];
  MacBytes(to.mac48, dst);
  WriteUdpHeaders(out, dst, plan_.switch_mac().bytes.data(), tagged ? to.vlan : 0, source_.ip,
                  to.ip, source_.udp_port, to.udp_port, static_cast<uint16_t>(f.seq),
                  sizeof(aggregator::AggHeader));
  aggregator::WriteAggHeader(f, 0, reinterpret_cast<aggregator::AggHeader*>(out + hdr_len));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  tx_.Enqueue(Egress(to), m);
  return true;
}

bool Answers::SendNotice(const aggregator::Job& job, uint16_t node_id, uint32_t seq,
                         aggregator::NoticeKind kind, const aggregator::MemberAddr& to,
                         uint16_t slot_hint) {
  AggregationCounters& c = stats_.lcore.agg;
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return false;
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kNotice;
  f.node_id = node_id;
  f.job_id = job.id();
  f.seq = seq;
  f.aux = static_cast<uint32_t>(kind);
  f.slot_hint = slot_hint;
  f.incarnation = to.incarnation;
  if (!SendHeaderOnly(m, f, to)) return false;
  switch (kind) {
    case aggregator::NoticeKind::kMissing: break;  // the caller says why
    case aggregator::NoticeKind::kRelocated: c.hints_issued.Add(1); break;
    default: c.notices_sent.Add(1); break;
  }
  return true;
}

void Answers::SendTo(rte_mbuf* m, const aggregator::MemberAddr& to, uint16_t ip_id) {
  const uint32_t udp_len = rte_pktmbuf_data_len(m);
  const bool tagged = plan_.EgressTagged(to.port_index, to.vlan);
  auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, tagged ? 46 : 42));
  if (out == nullptr) {
    tx_.Drop(to.port_index, DropReason::kNoHeadroom, m);
    return;
  }
  uint8_t dst[6];
  MacBytes(to.mac48, dst);
  WriteUdpHeaders(out, dst, plan_.switch_mac().bytes.data(), tagged ? to.vlan : 0, source_.ip,
                  to.ip, source_.udp_port, to.udp_port, ip_id, udp_len);
  tx_.Enqueue(Egress(to), m);
}

uint16_t Answers::Egress(const aggregator::MemberAddr& to) {
  const UplinkGroups& groups = plan_.groups();
  if (!groups.InGroup(to.port_index)) return to.port_index;
  const UplinkGroups::Member member = groups.Pick(
      to.port_index,
      {to.ip, DatagramHash(source_.ip, to.ip, source_.udp_port, to.udp_port), true});
  PortCounters& c = stats_.ports[member.port];
  (member.decided ? c.uplink_decided_packets : c.uplink_hashed_packets).Add(1);
  return member.port;
}

}  // namespace aggswitch::dataplane
