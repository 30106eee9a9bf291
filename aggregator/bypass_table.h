// Bypass entries: the per-lcore table that recognizes a straggler's late data
// (docs/stragglers.md, "Bypass entries").
//
// When a slot times out, its owner writes one entry per missing member,
// (job id, job generation, seq, node id) -> expiry TSC. A contribution that
// later finds its entry is late data: it is forwarded upstream unreduced;
// the switch keeps the entry (Match with keep), so that the member's resends
// go the same way. Entries live `ttl_cycles`; expired ones are removed
// lazily (when a lookup or an insert meets them) and by a bounded Sweep each
// poll. Each worker lcore has its own table, because a chunk's late data lands
// on the lcore that owns its slot.
//
// Open addressing with linear probing over a power-of-two array of buckets,
// at least twice the capacity (so the load stays <= 1/2 and probe chains stay
// short). Deletion is backward-shift: the entries after a deleted one that
// may move closer to their home bucket do, so there are no tombstones and a
// probe always stops at the first empty bucket. Nothing is allocated after
// construction.
//
//   BypassTable bypass(/*capacity=*/4096, /*ttl_cycles=*/10 * rte_get_tsc_hz());
//   // slot timed out, member 3 missing:
//   if (bypass.Insert({job, gen, seq, 3}, now) == BypassInsert::kFull) ++table_full_drops;
//   // a contribution arrives:
//   if (bypass.Match({job, gen, seq, node}, now)) forward it upstream as LATE;
//   // once per poll:
//   bypass.Sweep(now, /*budget=*/16);
//
// Thread safety: a BypassTable is owned by one worker lcore; every method is
// [owner lcore] except the constructor [control] and live() [any].
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace aggswitch::aggregator {

struct BypassKey {
  uint32_t job_id = 0;
  uint32_t job_generation = 0;
  uint32_t seq = 0;
  uint16_t node = 0;

  friend bool operator==(const BypassKey&, const BypassKey&) = default;
};

enum class BypassInsert : uint8_t {
  kCreated,    // a new entry (possibly in the place of an expired one)
  kRefreshed,  // already there and not expired: its expiry moved to now + ttl
  kFull,       // no room: capacity() live entries and none expired nearby
};

// Monotonic event counts. `expired` counts entries removed because their TTL
// had passed, whoever removed them (Match, Insert, Sweep).
struct BypassCounters {
  uint64_t created = 0;
  uint64_t refreshed = 0;
  uint64_t matched = 0;
  uint64_t expired = 0;
  uint64_t full = 0;
};

class BypassTable {
 public:
  // Buckets scanned by one Sweep call unless told otherwise.
  static constexpr uint32_t kDefaultSweepBuckets = 256;
  // Buckets an Insert into a full table sweeps, looking for an expired entry to
  // reclaim, before it gives up with kFull.
  static constexpr uint32_t kInsertReclaimBuckets = 64;

  // Holds up to `capacity` entries (at least 1) in the smallest power-of-two
  // number of buckets >= 2 * capacity. An entry inserted at `now` expires at
  // now + ttl_cycles. Allocates the buckets. [control]
  BypassTable(uint32_t capacity, uint64_t ttl_cycles);
  ~BypassTable();
  BypassTable(const BypassTable&) = delete;
  BypassTable& operator=(const BypassTable&) = delete;

  // Adds `key`, expiring at now_tsc + ttl (`ttl_cycles`, or the table's
  // when 0), or moves the expiry of the entry already there. When the table
  // holds capacity() entries, an expired entry met along the key's probe, or
  // found by a sweep of kInsertReclaimBuckets buckets, makes room; otherwise
  // kFull (counted). [owner lcore]
  BypassInsert Insert(const BypassKey& key, uint64_t now_tsc, uint64_t ttl_cycles = 0);

  // True when `key` has an entry that has not expired (counted as matched).
  // The entry is deleted, so a key matches once, unless `keep`: then it
  // stays until it expires and matches every time (a straggler's resends of
  // its late data, whose first copy may be lost on the way, go the same
  // way). An expired entry found is deleted and counted as expired, and
  // Match returns false. [owner lcore]
  bool Match(const BypassKey& key, uint64_t now_tsc, bool keep = false);

  // Removes up to `budget` expired entries, looking at no more than
  // `max_buckets` buckets from a cursor that wraps around the table and
  // carries over between calls. Returns how many it removed. [owner lcore]
  uint32_t Sweep(uint64_t now_tsc, uint32_t budget, uint32_t max_buckets = kDefaultSweepBuckets);

  // Bounded iteration for dumps: calls fn(const BypassKey&, uint64_t expiry_tsc)
  // for each unexpired entry in buckets [cursor, cursor + max_buckets) and
  // returns the cursor for the next call, 0 when the pass is complete (start
  // a pass at 0). The owner copies out a few hundred buckets per poll. Not a
  // snapshot: an entry inserted or deleted during the pass may or may not be
  // seen, and a deletion can shift a later entry back across the cursor (or
  // around the end of the array), so even an entry present throughout may be
  // missed or seen twice. [owner lcore]
  template <typename Fn>
  uint32_t Dump(uint32_t cursor, uint32_t max_buckets, uint64_t now_tsc, Fn&& fn) const;

  // Test and debugging aid: true when every entry is reachable from its home
  // bucket without crossing an empty one and the live count is right.
  // O(buckets). [owner lcore]
  bool CheckInvariants() const;

  const BypassCounters& counters() const { return counters_; }
  // Entries held, expired ones not yet removed included. [any]
  uint32_t live() const { return live_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }
  uint32_t buckets() const { return mask_ + 1; }
  uint64_t ttl_cycles() const { return ttl_cycles_; }

 private:
  struct alignas(32) Bucket {
    uint64_t expiry = 0;  // TSC; the entry has expired when expiry <= now
    uint32_t job_id = 0;
    uint32_t job_generation = 0;
    uint32_t seq = 0;
    uint32_t hash = 0;  // Hash(key), kept for the probe and backward shift
    uint16_t node = 0;
    bool used = false;
  };
  static_assert(sizeof(Bucket) == 32, "two buckets per cache line");

  static uint32_t Hash(const BypassKey& key);
  static bool Holds(const Bucket& b, const BypassKey& key, uint32_t hash) {
    return b.hash == hash && b.job_id == key.job_id && b.job_generation == key.job_generation &&
           b.seq == key.seq && b.node == key.node;
  }
  void Write(uint32_t i, const BypassKey& key, uint32_t hash, uint64_t now_tsc, uint64_t ttl);
  // Empties bucket i and shifts the rest of its cluster back (bounded by the
  // cluster's length).
  void EraseAt(uint32_t i);
  // Moves the sweep cursor `steps` buckets on; at each wrap the expiries
  // gathered over the turn become the bound.
  void AdvanceCursor(uint32_t steps) {
    const uint64_t next = uint64_t{sweep_cursor_} + steps;
    sweep_cursor_ = static_cast<uint32_t>(next & mask_);
    if (next > mask_) {
      earliest_ = cycle_min_;
      cycle_min_ = UINT64_MAX;
    }
  }
  void AddLive(int32_t delta) {
    live_.store(live_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }

  uint32_t capacity_;
  uint32_t mask_;  // buckets - 1
  uint64_t ttl_cycles_;
  uint32_t sweep_cursor_ = 0;
  // No entry expires before `earliest_` (a lower bound): until then a Sweep
  // only moves its cursor, as a scan that finds nothing would, without
  // reading a bucket. `cycle_min_` gathers the bound for the cursor's next
  // turn: the expiries it passed, wrote or moved since it last wrapped.
  uint64_t earliest_ = UINT64_MAX;
  uint64_t cycle_min_ = UINT64_MAX;
  std::unique_ptr<Bucket[]> buckets_;
  BypassCounters counters_;
  // Single writer (the owner); relaxed loads elsewhere for metrics.
  std::atomic<uint32_t> live_{0};
};

template <typename Fn>
uint32_t BypassTable::Dump(uint32_t cursor, uint32_t max_buckets, uint64_t now_tsc, Fn&& fn) const {
  const uint64_t n_buckets = static_cast<uint64_t>(mask_) + 1;
  if (cursor >= n_buckets) return 0;
  if (max_buckets == 0) max_buckets = 1;
  uint64_t end = static_cast<uint64_t>(cursor) + max_buckets;
  if (end > n_buckets) end = n_buckets;
  for (uint64_t i = cursor; i < end; ++i) {
    const Bucket& b = buckets_[i];
    if (b.used && b.expiry > now_tsc) {
      fn(BypassKey{b.job_id, b.job_generation, b.seq, b.node}, b.expiry);
    }
  }
  return end == n_buckets ? 0 : static_cast<uint32_t>(end);
}

}  // namespace aggswitch::aggregator
