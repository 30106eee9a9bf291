// Headers of the UDP datagrams the switch and the clients send themselves:
// Ethernet, an optional 802.1Q tag, IPv4 and UDP, and the Internet checksum.
// Pure functions on byte buffers, without DPDK, so that the client library's
// AF_XDP transport writes its frames with the same code as the switch.
//
//   const uint32_t hdr = WriteUdpHeaders(frame, dst_mac, src_mac, 0, src_ip, dst_ip,
//                                        src_port, dst_port, ip_id, payload_len);
//   std::memcpy(frame + hdr, payload, payload_len);
//
// Thread safety: pure functions on the caller's buffer; any thread.
#pragma once

#include <cstdint>

namespace aggswitch::dataplane {

// Writes Ethernet, an optional 802.1Q tag (vlan_tag != 0), IPv4 (DF, TTL 64,
// header checksum) and UDP (checksum 0) headers for a datagram of `udp_payload_len`
// bytes. Returns the header length (42, or 46 tagged). `out` must have room.
// [any thread]
uint32_t WriteUdpHeaders(uint8_t* out, const uint8_t dst_mac[6], const uint8_t src_mac[6],
                         uint16_t vlan_tag, uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
                         uint16_t dst_port, uint16_t ip_id, uint32_t udp_payload_len);

// Ones' complement Internet checksum over `len` bytes, ready to store as-is.
uint16_t InternetChecksum(const void* data, uint32_t len);

}  // namespace aggswitch::dataplane
