// Slot timers: a hashed timing wheel over one worker's slot indices
// (docs/stragglers.md, "Slot timers").
//
// The wheel holds at most one timer per handle 0..capacity-1 (the slot indices
// of the worker's SlotTable). Time is the TSC; bucket `b` holds the timers of
// every tick t with t % buckets == b, where tick = tsc >> tick_shift. The lists
// are intrusive and doubly linked (handle-sized arrays of next/prev indices,
// one sentinel node per bucket), so Arm and Cancel are O(1), and nothing is
// allocated after construction. A timer whose deadline lies more than one turn
// of the wheel ahead simply stays in its bucket when the wheel passes it early:
// Advance compares deadlines, not ticks, so nothing ever fires before its
// deadline.
//
//   TimerWheel wheel(/*capacity=*/1024, /*buckets=*/1024, /*tick_shift=*/18, rte_rdtsc());
//   wheel.Arm(slot_index, first_tsc + timeout_cycles);
//   ...
//   uint32_t expired[64];
//   const uint32_t n = wheel.Advance(rte_rdtsc(), 64, expired);  // once per poll
//   for (uint32_t i = 0; i < n; ++i) OnSlotTimeout(expired[i]);
//
// Bounds, per Advance call: at most `buckets` buckets are visited (after a long
// pause the wheel skips ahead to one turn before now: visiting every bucket
// once with "deadline <= now" fires everything due, so no timer is lost); at
// most `budget` handles fire, the rest wait for the next call, which resumes in
// the bucket where this one stopped. Each bucket keeps a lower bound of its
// deadlines, so a bucket with nothing due is skipped in O(1); scanning a bucket
// costs O(its length) (the timers of later turns in it are looked at and left).
// With a deadline distribution spread over less than one turn, a poll costs
// O(1 + buckets passed + expired).
//
// Thread safety: a TimerWheel is owned by one worker lcore; every method is
// [owner lcore] except the constructor [control] and size() [any].
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace aggswitch::aggregator {

class TimerWheel {
 public:
  // No handle (end of a list, not armed).
  static constexpr uint32_t kNone = UINT32_MAX;

  // `buckets` is rounded up to a power of two (at least 1); a bucket is
  // 2^tick_shift TSC cycles wide; `now_tsc` is where the wheel starts.
  // Allocates every list node. [control]
  TimerWheel(uint32_t capacity, uint32_t buckets, uint32_t tick_shift, uint64_t now_tsc);
  ~TimerWheel();
  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // Arms `handle` to fire at `deadline_tsc`; an armed handle is moved. A
  // deadline at or before the wheel's current time fires on the next Advance.
  // O(1). Out-of-range handles are ignored. [owner lcore]
  void Arm(uint32_t handle, uint64_t deadline_tsc);
  // Disarms `handle`; a no-op when it is not armed. O(1). [owner lcore]
  void Cancel(uint32_t handle);

  // Moves the wheel to `now_tsc` and writes to `expired` (room for `budget`)
  // the handles whose deadline is <= now_tsc, disarming them; returns how many
  // were written. Fewer than `budget` means nothing due is left. Visits at most
  // buckets() buckets. [owner lcore]
  uint32_t Advance(uint64_t now_tsc, uint32_t budget, uint32_t* expired);

  bool armed(uint32_t handle) const { return handle < capacity_ && nodes_[handle].next != kNone; }
  // The armed handle's deadline (TSC); meaningless when not armed. [owner lcore]
  uint64_t deadline(uint32_t handle) const {
    return handle < capacity_ ? nodes_[handle].deadline : 0;
  }
  // Armed timers. [any]
  uint32_t size() const { return armed_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }
  uint32_t buckets() const { return mask_ + 1; }
  uint32_t tick_shift() const { return tick_shift_; }

 private:
  // One list node. Handles are nodes 0..capacity-1; bucket b's sentinel is
  // node capacity+b, whose `deadline` is a lower bound of the deadlines in the
  // bucket (UINT64_MAX: none). A handle is armed iff its `next` is not kNone.
  struct Node {
    uint32_t next = kNone;
    uint32_t prev = kNone;
    uint64_t deadline = 0;
  };
  static_assert(sizeof(Node) == 16, "four nodes per cache line");

  void Unlink(uint32_t node);
  void AddArmed(int32_t delta) {
    armed_.store(armed_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }

  uint32_t capacity_;
  uint32_t mask_;  // buckets - 1
  uint32_t tick_shift_;
  // The first tick not yet known to be done: the next Advance starts there
  // (or one turn before its now, after a long pause). Never past the tick of
  // the last `now` given, so the current tick's bucket is looked at again.
  uint64_t next_tick_;
  std::unique_ptr<Node[]> nodes_;  // capacity + buckets
  // Single writer (the owner); relaxed loads elsewhere for metrics.
  std::atomic<uint32_t> armed_{0};
};

}  // namespace aggswitch::aggregator
