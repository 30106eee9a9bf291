// Job management on the control side: the control thread is the only writer
// of the JobTable, and the HTTP threads reach it through a small command queue.
//
// civetweb's threads must not call JobTable::Add/Remove (the table has one
// writer) nor walk the table (a job they hold could be reclaimed under them:
// they are not QSBR readers). So an API request posts a command (add, remove,
// list, TAN) into a mutex + condition variable queue and waits up to a second for
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
// Jobs from the API are config jobs in all but their origin. A JobRequest
// (api.h) is what aggregation.jobs[i] would hold; Add() checks it with
// config::Validate() as aggregation.jobs[0] of the running config
// (Options::config), so a mistake gets the config's message, named by the
// body's key ("switches[1].covers[0]: expected ..."), and the control thread
// builds it with JobSpecFromConfig() and the config's switch-wide defaults.
// A TAN choice (Tan(), POST /api/v1/jobs/<id>/tan) is checked the same way,
// as the tan of such a job, picked by ChooseTan() and published with
// Job::SetTan(). least_load counts, at the moment of the choice, the jobs in
// the table whose TAN each candidate is (CountTanLoad): config and API jobs
// alike, and a job that is removed or changes its TAN no longer counts for
// the old one. After an add or a TAN change the change hook runs (on the
// control thread), so that TreeControl resolves the new next hops at once.
// A new TAN gets the first data and late data of chunks that time out from
// then on; a chunk whose first data went to the old TAN ends there (its late
// data now goes to the new one, so the old TAN gives it up as INCOMPLETE):
// change a TAN between operations.
//
//   ASSIGN_OR_RETURN(auto table, aggregator::JobTable::Create(agg.max_jobs, agg.max_fan_in));
//   RETURN_IF_ERROR(AddConfigJobs(*table, cfg.aggregation, tsc_hz));
//   JobControl jobs(*table, {.in_band_registration = ..., .port_names = ..., .config = cfg,
//                            .tsc_hz = tsc_hz});
//   ASSIGN_OR_RETURN(auto dp, dataplane::Dataplane::Create(cfg, table.get()));
//   jobs.SetCounterReader([&dp = *dp](uint16_t i) { return CollectJobCounters(dp, i); });
//   jobs.SetChangeHook([&tree] { tree.ScanSoon(); });
//   DataSource source = ...; jobs.Attach(source);     // the /api/v1/jobs routes
//   while (running) { jobs.ProcessPending(); table->Reclaim(); ... }   // control loop
//
// In-band jobs take the same way: RegisterInBand turns a datagram's task
// info into the job config it describes and admits it as an API job would
// be, with the in-band quotas, within the in-band policy.
//
// Thread safety: Add/Remove/List/Tan/RunOnControl [any thread but the
// control thread: they wait for it]; ProcessPending, RegisterInBand,
// Snapshot, SetCounterReader, SetChangeHook and the constructor [control].
// PlaceJob, AdmitJob, AddConfigJobs, CountTanLoad [control]; ChooseTan,
// JobSpecFromConfig, InBandJobConfig [any].
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
#include <optional>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/slot_placement.h"
#include "common/status.h"
#include "config/config.h"
#include "control/api.h"
#include "control/job_state_file.h"
#include "control/stats_snapshot.h"
#include "dataplane/port_stats.h"

namespace aggswitch::aggregator {
class JobTable;
}  // namespace aggswitch::aggregator

