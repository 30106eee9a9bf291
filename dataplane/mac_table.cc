#include "dataplane/mac_table.h"

#include <nmmintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace aggswitch::dataplane {
namespace {

constexpr uint32_t kSeed1 = 0x9e3779b9;

uint32_t NextPow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

MacTable::MacTable(uint32_t capacity) : capacity_(capacity) {
  // Keep the load factor at or below 2/3 so 2-choice placement essentially never fails.
  const uint32_t slots = capacity + capacity / 2 + kWays;
  n_buckets_ = std::max<uint32_t>(2, NextPow2((slots + kWays - 1) / kWays));
  bucket_mask_ = n_buckets_ - 1;
  bucket_shift_ = 64 - static_cast<uint32_t>(__builtin_ctz(n_buckets_));
  buckets_ = static_cast<Bucket*>(std::aligned_alloc(64, sizeof(Bucket) * n_buckets_));
  if (buckets_ == nullptr) throw std::bad_alloc();
  for (uint32_t b = 0; b < n_buckets_; ++b) {
    new (&buckets_[b]) Bucket();
    buckets_[b].seq.store(0, std::memory_order_relaxed);
    for (int w = 0; w < kWays; ++w) {
      buckets_[b].port[w].store(kNoPort, std::memory_order_relaxed);
      buckets_[b].key[w].store(0, std::memory_order_relaxed);
    }
  }
  const uint32_t n_slots = n_buckets_ * kWays;
  last_seen_ = std::make_unique<std::atomic<uint32_t>[]>(n_slots);
  is_static_ = std::make_unique<std::atomic<uint8_t>[]>(n_slots);
  for (uint32_t s = 0; s < n_slots; ++s) {
    last_seen_[s].store(0, std::memory_order_relaxed);
    is_static_[s].store(0, std::memory_order_relaxed);
  }
}

MacTable::~MacTable() {
  for (uint32_t b = 0; b < n_buckets_; ++b) buckets_[b].~Bucket();
  std::free(buckets_);
}

uint32_t MacTable::Bucket1(uint64_t key) const {
  return static_cast<uint32_t>(_mm_crc32_u64(kSeed1, key)) & bucket_mask_;
}

uint32_t MacTable::Bucket2(uint64_t key) const {
  // Not a second CRC: CRC is affine in its seed, so crc(s1,k) ^ crc(s2,k) is the
  // same for every key and the two choices would pair buckets up. A
  // multiplicative (Fibonacci) hash of the key is independent of the CRC.
  return static_cast<uint32_t>((key * 0x9e3779b97f4a7c15ULL) >> bucket_shift_);
}

bool MacTable::ProbeBucket(uint32_t b, uint64_t key, Hit* hit) const {
  const Bucket& bucket = buckets_[b];
  const uint32_t seq = bucket.seq.load(std::memory_order_acquire);
  if (seq & 1) return false;  // a writer is in the middle of a key change
  hit->port = kNoPort;
  for (int w = 0; w < kWays; ++w) {
    if (bucket.key[w].load(std::memory_order_relaxed) == key) {
      hit->port = bucket.port[w].load(std::memory_order_relaxed);
      hit->slot = b * kWays + w;
      break;
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  return bucket.seq.load(std::memory_order_relaxed) == seq;
}

MacTable::Hit MacTable::LookupFrom(uint32_t b1, uint64_t key) const {
  Hit hit;
  for (int attempt = 0; attempt < kMaxReadRetries; ++attempt) {
    if (!ProbeBucket(b1, key, &hit)) continue;
    if (hit.port != kNoPort) return hit;
    if (ProbeBucket(Bucket2(key), key, &hit)) return hit;
  }
  return Hit{};  // could not read consistently: report a miss, the frame floods
}

MacTable::Hit MacTable::Lookup(uint64_t key) const { return LookupFrom(Bucket1(key), key); }

void MacTable::LookupBulk(const uint64_t* keys, uint32_t n, Hit* hits) const {
  uint32_t b1[64];
  for (uint32_t base = 0; base < n; base += 64) {
    const uint32_t m = std::min<uint32_t>(64, n - base);
    for (uint32_t i = 0; i < m; ++i) {
      b1[i] = Bucket1(keys[base + i]);
      __builtin_prefetch(&buckets_[b1[i]]);
    }
    for (uint32_t i = 0; i < m; ++i) hits[base + i] = LookupFrom(b1[i], keys[base + i]);
  }
}

void MacTable::ForEach(const std::function<void(const EntryView&)>& fn) const {
  for (uint32_t b = 0; b < n_buckets_; ++b) {
    EntryView views[kWays];
    int n = 0;
    for (int attempt = 0; attempt < kMaxReadRetries; ++attempt) {
      const Bucket& bucket = buckets_[b];
      const uint32_t seq = bucket.seq.load(std::memory_order_acquire);
      if (seq & 1) continue;
      n = 0;
      for (int w = 0; w < kWays; ++w) {
        const uint64_t key = bucket.key[w].load(std::memory_order_relaxed);
        if (key == 0) continue;
        const uint32_t slot = b * kWays + w;
        views[n++] = EntryView{MacKeyVlan(key), common::MacAddr::FromU64(MacKeyMac(key)),
                               bucket.port[w].load(std::memory_order_relaxed),
                               is_static_[slot].load(std::memory_order_relaxed) != 0,
                               last_seen_[slot].load(std::memory_order_relaxed)};
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (bucket.seq.load(std::memory_order_relaxed) == seq) break;
      n = 0;
    }
    for (int i = 0; i < n; ++i) fn(views[i]);
  }
}

int64_t MacTable::FindSlot(uint64_t key) const {
  for (uint32_t b : {Bucket1(key), Bucket2(key)}) {
    for (int w = 0; w < kWays; ++w) {
      if (buckets_[b].key[w].load(std::memory_order_relaxed) == key) return int64_t{b} * kWays + w;
    }
  }
  return -1;
}

int64_t MacTable::FreeSlotFor(uint64_t key) const {
  // Prefer the emptier of the two buckets; that keeps both choices balanced.
  const uint32_t b1 = Bucket1(key), b2 = Bucket2(key);
  int free1 = -1, free2 = -1, n1 = 0, n2 = 0;
  for (int w = 0; w < kWays; ++w) {
    if (buckets_[b1].key[w].load(std::memory_order_relaxed) == 0) {
      if (free1 < 0) free1 = w;
    } else {
      ++n1;
    }
    if (buckets_[b2].key[w].load(std::memory_order_relaxed) == 0) {
      if (free2 < 0) free2 = w;
    } else {
      ++n2;
    }
  }
  if (free1 >= 0 && (free2 < 0 || n1 <= n2)) return int64_t{b1} * kWays + free1;
  if (free2 >= 0) return int64_t{b2} * kWays + free2;
  return -1;
}

void MacTable::WriteSlot(uint32_t slot, uint64_t key, uint16_t port) {
  Bucket& bucket = buckets_[slot / kWays];
  const int w = static_cast<int>(slot % kWays);
  const uint32_t seq = bucket.seq.load(std::memory_order_relaxed);
  bucket.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  bucket.port[w].store(port, std::memory_order_relaxed);
  bucket.key[w].store(key, std::memory_order_relaxed);
  bucket.seq.store(seq + 2, std::memory_order_release);
}

MacTable::LearnResult MacTable::Learn(uint64_t key, uint16_t port, uint32_t now_tick) {
  const int64_t slot = FindSlot(key);
  if (slot >= 0) {
    last_seen_[slot].store(now_tick, std::memory_order_relaxed);
    Bucket& bucket = buckets_[slot / kWays];
    const int w = static_cast<int>(slot % kWays);
    if (bucket.port[w].load(std::memory_order_relaxed) == port) return LearnResult::kRefreshed;
    if (is_static_[slot].load(std::memory_order_relaxed)) return LearnResult::kStaticConflict;
    // A single 16-bit store: readers see the old port or the new one, both fine.
    bucket.port[w].store(port, std::memory_order_relaxed);
    return LearnResult::kMoved;
  }
  if (count_.load(std::memory_order_relaxed) >= capacity_) return LearnResult::kFull;
  const int64_t free_slot = FreeSlotFor(key);
  if (free_slot < 0) return LearnResult::kFull;
  last_seen_[free_slot].store(now_tick, std::memory_order_relaxed);
  is_static_[free_slot].store(0, std::memory_order_relaxed);
  WriteSlot(static_cast<uint32_t>(free_slot), key, port);
  count_.fetch_add(1, std::memory_order_relaxed);
  return LearnResult::kAdded;
}

common::Status MacTable::AddStatic(uint64_t key, uint16_t port) {
  int64_t slot = FindSlot(key);
  if (slot < 0) {
    if (count_.load(std::memory_order_relaxed) >= capacity_) {
      return common::ResourceExhausted("MAC table is full (" + std::to_string(capacity_) + " entries)");
    }
    slot = FreeSlotFor(key);
    if (slot < 0) return common::ResourceExhausted("no free way in either bucket of the MAC key");
    count_.fetch_add(1, std::memory_order_relaxed);
  } else if (is_static_[slot].load(std::memory_order_relaxed)) {
    static_count_.fetch_sub(1, std::memory_order_relaxed);
  }
  is_static_[slot].store(1, std::memory_order_relaxed);
  static_count_.fetch_add(1, std::memory_order_relaxed);
  WriteSlot(static_cast<uint32_t>(slot), key, port);
  return common::Status::Ok();
}

bool MacTable::Remove(uint64_t key) {
  const int64_t slot = FindSlot(key);
  if (slot < 0) return false;
  if (is_static_[slot].load(std::memory_order_relaxed)) {
    static_count_.fetch_sub(1, std::memory_order_relaxed);
    is_static_[slot].store(0, std::memory_order_relaxed);
  }
  WriteSlot(static_cast<uint32_t>(slot), 0, kNoPort);
  count_.fetch_sub(1, std::memory_order_relaxed);
  return true;
}

void MacTable::ClearStatic() {
  const uint32_t n_slots = n_buckets_ * kWays;
  for (uint32_t slot = 0; slot < n_slots; ++slot) {
    if (!is_static_[slot].load(std::memory_order_relaxed)) continue;
    is_static_[slot].store(0, std::memory_order_relaxed);
    static_count_.fetch_sub(1, std::memory_order_relaxed);
    WriteSlot(slot, 0, kNoPort);
    count_.fetch_sub(1, std::memory_order_relaxed);
  }
}

uint32_t MacTable::AgeSome(uint32_t now_tick, uint32_t max_age_ticks, uint32_t bucket_budget) {
  uint32_t removed = 0;
  bucket_budget = std::min(bucket_budget, n_buckets_);
  for (uint32_t i = 0; i < bucket_budget; ++i) {
    const uint32_t b = age_cursor_;
    age_cursor_ = (age_cursor_ + 1) & bucket_mask_;
    for (int w = 0; w < kWays; ++w) {
      const uint32_t slot = b * kWays + w;
      if (buckets_[b].key[w].load(std::memory_order_relaxed) == 0) continue;
      if (is_static_[slot].load(std::memory_order_relaxed)) continue;
      // Unsigned subtraction keeps this right across tick wrap-around.
      const uint32_t age = now_tick - last_seen_[slot].load(std::memory_order_relaxed);
      if (age <= max_age_ticks) continue;
      WriteSlot(slot, 0, kNoPort);
      count_.fetch_sub(1, std::memory_order_relaxed);
      ++removed;
    }
  }
  return removed;
}

}  // namespace aggswitch::dataplane
