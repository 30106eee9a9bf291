// The API jobs' state file: JobStateFile on its own, and through JobControl
// as the switch uses it: a job added through the API comes back after a
// restart, with the TAN the API gave it; a file that cannot be written
// refuses the add or the TAN change; a saved job the config now refuses is
// kept; a broken file is moved aside.
#include "control/job_state_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "control/job_control.h"

namespace aggswitch::control {
namespace {

using nlohmann::json;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SavedJobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/aggswitch-job-state-test." + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/jobs.json";
  }
  void TearDown() override {
    StopControl();
    std::filesystem::remove_all(dir_);
  }
  // A fresh table and JobControl, as a switch that (re)starts.
  void Start(const std::string& state_file) {
    StopControl();
    jobs_.reset();
    auto table = aggregator::JobTable::Create(8, 8);
    ASSERT_TRUE(table.ok());
    table_ = std::move(table).value();
    JobControl::Options options;
    options.config.aggregation.state_file = state_file;
    options.tsc_hz = 2'000'000'000;
    jobs_ = std::make_unique<JobControl>(*table_, options);
  }
  void StartControl() {
    stop_ = false;
    control_ = std::thread([this] {
      while (!stop_.load()) {
        jobs_->ProcessPending();
        table_->Reclaim();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  void StopControl() {
    stop_ = true;
    if (control_.joinable()) control_.join();
  }
  common::Result<JobSnapshot> Add(const std::string& body) {
    auto request = ParseJobRequest(body);
    if (!request.ok()) return request.status();
    return jobs_->Add(*request);
  }
  json Saved() { return json::parse(Read(path_)); }

  std::string dir_, path_;
  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<JobControl> jobs_;
  std::thread control_;
  std::atomic<bool> stop_{false};
};

TEST_F(SavedJobsTest, AnApiJobComesBackAfterARestart) {
  Start(path_);
  ASSERT_EQ(*jobs_->RestoreSavedJobs(), 0u) << "no file yet: nothing to restore";
  StartControl();
  ASSERT_TRUE(Add(R"({"id": 9, "key": "0x99", "members": 3})").ok());
  ASSERT_TRUE(Add(R"({"id": 12, "key": 5, "members": 2, "mode": "aggregate"})").ok());
  json saved = Saved();
  ASSERT_EQ(saved["jobs"].size(), 2u);
  EXPECT_EQ(saved["jobs"][0]["id"], 9);
  EXPECT_EQ(saved["jobs"][0]["key"], "0x99");
  EXPECT_EQ(std::filesystem::status(path_).permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::none) << "the keys are not for everyone";

  // The process goes; a new one starts from the same file.
  Start(path_);
  auto restored = jobs_->RestoreSavedJobs();
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, 2u);
  const aggregator::Job* job = table_->Find(9);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->key(), 0x99u);
  EXPECT_EQ(job->origin(), aggregator::JobSpec::Origin::kApi);
  ASSERT_NE(table_->Find(12), nullptr);

  StartControl();
  ASSERT_TRUE(jobs_->Remove(9).ok());
  saved = Saved();
  ASSERT_EQ(saved["jobs"].size(), 1u);
  EXPECT_EQ(saved["jobs"][0]["id"], 12);
}

TEST_F(SavedJobsTest, AnAddTheFileCannotKeepIsRefused) {
  Start(dir_ + "/no-such-dir/jobs.json");
  StartControl();
  auto added = Add(R"({"id": 9, "key": 1, "members": 2})");
  ASSERT_FALSE(added.ok());
  EXPECT_EQ(added.status().code(), common::StatusCode::kUnavailable);
  EXPECT_NE(added.status().message().find("job 9 not added"), std::string::npos) << added.status().message();
  EXPECT_EQ(table_->Find(9), nullptr) << "a job the file cannot keep is not running either";
}

TEST_F(SavedJobsTest, ASavedJobTheConfigNowRefusesStaysInTheFile) {
  std::ofstream(path_) << R"({"version": 1, "jobs": [{"id": 3, "key": 1, "members": 2},
                                                    {"id": 4, "key": 1, "members": 99}]})";
  Start(path_);
  auto restored = jobs_->RestoreSavedJobs();
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 1u) << "99 members is over aggregation.max_fan_in";
  EXPECT_NE(table_->Find(3), nullptr);
  EXPECT_EQ(table_->Find(4), nullptr);
  StartControl();
  ASSERT_TRUE(Add(R"({"id": 5, "key": 1, "members": 2})").ok());
  EXPECT_EQ(Saved()["jobs"].size(), 3u) << "job 4 is not lost by the next write";
  EXPECT_TRUE(jobs_->Remove(4).ok()) << "DELETE takes a refused saved job out of the file";
  EXPECT_EQ(Saved()["jobs"].size(), 2u);
}

