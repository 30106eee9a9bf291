#include "dataplane/packet.h"

#include <cstring>

namespace aggswitch::dataplane {

LocalVerdict HandleArp(uint8_t* frame, uint32_t len, uint32_t l3_offset, uint16_t vlan,
                       const ForwardingPlan& plan, bool to_switch_mac) {
  const LocalVerdict bad = to_switch_mac ? LocalVerdict::kMalformed : LocalVerdict::kNotLocal;
  if (len < l3_offset + sizeof(ArpHdr)) return bad;
  auto* arp = reinterpret_cast<ArpHdr*>(frame + l3_offset);
  if (arp->htype != kArpHtypeEthernet || arp->ptype != kEtherTypeIpv4 || arp->hlen != 6 ||
      arp->plen != 4) {
    return bad;
  }
  if (arp->oper != kArpOpRequest || !plan.IsOwnAddress(arp->tpa.host(), vlan)) {
    return to_switch_mac ? LocalVerdict::kUnhandled : LocalVerdict::kNotLocal;
  }
  // Reply: target <- sender, sender <- us. The Ethernet header follows suit.
  auto* eth = reinterpret_cast<EtherHdr*>(frame);
  const uint8_t* own = plan.switch_mac().bytes.data();
  std::memcpy(eth->dst, arp->sha, 6);
  std::memcpy(eth->src, own, 6);
  arp->oper = kArpOpReply;
  const be32_t requested = arp->tpa;
  std::memcpy(arp->tha, arp->sha, 6);
  arp->tpa = arp->spa;
  std::memcpy(arp->sha, own, 6);
  arp->spa = requested;
  return LocalVerdict::kReplied;
}

LocalVerdict HandleIpv4ToSwitch(uint8_t* frame, uint32_t len, uint32_t l3_offset, uint16_t vlan,
                                const ForwardingPlan& plan) {
  if (len < l3_offset + sizeof(Ipv4Hdr)) return LocalVerdict::kMalformed;
  auto* ip = reinterpret_cast<Ipv4Hdr*>(frame + l3_offset);
  const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
  const uint32_t total = ip->total_length.host();
  if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(Ipv4Hdr) || total < ihl ||
      l3_offset + total > len) {
    return LocalVerdict::kMalformed;
  }
  if (InternetChecksum(ip, ihl) != 0) return LocalVerdict::kMalformed;
  if (!plan.IsOwnAddress(ip->dst.host(), vlan)) return LocalVerdict::kUnhandled;
  // Fragments (MF set or an offset) are not reassembled: nothing here needs them.
  if ((ip->frag_off.host() & 0x3fff) != 0) return LocalVerdict::kUnhandled;
  if (ip->protocol != kIpProtoIcmp) return LocalVerdict::kUnhandled;
  const uint32_t icmp_len = total - ihl;
  if (icmp_len < sizeof(IcmpHdr)) return LocalVerdict::kMalformed;
  auto* icmp = reinterpret_cast<IcmpHdr*>(frame + l3_offset + ihl);
  if (InternetChecksum(icmp, icmp_len) != 0) return LocalVerdict::kMalformed;
  if (icmp->type != kIcmpEchoRequest || icmp->code != 0) return LocalVerdict::kUnhandled;

  auto* eth = reinterpret_cast<EtherHdr*>(frame);
  std::memcpy(eth->dst, eth->src, 6);
  std::memcpy(eth->src, plan.switch_mac().bytes.data(), 6);
  const be32_t src = ip->src;
  ip->src = ip->dst;
  ip->dst = src;
  ip->ttl = 64;
  ip->checksum = 0;
  ip->checksum = InternetChecksum(ip, ihl);
  icmp->type = kIcmpEchoReply;
  icmp->checksum = 0;
  icmp->checksum = InternetChecksum(icmp, icmp_len);
  return LocalVerdict::kReplied;
}

UdpParse ParseIpv4Udp(const uint8_t* frame, uint32_t len, uint32_t l3_offset, UdpInfo* out) {
  if (len < l3_offset + sizeof(Ipv4Hdr)) return UdpParse::kMalformed;
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(frame + l3_offset);
  if (ip->protocol != kIpProtoUdp) return UdpParse::kNotUdp;
  const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
  const uint32_t total = ip->total_length.host();
  if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(Ipv4Hdr) || total < ihl + sizeof(UdpHdr) ||
      l3_offset + total > len) {
    return UdpParse::kMalformed;
  }
  if ((ip->frag_off.host() & 0x3fff) != 0) return UdpParse::kFragment;
  if (InternetChecksum(ip, ihl) != 0) return UdpParse::kMalformed;
  const auto* udp = reinterpret_cast<const UdpHdr*>(frame + l3_offset + ihl);
  const uint32_t udp_len = udp->length.host();
  if (udp_len < sizeof(UdpHdr) || udp_len > total - ihl) return UdpParse::kMalformed;
  out->src_ip = ip->src.host();
  out->dst_ip = ip->dst.host();
  out->src_port = udp->src_port.host();
  out->dst_port = udp->dst_port.host();
  out->payload_offset = l3_offset + ihl + static_cast<uint32_t>(sizeof(UdpHdr));
  out->payload_len = udp_len - static_cast<uint32_t>(sizeof(UdpHdr));
  return UdpParse::kOk;
}

}  // namespace aggswitch::dataplane
