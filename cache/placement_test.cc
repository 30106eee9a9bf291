#include "cache/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace aggswitch::cache {
namespace {

std::string ItemName(int i) { return "train/" + std::to_string(i) + ".bin"; }

TEST(PlacementTest, HoldersAreDistinctOwnerFirstAndStable) {
  Placement ring({"n1", "n2", "n3", "n4"}, 2);
  Placement again({"n1", "n2", "n3", "n4"}, 2);
  for (int i = 0; i < 1000; ++i) {
    const auto h = ring.Holders(ItemName(i));
    ASSERT_EQ(h.size(), 2u);
    EXPECT_NE(h[0], h[1]);
    EXPECT_EQ(h, again.Holders(ItemName(i)));
    EXPECT_EQ(ring.Rank(ItemName(i), h[0]), 0u);
    EXPECT_EQ(ring.Rank(ItemName(i), h[1]), 1u);
  }
}

TEST(PlacementTest, SpreadsItemsEvenly) {
  Placement ring({"n1", "n2", "n3", "n4"}, 1);
  std::map<std::string, int> owned;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++owned[ring.Holders(ItemName(i))[0]];
  ASSERT_EQ(owned.size(), 4u);
  for (const auto& [node, count] : owned) {
    EXPECT_GT(count, n / 4 * 0.8) << node;
    EXPECT_LT(count, n / 4 * 1.2) << node;
  }
}

TEST(PlacementTest, RemovingANodeMovesOnlyItsItems) {
  Placement four({"n1", "n2", "n3", "n4"}, 1);
  Placement three({"n1", "n2", "n4"}, 1);
  int moved = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string before = four.Holders(ItemName(i))[0];
    const std::string after = three.Holders(ItemName(i))[0];
    if (before != "n3") {
      EXPECT_EQ(before, after) << ItemName(i);
    }
    moved += before != after;
  }
  EXPECT_GT(moved, 1500);
  EXPECT_LT(moved, 3500);
}

TEST(PlacementTest, ReplicasAreCappedAtTheNodeCount) {
  Placement ring({"a", "b"}, 5);
  EXPECT_EQ(ring.replicas(), 2u);
  EXPECT_EQ(ring.Holders("x").size(), 2u);
  EXPECT_EQ(ring.Rank("x", "c"), Placement::npos);
  EXPECT_TRUE(Placement({}, 1).Holders("x").empty());
}

}  // namespace
}  // namespace aggswitch::cache
