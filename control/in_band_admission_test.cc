// In-band registration against a real JobTable, through JobControl's
// admission as the control loop runs it: rate limits per source and for the
// switch, the in-band share of the table, the checks and defaults config and
// API jobs get, a multi-node job without an upstream refused, idle expiry on
// the members' clock, and provisioned jobs displacing in-band ones.
#include "control/in_band_admission.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "control/job_control.h"

namespace aggswitch::control {
namespace {

using dataplane::RegistrationResult;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The running config's in-band policy: 2 registrations a second per source
// (3 at once), 10 for the switch (5 at once), 4 in-band jobs, quotas 64 and 128.
config::Config Config() {
  config::Config c;
  config::AggregationConfig& agg = c.aggregation;
  agg.enabled = true;
  config::SwitchAddress address;
  address.prefix = {common::Ipv4Addr{0x0a000afd}, 32};  // timers need the switch's own address
  agg.address = address;
  agg.max_fan_in = 16;
  agg.in_band.max_jobs = 4;
  agg.in_band.slots_per_job = 64;
  agg.in_band.held_per_job = 128;
  agg.in_band.idle_timeout_ms = 2000;
  agg.in_band.per_source = {2, 3, {}};
  agg.in_band.total = {10, 5, {}};
  agg.timeout_ms = 25;
  agg.trigger = config::AggTrigger::kBatch;
  return c;
}

dataplane::RegistrationRequest Ask(uint32_t id, uint32_t src_ip, uint64_t key = 0x5eed) {
  dataplane::RegistrationRequest r;
  r.job_id = id;
  r.key = key;
  r.expected = 4;
  r.node_count = 1;
  r.src_ip = src_ip;
  return r;
}

class InBandAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(Config()); }

  void Build(const config::Config& cfg) {
    jobs_.reset();
    admission_.reset();
    auto table = aggregator::JobTable::Create(8, 16);
    ASSERT_TRUE(table.ok());
    table_ = std::move(table).value();
    admission_ = std::make_unique<InBandAdmission>(*table_, InBandAdmission::OptionsFrom(cfg.aggregation));
    admission_->SetClock([this] { return tick_; }, 1000);  // a tick a millisecond
    JobControl::Options options;
    options.config = cfg;
    options.tsc_hz = 1'000'000'000;
    jobs_ = std::make_unique<JobControl>(*table_, options);
    jobs_->SetInBandAdmission(admission_.get());
  }

  RegistrationResult Register(const dataplane::RegistrationRequest& r, Clock::time_point now) {
    return jobs_->RegisterInBand(r, now);
  }

  uint32_t tick_ = 5000;
  Clock::time_point now_ = Clock::now();
  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<InBandAdmission> admission_;
  std::unique_ptr<JobControl> jobs_;
};

TEST_F(InBandAdmissionTest, AdmitsWithTheInBandQuotasAndTheSwitchDefaults) {
  EXPECT_EQ(Register(Ask(7, 1), now_), RegistrationResult::admitted);
  const aggregator::Job* job = table_->Find(7);
  ASSERT_NE(job, nullptr);
  EXPECT_TRUE(job->in_band());
  EXPECT_TRUE(job->is_root());
  // aggregation.timeout_ms and trigger, as a config or API job gets them.
  EXPECT_EQ(job->timeout_cycles(), 25'000'000u);
  EXPECT_TRUE(job->batch());
  EXPECT_EQ(job->slot_quota(), 64u);
  EXPECT_EQ(job->hold_quota(), 128u);
  EXPECT_EQ(job->hold_window(), 42u) << "128 held / 3 other members";
  // Another member of the same job: no token taken, the job is there.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Register(Ask(7, 1), now_), RegistrationResult::existing);
  EXPECT_EQ(Register(Ask(7, 2, 0xbad), now_), RegistrationResult::key_mismatch);
  EXPECT_EQ(admission_->jobs(), 1u);
}

TEST_F(InBandAdmissionTest, OneSourceIsRateLimited) {
  EXPECT_EQ(Register(Ask(1, 1), now_), RegistrationResult::admitted);
  EXPECT_EQ(Register(Ask(2, 1), now_), RegistrationResult::admitted);
  EXPECT_EQ(Register(Ask(3, 1), now_), RegistrationResult::admitted);
  EXPECT_EQ(Register(Ask(4, 1), now_), RegistrationResult::rate_limited) << "burst of 3";
  EXPECT_EQ(Register(Ask(4, 2), now_), RegistrationResult::admitted) << "another source";
  // Half a second later the source has one token again (2 a second).
  now_ += milliseconds(500);
  ASSERT_TRUE(table_->Remove(1).ok());
  EXPECT_EQ(Register(Ask(5, 1), now_), RegistrationResult::admitted);
  EXPECT_EQ(Register(Ask(6, 1), now_), RegistrationResult::rate_limited);
}

TEST_F(InBandAdmissionTest, TheWholeSwitchIsRateLimited) {
  // Five sources, one registration each, use the switch's burst of 5.
  for (uint32_t src = 1; src <= 4; ++src) {
    EXPECT_EQ(Register(Ask(src, src), now_), RegistrationResult::admitted);
  }
  ASSERT_TRUE(table_->Remove(1).ok());
  EXPECT_EQ(Register(Ask(5, 5), now_), RegistrationResult::admitted);
  ASSERT_TRUE(table_->Remove(2).ok());
  EXPECT_EQ(Register(Ask(6, 6), now_), RegistrationResult::rate_limited);
  now_ += milliseconds(100);  // 10 a second: one more
  EXPECT_EQ(Register(Ask(6, 6), now_), RegistrationResult::admitted);
}

