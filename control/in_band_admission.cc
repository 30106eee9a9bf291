#include "control/in_band_admission.h"

#include <algorithm>
#include <utility>

#include "common/log.h"

namespace aggswitch::control {
namespace {

using dataplane::RegistrationResult;

constexpr size_t kSourceEntries = 4096;
constexpr auto kSweepPeriod = std::chrono::milliseconds(100);

}  // namespace

bool TokenBucket::Take(Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  if (elapsed > 0) {
    tokens_ = std::min(burst_, tokens_ + elapsed * per_second_);
    last_ = now;
  }
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

InBandAdmission::Options InBandAdmission::OptionsFrom(const config::AggregationConfig& agg) {
  Options o;
  o.enabled = agg.in_band_registration;
  o.max_jobs = agg.InBandMaxJobs();
  o.idle_timeout_ms = agg.in_band.idle_timeout_ms;
  o.per_source = agg.in_band.per_source;
  o.total = agg.in_band.total;
  return o;
}

InBandAdmission::InBandAdmission(aggregator::JobTable& table, Options options)
    : table_(table), options_(std::move(options)), sources_(kSourceEntries) {}

void InBandAdmission::SetClock(std::function<uint32_t()> now, uint32_t ticks_per_second) {
  now_ = std::move(now);
  ticks_per_second_ = ticks_per_second;
}

TokenBucket& InBandAdmission::SourceBucket(uint32_t src_ip, Clock::time_point now) {
  Source& s = sources_[(src_ip * 0x9e3779b1u) >> 20 & (kSourceEntries - 1)];
  if (!s.used || s.ip != src_ip) {
    s = Source{src_ip, true, TokenBucket(options_.per_source.per_second, options_.per_source.burst, now)};
  }
  return s.bucket;
}

void InBandAdmission::ForgetGone() {
  for (auto it = admitted_.begin(); it != admitted_.end();) {
    const aggregator::Job* job = table_.Find(it->first);
    if (job == nullptr || job->generation() != it->second.generation) {
      it = admitted_.erase(it);
    } else {
      ++it;
    }
  }
}

RegistrationResult InBandAdmission::Allow(uint32_t src_ip, Clock::time_point now) {
  if (!options_.enabled) return RegistrationResult::invalid;
  // The switch-wide bucket first: a flood from many sources costs one look each.
  if (!total_started_) {
    total_ = TokenBucket(options_.total.per_second, options_.total.burst, now);
    total_started_ = true;
  }
  if (!total_.Take(now) || !SourceBucket(src_ip, now).Take(now)) {
    return RegistrationResult::rate_limited;
  }
  if (admitted_.size() >= options_.max_jobs) ForgetGone();
  if (admitted_.size() >= options_.max_jobs) return RegistrationResult::in_band_full;
  return RegistrationResult::admitted;
}

void InBandAdmission::Record(const aggregator::Job& job) {
  admitted_[job.id()] = Admitted{job.generation(), now_ ? now_() : 0};
}

uint32_t InBandAdmission::LastActive(const aggregator::Job& job, const Admitted& admitted) const {
  uint32_t last = admitted.admitted_tick;
  for (uint16_t i = 0; i < job.members(); ++i) {
    const std::optional<uint32_t> seen = job.LastSeen(i);
    // Serial order: the tick counter wraps (every few weeks at 1 kHz).
    if (seen && static_cast<int32_t>(*seen - last) > 0) last = *seen;
  }
  return last;
}

size_t InBandAdmission::ExpireIdle(Clock::time_point now) {
  if (!now_ || now < next_sweep_ || admitted_.empty()) return 0;
  next_sweep_ = now + kSweepPeriod;
  ForgetGone();
  const uint32_t tick = now_();
  const uint64_t idle_ticks = uint64_t{options_.idle_timeout_ms} * ticks_per_second_ / 1000;
  std::vector<uint32_t> idle;
  for (const auto& [id, admitted] : admitted_) {
    const aggregator::Job* job = table_.Find(id);
    if (job != nullptr && tick - LastActive(*job, admitted) >= idle_ticks) idle.push_back(id);
  }
  for (const uint32_t id : idle) {
    if (!Remove(id)) continue;
    ++expired_;
    AGG_LOG(kInfo, "job %u (in-band) removed: no member sent to it for %u ms", id,
            options_.idle_timeout_ms);
  }
  return idle.size();
}

bool InBandAdmission::Remove(uint32_t id) {
  admitted_.erase(id);
  const aggregator::Job* job = table_.Find(id);
  if (job == nullptr || job->origin() != aggregator::JobSpec::Origin::kInBand) return false;
  return table_.Remove(id).ok();
}

bool InBandAdmission::Displace(uint32_t id) {
  if (!Remove(id)) return false;
  ++displaced_;
  AGG_LOG(kWarning, "job %u (in-band) removed: a config or API job takes its id", id);
  return true;
}

bool InBandAdmission::DisplaceIdlest() {
  ForgetGone();
  uint32_t victim = 0;
  uint32_t oldest = 0;
  bool found = false;
  const uint32_t tick = now_ ? now_() : 0;
  for (const auto& [id, admitted] : admitted_) {
    const aggregator::Job* job = table_.Find(id);
    if (job == nullptr) continue;
    const uint32_t idle = tick - LastActive(*job, admitted);
    if (!found || idle > oldest) {
      victim = id;
      oldest = idle;
      found = true;
    }
  }
  if (!found || !Remove(victim)) return false;
  ++displaced_;
  AGG_LOG(kWarning, "job %u (in-band) removed: the job table is full and a config or API job "
          "needs its entry", victim);
  return true;
}

}  // namespace aggswitch::control
