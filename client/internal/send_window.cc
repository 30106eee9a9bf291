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
  fast_checked_ = 0;
  backed_off_ = false;
  answered_asked_ = Clock::time_point{};
  next_due_ = Clock::time_point::max();
}

uint32_t SendWindow::MarkSent(Clock::time_point now, Clock::duration timeout) {
  const uint32_t k = sent_++;
  Entry& e = entries_[k & mask_];
  e.sent = now;
  e.timeout = timeout;
  e.initial = timeout;
  // A chunk with too few chunks after it for a fast retransmit to reveal its
  // loss is asked after one probe interval, not a timeout (TCP's tail loss
  // probe): one of the last kFastThreshold chunks of a transfer, and every
  // chunk of a window of kFastThreshold or fewer, where no chunk
  // kFastThreshold later is sent before it is answered.
  const bool no_fast = chunks_ - k <= kFastThreshold || params_.window <= kFastThreshold;
  e.due = now + (no_fast ? std::min(timeout, probe_) : timeout);
  e.resends = 0;
  e.why = Entry::Why::kTimer;
  e.answered = false;
  e.fast = false;
  e.held = false;
  e.refused = false;
  e.helds = 0;
  e.queried = 0;
  e.reask = false;
  e.asked = Clock::time_point{};
  next_due_ = std::min(next_due_, e.due);
  return k;
}

SendWindow::Match SendWindow::Complete(uint32_t seq, Clock::time_point now, uint32_t* chunk,
                                       Clock::duration* rtt) {
  const uint32_t k = seq - base_;  // wraps like the sequence numbers
  if (k >= chunks_) return Match::kForeign;
  if (k >= sent_) return Match::kNotSent;
  if (k < acked_) return Match::kDuplicate;
  Entry& e = entries_[k & mask_];
  if (e.answered) return Match::kDuplicate;
  e.answered = true;
  ++results_;
  while (acked_ != sent_ && entries_[acked_ & mask_].answered) ++acked_;
  if (acked_ == sent_) {
    next_due_ = Clock::time_point::max();
    backed_off_ = false;
  } else if (backed_off_) {
    // The job moves: no outstanding chunk waits longer than the timeout it
    // was sent with.
    backed_off_ = false;
    for (uint32_t c = acked_; c != sent_; ++c) {
      Entry& u = entries_[c & mask_];
      if (u.answered || u.timeout == u.initial) continue;
      u.timeout = u.initial;
      u.due = std::min(u.due, now + u.initial);
      next_due_ = std::min(next_due_, u.due);
    }
  }
  if (acked_ != sent_ && k >= kFastThreshold) {
    // Each chunk is checked once, when the first chunk kFastThreshold past
    // it is answered: over a transfer, O(1) per result.
    const uint32_t last = k - kFastThreshold;
    for (uint32_t c = std::max(fast_checked_, acked_); c <= last; ++c) {
      Entry& u = entries_[c & mask_];
      if (u.answered || u.fast) continue;
      u.fast = true;
      // Already due at once for its data ("missing"), or soon (a refusal).
      if (u.why == Entry::Why::kMissing || u.why == Entry::Why::kRefused) continue;
      u.why = Entry::Why::kFast;
      u.due = std::min(u.due, now);
      next_due_ = std::min(next_due_, u.due);
    }
    fast_checked_ = std::max(fast_checked_, last + 1);
  }
  if (acked_ != sent_) {
    // The chunk the window waits on, held at the switch when asked, or
    // sent again on the switch's word that it lacks it: later chunks
    // answered since then say its slot has most likely completed as well
    // and its result to this sender was lost, or the resend was lost on its
    // way (an excluded member's data goes around its switch, which answers
    // "missing" whether or not the data reached the TAN). Asked once more
    // now, not a probe interval (the other members' waits inflate it) later.
    Entry& w = entries_[acked_ & mask_];
    if (w.reask && results_ - w.reask_results >= kFastThreshold) {
      w.reask = false;
      w.why = Entry::Why::kFast;
      w.due = std::min(w.due, now);
      next_due_ = std::min(next_due_, w.due);
    }
  }
  *chunk = k;
  *rtt = e.resends == 0 ? now - e.sent : Clock::duration::zero();
  return Match::kNew;
}

SendWindow::Entry* SendWindow::Outstanding(uint32_t seq) {
  const uint32_t k = seq - base_;
  if (k >= sent_ || k < acked_) return nullptr;
  Entry& e = entries_[k & mask_];
  return e.answered ? nullptr : &e;
}

bool SendWindow::Refused(uint32_t seq, Clock::time_point when) {
  Entry* found = Outstanding(seq);
  if (found == nullptr) return false;
  Entry& e = *found;
  e.why = Entry::Why::kRefused;
  e.held = false;
  e.refused = true;
  e.reask = false;  // refused, not lost: nothing to ask on later results
  e.due = std::min(e.due, when);
  next_due_ = std::min(next_due_, e.due);
  return true;
}

