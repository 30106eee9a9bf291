// Frame builders for tests: Ethernet (optionally 802.1Q-tagged), ARP requests
// and ICMP echo requests, as plain byte vectors.
//
//   Frame f = testframes::IcmpEcho(host_mac, switch_mac, "10.0.10.1", "10.0.10.254", 1, 1, 56);
//
// Thread safety: pure functions; any thread. Test code only.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/net_addr.h"
#include "dataplane/net_headers.h"
#include "dataplane/packet.h"

namespace aggswitch::dataplane::testframes {

using Frame = std::vector<uint8_t>;

// dst, src, [TPID 0x8100, TCI(pcp, vlan)], ether_type, then `payload` bytes of a counting pattern.
// vlan < 0: untagged.
inline Frame EthernetFrame(const common::MacAddr& src, const common::MacAddr& dst,
                           uint16_t ether_type, size_t payload, int vlan = -1, int pcp = 0) {
  Frame f;
  f.insert(f.end(), dst.bytes.begin(), dst.bytes.end());
  f.insert(f.end(), src.bytes.begin(), src.bytes.end());
  if (vlan >= 0) {
    const uint16_t tci = static_cast<uint16_t>((pcp << 13) | vlan);
    f.insert(f.end(), {0x81, 0x00, static_cast<uint8_t>(tci >> 8), static_cast<uint8_t>(tci)});
  }
  f.push_back(static_cast<uint8_t>(ether_type >> 8));
  f.push_back(static_cast<uint8_t>(ether_type));
  for (size_t i = 0; i < payload; ++i) f.push_back(static_cast<uint8_t>(i));
  return f;
}

inline void PutBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

inline Frame ArpRequest(const common::MacAddr& sender_mac, const std::string& sender_ip,
                        const std::string& target_ip, int vlan = -1) {
  Frame f = EthernetFrame(sender_mac, *common::MacAddr::Parse("ff:ff:ff:ff:ff:ff"), 0x0806, 28, vlan);
  uint8_t* arp = f.data() + f.size() - 28;
  const uint8_t fixed[] = {0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01};
  std::memcpy(arp, fixed, sizeof(fixed));
  std::memcpy(arp + 8, sender_mac.bytes.data(), 6);
  PutBe32(arp + 14, common::Ipv4Addr::Parse(sender_ip)->addr);
  std::memset(arp + 18, 0, 6);
  PutBe32(arp + 24, common::Ipv4Addr::Parse(target_ip)->addr);
  return f;
}

// A 20-byte IPv4 header at `ip` (DF, TTL 64, id 0x42) for a datagram of
// `ip_len` bytes, its checksum right, and the 8 bytes after it zeroed.
inline void PutIpv4Header(uint8_t* ip, size_t ip_len, uint8_t protocol, const std::string& src_ip,
                          const std::string& dst_ip) {
  std::memset(ip, 0, 28);
  ip[0] = 0x45;
  ip[2] = static_cast<uint8_t>(ip_len >> 8);
  ip[3] = static_cast<uint8_t>(ip_len);
  ip[5] = 0x42;  // id
  ip[6] = 0x40;  // DF
  ip[8] = 64;
  ip[9] = protocol;
  PutBe32(ip + 12, common::Ipv4Addr::Parse(src_ip)->addr);
  PutBe32(ip + 16, common::Ipv4Addr::Parse(dst_ip)->addr);
  const uint16_t ip_csum = InternetChecksum(ip, 20);
  std::memcpy(ip + 10, &ip_csum, 2);
}

inline Frame IcmpEcho(const common::MacAddr& src, const common::MacAddr& dst, const std::string& src_ip,
                      const std::string& dst_ip, uint16_t id, uint16_t seq, size_t payload,
                      int vlan = -1) {
  const size_t ip_len = 20 + 8 + payload;
  Frame f = EthernetFrame(src, dst, 0x0800, ip_len, vlan);
  uint8_t* ip = f.data() + f.size() - ip_len;
  PutIpv4Header(ip, ip_len, kIpProtoIcmp, src_ip, dst_ip);
  uint8_t* icmp = ip + 20;
  icmp[0] = kIcmpEchoRequest;
  icmp[4] = static_cast<uint8_t>(id >> 8);
  icmp[5] = static_cast<uint8_t>(id);
  icmp[6] = static_cast<uint8_t>(seq >> 8);
  icmp[7] = static_cast<uint8_t>(seq);
  const uint16_t icmp_csum = InternetChecksum(icmp, static_cast<uint32_t>(8 + payload));
  std::memcpy(icmp + 2, &icmp_csum, 2);
  return f;
}

// An IPv4/UDP datagram src_ip:sport -> dst_ip:dport with `payload` bytes of
// a counting pattern, both checksums right.
inline Frame UdpDatagram(const common::MacAddr& src, const common::MacAddr& dst,
                         const std::string& src_ip, const std::string& dst_ip, uint16_t sport,
                         uint16_t dport, size_t payload, int vlan = -1) {
  const size_t ip_len = 20 + 8 + payload;
  Frame f = EthernetFrame(src, dst, 0x0800, ip_len, vlan);
  uint8_t* ip = f.data() + f.size() - ip_len;
  PutIpv4Header(ip, ip_len, kIpProtoUdp, src_ip, dst_ip);
  uint8_t* udp = ip + 20;
  const size_t udp_len = 8 + payload;
  const uint8_t header[8] = {static_cast<uint8_t>(sport >> 8), static_cast<uint8_t>(sport),
                             static_cast<uint8_t>(dport >> 8), static_cast<uint8_t>(dport),
                             static_cast<uint8_t>(udp_len >> 8), static_cast<uint8_t>(udp_len), 0, 0};
  std::memcpy(udp, header, 8);
  // The checksum over the pseudo-header and the datagram.
  std::vector<uint8_t> sum(12 + udp_len);
  std::memcpy(sum.data(), ip + 12, 8);
  sum[9] = kIpProtoUdp;
  sum[10] = header[4];
  sum[11] = header[5];
  std::memcpy(sum.data() + 12, udp, udp_len);
  uint16_t udp_csum = InternetChecksum(sum.data(), static_cast<uint32_t>(sum.size()));
  if (udp_csum == 0) udp_csum = 0xFFFF;
  std::memcpy(udp + 6, &udp_csum, 2);
  return f;
}

}  // namespace aggswitch::dataplane::testframes
