#include "client/internal/retransmit_timer.h"

#include <algorithm>

namespace aggswitch::client::internal {
namespace {

// RFC 6298's gains: alpha = 1/8 for SRTT, beta = 1/4 for RTTVAR, K = 4.
constexpr int kAlphaShift = 3;
constexpr int kBetaShift = 2;
constexpr int kK = 4;

}  // namespace

RetransmitTimer::RetransmitTimer() : p_(Params()) {}

void RetransmitTimer::OnResult(Clock::duration rtt) {
  if (rtt <= Clock::duration::zero()) return;
  if (!sampled_) {
    srtt_ = rtt;
    rttvar_ = rtt / 2;
    sampled_ = true;
    return;
  }
  const Clock::duration error = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
  rttvar_ += (error - rttvar_) / (1 << kBetaShift);
  srtt_ += (rtt - srtt_) / (1 << kAlphaShift);
}

RetransmitTimer::Clock::duration RetransmitTimer::timeout() const {
  const Clock::duration rto = sampled_ ? srtt_ + kK * rttvar_ : p_.initial;
  return std::clamp(rto, p_.min, p_.max);
}

RetransmitTimer::Clock::duration RetransmitTimer::probe() const {
  return sampled_ ? std::min(timeout(), 2 * srtt_) : timeout();
}

}  // namespace aggswitch::client::internal
