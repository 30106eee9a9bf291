#include "dataplane/udp_headers.h"

#include <cstring>

#include "dataplane/net_headers.h"

namespace aggswitch::dataplane {

uint16_t InternetChecksum(const void* data, uint32_t len) {
  // RFC 1071: the one's-complement sum is the same whatever the word size, so
  // add 32-bit words into 64 bits (no carry can be lost below 2^32 words)
  // and fold at the end. Byte order does not matter either (RFC 1071 §2(B)).
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t sum = 0;
  for (; len >= 4; p += 4, len -= 4) {
    uint32_t word;
    std::memcpy(&word, p, 4);
    sum += word;
  }
  if (len >= 2) {
    uint16_t word;
    std::memcpy(&word, p, 2);
    sum += word;
    p += 2;
    len -= 2;
  }
  if (len) sum += *p;  // the odd byte, as the high-order byte of a zero-padded word
  sum = (sum & 0xffffffff) + (sum >> 32);
  sum = (sum & 0xffffffff) + (sum >> 32);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

uint32_t WriteUdpHeaders(uint8_t* out, const uint8_t dst_mac[6], const uint8_t src_mac[6],
                         uint16_t vlan_tag, uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
                         uint16_t dst_port, uint16_t ip_id, uint32_t udp_payload_len) {
  auto* eth = reinterpret_cast<EtherHdr*>(out);
  std::memcpy(eth->dst, dst_mac, 6);
  std::memcpy(eth->src, src_mac, 6);
  uint32_t off = 12;
  if (vlan_tag != 0) {
    auto* tag = reinterpret_cast<VlanTag*>(out + off);
    tag->tpid = kEtherTypeVlan;
    tag->tci = be16_t::FromHost(vlan_tag & kVlanIdMask);
    off += kVlanHdrLen;
  }
  *reinterpret_cast<be16_t*>(out + off) = kEtherTypeIpv4;
  off += 2;
  auto* ip = reinterpret_cast<Ipv4Hdr*>(out + off);
  const uint32_t udp_len = static_cast<uint32_t>(sizeof(UdpHdr)) + udp_payload_len;
  ip->version_ihl = 0x45;
  ip->tos = 0;
  ip->total_length = be16_t::FromHost(static_cast<uint16_t>(sizeof(Ipv4Hdr) + udp_len));
  ip->id = be16_t::FromHost(ip_id);
  ip->frag_off = be16_t::FromHost(0x4000);  // DF
  ip->ttl = 64;
  ip->protocol = kIpProtoUdp;
  ip->src = be32_t::FromHost(src_ip);
  ip->dst = be32_t::FromHost(dst_ip);
  // The checksum from the values rather than from the header just stored:
  // reading those narrow stores back stalls on store forwarding. Host-order
  // 16-bit words; the sum of them is the header's (RFC 1071 §2(B)).
  uint32_t sum = 0x4500 + sizeof(Ipv4Hdr) + udp_len + ip_id + 0x4000 + (64u << 8 | kIpProtoUdp) +
                 (src_ip >> 16) + (src_ip & 0xffff) + (dst_ip >> 16) + (dst_ip & 0xffff);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  ip->checksum = be16_t::FromHost(static_cast<uint16_t>(~sum)).raw();
  off += sizeof(Ipv4Hdr);
  auto* udp = reinterpret_cast<UdpHdr*>(out + off);
  udp->src_port = be16_t::FromHost(src_port);
  udp->dst_port = be16_t::FromHost(dst_port);
  udp->length = be16_t::FromHost(static_cast<uint16_t>(udp_len));
  udp->checksum = 0;
  return off + static_cast<uint32_t>(sizeof(UdpHdr));
}

}  // namespace aggswitch::dataplane
