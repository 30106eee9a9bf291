// Frame parsing for the L2 fast path, and the switch's own ARP and ICMP echo
// responder. Pure functions on byte buffers: no mbufs, no EAL, so every
// malformed-frame case is unit-testable.
//
//   L2Info l2;
//   if (ParseL2(data, len, &l2) != ParseStatus::kOk) drop;
//   LocalVerdict v = HandleArp(data, len, l2.l3_offset, vlan, plan, to_our_mac);
//
// Thread safety: pure functions on the caller's buffer; any thread.
#pragma once

#include <cstdint>

#include "dataplane/forwarding_plan.h"
#include "dataplane/net_headers.h"
#include "dataplane/udp_headers.h"

namespace aggswitch::dataplane {

struct L2Info {
  uint32_t l3_offset = kEtherHdrLen;  // 14, or 18 behind one 802.1Q tag
  uint16_t vid = 0;                   // the tag's VLAN id (0: priority tag)
  bool has_tag = false;
  be16_t ether_type;  // after the tag
};

enum class ParseStatus : uint8_t { kOk, kRunt, kBadVlan };

// Parses the Ethernet header and at most one 802.1Q tag (an inner tag is payload).
inline ParseStatus ParseL2(const uint8_t* frame, uint32_t len, L2Info* out) {
  if (len < kEtherHdrLen) return ParseStatus::kRunt;
  const auto* eth = reinterpret_cast<const EtherHdr*>(frame);
  if (eth->ether_type != kEtherTypeVlan) {
    out->l3_offset = kEtherHdrLen;
    out->vid = 0;
    out->has_tag = false;
    out->ether_type = eth->ether_type;
    return ParseStatus::kOk;
  }
  if (len < kEtherHdrLen + kVlanHdrLen) return ParseStatus::kBadVlan;
  const auto* tag = reinterpret_cast<const VlanTag*>(frame + 12);
  const uint16_t vid = tag->tci.host() & kVlanIdMask;
  if (vid == kVlanIdMask) return ParseStatus::kBadVlan;  // 4095 is reserved
  out->l3_offset = kEtherHdrLen + kVlanHdrLen;
  out->vid = vid;
  out->has_tag = true;
  out->ether_type = *reinterpret_cast<const be16_t*>(frame + 16);
  return ParseStatus::kOk;
}

// What the responder did with a frame.
enum class LocalVerdict : uint8_t {
  kReplied,    // the buffer now holds the reply; send it back out the ingress port
  kNotLocal,   // not for the switch: switch it at L2
  kMalformed,  // addressed to the switch but failed header checks: drop
  kUnhandled,  // addressed to the switch, well formed, but nothing answers it: drop
};

// An IPv4/UDP datagram found in a frame.
struct UdpInfo {
  uint32_t src_ip = 0;  // host order
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t payload_offset = 0;  // from the start of the frame
  uint32_t payload_len = 0;     // UDP length - 8
};

enum class UdpParse : uint8_t {
  kOk,
  kNotUdp,      // not IPv4, or IPv4 but not UDP: not aggregation traffic
  kMalformed,   // IPv4 or UDP lengths, version or header checksum wrong
  kFragment,    // MF set or a fragment offset: never aggregation traffic
};

// Parses IPv4 and UDP at `l3_offset` (the ether type is already IPv4). Checks
// version, header length, total length against the frame, the header checksum
// and the UDP length. Options are skipped. [any thread]
UdpParse ParseIpv4Udp(const uint8_t* frame, uint32_t len, uint32_t l3_offset, UdpInfo* out);

// An ARP frame that is broadcast or unicast to the switch MAC (`to_switch_mac`).
// A request for one of the switch's addresses on `vlan` is rewritten in place
// into the reply. Anything else broadcast is kNotLocal (other hosts ARP too).
LocalVerdict HandleArp(uint8_t* frame, uint32_t len, uint32_t l3_offset, uint16_t vlan,
                       const ForwardingPlan& plan, bool to_switch_mac);

// An IPv4 frame unicast to the switch MAC. An ICMP echo request for one of the
// switch's addresses on `vlan` is rewritten in place into the echo reply; the
// frame length does not change.
LocalVerdict HandleIpv4ToSwitch(uint8_t* frame, uint32_t len, uint32_t l3_offset, uint16_t vlan,
                                const ForwardingPlan& plan);

}  // namespace aggswitch::dataplane
