#include "cache/region.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>

#include "cache/placement.h"

namespace aggswitch::cache {
namespace {

std::string TestPath() { return "/dev/shm/aggswitch-cache-test." + std::to_string(::getpid()); }

TEST(RegionTest, CommittedItemsAreReadableThroughAView) {
  auto region = Region::Create(TestPath(), 1, false);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  Region& r = **region;
  EXPECT_EQ(r.size(), uint64_t{2} << 20);  // rounded up
  std::vector<EvictedItem> evicted;
  auto res = r.Reserve("a", 100, &evicted);
  ASSERT_TRUE(res.ok());
  std::memset(res->data, 'x', 100);
  EXPECT_EQ(r.Find("a"), -1) << "not findable before Commit";
  EXPECT_FALSE(HeaderConfirms(*r.HeaderAt(res->offset), ItemHash("a"), 7, 100));
  r.Commit(*res, 7, 99);
  EXPECT_EQ(r.Find("a"), static_cast<int64_t>(res->offset));
  EXPECT_TRUE(HeaderConfirms(*r.HeaderAt(res->offset), ItemHash("a"), 7, 100));
  EXPECT_FALSE(HeaderConfirms(*r.HeaderAt(res->offset), ItemHash("a"), 8, 100)) << "another version";
  EXPECT_FALSE(HeaderConfirms(*r.HeaderAt(res->offset), ItemHash("b"), 7, 100)) << "another item";

  auto view = RegionView::Open(TestPath());
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(std::memcmp((*view)->base() + res->offset + 64, std::string(100, 'x').data(), 100), 0);
  EXPECT_EQ(r.stats().items, 1u);
  EXPECT_EQ(r.stats().used, Region::Footprint(100));

  EXPECT_TRUE(r.Evict("a"));
  EXPECT_FALSE(HeaderConfirms(*r.HeaderAt(res->offset), ItemHash("a"), 7, 100)) << "evicted: invalid";
  EXPECT_EQ(r.stats().items, 0u);
  EXPECT_FALSE(r.Evict("a"));
}

TEST(RegionTest, FullRegionEvictsOldestFirst) {
  auto region = Region::Create(TestPath(), 2 << 20, false);
  ASSERT_TRUE(region.ok());
  Region& r = **region;
  const uint64_t item = (512 << 10) - 64;  // four fit exactly
  std::vector<EvictedItem> evicted;
  for (int i = 0; i < 4; ++i) {
    auto res = r.Reserve("i" + std::to_string(i), item, &evicted);
    ASSERT_TRUE(res.ok());
    r.Commit(*res, 1, 0);
  }
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(r.stats().used, r.size());
  auto res = r.Reserve("i4", item, &evicted);
  ASSERT_TRUE(res.ok());
  r.Commit(*res, 1, 0);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].item, "i0");
  EXPECT_EQ(r.Find("i0"), -1);
  EXPECT_GE(r.Find("i1"), 0);
  EXPECT_EQ(r.stats().evictions, 1u);

  auto too_big = r.Reserve("huge", r.size(), &evicted);
  EXPECT_EQ(too_big.status().code(), common::StatusCode::kResourceExhausted);
}

TEST(RegionTest, RandomFillsNeverOverlapAndStayConsistent) {
  auto region = Region::Create(TestPath(), 2 << 20, false);
  ASSERT_TRUE(region.ok());
  Region& r = **region;
  std::mt19937 rng(7);
  std::map<std::string, uint8_t> live;  // item -> the byte it was filled with
  for (int step = 0; step < 3000; ++step) {
    const std::string name = "k" + std::to_string(rng() % 200);
    const uint64_t len = 1 + rng() % (300 << 10);
    std::vector<EvictedItem> evicted;
    auto res = r.Reserve(name, len, &evicted);
    ASSERT_TRUE(res.ok());
    for (const auto& e : evicted) live.erase(e.item);
    live.erase(name);
    const auto fill = static_cast<uint8_t>(step);
    std::memset(res->data, fill, len);
    if (rng() % 10 == 0) {
      r.Abandon(*res);
      continue;
    }
    r.Commit(*res, step, 0);
    live[name] = fill;
    ASSERT_EQ(r.stats().items, live.size());
    uint64_t used = 0;
    for (const auto& [item, byte] : live) {
      const int64_t off = r.Find(item);
      ASSERT_GE(off, 0) << item;
      const ItemHeader* h = r.HeaderAt(static_cast<uint64_t>(off));
      used += Region::Footprint(h->length);
      const uint8_t* data = r.base() + off + 64;
      ASSERT_EQ(data[0], byte) << item << " overwritten at step " << step;
      ASSERT_EQ(data[h->length - 1], byte) << item << " overwritten at step " << step;
    }
    ASSERT_EQ(r.stats().used, used);
    ASSERT_LE(used, r.size());
  }
}

}  // namespace
}  // namespace aggswitch::cache
