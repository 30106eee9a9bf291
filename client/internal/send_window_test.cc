#include "client/internal/send_window.h"

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

using std::chrono::milliseconds;
using Match = SendWindow::Match;
using Clock = SendWindow::Clock;

SendWindow::Params Params(uint32_t window) { return {.window = window}; }
constexpr milliseconds kTimeout{10};

// Complete() at time zero, the round trip ignored.
Match Complete(SendWindow& w, uint32_t seq, uint32_t* k) {
  Clock::duration rtt;
  return w.Complete(seq, Clock::time_point{}, k, &rtt);
}

TEST(SendWindowTest, AtMostWindowChunksAreOutstanding) {
  SendWindow w;
  w.Reset(100, 10, Params(3));
  const Clock::time_point t0{};
  EXPECT_EQ(w.MarkSent(t0, kTimeout), 0u);
  EXPECT_EQ(w.MarkSent(t0, kTimeout), 1u);
  EXPECT_EQ(w.MarkSent(t0, kTimeout), 2u);
  EXPECT_FALSE(w.CanSend());
  uint32_t k = 99;
  EXPECT_EQ(Complete(w, 101, &k), Match::kNew);  // answered, but chunk 0 still holds the window
  EXPECT_EQ(k, 1u);
  EXPECT_FALSE(w.CanSend());
  EXPECT_EQ(Complete(w, 100, &k), Match::kNew);
  EXPECT_EQ(w.acked(), 2u);
  EXPECT_EQ(w.ack_watermark(), 102u);
  EXPECT_TRUE(w.CanSend());
}

TEST(SendWindowTest, MatchesResultsBySequenceNumber) {
  SendWindow w;
  w.Reset(500, 4, Params(8));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);
  w.MarkSent(t0, kTimeout);
  uint32_t k = 0;
  EXPECT_EQ(Complete(w, 501, &k), Match::kNew);
  EXPECT_EQ(Complete(w, 501, &k), Match::kDuplicate);  // answered, above the watermark
  EXPECT_EQ(Complete(w, 502, &k), Match::kNotSent);    // ours, not sent yet
  EXPECT_EQ(Complete(w, 504, &k), Match::kForeign);    // past the transfer
  EXPECT_EQ(Complete(w, 499, &k), Match::kForeign);    // an earlier transfer's
  EXPECT_EQ(Complete(w, 500, &k), Match::kNew);
  EXPECT_EQ(Complete(w, 500, &k), Match::kDuplicate);  // below the watermark
  EXPECT_EQ(w.acked(), 2u);
  w.MarkSent(t0, kTimeout);
  w.MarkSent(t0, kTimeout);
  EXPECT_FALSE(w.CanSend());  // all four sent
  EXPECT_EQ(Complete(w, 503, &k), Match::kNew);
  EXPECT_EQ(Complete(w, 502, &k), Match::kNew);
  EXPECT_TRUE(w.Done());
}

TEST(SendWindowTest, SequenceNumbersWrapAround) {
  SendWindow w;
  w.Reset(0xFFFFFFFEu, 4, Params(4));
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0, kTimeout);
  EXPECT_EQ(w.Seq(3), 1u);
  uint32_t k = 0;
  EXPECT_EQ(Complete(w, 1u, &k), Match::kNew);
  EXPECT_EQ(k, 3u);
  EXPECT_EQ(Complete(w, 0xFFFFFFFDu, &k), Match::kForeign);
  EXPECT_EQ(Complete(w, 0xFFFFFFFEu, &k), Match::kNew);
  EXPECT_EQ(Complete(w, 0xFFFFFFFFu, &k), Match::kNew);
  EXPECT_EQ(Complete(w, 0u, &k), Match::kNew);
  EXPECT_EQ(w.ack_watermark(), 2u);
  EXPECT_TRUE(w.Done());
}

