// One emulated worker's chunks of one job: which are in flight, which came
// back, and when each was last sent.
//
// Chunks are sent in seq order. ack() is the lowest seq whose answer has not
// arrived (the worker's ack watermark), next() the lowest seq not yet sent;
// [ack, next) is in flight, with the answered ones marked. A ring of
// capacity >= the window, indexed by seq, holds the marks and send times.
//
//   ChunkWindow w;
//   w.Init(32);
//   w.MarkSent(w.next(), now);          // the caller checks next() against its limit
//   switch (w.Complete(seq)) { case ChunkWindow::kNew: ... }
//   if (w.Expired(seq, now, timeout)) resend seq, then w.MarkResent(seq, now);
//
// Thread safety: owned by the generator lcore; not thread-safe. Init is
// [control]; the rest is hot-path safe (no allocation, O(1), except
// InFlightUnanswered, which is O(window) and meant for the end of a run).
#pragma once

#include <cstdint>
#include <memory>

namespace aggswitch::tools {

class ChunkWindow {
 public:
  enum Completion : uint8_t {
    kNew,        // first answer for an in-flight chunk
    kDuplicate,  // already answered (a retransmission's second answer)
    kNeverSent,  // seq is not below next(): nothing was sent for it
  };

  // Allocates room for `window` chunks in flight, ack = next = 0. [control]
  void Init(uint32_t window);

  uint32_t ack() const { return ack_; }
  uint32_t next() const { return next_; }
  uint32_t in_flight() const { return next_ - ack_; }

  // Sends next(): the caller has checked in_flight() < window.
  void MarkSent(uint64_t now) {
    Entry& e = entries_[next_ & mask_];
    e.sent_tsc = now;
    e.answered = false;
    ++next_;
  }

  // Records the answer for seq; advances ack() past every answered chunk.
  Completion Complete(uint32_t seq) {
    if (static_cast<int32_t>(seq - ack_) < 0) return kDuplicate;
    if (static_cast<int32_t>(seq - next_) >= 0) return kNeverSent;
    Entry& e = entries_[seq & mask_];
    if (e.answered) return kDuplicate;
    e.answered = true;
    while (ack_ != next_ && entries_[ack_ & mask_].answered) ++ack_;
    return kNew;
  }

  // Whether in-flight seq is unanswered and was last sent before now - timeout.
  bool Expired(uint32_t seq, uint64_t now, uint64_t timeout) const {
    const Entry& e = entries_[seq & mask_];
    return !e.answered && now - e.sent_tsc >= timeout;
  }
  void MarkResent(uint32_t seq, uint64_t now) { entries_[seq & mask_].sent_tsc = now; }

  // Chunks in [ack, next) still waiting for their answer.
  uint32_t InFlightUnanswered() const;

 private:
  struct Entry {
    uint64_t sent_tsc = 0;
    bool answered = false;
  };
  std::unique_ptr<Entry[]> entries_;
  uint32_t mask_ = 0;
  uint32_t ack_ = 0;
  uint32_t next_ = 0;
};

}  // namespace aggswitch::tools
