#include "dataplane/mac_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

namespace aggswitch::dataplane {
namespace {

uint64_t Key(uint16_t vlan, uint64_t mac) { return MacKey(vlan, mac); }

TEST(MacTableTest, HeaderMacReadersMatchBytewiseRead) {
  const uint8_t frame[14] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x08, 0x00};
  EXPECT_EQ(DstMac48(frame), 0x0123456789abULL);
  EXPECT_EQ(SrcMac48(frame), 0xfedcba987654ULL);
  EXPECT_EQ(DstMac48(frame), Mac48(frame));
  EXPECT_EQ(SrcMac48(frame), Mac48(frame + 6));
}

TEST(MacTableTest, LearnsAndLooksUp) {
  MacTable t(64);
  EXPECT_EQ(t.Lookup(Key(10, 0x020000000001)).port, kNoPort);
  EXPECT_EQ(t.Learn(Key(10, 0x020000000001), 3, 100), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.Lookup(Key(10, 0x020000000001)).port, 3);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.Learn(Key(10, 0x020000000001), 3, 101), MacTable::LearnResult::kRefreshed);
  EXPECT_EQ(t.size(), 1u);
}

TEST(MacTableTest, SameMacInTwoVlansIsTwoEntries) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(10, 0x020000000001), 1, 0), MacTable::LearnResult::kAdded);
  ASSERT_EQ(t.Learn(Key(20, 0x020000000001), 2, 0), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.Lookup(Key(10, 0x020000000001)).port, 1);
  EXPECT_EQ(t.Lookup(Key(20, 0x020000000001)).port, 2);
  EXPECT_EQ(t.Lookup(Key(30, 0x020000000001)).port, kNoPort);
}

TEST(MacTableTest, MoveUpdatesPort) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(1, 0xa), 1, 0), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.Learn(Key(1, 0xa), 4, 1), MacTable::LearnResult::kMoved);
  EXPECT_EQ(t.Lookup(Key(1, 0xa)).port, 4);
  EXPECT_EQ(t.size(), 1u);
}

TEST(MacTableTest, StaticEntriesNeitherMoveNorAge) {
  MacTable t(64);
  ASSERT_TRUE(t.AddStatic(Key(1, 0xb), 2).ok());
  EXPECT_EQ(t.Learn(Key(1, 0xb), 5, 0), MacTable::LearnResult::kStaticConflict);
  EXPECT_EQ(t.Lookup(Key(1, 0xb)).port, 2);
  EXPECT_EQ(t.AgeSome(1'000'000, 10, t.bucket_count()), 0u);
  EXPECT_EQ(t.Lookup(Key(1, 0xb)).port, 2);
  EXPECT_EQ(t.static_count(), 1u);
  t.ClearStatic();
  EXPECT_EQ(t.Lookup(Key(1, 0xb)).port, kNoPort);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.static_count(), 0u);
}

TEST(MacTableTest, StaticReplacesLearnedEntry) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(1, 0xc), 1, 0), MacTable::LearnResult::kAdded);
  ASSERT_TRUE(t.AddStatic(Key(1, 0xc), 3).ok());
  EXPECT_EQ(t.Lookup(Key(1, 0xc)).port, 3);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.static_count(), 1u);
}

TEST(MacTableTest, AgingRemovesStaleAndKeepsTouched) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(1, 0x1), 1, 100), MacTable::LearnResult::kAdded);
  ASSERT_EQ(t.Learn(Key(1, 0x2), 1, 100), MacTable::LearnResult::kAdded);
  t.Touch(t.Lookup(Key(1, 0x2)).slot, 150);
  EXPECT_EQ(t.AgeSome(150, 50, t.bucket_count()), 0u) << "exactly at the limit stays";
  EXPECT_EQ(t.AgeSome(151, 50, t.bucket_count()), 1u);
  EXPECT_EQ(t.Lookup(Key(1, 0x1)).port, kNoPort);
  EXPECT_EQ(t.Lookup(Key(1, 0x2)).port, 1);
  EXPECT_EQ(t.size(), 1u);
}

TEST(MacTableTest, AgingHandlesTickWrapAround) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(1, 0x1), 1, 0xfffffff0u), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.AgeSome(0x00000005u, 50, t.bucket_count()), 0u);
  EXPECT_EQ(t.AgeSome(0x00000030u, 50, t.bucket_count()), 1u);
}

