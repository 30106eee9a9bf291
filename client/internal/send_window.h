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
// next one may go. A chunk still unanswered the timeout it was sent with
// after its last send is due; TakeDue() hands it out for retransmission with
// the timeout of that moment (RetransmitTimer says which). A result tells the
// chunk's round trip when the chunk was sent once.
//
// Fast retransmit (as TCP's): a chunk still unanswered when kFastThreshold
// chunks sent after it have their results was most likely lost, its
// contribution or its result; it comes due at once, one time per transfer,
// instead of waiting out its timeout. Results overtaking each other by fewer
// chunks than that (reordering) do not trigger it.
//
//   SendWindow w;
//   w.Reset(base, chunks, {.window = 128});
//   while (w.CanSend()) send(w.MarkSent(now, timeout));  // chunk index
//   uint32_t k;
//   Clock::duration rtt;
//   if (w.Complete(seq, now, &k, &rtt) == SendWindow::Match::kNew) use the result of chunk k;
//   uint32_t n = w.TakeDue(now, timeout, due, 64);        // resend due[0..n)
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

  static constexpr uint32_t kFastThreshold = 3;

  bool CanSend() const { return sent_ < chunks_ && sent_ - acked_ < params_.window; }
  bool Done() const { return acked_ == chunks_; }
  uint32_t base() const { return base_; }
  uint32_t chunks() const { return chunks_; }
  uint32_t sent() const { return sent_; }
  uint32_t acked() const { return acked_; }
  uint32_t ack_watermark() const { return base_ + acked_; }
  uint32_t Seq(uint32_t chunk) const { return base_ + chunk; }

  // Sends chunk sent(), due `timeout` from `now`: the caller checked
  // CanSend(). Returns its index.
  uint32_t MarkSent(Clock::time_point now, Clock::duration timeout);

  // Matches a result that arrived at `now`; on kNew marks the chunk
  // answered, advances acked() past every leading answered chunk, stores the
  // chunk's index in *chunk and its round trip in *rtt (zero when it was
  // resent: the result may answer any of its sends), and makes the chunks
  // it shows lost due now (fast retransmit).
  Match Complete(uint32_t seq, Clock::time_point now, uint32_t* chunk, Clock::duration* rtt);

  // Writes up to `max` chunks whose timeout passed into `out` and re-arms each
  // due `timeout` from `now`, lowest index first. Returns how many.
  uint32_t TakeDue(Clock::time_point now, Clock::duration timeout, uint32_t* out, uint32_t max);

  // No unanswered chunk is due before this; time_point::max() when none is
  // outstanding. May be early (after answers), never late.
  Clock::time_point NextDue() const { return next_due_; }

  // Times chunk k was resent. k must be outstanding.
  uint32_t ResendsOf(uint32_t chunk) const { return entries_[chunk & mask_].resends; }

 private:
  struct Entry {
    Clock::time_point due;
    Clock::time_point sent;  // its first send
    uint32_t resends = 0;
    bool answered = false;
    bool fast = false;  // came due early once (fast retransmit)
  };

  Params params_;
  std::unique_ptr<Entry[]> entries_;  // indexed by chunk & mask_
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint32_t base_ = 0;
  uint32_t chunks_ = 0;
  uint32_t sent_ = 0;
  uint32_t acked_ = 0;
  uint32_t fast_checked_ = 0;  // chunks below it were checked for a fast retransmit
  Clock::time_point next_due_ = Clock::time_point::max();
};

}  // namespace aggswitch::client::internal