TEST(SendWindowTest, DueChunksAreRearmedWithTheTimeoutTheyAreResentWith) {
  SendWindow w;
  w.Reset(0, 2, Params(2));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);                    // chunk 0, due at 10 ms
  w.MarkSent(t0 + milliseconds(4), kTimeout);  // chunk 1, due at 14 ms
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(10));
  uint32_t due[4];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(9), milliseconds(20), due, 4), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), milliseconds(20), due, 4), 1u);
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(14));  // chunk 1; chunk 0 again at 30 ms
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(30), milliseconds(5), due, 4), 2u);  // both due now
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(due[1], 1u);
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(35));
  EXPECT_EQ(w.ResendsOf(0), 2u);
  EXPECT_EQ(w.ResendsOf(1), 1u);
  // A resent chunk tells no round trip; one sent once does.
  uint32_t k;
  Clock::duration rtt;
  ASSERT_EQ(w.Complete(0, t0 + milliseconds(31), &k, &rtt), Match::kNew);
  EXPECT_EQ(rtt, Clock::duration::zero());
  w.Reset(2, 1, Params(2));
  w.MarkSent(t0, kTimeout);
  ASSERT_EQ(w.Complete(2, t0 + milliseconds(3), &k, &rtt), Match::kNew);
  EXPECT_EQ(rtt, milliseconds(3));
  EXPECT_EQ(w.NextDue(), Clock::time_point::max());
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1000), kTimeout, due, 4), 0u);  // answered chunks never come due
}

// A chunk still unanswered when three chunks sent after it are answered
// comes due at once, one time; reordering by fewer leaves it alone.
TEST(SendWindowTest, ThreeLaterResultsMakeAChunkDueAtOnceOnce) {
  SendWindow w;
  w.Reset(0, 8, Params(8));
  const Clock::time_point t0{};
  for (int i = 0; i < 8; ++i) w.MarkSent(t0, kTimeout);
  const Clock::time_point t = t0 + milliseconds(1);
  uint32_t k;
  Clock::duration rtt;
  uint32_t due[8];
  ASSERT_EQ(w.Complete(1, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(2, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t, kTimeout, due, 8), 0u) << "two later results: reordering, maybe";
  ASSERT_EQ(w.Complete(3, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.NextDue(), t);
  ASSERT_EQ(w.TakeDue(t, kTimeout, due, 8), 1u);
  EXPECT_EQ(due[0], 0u);
  // Chunk 4 lost too: chunk 7's result shows it; chunk 0 is not due again
  // before its timeout.
  ASSERT_EQ(w.Complete(5, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(6, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(7, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, kTimeout, due, 8), 1u);
  EXPECT_EQ(due[0], 4u);
  EXPECT_EQ(w.NextDue(), t + kTimeout);
  // Past its timeout chunk 0 goes again, as any chunk does.
  ASSERT_EQ(w.TakeDue(t + kTimeout, kTimeout, due, 8), 2u);
  EXPECT_EQ(w.ResendsOf(0), 2u);
}

TEST(SendWindowTest, TakeDueHandsOutAtMostMaxAndKeepsTheRestDue) {
  SendWindow w;
  w.Reset(0, 5, Params(5));
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) w.MarkSent(t0, kTimeout);
  uint32_t k;
  ASSERT_EQ(Complete(w, 1, &k), Match::kNew);
  uint32_t due[2];
  const Clock::time_point t = t0 + kTimeout;
  ASSERT_EQ(w.TakeDue(t, milliseconds(20), due, 2), 2u);
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(due[1], 2u);      // 1 was answered
  EXPECT_EQ(w.NextDue(), t);  // 3 and 4 are still due
  ASSERT_EQ(w.TakeDue(t, milliseconds(20), due, 2), 2u);
  EXPECT_EQ(due[0], 3u);
  EXPECT_EQ(due[1], 4u);
  EXPECT_EQ(w.NextDue(), t + milliseconds(20));
}

TEST(SendWindowTest, ResetStartsAFreshTransfer) {
  SendWindow w;
  w.Reset(0, 3, Params(2));
  w.MarkSent(Clock::time_point{}, kTimeout);
  w.Reset(3, 1, Params(16));  // a larger window reallocates
  EXPECT_EQ(w.sent(), 0u);
  EXPECT_EQ(w.acked(), 0u);
  EXPECT_EQ(w.NextDue(), Clock::time_point::max());
  uint32_t k;
  EXPECT_EQ(Complete(w, 0, &k), Match::kForeign);  // the earlier transfer's chunk
  EXPECT_EQ(w.MarkSent(Clock::time_point{}, kTimeout), 0u);
  EXPECT_EQ(Complete(w, 3, &k), Match::kNew);
  EXPECT_TRUE(w.Done());
}

}  // namespace
}  // namespace aggswitch::client::internal
