#include "client/internal/retransmit_timer.h"

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

using std::chrono::milliseconds;
using std::chrono::microseconds;
using Clock = RetransmitTimer::Clock;

RetransmitTimer::Params Params() {
  RetransmitTimer::Params p;
  p.initial = milliseconds(20);
  p.min = milliseconds(2);
  p.max = milliseconds(500);
  return p;
}

TEST(RetransmitTimerTest, InitialUntilTheFirstSampleThenSrttPlusFourRttvar) {
  RetransmitTimer t(Params());
  EXPECT_FALSE(t.sampled());
  EXPECT_EQ(t.timeout(), milliseconds(20));
  t.OnResult(Clock::duration::zero());  // a resent chunk's result: no sample
  EXPECT_FALSE(t.sampled());
  t.OnResult(milliseconds(4));
  // First sample: SRTT = R, RTTVAR = R/2, RTO = R + 4 * R/2.
  EXPECT_EQ(t.srtt(), milliseconds(4));
  EXPECT_EQ(t.rttvar(), milliseconds(2));
  EXPECT_EQ(t.timeout(), milliseconds(12));
  // RTTVAR = 3/4 * 2 + 1/4 * |4 - 8| = 2.5; SRTT = 7/8 * 4 + 1/8 * 8 = 4.5.
  t.OnResult(milliseconds(8));
  EXPECT_EQ(t.rttvar(), microseconds(2500));
  EXPECT_EQ(t.srtt(), microseconds(4500));
  EXPECT_EQ(t.timeout(), microseconds(14500));
}

TEST(RetransmitTimerTest, SteadyRoundTripsConvergeToTheFloor) {
  RetransmitTimer t(Params());
  for (int i = 0; i < 200; ++i) t.OnResult(microseconds(300));
  EXPECT_EQ(t.srtt(), microseconds(300));
  EXPECT_LT(t.rttvar(), microseconds(1));
  EXPECT_EQ(t.timeout(), milliseconds(2)) << "never below the floor";
}

TEST(RetransmitTimerTest, NeverAboveTheCeiling) {
  RetransmitTimer t(Params());
  t.OnResult(milliseconds(400));  // RTO 400 + 4 * 200
  EXPECT_EQ(t.timeout(), milliseconds(500));
}

// The follow-up to a question about a chunk: two round trips, below the
// floor when the round trip is short, never past the timeout.
TEST(RetransmitTimerTest, TheProbeIsTwoRoundTripsWithoutTheFloorAndAtMostTheTimeout) {
  RetransmitTimer t(Params());
  EXPECT_EQ(t.probe(), milliseconds(20)) << "unmeasured: the timeout";
  for (int i = 0; i < 200; ++i) t.OnResult(microseconds(300));
  EXPECT_EQ(t.probe(), microseconds(600));
  EXPECT_EQ(t.timeout(), milliseconds(2));
  RetransmitTimer slow(Params());
  slow.OnResult(milliseconds(300));  // RTO 300 + 4 * 150, cut to 500
  EXPECT_EQ(slow.probe(), milliseconds(500));
}

}  // namespace
}  // namespace aggswitch::client::internal
