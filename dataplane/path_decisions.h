// Path decisions: for a destination prefix, the egress port a path decision
// chose (agg-intcollector pushes them; PUT /api/v1/int/decisions). The
// uplink groups (uplink_groups.h) consult them when they pick the member
// for a frame; they never override the L2 switch otherwise.
//
// An immutable table, built on the control thread and published as a
// snapshot. Lookup is longest-prefix match by one hash probe sequence per
// distinct prefix length in the table, longest first: decisions are per
// destination host (/32), so a lookup is one probe sequence in practice,
// and at most 33 whatever the table holds. Each probe sequence is bounded
// by the longest one Build saw.
//
//   ASSIGN_OR_RETURN(auto table, PathDecisions::Build(decisions));
//   uint16_t port = table->Lookup(dst_ip);   // kNoPort: no decision
//
// Thread safety: Build on the control thread; Lookup and entries [any].
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::dataplane {

struct PathDecision {
  common::Ipv4Prefix dst;  // without host bits
  uint16_t port = 0;       // egress port index (the config's order)
  friend bool operator==(const PathDecision&, const PathDecision&) = default;
};

class PathDecisions {
 public:
  static constexpr size_t kMaxDecisions = 4096;
  static constexpr uint16_t kNone = 0xffff;

  // The table of `decisions`. Refused: more than kMaxDecisions, a prefix
  // with host bits, or one prefix twice; the error names the entry
  // ("decisions[3].dst: ...").
  static common::Result<std::unique_ptr<const PathDecisions>> Build(
      std::span<const PathDecision> decisions);

  // The port decided for `dst_ip` (host order) by the longest prefix that
  // holds it, or kNone.
  uint16_t Lookup(uint32_t dst_ip) const {
    for (uint8_t i = 0; i < n_lengths_; ++i) {
      const uint8_t len = lengths_[i];
      const uint32_t key = len == 0 ? 0 : dst_ip & (~uint32_t{0} << (32 - len));
      uint32_t s = Slot(key, len);
      for (uint32_t probe = 0; probe <= max_probe_; ++probe, s = (s + 1) & mask_) {
        const Entry& e = slots_[s];
        if (e.port == kNone) break;
        if (e.key == key && e.length == len) return e.port;
      }
    }
    return kNone;
  }

  // The decisions, as given. [any]
  const std::vector<PathDecision>& entries() const { return entries_; }

 private:
  struct Entry {
    uint32_t key = 0;  // the prefix, host order
    uint8_t length = 0;
    uint16_t port = kNone;  // kNone: an empty slot
  };
  PathDecisions() = default;
  uint32_t Slot(uint32_t key, uint8_t len) const {
    const uint64_t h = (uint64_t{key} << 6 | len) * 0x9e3779b97f4a7c15ULL;
    return static_cast<uint32_t>(h >> 32) & mask_;
  }

  std::vector<Entry> slots_;  // a power of two, at least twice the entries
  uint32_t mask_ = 0;
  uint32_t max_probe_ = 0;
  uint8_t lengths_[33] = {};  // distinct prefix lengths present, longest first
  uint8_t n_lengths_ = 0;
  std::vector<PathDecision> entries_;
};

}  // namespace aggswitch::dataplane