namespace aggswitch::control {

class InBandAdmission;

// Jobs currently assigned to each TAN address at this switch (least_load).
using TanLoad = std::map<uint32_t, uint32_t>;

// The TAN a root job uses (docs/stragglers.md: fixed, random by job id,
// least load, fewest hops, or the root itself) under `tan` (nullptr: none
// configured); `load` is what least_load compares. [any]
struct TanChoice {
  aggregator::JobSpec::Tan mode = aggregator::JobSpec::Tan::kNone;
  aggregator::JobPeer peer;  // kRemote
};
TanChoice ChooseTan(const config::TanConfig* tan, uint32_t job_id, const TanLoad& load);

// The jobs of `table` whose TAN is each address, leaving out `except_job`
// (the job being chosen for). [control]
TanLoad CountTanLoad(const aggregator::JobTable& table, uint32_t except_job = 0);

// The JobSpec of aggregation.jobs[i], an API job or an in-band job (by
// `origin`): its own keys, else the switch-wide defaults of `agg` (timeout,
// trigger, TAN, bypass entries), and the slot and hold quotas of its origin;
// `load` is updated with its TAN. An in-band job of several nodes
// (InBandJobConfig) has agg.upstreams as its parents. [any]
aggregator::JobSpec JobSpecFromConfig(const config::AggregationJobConfig& job,
                                      const config::AggregationConfig& agg, uint64_t tsc_hz,
                                      TanLoad& load,
                                      aggregator::JobSpec::Origin origin =
                                          aggregator::JobSpec::Origin::kConfig);

// Chooses where `spec` (a job of `table` to be) lives in its slot region
// (aggregator/slot_placement.h): the partition its placement_hint names, else
// one by aggregation.placement (round_robin: after the newest partition of
// the region, meeting none if it can; random), each of the job's slot quota;
// hash leaves spec.partition empty. [control]
void PlaceJob(const aggregator::JobTable& table, const config::AggregationJobConfig& job,
              const config::AggregationConfig& agg, aggregator::JobSpec& spec);

// The one way into the job table, whatever a job's origin: config jobs at
// start, API jobs and in-band registrations. Builds the job's JobSpec
// (JobSpecFromConfig), adds it and logs "job <id> added (<origin>): ...".
// `job` passed its checks already (config::Validate, CheckAsConfigJob).
// The table's errors as JobTable::Add. [control]
common::Result<const aggregator::Job*> AdmitJob(aggregator::JobTable& table,
                                                const config::AggregationJobConfig& job,
                                                const config::AggregationConfig& agg,
                                                aggregator::JobSpec::Origin origin,
                                                uint64_t tsc_hz, TanLoad& load);

// The job an in-band registration asks for, as aggregation.jobs[i] would
// hold it: id, key, `expected` members, ordered; nodes = node_count. With
// one node its members are the nodes 0..expected-1. With several, node ids
// are the job's global ranks, `expected` consecutive ones at each leaf
// switch: its members are the sender's block, the node ids
// [b * expected, (b + 1) * expected) for b = node_id / expected, and the
// leaf's node id at its parent is kInBandLeafBase + b. A registration from
// such an id (a leaf's partial at its parent) has the leaves as members,
// kInBandLeafBase .. kInBandLeafBase + expected - 1, which JobSpecFromConfig
// makes child switches that cover only themselves (docs/aggregation.md,
// "Several nodes"). [any]
config::AggregationJobConfig InBandJobConfig(const dataplane::RegistrationRequest& request);

// The node id of leaf 0 of an in-band job of several nodes at its parent:
// past every rank's (a rank's node id is its global rank), so that a missing
// list or late data that names a rank is never taken for a leaf.
inline constexpr uint16_t kInBandLeafBase = 0xF000;

// Adds every job of aggregation.jobs with Origin::kConfig (AdmitJob;
// `tsc_hz` converts the timers); the first failure is returned naming its
// key path ("aggregation.jobs[2]: job 7 already exists"). A validated config
// does not fail. [control]
common::Status AddConfigJobs(aggregator::JobTable& table, const config::AggregationConfig& agg,
                             uint64_t tsc_hz);

// Reads job index `index`'s counters (CollectJobCounters). Called on the
// control thread only, while the index belongs to the job being snapshotted.
using JobCounterReader = std::function<JobCounterValues(uint16_t index)>;
// Reads the store buffers job index `index` of `generation` holds
// (Dataplane::JobStoreBuffers); the same rules as a JobCounterReader.
using JobStoreReader = std::function<uint32_t(uint16_t index, uint32_t generation)>;

class JobControl {
 public:
  struct Options {
    bool in_band_registration = true;         // shown by the API
    std::vector<std::string> port_names;      // by port index, to name a member's port
    std::chrono::milliseconds timeout{1000};  // how long a caller waits for the control thread
    size_t max_pending = 64;                  // commands queued at once
    // The running configuration. An API job takes the switch-wide defaults
    // from it (aggregation.timeout_ms, trigger, tan, bypass.subswitch) and is
    // checked against it as a config job would be (max_fan_in, the switch's
    // own addresses, the VLANs its ports carry, the aggregation address that
    // timers need). Its aggregation.jobs only tell which TAN choice each
    // config job was built with (GET /api/v1/jobs/<id>/tan); they are not kept.
    config::Config config;
    // TSC cycles per second: turns timeout_ms into Job::timeout_cycles and
    // back. Required for API jobs with timers (Add() is Internal without).
    uint64_t tsc_hz = 0;
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

