#include "client/internal/send_window.h"

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::microseconds;
using std::chrono::seconds;
using Match = SendWindow::Match;
using Clock = SendWindow::Clock;

// Timeouts resend the data (no queries), unless a test says otherwise.
SendWindow::Params Params(uint32_t window) {
  return {.window = window, .max_timeout = milliseconds(35), .backoff = 2.0, .query = false};
}
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

TEST(SendWindowTest, EachChunkBacksOffFromItsFirstTimeoutUpToTheLimit) {
  SendWindow w;
  w.Reset(0, 2, Params(2));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);                            // chunk 0, due at 10 ms
  w.MarkSent(t0 + milliseconds(4), milliseconds(12));  // chunk 1, due at 16 ms
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(10));
  SendWindow::Due due[4];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(9), due, 4), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), due, 4), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));  // doubled
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(12));  // not chunk 1's
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(16));
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(30), due, 4), 2u);  // both due now
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(due[1].chunk, 1u);
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(35));  // 40 capped at 35
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(24));
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
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1000), due, 4), 0u);  // answered chunks never come due
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
  SendWindow::Due due[8];
  ASSERT_EQ(w.Complete(1, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(2, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t, due, 8), 0u) << "two later results: reordering, maybe";
  ASSERT_EQ(w.Complete(3, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.NextDue(), t);
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  // Chunk 4 lost too: chunk 7's result shows it; chunk 0 is not due again
  // before its timeout.
  ASSERT_EQ(w.Complete(5, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(6, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(7, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 4u);
  // A resend doubles the chunk's own timeout, a fast one too, until the
  // next new result (chunk 0's came after it); past its timeout a chunk goes
  // again, as any chunk does.
  EXPECT_EQ(w.TimeoutOf(0), kTimeout);
  EXPECT_EQ(w.TimeoutOf(4), 2 * kTimeout);
  EXPECT_EQ(w.NextDue(), t + kTimeout);
  ASSERT_EQ(w.TakeDue(t + kTimeout, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(w.ResendsOf(0), 2u);
  ASSERT_EQ(w.TakeDue(t + 2 * kTimeout, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 4u);
}

// Timeouts grow while nothing is answered (a dead member, an unreachable
// switch); the next new result undoes that: every outstanding chunk is due
// within the timeout it was sent with, so a result lost while the job stood
// still is recovered soon after the job moves on.
TEST(SendWindowTest, TheNextResultUndoesTheBackoff) {
  SendWindow w;
  w.Reset(0, 4, {.window = 4, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = false});
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0, kTimeout);
  SendWindow::Due due[4];
  Clock::time_point t = t0;
  for (int i = 0; i < 5; ++i) {  // resent at 10, 30, 70, 150, 310 ms
    t = w.NextDue();
    ASSERT_EQ(w.TakeDue(t, due, 4), 4u);
  }
  EXPECT_EQ(t, t0 + milliseconds(310));
  EXPECT_EQ(w.TimeoutOf(3), milliseconds(320));
  EXPECT_EQ(w.NextDue(), t + milliseconds(320));
  EXPECT_TRUE(w.Held(2, t + milliseconds(1)));  // the switch has chunk 2: it waits
  uint32_t k;
  Clock::duration rtt;
  const Clock::time_point moved = t + milliseconds(5);
  ASSERT_EQ(w.Complete(1, moved, &k, &rtt), Match::kNew);
  for (uint32_t c : {0u, 2u, 3u}) EXPECT_EQ(w.TimeoutOf(c), kTimeout) << c;
  EXPECT_EQ(w.NextDue(), moved + kTimeout);
  ASSERT_EQ(w.TakeDue(moved + kTimeout, due, 4), 3u);
  EXPECT_EQ(w.TimeoutOf(0), 2 * kTimeout) << "and backs off again while nothing moves";
}

TEST(SendWindowTest, ARefusedChunkIsDueSoonAndItsResendDoesNotBackOff) {
  SendWindow w;
  w.Reset(100, 3, Params(3));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);  // chunks 0..2 (seq 100..102), due at 10 ms
  w.MarkSent(t0, kTimeout);
  w.MarkSent(t0, kTimeout);
  EXPECT_TRUE(w.Refused(101, t0 + milliseconds(2)));
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(2));
  SendWindow::Due due[4];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1), due, 4), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 4), 1u);
  EXPECT_EQ(due[0].chunk, 1u);
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(10)) << "the switch answered: nothing to back off from";
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(10));
  // A later refusal never delays a chunk past its timer.
  EXPECT_TRUE(w.Refused(102, t0 + milliseconds(50)));
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), due, 4), 2u);  // chunks 0 and 2
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));
  EXPECT_EQ(w.TimeoutOf(2), milliseconds(10));
  // The resends after those back off again (chunk 1 was due at 12).
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(20), due, 4), 2u);
  EXPECT_EQ(due[0].chunk, 1u);
  EXPECT_EQ(due[1].chunk, 2u);
  EXPECT_EQ(w.TimeoutOf(1), milliseconds(20));
  EXPECT_EQ(w.TimeoutOf(2), milliseconds(20));
  // Refusals of chunks that are not outstanding change nothing.
  uint32_t k;
  ASSERT_EQ(Complete(w, 101, &k), Match::kNew);
  EXPECT_FALSE(w.Refused(101, t0)) << "answered";
  EXPECT_FALSE(w.Refused(99, t0)) << "another transfer's";
  EXPECT_FALSE(w.Refused(103, t0)) << "not of this transfer";
}

