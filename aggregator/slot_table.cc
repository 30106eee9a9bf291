#include "aggregator/slot_table.h"

#include <cstring>
#include <new>

#include "aggregator/reduce.h"

namespace aggswitch::aggregator {

SlotTable::SlotTable(const SlotTableConfig& config)
    : config_(config),
      bitmap_words_((config.max_fan_in + 63u) / 64u),
      timers_(config.slots, config.timer_buckets, config.timer_tick_shift, 0) {
  using common::HugeRegion;
  const size_t n = config_.slots;
  const size_t fan_in = config_.max_fan_in;
  // Every array in one region on huge pages: a contribution to a cold slot
  // touches five of them.
  memory_ = HugeRegion::Allocate(
      HugeRegion::Footprint<Slot>(n) + HugeRegion::Footprint<uint64_t>(2 * n * bitmap_words_) +
      HugeRegion::Footprint<uint8_t>(n * 2 * config_.max_payload) +
      HugeRegion::Footprint<uint8_t>(n * config_.max_payload) +
      HugeRegion::Footprint<const uint8_t*>(n * fan_in) + HugeRegion::Footprint<void*>(n * fan_in) +
      HugeRegion::Footprint<uint16_t>(2 * n * config_.max_inherited) +
      HugeRegion::Footprint<uint32_t>(n * fan_in));
  slots_ = memory_.Carve<Slot>(n);
  // Each slot's bitmap, then the given-up chunk's of each (Slot::gone_bitmap_).
  uint64_t* bitmaps = memory_.Carve<uint64_t>(2 * n * bitmap_words_);
  uint8_t* acc = memory_.Carve<uint8_t>(n * 2 * config_.max_payload);
  uint8_t* results = memory_.Carve<uint8_t>(n * config_.max_payload);
  const uint8_t** held_payloads = memory_.Carve<const uint8_t*>(n * fan_in);
  void** held_handles = memory_.Carve<void*>(n * fan_in);
  // Each slot's inherited ids, then whose partial listed each.
  uint16_t* inherited = memory_.Carve<uint16_t>(2 * n * config_.max_inherited);
  uint32_t* offsets = memory_.Carve<uint32_t>(n * fan_in);
  if (offsets == nullptr) throw std::bad_alloc();  // the table cannot exist without its memory
  bitmaps_ = bitmaps;
  acc_arena_ = acc;
  offsets_arena_ = offsets;
  released_ = std::make_unique<void*[]>(fan_in);
  evicted_ = std::make_unique<void*[]>(fan_in);
  for (size_t i = 0; i < n; ++i) {
    Slot& s = *new (&slots_[i]) Slot();
    s.bitmap_ = &bitmaps[i * bitmap_words_];
    s.gone_bitmap_ = &bitmaps[(n + i) * bitmap_words_];
    s.acc_ = &acc[i * 2 * config_.max_payload];
    s.result_ = &results[i * config_.max_payload];
    s.result_view_ = s.result_;
    s.held_payload_ = &held_payloads[i * fan_in];
    s.held_handle_ = &held_handles[i * fan_in];
    s.inherited_ = &inherited[i * config_.max_inherited];
    s.inherited_from_ = &inherited[(n + i) * config_.max_inherited];
    s.offsets_ = &offsets[i * fan_in];
  }
}

SlotTable::~SlotTable() = default;

void SlotTable::Claim(uint32_t local_index, Slot& s, const Contribution& c, uint64_t now_tsc) {
  s.state_ = Slot::State::kAggregating;
  s.job_id_ = c.job_id;
  s.job_generation_ = c.job_generation;
  s.seq_ = c.seq;
  s.expected_ = c.expected;
  s.needed_ = c.needed == 0 || c.needed > c.expected ? c.expected : c.needed;
  s.inherited_count_ = 0;
  s.inherited_overflow_ = false;
  s.ordered_ = c.ordered;
  s.hold_ = c.hold || c.ordered;
  s.dtype_ = c.dtype;
  s.op_ = c.op;
  s.scale_ = c.scale;
  s.elem_count_ = c.elem_count;
  s.elem_offset_ = c.elem_offset;
  s.addr_low_ = c.addr_low;
  s.count_ = 0;
  s.overflow_ = false;
  s.recovered_ = false;
  s.final_ = false;
  s.came_down_ = false;
  s.verifying_ = false;
  s.kept_ = false;
  s.retry_ = false;
  s.retries_ = 0;
  if (s.gone_ && s.gone_job_id_ == c.job_id && s.gone_generation_ == c.job_generation &&
      s.gone_seq_ == c.seq) {
    s.gone_ = false;  // the member it lacked came: the chunk may complete here after all
  }
  s.first_tsc_ = now_tsc;
  s.resent_tsc_ = 0;
  s.resends_ = 0;
  s.told_tsc_ = now_tsc;
  s.tolds_ = 0;
  s.deadline_tsc_ = c.timeout_cycles == 0 ? 0 : now_tsc + c.timeout_cycles;
  if (s.deadline_tsc_ != 0) timers_.Arm(local_index, s.deadline_tsc_);
  std::memset(s.bitmap_, 0, bitmap_words_ * sizeof(uint64_t));
  busy_.store(busy_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void SlotTable::GiveUp(Slot& s, uint64_t now_tsc) {
  s.gone_ = true;
  s.gone_job_id_ = s.job_id_;
  s.gone_generation_ = s.job_generation_;
  s.gone_seq_ = s.seq_;
  s.gone_tsc_ = now_tsc;
  std::memcpy(s.gone_bitmap_, s.bitmap_, bitmap_words_ * sizeof(uint64_t));
}

void SlotTable::Release(uint32_t local_index) {
  Slot& s = slots_[local_index];
  if (s.state_ == Slot::State::kFree) return;
  timers_.Cancel(local_index);
  if (s.state_ == Slot::State::kComplete) {
    complete_.store(complete_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  s.state_ = Slot::State::kFree;
  busy_.store(busy_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

void SlotTable::ReduceHeld(Slot& s, SlotUpdate& u) {
  // Member order, so float results do not depend on arrival order. Only the
  // members that contributed: excluded or timed-out ones are missing.
  uint16_t n = 0;
  for (uint16_t m = 0; m < s.expected_; ++m) {
    if (!s.HasContributed(m)) continue;
    if (n == 0) {
      LoadFirst(s.dtype_, s.held_payload_[m], s.elem_count_, s.acc_);
    } else {
      s.overflow_ |= Accumulate(s.dtype_, s.op_, s.acc_, s.held_payload_[m], s.elem_count_);
    }
    released_[n++] = s.held_handle_[m];
  }
  u.released = released_.get();
  u.n_released = n;
}

void SlotTable::PublishResult(Slot& s) {
  if (AccumulatesInWireFormat(s.dtype_)) {
    s.result_view_ = s.acc_;
  } else {
    StoreResult(s.dtype_, s.acc_, s.elem_count_, s.result_);
    s.result_view_ = s.result_;
  }
}

void SlotTable::Complete(uint32_t local_index, Slot& s, SlotUpdate& u, uint64_t now_tsc) {
  timers_.Cancel(local_index);
  if (s.hold_) ReduceHeld(s, u);
  PublishResult(s);
  s.state_ = Slot::State::kComplete;
  s.resent_tsc_ = now_tsc;  // the result's age starts now
  complete_.store(complete_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  u.outcome = SlotOutcome::kCompleted;
}

uint32_t SlotTable::Expired(uint64_t now_tsc, uint32_t budget, uint32_t* out) {
  if (timers_.size() == 0) return 0;
  return timers_.Advance(now_tsc, budget, out);
}

bool SlotTable::Expire(uint32_t local_index, SlotUpdate* u) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kAggregating || s.count_ == 0) return false;
  timers_.Cancel(local_index);
  u->slot = &s;
  if (s.hold_) ReduceHeld(s, *u);
  PublishResult(s);
  s.state_ = Slot::State::kForwarded;
  s.resent_tsc_ = s.deadline_tsc_;  // its partial goes up now, at about its deadline
  return true;
}

bool SlotTable::Postpone(uint32_t local_index, uint64_t now_tsc) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kAggregating || s.deadline_tsc_ == 0) return false;
  s.deadline_tsc_ = now_tsc + (s.deadline_tsc_ - s.first_tsc_);
  timers_.Arm(local_index, s.deadline_tsc_);
  return true;
}

void SlotTable::MarkForwarded(uint32_t local_index, uint64_t now_tsc, bool hold) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kComplete) return;
  complete_.store(complete_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  s.state_ = Slot::State::kForwarded;
  s.verifying_ = hold;
  s.resent_tsc_ = now_tsc;
}

uint32_t SlotTable::SweepStale(uint64_t now_tsc, uint32_t budget, void** handles,
                               uint32_t max_handles, uint32_t* evicted) {
  uint32_t n = 0;
  *evicted = 0;
  if (config_.stale_cycles == 0) return 0;
  for (uint32_t k = 0; k < budget && k < config_.slots; ++k) {
    const uint32_t i = sweep_cursor_;
    Slot& s = slots_[i];
    if (s.state_ == Slot::State::kAggregating && s.hold_ &&
        now_tsc - s.first_tsc_ > config_.stale_cycles) {
      if (n + s.count_ > max_handles) return n;  // the rest next time, from this slot
      for (uint16_t m = 0; m < s.expected_; ++m) {
        if (s.HasContributed(m)) handles[n++] = s.held_handle_[m];
      }
      GiveUp(s, now_tsc);
      Release(i);
      ++*evicted;
    }
    sweep_cursor_ = sweep_cursor_ + 1 == config_.slots ? 0 : sweep_cursor_ + 1;
  }
  return n;
}

bool SlotTable::TakeResend(Slot& s, uint64_t now_tsc) {
  const uint64_t gap = config_.resend_gap_cycles << s.resends_;
  if (now_tsc - s.resent_tsc_ < gap) return false;
  s.resent_tsc_ = now_tsc;
  if (s.resends_ < kMaxResendBackoff) ++s.resends_;
  return true;
}

bool SlotTable::TellAbsent(uint32_t local_index, uint64_t now_tsc) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kAggregating && s.state_ != Slot::State::kForwarded) return false;
  const uint64_t gap = config_.resend_gap_cycles << s.tolds_;
  if (now_tsc - s.told_tsc_ < gap) return false;
  s.told_tsc_ = now_tsc;
  if (s.tolds_ < kMaxResendBackoff) ++s.tolds_;
  return true;
}

bool SlotTable::ResendForwarded(uint32_t local_index, uint64_t now_tsc) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kForwarded) return false;
  s.retries_ = 0;  // a member still waits
  return TakeResend(s, now_tsc);
}

