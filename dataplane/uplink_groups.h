// Uplink groups (ports[].group): several ports toward the same switches, a
// leaf's links to two spines, that the L2 switch treats as one port.
//
//   - Addresses learned on any member belong to the group, recorded under
//     its first member (LearnPort), so two spines never make a MAC move.
//   - Only one member carries flooded frames, the first whose link is up
//     (NonFlooding: the L2 stage leaves the others out), and nothing
//     received on a member goes out another (SameGroup): two spines never
//     make an L2 loop.
//   - Known unicast to the group, and the aggregation's own datagrams to an
//     address learned on a member (an upstream switch), take the member a
//     path decision names for the IPv4 destination (PathDecisions), else
//     one chosen by a hash of the flow, so that a flow keeps its member and
//     flows spread over the members. A member whose link is down is
//     skipped: its flows go to another by the hash, a decision naming it
//     waits until it is up again.
//
// The groups are part of the immutable forwarding plan; the decisions are a
// snapshot the control thread publishes (Publish) and workers read inside
// their poll, freed after a grace period (UnmapGuard::Synchronize); the
// members' link state is one word the control thread stores (SetDown).
//
// Thread safety: Build, Publish and SetDown on the control thread;
// everything else [any], Pick and decisions() on a worker inside its poll
// (or with the workers stopped).
#pragma once

#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "config/config.h"
#include "dataplane/path_decisions.h"

namespace aggswitch::dataplane {

// What a member is picked by: the IPv4 destination (when the frame has
// one) and a hash of the flow.
struct FlowChoice {
  uint32_t dst_ip = 0;  // host order
  uint32_t hash = 0;
  bool ip = false;  // false: no IPv4 destination; only the hash picks
};

// The flow of an Ethernet frame whose L3 header starts at `l3_offset`:
// IPv4 source, destination, protocol and, for an unfragmented UDP or TCP
// datagram, its ports; other frames hash their MAC keys `src_key` and
// `dst_key`.
FlowChoice FrameFlow(const rte_mbuf* m, uint8_t l3_offset, uint64_t src_key, uint64_t dst_key);
// The flow of a datagram the switch sends itself.
uint32_t DatagramHash(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port, uint16_t dst_port);

class UplinkGroups {
 public:
  static constexpr uint8_t kNoGroup = 0xff;

  UplinkGroups() = default;
  ~UplinkGroups();
  UplinkGroups(const UplinkGroups&) = delete;
  UplinkGroups& operator=(const UplinkGroups&) = delete;

  // The groups of the config's ports (Validate()d). [control, once]
  void Build(const config::Config& config);

  // Where addresses learned on `port` are recorded: its group's first
  // member, or the port itself.
  uint16_t LearnPort(uint16_t port) const { return learn_port_[port]; }
  // `port` and the other members of its group: where nothing received on
  // `port` is flooded to.
  uint64_t SameGroup(uint16_t port) const { return same_group_[port]; }
  // Members that carry no flooded frame now: all but each group's first
  // member whose link is up (its first when none is).
  uint64_t NonFlooding() const { return non_flooding_.load(std::memory_order_relaxed); }
  // Whether `port` is a member of a group of two or more.
  bool InGroup(uint16_t port) const { return group_of_[port] != kNoGroup; }
  struct Member {
    uint16_t port;
    bool decided;  // by a path decision; false: by the hash
  };
  // The member of `port`'s group (InGroup) that carries `flow`: the one
  // decided for its destination, when a decision names a member of this
  // group, else one by the hash.
  Member Pick(uint16_t port, const FlowChoice& flow) const {
    const Group& g = groups_[group_of_[port]];
    const uint64_t down = down_.load(std::memory_order_relaxed);
    if (flow.ip) {
      const PathDecisions* d = decisions_.load(std::memory_order_acquire);
      if (d != nullptr) {
        const uint16_t decided = d->Lookup(flow.dst_ip);
        if (decided < config::kMaxPorts && ((g.members & ~down) >> decided & 1) != 0) {
          return {decided, true};
        }
      }
    }
    const uint8_t hashed = g.member[(uint64_t{flow.hash} * g.n) >> 32];
    if ((down >> hashed & 1) == 0) return {hashed, false};
    return {ByHashAmong(g.members & ~down, flow.hash, hashed), false};
  }

  // Members whose link is down, one bit per port: the control thread's
  // view, refreshed by Dataplane::WatchGroupLinks. [control]
  void SetDown(uint64_t down);
  uint64_t down() const { return down_.load(std::memory_order_relaxed); }
  // Every member of every group, one bit per port.
  uint64_t members() const { return all_members_; }

  // The group's name for `port`, or "" when it stands alone.
  const std::string& name(uint16_t port) const;
  size_t group_count() const { return n_groups_; }

  // Publishes `next` and returns the table it replaces, which the caller
  // frees once no worker can hold it (UnmapGuard::Synchronize). [control]
  std::unique_ptr<const PathDecisions> Publish(std::unique_ptr<const PathDecisions> next);
  // The table in force; nullptr before the first Publish.
  const PathDecisions* decisions() const { return decisions_.load(std::memory_order_acquire); }

 private:
  struct Group {
    std::string name;
    uint64_t members = 0;
    uint8_t n = 0;
    uint8_t member[config::kMaxPorts] = {};  // in port order; member[0] floods
  };

  // The member of `live` the hash picks; `fallback` when `live` is empty
  // (every link down: the frame goes where it would have).
  static uint16_t ByHashAmong(uint64_t live, uint32_t hash, uint16_t fallback) {
    const int n = __builtin_popcountll(live);
    if (n == 0) return fallback;
    for (int k = static_cast<int>((uint64_t{hash} * static_cast<uint64_t>(n)) >> 32); k > 0; --k) {
      live &= live - 1;
    }
    return static_cast<uint16_t>(__builtin_ctzll(live));
  }

  uint16_t learn_port_[config::kMaxPorts] = {};
  uint64_t same_group_[config::kMaxPorts] = {};
  uint8_t group_of_[config::kMaxPorts] = {};
  uint64_t all_members_ = 0;
  std::atomic<uint64_t> non_flooding_{0};
  std::atomic<uint64_t> down_{0};
  Group groups_[config::kMaxPorts];
  size_t n_groups_ = 0;
  std::atomic<const PathDecisions*> decisions_{nullptr};
};

}  // namespace aggswitch::dataplane
