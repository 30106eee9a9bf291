// The immutable forwarding plan: per-port VLAN policy, per-VLAN flood sets,
// the uplink groups and the switch's own identity (MAC, IPv4 addresses).
//
// Built once from a validated Config on the control thread before the workers
// start, then only read. Port VLAN modes, groups and addresses need a restart
// to change (see docs/operations.md); that is what makes the plan immutable.
// The one exception is the uplink groups' path decisions, a snapshot of
// their own the control thread publishes (uplink_groups.h).
//
//   auto plan = ForwardingPlan::Build(config);
//   uint16_t vlan = plan->IngressVlan(port, has_tag, vid);   // 0: not allowed
//   uint64_t flood = plan->FloodMask(vlan) & ~(1ull << port);
//
// Thread safety: Build() on the control thread; everything else [any].
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/net_addr.h"
#include "config/config.h"
#include "dataplane/uplink_groups.h"

namespace aggswitch::dataplane {

class ForwardingPlan {
 public:
  struct PortPolicy {
    std::string name;
    bool trunk = false;
    uint16_t access_vlan = 0;  // access ports
    uint16_t native_vlan = 0;  // trunks; 0: untagged frames are dropped
    std::bitset<4096> allowed;  // VLANs carried (access: exactly access_vlan)
  };

  struct OwnAddress {
    uint32_t ip = 0;  // host order
    uint16_t vlan = 0;  // 0: every VLAN
  };

  static std::unique_ptr<ForwardingPlan> Build(const config::Config& config);

  uint16_t port_count() const { return n_ports_; }
  const PortPolicy& port(uint16_t p) const { return ports_[p]; }

  // VLAN a frame belongs to, or 0 when the port does not accept it.
  // `vid` is the 802.1Q VLAN id when has_tag (0 for a priority tag).
  uint16_t IngressVlan(uint16_t port, bool has_tag, uint16_t vid) const {
    const PortPolicy& p = ports_[port];
    if (!has_tag || vid == 0) return p.trunk ? p.native_vlan : p.access_vlan;
    if (!p.trunk) return 0;  // tagged frame on an access port
    return p.allowed.test(vid) ? vid : 0;
  }
  // Whether frames of `vlan` leave `port` with an 802.1Q tag.
  bool EgressTagged(uint16_t port, uint16_t vlan) const {
    const PortPolicy& p = ports_[port];
    return p.trunk && vlan != p.native_vlan;
  }
  // Ports that carry `vlan`, one bit per port; a flood leaves out the
  // members of uplink groups that do not flood now (groups().NonFlooding()).
  uint64_t FloodMask(uint16_t vlan) const { return flood_mask_[vlan & 0xfff]; }
  // The uplink groups (ports[].group). Publishing path decisions is the
  // control thread's. [any]
  const UplinkGroups& groups() const { return groups_; }
  UplinkGroups& groups() { return groups_; }

  const common::MacAddr& switch_mac() const { return switch_mac_; }
  uint64_t switch_mac48() const { return switch_mac48_; }
  // Whether `ip` (host order) is one of the switch's addresses on `vlan`.
  bool IsOwnAddress(uint32_t ip, uint16_t vlan) const {
    for (size_t i = 0; i < n_addresses_; ++i) {
      if (addresses_[i].ip == ip && (addresses_[i].vlan == 0 || addresses_[i].vlan == vlan))
        return true;
    }
    return false;
  }

 private:
  uint16_t n_ports_ = 0;
  PortPolicy ports_[config::kMaxPorts];
  uint64_t flood_mask_[4096] = {};
  UplinkGroups groups_;
  common::MacAddr switch_mac_;
  uint64_t switch_mac48_ = 0;
  OwnAddress addresses_[config::kMaxSwitchAddresses];
  size_t n_addresses_ = 0;
};

}  // namespace aggswitch::dataplane
