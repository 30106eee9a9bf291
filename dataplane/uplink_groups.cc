#include "dataplane/uplink_groups.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "dataplane/net_headers.h"

namespace aggswitch::dataplane {
namespace {

constexpr uint8_t kIpProtoTcp = 6;

uint32_t Mix(uint64_t a, uint64_t b) {
  uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 29;
  return static_cast<uint32_t>(h >> 32);
}

}  // namespace

uint32_t DatagramHash(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port) {
  return Mix(uint64_t{src_ip} << 32 | dst_ip, uint64_t{kIpProtoUdp} << 32 | uint32_t{src_port} << 16 | dst_port);
}

FlowChoice FrameFlow(const rte_mbuf* m, uint8_t l3_offset, uint64_t src_key, uint64_t dst_key) {
  const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint32_t len = rte_pktmbuf_data_len(m);
  be16_t ether_type;
  std::memcpy(&ether_type, frame + l3_offset - 2, sizeof(ether_type));
  if (ether_type != kEtherTypeIpv4 || len < l3_offset + sizeof(Ipv4Hdr)) {
    return FlowChoice{0, Mix(src_key, dst_key), false};
  }
  Ipv4Hdr ip;
  std::memcpy(&ip, frame + l3_offset, sizeof(ip));
  const uint32_t ihl = (ip.version_ihl & 0x0f) * 4u;
  uint32_t ports = 0;
  // The first fragment's ports would send it apart from its later fragments.
  const bool fragment = (ip.frag_off.host() & 0x3fff) != 0;
  if ((ip.protocol == kIpProtoUdp || ip.protocol == kIpProtoTcp) && !fragment && ihl >= 20 &&
      len >= l3_offset + ihl + 4) {
    std::memcpy(&ports, frame + l3_offset + ihl, sizeof(ports));
  }
  const uint32_t src = ip.src.host();
  const uint32_t dst = ip.dst.host();
  return FlowChoice{dst, Mix(uint64_t{src} << 32 | dst, uint64_t{ip.protocol} << 32 | ports), true};
}

UplinkGroups::~UplinkGroups() { delete decisions_.load(std::memory_order_acquire); }

void UplinkGroups::Build(const config::Config& config) {
  const size_t n = std::min(config.ports.size(), config::kMaxPorts);
  std::map<std::string, uint64_t> members;
  for (size_t p = 0; p < n; ++p) {
    if (!config.ports[p].group.empty()) members[config.ports[p].group] |= uint64_t{1} << p;
  }
  for (size_t p = 0; p < n; ++p) {
    learn_port_[p] = static_cast<uint16_t>(p);
    same_group_[p] = uint64_t{1} << p;
    group_of_[p] = kNoGroup;
  }
  n_groups_ = 0;
  all_members_ = 0;
  for (const auto& [name, mask] : members) {
    if ((mask & (mask - 1)) == 0) continue;  // one member: a port like any other
    Group& g = groups_[n_groups_];
    g.name = name;
    g.members = mask;
    g.n = 0;
    for (uint64_t rest = mask; rest != 0; rest &= rest - 1) {
      const auto p = static_cast<uint8_t>(__builtin_ctzll(rest));
      g.member[g.n++] = p;
      learn_port_[p] = g.member[0];
      same_group_[p] = mask;
      group_of_[p] = static_cast<uint8_t>(n_groups_);
    }
    all_members_ |= mask;
    ++n_groups_;
  }
  SetDown(0);
}

void UplinkGroups::SetDown(uint64_t down) {
  uint64_t non_flooding = 0;
  for (size_t i = 0; i < n_groups_; ++i) {
    const Group& g = groups_[i];
    const uint64_t live = g.members & ~down;
    const uint64_t flooding = live != 0 ? live & (~live + 1) : uint64_t{1} << g.member[0];
    non_flooding |= g.members & ~flooding;
  }
  down_.store(down & all_members_, std::memory_order_relaxed);
  non_flooding_.store(non_flooding, std::memory_order_relaxed);
}

const std::string& UplinkGroups::name(uint16_t port) const {
  static const std::string kNone;
  return InGroup(port) ? groups_[group_of_[port]].name : kNone;
}

std::unique_ptr<const PathDecisions> UplinkGroups::Publish(std::unique_ptr<const PathDecisions> next) {
  return std::unique_ptr<const PathDecisions>(
      decisions_.exchange(next.release(), std::memory_order_acq_rel));
}

}  // namespace aggswitch::dataplane
