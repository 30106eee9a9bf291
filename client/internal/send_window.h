// The chunks of one transfer that are in flight: which were sent, which were
// answered, and when each is due for retransmission. Also the result matcher:
// it maps a result's sequence number to its chunk and says whether it is the
// first answer.
//
// A transfer is `chunks` chunks with consecutive sequence numbers from `base`
// (on 32 bits, wrapping: RFC 1982). Chunks are sent in order. acked() is the
// number of leading chunks whose results have arrived, so base + acked() is
// the sender's ack watermark; sent() is the number sent so far. At most
// `window` chunks, [acked, sent), are outstanding: CanSend() says whether the
// next one may go. A chunk still unanswered `timeout` after its last send is
// due; TakeDue() hands it out for retransmission and multiplies its timeout by
// `backoff`, up to `max_timeout`.
//
//   SendWindow w;
//   w.Reset(base, chunks, {.window = 128, .timeout = 20ms, .max_timeout = 1s, .backoff = 2});
//   while (w.CanSend()) send(w.MarkSent(now));          // chunk index
//   uint32_t k;
//   if (w.Match(seq, &k) == SendWindow::Match::kNew) use the result of chunk k;
//   uint32_t n = w.TakeDue(now, due, 64);                // resend due[0..n)
//   sleep until w.NextDue() or a datagram arrives;
//
// Thread safety: not thread-safe; the client's I/O thread owns it. Reset may
// allocate; every other method is O(1) except TakeDue (O(window) when a
// deadline has passed, O(1) before).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

namespace aggswitch::client::internal {

class SendWindow {
 public:
  using Clock = std::chrono::steady_clock;

  struct Params {
    uint32_t window = 128;  // chunks outstanding at most, > 0
    Clock::duration timeout = std::chrono::milliseconds(20);
    Clock::duration max_timeout = std::chrono::seconds(1);
    double backoff = 2.0;  // >= 1
  };

  // What a result's sequence number is to this transfer.
  enum class Match : uint8_t {
    kNew,        // the first result of a chunk in flight
    kDuplicate,  // that chunk's result arrived before
    kNotSent,    // a chunk of this transfer that was never sent
    kForeign,    // not a chunk of this transfer (an earlier one's, or garbage)
  };

  // Starts a transfer. Allocates only when the window outgrows the entries
  // allocated so far. [owner]
  void Reset(uint32_t base, uint32_t chunks, const Params& params);

  bool CanSend() const { return sent_ < chunks_ && sent_ - acked_ < params_.window; }
  bool Done() const { return acked_ == chunks_; }
  uint32_t base() const { return base_; }
  uint32_t chunks() const { return chunks_; }
  uint32_t sent() const { return sent_; }
  uint32_t acked() const { return acked_; }
  uint32_t ack_watermark() const { return base_ + acked_; }
  uint32_t Seq(uint32_t chunk) const { return base_ + chunk; }

  // Sends chunk sent(): the caller checked CanSend(). Returns its index.
  uint32_t MarkSent(Clock::time_point now);

  // Matches a result; on kNew marks the chunk answered, advances acked() past
  // every leading answered chunk and stores the chunk's index in *chunk.
  Match Complete(uint32_t seq, uint32_t* chunk);

  // Writes up to `max` chunks whose timeout passed into `out` and re-arms each
  // with its backed-off timeout, lowest index first. Returns how many.
  uint32_t TakeDue(Clock::time_point now, uint32_t* out, uint32_t max);

  // The switch refused chunk `seq` for now (a NACK such as "slot quota"):
  // it is due again at `when` if that is sooner than its timer, and that
  // resend keeps its timeout as it is, since the switch answered and nothing
  // was lost. False (and nothing changes) when `seq` is not outstanding.
  bool Refused(uint32_t seq, Clock::time_point when);

  // No unanswered chunk is due before this; time_point::max() when none is
  // outstanding. May be early (after answers), never late.
  Clock::time_point NextDue() const { return next_due_; }

  // Chunk k's current timeout (the initial one until it is resent). k must be
  // outstanding.
  Clock::duration TimeoutOf(uint32_t chunk) const { return entries_[chunk & mask_].timeout; }

  // Times chunk k was resent. k must be outstanding.
  uint32_t ResendsOf(uint32_t chunk) const { return entries_[chunk & mask_].resends; }

 private:
  struct Entry {
    Clock::time_point due;
    Clock::duration timeout;
    uint32_t resends = 0;
    bool answered = false;
    bool refused = false;  // the next resend answers a refusal: no backoff
  };

  Params params_;
  std::unique_ptr<Entry[]> entries_;  // indexed by chunk & mask_
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint32_t base_ = 0;
  uint32_t chunks_ = 0;
  uint32_t sent_ = 0;
  uint32_t acked_ = 0;
  Clock::time_point next_due_ = Clock::time_point::max();
};

}  // namespace aggswitch::client::internal
