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
// Within its region a job's chunk `seq` lives at
//
//   first + (seq + offset) mod size,   offset = SipHash-2-4(secret, job id)
//
// Consecutive chunks take consecutive slots (so they spread over the workers
// round robin, and a job never meets its own window), and, as long as the
// switch's secret (aggregation.slot_secret, random by default) is unknown,
// nobody can tell which slots another job's chunks will use, so nobody can
// occupy them ahead of it. The JobTable draws each job's offset when it adds
// the job (Job::slot_offset); the regions are the dataplane's.
//
//   const SlotRegions regions = SlotRegions::Make(4096, 1024);
//   const uint32_t slot = regions.Of(job.in_band(), job.slot_offset(), seq);
//   owner worker = slot % n_workers, its local index = slot / n_workers
//
// Thread safety: plain values and pure functions; any thread.
#pragma once

#include <cstdint>

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
};

struct SlotRegions {
  SlotRegion provisioned;  // config and API jobs
  SlotRegion in_band;      // in-band jobs
  SlotRegion spare;        // leased to chunks that collided; size <= kMaxSpareSlots

  // Spare slots at most: a slot hint is 16 bits, and 0xFFFF means none.
  static constexpr uint32_t kMaxSpareSlots = 0xFFFF;

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
  const SlotRegion& For(bool in_band_job) const { return in_band_job ? in_band : provisioned; }
  uint32_t Of(bool in_band_job, uint32_t offset, uint32_t seq) const {
    return For(in_band_job).Of(offset, seq);
  }
};

// A job's offset in its region: SipHash-2-4 of its id under the switch's secret.
inline uint32_t SlotOffset(const common::SipKey& secret, uint32_t job_id) {
  const uint8_t id[4] = {static_cast<uint8_t>(job_id), static_cast<uint8_t>(job_id >> 8),
                         static_cast<uint8_t>(job_id >> 16), static_cast<uint8_t>(job_id >> 24)};
  return static_cast<uint32_t>(common::SipHash24(secret, id, sizeof(id)));
}

}  // namespace aggswitch::aggregator
