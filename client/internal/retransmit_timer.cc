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
  backoff_ = 1.0;
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

void RetransmitTimer::Expired(Clock::time_point now) {
  if (backoff_ > 1.0 && now < backed_off_at_ + timeout()) return;
  const double ceiling = static_cast<double>(p_.max.count());
  const double base = static_cast<double>(p_.min.count());
  // Past the ceiling the factor means nothing; it stops there.
  backoff_ = std::min(backoff_ * p_.backoff, ceiling / base);
  backed_off_at_ = now;
}

RetransmitTimer::Clock::duration RetransmitTimer::timeout() const {
  const Clock::duration base = sampled_ ? srtt_ + kK * rttvar_ : p_.initial;
  const auto backed_off = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, Clock::period>(static_cast<double>(base.count()) * backoff_));
  return std::clamp(backed_off, p_.min, p_.max);
}

}  // namespace aggswitch::client::internal