// NOTICE held: the switch has the chunk and waits for other members. It
// is not fast-retransmitted, and goes again only after its timeout, counted
// from the notice.
TEST(SendWindowTest, AHeldChunkWaitsItsTimeoutFromTheNoticeAndIsNeverFastRetransmitted) {
  SendWindow w;
  w.Reset(0, 5, Params(8));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);  // chunk 0, due at 10 ms
  for (int i = 0; i < 4; ++i) w.MarkSent(t0 + milliseconds(8), kTimeout);  // due at 18 ms
  SendWindow::Due due[8];
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(10), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));
  EXPECT_TRUE(w.Held(0, t0 + milliseconds(11)));  // due at 31 ms now
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(11), due, 8), 0u);
  uint32_t k;
  Clock::duration rtt;
  const Clock::time_point t = t0 + milliseconds(12);
  for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_EQ(w.Complete(seq, t, &k, &rtt), Match::kNew);
  // The results undo chunk 0's backoff: due by 12 + 10 ms, not 31.
  EXPECT_EQ(w.TakeDue(t, due, 8), 0u) << "three later results, but the switch has it";
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(18), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 4u);
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(21), due, 8), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(22), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u) << "its result may be lost: one resend per timeout";
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(20));
  // Notices for chunks that are not outstanding change nothing.
  EXPECT_FALSE(w.Held(1, t)) << "answered";
  EXPECT_FALSE(w.Held(5, t)) << "not of this transfer";
  EXPECT_FALSE(w.Held(0xFFFFFFFFu, t)) << "an earlier transfer's";
}

