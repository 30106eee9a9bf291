// The parameter store on its own: keeping, replacing, finding and releasing
// copies, its two bounds, and the sweep of removed jobs' copies.
#include "dataplane/parameter_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <tuple>
#include <vector>

namespace aggswitch::dataplane {
namespace {

constexpr uint32_t kMaxPayload = 64;

class ParameterStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = aggregator::JobTable::Create(8, 16);
    ASSERT_TRUE(t.ok());
    jobs_ = std::move(t).value();
  }

  const aggregator::Job* AddJob(uint32_t id, uint32_t store_quota = 0) {
    aggregator::JobSpec spec;
    spec.id = id;
    spec.key = 1;
    spec.members = 4;
    spec.mode = aggregator::JobSpec::Mode::kStore;
    spec.store_quota = store_quota;
    auto job = jobs_->Add(spec);
    EXPECT_TRUE(job.ok());
    return job.ok() ? *job : nullptr;
  }

  // A contribution's parsed view over `bytes`: seq, int32 elements.
  aggregator::AggPacket Packet(uint32_t seq, const std::vector<int32_t>& values) {
    aggregator::AggFields f;
    f.seq = seq;
    f.elem_count = static_cast<uint16_t>(values.size());
    f.scale = -3;
    auto& buf = buffers_.emplace_back(sizeof(aggregator::AggHeader) + 4 * values.size());
    const uint32_t n = aggregator::BuildAggregation(
        f, nullptr, 0, reinterpret_cast<const uint8_t*>(values.data()),
        static_cast<uint32_t>(4 * values.size()), buf.data(), static_cast<uint32_t>(buf.size()));
    EXPECT_EQ(n, buf.size());
    aggregator::AggPacket pkt;
    EXPECT_EQ(aggregator::ParseAggregation(buf.data(), n, &pkt), aggregator::WireError::kOk);
    return pkt;
  }

  static std::vector<int32_t> Values(const ParameterStore::Copy& c) {
    std::vector<int32_t> v(c.len() / 4);
    std::memcpy(v.data(), c.data, c.len());
    return v;
  }

  std::unique_ptr<aggregator::JobTable> jobs_;
  std::vector<std::vector<uint8_t>> buffers_;
};

TEST_F(ParameterStoreTest, KeepsEachMembersLatestContributionPerChunk) {
  ParameterStore store(16, kMaxPayload, jobs_->max_jobs(), 1);
  const aggregator::Job* job = AddJob(7);
  for (uint16_t m = 0; m < 4; ++m) {
    EXPECT_EQ(store.Keep(*job, m, Packet(5, {m, m * 10})), ParameterStore::Kept::kStored);
  }
  EXPECT_EQ(store.used(), 4u);
  EXPECT_EQ(store.JobUsed(job->index(), job->generation()), 4u);
  for (uint16_t m = 0; m < 4; ++m) {
    const ParameterStore::Copy* c = store.Find(*job, 5, m);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(Values(*c), (std::vector<int32_t>{m, m * 10}));
    EXPECT_EQ(c->elem_count, 2u);
    EXPECT_EQ(c->scale, -3);
  }
  EXPECT_EQ(store.Find(*job, 6, 0), nullptr) << "another chunk";
  // The member's next contribution to the chunk replaces the copy in place.
  EXPECT_EQ(store.Keep(*job, 2, Packet(5, {99, 98, 97})), ParameterStore::Kept::kReplaced);
  EXPECT_EQ(store.used(), 4u);
  EXPECT_EQ(Values(*store.Find(*job, 5, 2)), (std::vector<int32_t>{99, 98, 97}));
}

TEST_F(ParameterStoreTest, RefusesPastTheJobsShareAndPastItsBuffers) {
  // Quota 6 over 2 workers: 3 here.
  ParameterStore store(5, kMaxPayload, jobs_->max_jobs(), 2);
  const aggregator::Job* a = AddJob(1, 6);
  const aggregator::Job* b = AddJob(2);
  for (uint32_t seq = 0; seq < 3; ++seq) {
    EXPECT_EQ(store.Keep(*a, 0, Packet(seq, {1})), ParameterStore::Kept::kStored);
  }
  EXPECT_EQ(store.Keep(*a, 0, Packet(3, {1})), ParameterStore::Kept::kJobFull);
  EXPECT_EQ(store.Find(*a, 3, 0), nullptr) << "nothing of a refused contribution is kept";
  EXPECT_EQ(store.Keep(*a, 0, Packet(1, {2})), ParameterStore::Kept::kReplaced)
      << "a replacement needs no new buffer";
  EXPECT_EQ(store.Keep(*b, 0, Packet(0, {1})), ParameterStore::Kept::kStored);
  EXPECT_EQ(store.Keep(*b, 1, Packet(0, {1})), ParameterStore::Kept::kStored);
  EXPECT_EQ(store.Keep(*b, 2, Packet(0, {1})), ParameterStore::Kept::kFull);
  EXPECT_EQ(store.used(), 5u);
  // A released copy makes room.
  store.Release(store.Find(*a, 0, 0));
  EXPECT_EQ(store.used(), 4u);
  EXPECT_EQ(store.JobUsed(a->index(), a->generation()), 2u);
  EXPECT_EQ(store.Keep(*b, 2, Packet(0, {1})), ParameterStore::Kept::kStored);
  EXPECT_EQ(store.Keep(*a, 0, Packet(9, {1})), ParameterStore::Kept::kFull);
}

