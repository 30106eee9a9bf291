// Where a job's chunks live in the slot table.
//
// The table (aggregation.slots) is split into three regions, so that jobs
// anyone can register (in-band) never hold a slot that a job the operator
// provisioned (config, API) needs, and a chunk whose slot another chunk
// holds has somewhere to go:
//
//   [0, provisioned)                       config and API jobs
//   [provisioned, provisioned + in_band)   in-band jobs (aggregation.in_band.slots)
//   [.., slots)                            spare slots (aggregation.spare_slots)
//
// Spare slots are placed by no formula: the control thread leases one to a
// chunk that collided in its own region (spare_slots.h), and the chunk's
// members then address it by its index in the region, the slot hint.
//
// Within its region a job is placed in one of two ways (JobPlacement), by
// the switch's policy (aggregation.placement) or the job's own hint:
//
//   hash (the default): chunk `seq` lives at
//     first + (seq + offset) mod size,   offset = SipHash-2-4(secret, job id)
//   Consecutive chunks take consecutive slots (so they spread over the
//   workers round robin, and a job never meets its own window), and, as
//   long as the switch's secret (aggregation.slot_secret, random by
//   default) is unknown, nobody can tell which slots another job's chunks
//   will use, so nobody can occupy them ahead of it. Every job spans the
//   whole region, so two jobs meet wherever their windows overlap.
//
//   a partition (round_robin, random, or a job's placement_hint): the job
//   owns `span` consecutive slots from `base` (its slot quota, the chunks it
//   may keep in flight), and chunk `seq` lives at
//     first + (base + seq mod span) mod size
//   Round robin (RoundRobinBase; the control side's PlaceJob chooses) gives
//   each new job the first span, from where the newest job's ends, that
//   overlaps no other partition of the region, so that jobs never meet
//   while the region holds their quotas; random draws the base; a hint
//   names it.
//
//   const SlotRegions regions = SlotRegions::Make(4096, 1024);
//   const uint32_t slot = regions.Of(job.in_band(), job.placement(), seq);
//   owner worker = slot % n_workers, its local index = slot / n_workers
//
// Thread safety: plain values and pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "common/siphash.h"

namespace aggswitch::aggregator {

// x mod d for any 32-bit x and d > 0, in two multiplications (Lemire, Kaser
// and Kurz, "Faster remainder by direct computation", 2019): `magic` is
// FastModMagic(d).
constexpr uint64_t FastModMagic(uint32_t d) { return UINT64_MAX / d + 1; }
inline uint32_t FastMod(uint32_t x, uint64_t magic, uint32_t d) {
  const uint64_t low = magic * x;
  return static_cast<uint32_t>((static_cast<unsigned __int128>(low) * d) >> 64);
}

// How one job's chunks spread over its region (see above).
struct JobPlacement {
  // Hash placement: any 32-bit offset. A partition: its first slot's index
  // in the region, < the region's size.
  uint32_t offset = 0;
  uint32_t span = 0;   // 0: hash placement; else the partition's slots
  uint64_t magic = 0;  // FastModMagic(span)

  static JobPlacement Hash(uint32_t offset) { return JobPlacement{offset, 0, 0}; }
  static JobPlacement Partition(uint32_t base, uint32_t span) {
    return JobPlacement{base, span, FastModMagic(span)};
  }
  bool partitioned() const { return span != 0; }
};

// One region of the slot table.
struct SlotRegion {
  uint32_t first = 0;
  uint32_t size = 0;  // 0: no region (its jobs are refused a slot)
  uint64_t magic = 0;

  static SlotRegion Make(uint32_t first, uint32_t size) {
    return SlotRegion{first, size, size == 0 ? 0 : FastModMagic(size)};
  }
  // The slot of chunk `seq` of a job with `offset`. size > 0.
  uint32_t Of(uint32_t offset, uint32_t seq) const {
    return first + FastMod(seq + offset, magic, size);
  }
  // The slot of chunk `seq` of a job placed by `p`. size > 0; a partition's
  // span is at most size.
  uint32_t Of(const JobPlacement& p, uint32_t seq) const {
    if (!p.partitioned()) return Of(p.offset, seq);
    return first + FastMod(p.offset + FastMod(seq, p.magic, p.span), magic, size);
  }
};

struct SlotRegions {
  SlotRegion provisioned;  // config and API jobs
  SlotRegion in_band;      // in-band jobs
  SlotRegion spare;        // leased to chunks that collided; size <= kMaxSpareSlots

