#include "client/internal/send_window.h"

#include <algorithm>
#include <bit>

namespace aggswitch::client::internal {

void SendWindow::Reset(uint32_t base, uint32_t chunks, const Params& params) {
  params_ = params;
  const uint32_t capacity = std::bit_ceil(params.window);
  if (capacity > capacity_) {
    entries_ = std::make_unique<Entry[]>(capacity);
    capacity_ = capacity;
  }
  mask_ = capacity - 1;
  base_ = base;
  chunks_ = chunks;
  sent_ = 0;
  acked_ = 0;
  next_due_ = Clock::time_point::max();
}

uint32_t SendWindow::MarkSent(Clock::time_point now) {
  const uint32_t k = sent_++;
  Entry& e = entries_[k & mask_];
  e.timeout = params_.timeout;
  e.due = now + e.timeout;
  e.resends = 0;
  e.answered = false;
  e.refused = false;
  next_due_ = std::min(next_due_, e.due);
  return k;
}

SendWindow::Match SendWindow::Complete(uint32_t seq, uint32_t* chunk) {
  const uint32_t k = seq - base_;  // wraps like the sequence numbers
  if (k >= chunks_) return Match::kForeign;
  if (k >= sent_) return Match::kNotSent;
  if (k < acked_) return Match::kDuplicate;
  Entry& e = entries_[k & mask_];
  if (e.answered) return Match::kDuplicate;
  e.answered = true;
  while (acked_ != sent_ && entries_[acked_ & mask_].answered) ++acked_;
  if (acked_ == sent_) next_due_ = Clock::time_point::max();
  *chunk = k;
  return Match::kNew;
}

bool SendWindow::Refused(uint32_t seq, Clock::time_point when) {
  const uint32_t k = seq - base_;
  if (k >= sent_ || k < acked_) return false;
  Entry& e = entries_[k & mask_];
  if (e.answered) return false;
  e.refused = true;
  e.due = std::min(e.due, when);
  next_due_ = std::min(next_due_, e.due);
  return true;
}

uint32_t SendWindow::TakeDue(Clock::time_point now, uint32_t* out, uint32_t max) {
  if (now < next_due_) return 0;
  uint32_t n = 0;
  Clock::time_point next = Clock::time_point::max();
  for (uint32_t k = acked_; k != sent_; ++k) {
    Entry& e = entries_[k & mask_];
    if (e.answered) continue;
    if (e.due <= now && n < max) {
      out[n++] = k;
      ++e.resends;
      if (e.refused) {
        e.refused = false;
      } else {
        const auto backed_off = std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, Clock::period>(e.timeout.count() * params_.backoff));
        e.timeout = std::min(backed_off, params_.max_timeout);
      }
      e.due = now + e.timeout;
    }
    // A due chunk beyond `max` keeps its deadline, so the next call is due at once.
    next = std::min(next, e.due);
  }
  next_due_ = next;
  return n;
}

}  // namespace aggswitch::client::internal