bool SendWindow::Held(uint32_t seq, Clock::time_point now) {
  Entry* found = Outstanding(seq);
  if (found == nullptr) return false;
  Entry& e = *found;
  if (e.queried > 0) answered_asked_ = std::max(answered_asked_, e.asked);
  e.fast = true;
  e.held = true;
  e.refused = false;
  e.reask = params_.query;
  e.reask_results = results_;
  e.queried = 0;
  e.why = Entry::Why::kTimer;
  Clock::duration wait = std::min(e.timeout, probe_);
  for (uint8_t i = 0; i < e.helds && wait < e.timeout; ++i) wait = std::min(2 * wait, e.timeout);
  if (e.helds < UINT8_MAX) ++e.helds;
  e.due = now + wait;
  next_due_ = std::min(next_due_, e.due);
  return true;
}

bool SendWindow::Missing(uint32_t seq, Clock::time_point now) {
  Entry* found = Outstanding(seq);
  if (found == nullptr) return false;
  Entry& e = *found;
  if (e.queried > 0) answered_asked_ = std::max(answered_asked_, e.asked);
  e.queried = 0;
  e.held = false;
  e.refused = false;
  e.helds = 0;
  e.reask = false;  // armed again when its data goes
  e.why = Entry::Why::kMissing;
  e.due = now;
  next_due_ = std::min(next_due_, now);
  return true;
}

void SendWindow::AskBy(Clock::time_point when) {
  if (!params_.query || acked_ == sent_) return;
  Entry& w = entries_[acked_ & mask_];
  // A refused chunk whose data is still to go again (soon: Refused) is no
  // question yet.
  const bool waits = w.held || (w.refused && w.why == Entry::Why::kTimer);
  if (w.answered || !waits || w.due <= when || w.asked >= when) return;
  w.due = when;
  next_due_ = std::min(next_due_, when);
}

uint32_t SendWindow::TakeDue(Clock::time_point now, Due* out, uint32_t max) {
  if (now < next_due_) return 0;
  uint32_t n = 0;
  Clock::time_point next = Clock::time_point::max();
  for (uint32_t k = acked_; k != sent_; ++k) {
    Entry& e = entries_[k & mask_];
    if (e.answered) continue;
    if (e.due <= now && n < max) {
      // A timeout or a fast retransmit asks first, unless its last questions
      // went unanswered: the chunk may merely wait for another member, or its
      // result alone may be lost, and a lost contribution the switch reports
      // unasked (a gap in this sender's chunks). Once the switch said it
      // holds the contribution, only its word that it lacks it sends the data
      // again: unanswered questions then mean a busy switch or lost answers,
      // which the data would not change. Nor does the data go while the
      // switch has answered no question asked since this chunk's last one:
      // it is stalled or gone, not losing this chunk's questions.
      const bool silent = e.queried > 0 && answered_asked_ < e.asked;
      const bool query = params_.query &&
                         (e.why == Entry::Why::kTimer || e.why == Entry::Why::kFast) &&
                         (e.queried < kUnansweredQueries || e.held || silent);
      out[n++] = Due{k, query, e.why == Entry::Why::kRefused};
      if (query) {
        e.asked = now;
        if (e.queried < UINT8_MAX) ++e.queried;
      } else {
        e.queried = 0;
      }
      ++e.resends;
      const Entry::Why why = e.why;
      e.why = Entry::Why::kTimer;
      if (why != Entry::Why::kRefused && why != Entry::Why::kMissing) {
        const auto backed_off = std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, Clock::period>(e.timeout.count() * params_.backoff));
        e.timeout = std::max(e.timeout, std::min(backed_off, params_.max_timeout));
        backed_off_ = backed_off_ || e.timeout != e.initial;
      }
      // A question, or data sent on a loss signal, should be answered within
      // a probe interval; without an answer the chunk is asked after again.
      // The last question before the data goes waits a whole timeout: the
      // data goes after a timeout of silence, not a few round trips of a
      // switch descheduled on a loaded host. The questions about a held
      // chunk wait twice as long each time none is answered (up to the
      // timeout), so that a stalled switch is not sent a window of questions
      // every probe interval.
      const bool answer_soon = query || why == Entry::Why::kFast || why == Entry::Why::kMissing;
      if (why == Entry::Why::kMissing) {
        // Its data went again on the switch's word that it lacks it:
        // kFastThreshold later results before the answer say the resend
        // was lost too, and ask again at once (Complete) about the window's
        // oldest chunk, once per resend.
        e.reask = params_.query;
        e.reask_results = results_;
      }
      Clock::duration wait = std::min(e.timeout, probe_);
      if (query && !e.held && e.queried >= kUnansweredQueries) {
        wait = e.timeout;
      } else {
        for (uint8_t q = 1; query && q < e.queried && wait < e.timeout; ++q) {
          wait = std::min(e.timeout, 2 * wait);
        }
      }
      e.due = now + (answer_soon ? wait : e.timeout);
    }
    // A due chunk beyond `max` keeps its deadline, so the next call is due at once.
    next = std::min(next, e.due);
  }
  next_due_ = next;
  return n;
}

}  // namespace aggswitch::client::internal
