#include "aggregator/spare_slots.h"

namespace aggswitch::aggregator {

SpareSlots::SpareSlots(uint32_t count) : leases_(count) {}

SpareSlots::Grant SpareSlots::Acquire(const ChunkKey& key, uint32_t placed_slot,
                                      Clock::time_point now, const LeaseOver& over) {
  Grant g;
  if (const auto it = by_chunk_.find(key); it != by_chunk_.end()) {
    g.hint = it->second;
    return g;
  }
  const auto n = static_cast<uint32_t>(leases_.size());
  for (uint32_t tried = 0; tried < n; ++tried) {
    const uint32_t i = cursor_;
    cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1;
    std::optional<Lease>& lease = leases_[i];
    if (lease) {
      if (!over(*lease)) continue;
      by_chunk_.erase(lease->key);
      g.ended = lease;
    }
    lease = Lease{key, placed_slot, now};
    by_chunk_.emplace(key, static_cast<uint16_t>(i));
    ++granted_;
    g.hint = static_cast<uint16_t>(i);
    g.fresh = true;
    return g;
  }
  return g;
}

}  // namespace aggswitch::aggregator