  // Adds a job with Origin::kApi; the new job as the API shows it. An
  // in-band job with its id, or (the table full) the idlest in-band job,
  // makes room (SetInBandAdmission). InvalidArgument when the config's rules
  // refuse it (checked on the calling thread, before the control thread sees
  // it), else the table's error (AlreadyExists, ResourceExhausted,
  // InvalidArgument). With aggregation.state_file the request is saved there
  // (its body) before Add answers; when the file cannot be written the job
  // is taken out again and the answer is Unavailable.
  common::Result<JobSnapshot> Add(const JobRequest& request);
  // Removes a job; NotFound when absent. A saved API job leaves the state
  // file first: when the file cannot be written, nothing changes
  // (Unavailable).
  common::Status Remove(uint32_t id);
  // Unbinds member `node` (a node id) of job `id` from its address
  // (Job::UnbindMember); NotFound for an unknown job or node.
  common::Status UnbindMember(uint32_t id, uint16_t node);
  // The whole table.
  common::Result<JobTableSnapshot> List();
  // Shows (`request` nullopt) or changes job `id`'s TAN (TanRequest, api.h),
  // all of it or nothing. A choice is checked like the config's tan
  // (InvalidArgument naming the key; on the calling thread), is taken only
  // by the job's root (FailedPrecondition elsewhere), and is picked by
  // ChooseTan(), least_load counting the other jobs' TANs now. A
  // parameter-server job keeps a remote TAN, its parameter server: a choice
  // that would leave it "self" (or none) is FailedPrecondition. A member must
  // be a worker of the job here (InvalidArgument). NotFound for an unknown job.
  // An API job's change is saved with its request in aggregation.state_file
  // (SavedJobWithTan) before it is made; when the file cannot be written
  // nothing changes (Unavailable). A config job's TAN is the config's again
  // after a restart, and an in-band job's its task info's.
  common::Result<TanReport> Tan(uint32_t id, const std::optional<TanRequest>& request);
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
  // Job snapshots also carry the store buffers each job holds, read through
  // `reader`; the same rules. [control]
  void SetStoreReader(JobStoreReader reader);
  // Runs `hook` on the control thread after a command added a job or
  // changed a job's TAN: TreeControl::ScanSoon, so that the new next hops
  // are resolved now rather than at the next periodic scan. Empty: none. [control]
  void SetChangeHook(std::function<void()> hook);
  // The in-band admission whose jobs an API job displaces (one with its id,
  // or the idlest one when the table is full): config and API jobs are never
  // kept out by in-band ones. Must outlive this object; nullptr: none. [control]
  void SetInBandAdmission(InBandAdmission* admission) { admission_ = admission; }

  // Adds the API jobs aggregation.state_file saved (job_state_file.h), as
  // Add() would, before the workers start. A job the running config now
  // refuses is logged and stays in the file (it is not lost: DELETE takes
  // it out). A file that does not parse is moved aside and reported. How
  // many jobs it added; 0 without a state file. [control]
  common::Result<size_t> RestoreSavedJobs();

