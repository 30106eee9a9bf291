// frame_fuzz: the dataplane's frame parsing and its ARP / ICMP echo responder
// (dataplane/packet.h), and the aggregation path's frame check
// (dataplane::ParseAggregationFrame, dataplane/aggregation_stage.h), on arbitrary frames,
// as a worker lcore meets them. No EAL: these are pure functions on buffers.
//
// Input: one byte choosing the ingress port (its index modulo the ports of
// the embedded default config, config/examples/default.yaml: three access
// ports in VLAN 10 and a trunk carrying VLANs 10 and 20), then the frame.
//
// Invariants, each a finding when broken:
//   * ParseL2: kRunt exactly below 14 bytes; kOk gives l3 offset 14 untagged
//     or 18 behind one tag, a VID below 4095, and the ether type found there;
//     the VLAN the port maps it to carries the port in its flood set;
//   * ParseIpv4Udp: a parsed datagram's payload lies inside the frame behind
//     valid IPv4 (checksum 0) and UDP headers; WriteUdpHeaders of the parsed
//     addresses, ports and tag, followed by the payload, parses back to the
//     same datagram, and ParseAggregationFrame judges both frames alike;
//     ParseAggregationFrame accepts only what ParseIpv4Udp and
//     ParseAggregation accept, with the header and payload inside the frame;
//   * HandleArp / HandleIpv4ToSwitch: anything but kReplied leaves the frame
//     untouched; a broadcast ARP is only ever kReplied or kNotLocal; a reply
//     changes exactly the fields a reply must (Ethernet addresses, ARP
//     operation and addresses; ICMP type, IP addresses, TTL and both
//     checksums, which then verify), answers only a request for one of the
//     switch's addresses on the frame's VLAN, and is not answered again.
#include <cstring>
#include <memory>
#include <vector>

#include "config/loader.h"
#include "dataplane/packet.h"
#include "dataplane/aggregation_stage.h"
#include "tests/fuzz/fuzz_check.h"

