#include "aggregator/bypass_table.h"

#include <algorithm>

namespace aggswitch::aggregator {
namespace {

constexpr uint32_t kNoBucket = UINT32_MAX;

uint32_t RoundUpPow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n && p < (1u << 31)) p <<= 1;
  return p;
}

// MurmurHash3's 64-bit finalizer: every input bit moves every output bit.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

BypassTable::BypassTable(uint32_t capacity, uint64_t ttl_cycles)
    : capacity_(capacity == 0 ? 1 : (capacity > (1u << 30) ? (1u << 30) : capacity)),
      mask_(RoundUpPow2(2 * capacity_) - 1),
      ttl_cycles_(ttl_cycles),
      buckets_(std::make_unique<Bucket[]>(static_cast<size_t>(mask_) + 1)) {}

BypassTable::~BypassTable() = default;

uint32_t BypassTable::Hash(const BypassKey& key) {
  const uint64_t a = (static_cast<uint64_t>(key.job_id) << 32) | key.job_generation;
  const uint64_t b = (static_cast<uint64_t>(key.seq) << 16) | key.node;
  return static_cast<uint32_t>(Mix64(a + Mix64(b)) >> 32);
}

void BypassTable::Write(uint32_t i, const BypassKey& key, uint32_t hash, uint64_t now_tsc,
                        uint64_t ttl) {
  Bucket& b = buckets_[i];
  b.expiry = now_tsc > UINT64_MAX - ttl ? UINT64_MAX : now_tsc + ttl;
  earliest_ = std::min(earliest_, b.expiry);
  cycle_min_ = std::min(cycle_min_, b.expiry);
  b.job_id = key.job_id;
  b.job_generation = key.job_generation;
  b.seq = key.seq;
  b.hash = hash;
  b.node = key.node;
  b.used = true;
}

void BypassTable::EraseAt(uint32_t i) {
  // Backward shift: walk the cluster after the hole; an entry whose home
  // bucket is not inside (hole, j] cyclically may move into the hole, which
  // then moves to where it was. Ends at the first empty bucket.
  uint32_t hole = i;
  uint32_t j = i;
  for (uint32_t step = 0; step < mask_; ++step) {
    j = (j + 1) & mask_;
    const Bucket& b = buckets_[j];
    if (!b.used) break;
    const uint32_t home = b.hash & mask_;
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      buckets_[hole] = b;
      hole = j;
      // It may move behind the sweep cursor, which will not pass it again
      // this turn.
      cycle_min_ = std::min(cycle_min_, b.expiry);
    }
  }
  buckets_[hole].used = false;
  AddLive(-1);
}

BypassInsert BypassTable::Insert(const BypassKey& key, uint64_t now_tsc, uint64_t ttl_cycles) {
  const uint64_t ttl = ttl_cycles != 0 ? ttl_cycles : ttl_cycles_;
  const uint32_t hash = Hash(key);
  uint32_t reclaim = kNoBucket;
  uint32_t empty = kNoBucket;
  uint32_t i = hash & mask_;
  // The load is <= 1/2, so the probe meets an empty bucket long before the bound.
  for (uint32_t step = 0; step <= mask_; ++step, i = (i + 1) & mask_) {
    Bucket& b = buckets_[i];
    if (!b.used) {
      empty = i;
      break;
    }
    if (Holds(b, key, hash)) {
      if (b.expiry > now_tsc) {
        Write(i, key, hash, now_tsc, ttl);
        ++counters_.refreshed;
        return BypassInsert::kRefreshed;
      }
      // Expired: that entry is gone, this is a new one in its place.
      ++counters_.expired;
      Write(i, key, hash, now_tsc, ttl);
      ++counters_.created;
      return BypassInsert::kCreated;
    }
    if (reclaim == kNoBucket && b.expiry <= now_tsc) reclaim = i;
  }
  // The key is not in the table. An expired entry on its probe path is as
  // good a place as the empty bucket after it, and saves a later removal.
  if (reclaim != kNoBucket) {
    ++counters_.expired;
    Write(reclaim, key, hash, now_tsc, ttl);
    ++counters_.created;
    return BypassInsert::kCreated;
  }
  if (empty != kNoBucket && live() < capacity_) {
    Write(empty, key, hash, now_tsc, ttl);
    AddLive(1);
    ++counters_.created;
    return BypassInsert::kCreated;
  }
  // Full: look a little further for an expired entry. The removal shifts
  // entries, so probe again for the first empty bucket.
  if (Sweep(now_tsc, 1, kInsertReclaimBuckets) == 1) {
    i = hash & mask_;
    for (uint32_t step = 0; step <= mask_; ++step, i = (i + 1) & mask_) {
      if (!buckets_[i].used) {
        Write(i, key, hash, now_tsc, ttl);
        AddLive(1);
        ++counters_.created;
        return BypassInsert::kCreated;
      }
    }
  }
  ++counters_.full;
  return BypassInsert::kFull;
}

bool BypassTable::Match(const BypassKey& key, uint64_t now_tsc, bool keep) {
  const uint32_t hash = Hash(key);
  uint32_t i = hash & mask_;
  for (uint32_t step = 0; step <= mask_; ++step, i = (i + 1) & mask_) {
    const Bucket& b = buckets_[i];
    if (!b.used) return false;
    if (Holds(b, key, hash)) {
      const bool live_entry = b.expiry > now_tsc;
      if (live_entry && keep) {
        ++counters_.matched;
        return true;
      }
      EraseAt(i);
      if (live_entry) {
        ++counters_.matched;
      } else {
        ++counters_.expired;
      }
      return live_entry;
    }
  }
  return false;
}

uint32_t BypassTable::Sweep(uint64_t now_tsc, uint32_t budget, uint32_t max_buckets) {
  const uint32_t steps = max_buckets <= mask_ ? max_buckets : mask_ + 1;
  if (now_tsc < earliest_) {
    // Nothing has expired: the scan would find nothing and only move the
    // cursor. The buckets it passes, before a wrap and after, expire at
    // `bound` or later.
    const uint64_t bound = earliest_;
    cycle_min_ = std::min(cycle_min_, bound);
    AdvanceCursor(steps);
    cycle_min_ = std::min(cycle_min_, bound);
    return 0;
  }
  uint32_t removed = 0;
  for (uint32_t s = 0; s < steps && removed < budget; ++s) {
    const Bucket& b = buckets_[sweep_cursor_];
    if (b.used && b.expiry <= now_tsc) {
      EraseAt(sweep_cursor_);
      ++counters_.expired;
      ++removed;
      // The shift may have moved a later entry into this bucket: look again.
    } else {
      if (b.used) cycle_min_ = std::min(cycle_min_, b.expiry);
      AdvanceCursor(1);
    }
  }
  return removed;
}

bool BypassTable::CheckInvariants() const {
  uint32_t used = 0;
  for (uint32_t j = 0; j <= mask_; ++j) {
    const Bucket& b = buckets_[j];
    if (!b.used) continue;
    ++used;
    if (b.hash != Hash(BypassKey{b.job_id, b.job_generation, b.seq, b.node})) return false;
    for (uint32_t i = b.hash & mask_; i != j; i = (i + 1) & mask_) {
      if (!buckets_[i].used) return false;
    }
  }
  return used == live() && used <= capacity_;
}

}  // namespace aggswitch::aggregator