// The TAN the API gave an API job (POST /api/v1/jobs/<id>/tan) is the one
// it has after a restart, and so is the member that runs it.
TEST_F(SavedJobsTest, AnApiJobKeepsItsTanAcrossARestart) {
  Start(path_);
  StartControl();
  ASSERT_TRUE(Add(R"({"id": 9, "key": 1, "members": 3, "tan_member": 2})").ok());
  auto choose = [&](const std::string& body) {
    auto request = ParseTanBody(body);
    if (!request.ok()) return common::Result<TanReport>(request.status());
    return jobs_->Tan(9, *request);
  };
  auto changed = choose(R"({"strategy": "fewest_hops", "candidates": [
      {"address": "10.0.9.50", "port": 47100, "hops": 3}, {"address": "10.0.9.21", "hops": 2}]})");
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(changed->tan.address.ToString(), "10.0.9.21");
  ASSERT_TRUE(choose(R"({"member": 1})").ok());
  json saved = Saved()["jobs"][0];
  EXPECT_EQ(saved["tan"]["strategy"], "fewest_hops") << saved;
  EXPECT_EQ(saved["tan"]["candidates"].size(), 2u) << saved;
  EXPECT_EQ(saved["tan_member"], 1) << saved;

  Start(path_);
  ASSERT_EQ(*jobs_->RestoreSavedJobs(), 1u);
  StartControl();
  auto report = jobs_->Tan(9, std::nullopt);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->tan.mode, "remote");
  EXPECT_EQ(report->tan.address.ToString(), "10.0.9.21");
  EXPECT_EQ(report->tan.port, config::kDefaultAggregationUdpPort);
  ASSERT_TRUE(report->member.has_value());
  EXPECT_EQ(*report->member, 1);
  ASSERT_TRUE(report->chosen.has_value());
  EXPECT_EQ(report->chosen->source, TanReport::Source::kApi);
  EXPECT_EQ(report->chosen->tan.candidates.size(), 2u);

  // No member: gone from the file too, and after the next restart.
  ASSERT_TRUE(choose(R"({"member": null})").ok());
  EXPECT_FALSE(Saved()["jobs"][0].contains("tan_member")) << Saved();
  Start(path_);
  ASSERT_EQ(*jobs_->RestoreSavedJobs(), 1u);
  StartControl();
  report = jobs_->Tan(9, std::nullopt);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->member.has_value());
  EXPECT_EQ(report->tan.address.ToString(), "10.0.9.21");
}

// A TAN change the file cannot keep is not made: a restart would undo it.
TEST_F(SavedJobsTest, ATanChangeTheFileCannotKeepIsRefused) {
  Start(path_);
  StartControl();
  ASSERT_TRUE(Add(R"({"id": 9, "key": 1, "members": 2})").ok());
  std::filesystem::remove_all(dir_);  // the next write fails
  auto request = ParseTanBody(R"({"candidates": [{"address": "10.0.9.50"}]})");
  ASSERT_TRUE(request.ok());
  auto changed = jobs_->Tan(9, *request);
  ASSERT_FALSE(changed.ok());
  EXPECT_EQ(changed.status().code(), common::StatusCode::kUnavailable);
  EXPECT_NE(changed.status().message().find("job 9's TAN not changed"), std::string::npos)
      << changed.status().message();
  auto report = jobs_->Tan(9, std::nullopt);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->tan.mode, "none") << "the job's TAN is what it was";
  EXPECT_FALSE(report->chosen.has_value());
}

TEST_F(SavedJobsTest, ABrokenFileIsMovedAsideNotOverwritten) {
  std::ofstream(path_) << "{\"version\": 1, \"jobs\": [{\"id\": 3, ";
  Start(path_);
  auto restored = jobs_->RestoreSavedJobs();
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.status().message().find(path_ + ".bad"), std::string::npos) << restored.status().message();
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_EQ(Read(path_ + ".bad"), "{\"version\": 1, \"jobs\": [{\"id\": 3, ");
  for (const char* text : {R"({"version": 2, "jobs": []})", R"({"version": 1, "jobs": [{"key": 1}]})", "[]"}) {
    std::ofstream(path_, std::ios::trunc) << text;
    EXPECT_FALSE(JobStateFile(path_).Load().ok()) << text;
  }
}

}  // namespace
}  // namespace aggswitch::control
