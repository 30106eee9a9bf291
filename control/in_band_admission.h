// In-band registration on the control side: the policy that bounds what a
// job registering itself from its task info may take of the switch, and
// when it goes (docs/security.md, "In-band jobs"). The job itself is
// admitted by JobControl::RegisterInBand, the way config and API jobs are.
//
// Anyone who can send a datagram to the switch can register a job in-band,
// so such jobs are bounded, and never at the cost of the jobs the operator
// provisioned (config, API):
//   - registrations are rate limited: a token bucket per source IPv4 address
//     (aggregation.in_band.per_source) and one for the whole switch
//     (aggregation.in_band.total); over either, the datagram is refused with
//     NackReason::kRateLimited;
//   - in-band jobs fill at most aggregation.in_band.max_jobs entries of the
//     job table (NackReason::kInBandFull beyond);
//   - each gets the in-band slot and hold quotas (JobSpecFromConfig), and
//     its chunks use the in-band slot region only (aggregator/slot_placement.h);
//   - an in-band job no member has sent to for aggregation.in_band.
//     idle_timeout_ms is removed, so that an id taken by one datagram is free
//     again after that long;
//   - a config or API job displaces an in-band job: one with its id, or,
//     when the table is full, the one idle longest (Displace*).
//
//   InBandAdmission admission(table, InBandAdmission::OptionsFrom(cfg.aggregation));
//   admission.SetClock([&dp] { return dp.SeenTick(); }, dp.MillisecondsToTicks(1000));
//   job_control.SetInBandAdmission(&admission);
//   dataplane.ProcessRegistrations([&](const RegistrationRequest& r) {
//     return job_control.RegisterInBand(r, now);   // Allow(), then Record() once added
//   });
//   admission.ExpireIdle(now);   // every control loop pass; it looks every 100 ms
//
// Thread safety: every method is [control] (the job table's writer thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "aggregator/job_table.h"
#include "config/config.h"
#include "dataplane/port_stats.h"

namespace aggswitch::control {

// A token bucket: `per_second` a second, at most `burst` saved.
class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket() = default;
  TokenBucket(uint32_t per_second, uint32_t burst, Clock::time_point now)
      : per_second_(per_second), burst_(burst), tokens_(burst), last_(now) {}
  // Takes a token when there is one.
  bool Take(Clock::time_point now);

 private:
  double per_second_ = 0;
  double burst_ = 0;
  double tokens_ = 0;
  Clock::time_point last_{};
};

class InBandAdmission {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    bool enabled = false;  // aggregation.in_band_registration
    uint32_t max_jobs = 1;
    uint32_t idle_timeout_ms = 60000;
    config::RateConfig per_source;
    config::RateConfig total;
  };
  static Options OptionsFrom(const config::AggregationConfig& agg);

  InBandAdmission(aggregator::JobTable& table, Options options);

  // The clock members' datagrams are stamped with (Job::LastSeen, the
  // dataplane's SeenTick) and its ticks in a second. Without it nothing
  // expires.
  void SetClock(std::function<uint32_t()> now, uint32_t ticks_per_second);

  // Whether a registration from `src_ip` (host order) may go on to the job
  // table now: `admitted` when registration is on, both rates have a token
  // and the in-band share has room; else invalid (off), rate_limited or
  // in_band_full.
  dataplane::RegistrationResult Allow(uint32_t src_ip, Clock::time_point now);
  // Counts `job`, just admitted in-band, against the share, and starts its
  // idle clock.
  void Record(const aggregator::Job& job);

  // Removes the in-band jobs that no member sent to for idle_timeout_ms;
  // looks at most every 100 ms. Returns how many it removed.
  size_t ExpireIdle(Clock::time_point now);

  // Removes in-band job `id` so that a provisioned job can take its id;
  // false when there is none.
  bool Displace(uint32_t id);
  // Removes the in-band job idle longest, so that a provisioned job finds
  // room in a full table; false when there is none.
  bool DisplaceIdlest();

  // In-band jobs in the table now, and removed so far by reason.
  uint32_t jobs() const { return static_cast<uint32_t>(admitted_.size()); }
  uint64_t expired() const { return expired_; }
  uint64_t displaced() const { return displaced_; }
  const Options& options() const { return options_; }

 private:
  struct Admitted {
    uint32_t generation = 0;
    uint32_t admitted_tick = 0;
  };
  // Forgets jobs that left the table otherwise (the API removed them).
  void ForgetGone();
  // When job `id` was last active: its latest member datagram, or its admission.
  uint32_t LastActive(const aggregator::Job& job, const Admitted& admitted) const;
  TokenBucket& SourceBucket(uint32_t src_ip, Clock::time_point now);
  bool Remove(uint32_t id);

  aggregator::JobTable& table_;
  const Options options_;
  std::function<uint32_t()> now_;
  uint32_t ticks_per_second_ = 0;
  std::map<uint32_t, Admitted> admitted_;  // by job id
  // Per source address, direct-mapped by a hash of it: bounded memory
  // whatever number of sources. A source that takes over another's entry
  // starts with a full bucket; the switch-wide bucket bounds them all.
  struct Source {
    uint32_t ip = 0;
    bool used = false;
    TokenBucket bucket;
  };
  std::vector<Source> sources_;
  TokenBucket total_;
  bool total_started_ = false;
  Clock::time_point next_sweep_{};
  uint64_t expired_ = 0;
  uint64_t displaced_ = 0;
};

}  // namespace aggswitch::control
