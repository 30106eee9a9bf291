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
// next one may go.
//
// Each chunk is sent with the retransmission timeout of that moment
// (RetransmitTimer says which). Still unanswered that long after its last
// send, it is due: TakeDue() hands it out and multiplies its own timeout by
// `backoff`, up to `max_timeout`. With `query` set, a timeout first asks
// the switch about the chunk (a QUERY, header only) and the data goes again
// only when the switch says it lacks it (Missing) or kUnansweredQueries
// queries in a row go unanswered while the switch answers a question this
// sender asked at the same time or later ("held" or "missing" about another
// chunk: it read the sender's datagrams past this chunk's questions, so
// those, or their answers, were lost); a chunk that merely waits for other
// members, or whose result is on its way, costs a header, not a resend. A
// switch that answers no such question is asked on, at the backed-off
// timeout: it is stalled (a busy host) or gone, and the data would be no
// more answered than the questions. Results prove nothing here: another
// member's contribution completes a slot whether or not the switch reads
// this sender. So while nothing moves (a dead member, an unreachable
// switch) the resends thin out. The next new
// result shows that the job moves again: every outstanding chunk gets back
// the timeout it was sent with and is due within it, so a result lost while
// the job stood still is recovered about one timeout after the job moves
// on, not a backed-off second later. A result tells the chunk's round trip
// when the chunk was sent once (Karn's rule).
//
// Fast retransmit, as TCP's: a chunk still unanswered when kFastThreshold
// chunks sent after it have their results was most likely lost (its
// contribution, its result, or another member's contribution); it comes
// due at once, one time, instead of waiting out its timeout, and asks the
// switch (with `query`). Results overtaking each other by fewer chunks than
// that (reordering) do not trigger it.
//
// What the switch says about a chunk moves its timer: a refusal for now
// (Refused: a quota) makes its data due soon without backing off; "held"
// (Held: its contribution is counted and its slot waits for other members)
// rules out a fast retransmit and leaves one query after a probe interval,
// doubling with each "held" in a row up to the chunk's timeout (a straggler
// may keep the slot waiting for seconds), to recover the result if it is
// lost once the slot completes, and its data
// goes again only when the switch later says it lacks it. With `query`,
// the chunk at the ack watermark is asked once more, at once, when
// kFastThreshold results of later chunks arrive after its "held": the slot
// has most likely completed since and its result to this sender was lost
// (every other member moves on; the window, and so the job, waits on it for
// a probe interval that the waits for the other members have inflated),
// and a QUERY costs a header (at most one per "held" answer). "missing" (the
// answer to a query, or the switch's word when a later chunk of this sender
// arrived first) makes its data due at once; kFastThreshold later results
// after that resend, at the ack watermark, ask again at once as well (at
// most once per resend): the resend was most likely lost too. An excluded
// member (docs/stragglers.md, self-flagging) meets this on every loss: its
// data goes around the switch, which answers each question "missing", so
// only the answer that never comes tells a lost resend.
//
// The last kFastThreshold chunks of a transfer (all of a one-chunk one), and
// every chunk when the window is kFastThreshold or smaller, have no later
// chunks to reveal their loss: they are first asked after once a probe
// interval has passed, not a timeout. (A timeout would be paid for every
// loss; and since a round trip includes the wait for the other members,
// each rank's timeouts would feed the others' round trips.)
//
// Once a chunk is in recovery, each step is followed up after the probe
// interval (SetProbe: about two round trips), not its timeout: a query, or
// data resent on a loss signal, left unanswered that long is asked after
// again. A step lost again then costs a probe interval, where a timeout
// floor of several round trips would leave the window standing. Each query
// in a row left unanswered doubles the wait for the next answer (up to the
// timeout): a switch descheduled for a few round trips on a loaded host is
// not sent a window of questions every probe interval, and answers it
// sends late are not taken for a loss.
//
//   SendWindow w;
//   w.Reset(base, chunks, {.window = 128, .max_timeout = 1s, .backoff = 2});
//   while (w.CanSend()) send(w.MarkSent(now, timeout));  // chunk index
//   uint32_t k;
//   Clock::duration rtt;
//   if (w.Complete(seq, now, &k, &rtt) == SendWindow::Match::kNew) use the result of chunk k;
//   uint32_t n = w.TakeDue(now, due, 64);  // due[0..n): query or resend due[i].chunk
//   sleep until w.NextDue() or a datagram arrives;
//
// Thread safety: not thread-safe; the client's I/O thread owns it. Reset may
// allocate; every other method is O(1) amortized except TakeDue (O(window)
// when a deadline has passed, O(1) before).
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
    Clock::duration max_timeout = std::chrono::seconds(1);
    double backoff = 2.0;  // >= 1
    bool query = true;     // a timeout queries before it resends
  };

  // A chunk TakeDue hands out, and what to send for it.
  struct Due {
    uint32_t chunk;
    bool query;  // a QUERY about it; else its data again
    bool refused = false;  // its data again after the switch refused it for now (Refused)
  };

  // Later chunks answered before a chunk is deemed lost (fast retransmit).
  static constexpr uint32_t kFastThreshold = 3;
  // Queries about a chunk left unanswered (the first for a probe interval,
  // the next for twice that) before its data goes anyway (the switch or the
  // way to it may be gone). More than one: an answer held up on a loaded
  // host is no loss.
  static constexpr uint8_t kUnansweredQueries = 2;

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
  // Whether chunk k, sent (k < sent()), has its result.
  bool Answered(uint32_t chunk) const {
    return chunk < acked_ || entries_[chunk & mask_].answered;
  }

  // Sends chunk sent(), due `timeout` from `now`: the caller checked
  // CanSend(). Returns its index.
  uint32_t MarkSent(Clock::time_point now, Clock::duration timeout);

  // Matches a result that arrived at `now`; on kNew marks the chunk
  // answered, advances acked() past every leading answered chunk, stores the
  // chunk's index in *chunk and its round trip in *rtt (zero when it was
  // resent: the result may answer any of its sends), makes the chunks it
  // shows lost due now (fast retransmit), and undoes every backoff (O(window)
  // when a timeout had grown).
  Match Complete(uint32_t seq, Clock::time_point now, uint32_t* chunk, Clock::duration* rtt);

  // Writes up to `max` chunks that are due into `out`, lowest index first,
  // each with what to send, and re-arms each (with its backed-off timeout
  // when a timeout made it due). Returns how many.
  uint32_t TakeDue(Clock::time_point now, Due* out, uint32_t max);

  // The switch refused chunk `seq` for now (a NACK such as "slot quota"):
  // it is due again at `when` if that is sooner than its timer, and that
  // resend keeps its timeout as it is, since the switch answered and nothing
  // was lost. False (and nothing changes) when `seq` is not outstanding.
  bool Refused(uint32_t seq, Clock::time_point when);

  // The switch holds chunk `seq`'s contribution and its slot waits for other
  // members (NOTICE held, the answer to a resend or a query): no fast
  // retransmit for it, and its next query, which only recovers a result
  // lost once the slot completes, is due a probe interval after `now`,
  // doubled for each earlier "held" in a row, at most the chunk's timeout.
  // Questions left unanswered from then on do not send the data: only
  // Missing (or Refused) does.
  // False (and nothing changes) when `seq` is not outstanding.
  bool Held(uint32_t seq, Clock::time_point now);

  // The switch lacks chunk `seq`'s contribution (NOTICE missing, the answer
  // to a query): its data is due at `now`. False (and nothing changes) when
  // `seq` is not outstanding.
  bool Missing(uint32_t seq, Clock::time_point now);

  // The sender gives up on the transfer (its progress timeout) a probe
  // interval after `when`. The chunk at the ack watermark, when the switch
  // said it holds its contribution and its next question is due later than
  // `when` (the questions about a held chunk back off up to its timeout),
  // is asked at `when`: a result lost since its last question (the slot
  // completed after a long wait, and the copy to this sender was lost) is
  // then recovered before the sender gives up with the result waiting at
  // the switch. So is one the switch last refused for now (Refused) whose
  // data went again and waits its timer: that resend, or its refusal, was
  // lost (the switch also rate-limits its NACKs), and the wait, backed off
  // up to a second by earlier losses, would otherwise end past the give-up
  // while the slot may be free by now. At most one question per `when`:
  // none once the chunk was asked at or after it. O(1).
  void AskBy(Clock::time_point when);

  // How long an answer to a question about a chunk may take (a QUERY, or
  // data resent on a loss signal: a fast retransmit or "missing"): the
  // chunk is asked after again that long after it, or after its timeout
  // if that is sooner. Also the wait between questions about a held chunk.
  // Until set: no limit (the timeout). [owner]
  void SetProbe(Clock::duration probe) { probe_ = probe; }

  // No unanswered chunk is due before this; time_point::max() when none is
  // outstanding. May be early (after answers), never late.
  Clock::time_point NextDue() const { return next_due_; }

  // Chunk k's current timeout (the one it was sent with until it is resent).
  // k must be outstanding.
  Clock::duration TimeoutOf(uint32_t chunk) const { return entries_[chunk & mask_].timeout; }

  // Times chunk k was resent or queried. k must be outstanding.
  uint32_t ResendsOf(uint32_t chunk) const { return entries_[chunk & mask_].resends; }

 private:
  struct Entry {
    Clock::time_point due;
    Clock::time_point sent;  // its first send
    Clock::duration timeout;
    Clock::duration initial;  // the timeout it was sent with
    uint32_t resends = 0;  // resends and queries
    // Why it is due next: its timer, or (data, no backoff) a refusal or a
    // "missing", or (data) a fast retransmit.
    enum class Why : uint8_t { kTimer, kRefused, kMissing, kFast } why = Why::kTimer;
    bool answered = false;
    bool fast = false;     // came due early once (fast retransmit), or was held
    bool held = false;     // the switch said it holds the contribution, and not since that it lacks it
    bool refused = false;  // the switch's last word about it was a refusal for now (Refused)
    uint8_t helds = 0;     // "held" answers in a row (each doubles the wait for the next question)
    uint8_t queried = 0;   // QUERYs sent since its last send or answer
    // Held, or its data resent on "missing", and not yet asked again on
    // later results since.
    bool reask = false;
    uint32_t reask_results = 0;  // results_ at its last "held" or resend on "missing"
    Clock::time_point asked;  // its last QUERY
  };

  // Chunk `seq`'s entry when it is sent and unanswered; else null.
  Entry* Outstanding(uint32_t seq);

  Params params_;
  std::unique_ptr<Entry[]> entries_;  // indexed by chunk & mask_
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint32_t base_ = 0;
  uint32_t chunks_ = 0;
  uint32_t sent_ = 0;
  uint32_t acked_ = 0;
  Clock::duration probe_ = Clock::duration::max();
  uint32_t fast_checked_ = 0;  // chunks below it were checked for a fast retransmit
  uint32_t results_ = 0;       // first results matched (kNew), wrapping
  bool backed_off_ = false;    // an outstanding chunk's timeout grew since the last result
  // When the latest question the switch answered ("held" or "missing") was
  // asked.
  Clock::time_point answered_asked_{};
  Clock::time_point next_due_ = Clock::time_point::max();
};

}  // namespace aggswitch::client::internal
