#include "client/internal/send_window.h"

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

using std::chrono::milliseconds;
using Match = SendWindow::Match;
using Clock = SendWindow::Clock;

SendWindow::Params Params(uint32_t window) {
  SendWindow::Params p;
  p.window = window;
  p.timeout = milliseconds(10);
  p.max_timeout = milliseconds(35);
  p.backoff = 2.0;
  return p;
}

TEST(SendWindowTest, AtMostWindowChunksAreOutstanding) {
  SendWindow w;
  w.Reset(100, 10, Params(3));
  const Clock::time_point t0{};
  EXPECT_EQ(w.MarkSent(t0), 0u);
  EXPECT_EQ(w.MarkSent(t0), 1u);
  EXPECT_EQ(w.MarkSent(t0), 2u);
  EXPECT_FALSE(w.CanSend());
  uint32_t k = 99;
  EXPECT_EQ(w.Complete(101, &k), Match::kNew);  // answered, but chunk 0 still holds the window
  EXPECT_EQ(k, 1u);
  EXPECT_FALSE(w.CanSend());
  EXPECT_EQ(w.Complete(100, &k), Match::kNew);
  EXPECT_EQ(w.acked(), 2u);
  EXPECT_EQ(w.ack_watermark(), 102u);
  EXPECT_TRUE(w.CanSend());
}

TEST(SendWindowTest, MatchesResultsBySequenceNumber) {
  SendWindow w;
  w.Reset(500, 4, Params(8));
  const Clock::time_point t0{};
  w.MarkSent(t0);
  w.MarkSent(t0);
  uint32_t k = 0;
  EXPECT_EQ(w.Complete(501, &k), Match::kNew);
  EXPECT_EQ(w.Complete(501, &k), Match::kDuplicate);  // answered, above the watermark
  EXPECT_EQ(w.Complete(502, &k), Match::kNotSent);    // ours, not sent yet
  EXPECT_EQ(w.Complete(504, &k), Match::kForeign);    // past the transfer
  EXPECT_EQ(w.Complete(499, &k), Match::kForeign);    // an earlier transfer's
  EXPECT_EQ(w.Complete(500, &k), Match::kNew);
  EXPECT_EQ(w.Complete(500, &k), Match::kDuplicate);  // below the watermark
  EXPECT_EQ(w.acked(), 2u);
  w.MarkSent(t0);
  w.MarkSent(t0);
  EXPECT_FALSE(w.CanSend());  // all four sent
  EXPECT_EQ(w.Complete(503, &k), Match::kNew);
  EXPECT_EQ(w.Complete(502, &k), Match::kNew);
  EXPECT_TRUE(w.Done());
}

TEST(SendWindowTest, SequenceNumbersWrapAround) {
  SendWindow w;
  w.Reset(0xFFFFFFFEu, 4, Params(4));
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0);
  EXPECT_EQ(w.Seq(3), 1u);
  uint32_t k = 0;
  EXPECT_EQ(w.Complete(1u, &k), Match::kNew);
  EXPECT_EQ(k, 3u);
  EXPECT_EQ(w.Complete(0xFFFFFFFDu, &k), Match::kForeign);
  EXPECT_EQ(w.Complete(0xFFFFFFFEu, &k), Match::kNew);
  EXPECT_EQ(w.Complete(0xFFFFFFFFu, &k), Match::kNew);
  EXPECT_EQ(w.Complete(0u, &k), Match::kNew);
  EXPECT_EQ(w.ack_watermark(), 2u);
  EXPECT_TRUE(w.Done());
}

