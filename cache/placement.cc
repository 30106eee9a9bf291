#include "cache/placement.h"

#include <algorithm>

#include "common/siphash.h"

namespace aggswitch::cache {
namespace {
// A fixed key: every process must place items alike. Not a secret; the ring
// only spreads load.
constexpr common::SipKey kRingKey = {0x6167677377697463ULL, 0x6361636865726e67ULL};
}  // namespace

uint64_t ItemHash(std::string_view item) {
  return common::SipHash24(kRingKey, item.data(), item.size());
}

Placement::Placement(std::vector<std::string> nodes, size_t replicas)
    : nodes_(std::move(nodes)), replicas_(std::min(replicas, nodes_.size())) {
  ring_.reserve(nodes_.size() * kPointsPerNode);
  for (uint32_t n = 0; n < nodes_.size(); ++n) {
    for (int i = 0; i < kPointsPerNode; ++i) {
      const std::string point = nodes_[n] + "#" + std::to_string(i);
      ring_.emplace_back(ItemHash(point), n);
    }
  }
  std::sort(ring_.begin(), ring_.end());
}

std::vector<std::string> Placement::Holders(std::string_view item) const {
  std::vector<std::string> out;
  if (ring_.empty() || replicas_ == 0) return out;
  const uint64_t h = ItemHash(item);
  auto it = std::lower_bound(ring_.begin(), ring_.end(), std::make_pair(h, uint32_t{0}));
  std::vector<bool> taken(nodes_.size(), false);
  for (size_t step = 0; step < ring_.size() && out.size() < replicas_; ++step, ++it) {
    if (it == ring_.end()) it = ring_.begin();
    if (taken[it->second]) continue;
    taken[it->second] = true;
    out.push_back(nodes_[it->second]);
  }
  return out;
}

size_t Placement::Rank(std::string_view item, std::string_view node) const {
  const std::vector<std::string> holders = Holders(item);
  for (size_t i = 0; i < holders.size(); ++i) {
    if (holders[i] == node) return i;
  }
  return npos;
}

}  // namespace aggswitch::cache
