// Wire formats the L2 dataplane reads and writes: Ethernet, 802.1Q, ARP, IPv4,
// ICMP. Packed structs with pinned sizes and typed big-endian fields, so a
// field in network order can never be mistaken for a host-order integer.
//
//   const auto* eth = reinterpret_cast<const EtherHdr*>(frame);
//   if (eth->ether_type == kEtherTypeVlan) ...       // compares be16 with be16
//   uint16_t vid = vlan->tci.host() & kVlanIdMask;
//
// Thread safety: value types; any thread.
#pragma once

#include <cstdint>

#include "common/big_endian.h"

namespace aggswitch::dataplane {

using common::be16_t;
using common::be32_t;

inline constexpr be16_t kEtherTypeIpv4 = be16_t::FromHost(0x0800);
inline constexpr be16_t kEtherTypeArp = be16_t::FromHost(0x0806);
inline constexpr be16_t kEtherTypeVlan = be16_t::FromHost(0x8100);
inline constexpr be16_t kEtherTypeQinQ = be16_t::FromHost(0x88a8);
inline constexpr uint16_t kVlanIdMask = 0x0fff;

inline constexpr uint32_t kEtherHdrLen = 14;
inline constexpr uint32_t kVlanHdrLen = 4;
inline constexpr uint32_t kMinFrameLen = 60;  // without FCS; shorter frames are runts

struct [[gnu::packed]] EtherHdr {
  uint8_t dst[6];
  uint8_t src[6];
  be16_t ether_type;
};
static_assert(sizeof(EtherHdr) == 14);

// The 802.1Q tag as it follows the source MAC: TPID then TCI.
struct [[gnu::packed]] VlanTag {
  be16_t tpid;
  be16_t tci;  // PCP(3) DEI(1) VID(12)
};
static_assert(sizeof(VlanTag) == 4);

struct [[gnu::packed]] ArpHdr {
  be16_t htype;  // 1: Ethernet
  be16_t ptype;  // 0x0800: IPv4
  uint8_t hlen;  // 6
  uint8_t plen;  // 4
  be16_t oper;   // 1 request, 2 reply
  uint8_t sha[6];
  be32_t spa;
  uint8_t tha[6];
  be32_t tpa;
};
static_assert(sizeof(ArpHdr) == 28);
inline constexpr be16_t kArpHtypeEthernet = be16_t::FromHost(1);
inline constexpr be16_t kArpOpRequest = be16_t::FromHost(1);
inline constexpr be16_t kArpOpReply = be16_t::FromHost(2);

struct [[gnu::packed]] Ipv4Hdr {
  uint8_t version_ihl;
  uint8_t tos;
  be16_t total_length;
  be16_t id;
  be16_t frag_off;
  uint8_t ttl;
  uint8_t protocol;
  uint16_t checksum;  // ones' complement sum; byte order handled by the checksum code
  be32_t src;
  be32_t dst;
};
static_assert(sizeof(Ipv4Hdr) == 20);
inline constexpr uint8_t kIpProtoIcmp = 1;
inline constexpr uint8_t kIpProtoUdp = 17;

struct [[gnu::packed]] UdpHdr {
  be16_t src_port;
  be16_t dst_port;
  be16_t length;  // header + payload
  uint16_t checksum;  // 0: none (allowed over IPv4)
};
static_assert(sizeof(UdpHdr) == 8);

struct [[gnu::packed]] IcmpHdr {
  uint8_t type;
  uint8_t code;
  uint16_t checksum;
  be16_t id;
  be16_t seq;
};
static_assert(sizeof(IcmpHdr) == 8);
inline constexpr uint8_t kIcmpEchoReply = 0;
inline constexpr uint8_t kIcmpEchoRequest = 8;

}  // namespace aggswitch::dataplane
