#include "dataplane/kept_results.h"

#include <cstring>

namespace aggswitch::dataplane {

KeptResults::KeptResults(uint32_t capacity, uint32_t max_payload)
    : capacity_(capacity),
      max_payload_(max_payload),
      entries_(std::make_unique<Entry[]>(capacity)),
      payloads_(std::make_unique<uint8_t[]>(size_t{capacity} * max_payload)) {}

bool KeptResults::Keep(const aggregator::ChunkKey& key, uint32_t label,
                       const aggregator::AggFields& fields, const uint8_t* payload, uint32_t len) {
  if (capacity_ == 0 || len > max_payload_) return false;
  uint32_t at = capacity_;
  for (uint32_t i = 0; i < capacity_; ++i) {
    if (entries_[i].used && entries_[i].key == key) {
      at = i;
      break;
    }
  }
  if (at == capacity_) {  // a new chunk: the oldest entry gives way
    at = next_;
    next_ = (next_ + 1) % capacity_;
  }
  Entry& e = entries_[at];
  if (!e.used) ++used_;
  uint8_t* copy = payloads_.get() + size_t{at} * max_payload_;
  if (len != 0) std::memcpy(copy, payload, len);
  e = Entry{key, label, fields, copy, len, true};
  return true;
}

const KeptResults::Entry* KeptResults::Find(const aggregator::ChunkKey& key, uint32_t label) const {
  for (uint32_t i = 0; i < capacity_; ++i) {
    const Entry& e = entries_[i];
    if (e.used && e.key == key && e.label == label) return &e;
  }
  return nullptr;
}

}  // namespace aggswitch::dataplane
