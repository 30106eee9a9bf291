#include "aggregator/bypass_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace aggswitch::aggregator {
namespace {

using KeyTuple = std::tuple<uint32_t, uint32_t, uint32_t, uint16_t>;

KeyTuple Tuple(const BypassKey& k) {
  return {k.job_id, k.job_generation, k.seq, k.node};
}

// Every unexpired entry, by a complete Dump pass of `step` buckets per call.
std::map<KeyTuple, uint64_t> DumpAll(const BypassTable& t, uint64_t now, uint32_t step) {
  std::map<KeyTuple, uint64_t> out;
  uint32_t cursor = 0;
  uint32_t calls = 0;
  do {
    cursor = t.Dump(cursor, step, now, [&](const BypassKey& k, uint64_t expiry) {
      EXPECT_TRUE(out.emplace(Tuple(k), expiry).second) << "entry seen twice";
    });
    ++calls;
  } while (cursor != 0 && calls <= t.buckets());
  EXPECT_EQ(calls, (t.buckets() + step - 1) / step);
  return out;
}

TEST(BypassTableTest, InsertMatchDelete) {
  BypassTable t(16, /*ttl_cycles=*/1000);
  const BypassKey k{7, 2, 100, 3};
  EXPECT_EQ(t.Insert(k, 10), BypassInsert::kCreated);
  EXPECT_EQ(t.live(), 1u);
  EXPECT_TRUE(t.Match(k, 20));
  EXPECT_EQ(t.live(), 0u);
  // A key matches once.
  EXPECT_FALSE(t.Match(k, 21));
  EXPECT_EQ(t.counters().created, 1u);
  EXPECT_EQ(t.counters().matched, 1u);
  EXPECT_EQ(t.counters().expired, 0u);
  EXPECT_TRUE(t.CheckInvariants());
  // And may be written again.
  EXPECT_EQ(t.Insert(k, 30), BypassInsert::kCreated);
  EXPECT_TRUE(t.Match(k, 40));
}

// A kept entry matches every time until it expires.
TEST(BypassTableTest, AKeptEntryMatchesUntilItExpires) {
  BypassTable t(16, /*ttl_cycles=*/1000);
  const BypassKey k{7, 2, 100, 3};
  ASSERT_EQ(t.Insert(k, 10), BypassInsert::kCreated);
  for (uint64_t now : {20, 500, 1009}) EXPECT_TRUE(t.Match(k, now, /*keep=*/true)) << now;
  EXPECT_EQ(t.live(), 1u);
  EXPECT_EQ(t.counters().matched, 3u);
  EXPECT_FALSE(t.Match(k, 1010, /*keep=*/true)) << "expired at 1010";
  EXPECT_EQ(t.live(), 0u);
  EXPECT_EQ(t.counters().expired, 1u);
  EXPECT_TRUE(t.CheckInvariants());
}

TEST(BypassTableTest, EveryKeyFieldCounts) {
  BypassTable t(16, 1000);
  const BypassKey k{7, 2, 100, 3};
  ASSERT_EQ(t.Insert(k, 0), BypassInsert::kCreated);
  EXPECT_FALSE(t.Match({8, 2, 100, 3}, 1));  // job
  EXPECT_FALSE(t.Match({7, 3, 100, 3}, 1));  // generation
  EXPECT_FALSE(t.Match({7, 2, 101, 3}, 1));  // seq
  EXPECT_FALSE(t.Match({7, 2, 100, 4}, 1));  // node
  EXPECT_EQ(t.live(), 1u);
  EXPECT_EQ(t.counters().matched, 0u);
  EXPECT_TRUE(t.Match(k, 1));
  // Keys differing in one field are distinct entries.
  EXPECT_EQ(t.Insert({1, 1, 1, 1}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert({2, 1, 1, 1}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert({1, 2, 1, 1}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert({1, 1, 2, 1}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert({1, 1, 1, 2}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.live(), 5u);
}

TEST(BypassTableTest, InsertAgainRefreshesTheExpiry) {
  BypassTable t(16, 100);
  const BypassKey k{1, 1, 5, 0};
  EXPECT_EQ(t.Insert(k, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert(k, 50), BypassInsert::kRefreshed);
  EXPECT_EQ(t.live(), 1u);
  EXPECT_EQ(t.counters().refreshed, 1u);
  const auto all = DumpAll(t, 120, 4);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all.begin()->second, 150u);
  EXPECT_TRUE(t.Match(k, 149));  // would have expired at 100 without the refresh
}

TEST(BypassTableTest, ExpiredEntriesDoNotMatch) {
  BypassTable t(16, 100);
  const BypassKey k{1, 1, 5, 0};
  ASSERT_EQ(t.Insert(k, 0), BypassInsert::kCreated);
  EXPECT_FALSE(t.Match(k, 100));  // expiry 100: expired at 100
  EXPECT_EQ(t.counters().expired, 1u);
  EXPECT_EQ(t.counters().matched, 0u);
  EXPECT_EQ(t.live(), 0u);
  EXPECT_FALSE(t.Match(k, 100));
  EXPECT_EQ(t.counters().expired, 1u);
  // Insert over an expired entry of the same key: a new entry.
  ASSERT_EQ(t.Insert(k, 200), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert(k, 400), BypassInsert::kCreated);
  EXPECT_EQ(t.counters().expired, 2u);
  EXPECT_EQ(t.counters().refreshed, 0u);
  EXPECT_EQ(t.live(), 1u);
  EXPECT_TRUE(t.Match(k, 499));
}

TEST(BypassTableTest, SweepRemovesExpiredEntriesOnlyAndIsBounded) {
  BypassTable t(64, 1000);  // 128 buckets
  ASSERT_EQ(t.buckets(), 128u);
  for (uint32_t s = 0; s < 40; ++s) ASSERT_EQ(t.Insert({1, 1, s, 0}, 0), BypassInsert::kCreated);
  for (uint32_t s = 0; s < 20; ++s) ASSERT_EQ(t.Insert({2, 1, s, 0}, 500), BypassInsert::kCreated);
  EXPECT_EQ(t.Sweep(999, 1000, 1000), 0u);  // nothing expired yet
  const uint64_t now = 1200;
  EXPECT_EQ(t.Sweep(now, 5, 1000), 5u);  // the budget bounds removals
  EXPECT_EQ(t.Sweep(now, 0, 1000), 0u);
  uint32_t removed = 5;
  uint32_t calls = 0;
  for (; calls < 1000 && removed < 40; ++calls) {
    const uint32_t r = t.Sweep(now, 1000, 8);  // at most 8 buckets looked at
    EXPECT_LE(r, 8u);
    removed += r;
    ASSERT_TRUE(t.CheckInvariants());
  }
  EXPECT_EQ(removed, 40u);
  // About one turn of the cursor: 128 buckets, 8 per call, plus re-looks.
  EXPECT_LE(calls, 128u / 8 + 40);
  EXPECT_EQ(t.live(), 20u);
  EXPECT_EQ(t.counters().expired, 40u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(t.Sweep(now, 1000, 1000), 0u);
  for (uint32_t s = 0; s < 20; ++s) EXPECT_TRUE(t.Match({2, 1, s, 0}, now)) << s;
  EXPECT_EQ(t.live(), 0u);
}

TEST(BypassTableTest, FullTableSaysSoAndReusesExpiredEntries) {
  BypassTable t(8, 100);
  for (uint32_t s = 0; s < 8; ++s) ASSERT_EQ(t.Insert({1, 1, s, 0}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.live(), 8u);
  EXPECT_EQ(t.Insert({1, 1, 8, 0}, 10), BypassInsert::kFull);
  EXPECT_EQ(t.Insert({1, 1, 9, 0}, 10), BypassInsert::kFull);
  EXPECT_EQ(t.counters().full, 2u);
  // A key already there is still refreshed.
  EXPECT_EQ(t.Insert({1, 1, 3, 0}, 20), BypassInsert::kRefreshed);  // now expires at 120
  // A match frees a place.
  EXPECT_TRUE(t.Match({1, 1, 0, 0}, 30));
  EXPECT_EQ(t.Insert({1, 1, 8, 0}, 30), BypassInsert::kCreated);  // expires at 130
  EXPECT_EQ(t.Insert({1, 1, 9, 0}, 30), BypassInsert::kFull);
  EXPECT_EQ(t.counters().full, 3u);
  // At 110 six entries have expired: new ones take their places.
  for (uint32_t s = 100; s < 106; ++s) {
    EXPECT_EQ(t.Insert({1, 1, s, 0}, 110), BypassInsert::kCreated) << s;
    ASSERT_TRUE(t.CheckInvariants());
  }
  EXPECT_EQ(t.live(), 8u);
  EXPECT_EQ(t.counters().expired, 6u);
  EXPECT_EQ(t.Insert({1, 1, 106, 0}, 110), BypassInsert::kFull);
  EXPECT_TRUE(t.Match({1, 1, 3, 0}, 110));
  EXPECT_TRUE(t.Match({1, 1, 8, 0}, 110));
  for (uint32_t s = 100; s < 106; ++s) EXPECT_TRUE(t.Match({1, 1, s, 0}, 110)) << s;
  EXPECT_EQ(t.live(), 0u);
}

TEST(BypassTableTest, CapacityRoundsTheBucketsUp) {
  EXPECT_EQ(BypassTable(1000, 1).buckets(), 2048u);
  EXPECT_EQ(BypassTable(1024, 1).buckets(), 2048u);
  EXPECT_EQ(BypassTable(1025, 1).buckets(), 4096u);
  EXPECT_EQ(BypassTable(1, 1).buckets(), 2u);
  EXPECT_EQ(BypassTable(0, 1).capacity(), 1u);
  EXPECT_EQ(BypassTable(0, 1).buckets(), 2u);
  // The configured capacity is the limit, not the rounded bucket count.
  BypassTable t(1000, 100);
  EXPECT_EQ(t.capacity(), 1000u);
  for (uint32_t s = 0; s < 1000; ++s) ASSERT_EQ(t.Insert({3, 0, s, 1}, 0), BypassInsert::kCreated);
  EXPECT_EQ(t.Insert({3, 0, 1000, 1}, 0), BypassInsert::kFull);
  EXPECT_TRUE(t.CheckInvariants());
  for (uint32_t s = 0; s < 1000; ++s) ASSERT_TRUE(t.Match({3, 0, s, 1}, 1)) << s;
}

TEST(BypassTableTest, DumpVisitsBoundedRangesAndSkipsExpired) {
  BypassTable t(32, 100);  // 64 buckets
  for (uint32_t s = 0; s < 20; ++s) ASSERT_EQ(t.Insert({4, 4, s, 2}, s), BypassInsert::kCreated);
  uint32_t visited = 0;
  EXPECT_EQ(t.Dump(0, 16, 0, [&](const BypassKey&, uint64_t) { ++visited; }), 16u);
  EXPECT_LE(visited, 16u);
  EXPECT_EQ(t.Dump(48, 1000, 0, [](const BypassKey&, uint64_t) {}), 0u);
  EXPECT_EQ(t.Dump(64, 10, 0, [](const BypassKey&, uint64_t) {}), 0u);
  EXPECT_EQ(DumpAll(t, 0, 5).size(), 20u);
  // At 110, the entries inserted at 0..10 have expired.
  const auto later = DumpAll(t, 110, 7);
  EXPECT_EQ(later.size(), 9u);
  for (const auto& [key, expiry] : later) EXPECT_EQ(expiry, std::get<2>(key) + 100u);
}

// Random operations against a reference: a std::map of the entries that are
// logically there (inserted, not matched, not expired). A small table and a
// small key space force collisions, long clusters and wrap-around, so every
// Match and Sweep exercises backward-shift deletion.
void RandomAgainstReference(uint32_t capacity, uint32_t n_jobs, uint32_t n_seqs, uint64_t seed) {
  constexpr uint64_t kTtl = 60;
  BypassTable t(capacity, kTtl);
  std::mt19937_64 rng(seed);
  std::map<KeyTuple, uint64_t> ref;
  uint64_t now = 1;
  uint64_t created = 0, refreshed = 0, matched = 0, full = 0;
  for (int op = 0; op < 30000; ++op) {
    now += rng() % 4;
    std::erase_if(ref, [&](const auto& e) { return e.second <= now; });
    const BypassKey k{static_cast<uint32_t>(rng() % n_jobs), static_cast<uint32_t>(rng() % 2),
                      static_cast<uint32_t>(rng() % n_seqs), static_cast<uint16_t>(rng() % 3)};
    const uint32_t kind = rng() % 10;
    if (kind < 5) {
      const uint32_t held_before = t.live();
      const BypassInsert r = t.Insert(k, now);
      auto it = ref.find(Tuple(k));
      if (it != ref.end()) {
        ASSERT_EQ(r, BypassInsert::kRefreshed) << "op " << op;
        it->second = now + kTtl;
        ++refreshed;
      } else if (held_before < capacity) {
        ASSERT_EQ(r, BypassInsert::kCreated) << "op " << op;
      } else if (ref.size() == capacity) {
        ASSERT_EQ(r, BypassInsert::kFull) << "op " << op;
      } else {
        // Full of entries some of which expired: created when one was reclaimed.
        ASSERT_NE(r, BypassInsert::kRefreshed) << "op " << op;
      }
      if (r == BypassInsert::kCreated) {
        ref.emplace(Tuple(k), now + kTtl);
        ++created;
      }
      if (r == BypassInsert::kFull) ++full;
    } else if (kind < 9) {
      const bool expect = ref.erase(Tuple(k)) == 1;
      ASSERT_EQ(t.Match(k, now), expect) << "op " << op;
      matched += expect;
    } else {
      const uint32_t held_before = t.live();
      const uint32_t budget = rng() % 4;
      const uint32_t max_buckets = 1 + rng() % 8;
      const uint32_t removed = t.Sweep(now, budget, max_buckets);
      ASSERT_LE(removed, budget);
      ASSERT_LE(removed, max_buckets);
      ASSERT_EQ(t.live(), held_before - removed);
      if (rng() % 4 == 0) {
        // Whole turns until one removes nothing: every expired entry is
        // gone then, whatever the sweep's bound on expiries skipped.
        while (t.Sweep(now, UINT32_MAX, t.buckets()) != 0) {
        }
        ASSERT_EQ(t.live(), ref.size()) << "op " << op;
      }
    }
    ASSERT_TRUE(t.CheckInvariants()) << "op " << op;
    ASSERT_GE(t.live(), ref.size());
    ASSERT_EQ(DumpAll(t, now, 1 + op % 7), ref) << "op " << op;
    ASSERT_EQ(t.counters().created, created);
    ASSERT_EQ(t.counters().refreshed, refreshed);
    ASSERT_EQ(t.counters().matched, matched);
    ASSERT_EQ(t.counters().full, full);
    // Everything inserted either is held, was matched, or was counted expired.
    ASSERT_EQ(t.counters().created, t.live() + t.counters().matched + t.counters().expired);
  }
  EXPECT_GT(matched, 300u);
  EXPECT_GT(t.counters().expired, 1000u);
  if (capacity <= 8) {
    EXPECT_GT(full, 0u);
  }
}

TEST(BypassTableTest, RandomOperationsMatchAReferenceTinyTable) {
  // 8 entries in 16 buckets, 72 keys: collisions everywhere, often full.
  for (uint64_t seed = 1; seed <= 3; ++seed) RandomAgainstReference(8, 2, 6, seed);
}

TEST(BypassTableTest, RandomOperationsMatchAReferenceSmallTable) {
  for (uint64_t seed = 1; seed <= 2; ++seed) RandomAgainstReference(50, 4, 20, seed);
}

}  // namespace
}  // namespace aggswitch::aggregator