Slot* SlotTable::ForwardedChunk(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                                uint32_t seq) {
  Slot& s = slots_[local_index];
  return s.state_ == Slot::State::kForwarded && s.job_id_ == job_id &&
                 s.job_generation_ == job_generation && s.seq_ == seq
             ? &s
             : nullptr;
}

bool SlotTable::RefusedAbove(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                             uint32_t seq, uint64_t now_tsc, bool retry) {
  Slot* forwarded = ForwardedChunk(local_index, job_id, job_generation, seq);
  if (forwarded == nullptr) return false;
  Slot& s = *forwarded;
  s.resent_tsc_ = now_tsc;
  s.resends_ = 0;
  // Refused, the partial is nowhere above: this slot is its only copy. It
  // keeps the chunk until the answer comes down (CacheResult), as a slot
  // that is the only record of members it lacks does (KeepForwarded). Given
  // way, the chunk started again here only from a member's data that takes
  // a slot, and none may: the excluded members' data goes around it, as
  // does the data of those the refused partial listed missing (their
  // entries stay); the parent then waited for this switch for good.
  s.kept_ = true;
  // "Not now": the partial goes again a resend gap on (RetryRefused), as a
  // member refused so sends its data again soon.
  if (retry && config_.resend_gap_cycles != 0 && s.retries_ < kMaxRefusedRetries) {
    s.retry_ = true;
    timers_.Arm(local_index, now_tsc + config_.resend_gap_cycles);
  }
  return true;
}