TEST(SendWindowTest, RetransmissionsBackOffUpToTheLimit) {
  SendWindow w;
  w.Reset(0, 2, Params(2));
  const Clock::time_point t0{};
  w.MarkSent(t0);                    // chunk 0, due at 10 ms
  w.MarkSent(t0 + milliseconds(4));  // chunk 1, due at 14 ms
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(10));
  uint32_t due[4];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(9), due, 4), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), due, 4), 1u);
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));  // doubled
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(14));
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(30), due, 4), 2u);  // both due now
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(due[1], 1u);
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(35));  // 40 capped at 35
  EXPECT_EQ(w.ResendsOf(0), 2u);
  EXPECT_EQ(w.ResendsOf(1), 1u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(65), due, 4), 2u);  // 0 at 65, 1 at 50
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(35));              // stays capped
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(35));
  uint32_t k;
  ASSERT_EQ(w.Complete(0, &k), Match::kNew);
  ASSERT_EQ(w.Complete(1, &k), Match::kNew);
  EXPECT_EQ(w.NextDue(), Clock::time_point::max());
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1000), due, 4), 0u);  // answered chunks never come due
}

TEST(SendWindowTest, ARefusedChunkIsDueSoonAndItsResendDoesNotBackOff) {
  SendWindow w;
  w.Reset(100, 3, Params(3));
  const Clock::time_point t0{};
  w.MarkSent(t0);  // chunks 0..2 (seq 100..102), due at 10 ms
  w.MarkSent(t0);
  w.MarkSent(t0);
  EXPECT_TRUE(w.Refused(101, t0 + milliseconds(2)));
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(2));
  uint32_t due[4];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1), due, 4), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 4), 1u);
  EXPECT_EQ(due[0], 1u);
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(10)) << "the switch answered: nothing to back off from";
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(10));
  // A later refusal never delays a chunk past its timer.
  EXPECT_TRUE(w.Refused(102, t0 + milliseconds(50)));
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), due, 4), 2u);  // chunks 0 and 2
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));
  EXPECT_EQ(w.TimeoutOf(2), milliseconds(10));
  // The resends after those back off again (chunk 1 was due at 12).
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(20), due, 4), 2u);
  EXPECT_EQ(due[0], 1u);
  EXPECT_EQ(due[1], 2u);
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(20));
  EXPECT_EQ(w.TimeoutOf(2), milliseconds(20));
  // Refusals of chunks that are not outstanding change nothing.
  uint32_t k;
  ASSERT_EQ(w.Complete(101, &k), Match::kNew);
  EXPECT_FALSE(w.Refused(101, t0)) << "answered";
  EXPECT_FALSE(w.Refused(99, t0)) << "another transfer's";
  EXPECT_FALSE(w.Refused(103, t0)) << "not of this transfer";
}

TEST(SendWindowTest, TakeDueHandsOutAtMostMaxAndKeepsTheRestDue) {
  SendWindow w;
  w.Reset(0, 5, Params(5));
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) w.MarkSent(t0);
  uint32_t k;
  ASSERT_EQ(w.Complete(1, &k), Match::kNew);
  uint32_t due[2];
  const Clock::time_point t = t0 + milliseconds(10);
  ASSERT_EQ(w.TakeDue(t, due, 2), 2u);
  EXPECT_EQ(due[0], 0u);
  EXPECT_EQ(due[1], 2u);      // 1 was answered
  EXPECT_EQ(w.NextDue(), t);  // 3 and 4 are still due
  ASSERT_EQ(w.TakeDue(t, due, 2), 2u);
  EXPECT_EQ(due[0], 3u);
  EXPECT_EQ(due[1], 4u);
  EXPECT_EQ(w.NextDue(), t + milliseconds(20));
}

TEST(SendWindowTest, ResetStartsAFreshTransfer) {
  SendWindow w;
  w.Reset(0, 3, Params(2));
  w.MarkSent(Clock::time_point{});
  w.Reset(3, 1, Params(16));  // a larger window reallocates
  EXPECT_EQ(w.sent(), 0u);
  EXPECT_EQ(w.acked(), 0u);
  EXPECT_EQ(w.NextDue(), Clock::time_point::max());
  uint32_t k;
  EXPECT_EQ(w.Complete(0, &k), Match::kForeign);  // the earlier transfer's chunk
  EXPECT_EQ(w.MarkSent(Clock::time_point{}), 0u);
  EXPECT_EQ(w.Complete(3, &k), Match::kNew);
  EXPECT_TRUE(w.Done());
}

}  // namespace
}  // namespace aggswitch::client::internal
