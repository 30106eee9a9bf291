// The MAC table: (VLAN, MAC) -> port, shared by all worker lcores.
//
// Single writer, many lock-free readers. Only the control thread inserts,
// moves, deletes and ages entries; worker lcores look up (in bulk, with
// prefetch) and refresh an entry's last-seen tick. Workers that see an unknown
// or moved source MAC send a learn request over their ring to the control
// thread (see learn_ring.h), which calls Learn(). This keeps learning from many
// lcores race-free without locks on the hot path.
//
// Layout: 2-choice hashing into 64-byte buckets of 6 ways. A bucket is one
// cache line: a sequence counter, 6 ports and 6 keys. The writer wraps every
// key change in the bucket's sequence counter (odd while writing); a reader
// that sees the counter change retries a bounded number of times and otherwise
// reports a miss, which only floods one frame.
//
//   MacTable t(4096);
//   t.Learn(MacKey(10, mac), /*port=*/2, now);          // control thread
//   uint16_t port = t.Lookup(MacKey(10, mac)).port;     // any thread
//
// Thread safety: methods marked [control] are for the single writer thread;
// methods marked [any] are safe on any thread concurrently with the writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::dataplane {

inline constexpr uint16_t kNoPort = 0xffff;

// VLAN in bits 48..59, MAC in bits 0..47. Never 0 for a valid VLAN (1..4094).
inline uint64_t MacKey(uint16_t vlan, uint64_t mac48) {
  return (static_cast<uint64_t>(vlan) << 48) | mac48;
}
inline uint64_t MacKey(uint16_t vlan, const common::MacAddr& mac) { return MacKey(vlan, mac.ToU64()); }
// Reads the 6 MAC bytes at `p` as a 48-bit big-endian integer.
inline uint64_t Mac48(const uint8_t* p) {
  return (uint64_t{p[0]} << 40) | (uint64_t{p[1]} << 32) | (uint64_t{p[2]} << 24) |
         (uint64_t{p[3]} << 16) | (uint64_t{p[4]} << 8) | uint64_t{p[5]};
}
// Mac48 of the destination and source of an Ethernet header at `frame` (at
// least 14 readable bytes), each with one 8-byte load and a byte swap.
inline uint64_t DstMac48(const uint8_t* frame) {
  uint64_t v;
  __builtin_memcpy(&v, frame, 8);
  return __builtin_bswap64(v) >> 16;
}
inline uint64_t SrcMac48(const uint8_t* frame) {
  uint64_t v;
  __builtin_memcpy(&v, frame + 6, 8);
  return __builtin_bswap64(v) >> 16;
}
inline uint16_t MacKeyVlan(uint64_t key) { return static_cast<uint16_t>(key >> 48); }
inline uint64_t MacKeyMac(uint64_t key) { return key & 0xffffffffffffULL; }

class MacTable {
 public:
  struct Hit {
    uint16_t port = kNoPort;  // kNoPort: not found
    uint32_t slot = 0;        // valid when found; pass to Touch()
  };

  enum class LearnResult { kAdded, kRefreshed, kMoved, kStaticConflict, kFull };

  struct EntryView {
    uint16_t vlan;
    common::MacAddr mac;
    uint16_t port;
    bool is_static;
    uint32_t last_seen_tick;
  };

  // Holds at most `capacity` entries (learned + static). [control]
  explicit MacTable(uint32_t capacity);
  ~MacTable();
  MacTable(const MacTable&) = delete;
  MacTable& operator=(const MacTable&) = delete;

  // --- Readers [any] ---

  Hit Lookup(uint64_t key) const;
  // Looks up n keys; hits[i] for keys[i]. Prefetches every first-choice bucket
  // before probing any, so a burst pays about one memory latency, not n.
  void LookupBulk(const uint64_t* keys, uint32_t n, Hit* hits) const;
  // Records that the entry in `slot` was seen at `now_tick`. Writes only when the
  // tick changed, so a busy MAC costs one store per tick, not per frame. [any]
  void Touch(uint32_t slot, uint32_t now_tick) {
    if (last_seen_[slot].load(std::memory_order_relaxed) != now_tick)
      last_seen_[slot].store(now_tick, std::memory_order_relaxed);
  }
  uint32_t size() const { return count_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }
  uint32_t static_count() const { return static_count_.load(std::memory_order_relaxed); }
  // Visits every entry; each bucket is read consistently. [any]
  void ForEach(const std::function<void(const EntryView&)>& fn) const;

  // --- Writer [control] ---

  // Adds a learned entry, refreshes it, or moves it to `port`.
  LearnResult Learn(uint64_t key, uint16_t port, uint32_t now_tick);
  // Adds or replaces a static entry; static entries never age or move.
  common::Status AddStatic(uint64_t key, uint16_t port);
  // Removes an entry (static or not). Returns false if absent.
  bool Remove(uint64_t key);
  // Removes every static entry (config reload re-adds the new set).
  void ClearStatic();
  // Ages learned entries not seen for more than `max_age_ticks` at `now_tick`,
  // scanning at most `bucket_budget` buckets from where the last call stopped.
  // Returns the number of entries removed.
  uint32_t AgeSome(uint32_t now_tick, uint32_t max_age_ticks, uint32_t bucket_budget);
  uint32_t bucket_count() const { return n_buckets_; }

 private:
  static constexpr int kWays = 6;
  static constexpr int kMaxReadRetries = 4;

  struct alignas(64) Bucket {
    std::atomic<uint32_t> seq;
    std::atomic<uint16_t> port[kWays];
    std::atomic<uint64_t> key[kWays];
  };
  static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");

  uint32_t Bucket1(uint64_t key) const;
  uint32_t Bucket2(uint64_t key) const;
  // Probes one bucket. Returns true with the result when the read was consistent.
  bool ProbeBucket(uint32_t b, uint64_t key, Hit* hit) const;
  Hit LookupFrom(uint32_t b1, uint64_t key) const;
  // Writer side: finds the slot holding key, or -1.
  int64_t FindSlot(uint64_t key) const;
  int64_t FreeSlotFor(uint64_t key) const;
  void WriteSlot(uint32_t slot, uint64_t key, uint16_t port);

  uint32_t capacity_;
  uint32_t n_buckets_;
  uint32_t bucket_mask_;
  uint32_t bucket_shift_;  // 64 - log2(n_buckets_), for Bucket2's multiplicative hash
  Bucket* buckets_;
  std::unique_ptr<std::atomic<uint32_t>[]> last_seen_;
  std::unique_ptr<std::atomic<uint8_t>[]> is_static_;
  std::atomic<uint32_t> count_{0};
  std::atomic<uint32_t> static_count_{0};
  uint32_t age_cursor_ = 0;
};

}  // namespace aggswitch::dataplane