TEST(MacTableTest, AgingBudgetCoversTableInSteps) {
  MacTable t(1024);
  for (uint64_t m = 1; m <= 500; ++m) ASSERT_EQ(t.Learn(Key(1, m), 1, 0), MacTable::LearnResult::kAdded);
  uint32_t removed = 0;
  const uint32_t step = t.bucket_count() / 8;
  for (int i = 0; i < 8; ++i) removed += t.AgeSome(100, 10, step);
  EXPECT_EQ(removed, 500u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(MacTableTest, RefusesLearningWhenFullAndRecoversAfterRemove) {
  MacTable t(16);
  for (uint64_t m = 1; m <= 16; ++m) ASSERT_EQ(t.Learn(Key(1, m), 1, 0), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.Learn(Key(1, 17), 1, 0), MacTable::LearnResult::kFull);
  EXPECT_EQ(t.Lookup(Key(1, 17)).port, kNoPort);
  EXPECT_FALSE(t.AddStatic(Key(1, 18), 1).ok());
  // Existing entries still refresh and move while full.
  EXPECT_EQ(t.Learn(Key(1, 5), 2, 0), MacTable::LearnResult::kMoved);
  ASSERT_TRUE(t.Remove(Key(1, 3)));
  EXPECT_EQ(t.Learn(Key(1, 17), 1, 0), MacTable::LearnResult::kAdded);
  EXPECT_EQ(t.size(), 16u);
}

TEST(MacTableTest, FillsToCapacityWithManyKeys) {
  constexpr uint32_t kCapacity = 100'000;
  MacTable t(kCapacity);
  uint32_t added = 0;
  for (uint64_t m = 0; m < kCapacity; ++m) {
    if (t.Learn(Key(1 + m % 7, 0x020000000000 + m * 7919), static_cast<uint16_t>(m % 64), 0) ==
        MacTable::LearnResult::kAdded)
      ++added;
  }
  EXPECT_EQ(added, kCapacity) << "2-choice 6-way placement at <= 2/3 load must not fail";
  for (uint64_t m = 0; m < kCapacity; m += 97) {
    EXPECT_EQ(t.Lookup(Key(1 + m % 7, 0x020000000000 + m * 7919)).port, m % 64);
  }
}

TEST(MacTableTest, BulkLookupMatchesSingleLookups) {
  MacTable t(256);
  for (uint64_t m = 0; m < 100; ++m) ASSERT_EQ(t.Learn(Key(5, m + 1), m % 8, 0), MacTable::LearnResult::kAdded);
  uint64_t keys[150];
  for (uint64_t i = 0; i < 150; ++i) keys[i] = Key(5, i + 1);
  MacTable::Hit hits[150];
  t.LookupBulk(keys, 150, hits);
  for (uint64_t i = 0; i < 150; ++i) {
    EXPECT_EQ(hits[i].port, i < 100 ? i % 8 : kNoPort) << i;
    if (i < 100) {
      EXPECT_EQ(hits[i].slot, t.Lookup(keys[i]).slot);
    }
  }
}

TEST(MacTableTest, ForEachVisitsEveryEntry) {
  MacTable t(64);
  ASSERT_EQ(t.Learn(Key(10, 0x020000000001), 1, 7), MacTable::LearnResult::kAdded);
  ASSERT_TRUE(t.AddStatic(Key(20, 0x020000000002), 2).ok());
  std::map<uint16_t, MacTable::EntryView> seen;
  t.ForEach([&](const MacTable::EntryView& e) { seen.emplace(e.vlan, e); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen.at(10).mac.ToString(), "02:00:00:00:00:01");
  EXPECT_EQ(seen.at(10).port, 1);
  EXPECT_FALSE(seen.at(10).is_static);
  EXPECT_EQ(seen.at(10).last_seen_tick, 7u);
  EXPECT_TRUE(seen.at(20).is_static);
}

// Readers on another thread never see a key mapped to a port it was never
// learned on while the writer churns entries through the same buckets.
TEST(MacTableTest, ConcurrentReadersSeeOnlyValidPorts) {
  MacTable t(64);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, reads{0};
  // Key m is only ever learned on port m % 4.
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      for (uint64_t m = 1; m <= 200; ++m) {
        const uint16_t port = t.Lookup(Key(1, m)).port;
        if (port != kNoPort && port != m % 4) wrong.fetch_add(1);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  // Churn for at least 2000 rounds and until the reader has swept the keys
  // 100 times meanwhile: on a loaded machine the reader thread may not be
  // scheduled before a fixed number of rounds is over. The deadline turns a
  // reader that never runs into a failure below rather than a hang.
  constexpr uint64_t kReadsWanted = 100 * 200;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (uint64_t round = 0;
       (round < 2000 || reads.load(std::memory_order_relaxed) < kReadsWanted) &&
       std::chrono::steady_clock::now() < deadline;
       ++round) {
    for (uint64_t m = 1; m <= 200; ++m) {
      if ((m + round) % 3 == 0) {
        t.Remove(Key(1, m));
      } else {
        (void)t.Learn(Key(1, m), static_cast<uint16_t>(m % 4), static_cast<uint32_t>(round));
      }
    }
  }
  stop = true;
  reader.join();
  EXPECT_GE(reads.load(), kReadsWanted);
  EXPECT_EQ(wrong.load(), 0u);
}

}  // namespace
}  // namespace aggswitch::dataplane
