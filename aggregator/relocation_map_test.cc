#include "aggregator/relocation_map.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

namespace aggswitch::aggregator {
namespace {

TEST(RelocationMapTest, FindsWhatWasInsertedAndForgetsWhatWasErased) {
  RelocationMap map(4);
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.Find({7, 1, 100}), RelocationMap::kNone);
  ASSERT_TRUE(map.Insert({7, 1, 100}, 3));
  EXPECT_EQ(map.Find({7, 1, 100}), 3);
  EXPECT_EQ(map.Find({7, 2, 100}), RelocationMap::kNone);  // another registration of job 7
  EXPECT_EQ(map.Find({7, 1, 101}), RelocationMap::kNone);
  ASSERT_TRUE(map.Insert({7, 1, 100}, 0));  // moved again: the later lease counts
  EXPECT_EQ(map.Find({7, 1, 100}), 0);
  EXPECT_EQ(map.size(), 1u);
  map.Erase({7, 1, 100}, 3);  // the old lease ending does not erase the new one
  EXPECT_EQ(map.Find({7, 1, 100}), 0);
  map.Erase({7, 1, 100}, 0);
  EXPECT_EQ(map.Find({7, 1, 100}), RelocationMap::kNone);
  EXPECT_TRUE(map.empty());
}

TEST(RelocationMapTest, RefusesMoreThanItsCapacity) {
  RelocationMap map(3);
  for (uint32_t s = 0; s < 3; ++s) ASSERT_TRUE(map.Insert({1, 1, s}, static_cast<uint16_t>(s)));
  EXPECT_FALSE(map.Insert({1, 1, 3}, 3));
  EXPECT_TRUE(map.Insert({1, 1, 2}, 9));  // an existing entry may still move
  EXPECT_EQ(map.Find({1, 1, 2}), 9);
  map.Erase({1, 1, 0}, 0);
  EXPECT_TRUE(map.Insert({1, 1, 3}, 3));
}

// Random inserts and erases against std::map: backward-shift deletion keeps
// every entry reachable however the probe runs interleave.
TEST(RelocationMapTest, AgreesWithAReferenceMapUnderChurn) {
  constexpr uint32_t kCapacity = 64;
  RelocationMap map(kCapacity);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint16_t> ref;
  std::mt19937 rng(7);
  for (int step = 0; step < 200000; ++step) {
    // Few distinct keys, so that runs form, break and re-form.
    const ChunkKey key{static_cast<uint32_t>(rng() % 4), static_cast<uint32_t>(rng() % 2),
                       static_cast<uint32_t>(rng() % 40)};
    const auto rk = std::make_tuple(key.job_id, key.job_generation, key.seq);
    const auto hint = static_cast<uint16_t>(rng() % 100);
    if (rng() % 2 == 0) {
      const bool room = ref.size() < kCapacity || ref.count(rk) != 0;
      ASSERT_EQ(map.Insert(key, hint), room) << step;
      if (room) ref[rk] = hint;
    } else {
      const auto it = ref.find(rk);
      const uint16_t erase = it != ref.end() && rng() % 4 != 0 ? it->second : hint;
      map.Erase(key, erase);
      if (it != ref.end() && it->second == erase) ref.erase(it);
    }
    ASSERT_EQ(map.size(), ref.size()) << step;
    if (step % 97 == 0) {
      for (uint32_t j = 0; j < 4; ++j) {
        for (uint32_t g = 0; g < 2; ++g) {
          for (uint32_t s = 0; s < 40; ++s) {
            const auto it = ref.find({j, g, s});
            ASSERT_EQ(map.Find({j, g, s}), it == ref.end() ? RelocationMap::kNone : it->second)
                << step;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace aggswitch::aggregator