  // Runs every queued command and wakes its caller. Returns how many ran. [control]
  size_t ProcessPending();
  // Starts the new runs the workers asked for (Job::RequestNewRun: a member
  // sent with a new incarnation; Job::EndRunAbove: the switch above ended
  // this switch's run): each such job becomes a new generation of
  // itself (JobTable::Renew), keeping its TAN choice and its in-band
  // admission, and the old run's incarnations end. Returns how many. [control]
  size_t StartNewRuns();
  // Add(), made on the control thread itself: the same checks and the same
  // command, without the queue (the fabric simulator's management, which
  // runs on the control thread's turn). [control]
  common::Result<JobSnapshot> AddNow(const JobRequest& request);
  // In-band registration of the task info a datagram passed up
  // (Dataplane::ProcessRegistrations): the job it describes
  // (InBandJobConfig) gets the checks of an API job (CheckAsConfigJob, the
  // running config's rules), the switch-wide defaults and AdmitJob, within
  // the in-band policy (SetInBandAdmission: rates, the in-band share,
  // quotas). existing / key_mismatch for an id the table holds; invalid
  // when registration is off or the checks refuse the task info;
  // no_upstream when node_count > 1 and the switch lists no
  // aggregation.upstreams (invalid when the sender's block lies past the
  // job's nodes); no_parameter_node when the task info asks for verify mode
  // at a root without a remote aggregation.tan; else the policy's or the
  // table's answer. [control]
  dataplane::RegistrationResult RegisterInBand(const dataplane::RegistrationRequest& request,
                                               std::chrono::steady_clock::time_point now);
  // The table now, without the queue. [control]
  JobTableSnapshot Snapshot() const;
  aggregator::JobTable& table() { return table_; }  // [control]

 private:
  struct Command;
  // The choice a job's TAN was picked by, for GET /tan; kept with the job's
  // generation, so a job added again under the same id does not inherit it.
  struct TanRecord {
    uint32_t generation = 0;
    TanReport::Choice choice;
  };

  // What Add() checks on the calling thread before the control thread builds the job.
  common::Status CheckAdd(const JobRequest& request) const;
  // Queues `command` and waits for it; Unavailable on a timeout or full queue.
  common::Status Post(const std::shared_ptr<Command>& command);
  void Execute(Command& command);
  // The control thread's side of Add() and Tan().
  common::Result<const aggregator::Job*> AddOnControl(const JobRequest& request);
  common::Result<TanReport> TanOnControl(uint32_t id, const std::optional<TanRequest>& request);
  // Records the choice `job` was built with from `cfg` (its own tan, coming
  // from `source`, else aggregation.tan, from the config). [control]
  void RecordBuiltChoice(const aggregator::Job& job, const config::AggregationJobConfig& cfg,
                         TanReport::Source source);
  JobSnapshot SnapshotOf(const aggregator::Job& job) const;  // [control]

  aggregator::JobTable& table_;
  // The running config without its jobs (and without source locations):
  // what an API job is checked against, as aggregation.jobs[0]. [any: read-only]
  config::Config base_;
  const Options options_;      // its config moved into base_
  const aggregator::SlotRegions regions_;  // the dataplane's, from the same config
  JobCounterReader counters_;  // [control]
  JobStoreReader store_;       // [control]
  std::function<void()> change_hook_;          // [control]
  InBandAdmission* admission_ = nullptr;       // [control]
  std::map<uint32_t, TanRecord> tan_choices_;  // by job id [control]
  // aggregation.state_file, and the requests it holds now. [control]
  std::optional<JobStateFile> state_;
  JobStateFile::Jobs saved_;

  std::mutex mu_;
  std::condition_variable done_;
  std::deque<std::shared_ptr<Command>> queue_;  // guarded by mu_
};

}  // namespace aggswitch::control