namespace aggswitch::dataplane {
namespace {

const ForwardingPlan& Plan() {
  static const std::unique_ptr<ForwardingPlan> plan = [] {
    config::ConfigLoad load =
        config::LoadConfigText(config::EmbeddedDefaultConfigText(), "<embedded>");
    FUZZ_CHECK(load.ok());
    return ForwardingPlan::Build(load.config);
  }();
  return *plan;
}

bool Same(const uint8_t* a, const uint8_t* b, size_t n) {
  return std::memcmp(a, b, n) == 0;
}

void CheckL2(const uint8_t* frame, uint32_t len, ParseStatus st, const L2Info& l2) {
  FUZZ_CHECK((st == ParseStatus::kRunt) == (len < kEtherHdrLen));
  if (st != ParseStatus::kOk) return;
  if (l2.has_tag) {
    FUZZ_CHECK(l2.l3_offset == kEtherHdrLen + kVlanHdrLen && len >= l2.l3_offset);
    FUZZ_CHECK(l2.vid < kVlanIdMask);
  } else {
    FUZZ_CHECK(l2.l3_offset == kEtherHdrLen && l2.vid == 0);
  }
  FUZZ_CHECK(Same(frame + l2.l3_offset - 2, reinterpret_cast<const uint8_t*>(&l2.ether_type), 2));
}

// Builds the frame the switch would send with the parsed datagram's
// addresses, ports, tag and payload.
std::vector<uint8_t> Rebuild(const uint8_t* frame, const L2Info& l2, const UdpInfo& udp) {
  std::vector<uint8_t> out(kEtherHdrLen + kVlanHdrLen + sizeof(Ipv4Hdr) + sizeof(UdpHdr) +
                           udp.payload_len);
  const auto* eth = reinterpret_cast<const EtherHdr*>(frame);
  const uint16_t tag = l2.has_tag ? l2.vid : 0;
  const uint32_t hdr = WriteUdpHeaders(out.data(), eth->dst, eth->src, tag, udp.src_ip, udp.dst_ip,
                                       udp.src_port, udp.dst_port, 0x1234, udp.payload_len);
  std::memcpy(out.data() + hdr, frame + udp.payload_offset, udp.payload_len);
  out.resize(hdr + udp.payload_len);
  return out;
}

void CheckUdp(const uint8_t* frame, uint32_t len, const L2Info& l2) {
  UdpInfo udp;
  const UdpParse r = ParseIpv4Udp(frame, len, l2.l3_offset, &udp);
  UdpInfo udp2;
  aggregator::AggPacket pkt;
  const bool agg = ParseAggregationFrame(frame, len, l2.l3_offset, &udp2, &pkt);
  if (r != UdpParse::kOk) {
    FUZZ_CHECK(!agg);
    return;
  }
  const uint32_t ihl = (frame[l2.l3_offset] & 0x0f) * 4u;
  FUZZ_CHECK(InternetChecksum(frame + l2.l3_offset, ihl) == 0);
  FUZZ_CHECK(udp.payload_offset == l2.l3_offset + ihl + sizeof(UdpHdr));
  FUZZ_CHECK(udp.payload_offset <= len && udp.payload_len <= len - udp.payload_offset);
  if (agg) {
    FUZZ_CHECK(udp2.payload_offset == udp.payload_offset && udp2.payload_len == udp.payload_len);
    const uint8_t* payload = frame + udp.payload_offset;
    FUZZ_CHECK(reinterpret_cast<const uint8_t*>(pkt.header) == payload);
    FUZZ_CHECK(pkt.payload >= payload &&
               pkt.payload + pkt.payload_len <= payload + udp.payload_len);
  }

  const std::vector<uint8_t> built = Rebuild(frame, l2, udp);
  const uint32_t built_len = static_cast<uint32_t>(built.size());
  L2Info l2b;
  FUZZ_CHECK(ParseL2(built.data(), built_len, &l2b) == ParseStatus::kOk);
  FUZZ_CHECK(l2b.has_tag == (l2.has_tag && l2.vid != 0) && l2b.vid == (l2b.has_tag ? l2.vid : 0));
  FUZZ_CHECK(l2b.ether_type == kEtherTypeIpv4);
  UdpInfo back;
  FUZZ_CHECK(ParseIpv4Udp(built.data(), built_len, l2b.l3_offset, &back) == UdpParse::kOk);
  FUZZ_CHECK(back.src_ip == udp.src_ip && back.dst_ip == udp.dst_ip &&
             back.src_port == udp.src_port && back.dst_port == udp.dst_port &&
             back.payload_len == udp.payload_len &&
             back.payload_offset + back.payload_len == built_len);
  aggregator::AggPacket pkt_b;
  FUZZ_CHECK(ParseAggregationFrame(built.data(), built_len, l2b.l3_offset, &back, &pkt_b) == agg);
}

void CheckArp(const uint8_t* frame, uint32_t len, const L2Info& l2, uint16_t vlan,
              bool to_switch_mac) {
  const ForwardingPlan& plan = Plan();
  std::vector<uint8_t> buf(frame, frame + len);
  const LocalVerdict v = HandleArp(buf.data(), len, l2.l3_offset, vlan, plan, to_switch_mac);
  if (!to_switch_mac) FUZZ_CHECK(v == LocalVerdict::kReplied || v == LocalVerdict::kNotLocal);
  if (v != LocalVerdict::kReplied) {
    FUZZ_CHECK(Same(buf.data(), frame, len));
    return;
  }
  const uint32_t l3 = l2.l3_offset;
  FUZZ_CHECK(len >= l3 + sizeof(ArpHdr));
  const auto* in = reinterpret_cast<const ArpHdr*>(frame + l3);
  const auto* out = reinterpret_cast<const ArpHdr*>(buf.data() + l3);
  const uint8_t* own = plan.switch_mac().bytes.data();
  FUZZ_CHECK(in->oper == kArpOpRequest && plan.IsOwnAddress(in->tpa.host(), vlan));
  FUZZ_CHECK(Same(buf.data(), in->sha, 6) && Same(buf.data() + 6, own, 6));
  FUZZ_CHECK(Same(buf.data() + 12, frame + 12, l3 - 12));  // tag and ether type
  FUZZ_CHECK(Same(buf.data() + l3, frame + l3, 6));        // htype, ptype, hlen, plen
  FUZZ_CHECK(out->oper == kArpOpReply);
  FUZZ_CHECK(Same(out->sha, own, 6) && out->spa == in->tpa);
  FUZZ_CHECK(Same(out->tha, in->sha, 6) && out->tpa == in->spa);
  const uint32_t end = l3 + sizeof(ArpHdr);
  FUZZ_CHECK(Same(buf.data() + end, frame + end, len - end));
  // A reply is no request: answering it again would loop.
  FUZZ_CHECK(HandleArp(buf.data(), len, l3, vlan, plan, true) != LocalVerdict::kReplied);
}

void CheckIcmp(const uint8_t* frame, uint32_t len, const L2Info& l2, uint16_t vlan) {
  const ForwardingPlan& plan = Plan();
  std::vector<uint8_t> buf(frame, frame + len);
  const LocalVerdict v = HandleIpv4ToSwitch(buf.data(), len, l2.l3_offset, vlan, plan);
  if (v != LocalVerdict::kReplied) {
    FUZZ_CHECK(Same(buf.data(), frame, len));
    return;
  }
  const uint32_t l3 = l2.l3_offset;
  const auto* ip_in = reinterpret_cast<const Ipv4Hdr*>(frame + l3);
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(buf.data() + l3);
  const uint32_t ihl = (ip_in->version_ihl & 0x0f) * 4u;
  const uint32_t total = ip_in->total_length.host();
  FUZZ_CHECK(ihl >= sizeof(Ipv4Hdr) && total >= ihl + sizeof(IcmpHdr) && l3 + total <= len);
  FUZZ_CHECK(ip_in->protocol == kIpProtoIcmp && plan.IsOwnAddress(ip_in->dst.host(), vlan));
  const auto* icmp_in = reinterpret_cast<const IcmpHdr*>(frame + l3 + ihl);
  const auto* icmp = reinterpret_cast<const IcmpHdr*>(buf.data() + l3 + ihl);
  FUZZ_CHECK(icmp_in->type == kIcmpEchoRequest && icmp_in->code == 0);

  FUZZ_CHECK(Same(buf.data(), frame + 6, 6));
  FUZZ_CHECK(Same(buf.data() + 6, plan.switch_mac().bytes.data(), 6));
  FUZZ_CHECK(Same(buf.data() + 12, frame + 12, l3 - 12));
  FUZZ_CHECK(Same(buf.data() + l3, frame + l3, 8));  // version .. frag_off
  FUZZ_CHECK(ip->ttl == 64 && ip->protocol == ip_in->protocol);
  FUZZ_CHECK(ip->src == ip_in->dst && ip->dst == ip_in->src);
  FUZZ_CHECK(Same(buf.data() + l3 + sizeof(Ipv4Hdr), frame + l3 + sizeof(Ipv4Hdr),
                  ihl - sizeof(Ipv4Hdr)));  // options
  FUZZ_CHECK(InternetChecksum(ip, ihl) == 0);
  FUZZ_CHECK(icmp->type == kIcmpEchoReply && icmp->code == 0);
  FUZZ_CHECK(InternetChecksum(icmp, total - ihl) == 0);
  const uint32_t rest = l3 + ihl + 4;  // id, seq, data, then what follows the datagram
  FUZZ_CHECK(Same(buf.data() + rest, frame + rest, len - rest));
  FUZZ_CHECK(HandleIpv4ToSwitch(buf.data(), len, l3, vlan, plan) == LocalVerdict::kUnhandled);
}

}  // namespace
}  // namespace aggswitch::dataplane

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace aggswitch::dataplane;
  if (size < 1) return 0;
  const ForwardingPlan& plan = Plan();
  const uint16_t port = static_cast<uint16_t>(data[0] % plan.port_count());
  // The frame in a buffer of its own size: ASan sees every read past its end.
  const std::vector<uint8_t> copy(data + 1, data + size);
  const uint8_t* frame = copy.data();
  const uint32_t len = static_cast<uint32_t>(copy.size());

  L2Info l2;
  const ParseStatus st = ParseL2(frame, len, &l2);
  CheckL2(frame, len, st, l2);
  if (st != ParseStatus::kOk) return 0;
  const uint16_t vlan = plan.IngressVlan(port, l2.has_tag, l2.vid);
  if (vlan == 0) return 0;  // the worker drops it (kVlanNotAllowed)
  FUZZ_CHECK(vlan <= aggswitch::config::kMaxVlan && (plan.FloodMask(vlan) >> port & 1) != 0);

  if (l2.ether_type == kEtherTypeIpv4) {
    CheckUdp(frame, len, l2);
    CheckIcmp(frame, len, l2, vlan);
  } else if (l2.ether_type == kEtherTypeArp) {
    CheckArp(frame, len, l2, vlan, /*to_switch_mac=*/false);
    CheckArp(frame, len, l2, vlan, /*to_switch_mac=*/true);
  }
  return 0;
}
