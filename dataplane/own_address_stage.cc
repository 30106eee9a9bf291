#include "dataplane/own_address_stage.h"

#include "dataplane/mac_table.h"
#include "dataplane/packet.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

bool OwnAddressStage::Handle(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta, bool broadcast) {
  auto* data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = rte_pktmbuf_data_len(m);
  const be16_t ether_type = *reinterpret_cast<const be16_t*>(data + meta.l3_offset - 2);
  const bool multicast = (data[0] & 0x01) != 0;
  LocalVerdict verdict = LocalVerdict::kNotLocal;
  if (multicast) {
    // Broadcast ARP may ask for us; all other group traffic is plain L2.
    if (broadcast && ether_type == kEtherTypeArp) {
      verdict = HandleArp(data, len, meta.l3_offset, meta.vlan, plan_, false);
    }
  } else if (ether_type == kEtherTypeArp) {
    verdict = HandleArp(data, len, meta.l3_offset, meta.vlan, plan_, true);
    if (verdict == LocalVerdict::kUnhandled && neighbors_ != nullptr &&
        ReportNeighbor(in_port, data, len, meta)) {
      rte_pktmbuf_free(m);  // its content went up
      return true;
    }
  } else if (ether_type == kEtherTypeIpv4) {
    verdict = HandleIpv4ToSwitch(data, len, meta.l3_offset, meta.vlan, plan_);
  } else {
    verdict = LocalVerdict::kUnhandled;
  }
  switch (verdict) {
    case LocalVerdict::kNotLocal:
      return false;
    case LocalVerdict::kReplied:
      if (ether_type == kEtherTypeArp) {
        stats_.lcore.arp_replies.Add(1);
      } else {
        stats_.lcore.icmp_replies.Add(1);
      }
      // The reply leaves where the request came in, tagged as it came.
      tx_.Enqueue(in_port, m);
      return true;
    case LocalVerdict::kMalformed:
      tx_.Drop(in_port, DropReason::kToSwitchMalformed, m);
      return true;
    case LocalVerdict::kUnhandled:
      tx_.Drop(in_port, DropReason::kToSwitchUnhandled, m);
      return true;
  }
  return true;
}

bool OwnAddressStage::ReportNeighbor(uint16_t in_port, const uint8_t* data, uint32_t len,
                                     const FrameMeta& meta) {
  if (len < meta.l3_offset + sizeof(ArpHdr)) return false;
  const auto* arp = reinterpret_cast<const ArpHdr*>(data + meta.l3_offset);
  if (arp->oper != kArpOpReply) return false;
  NeighborReport report{Mac48(arp->sha), arp->spa.host(), in_port, meta.vlan};
  if (rte_ring_sp_enqueue_elem(neighbors_, &report, sizeof(report)) == 0) {
    stats_.lcore.agg.neighbor_reports.Add(1);
  } else {
    // The control thread resolves next hops again on its timer.
    stats_.lcore.agg.neighbor_ring_full.Add(1);
  }
  return true;
}

}  // namespace aggswitch::dataplane
