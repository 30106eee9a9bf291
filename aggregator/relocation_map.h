// The chunks that were moved off their slot to a spare one, as the worker
// that owns their placed slot knows them: (job, generation, seq) -> the
// spare slot's hint (its index in the spare region, slot_placement.h).
//
// When a chunk's placed slot holds another chunk, the owner escalates the
// contribution to the control thread, which leases the chunk a spare slot
// (SpareSlots) and tells the owner, through the owner's relocation ring, to
// add the entry; when it leases that spare slot to another chunk, it tells
// the owner of the old chunk's placed slot to erase it. Every later datagram
// of the chunk that reaches its placed slot without finding it there is sent
// on to the spare slot: no member's contribution lands in a slot its chunk
// does not use, so no slot ever answers with a partial sum.
//
// Open addressing with linear probing, at most half full (the control
// thread leases at most `capacity` spare slots), and backward-shift
// deletion: a lookup ends at the first empty entry, within a bounded number
// of probes, and needs no tombstones.
//
//   RelocationMap map(256);                           // [control]
//   map.Insert({job, generation, seq}, hint);         // [owner lcore]
//   uint16_t hint = map.Find({job, generation, seq}); // kNone: not moved
//
// Thread safety: built by the control side before the worker starts; every
// other method [owner lcore].
#pragma once

#include <cstdint>
#include <memory>

namespace aggswitch::aggregator {

// One chunk of one registration of a job.
struct ChunkKey {
  uint32_t job_id = 0;
  uint32_t job_generation = 0;
  uint32_t seq = 0;
  friend bool operator==(const ChunkKey&, const ChunkKey&) = default;
};

class RelocationMap {
 public:
  static constexpr uint16_t kNone = 0xFFFF;

  // Room for `capacity` entries (the spare slots). Allocates. [control]
  explicit RelocationMap(uint32_t capacity);

  bool empty() const { return size_ == 0; }
  uint32_t size() const { return size_; }
  // The hint chunk `key` was moved to, or kNone.
  uint16_t Find(const ChunkKey& key) const;
  // Adds the entry, or moves an existing one to `hint`. False when the map
  // already holds `capacity` entries.
  bool Insert(const ChunkKey& key, uint16_t hint);
  // Removes `key`'s entry if it points to `hint` (a later relocation of the
  // same chunk is kept).
  void Erase(const ChunkKey& key, uint16_t hint);

 private:
  struct Entry {
    ChunkKey key;
    uint16_t hint = kNone;  // kNone: empty
  };
  uint32_t Home(const ChunkKey& key) const;

  std::unique_ptr<Entry[]> entries_;
  uint32_t mask_ = 0;
  uint32_t capacity_ = 0;
  uint32_t size_ = 0;
};

}  // namespace aggswitch::aggregator
