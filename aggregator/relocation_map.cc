#include "aggregator/relocation_map.h"

#include <bit>

namespace aggswitch::aggregator {

RelocationMap::RelocationMap(uint32_t capacity)
    : capacity_(capacity) {
  const uint32_t slots = std::bit_ceil(capacity < 1 ? 2u : 2 * capacity);
  entries_ = std::make_unique<Entry[]>(slots);
  mask_ = slots - 1;
}

uint32_t RelocationMap::Home(const ChunkKey& key) const {
  // The keys are the control thread's choices, one per leased spare slot,
  // not the senders': a plain multiplicative mix spreads them.
  uint64_t x = (uint64_t{key.job_id} << 32 | key.seq) ^ (uint64_t{key.job_generation} << 17);
  x *= 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(x >> 32) & mask_;
}

uint16_t RelocationMap::Find(const ChunkKey& key) const {
  for (uint32_t i = Home(key), probes = 0; probes <= mask_; i = (i + 1) & mask_, ++probes) {
    const Entry& e = entries_[i];
    if (e.hint == kNone) return kNone;
    if (e.key == key) return e.hint;
  }
  return kNone;
}

bool RelocationMap::Insert(const ChunkKey& key, uint16_t hint) {
  for (uint32_t i = Home(key), probes = 0; probes <= mask_; i = (i + 1) & mask_, ++probes) {
    Entry& e = entries_[i];
    if (e.hint != kNone && !(e.key == key)) continue;
    if (e.hint == kNone) {
      if (size_ == capacity_) return false;
      ++size_;
    }
    e.key = key;
    e.hint = hint;
    return true;
  }
  return false;
}

void RelocationMap::Erase(const ChunkKey& key, uint16_t hint) {
  uint32_t i = Home(key);
  for (uint32_t probes = 0;; i = (i + 1) & mask_, ++probes) {
    if (probes > mask_ || entries_[i].hint == kNone) return;
    if (entries_[i].key == key) break;
  }
  if (entries_[i].hint != hint) return;
  // Backward shift: move each later entry of the run whose home does not lie
  // in (hole, entry] into the hole, so that every lookup still finds it.
  uint32_t hole = i;
  for (uint32_t j = (i + 1) & mask_; entries_[j].hint != kNone; j = (j + 1) & mask_) {
    const uint32_t home = Home(entries_[j].key);
    const bool stays = ((j - home) & mask_) < ((j - hole) & mask_);
    if (stays) continue;
    entries_[hole] = entries_[j];
    hole = j;
  }
  entries_[hole] = Entry{};
  --size_;
}

}  // namespace aggswitch::aggregator
