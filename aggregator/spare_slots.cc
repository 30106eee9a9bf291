#include "aggregator/spare_slots.h"

namespace aggswitch::aggregator {

SpareSlots::SpareSlots(uint32_t count) : leases_(count) {}

SpareSlots::Grant SpareSlots::Acquire(const ChunkKey& key, uint32_t placed_slot,
                                      Clock::time_point now, const LeaseOver& over, bool oldest) {
  Grant g;
  if (const auto it = by_chunk_.find(key); it != by_chunk_.end()) {
    g.hint = it->second;
    return g;
  }
  const auto n = static_cast<uint32_t>(leases_.size());
  // A chunk that is not its job's oldest must find two free slots: it takes
  // the first and leaves the other (see spare_slots.h). Of a single spare
  // slot, it takes none.
  const uint32_t want = oldest ? 1 : 2;
  std::optional<uint32_t> take;
  uint32_t found = 0;
  uint32_t i = cursor_;
  for (uint32_t tried = 0; tried < n && found < want; ++tried) {
    const std::optional<Lease>& lease = leases_[i];
    if (!lease || over(*lease)) {
      if (!take) take = i;
      ++found;
    }
    i = i + 1 == n ? 0 : i + 1;
  }
  if (found < want) return g;
  cursor_ = *take + 1 == n ? 0 : *take + 1;
  std::optional<Lease>& lease = leases_[*take];
  if (lease) {
    by_chunk_.erase(lease->key);
    g.ended = lease;
  }
  lease = Lease{key, placed_slot, now};
  by_chunk_.emplace(key, static_cast<uint16_t>(*take));
  ++granted_;
  g.hint = static_cast<uint16_t>(*take);
  g.fresh = true;
  return g;
}

}  // namespace aggswitch::aggregator