// With queries, the chunk at the ack watermark that the switch said it
// holds is asked once more as soon as three later chunks have their results
// after that "held": its slot has most likely completed too, and its result
// to this rank was lost, while every other member waits on this rank's
// window (seed 310576: 580 ms, a probe interval inflated by the others'
// waits). Once per "held"; results before the "held" do not count.
TEST(SendWindowTest, LaterResultsAfterHeldAskAgainAboutTheWatermarksChunkOnce) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(300));
  const Clock::time_point t0{};
  for (int i = 0; i < 8; ++i) w.MarkSent(t0, milliseconds(500));
  uint32_t k;
  Clock::duration rtt;
  Clock::time_point t = t0 + milliseconds(1);
  ASSERT_EQ(w.Complete(1, t, &k, &rtt), Match::kNew);  // before the "held": not counted
  EXPECT_TRUE(w.Held(0, t));
  SendWindow::Due due[8];
  t += milliseconds(1);
  ASSERT_EQ(w.Complete(2, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(3, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t, due, 8), 0u) << "two results since the \"held\"";
  ASSERT_EQ(w.Complete(4, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u) << "three: asked now, not a probe interval later";
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_TRUE(due[0].query) << "held: a question, not the data";
  // Once per "held": more results ask nothing more.
  ASSERT_EQ(w.Complete(5, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(6, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(7, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t + milliseconds(1), due, 8), 0u);
  // Held again: no later chunk is left to answer, so the probe asks.
  EXPECT_TRUE(w.Held(0, t + milliseconds(1)));
  EXPECT_EQ(w.TakeDue(t + milliseconds(100), due, 8), 0u);
}

// An excluded member's data goes around its switch, which answers every
// question about it "missing": the member cannot tell data that reached
// the TAN from data lost on the way. Its resend on that word, lost in
// turn, was followed up only after a probe interval, two round trips that
// the other members' waits had stretched to most of a second, while the
// whole job waited on the chunk (seed 98172). Later chunks answered since
// the resend ask about the watermark's chunk again at once, once per
// resend, as they do after a "held".
TEST(SendWindowTest, LaterResultsAfterADataResendAskAgainAboutTheWatermarksChunk) {
  SendWindow w;
  w.Reset(0, 12, {.window = 12, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(300));
  const Clock::time_point t0{};
  for (int i = 0; i < 12; ++i) w.MarkSent(t0, milliseconds(500));
  uint32_t k;
  Clock::duration rtt;
  SendWindow::Due due[12];
  Clock::time_point t = t0 + milliseconds(1);
  // Chunk 0's contribution was lost: three later results ask (fast), and
  // the switch says it lacks it.
  for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_EQ(w.Complete(seq, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, due, 12), 1u);
  EXPECT_TRUE(due[0].query) << "fast: asks";
  EXPECT_TRUE(w.Missing(0, t));
  ASSERT_EQ(w.TakeDue(t, due, 12), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_FALSE(due[0].query) << "missing: the data";
  // The resend is lost too. Two later results: nothing yet.
  t += milliseconds(1);
  ASSERT_EQ(w.Complete(4, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.Complete(5, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t, due, 12), 0u) << "two results since the resend";
  ASSERT_EQ(w.Complete(6, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, due, 12), 1u) << "three: asked now, not a probe interval later";
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_TRUE(due[0].query);
  // Once per question: three more results ask again only about that one.
  EXPECT_TRUE(w.Missing(0, t));
  ASSERT_EQ(w.TakeDue(t, due, 12), 1u);
  EXPECT_FALSE(due[0].query);
  for (uint32_t seq = 7; seq <= 9; ++seq) ASSERT_EQ(w.Complete(seq, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t, due, 12), 1u);
  EXPECT_TRUE(due[0].query);
  ASSERT_EQ(w.Complete(10, t, &k, &rtt), Match::kNew);
  EXPECT_EQ(w.TakeDue(t, due, 12), 0u) << "one result since the question";
}

// The questions about a held chunk back off up to its timeout (a second),
// so a result lost once the slot completed late waits up to that long for
// the next one, and the sender's progress timeout may come first, with the
// result at the switch (seed 410396: the question due 4 ms after the rank
// gave up). AskBy, a probe interval before that, asks it once more in time,
// once, and only about a held chunk at the watermark due later.
TEST(SendWindowTest, AHeldChunkIsAskedOnceMoreBeforeTheSenderGivesUp) {
  SendWindow w;
  w.Reset(0, 1, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(1));
  const Clock::time_point t0{};
  w.MarkSent(t0, milliseconds(10));
  SendWindow::Due due[8];
  // Questions answered "held": the timeout backs off, and the waits
  // double, up to a second.
  Clock::time_point t = t0;
  for (; t < t0 + milliseconds(2812); t += milliseconds(1)) {
    if (w.TakeDue(t, due, 8) == 0) continue;
    ASSERT_TRUE(due[0].query);
    ASSERT_TRUE(w.Held(0, t));
  }
  EXPECT_EQ(w.TimeoutOf(0), milliseconds(1000));
  ASSERT_TRUE(w.Held(0, t));  // next question due at 3812 ms
  const Clock::time_point last_call = t0 + milliseconds(3757);
  EXPECT_EQ(w.TakeDue(last_call, due, 8), 0u) << "backed off past the sender's give-up";
  w.AskBy(t0 + milliseconds(3900));
  EXPECT_EQ(w.TakeDue(last_call, due, 8), 0u) << "due before that anyway";
  w.AskBy(last_call);
  EXPECT_LE(w.NextDue(), last_call);
  ASSERT_EQ(w.TakeDue(last_call, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_TRUE(due[0].query) << "held: a question, not the data";
  w.AskBy(last_call);
  EXPECT_EQ(w.TakeDue(last_call + microseconds(500), due, 8), 0u) << "once per give-up time";

  // Not held: its own timer decides.
  SendWindow u;
  u.Reset(0, 1, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  u.SetProbe(milliseconds(5));
  u.MarkSent(t0, milliseconds(10));
  u.AskBy(t0 + milliseconds(1));
  EXPECT_EQ(u.TakeDue(t0 + milliseconds(1), due, 8), 0u) << "not held";
  // Without queries, nothing.
  SendWindow v;
  v.Reset(0, 1, Params(8));
  v.MarkSent(t0, kTimeout);
  ASSERT_TRUE(v.Held(0, t0));
  v.AskBy(t0 + milliseconds(1));
  EXPECT_EQ(v.TakeDue(t0 + milliseconds(1), due, 8), 0u) << "no queries";
}

// A chunk refused for now (NACK slot_busy) goes again soon; when that resend
// or its NACK is lost, the chunk waits its timeout, backed off by earlier
// losses up to a second, past the sender's give-up while the slot that
// refused it may be free by then (seed 270018). AskBy asks it once more in
// time, once; not while its data is still to go again soon.
TEST(SendWindowTest, ARefusedChunkWhoseResendWentUnansweredIsAskedBeforeTheSenderGivesUp) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(1));
  const Clock::time_point t0{};
  // Chunk 0 of 8 (not a tail chunk: due at its timeout), sent with a
  // timeout backed off while nothing moved.
  w.MarkSent(t0, milliseconds(1000));
  SendWindow::Due due[8];
  ASSERT_TRUE(w.Refused(0, t0 + milliseconds(2)));
  w.AskBy(t0 + milliseconds(1));
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1), due, 8), 0u) << "its data goes again soon anyway";
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 8), 1u);
  EXPECT_FALSE(due[0].query);
  EXPECT_TRUE(due[0].refused);
  // That resend goes unanswered: next due a second later.
  const Clock::time_point last_call = t0 + milliseconds(500);
  EXPECT_EQ(w.TakeDue(last_call, due, 8), 0u) << "waits its timeout";
  w.AskBy(last_call);
  EXPECT_LE(w.NextDue(), last_call);
  ASSERT_EQ(w.TakeDue(last_call, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_TRUE(due[0].query) << "a question: the switch says whether it lacks the data";
  w.AskBy(last_call);
  EXPECT_EQ(w.TakeDue(last_call + microseconds(500), due, 8), 0u) << "once per give-up time";

  // The switch's later word ends it: "held" is AskBy's own case, "missing"
  // sends the data at once, and a chunk never refused waits its timer.
  SendWindow u;
  u.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  u.SetProbe(milliseconds(1));
  u.MarkSent(t0, milliseconds(1000));
  ASSERT_TRUE(u.Refused(0, t0));
  ASSERT_EQ(u.TakeDue(t0, due, 8), 1u);
  ASSERT_TRUE(u.Missing(0, t0 + milliseconds(1)));
  ASSERT_EQ(u.TakeDue(t0 + milliseconds(1), due, 8), 1u);
  EXPECT_FALSE(due[0].query);
  u.AskBy(t0 + microseconds(1500));
  EXPECT_EQ(u.TakeDue(t0 + microseconds(1500), due, 8), 0u) << "no longer refused";
}

// Without queries a held chunk's data is not resent on later results.
TEST(SendWindowTest, LaterResultsAfterHeldResendNothingWithoutQueries) {
  SendWindow w;
  w.Reset(0, 6, Params(8));
  const Clock::time_point t0{};
  for (int i = 0; i < 6; ++i) w.MarkSent(t0, kTimeout);
  EXPECT_TRUE(w.Held(0, t0));
  uint32_t k;
  Clock::duration rtt;
  for (uint32_t seq = 1; seq <= 4; ++seq) ASSERT_EQ(w.Complete(seq, t0, &k, &rtt), Match::kNew);
  SendWindow::Due due[8];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1), due, 8), 0u);
}

// With queries: a timeout asks first; "held" answers it (the next timeout
// asks again), "missing" makes the data due at once without backing off,
// and two questions in a row left unanswered send the data. A fast
// retransmit asks too; a refusal sends the data.
TEST(SendWindowTest, ATimeoutQueriesFirstAndTheAnswerSaysWhetherTheDataGoes) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0, kTimeout);
  SendWindow::Due due[8];
  Clock::time_point t = t0 + kTimeout;
  ASSERT_EQ(w.TakeDue(t, due, 8), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(due[i].query) << i;
  EXPECT_TRUE(w.Held(0, t + milliseconds(1)));     // held: asks again after its timeout
  EXPECT_TRUE(w.Missing(1, t + milliseconds(1)));  // missing: its data at once
  EXPECT_TRUE(w.Refused(2, t + milliseconds(1)));  // refused: its data soon
  // Chunk 3's question goes unanswered.
  ASSERT_EQ(w.TakeDue(t + milliseconds(1), due, 8), 2u);
  EXPECT_EQ(due[0].chunk, 1u);
  EXPECT_FALSE(due[0].query);
  EXPECT_EQ(w.TimeoutOf(1), 2 * kTimeout) << "the query backed off, the resend did not";
  EXPECT_EQ(due[1].chunk, 2u);
  EXPECT_FALSE(due[1].query);
  t += 2 * kTimeout;  // every chunk's 20 ms timeout has passed
  ASSERT_EQ(w.TakeDue(t + milliseconds(1), due, 8), 4u);
  EXPECT_TRUE(due[0].query) << "held: its result may be lost, so it asks again";
  EXPECT_TRUE(due[1].query) << "resent: asks before it resends again";
  EXPECT_TRUE(due[2].query);
  EXPECT_EQ(due[3].chunk, 3u);
  EXPECT_TRUE(due[3].query) << "one question unanswered: asks again";
  // Chunk 0's question, asked with chunk 3's, is answered; chunk 3's is
  // not: it was lost.
  EXPECT_TRUE(w.Held(0, t + milliseconds(2)));
  t += 4 * kTimeout;
  const uint32_t n = w.TakeDue(t + milliseconds(1), due, 8);
  ASSERT_GE(n, 1u);
  EXPECT_EQ(due[n - 1].chunk, 3u);
  EXPECT_FALSE(due[n - 1].query) << "two questions unanswered: the data goes";
  // A fast retransmit asks too (the chunk may wait for another member, or
  // only its result may be lost): chunks 0..3 sent, 1..3 answered.
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  for (int i = 0; i < 4; ++i) w.MarkSent(t, kTimeout);
  uint32_t k;
  Clock::duration rtt;
  for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_EQ(w.Complete(seq, t, &k, &rtt), Match::kNew);
  ASSERT_EQ(w.TakeDue(t + milliseconds(1), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_TRUE(due[0].query);
  EXPECT_FALSE(w.Missing(1, t)) << "answered";
  EXPECT_FALSE(w.Missing(8, t)) << "not of this transfer";
}

// Once a chunk is in recovery, every question about it (a QUERY, data resent
// on "missing" or a fast retransmit, the wait after "held") is followed up
// after the probe interval, not after the chunk's timeout: a recovery step
// lost again costs a probe interval.
TEST(SendWindowTest, QuestionsAboutAChunkAreFollowedUpAfterTheProbeInterval) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(2));
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) w.MarkSent(t0, kTimeout);  // due at 10 ms
  SendWindow::Due due[8];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(9), due, 8), 0u) << "the first timeout keeps its length";
  // Chunk 0's contribution was lost: the switch says so unasked (a gap).
  EXPECT_TRUE(w.Missing(0, t0 + milliseconds(1)));
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(1), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_FALSE(due[0].query) << "missing: the data";
  // Chunks 2..4 answered: chunks 0 (its resend may be lost too) and 1 are
  // behind, and asked after.
  uint32_t k;
  Clock::duration rtt;
  for (uint32_t seq = 2; seq <= 4; ++seq) {
    ASSERT_EQ(w.Complete(seq, t0 + milliseconds(2), &k, &rtt), Match::kNew);
  }
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 8), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(due[i].chunk, static_cast<uint32_t>(i));
    EXPECT_TRUE(due[i].query) << "fast: asks";
  }
  // Both questions go unanswered: asked again one probe later, not at 10 ms.
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(3), due, 8), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(4), due, 8), 2u);
  EXPECT_TRUE(due[0].query);
  EXPECT_TRUE(due[1].query);
  // Chunk 1 is held: it waits one probe, and asks again.
  EXPECT_TRUE(w.Held(1, t0 + milliseconds(4)));
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(5), due, 8), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(6), due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 1u);
  EXPECT_TRUE(due[0].query) << "held: asks after a probe, not a timeout";
  // Chunk 1's question, asked after chunk 0's, is answered; chunk 0's is
  // not: it was lost.
  EXPECT_TRUE(w.Held(1, t0 + milliseconds(7)));
  // Chunk 0's second question went unanswered too: its data goes once a
  // whole timeout has passed without an answer (a switch descheduled for a
  // few round trips is no loss), not after a probe.
  const Clock::time_point silence = t0 + milliseconds(4) + w.TimeoutOf(0);
  for (Clock::time_point t = t0 + milliseconds(7); t < silence; t += milliseconds(1)) {
    const uint32_t n = w.TakeDue(t, due, 8);
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(due[i].chunk, 1u) << "only the held chunk asks";
  }
  ASSERT_GE(w.TakeDue(silence, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_FALSE(due[0].query) << "two questions unanswered: the data";
  // A probe longer than the chunk's timeout is cut to it.
  uint32_t k0;
  ASSERT_EQ(w.Complete(0, silence, &k0, &rtt), Match::kNew);
  w.SetProbe(milliseconds(500));
  EXPECT_TRUE(w.Held(1, silence));
  const Clock::time_point timeout = silence + w.TimeoutOf(1);
  EXPECT_EQ(w.TakeDue(timeout - milliseconds(1), due, 8), 0u);
  ASSERT_EQ(w.TakeDue(timeout, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 1u);
}

// Once the switch said it holds a chunk's contribution, questions about it
// left unanswered (a switch descheduled on a loaded host, answers lost) ask
// again, at growing intervals, and never send the data: the switch has it.
// Its word that it lacks the contribution (a restart, a stale slot) does.
// A chunk the switch keeps answering "held" (a straggler holds its slot for
// seconds) is asked after at doubling intervals, from a probe up to its
// timeout (which each question backs off), not every probe. "Missing"
// starts over.
TEST(SendWindowTest, QuestionsAboutAHeldChunkThinOutToItsTimeout) {
  SendWindow w;
  w.Reset(0, 1, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(microseconds(100));
  const Clock::time_point t0{};
  w.MarkSent(t0, milliseconds(5));
  SendWindow::Due due[8];
  Clock::time_point t = t0 + microseconds(100);
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  std::vector<Clock::duration> waits;
  for (int held = 0; held < 10; ++held) {
    ASSERT_TRUE(w.Held(0, t));
    const Clock::time_point asked = t;
    uint32_t n = 0;
    while (n == 0) {
      t += microseconds(10);
      n = w.TakeDue(t, due, 8);
    }
    EXPECT_TRUE(due[0].query);
    waits.push_back(t - asked);
  }
  EXPECT_EQ(waits[0], microseconds(100)) << "the first after a probe";
  EXPECT_EQ(waits[1], microseconds(200));
  EXPECT_EQ(waits[2], microseconds(400));
  for (size_t i = 1; i < waits.size(); ++i) EXPECT_GE(waits[i], waits[i - 1]) << i;
  EXPECT_GE(waits[9], milliseconds(5)) << "the chunk's timeout, backed off by its questions";
  EXPECT_LE(waits[9], milliseconds(1000)) << "at most the largest timeout";
  // The switch lacks it after all: the data goes, and questions start over.
  ASSERT_TRUE(w.Missing(0, t));
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  EXPECT_FALSE(due[0].query);
  ASSERT_TRUE(w.Held(0, t));
  const Clock::time_point asked = t;
  uint32_t n = 0;
  while (n == 0) {
    t += microseconds(10);
    n = w.TakeDue(t, due, 8);
  }
  EXPECT_EQ(t - asked, microseconds(100));
}

TEST(SendWindowTest, AHeldChunksDataGoesAgainOnlyWhenTheSwitchSaysItIsMissing) {
  SendWindow w;
  w.Reset(0, 1, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(2));
  const Clock::time_point t0{};
  w.MarkSent(t0, kTimeout);
  SendWindow::Due due[8];
  Clock::time_point t = t0 + milliseconds(2);  // a one-chunk transfer is all tail
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  EXPECT_TRUE(due[0].query);
  EXPECT_TRUE(w.Held(0, t + milliseconds(1)));
  t += milliseconds(1);
  // The next question about the chunk: when it is due, and what it is.
  const auto next_question = [&](Clock::duration* wait) {
    const Clock::time_point from = t;
    uint32_t n = 0;
    while (n == 0 && t < from + kTimeout * 200) {
      t += microseconds(250);
      n = w.TakeDue(t, due, 8);
    }
    *wait = t - from;
    return n;
  };
  Clock::duration wait{}, last_wait{};
  for (int question = 0; question < 6; ++question) {
    ASSERT_EQ(next_question(&wait), 1u);
    EXPECT_GE(wait, last_wait) << "question " << question << ": the waits do not shrink";
    EXPECT_TRUE(due[0].query) << "question " << question << " after \"held\", none answered";
    last_wait = wait;
  }
  EXPECT_GT(last_wait, milliseconds(2)) << "unanswered questions back off";
  EXPECT_TRUE(w.Missing(0, t));
  ASSERT_EQ(w.TakeDue(t, due, 8), 1u);
  EXPECT_FALSE(due[0].query) << "missing: the data";
  // Held no more: its next questions left unanswered send the data again.
  // Held no more, and no other question of the rank answered: its
  // questions left unanswered ask on (ASilentSwitch... below).
  for (int question = 0; question < 4; ++question) {
    ASSERT_EQ(next_question(&wait), 1u);
    EXPECT_TRUE(due[0].query) << "question " << question << " after \"missing\"";
  }
}

// Questions left unanswered send the data again only once the switch
// answers a question the rank asked at the same time or later. A switch
// that answers none is stalled (a loaded host) or gone: it is asked on, at
// the backed-off timeout. Results do not count: another member completes a
// slot whether or not the switch reads this rank.
TEST(SendWindowTest, ASilentSwitchIsAskedOnAndTheDataWaitsForItsNextAnswer) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(2));
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0, kTimeout);
  SendWindow::Due due[8];
  Clock::time_point t = t0;
  // Moves the clock on until something is due (2 s at most): how many.
  const auto next_due = [&] {
    const Clock::time_point from = t;
    uint32_t n = 0;
    while (n == 0 && t < from + seconds(2)) {
      t += microseconds(250);
      n = w.TakeDue(t, due, 8);
    }
    return n;
  };
  Clock::duration last_wait{};
  for (int question = 0; question < 6; ++question) {
    const Clock::time_point from = t;
    ASSERT_EQ(next_due(), 4u) << "question " << question;
    for (uint32_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(due[i].query) << "question " << question << ", chunk " << i << ": the switch is silent";
    }
    if (question >= 2) {
      EXPECT_GE(t - from, last_wait) << "question " << question;
    }
    last_wait = t - from;
  }
  EXPECT_GE(last_wait, 8 * kTimeout) << "the questions back off";
  // A result for chunk 3 proves nothing: the others ask on.
  uint32_t k;
  Clock::duration rtt;
  ASSERT_EQ(w.Complete(3, t + microseconds(100), &k, &rtt), Match::kNew);
  uint32_t last_asked = 0;
  uint32_t asked = 0;
  for (uint32_t n; asked < 3 && (n = next_due()) > 0; asked += n) {
    for (uint32_t i = 0; i < n; ++i) {
      EXPECT_TRUE(due[i].query) << "chunk " << due[i].chunk;
      last_asked = due[i].chunk;
    }
  }
  EXPECT_EQ(asked, 3u) << "chunks 0, 1 and 2";
  // The switch answers the question asked last: the others' were lost, and
  // their data goes.
  EXPECT_TRUE(w.Held(last_asked, t + milliseconds(1)));
  uint32_t resent = 0;
  for (uint32_t n; resent < 2 && (n = next_due()) > 0;) {
    for (uint32_t i = 0; i < n; ++i) {
      if (due[i].chunk == last_asked) {
        EXPECT_TRUE(due[i].query) << "held: asks";
      } else {
        EXPECT_FALSE(due[i].query)
            << "chunk " << due[i].chunk << ": unanswered while the switch answers: the data";
        ++resent;
      }
    }
  }
  EXPECT_EQ(resent, 2u) << "the two chunks other than " << last_asked;
}

