// The spare region's slots (slot_placement.h) as the control thread leases
// them: which chunk holds each, and since when.
//
// A contribution whose placed slot holds another chunk comes up to the
// control thread (docs/aggregation.md, "Collisions"). Acquire gives its
// chunk the spare slot it already holds, or leases it one: the next slot,
// round robin from where the last search stopped, that is unleased or whose
// lease the caller says is over (the chunk's job is gone, every member has
// acknowledged past it, or it is older than twice aggregation.stale_slot_ms,
// the rules by which the slot's worker lets it go). The lease that ends to make
// room is returned, so that the caller can tell that chunk's placed-slot
// owner to forget it.
//
// The last free spare slot, the only one included, is kept for a job's
// oldest chunk (`oldest`: the caller says whether the chunk is one its job's
// slowest member waits for, at its members' ack watermark). At a job's root
// a complete chunk keeps its slot, home or spare, until its job's watermark
// passes it;
// so two jobs each holding the home slot of the other's oldest chunk, with
// every spare slot leased to chunks that wait behind those, would wait for
// each other until their slots went stale. An oldest chunk placed completes
// once its members send it (they all wait for it), its job's watermark
// moves past it and the complete chunks after it, and their slots and its
// lease come free.
//
//   SpareSlots spare(256);
//   SpareSlots::Grant g = spare.Acquire(key, placed_slot, now, over, oldest);
//   if (g.hint == SpareSlots::kNone) refuse (NACK slot_busy);
//   if (g.ended) tell g.ended->placed_slot's owner to erase g.ended->key;
//
// Thread safety: the control thread only. Acquire allocates (the index of
// leases by chunk).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "aggregator/relocation_map.h"

namespace aggswitch::aggregator {

class SpareSlots {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr uint16_t kNone = RelocationMap::kNone;

  struct Lease {
    ChunkKey key;
    uint32_t placed_slot = 0;  // the global slot its placement gives the chunk
    Clock::time_point since;
  };
  // Whether a lease is over: its chunk's slot may be given to another.
  using LeaseOver = std::function<bool(const Lease&)>;

  struct Grant {
    uint16_t hint = kNone;        // the chunk's spare slot; kNone: every lease runs
    bool fresh = false;           // leased now (else the chunk held it already)
    std::optional<Lease> ended;   // the lease that ended to make room
  };

  // `count` spare slots, at most SlotRegions::kMaxSpareSlots.
  explicit SpareSlots(uint32_t count);

  // The spare slot of chunk `key`, leased now if it has none (see above):
  // the last free one (the only one included) only when `oldest`.
  // Examines at most every slot once.
  Grant Acquire(const ChunkKey& key, uint32_t placed_slot, Clock::time_point now,
                const LeaseOver& over, bool oldest = true);

  // The spare slot leased to chunk `key`, or kNone. The lease may be over
  // without anyone asking yet: its slot may hold another chunk by now.
  uint16_t Find(const ChunkKey& key) const {
    const auto it = by_chunk_.find(key);
    return it == by_chunk_.end() ? kNone : it->second;
  }
  uint32_t count() const { return static_cast<uint32_t>(leases_.size()); }
  // Slots leased (some of whose leases may be over without anyone asking yet).
  uint32_t leased() const { return static_cast<uint32_t>(by_chunk_.size()); }
  // Leases not over: what a chunk still needs. O(count).
  uint32_t Live(const LeaseOver& over) const {
    uint32_t n = 0;
    for (const std::optional<Lease>& l : leases_) n += l && !over(*l) ? 1 : 0;
    return n;
  }
  // Leases granted since the start.
  uint64_t granted() const { return granted_; }

  struct KeyHash {
    size_t operator()(const ChunkKey& k) const {
      return std::hash<uint64_t>()(uint64_t{k.job_id} << 32 ^ k.seq) ^ k.job_generation;
    }
  };

 private:
  std::vector<std::optional<Lease>> leases_;  // by hint
  std::unordered_map<ChunkKey, uint16_t, KeyHash> by_chunk_;
  uint32_t cursor_ = 0;
  uint64_t granted_ = 0;
};

}  // namespace aggswitch::aggregator
