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

}  // namespace
}  // namespace aggswitch::aggregator
