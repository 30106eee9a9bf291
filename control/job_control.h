// Job management on the control side: the control thread is the only writer
// of the JobTable, and the HTTP threads reach it through a small command queue.
//
// civetweb's threads must not call JobTable::Add/Remove (the table has one
// writer) nor walk the table (a job they hold could be reclaimed under them:
// they are not QSBR readers). So an API request posts a command (add, remove,
// list) into a mutex + condition variable queue and waits up to a second for
// the answer; the control loop drains the queue every iteration
// (ProcessPending) on the control thread, where adding, removing and reading
// jobs is safe. Worker lcores never touch this queue.
//
// Per-job counters. The dataplane counts per job index (Job::index()), and an
// index passes to another job once the old one is removed and reclaimed; the
// reclaim hook zeroes the index's counters at that moment. Only the control
// thread adds, removes and reclaims, so only there are a job and its index
// certain to belong together. That is why a snapshot reads each job's counters
// (SetCounterReader) in the same control-thread step that lists the job: no
// Add, Remove or Reclaim can come between the two, so a job's counters are
// never another job's, and never include counts of an earlier owner of the
// index. A reader on an HTTP thread could pair job A's id with index i after A
// was removed, reclaimed and i given to job B.
//
//   ASSIGN_OR_RETURN(auto table, aggregator::JobTable::Create(agg.max_jobs, agg.max_fan_in));
//   RETURN_IF_ERROR(AddConfigJobs(*table, agg));
//   JobControl jobs(*table, {agg.in_band_registration, port_names});
//   ASSIGN_OR_RETURN(auto dp, dataplane::Dataplane::Create(cfg, table.get()));
//   jobs.SetCounterReader([&dp = *dp](uint16_t i) { return CollectJobCounters(dp, i); });
//   DataSource source = ...; jobs.Attach(source);     // the /api/v1/jobs routes
//   while (running) { jobs.ProcessPending(); table->Reclaim(); ... }   // control loop
//
// Thread safety: Add/Remove/List [any thread but the control thread: they
// wait for it]; ProcessPending, Snapshot, SetCounterReader and the
// constructor [control]. AddConfigJobs [control].
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "common/status.h"
#include "config/config.h"
#include "control/api.h"
#include "control/stats_snapshot.h"

namespace aggswitch::aggregator {
class JobTable;
}  // namespace aggswitch::aggregator

namespace aggswitch::control {

// Jobs currently assigned to each TAN address at this switch (least_load).
using TanLoad = std::map<uint32_t, uint32_t>;

// The TAN a root job uses (docs/stragglers.md: fixed, random by job id,
// least load, fewest hops, or the root itself) under `tan` (nullptr: none configured). [control]
struct TanChoice {
  aggregator::JobSpec::Tan mode = aggregator::JobSpec::Tan::kNone;
  aggregator::JobPeer peer;  // kRemote
};
TanChoice ChooseTan(const config::TanConfig* tan, uint32_t job_id, const TanLoad& load);

// The JobSpec of aggregation.jobs[i]; `load` is updated with its TAN. [control]
aggregator::JobSpec JobSpecFromConfig(const config::AggregationJobConfig& job,
                                      const config::AggregationConfig& agg, uint64_t tsc_hz,
                                      TanLoad& load);

// Adds every job of aggregation.jobs with Origin::kConfig (JobSpecFromConfig;
// `tsc_hz` converts the timers); the first failure is returned naming its
// key path ("aggregation.jobs[2]: job 7 already exists"). A validated config
// does not fail. [control]
common::Status AddConfigJobs(aggregator::JobTable& table, const config::AggregationConfig& agg,
                             uint64_t tsc_hz);

// Reads job index `index`'s counters (CollectJobCounters). Called on the
// control thread only, while the index belongs to the job being snapshotted.
using JobCounterReader = std::function<JobCounterValues(uint16_t index)>;

// The control thread's view of the table as the API shows it, jobs by id,
// each with its counters when `counters` is set. [control]
JobTableSnapshot SnapshotJobTable(const aggregator::JobTable& table, bool in_band_registration,
                                  const std::vector<std::string>& port_names,
                                  const JobCounterReader& counters = {});

class JobControl {
 public:
  struct Options {
    bool in_band_registration = true;         // shown by the API
    std::vector<std::string> port_names;      // by port index, to name a member's port
    std::chrono::milliseconds timeout{1000};  // how long a caller waits for the control thread
    size_t max_pending = 64;                  // commands queued at once
  };

  // `table` must outlive this object. [control]
  JobControl(aggregator::JobTable& table, Options options);
  ~JobControl();
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  // --- Callers (HTTP threads) [any thread but the control thread] ---
  // Each waits for the control thread for at most `timeout`. When it does not
  // answer in time the command is withdrawn, nothing changes, and the result
  // is Unavailable. A full queue is Unavailable too.

  // Adds a job with Origin::kApi; the new job as the API shows it, or the
  // table's error (AlreadyExists, ResourceExhausted, InvalidArgument).
  common::Result<JobSnapshot> Add(const JobRequest& request);
  // Removes a job; NotFound when absent.
  common::Status Remove(uint32_t id);
  // The whole table.
  common::Result<JobTableSnapshot> List();
  // Runs `fn` on the control thread and returns its status (or Unavailable
  // when the control thread did not take it in time). `fn` may refer to the
  // caller's locals: the caller waits for it once it started. [any thread but
  // the control thread]
  common::Status RunOnControl(std::function<common::Status()> fn);

  // Points the job functions of `source` at this object (which must outlive
  // the source's users). [control]
  void Attach(DataSource& source);

  // --- The control thread ---

  // From now on every job snapshot (List, Add, Snapshot) carries the job's
  // counters read through `reader`. The job table exists before the
  // dataplane that counts, hence a setter rather than an Option; set it
  // before the HTTP server starts. An empty reader turns counters off. [control]
  void SetCounterReader(JobCounterReader reader);

  // Runs every queued command and wakes its caller. Returns how many ran. [control]
  size_t ProcessPending();
  // The table now, without the queue. [control]
  JobTableSnapshot Snapshot() const;
  aggregator::JobTable& table() { return table_; }  // [control]

 private:
  struct Command;

  // Queues `command` and waits for it; Unavailable on a timeout or full queue.
  common::Status Post(const std::shared_ptr<Command>& command);
  void Execute(Command& command);

  aggregator::JobTable& table_;
  const Options options_;
  JobCounterReader counters_;  // [control]

  std::mutex mu_;
  std::condition_variable done_;
  std::deque<std::shared_ptr<Command>> queue_;  // guarded by mu_
};

}  // namespace aggswitch::control
