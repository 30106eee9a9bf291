#include "aggregator/slot_placement.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace aggswitch::aggregator {
namespace {

TEST(FastModTest, EqualsTheRemainder) {
  std::mt19937 rng(1);
  for (uint32_t d : {1u, 2u, 3u, 7u, 64u, 1000u, 3072u, 65536u, 1048575u, 4294967295u}) {
    const uint64_t magic = FastModMagic(d);
    for (uint32_t x : {0u, 1u, d - 1, d, d + 1, 4294967295u, 4294967294u}) {
      EXPECT_EQ(FastMod(x, magic, d), x % d) << x << " mod " << d;
    }
    for (int i = 0; i < 10000; ++i) {
      const uint32_t x = static_cast<uint32_t>(rng());
      ASSERT_EQ(FastMod(x, magic, d), x % d) << x << " mod " << d;
    }
  }
}

// The provisioned region and the in-band region never overlap; a job's
// window of consecutive chunks never meets itself and spreads round robin.
TEST(SlotRegionsTest, RegionsAreDisjointAndWindowsConsecutive) {
  const SlotRegions regions = SlotRegions::Make(4096, 1024);
  EXPECT_EQ(regions.provisioned.first, 0u);
  EXPECT_EQ(regions.provisioned.size, 3072u);
  EXPECT_EQ(regions.in_band.first, 3072u);
  EXPECT_EQ(regions.in_band.size, 1024u);
  for (const bool in_band : {false, true}) {
    const SlotRegion& r = regions.For(in_band);
    for (const uint32_t offset : {0u, 17u, 4294967295u}) {
      std::set<uint32_t> seen;
      for (uint32_t seq = 1000; seq < 1000 + r.size; ++seq) {
        const uint32_t slot = regions.Of(in_band, offset, seq);
        ASSERT_GE(slot, r.first);
        ASSERT_LT(slot, r.first + r.size);
        seen.insert(slot);
      }
      EXPECT_EQ(seen.size(), r.size) << "a region's worth of chunks takes every slot once";
    }
  }
  for (const uint32_t workers : {1u, 2u, 4u}) {
    std::vector<int> per_worker(workers);
    for (uint32_t seq = 0; seq < 64; ++seq) ++per_worker[regions.Of(false, 5, seq) % workers];
    for (const int n : per_worker) EXPECT_EQ(n, static_cast<int>(64 / workers));
  }
  // Without in-band registration the whole table is the provisioned jobs'.
  const SlotRegions all = SlotRegions::Make(4096, 0);
  EXPECT_EQ(all.provisioned.size, 4096u);
  EXPECT_EQ(all.Of(false, 4095, 1), 0u);
}

TEST(SlotOffsetTest, DependsOnTheSecretAndTheJob) {
  const common::SipKey a{1, 2}, b{1, 3};
  EXPECT_EQ(SlotOffset(a, 7), SlotOffset(a, 7));
  EXPECT_NE(SlotOffset(a, 7), SlotOffset(b, 7));
  EXPECT_NE(SlotOffset(a, 7), SlotOffset(a, 8));
  // Spread: 1000 jobs over a 1024-slot region land on many distinct slots.
  const SlotRegion r = SlotRegion::Make(0, 1024);
  std::set<uint32_t> bases;
  for (uint32_t id = 1; id <= 1000; ++id) bases.insert(r.Of(SlotOffset(a, id), 0));
  EXPECT_GT(bases.size(), 550u);
}

// A partition's chunks stay in its span, each window of `span` consecutive
// chunks takes every slot of it once, and it wraps around the region's end.
TEST(JobPlacementTest, PartitionKeepsItsChunksInItsSpan) {
  const SlotRegion r = SlotRegion::Make(100, 1000);
  for (const auto& [base, span] : {std::pair{0u, 256u}, std::pair{900u, 200u}, std::pair{0u, 1000u}}) {
    const JobPlacement p = JobPlacement::Partition(base, span);
    std::set<uint32_t> seen;
    for (uint32_t seq = 1000003; seq != 1000003 + span; ++seq) {
      const uint32_t slot = r.Of(p, seq) - r.first;
      // In [base, base + span) modulo the region.
      ASSERT_LT((slot + r.size - base) % r.size, span) << "seq " << seq;
      seen.insert(slot);
    }
    EXPECT_EQ(seen.size(), span);
  }
  EXPECT_EQ(r.Of(JobPlacement::Partition(900, 200), 150), 100u + 50u) << "wraps past the end";
  // Hash placement is the offset formula.
  EXPECT_EQ(r.Of(JobPlacement::Hash(77), 5), r.Of(77u, 5));
}

// Round robin: each new partition starts where the newest ends, skipping
// ranges that other live partitions hold; a full region gives the cursor.
// FreeBase finds a stretch no live partition meets, nearest after the
// cursor, across the region's end; none when the region has no such stretch.
TEST(FreeBaseTest, FindsAFreeStretchOrNone) {
  const std::vector<Partition> live = {{0, 10}, {20, 10}, {40, 50}};  // in 100 slots
  EXPECT_EQ(FreeBase(100, 10, 0, live), 10u);
  EXPECT_EQ(FreeBase(100, 10, 15, live), 30u);
  EXPECT_EQ(FreeBase(100, 11, 0, live), std::nullopt) << "gaps of 10 only";
  EXPECT_EQ(FreeBase(100, 5, 33, live), 33u) << "the cursor itself, free";
  EXPECT_EQ(FreeBase(100, 10, 95, live), 10u) << "past the region's end";
  const std::vector<Partition> wrapping = {{95, 10}};  // 95..99 and 0..4
  EXPECT_EQ(FreeBase(100, 90, 0, wrapping), 5u);
  EXPECT_EQ(FreeBase(100, 91, 0, wrapping), std::nullopt);
  EXPECT_EQ(FreeBase(100, 100, 0, {}), 0u);
}

TEST(RoundRobinBaseTest, PacksPartitionsWithoutOverlap) {
  std::vector<Partition> live;
  uint32_t cursor = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t base = RoundRobinBase(1024, 256, cursor, live);
    EXPECT_EQ(base, 256u * i);
    live.push_back({base, 256});
    cursor = (base + 256) % 1024;
  }
  // Full: every candidate meets a partition, so the cursor.
  EXPECT_EQ(RoundRobinBase(1024, 256, cursor, live), cursor);
  // The second job leaves: its range is found although the cursor is past it.
  live.erase(live.begin() + 1);
  EXPECT_EQ(RoundRobinBase(1024, 256, cursor, live), 256u);
  // A gap too small for the span is skipped.
  const std::vector<Partition> gaps = {{0, 100}, {150, 100}, {300, 100}};
  EXPECT_EQ(RoundRobinBase(1024, 200, 100, gaps), 400u);
  // Partitions that wrap around the region's end count on both sides.
  const std::vector<Partition> wrapped = {{900, 224}};
  EXPECT_EQ(RoundRobinBase(1024, 100, 950, wrapped), 100u);
  EXPECT_EQ(RoundRobinBase(1024, 100, 0, wrapped), 100u);
  // Whatever it returns meets no live partition when one fits.
  std::mt19937 rng(3);
  for (int round = 0; round < 200; ++round) {
    std::vector<Partition> ps;
    for (int k = 0; k < 3; ++k) ps.push_back({static_cast<uint32_t>(rng() % 1024), 64});
    const uint32_t base = RoundRobinBase(1024, 64, static_cast<uint32_t>(rng() % 1024), ps);
    const auto inside = [](uint32_t slot, const Partition& p) {
      return (slot + 1024 - p.base) % 1024 < p.span;
    };
    const auto meets_none = [&](uint32_t a) {
      for (const Partition& p : ps) {
        for (uint32_t k = 0; k < 64; ++k) {
          if (inside((a + k) % 1024, p)) return false;
        }
      }
      return true;
    };
    bool fits = false;
    for (uint32_t a = 0; a < 1024 && !fits; ++a) fits = meets_none(a);
    if (fits) {
      EXPECT_TRUE(meets_none(base)) << "round " << round << ": base " << base;
    }
  }
}

}  // namespace
}  // namespace aggswitch::aggregator