  // Spare slots at most: a slot hint is 16 bits, 0xFFFF means none and
  // 0xFFFE the job's moved partition (wire.h).
  static constexpr uint32_t kMaxSpareSlots = 0xFFFE;

  // `total` slots: the last `spare` of them spare, the `in_band` before
  // those for in-band jobs, the rest for config and API jobs.
  static SlotRegions Make(uint32_t total, uint32_t in_band, uint32_t spare = 0) {
    const uint32_t provisioned = total - in_band - spare;
    return SlotRegions{SlotRegion::Make(0, provisioned), SlotRegion::Make(provisioned, in_band),
                       SlotRegion::Make(provisioned + in_band, spare)};
  }
  // The global slot of spare slot `hint`; hint < spare.size.
  uint32_t Spare(uint16_t hint) const { return spare.first + hint; }
  bool IsSpare(uint32_t slot) const { return slot >= spare.first && slot - spare.first < spare.size; }
  // Every slot of the table: the spare slots come last.
  uint32_t total() const { return spare.first + spare.size; }
  const SlotRegion& For(bool in_band_job) const { return in_band_job ? in_band : provisioned; }
  uint32_t Of(bool in_band_job, uint32_t offset, uint32_t seq) const {
    return For(in_band_job).Of(offset, seq);
  }
  uint32_t Of(bool in_band_job, const JobPlacement& p, uint32_t seq) const {
    return For(in_band_job).Of(p, seq);
  }
};

// A job's offset in its region: SipHash-2-4 of its id under the switch's secret.
inline uint32_t SlotOffset(const common::SipKey& secret, uint32_t job_id) {
  const uint8_t id[4] = {static_cast<uint8_t>(job_id), static_cast<uint8_t>(job_id >> 8),
                         static_cast<uint8_t>(job_id >> 16), static_cast<uint8_t>(job_id >> 24)};
  return static_cast<uint32_t>(common::SipHash24(secret, id, sizeof(id)));
}

// A partition of `span` slots from `base` (a region index).
struct Partition {
  uint32_t base = 0;
  uint32_t span = 0;
};

// A base for a new partition of `span` slots in a region of `size` slots
// (span <= size) that meets none of the `live` partitions: the first, in
// the order of their distance after `cursor`, among `cursor` and the ends
// of the live partitions (a free stretch begins at one of those);
// nullopt when there is none. O(live^2). [any]
inline std::optional<uint32_t> FreeBase(uint32_t size, uint32_t span, uint32_t cursor,
                                        std::span<const Partition> live) {
  // Whether [a, a + span) meets [p.base, p.base + p.span), both mod size.
  const auto meets = [&](uint32_t a, const Partition& p) {
    const uint64_t ahead = (uint64_t{p.base} + size - a) % size;  // p starts this far after a
    const uint64_t behind = (uint64_t{a} + size - p.base) % size;  // a starts this far after p
    return ahead < span || behind < p.span;
  };
  const auto free = [&](uint32_t a) {
    for (const Partition& p : live) {
      if (meets(a, p)) return false;
    }
    return true;
  };
  cursor %= size;
  bool found = free(cursor);
  uint32_t best = cursor;
  uint64_t best_distance = 0;
  for (const Partition& p : live) {
    if (found && best_distance == 0) break;
    const uint32_t end = static_cast<uint32_t>((uint64_t{p.base} + p.span) % size);
    const uint64_t distance = (uint64_t{end} + size - cursor) % size;
    if ((!found || distance < best_distance) && free(end)) {
      found = true;
      best = end;
      best_distance = distance;
    }
  }
  if (!found) return std::nullopt;
  return best;
}

// The round-robin base of a new partition of `span` slots in a region of
// `size` slots (span <= size): the free base nearest after `cursor` (where
// the newest partition of the region ends; FreeBase). When there is none,
// `cursor`: the region is oversubscribed, and the chunks that meet are
// relocated as collisions. O(live^2). [any]
inline uint32_t RoundRobinBase(uint32_t size, uint32_t span, uint32_t cursor,
                               std::span<const Partition> live) {
  return FreeBase(size, span, cursor, live).value_or(cursor % size);
}

}  // namespace aggswitch::aggregator
