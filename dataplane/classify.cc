#include "dataplane/classify.h"

#include <rte_prefetch.h>

#include <cstddef>

#include "aggregator/wire.h"
#include "dataplane/mac_table.h"
#include "dataplane/packet.h"

namespace aggswitch::dataplane {
namespace {

constexpr uint64_t kMulticastBit = uint64_t{1} << 40;  // I/G bit of a MAC as Mac48()

}  // namespace

void Classifier::Sort(uint16_t in_port, rte_mbuf* const* pkts, uint16_t n, Burst* out) {
  L2Vector& l2v = out->l2;
  AggVector& agg = out->agg;
  uint64_t rx_bytes = 0;
  const bool looking = int_ != nullptr && int_->looking();
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 3 < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 3], void*));
    rte_mbuf* m = pkts[i];
    rx_bytes += m->pkt_len;
    const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
    L2Info l2;
    switch (ParseL2(data, rte_pktmbuf_data_len(m), &l2)) {
      case ParseStatus::kOk: break;
      case ParseStatus::kRunt: tx_.Drop(in_port, DropReason::kRunt, m); continue;
      case ParseStatus::kBadVlan: tx_.Drop(in_port, DropReason::kBadVlan, m); continue;
    }
    const uint16_t vlan = plan_.IngressVlan(in_port, l2.has_tag, l2.vid);
    if (vlan == 0) {
      tx_.Drop(in_port, DropReason::kVlanNotAllowed, m);
      continue;
    }
    const uint64_t src48 = SrcMac48(data);
    if (src48 & kMulticastBit) {
      tx_.Drop(in_port, DropReason::kSrcMulticast, m);
      continue;
    }
    // Nothing but the switch sends from its own MAC (or, below, its
    // aggregation address): a host that does impersonates it, e.g. forging
    // results to a job's members.
    if (src48 == plan_.switch_mac48()) {
      tx_.Drop(in_port, DropReason::kSrcSpoofed, m);
      continue;
    }
    const FrameMeta meta{vlan, l2.has_tag, static_cast<uint8_t>(l2.l3_offset)};
    // In-band telemetry first: a datagram with INT for this switch's own
    // aggregation comes out of it stripped, and classifies as the original.
    if (looking && !int_->OnFrame(m, data, rte_pktmbuf_data_len(m), l2.l3_offset,
                                  l2.ether_type == kEtherTypeIpv4, vlan)) {
      tx_.Drop(in_port, DropReason::kIntMalformed, m);
      continue;
    }
    if (agg_.enabled && l2.ether_type == kEtherTypeIpv4) {
      const Ipv4Class cls = ClassifyIpv4(data, rte_pktmbuf_data_len(m), l2.l3_offset);
      if (cls == Ipv4Class::kSpoofed) {
        tx_.Drop(in_port, DropReason::kSrcSpoofed, m);
        continue;
      }
      if (cls == Ipv4Class::kAggregation) {
        agg.meta[agg.n] = meta;
        agg.m[agg.n++] = m;
        continue;
      }
    }
    l2v.src[l2v.n] = MacKey(vlan, src48);
    l2v.dst[l2v.n] = MacKey(vlan, DstMac48(data));
    l2v.meta[l2v.n] = meta;
    l2v.m[l2v.n++] = m;
  }
  PortCounters& in = stats_.ports[in_port];
  in.rx_packets.Add(n);
  in.rx_bytes.Add(rx_bytes);
}

Classifier::Ipv4Class Classifier::ClassifyIpv4(const uint8_t* data, uint32_t len,
                                               uint32_t l3_offset) const {
  // Only the fixed IPv4 fields and the UDP destination port; ParseIpv4Udp
  // checks the rest on the aggregation path alone.
  if (len < l3_offset + sizeof(Ipv4Hdr)) return Ipv4Class::kOther;
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(data + l3_offset);
  const uint32_t src = ip->src.host();
  if (src != 0 && (src == agg_.address || src == agg_.result_src_ip)) return Ipv4Class::kSpoofed;
  if (len < l3_offset + sizeof(Ipv4Hdr) + sizeof(UdpHdr)) return Ipv4Class::kOther;
  if (ip->protocol != kIpProtoUdp) return Ipv4Class::kOther;
  if (agg_.address != 0 && ip->dst.host() == agg_.address) return Ipv4Class::kAggregation;
  const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
  if (len < l3_offset + ihl + sizeof(UdpHdr)) return Ipv4Class::kOther;
  const auto* udp = reinterpret_cast<const UdpHdr*>(data + l3_offset + ihl);
  if (udp->dst_port.host() != agg_.udp_port) return Ipv4Class::kOther;
  if (agg_.address == 0) return Ipv4Class::kAggregation;
  // With an aggregation address, the port trigger takes what workers send to
  // a peer; everything else (what a switch, a TAN or a parameter node sends
  // another host: a TAN below a leaf answering the root, a root's VERIFY or
  // data for its parameter node behind this switch) crosses this one at L2
  // (docs/protocol.md).
  const uint32_t opcode_at =
      l3_offset + ihl + sizeof(UdpHdr) + offsetof(aggregator::AggHeader, opcode);
  if (len <= opcode_at) return Ipv4Class::kAggregation;  // too short for a header: the parser counts it
  const auto opcode = static_cast<aggregator::Opcode>(data[opcode_at]);
  const uint32_t flags_at = opcode_at - offsetof(aggregator::AggHeader, opcode) +
                            offsetof(aggregator::AggHeader, flags);
  const uint16_t flags = len > flags_at + 1 ? static_cast<uint16_t>(data[flags_at] << 8 | data[flags_at + 1]) : 0;
  // A contribution for the parameter node that is not addressed here is a
  // root's, on its way there (a worker sends such data to its switch). An
  // ACK or FETCH flagged FINAL is a main server's, which addresses the
  // switch it means (the root it ACKs, the switch whose store it reads).
  const bool for_ps = (flags & (aggregator::flags::kAggregateAtPs | aggregator::flags::kConflict)) != 0;
  const bool main_server = (flags & aggregator::flags::kFinal) != 0;
  // A QUERY under the root's node id is a root's, asking its TAN after a
  // chunk it no longer holds (the TAN keeps the result a while).
  const uint32_t node_at = opcode_at - offsetof(aggregator::AggHeader, opcode) +
                           offsetof(aggregator::AggHeader, node_id);
  const bool from_a_root =
      len > node_at + 1 &&
      static_cast<uint16_t>(data[node_at] << 8 | data[node_at + 1]) == aggregator::kRootNodeId;
  const bool from_a_worker =
      (opcode == aggregator::Opcode::kContribution && !for_ps) || opcode == aggregator::Opcode::kTaskInfo ||
      (opcode == aggregator::Opcode::kQuery && !from_a_root) ||
      ((opcode == aggregator::Opcode::kAck || opcode == aggregator::Opcode::kFetch) && !main_server);
  return from_a_worker ? Ipv4Class::kAggregation : Ipv4Class::kOther;
}

}  // namespace aggswitch::dataplane
