#include "tools/agg-gen/chunk_window.h"

#include <gtest/gtest.h>

namespace aggswitch::tools {
namespace {

TEST(ChunkWindowTest, AckAdvancesOverAnsweredChunksInOrder) {
  ChunkWindow w;
  w.Init(5);  // capacity rounds up to 8
  for (int i = 0; i < 5; ++i) w.MarkSent(100);
  EXPECT_EQ(w.ack(), 0u);
  EXPECT_EQ(w.next(), 5u);
  EXPECT_EQ(w.in_flight(), 5u);
  EXPECT_EQ(w.Complete(2), ChunkWindow::kNew);
  EXPECT_EQ(w.Complete(1), ChunkWindow::kNew);
  EXPECT_EQ(w.ack(), 0u);  // 0 is still missing
  EXPECT_EQ(w.InFlightUnanswered(), 3u);
  EXPECT_EQ(w.Complete(0), ChunkWindow::kNew);
  EXPECT_EQ(w.ack(), 3u);
  EXPECT_EQ(w.Complete(1), ChunkWindow::kDuplicate);  // below ack
  EXPECT_EQ(w.Complete(4), ChunkWindow::kNew);
  EXPECT_EQ(w.Complete(4), ChunkWindow::kDuplicate);  // answered, ack not yet past it
  EXPECT_EQ(w.Complete(5), ChunkWindow::kNeverSent);
  EXPECT_EQ(w.Complete(1000), ChunkWindow::kNeverSent);
  EXPECT_EQ(w.Complete(3), ChunkWindow::kNew);
  EXPECT_EQ(w.ack(), 5u);
  EXPECT_EQ(w.in_flight(), 0u);
}

TEST(ChunkWindowTest, ExpiryFollowsTheLastSend) {
  ChunkWindow w;
  w.Init(4);
  w.MarkSent(1000);  // seq 0
  w.MarkSent(1050);  // seq 1
  EXPECT_FALSE(w.Expired(0, 1099, 100));
  EXPECT_TRUE(w.Expired(0, 1100, 100));
  EXPECT_FALSE(w.Expired(1, 1100, 100));
  w.MarkResent(0, 1100);
  EXPECT_FALSE(w.Expired(0, 1150, 100));
  EXPECT_TRUE(w.Expired(1, 1150, 100));
  ASSERT_EQ(w.Complete(1), ChunkWindow::kNew);
  EXPECT_FALSE(w.Expired(1, 9999, 100));  // answered chunks never expire
}

}  // namespace
}  // namespace aggswitch::tools