// The last three chunks of a transfer have too few after them for a fast
// retransmit: they are asked after one probe interval from their send, the
// others after their timeout. A one-chunk transfer is all tail.
TEST(SendWindowTest, TheTailOfATransferIsAskedAfterOneProbe) {
  SendWindow w;
  w.Reset(0, 5, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(2));
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) w.MarkSent(t0, kTimeout);
  SendWindow::Due due[8];
  EXPECT_EQ(w.TakeDue(t0 + milliseconds(1), due, 8), 0u);
  ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 8), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(due[i].chunk, 2 + i);
    EXPECT_TRUE(due[i].query);
  }
  EXPECT_EQ(w.TakeDue(t0 + kTimeout - milliseconds(1), due, 8), 3u) << "their questions unanswered";
  ASSERT_EQ(w.TakeDue(t0 + kTimeout, due, 8), 2u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(due[1].chunk, 1u);
  w.Reset(7, 1, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.MarkSent(t0, kTimeout);
  EXPECT_EQ(w.NextDue(), t0 + milliseconds(2));
}

// A window of three chunks or fewer never has three later chunks answered
// while a chunk is out: no fast retransmit can reveal a loss, and every chunk,
// not only the transfer's last three, is asked after one probe interval. A
// window of four keeps its timeouts outside the tail.
TEST(SendWindowTest, EveryChunkOfANarrowWindowIsAskedAfterOneProbe) {
  const Clock::time_point t0{};
  SendWindow::Due due[8];
  for (const uint32_t window : {1u, 2u, 3u}) {
    SendWindow w;
    w.Reset(0, 100, {.window = window, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
    w.SetProbe(milliseconds(2));
    while (w.CanSend()) w.MarkSent(t0, kTimeout);
    // The first is answered; the next chunk, sent then, is asked after as
    // soon as the others, a probe interval after its send.
    const Clock::time_point t1 = t0 + milliseconds(1);
    uint32_t k = 0;
    Clock::duration rtt;
    ASSERT_EQ(w.Complete(0, t1, &k, &rtt), Match::kNew);
    ASSERT_TRUE(w.CanSend());
    EXPECT_EQ(w.MarkSent(t1, kTimeout), window);
    EXPECT_EQ(w.TakeDue(t0 + milliseconds(2) - microseconds(1), due, 8), 0u) << "window " << window;
    ASSERT_EQ(w.TakeDue(t0 + milliseconds(2), due, 8), window - 1) << "window " << window;
    for (uint32_t i = 0; i + 1 < window; ++i) {
      EXPECT_EQ(due[i].chunk, 1 + i);
      EXPECT_TRUE(due[i].query);
    }
    ASSERT_EQ(w.TakeDue(t1 + milliseconds(2), due, 8), 1u) << "window " << window;
    EXPECT_EQ(due[0].chunk, window);
    EXPECT_TRUE(due[0].query);
  }
  SendWindow w;
  w.Reset(0, 100, {.window = 4, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  w.SetProbe(milliseconds(2));
  while (w.CanSend()) w.MarkSent(t0, kTimeout);
  EXPECT_EQ(w.TakeDue(t0 + kTimeout - milliseconds(1), due, 8), 0u);
  EXPECT_EQ(w.TakeDue(t0 + kTimeout, due, 8), 4u);
}

// "missing" makes the data due at once; three later results do not turn it
// back into a question.
TEST(SendWindowTest, AFastRetransmitLeavesAMissingChunksDataDue) {
  SendWindow w;
  w.Reset(0, 8, {.window = 8, .max_timeout = milliseconds(1000), .backoff = 2.0, .query = true});
  const Clock::time_point t0{};
  for (int i = 0; i < 4; ++i) w.MarkSent(t0, kTimeout);
  EXPECT_TRUE(w.Missing(0, t0));
  uint32_t k;
  Clock::duration rtt;
  for (uint32_t seq = 1; seq <= 3; ++seq) ASSERT_EQ(w.Complete(seq, t0, &k, &rtt), Match::kNew);
  SendWindow::Due due[8];
  ASSERT_EQ(w.TakeDue(t0, due, 8), 1u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_FALSE(due[0].query);
}

TEST(SendWindowTest, TakeDueHandsOutAtMostMaxAndKeepsTheRestDue) {
  SendWindow w;
  w.Reset(0, 5, Params(5));
  const Clock::time_point t0{};
  for (int i = 0; i < 5; ++i) w.MarkSent(t0, kTimeout);
  uint32_t k;
  ASSERT_EQ(Complete(w, 1, &k), Match::kNew);
  SendWindow::Due due[2];
  const Clock::time_point t = t0 + kTimeout;
  ASSERT_EQ(w.TakeDue(t, due, 2), 2u);
  EXPECT_EQ(due[0].chunk, 0u);
  EXPECT_EQ(due[1].chunk, 2u);      // 1 was answered
  EXPECT_EQ(w.NextDue(), t);  // 3 and 4 are still due
  ASSERT_EQ(w.TakeDue(t, due, 2), 2u);
  EXPECT_EQ(due[0].chunk, 3u);
  EXPECT_EQ(due[1].chunk, 4u);
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