TEST_F(InBandAdmissionTest, InBandJobsFillTheirShareOnly) {
  Clock::time_point t = now_;
  for (uint32_t id = 1; id <= 4; ++id) {
    t += milliseconds(500);
    EXPECT_EQ(Register(Ask(id, id), t), RegistrationResult::admitted);
  }
  t += milliseconds(500);
  EXPECT_EQ(Register(Ask(5, 5), t), RegistrationResult::in_band_full);
  // A job the API removed frees its place.
  ASSERT_TRUE(table_->Remove(2).ok());
  EXPECT_EQ(Register(Ask(5, 5), t), RegistrationResult::admitted);
  EXPECT_EQ(admission_->jobs(), 4u);
}

// One datagram takes an id; if its sender says nothing more, the id is free
// again after idle_timeout_ms. A job whose members keep sending stays.
TEST_F(InBandAdmissionTest, IdleJobsExpire) {
  ASSERT_EQ(Register(Ask(1, 1), now_), RegistrationResult::admitted);
  ASSERT_EQ(Register(Ask(2, 2), now_), RegistrationResult::admitted);
  const aggregator::Job* busy = table_->Find(2);
  aggregator::MemberAddr from;
  from.ip = 2;
  tick_ += 1500;
  busy->BindMember(0, from, 0, tick_, 0);
  now_ += milliseconds(200);
  EXPECT_EQ(admission_->ExpireIdle(now_), 0u);
  tick_ += 600;  // job 1 idle 2100 ms, job 2 600 ms
  now_ += milliseconds(200);
  EXPECT_EQ(admission_->ExpireIdle(now_), 1u);
  EXPECT_EQ(table_->Find(1), nullptr);
  EXPECT_NE(table_->Find(2), nullptr);
  EXPECT_EQ(admission_->expired(), 1u);
  // Looked at no more than every 100 ms.
  tick_ += 5000;
  EXPECT_EQ(admission_->ExpireIdle(now_ + milliseconds(50)), 0u);
  EXPECT_EQ(admission_->ExpireIdle(now_ + milliseconds(150)), 1u);
  // The id can be taken again, under another key.
  EXPECT_EQ(Register(Ask(1, 9, 0x600d), now_ + milliseconds(1000)), RegistrationResult::admitted);
}

TEST_F(InBandAdmissionTest, ProvisionedJobsDisplaceInBandOnes) {
  Clock::time_point t = now_;
  for (uint32_t id = 1; id <= 3; ++id) {
    t += milliseconds(500);
    ASSERT_EQ(Register(Ask(id, id), t), RegistrationResult::admitted);
  }
  EXPECT_FALSE(admission_->Displace(99));
  EXPECT_TRUE(admission_->Displace(2));
  EXPECT_EQ(table_->Find(2), nullptr);
  // The idlest: job 3's member sent last, job 1 was admitted first.
  aggregator::MemberAddr from;
  tick_ += 100;
  table_->Find(3)->BindMember(0, from, 0, tick_, 0);
  EXPECT_TRUE(admission_->DisplaceIdlest());
  EXPECT_EQ(table_->Find(1), nullptr);
  EXPECT_NE(table_->Find(3), nullptr);
  EXPECT_EQ(admission_->displaced(), 2u);
  // A config or API job is never displaced.
  aggregator::JobSpec api;
  api.id = 50;
  api.members = 2;
  api.origin = aggregator::JobSpec::Origin::kApi;
  ASSERT_TRUE(table_->Add(api).ok());
  EXPECT_FALSE(admission_->Displace(50));
  EXPECT_TRUE(admission_->DisplaceIdlest());  // job 3
  EXPECT_FALSE(admission_->DisplaceIdlest());
  EXPECT_NE(table_->Find(50), nullptr);
}

TEST_F(InBandAdmissionTest, RegistrationOffAdmitsNothing) {
  config::Config off = Config();
  off.aggregation.in_band_registration = false;
  Build(off);
  EXPECT_EQ(Register(Ask(1, 1), now_), RegistrationResult::invalid);
  EXPECT_EQ(table_->size(), 0u);
}

// The task info gets the checks of a config job: more members than
// max_fan_in, or none, are refused, and nothing is added.
TEST_F(InBandAdmissionTest, TaskInfoIsCheckedAsAConfigJob) {
  dataplane::RegistrationRequest wide = Ask(1, 1);
  wide.expected = 17;
  EXPECT_EQ(Register(wide, now_), RegistrationResult::invalid);
  dataplane::RegistrationRequest none = Ask(2, 2);
  none.expected = 0;
  EXPECT_EQ(Register(none, now_), RegistrationResult::invalid);
  EXPECT_EQ(table_->size(), 0u);
  EXPECT_EQ(admission_->jobs(), 0u);
}

// A job of several nodes at a switch with no way upstream: its local sum is
// not the result, so the job is refused rather than answered as a root.
TEST_F(InBandAdmissionTest, MultiNodeJobWithoutUpstreamIsRefused) {
  dataplane::RegistrationRequest two = Ask(1, 1);
  two.node_count = 2;
  EXPECT_EQ(Register(two, now_), RegistrationResult::no_upstream);
  EXPECT_EQ(table_->Find(1), nullptr);
  two.node_count = 1;
  EXPECT_EQ(Register(two, now_), RegistrationResult::admitted);
}

}  // namespace
}  // namespace aggswitch::control