// A final result's buffer counts as the job's, within its share as a kept
// copy is: a job whose main server never ACKs fills its own share, never
// the store.
TEST_F(ParameterStoreTest, FinalResultBuffersStayWithinTheJobsShare) {
  ParameterStore store(4, kMaxPayload, jobs_->max_jobs(), 1);
  const aggregator::Job* job = AddJob(4, 2);
  const aggregator::Job* other = AddJob(5, 2);
  EXPECT_EQ(store.Keep(*job, 0, Packet(0, {1})), ParameterStore::Kept::kStored);
  EXPECT_TRUE(store.HasRoomFor(*job));
  const uint32_t a = store.TakeBuffer(*job);
  EXPECT_NE(a, ParameterStore::kNoBuffer);
  EXPECT_FALSE(store.HasRoomFor(*job));
  EXPECT_EQ(store.TakeBuffer(*job), ParameterStore::kNoBuffer) << "the job's share bounds them";
  EXPECT_EQ(store.JobUsed(job->index(), job->generation()), 2u);
  EXPECT_EQ(store.used(), 2u);
  // Another job's share is whole.
  const uint32_t b = store.TakeBuffer(*other);
  const uint32_t c = store.TakeBuffer(*other);
  EXPECT_NE(b, ParameterStore::kNoBuffer);
  EXPECT_NE(c, ParameterStore::kNoBuffer);
  EXPECT_NE(b, c);
  EXPECT_FALSE(store.HasRoomFor(*other));
  store.GiveBuffer(job->index(), job->generation(), a);
  EXPECT_EQ(store.JobUsed(job->index(), job->generation()), 1u);
  EXPECT_EQ(store.used(), 3u);
  EXPECT_TRUE(store.HasRoomFor(*job));
}

// Many keys kept and released at random: every kept copy stays findable with
// its bytes (deletion moves entries back within their probe runs), and the
// counts agree with a reference map.
TEST_F(ParameterStoreTest, RandomKeepAndReleaseAgreeWithAReference) {
  ParameterStore store(200, kMaxPayload, jobs_->max_jobs(), 1);
  const aggregator::Job* job = AddJob(3);
  std::mt19937 rng(11);
  std::map<std::pair<uint32_t, uint16_t>, int32_t> ref;
  for (int step = 0; step < 20000; ++step) {
    const uint32_t seq = rng() % 150;
    const uint16_t member = static_cast<uint16_t>(rng() % 4);
    const auto key = std::make_pair(seq, member);
    if (rng() % 3 != 0) {
      const auto v = static_cast<int32_t>(rng());
      const ParameterStore::Kept k = store.Keep(*job, member, Packet(seq, {v}));
      if (k == ParameterStore::Kept::kFull || k == ParameterStore::Kept::kJobFull) {
        ASSERT_EQ(ref.size(), 200u);
        ASSERT_EQ(ref.count(key), 0u);
        continue;
      }
      ASSERT_EQ(k == ParameterStore::Kept::kReplaced, ref.count(key) == 1);
      ref[key] = v;
    } else if (const ParameterStore::Copy* c = store.Find(*job, seq, member)) {
      ASSERT_EQ(ref.count(key), 1u);
      store.Release(c);
      ref.erase(key);
    } else {
      ASSERT_EQ(ref.count(key), 0u);
    }
    if (step % 1000 == 0) buffers_.clear();
  }
  EXPECT_EQ(store.used(), ref.size());
  for (const auto& [key, v] : ref) {
    const ParameterStore::Copy* c = store.Find(*job, key.first, key.second);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(Values(*c), std::vector<int32_t>{v});
  }
}

TEST_F(ParameterStoreTest, SweepFreesTheCopiesOfRemovedJobs) {
  ParameterStore store(64, kMaxPayload, jobs_->max_jobs(), 1);
  const aggregator::Job* gone = AddJob(1);
  const aggregator::Job* kept = AddJob(2);
  for (uint32_t seq = 0; seq < 20; ++seq) {
    ASSERT_EQ(store.Keep(*gone, 0, Packet(seq, {1})), ParameterStore::Kept::kStored);
    ASSERT_EQ(store.Keep(*kept, 1, Packet(seq, {2})), ParameterStore::Kept::kStored);
  }
  const uint32_t final_buffer = store.TakeBuffer(*kept);
  ASSERT_NE(final_buffer, ParameterStore::kNoBuffer);
  EXPECT_EQ(store.used(), 41u);
  ASSERT_TRUE(jobs_->Remove(1).ok());
  // The whole table, a few positions a call.
  for (int i = 0; i < 64; ++i) store.Sweep(*jobs_, 4);
  EXPECT_EQ(store.used(), 21u);
  EXPECT_EQ(store.JobUsed(kept->index(), kept->generation()), 21u);
  for (uint32_t seq = 0; seq < 20; ++seq) EXPECT_NE(store.Find(*kept, seq, 1), nullptr);
  store.GiveBuffer(kept->index(), kept->generation(), final_buffer);
  EXPECT_EQ(store.used(), 20u);
}

}  // namespace
}  // namespace aggswitch::dataplane
