#include "aggregator/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace aggswitch::aggregator {
namespace {

// Calls Advance once and returns the handles it fired.
std::vector<uint32_t> Fire(TimerWheel& wheel, uint64_t now, uint32_t budget = 1024) {
  std::vector<uint32_t> out(budget);
  const uint32_t n = wheel.Advance(now, budget, out.data());
  EXPECT_LE(n, budget);
  out.resize(n);
  return out;
}

TEST(TimerWheelTest, FiresAtTheDeadlineAndNeverBefore) {
  // 8 buckets of 16 cycles: one turn is 128 cycles.
  TimerWheel wheel(/*capacity=*/4, /*buckets=*/8, /*tick_shift=*/4, /*now_tsc=*/1000);
  wheel.Arm(0, 1100);
  wheel.Arm(1, 1105);  // the same tick as 1100, later in it
  wheel.Arm(2, 1000);  // now: due at once
  EXPECT_EQ(wheel.size(), 3u);
  EXPECT_TRUE(wheel.armed(0));
  EXPECT_EQ(wheel.deadline(1), 1105u);
  std::vector<std::pair<uint64_t, uint32_t>> fired;
  for (uint64_t now = 1000; now <= 1200; ++now) {
    for (uint32_t h : Fire(wheel, now)) fired.emplace_back(now, h);
  }
  const std::vector<std::pair<uint64_t, uint32_t>> expected = {{1000, 2}, {1100, 0}, {1105, 1}};
  EXPECT_EQ(fired, expected);
  EXPECT_EQ(wheel.size(), 0u);
  EXPECT_FALSE(wheel.armed(0));
}

TEST(TimerWheelTest, DeadlineInThePastFiresOnTheNextAdvance) {
  TimerWheel wheel(4, 8, 4, 1000);
  EXPECT_TRUE(Fire(wheel, 5000).empty());
  wheel.Arm(0, 10);    // long past
  wheel.Arm(1, 4990);  // the wheel's current tick, before now
  wheel.Arm(2, 5000);  // exactly now
  wheel.Arm(3, 5001);  // not yet
  std::vector<uint32_t> f = Fire(wheel, 5000);
  std::sort(f.begin(), f.end());
  EXPECT_EQ(f, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(Fire(wheel, 5001), (std::vector<uint32_t>{3}));
}

TEST(TimerWheelTest, CancelDisarms) {
  TimerWheel wheel(4, 8, 4, 0);
  wheel.Cancel(1);  // not armed: nothing happens
  EXPECT_EQ(wheel.size(), 0u);
  wheel.Arm(1, 50);
  wheel.Arm(2, 50);
  wheel.Cancel(1);
  wheel.Cancel(1);
  EXPECT_FALSE(wheel.armed(1));
  EXPECT_TRUE(wheel.armed(2));
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(Fire(wheel, 1000), (std::vector<uint32_t>{2}));
  EXPECT_TRUE(Fire(wheel, 2000).empty());
  // Out-of-range handles are ignored.
  wheel.Arm(4, 10);
  wheel.Cancel(4);
  EXPECT_FALSE(wheel.armed(4));
  EXPECT_EQ(wheel.size(), 0u);
}

TEST(TimerWheelTest, RearmMovesTheTimer) {
  TimerWheel wheel(4, 8, 4, 0);
  wheel.Arm(0, 100);
  wheel.Arm(0, 300);  // later, in another bucket
  EXPECT_EQ(wheel.size(), 1u);
  EXPECT_EQ(wheel.deadline(0), 300u);
  EXPECT_TRUE(Fire(wheel, 299).empty());
  EXPECT_EQ(Fire(wheel, 300), (std::vector<uint32_t>{0}));
  EXPECT_TRUE(Fire(wheel, 1000).empty());

  wheel.Arm(1, 2000);
  wheel.Arm(1, 1500);  // earlier
  EXPECT_TRUE(Fire(wheel, 1499).empty());
  EXPECT_EQ(Fire(wheel, 1500), (std::vector<uint32_t>{1}));
  EXPECT_TRUE(Fire(wheel, 2000).empty());

  // Re-armed after firing: a fresh timer.
  wheel.Arm(1, 2100);
  EXPECT_EQ(Fire(wheel, 2100), (std::vector<uint32_t>{1}));
}

TEST(TimerWheelTest, ManyTimersInOneBucketDrainOverSeveralCalls) {
  constexpr uint32_t kTimers = 100;
  constexpr uint32_t kBudget = 7;
  TimerWheel wheel(kTimers + 1, 8, 4, 0);
  for (uint32_t h = 0; h < kTimers; ++h) wheel.Arm(h, 40 + h % 8);  // all in tick 2
  // A later bucket, also due.
  wheel.Arm(kTimers, 60);
  std::set<uint32_t> seen;
  uint32_t calls = 0;
  for (;;) {
    ++calls;
    const std::vector<uint32_t> f = Fire(wheel, 100, kBudget);
    for (uint32_t h : f) EXPECT_TRUE(seen.insert(h).second) << "fired twice: " << h;
    if (f.size() < kBudget) break;
    ASSERT_LT(calls, 100u);
  }
  EXPECT_EQ(calls, (kTimers + 1) / kBudget + 1);
  EXPECT_EQ(seen.size(), kTimers + 1);
  EXPECT_EQ(wheel.size(), 0u);
  // Within a bucket, timers fire in the order they were armed.
  TimerWheel fifo(kTimers, 8, 4, 0);
  for (uint32_t h = 0; h < kTimers; ++h) fifo.Arm(kTimers - 1 - h, 40);
  std::vector<uint32_t> order;
  while (order.size() < kTimers) {
    const std::vector<uint32_t> f = Fire(fifo, 100, kBudget);
    ASSERT_FALSE(f.empty());
    order.insert(order.end(), f.begin(), f.end());
  }
  for (uint32_t i = 0; i < kTimers; ++i) EXPECT_EQ(order[i], kTimers - 1 - i);
}

TEST(TimerWheelTest, BudgetStopsMidBucketAndNothingFiresEarly) {
  TimerWheel wheel(20, 8, 4, 0);
  // Bucket of tick 3 (48..63): due ones mixed with one a turn later.
  for (uint32_t h = 0; h < 10; ++h) wheel.Arm(h, 50);
  // The same bucket, next turn.
  wheel.Arm(10, 50 + 128);
  for (uint32_t h = 11; h < 15; ++h) wheel.Arm(h, 70);  // tick 4
  std::set<uint32_t> seen;
  for (int i = 0; i < 10; ++i) {
    for (uint32_t h : Fire(wheel, 100, 3)) {
      EXPECT_NE(h, 10u);
      seen.insert(h);
    }
  }
  EXPECT_EQ(seen.size(), 14u);
  EXPECT_TRUE(wheel.armed(10));
  EXPECT_TRUE(Fire(wheel, 177).empty());
  EXPECT_EQ(Fire(wheel, 178), (std::vector<uint32_t>{10}));
}

TEST(TimerWheelTest, DeadlinesSeveralTurnsAhead) {
  // One turn is 8 * 16 = 128 cycles.
  TimerWheel wheel(8, 8, 4, 0);
  const std::vector<uint64_t> deadlines = {3,    3 + 128,       3 + 5 * 128, 3 + 5 * 128 + 1,
                                           1000, 7 * 128 + 127, 9 * 128,     40 * 128 + 5};
  for (uint32_t h = 0; h < deadlines.size(); ++h) wheel.Arm(h, deadlines[h]);
  std::map<uint32_t, uint64_t> fired_at;
  // Step by various amounts smaller than a turn, so the wheel passes every
  // bucket several times before the later deadlines.
  const uint64_t steps[] = {1, 3, 16, 17, 50, 127};
  uint64_t now = 0;
  for (int i = 0; now < 41 * 128; ++i) {
    now += steps[i % 6];
    for (uint32_t h : Fire(wheel, now)) {
      EXPECT_TRUE(fired_at.emplace(h, now).second);
      EXPECT_GE(now, deadlines[h]);
    }
  }
  ASSERT_EQ(fired_at.size(), deadlines.size());
  // Each fired on the first Advance at or after its deadline.
  uint64_t prev = 0;
  now = 0;
  for (int i = 0; now < 41 * 128; ++i) {
    prev = now;
    now += steps[i % 6];
    for (uint32_t h = 0; h < deadlines.size(); ++h) {
      if (deadlines[h] > prev && deadlines[h] <= now) {
        EXPECT_EQ(fired_at[h], now) << h;
      }
    }
  }
}

TEST(TimerWheelTest, LongPauseFiresEverythingDueInBoundedCalls) {
  constexpr uint32_t kTimers = 1000;
  constexpr uint32_t kBudget = 64;
  // 16 buckets of 16 cycles: one turn is 256 cycles.
  TimerWheel wheel(kTimers, 16, 4, 0);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> deadline(kTimers);
  for (uint32_t h = 0; h < kTimers; ++h) {
    deadline[h] = rng() % (200 * 256);  // up to 200 turns ahead
    wheel.Arm(h, deadline[h]);
  }
  // A pause of ~1000 turns: everything due. ceil(1000 / 64) = 16 full calls
  // and one that finds nothing more.
  const uint64_t now = 1000 * 256 + 3;
  uint32_t calls = 0;
  std::set<uint32_t> seen;
  for (;;) {
    const std::vector<uint32_t> f = Fire(wheel, now, kBudget);
    ++calls;
    seen.insert(f.begin(), f.end());
    if (f.size() < kBudget) break;
    ASSERT_LE(calls, kTimers / kBudget + 1);
  }
  EXPECT_EQ(calls, kTimers / kBudget + 1);
  EXPECT_EQ(seen.size(), kTimers);
  EXPECT_EQ(wheel.size(), 0u);

  // A pause that leaves half the timers in the future: those stay armed and
  // fire on time afterwards, although the wheel skipped ahead.
  TimerWheel half(kTimers, 16, 4, 0);
  for (uint32_t h = 0; h < kTimers; ++h) half.Arm(h, deadline[h]);
  const uint64_t mid = 100 * 256;
  uint32_t due = 0;
  for (uint32_t h = 0; h < kTimers; ++h) due += deadline[h] <= mid;
  seen.clear();
  // Advance in the middle of the pause too: budget runs out, then a second jump.
  for (uint32_t h : Fire(half, 50 * 256, kBudget)) {
    EXPECT_LE(deadline[h], 50u * 256);
    seen.insert(h);
  }
  for (calls = 0; calls < kTimers / kBudget + 2; ++calls) {
    const std::vector<uint32_t> f = Fire(half, mid, kBudget);
    for (uint32_t h : f) {
      EXPECT_LE(deadline[h], mid);
      seen.insert(h);
    }
    if (f.size() < kBudget) break;
  }
  EXPECT_EQ(seen.size(), due);
  EXPECT_EQ(half.size(), kTimers - due);
  for (uint64_t now2 = mid + 1; now2 < 200 * 256 + 97; now2 += 97) {
    for (uint32_t h : Fire(half, now2)) {
      EXPECT_LE(deadline[h], now2);
      EXPECT_GT(deadline[h], now2 - 97);
      seen.insert(h);
    }
  }
  EXPECT_EQ(seen.size(), kTimers);

  // One-cycle buckets and a pause of 2^40 ticks: a call that walked every
  // tick would never return; one turn (16 buckets) is all it may visit.
  TimerWheel fine(2, 16, 0, 0);
  fine.Arm(0, 5);
  fine.Arm(1, (1ull << 40) + 1);
  EXPECT_EQ(Fire(fine, 1ull << 40), (std::vector<uint32_t>{0}));
  EXPECT_TRUE(Fire(fine, 1ull << 40).empty());
  EXPECT_EQ(Fire(fine, (1ull << 40) + 1), (std::vector<uint32_t>{1}));
}

// Random operations against a reference model: a multimap deadline -> handle.
TEST(TimerWheelTest, RandomOperationsMatchAReferenceModel) {
  constexpr uint32_t kHandles = 64;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    const uint64_t start = rng() % 100000;
    // 16 buckets of 8 cycles: one turn is 128 cycles.
    TimerWheel wheel(kHandles, 16, 3, start);
    std::multimap<uint64_t, uint32_t> model;
    std::vector<std::multimap<uint64_t, uint32_t>::iterator> where(kHandles, model.end());
    uint64_t now = start;
    std::vector<uint32_t> out(kHandles);
    uint64_t total_fired = 0;
    for (int op = 0; op < 20000; ++op) {
      const uint32_t kind = rng() % 10;
      const uint32_t h = rng() % kHandles;
      if (kind < 4) {
        // Arm, from a little in the past to several turns ahead.
        const uint64_t d = now - std::min<uint64_t>(now, 20) + rng() % 1000;
        wheel.Arm(h, d);
        if (where[h] != model.end()) model.erase(where[h]);
        where[h] = model.emplace(d, h);
      } else if (kind < 5) {
        wheel.Cancel(h);
        if (where[h] != model.end()) model.erase(where[h]);
        where[h] = model.end();
      } else {
        // Advance: mostly small steps, sometimes a pause of several turns.
        const uint32_t r = rng() % 100;
        now += r < 70 ? rng() % 10 : (r < 95 ? rng() % 300 : rng() % 5000);
        const uint32_t budget = 1 + rng() % (rng() % 2 ? 4 : kHandles);
        const uint32_t n = wheel.Advance(now, budget, out.data());
        std::set<uint32_t> due;
        for (auto it = model.begin(); it != model.end() && it->first <= now; ++it) {
          due.insert(it->second);
        }
        ASSERT_EQ(n, std::min<size_t>(budget, due.size())) << "op " << op;
        std::set<uint32_t> fired(out.begin(), out.begin() + n);
        ASSERT_EQ(fired.size(), n) << "a handle fired twice";
        if (n == due.size()) {
          ASSERT_EQ(fired, due) << "op " << op;
        }
        for (uint32_t f : fired) {
          ASSERT_TRUE(due.count(f)) << "fired early or not armed: " << f;
          model.erase(where[f]);
          where[f] = model.end();
        }
        total_fired += n;
      }
      ASSERT_EQ(wheel.size(), model.size());
      ASSERT_EQ(wheel.armed(h), where[h] != model.end());
      if (where[h] != model.end()) {
        ASSERT_EQ(wheel.deadline(h), where[h]->first);
      }
    }
    EXPECT_GT(total_fired, 1000u);
  }
}

TEST(TimerWheelTest, BucketsRoundUpToAPowerOfTwo) {
  EXPECT_EQ(TimerWheel(1, 1000, 4, 0).buckets(), 1024u);
  EXPECT_EQ(TimerWheel(1, 1024, 4, 0).buckets(), 1024u);
  EXPECT_EQ(TimerWheel(1, 0, 4, 0).buckets(), 1u);
  // A one-bucket wheel still works: every Advance looks at all timers.
  TimerWheel one(3, 1, 4, 0);
  one.Arm(0, 30);
  one.Arm(1, 10);
  one.Arm(2, 5000);
  EXPECT_EQ(Fire(one, 20), (std::vector<uint32_t>{1}));
  EXPECT_EQ(Fire(one, 4999), (std::vector<uint32_t>{0}));
  EXPECT_EQ(Fire(one, 5000), (std::vector<uint32_t>{2}));
}

}  // namespace
}  // namespace aggswitch::aggregator
