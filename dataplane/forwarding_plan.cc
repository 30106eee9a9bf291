#include "dataplane/forwarding_plan.h"

#include <algorithm>

namespace aggswitch::dataplane {

std::unique_ptr<ForwardingPlan> ForwardingPlan::Build(const config::Config& config) {
  auto plan = std::make_unique<ForwardingPlan>();
  plan->n_ports_ = static_cast<uint16_t>(std::min(config.ports.size(), config::kMaxPorts));
  for (uint16_t p = 0; p < plan->n_ports_; ++p) {
    const config::PortConfig& pc = config.ports[p];
    PortPolicy& policy = plan->ports_[p];
    policy.name = pc.name;
    policy.trunk = pc.mode == config::VlanMode::kTrunk;
    if (policy.trunk) {
      for (uint16_t v : pc.trunk_vlans) policy.allowed.set(v);
      if (pc.native_vlan) {
        policy.native_vlan = *pc.native_vlan;
        policy.allowed.set(*pc.native_vlan);
      }
    } else {
      policy.access_vlan = pc.access_vlan;
      policy.allowed.set(pc.access_vlan);
    }
    for (uint16_t v = config::kMinVlan; v <= config::kMaxVlan; ++v) {
      if (policy.allowed.test(v)) plan->flood_mask_[v] |= uint64_t{1} << p;
    }
  }
  plan->groups_.Build(config);
  plan->switch_mac_ = config.switch_.mac;
  plan->switch_mac48_ = config.switch_.mac.ToU64();
  for (const config::SwitchAddress& a : config.switch_.addresses) {
    if (plan->n_addresses_ == config::kMaxSwitchAddresses) break;  // Validate() refuses more
    plan->addresses_[plan->n_addresses_++] = OwnAddress{a.prefix.ip.addr, a.vlan};
  }
  return plan;
}

}  // namespace aggswitch::dataplane
