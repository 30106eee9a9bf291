#include "aggregator/spare_slots.h"

#include <gtest/gtest.h>

#include <set>

namespace aggswitch::aggregator {
namespace {

using Clock = SpareSlots::Clock;

TEST(SpareSlotsTest, AChunkKeepsItsSlotAndEachChunkGetsItsOwn) {
  SpareSlots spare(3);
  const Clock::time_point now{};
  const auto never = [](const SpareSlots::Lease&) { return false; };
  const SpareSlots::Grant a = spare.Acquire({7, 1, 10}, 100, now, never);
  ASSERT_NE(a.hint, SpareSlots::kNone);
  EXPECT_TRUE(a.fresh);
  EXPECT_FALSE(a.ended);
  // Every member's contribution of that chunk meets in the same slot.
  const SpareSlots::Grant again = spare.Acquire({7, 1, 10}, 100, now, never);
  EXPECT_EQ(again.hint, a.hint);
  EXPECT_FALSE(again.fresh);
  std::set<uint16_t> hints{a.hint};
  hints.insert(spare.Acquire({7, 1, 11}, 101, now, never).hint);
  hints.insert(spare.Acquire({8, 1, 10}, 100, now, never).hint);
  EXPECT_EQ(hints, (std::set<uint16_t>{0, 1, 2}));
  EXPECT_EQ(spare.leased(), 3u);
  // Full while every lease runs: the caller refuses (NACK slot_busy).
  const SpareSlots::Grant none = spare.Acquire({9, 1, 1}, 5, now, never);
  EXPECT_EQ(none.hint, SpareSlots::kNone);
  EXPECT_EQ(spare.granted(), 3u);
}

TEST(SpareSlotsTest, ALeaseThatIsOverMakesRoomAndIsReturned) {
  SpareSlots spare(2);
  const Clock::time_point t0{};
  const auto never = [](const SpareSlots::Lease&) { return false; };
  const uint16_t h10 = spare.Acquire({7, 1, 10}, 100, t0, never).hint;
  const uint16_t h11 = spare.Acquire({7, 1, 11}, 101, t0, never).hint;
  // Chunk 10 is over (its members acknowledged past it): its slot goes to
  // the newcomer, and the caller learns which placed slot to tell.
  const auto ten_over = [](const SpareSlots::Lease& l) { return l.key.seq == 10; };
  const SpareSlots::Grant g = spare.Acquire({8, 3, 500}, 42, t0 + std::chrono::seconds(1), ten_over);
  EXPECT_EQ(g.hint, h10);
  ASSERT_TRUE(g.ended);
  EXPECT_EQ(g.ended->key, (ChunkKey{7, 1, 10}));
  EXPECT_EQ(g.ended->placed_slot, 100u);
  EXPECT_EQ(spare.leased(), 2u);
  // The chunk whose lease ended gets a new slot if it comes back; chunk 11 kept its own.
  EXPECT_EQ(spare.Acquire({7, 1, 11}, 101, t0, never).hint, h11);
  EXPECT_EQ(spare.Acquire({7, 1, 10}, 100, t0, never).hint, SpareSlots::kNone);
}

// A chunk behind its job's oldest leaves the last free slot to an oldest
// chunk, the only spare slot included.
TEST(SpareSlotsTest, TheLastFreeSlotIsKeptForAnOldestChunk) {
  SpareSlots spare(2);
  const Clock::time_point now{};
  const auto never = [](const SpareSlots::Lease&) { return false; };
  EXPECT_NE(spare.Acquire({7, 1, 10}, 100, now, never, /*oldest=*/false).hint, SpareSlots::kNone);
  EXPECT_EQ(spare.Acquire({8, 1, 20}, 200, now, never, /*oldest=*/false).hint, SpareSlots::kNone);
  EXPECT_NE(spare.Acquire({9, 1, 5}, 300, now, never, /*oldest=*/true).hint, SpareSlots::kNone);
  EXPECT_EQ(spare.granted(), 2u);
  SpareSlots one(1);
  EXPECT_EQ(one.Acquire({7, 1, 10}, 100, now, never, /*oldest=*/false).hint, SpareSlots::kNone);
  EXPECT_NE(one.Acquire({9, 1, 5}, 300, now, never, /*oldest=*/true).hint, SpareSlots::kNone);
  EXPECT_EQ(one.granted(), 1u);
}

TEST(SpareSlotsTest, NoSpareSlotsLeasesNothing) {
  SpareSlots spare(0);
  EXPECT_EQ(spare.Acquire({1, 1, 1}, 0, Clock::time_point{}, [](const SpareSlots::Lease&) {
    return true;
  }).hint, SpareSlots::kNone);
}

}  // namespace
}  // namespace aggswitch::aggregator
