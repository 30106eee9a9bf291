// The retransmission timeout of one client's chunks, from their measured
// round trips as RFC 6298 computes it: the smoothed round trip SRTT and its
// variation RTTVAR, and RTO = SRTT + 4 * RTTVAR, held between a floor and a
// ceiling. A round trip here runs from a chunk's send to its result, so it
// includes the wait for the other members' contributions: a job whose ranks
// send spread out gets a longer timeout rather than asking after chunks that
// merely wait. Karn's rule: a chunk that was resent or queried is not sampled
// (which of its sends did the result answer?); nor, by the caller, one whose
// result says RECOVERED (it waited for another member's retransmission: the
// timeout would grow to the others' losses' recovery times).
//
// A chunk that goes unanswered backs off on its own (SendWindow) until the
// job moves again, so a stalled job (a dead member, an unreachable switch)
// backs off while the others keep this timeout.
//
//   RetransmitTimer timer({.initial = 20ms, .min = 5ms, .max = 1s});
//   window.MarkSent(now, timer.timeout());
//   timer.OnResult(rtt);                                     // a chunk's first result
//
// Thread safety: not thread-safe; the client's I/O thread owns it.
#pragma once

#include <chrono>

namespace aggswitch::client::internal {

class RetransmitTimer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Params {
    Clock::duration initial = std::chrono::milliseconds(20);  // before the first sample
    Clock::duration min = std::chrono::milliseconds(5);       // the floor, > 0
    Clock::duration max = std::chrono::seconds(1);            // the ceiling, >= min
  };

  RetransmitTimer();  // the default Params
  explicit RetransmitTimer(const Params& params) : p_(params) {}

  // A new result: when `rtt` is not zero (the chunk was answered on its
  // first send), a sample.
  void OnResult(Clock::duration rtt);

  // The timeout of a chunk sent now.
  Clock::duration timeout() const;
  // How long the answer to a question about a chunk (a QUERY, or a resend
  // on a loss signal) may take before the chunk is asked after again
  // (SendWindow::SetProbe): two smoothed round trips, no more than
  // timeout(). Unlike a first timeout it has no floor: a question costs a
  // header, and losses come in bursts, each step of a recovery lost again
  // would otherwise cost a whole timeout.
  Clock::duration probe() const;
  bool sampled() const { return sampled_; }
  Clock::duration srtt() const { return srtt_; }
  Clock::duration rttvar() const { return rttvar_; }

 private:
  Params p_;
  bool sampled_ = false;
  Clock::duration srtt_{};
  Clock::duration rttvar_{};
};

}  // namespace aggswitch::client::internal