bool SlotTable::RetryRefused(uint32_t local_index, uint64_t now_tsc) {
  Slot& s = slots_[local_index];
  if (s.state_ != Slot::State::kForwarded || !s.retry_) return false;
  s.retry_ = false;
  ++s.retries_;
  timers_.Cancel(local_index);
  s.resent_tsc_ = now_tsc;
  return true;
}

bool SlotTable::MissedAbove(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                            uint32_t seq, uint64_t now_tsc) {
  Slot* forwarded = ForwardedChunk(local_index, job_id, job_generation, seq);
  if (forwarded == nullptr) return false;
  Slot& s = *forwarded;
  // Lost, the partial is nowhere above either (RefusedAbove).
  s.kept_ = true;
  if (now_tsc - s.resent_tsc_ < config_.resend_gap_cycles) return false;
  s.resent_tsc_ = now_tsc;
  return true;
}

bool SlotTable::CacheResult(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                            uint32_t seq, const uint8_t* payload, uint32_t len, bool overflow,
                            uint64_t now_tsc, SlotUpdate* released, bool recovered) {
  Slot& s = slots_[local_index];
  const bool aggregating = s.state_ == Slot::State::kAggregating;
  if ((s.state_ != Slot::State::kForwarded && !aggregating) || s.job_id_ != job_id ||
      s.job_generation_ != job_generation || s.seq_ != seq || len != s.result_len()) {
    return false;
  }
  if (aggregating) {
    if (s.hold_) {
      if (released == nullptr) return false;
      uint16_t n = 0;
      for (uint16_t m = 0; m < s.expected_; ++m) {
        if (s.HasContributed(m)) released_[n++] = s.held_handle_[m];
      }
      released->released = released_.get();
      released->n_released = n;
    }
  }
  // Its slot timer, or a refused partial's retry (RefusedAbove).
  if (aggregating || s.retry_) timers_.Cancel(local_index);
  s.retry_ = false;
  std::memcpy(s.result_, payload, len);
  s.result_view_ = s.result_;
  s.overflow_ = overflow;
  s.recovered_ = s.recovered_ || recovered;
  s.came_down_ = true;
  s.verifying_ = false;
  s.kept_ = false;
  s.state_ = Slot::State::kComplete;
  s.resent_tsc_ = now_tsc;
  complete_.store(complete_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

void SlotTable::Inherit(Slot& s, const Contribution& c) {
  for (uint8_t i = 0; i < c.missing_count; ++i) {
    if (s.inherited_count_ == config_.max_inherited) {
      s.inherited_overflow_ = true;
      return;
    }
    s.inherited_from_[s.inherited_count_] =
        static_cast<uint16_t>(c.node | (c.holds_nobody ? Slot::kWholeShare : 0));
    s.inherited_[s.inherited_count_++] =
        static_cast<uint16_t>(c.missing[2 * i] << 8 | c.missing[2 * i + 1]);
  }
}

SlotUpdate SlotTable::Contribute(uint32_t local_index, const Contribution& c, uint64_t now_tsc,
                                 ReleaseCheck can_release, void* release_ctx) {
  SlotUpdate u;
  if (c.expected == 0 || c.expected > config_.max_fan_in || c.node >= c.expected) return u;
  if (c.elem_count * ElementSize(c.dtype) > config_.max_payload) {
    u.outcome = SlotOutcome::kTooLarge;
    return u;
  }
  Slot& s = slots_[local_index];
  u.slot = &s;
  const bool same_chunk = s.state_ != Slot::State::kFree && s.job_id_ == c.job_id &&
                          s.job_generation_ == c.job_generation && s.seq_ == c.seq;
  if (s.state_ != Slot::State::kFree && !same_chunk) {
    // Another chunk holds the slot. It gives way when nobody needs it any
    // more (a result every member acknowledged, or a job that is gone) or
    // when it is stale; anything else is a collision.
    const bool complete = s.state_ == Slot::State::kComplete;
    // A forwarded slot's chunk went on, unless it waits for its check or
    // is the only record of members it lacks.
    const bool forwarded = s.state_ == Slot::State::kForwarded && !s.verifying_ && !s.kept_;
    // A result ages from when it was made or came down, not from the
    // chunk's first contribution: a chunk that took long to complete keeps
    // its result for members that lost it as long as a quick one does.
    const uint64_t since = complete ? s.resent_tsc_ : s.first_tsc_;
    const bool stale = config_.stale_cycles != 0 && now_tsc - since > config_.stale_cycles;
    if (!forwarded && !stale &&
        !can_release(release_ctx, s.job_id_, s.job_generation_, s.seq_, complete)) {
      u.outcome = SlotOutcome::kCollision;
      return u;
    }
    if (GivenUpTo(s, c, now_tsc)) {
      // The slot would give way, but not to a chunk it gave up (below):
      // what holds it stays until a chunk that takes it comes.
      u.outcome = SlotOutcome::kCollision;
      return u;
    }
    u.stale = stale && !forwarded;
    // A chunk that still aggregates after the stale limit waits for a member
    // that does not send: the members it had must not claim a slot for it
    // again once this chunk is done with the slot.
    if (u.stale && s.state_ == Slot::State::kAggregating) GiveUp(s, now_tsc);
    if (s.state_ == Slot::State::kAggregating && s.hold_) {
      // The contributions a holding slot holds go back to the caller.
      uint16_t n = 0;
      for (uint16_t m = 0; m < s.expected_; ++m) {
        if (s.HasContributed(m)) evicted_[n++] = s.held_handle_[m];
      }
      u.evicted = evicted_.get();
      u.n_evicted = n;
    }
    Release(local_index);
  }
  if (s.state_ == Slot::State::kFree && GivenUpTo(s, c, now_tsc)) {
    // Given up stale, the chunk waits for a member that does not send: a
    // member it had counted does not claim the slot for it again.
    u.outcome = SlotOutcome::kCollision;
    return u;
  }
  if (s.state_ == Slot::State::kFree) {
    Claim(local_index, s, c, now_tsc);
  } else if (s.dtype_ != c.dtype || s.op_ != c.op || s.scale_ != c.scale ||
             s.elem_count_ != c.elem_count || s.expected_ != c.expected ||
             s.ordered_ != c.ordered) {
    u.outcome = SlotOutcome::kMismatch;
    return u;
  } else if (s.addr_low_ != c.addr_low) {
    u.outcome = SlotOutcome::kAddrLowMismatch;
    return u;
  }
  if (s.state_ == Slot::State::kForwarded) {
    s.retries_ = 0;  // a member still waits
    if (!s.HasContributed(c.node)) {
      u.outcome = SlotOutcome::kLateForwarded;
    } else if (TakeResend(s, now_tsc)) {
      u.outcome = SlotOutcome::kForwardedAgain;
    } else {
      u.outcome = SlotOutcome::kDuplicate;  // another member of the same round
    }
    return u;
  }
  if (s.HasContributed(c.node)) {
    u.outcome = s.state_ == Slot::State::kComplete ? SlotOutcome::kDuplicateCompleted
                                                   : SlotOutcome::kWaiting;
    return u;
  }
  if (s.state_ == Slot::State::kComplete) {
    // Complete without this member: it was excluded, or it is a member the
    // slot did not wait for. Its data is late.
    u.outcome = SlotOutcome::kLateForwarded;
    return u;
  }
  // A new member of an aggregating slot (a complete slot has every member).
  s.bitmap_[c.node >> 6] |= uint64_t{1} << (c.node & 63);
  ++s.count_;
  s.final_ |= c.final;
  s.overflow_ |= c.overflow;
  s.recovered_ |= c.recovered;
  const uint64_t offset = (now_tsc - s.first_tsc_) >> Slot::kOffsetShift;
  s.offsets_[c.node] = offset > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(offset);
  if (c.missing_count != 0) Inherit(s, c);
  if (s.hold_) {
    s.held_payload_[c.node] = c.payload;
    s.held_handle_[c.node] = c.handle;
    u.outcome = SlotOutcome::kHeld;
  } else {
    if (s.count_ == 1) {
      LoadFirst(s.dtype_, c.payload, s.elem_count_, s.acc_);
    } else {
      u.saturated = Accumulate(s.dtype_, s.op_, s.acc_, c.payload, s.elem_count_);
      s.overflow_ |= u.saturated;
    }
    u.outcome = SlotOutcome::kAccumulated;
  }
  if (s.count_ == s.needed_) Complete(local_index, s, u, now_tsc);
  return u;
}

}  // namespace aggswitch::aggregator
