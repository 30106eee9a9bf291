#include "aggregator/timer_wheel.h"

namespace aggswitch::aggregator {
namespace {

uint32_t RoundUpPow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n && p < (1u << 31)) p <<= 1;
  return p;
}

}  // namespace

TimerWheel::TimerWheel(uint32_t capacity, uint32_t buckets, uint32_t tick_shift, uint64_t now_tsc)
    : capacity_(capacity),
      mask_(RoundUpPow2(buckets) - 1),
      tick_shift_(tick_shift < 63 ? tick_shift : 63),
      next_tick_(now_tsc >> tick_shift_) {
  const uint32_t n_buckets = mask_ + 1;
  nodes_ = std::make_unique<Node[]>(static_cast<size_t>(capacity_) + n_buckets);
  for (uint32_t b = 0; b < n_buckets; ++b) {
    Node& s = nodes_[capacity_ + b];
    s.next = s.prev = capacity_ + b;  // empty circular list
    s.deadline = UINT64_MAX;
  }
}

TimerWheel::~TimerWheel() = default;

void TimerWheel::Unlink(uint32_t node) {
  Node& n = nodes_[node];
  nodes_[n.prev].next = n.next;
  nodes_[n.next].prev = n.prev;
  n.next = n.prev = kNone;
}

void TimerWheel::Arm(uint32_t handle, uint64_t deadline_tsc) {
  if (handle >= capacity_) return;
  if (nodes_[handle].next != kNone) {
    Unlink(handle);
  } else {
    AddArmed(1);
  }
  // A deadline in a tick the wheel has passed goes into the next bucket it
  // visits; a later one into its own tick's bucket, however many turns ahead.
  uint64_t tick = deadline_tsc >> tick_shift_;
  if (tick < next_tick_) tick = next_tick_;
  const uint32_t sentinel = capacity_ + static_cast<uint32_t>(tick & mask_);
  Node& s = nodes_[sentinel];
  Node& n = nodes_[handle];
  n.deadline = deadline_tsc;
  // Append: within a bucket, timers fire in the order they were armed.
  n.next = sentinel;
  n.prev = s.prev;
  nodes_[s.prev].next = handle;
  s.prev = handle;
  if (deadline_tsc < s.deadline) s.deadline = deadline_tsc;
}

void TimerWheel::Cancel(uint32_t handle) {
  if (handle >= capacity_ || nodes_[handle].next == kNone) return;
  Unlink(handle);
  AddArmed(-1);
  // The bucket's lower bound stays: still a lower bound.
}

uint32_t TimerWheel::Advance(uint64_t now_tsc, uint32_t budget, uint32_t* expired) {
  if (budget == 0) return 0;
  uint64_t now_tick = now_tsc >> tick_shift_;
  // The TSC does not go backwards; if it did, look at the current bucket only.
  if (now_tick < next_tick_) now_tick = next_tick_;
  // After a pause of a turn or more, one turn ending at now visits every
  // bucket once, and a visit fires everything due in the bucket whatever its
  // tick: the ticks before that turn need no visit of their own.
  if (now_tick - next_tick_ > mask_) next_tick_ = now_tick - mask_;

  uint32_t n = 0;
  // At most buckets() iterations: next_tick_ .. now_tick spans <= mask_ + 1 ticks.
  for (uint64_t t = next_tick_;; ++t) {
    const uint32_t sentinel = capacity_ + static_cast<uint32_t>(t & mask_);
    Node& s = nodes_[sentinel];
    if (s.deadline <= now_tsc) {
      uint64_t rest_min = UINT64_MAX;
      // Bounded by the bucket's length (<= capacity): each node is looked at
      // once, and the ones that fire are unlinked.
      for (uint32_t h = s.next; h != sentinel;) {
        Node& node = nodes_[h];
        const uint32_t next = node.next;
        if (node.deadline <= now_tsc) {
          if (n == budget) {
            // Out of budget with this bucket unfinished: the next call starts
            // here. Its lower bound is left as it was (still a lower bound).
            next_tick_ = t;
            AddArmed(-static_cast<int32_t>(n));
            return n;
          }
          Unlink(h);
          expired[n++] = h;
        } else if (node.deadline < rest_min) {
          rest_min = node.deadline;
        }
        h = next;
      }
      s.deadline = rest_min;
    }
    if (t == now_tick) {
      next_tick_ = t;
      break;
    }
  }
  AddArmed(-static_cast<int32_t>(n));
  return n;
}

}  // namespace aggswitch::aggregator
