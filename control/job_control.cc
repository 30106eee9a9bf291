#include "control/job_control.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "aggregator/job_table.h"
#include "common/log.h"
#include "control/in_band_admission.h"

namespace aggswitch::control {
namespace {

using aggregator::Job;
using aggregator::JobSpec;

static_assert(config::kMaxUpstreamCandidates == aggregator::kMaxUpstreams,
              "every upper switch of aggregation.upstreams is a parent of its in-band jobs");

JobTanSnapshot TanState(const Job& job) {
  JobTanSnapshot t;
  switch (job.tan()) {
    case JobSpec::Tan::kNone:
      t.mode = "none";
      break;
    case JobSpec::Tan::kRemote: {
      t.mode = "remote";
      const aggregator::JobPeer peer = job.tan_peer();
      t.address = common::Ipv4Addr{peer.ip};
      t.port = peer.udp_port;
      aggregator::MemberAddr hop;
      t.resolved = job.GetHop(Job::kTanHop, &hop);
      break;
    }
    case JobSpec::Tan::kSelf:
      t.mode = "self";
      break;
  }
  return t;
}

// Reads the job and, through `counters`, its counters: on the control thread,
// so that the job still owns its index (see job_control.h).
JobSnapshot SnapshotJob(const Job& job, const std::vector<std::string>& port_names, uint64_t tsc_hz,
                        const aggregator::SlotRegions& regions, const JobCounterReader& counters,
                        const JobStoreReader& store) {
  JobSnapshot s;
  s.id = job.id();
  s.index = job.index();
  s.origin = std::string(aggregator::OriginName(job.origin()));
  s.members = job.members();
  s.nodes = job.nodes();
  s.ordered = job.ordered();
  s.min_ack = job.MinAck();
  if (counters) s.counters = counters(job.index());
  if (store) s.store_buffers = store(job.index(), job.generation());
  for (uint16_t index = 0; index < job.members(); ++index) {
    aggregator::MemberAddr addr;
    const bool has_address = job.GetMember(index, &addr);
    const std::optional<uint32_t> ack = job.GetAck(index);
    if (!has_address && !ack) continue;
    JobMemberSnapshot& m = s.learned_members.emplace_back();
    m.node = job.NodeId(index);
    m.ack_watermark = ack;
    m.has_address = has_address;
    if (!has_address) continue;
    ++s.learned;
    m.mac = common::MacAddr::FromU64(addr.mac48);
    m.port_index = addr.port_index;
    m.port = addr.port_index < port_names.size() ? port_names[addr.port_index]
                                                 : "#" + std::to_string(addr.port_index);
    m.vlan = addr.vlan;
    m.ip = common::Ipv4Addr{addr.ip};
    m.udp_port = addr.udp_port;
  }

  // The tree: workers and child switches in member order (node_ids, then
  // switches, as JobSpecFromConfig lays them out).
  for (uint16_t index = 0; index < job.members(); ++index) {
    if (!job.IsSwitch(index)) {
      s.node_ids.push_back(job.NodeId(index));
      continue;
    }
    JobChildSwitchSnapshot& child = s.switches.emplace_back();
    child.node = job.NodeId(index);
    const std::span<const uint16_t> covers = job.Covers(index);
    // A child given without covers covers itself: that is what marks it a switch.
    if (covers.size() != 1 || covers[0] != child.node) {
      child.covers.assign(covers.begin(), covers.end());
    }
  }
  for (uint32_t hop = 1; hop < job.hop_count(); ++hop) {
    const aggregator::JobPeer up = job.HopPeer(hop);
    aggregator::MemberAddr resolved;
    s.upstreams.push_back(JobUpstreamSnapshot{common::Ipv4Addr{up.ip}, up.udp_port, up.node,
                                              up.vlan, job.GetHop(hop, &resolved)});
  }
  if (job.timeout_cycles() == 0) {
    s.timeout_ms = 0;
  } else if (tsc_hz != 0) {
    s.timeout_ms = static_cast<uint32_t>(std::llround(static_cast<double>(job.timeout_cycles()) *
                                                      1e3 / static_cast<double>(tsc_hz)));
  }
  s.batch = job.batch();
  s.tan = TanState(job);
  if (job.tan_member() != aggregator::kNoNode) s.tan_member = job.tan_member();
  s.parameter_server = job.parameter_server();
  s.verify = job.verify();
  if (job.main_server_ip() != 0) {
    s.main_server = common::Ipv4Endpoint{{job.main_server_ip()}, job.main_server_port()}.ToString();
  }
  s.mode = aggregator::ModeName(job.mode());
  s.store_quota = job.store_quota();
  const aggregator::SlotRegion& region = regions.For(job.in_band());
  if (region.size != 0) {
    s.slot_region_first = region.first;
    s.slot_region_size = region.size;
    s.slot_base = region.Of(job.placement(), 0);
    s.slot_span = job.placement().span;
    if (const std::optional<aggregator::Job::Move> m = job.move()) {
      s.moved = JobSnapshot::Moved{m->cut, region.first + m->base};
    }
  }
  s.placed = std::string(aggregator::PlacedName(job.placed()));
  s.slot_quota = job.slot_quota();
  s.hold_quota = job.hold_quota();
  return s;
}

// True when `path` is `base` or lies below it ("a.b[1]" is below "a.b").
bool IsAtOrBelow(std::string_view path, std::string_view base) {
  if (path.substr(0, base.size()) != base) return false;
  return path.size() == base.size() || path[base.size()] == '.' || path[base.size()] == '[';
}

void EraseAll(std::string& text, std::string_view part) {
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at)) {
    text.erase(at, part.size());
  }
}

// Checks `job` as config::Validate() checks aggregation.jobs[0] of `base`
// (the running config without its jobs). `keys` are the key paths below the
// job that the request gave (see JobRequest::keys). Only the mistakes at or
// below `scope` (a key path below the job; "" the whole job) are the
// request's: each is named by its path below `scope`, as is every other key
// path the message mentions. InvalidArgument listing them, "; "-separated.
common::Status CheckAsConfigJob(const config::Config& base, const config::AggregationJobConfig& job,
                                const std::vector<std::string>& keys, std::string_view scope) {
  constexpr std::string_view kJobPath = "aggregation.jobs[0]";
  config::Config config = base;
  config.aggregation.jobs = {job};
  for (const std::string& key : keys) {
    config.source_locs[std::string(kJobPath) + "." + key] = config::SourceLoc{};
  }
  std::vector<config::ConfigError> errors;
  if (config::Validate(config, errors)) return common::Status::Ok();
  const std::string root =
      scope.empty() ? std::string(kJobPath) : std::string(kJobPath) + "." + std::string(scope);
  std::string message;
  for (const config::ConfigError& e : errors) {
    // The running config itself passed; anything else is not this request's.
    if (!IsAtOrBelow(e.path, root)) continue;
    const std::string path = e.path.size() > root.size() ? e.path.substr(root.size() + 1) : "";
    std::string text = e.message;
    EraseAll(text, root + ".");
    if (!message.empty()) message += "; ";
    message += path.empty() ? text : path + ": " + text;
  }
  if (message.empty()) return common::Status::Ok();
  return common::InvalidArgument(message);
}

}  // namespace

TanChoice ChooseTan(const config::TanConfig* tan, uint32_t job_id, const TanLoad& load) {
  TanChoice choice;
  if (tan == nullptr) return choice;
  if (tan->strategy == config::TanStrategy::kSelf) {
    choice.mode = JobSpec::Tan::kSelf;
    return choice;
  }
  if (tan->candidates.empty()) return choice;
  const std::vector<config::TanCandidate>& c = tan->candidates;
  size_t pick = 0;
  switch (tan->strategy) {
    case config::TanStrategy::kFixed:
    case config::TanStrategy::kSelf:
      break;
    case config::TanStrategy::kRandom: {
      // "Random by id": a hash of the job id, so every restart picks the same.
      const uint32_t h = job_id * 0x9e3779b1u;
      pick = (h ^ (h >> 16)) % c.size();
      break;
    }
    case config::TanStrategy::kLeastLoad: {
      uint32_t best = UINT32_MAX;
      for (size_t i = 0; i < c.size(); ++i) {
        const auto it = load.find(c[i].address.addr);
        const uint32_t jobs = it == load.end() ? 0 : it->second;
        if (jobs < best) {
          best = jobs;
          pick = i;
        }
      }
      break;
    }
    case config::TanStrategy::kFewestHops:
      for (size_t i = 1; i < c.size(); ++i) {
        if (c[i].hops < c[pick].hops) pick = i;
      }
      break;
  }
  choice.mode = JobSpec::Tan::kRemote;
  choice.peer.ip = c[pick].address.addr;
  choice.peer.udp_port = c[pick].port;
  return choice;
}

TanLoad CountTanLoad(const aggregator::JobTable& table, uint32_t except_job) {
  TanLoad load;
  table.ForEach([&](const Job& job) {
    if (job.id() != except_job && job.tan() == JobSpec::Tan::kRemote) ++load[job.tan_peer().ip];
  });
  return load;
}

JobSpec JobSpecFromConfig(const config::AggregationJobConfig& job,
                          const config::AggregationConfig& agg, uint64_t tsc_hz, TanLoad& load,
                          JobSpec::Origin origin) {
  JobSpec spec;
  spec.id = job.id;
  spec.key = job.key;
  spec.members = job.members;
  spec.nodes = job.nodes;
  spec.ordered = job.ordered;
  spec.origin = origin;
  if (!job.node_ids.empty() || !job.switches.empty()) {
    spec.member_nodes = job.MemberNodeIds();
    spec.covers.assign(spec.member_nodes.size(), {});
    for (size_t i = 0; i < job.switches.size(); ++i) {
      std::vector<uint16_t>& covers = spec.covers[job.node_ids.size() + i];
      covers = job.switches[i].covers;
      // A child switch always covers something, if only itself: that marks it as a switch.
      if (covers.empty()) covers.push_back(job.switches[i].node);
    }
    if (origin == JobSpec::Origin::kInBand && job.nodes == 1 &&
        job.node_ids.front() >= kInBandLeafBase) {
      // Registered by a leaf's partial (InBandJobConfig): its members are
      // the leaves, child switches, each covering itself here (the ranks
      // below are not named). As a tree's root, a leaf's partial that finds
      // no slot goes to the TAN as missing (Job::WhenNoSlot) rather than
      // waiting for one: the leaf keeps that partial's slot until the answer
      // comes down, and another job's chunk refused there could hold the
      // very result here that keeps the partial out (seed 666491).
      for (size_t i = 0; i < spec.member_nodes.size(); ++i) {
        spec.covers[i] = {spec.member_nodes[i]};
      }
    }
  }
  if (job.upstream) {
    spec.upstreams.push_back(aggregator::JobPeer{job.upstream->address.addr, job.upstream->port,
                                                 job.upstream->node, job.upstream->vlan});
  } else if (origin == JobSpec::Origin::kInBand && job.nodes > 1) {
    // Its ranks here are a block of the job's (InBandJobConfig), and the
    // block's index, past the ranks' ids, is this switch's node id at its
    // parents.
    const auto leaf =
        static_cast<uint16_t>(kInBandLeafBase + job.node_ids.front() / job.members);
    for (const config::UpstreamCandidateConfig& up : agg.upstreams) {
      spec.upstreams.push_back(aggregator::JobPeer{up.address.addr, up.port, leaf, up.vlan});
    }
  } else {
    const config::TanConfig* tan = job.tan ? &*job.tan : agg.tan ? &*agg.tan : nullptr;
    const TanChoice choice = ChooseTan(tan, job.id, load);
    spec.tan = choice.mode;
    spec.tan_peer = choice.peer;
    if (choice.mode == JobSpec::Tan::kRemote) ++load[choice.peer.ip];
  }
  const uint32_t timeout_ms = job.timeout_ms.value_or(agg.timeout_ms);
  spec.timeout_cycles = static_cast<uint64_t>(timeout_ms * 1e-3 * static_cast<double>(tsc_hz));
  spec.batch = job.trigger.value_or(agg.trigger) == config::AggTrigger::kBatch;
  spec.bypass_covered_nodes = agg.bypass.subswitch == config::SubswitchEntries::kNodes;
  spec.tan_member = job.tan_member.value_or(aggregator::kNoNode);
  // Validate() made sure of a root job with a remote TAN.
  spec.parameter_server = job.parameter_server;
  spec.verify = job.verify;
  if (job.main_server) {
    spec.main_server_ip = job.main_server->ip.addr;
    spec.main_server_port = job.main_server->port;
  }
  switch (job.mode) {
    case config::JobMode::kAggregate: spec.mode = JobSpec::Mode::kAggregate; break;
    case config::JobMode::kStore: spec.mode = JobSpec::Mode::kStore; break;
    case config::JobMode::kBoth: spec.mode = JobSpec::Mode::kBoth; break;
  }
  spec.store_quota = agg.store.PerJob();
  const bool in_band = origin == JobSpec::Origin::kInBand;
  spec.slot_quota = in_band ? agg.InBandSlotsPerJob() : agg.SlotsPerJob();
  spec.hold_quota = in_band ? agg.InBandHeldPerJob() : agg.HoldPerJob();
  return spec;
}

void PlaceJob(const aggregator::JobTable& table, const config::AggregationJobConfig& job,
              const config::AggregationConfig& agg, JobSpec& spec) {
  const bool in_band = spec.origin == JobSpec::Origin::kInBand;
  const uint32_t size = in_band ? agg.InBandSlots() : agg.ProvisionedSlots();
  if (size == 0) return;  // the job is refused every slot anyway
  const uint32_t span = spec.slot_quota == 0 ? size : std::min(spec.slot_quota, size);
  if (job.placement_hint) {
    spec.placed = JobSpec::Placed::kHint;
    spec.partition = aggregator::Partition{*job.placement_hint % size, span};
    return;
  }
  switch (agg.placement) {
    case config::SlotPlacement::kHash:
      return;
    case config::SlotPlacement::kRandom: {
      static thread_local std::mt19937_64 rng{std::random_device{}()};
      spec.placed = JobSpec::Placed::kRandom;
      spec.partition = aggregator::Partition{static_cast<uint32_t>(rng() % size), span};
      return;
    }
    case config::SlotPlacement::kRoundRobin: {
      // The region's partitions, and where the newest of them ends.
      std::vector<aggregator::Partition> live;
      uint32_t newest = 0;
      uint32_t cursor = 0;
      table.ForEach([&](const Job& other) {
        const aggregator::JobPlacement& p = other.placement();
        if (other.in_band() != in_band || !p.partitioned()) return;
        live.push_back(aggregator::Partition{p.offset, p.span});
        if (other.generation() > newest) {
          newest = other.generation();
          cursor = static_cast<uint32_t>((uint64_t{p.offset} + p.span) % size);
        }
      });
      spec.placed = JobSpec::Placed::kRoundRobin;
      spec.partition = aggregator::Partition{aggregator::RoundRobinBase(size, span, cursor, live), span};
      return;
    }
  }
}

common::Result<const Job*> AdmitJob(aggregator::JobTable& table,
                                    const config::AggregationJobConfig& job,
                                    const config::AggregationConfig& agg, JobSpec::Origin origin,
                                    uint64_t tsc_hz, TanLoad& load) {
  JobSpec spec = JobSpecFromConfig(job, agg, tsc_hz, load, origin);
  PlaceJob(table, job, agg, spec);
  ASSIGN_OR_RETURN(const Job* added, table.Add(spec));
  std::string upstream;
  for (const aggregator::JobPeer& up : spec.upstreams) {
    upstream += (upstream.empty() ? "" : ", ") + common::Ipv4Addr{up.ip}.ToString() + ":" +
                std::to_string(up.udp_port);
  }
  upstream = spec.upstreams.empty()     ? "root"
             : spec.upstreams.size() == 1 ? "upstream " + upstream
                                          : "upstreams " + upstream;
  const uint32_t timeout_ms = job.timeout_ms.value_or(agg.timeout_ms);
  AGG_LOG(kInfo, "job %u added (%s): %u members, %u nodes, %s, timeout %u ms, %s trigger%s",
          spec.id, std::string(aggregator::OriginName(origin)).c_str(), spec.members, spec.nodes, upstream.c_str(), timeout_ms,
          spec.batch ? "batch" : "immediate", spec.ordered ? ", ordered" : "");
  return added;
}

config::AggregationJobConfig InBandJobConfig(const dataplane::RegistrationRequest& request) {
  config::AggregationJobConfig job;
  job.id = request.job_id;
  job.key = request.key;
  job.members = request.expected;
  job.nodes = request.node_count;
  job.ordered = request.ordered;
  job.verify = request.verify;
  if (job.nodes > 1 && job.members != 0) {
    // Node ids are the job's global ranks, a block of `members` of them at
    // each switch: the sender's block.
    const uint32_t first = request.node_id - request.node_id % job.members;
    for (uint32_t n = first; n < first + job.members && n < aggregator::kNoNode; ++n) {
      job.node_ids.push_back(static_cast<uint16_t>(n));
    }
  } else if (request.node_id >= kInBandLeafBase && job.members != 0) {
    // A leaf's partial registers the job at its parent: the members are
    // the leaves, by their ids past the ranks'.
    for (uint32_t n = kInBandLeafBase; n < kInBandLeafBase + job.members && n < aggregator::kNoNode; ++n) {
      job.node_ids.push_back(static_cast<uint16_t>(n));
    }
  }
  return job;
}

common::Status AddConfigJobs(aggregator::JobTable& table, const config::AggregationConfig& agg,
                             uint64_t tsc_hz) {
  TanLoad load;
  for (size_t i = 0; i < agg.jobs.size(); ++i) {
    common::Result<const Job*> added =
        AdmitJob(table, agg.jobs[i], agg, JobSpec::Origin::kConfig, tsc_hz, load);
    if (!added.ok()) {
      return common::Status(added.status().code(), "aggregation.jobs[" + std::to_string(i) +
                                                       "]: " + added.status().message());
    }
  }
  return common::Status::Ok();
}

// One request from a caller to the control thread, shared by both so that a
// caller that gave up does not leave the control thread a dangling pointer.
struct JobControl::Command {
  enum class Kind { kAdd, kRemove, kList, kTan, kRun };
  Kind kind = Kind::kList;
  std::function<common::Status()> fn;     // kRun
  JobRequest request;                     // kAdd
  uint32_t id = 0;                        // kRemove, kTan
  std::optional<TanRequest> tan_request;  // kTan: nullopt shows

  // Set by the control thread, under mu_.
  bool started = false;
  bool done = false;
  common::Status status;
  JobTableSnapshot table;  // kList: the table; kAdd: the new job in table.jobs[0]
  TanReport tan_report;    // kTan
};

JobControl::JobControl(aggregator::JobTable& table, Options options)
    : table_(table),
      base_(std::move(options.config)),
      options_(std::move(options)),
      regions_(aggregator::SlotRegions::Make(base_.aggregation.slots, base_.aggregation.InBandSlots(),
                                             base_.aggregation.SpareSlots())) {
  // The choices the config jobs were built with (AddConfigJobs), for GET /tan.
  for (const config::AggregationJobConfig& cfg : base_.aggregation.jobs) {
    const Job* job = table_.Find(cfg.id);
    if (job != nullptr && job->origin() == JobSpec::Origin::kConfig) {
      RecordBuiltChoice(*job, cfg, TanReport::Source::kConfig);
    }
  }
  base_.aggregation.jobs.clear();
  base_.source_locs.clear();
  base_.item_locs.clear();
  if (!base_.aggregation.state_file.empty()) state_.emplace(base_.aggregation.state_file);
}

common::Result<size_t> JobControl::RestoreSavedJobs() {
  if (!state_) return size_t{0};
  ASSIGN_OR_RETURN(saved_, state_->Load());
  size_t restored = 0;
  for (const auto& [id, body] : saved_) {
    common::Result<JobRequest> request = ParseJobRequest(body);
    common::Status status = request.status();
    if (request.ok()) status = CheckAsConfigJob(base_, request->job, request->keys, "");
    if (status.ok()) status = AddOnControl(*request).status();
    if (!status.ok()) {
      // Kept in the file: the operator decides (DELETE /api/v1/jobs/<id> drops it).
      AGG_LOG(kError, "%s: job %u not restored: %s; its request stays in the file",
              state_->path().c_str(), id, status.message().c_str());
      continue;
    }
    ++restored;
  }
  AGG_LOG(kInfo, "%s: restored %zu of %zu API jobs", state_->path().c_str(), restored, saved_.size());
  return restored;
}

JobControl::~JobControl() = default;

common::Status JobControl::Post(const std::shared_ptr<Command>& command) {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.size() >= options_.max_pending) {
    return common::Unavailable("the control thread has " + std::to_string(queue_.size()) +
                               " job commands queued; try again");
  }
  queue_.push_back(command);
  if (done_.wait_for(lock, options_.timeout, [&] { return command->done; })) {
    return command->status;
  }
  if (!command->started) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), command));
    return common::Unavailable("the control thread did not answer within " +
                               std::to_string(options_.timeout.count()) +
                               " ms; nothing was changed");
  }
  // Taken just now: it runs in microseconds, so wait for its outcome.
  done_.wait(lock, [&] { return command->done; });
  return command->status;
}

common::Status JobControl::CheckAdd(const JobRequest& request) const {
  RETURN_IF_ERROR(CheckAsConfigJob(base_, request.job, request.keys, ""));
  if (options_.tsc_hz == 0 && request.job.timeout_ms.value_or(base_.aggregation.timeout_ms) > 0) {
    return common::Internal(
        "no TSC frequency to turn timeout_ms into cycles (JobControl::Options)");
  }
  return common::Status::Ok();
}

common::Result<JobSnapshot> JobControl::Add(const JobRequest& request) {
  RETURN_IF_ERROR(CheckAdd(request));
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kAdd;
  command->request = request;
  RETURN_IF_ERROR(Post(command));
  return std::move(command->table.jobs.front());
}

common::Result<JobSnapshot> JobControl::AddNow(const JobRequest& request) {
  RETURN_IF_ERROR(CheckAdd(request));
  Command command;
  command.kind = Command::Kind::kAdd;
  command.request = request;
  Execute(command);
  RETURN_IF_ERROR(command.status);
  return std::move(command.table.jobs.front());
}

common::Status JobControl::Remove(uint32_t id) {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kRemove;
  command->id = id;
  return Post(command);
}

common::Status JobControl::UnbindMember(uint32_t id, uint16_t node) {
  return RunOnControl([this, id, node] {
    const Job* job = table_.Find(id);
    if (job == nullptr) return common::NotFound("job " + std::to_string(id) + " does not exist");
    const int index = job->LocalIndex(node);
    if (index < 0) {
      return common::NotFound("node " + std::to_string(node) + " is not a member of job " +
                              std::to_string(id) + " here");
    }
    job->UnbindMember(static_cast<uint16_t>(index));
    AGG_LOG(kInfo, "job %u: member %u unbound through the API; its next datagram binds it", id, node);
    return common::Status::Ok();
  });
}

common::Result<JobTableSnapshot> JobControl::List() {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kList;
  RETURN_IF_ERROR(Post(command));
  return std::move(command->table);
}

common::Result<TanReport> JobControl::Tan(uint32_t id, const std::optional<TanRequest>& request) {
  if (request && request->choice) {
    // The choice as the tan of a config job: candidates 1..64, each once, no
    // address of this switch's, none with "self".
    config::AggregationJobConfig job;
    job.id = id;
    job.members = 1;
    job.tan = *request->choice;
    RETURN_IF_ERROR(CheckAsConfigJob(base_, job, {"tan.candidates"}, "tan"));
  }
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kTan;
  command->id = id;
  command->tan_request = request;
  RETURN_IF_ERROR(Post(command));
  return std::move(command->tan_report);
}

common::Status JobControl::RunOnControl(std::function<common::Status()> fn) {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kRun;
  command->fn = std::move(fn);
  return Post(command);
}

void JobControl::Attach(DataSource& source) {
  source.jobs = [this] { return List(); };
  source.add_job = [this](const JobRequest& request) { return Add(request); };
  source.remove_job = [this](uint32_t id) { return Remove(id); };
  source.unbind_member = [this](uint32_t id, uint16_t node) { return UnbindMember(id, node); };
}

size_t JobControl::ProcessPending() {
  size_t ran = 0;
  while (true) {
    std::shared_ptr<Command> command;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      command = std::move(queue_.front());
      queue_.pop_front();
      command->started = true;
    }
    // The caller only reads the results after `done`, under mu_.
    Execute(*command);
    {
      std::lock_guard<std::mutex> lock(mu_);
      command->done = true;
    }
    done_.notify_all();
    ++ran;
  }
  return ran;
}

size_t JobControl::StartNewRuns() {
  size_t started = 0;
  for (const uint32_t id : table_.TakeNewRuns()) {
    const Job* old = table_.Find(id);
    if (old == nullptr) continue;
    const std::optional<uint64_t> new_run = old->NewRunRequest();
    const uint64_t request = new_run.value_or(0);
    const uint32_t ended_above = old->RunEndedAbove().value_or(0);
    const uint32_t old_generation = old->generation();
    const uint16_t node = old->NodeId(static_cast<uint16_t>(request >> 32));
    common::Result<const Job*> renewed = table_.Renew(id);
    if (!renewed.ok()) {
      AGG_LOG(kError, "job %u: cannot start its new run: %s", id,
              renewed.status().message().c_str());
      continue;
    }
    const Job& job = **renewed;
    if (auto it = tan_choices_.find(id); it != tan_choices_.end() &&
                                          it->second.generation == old_generation) {
      it->second.generation = job.generation();
    }
    if (admission_ != nullptr && job.in_band()) admission_->Record(job);
    if (new_run) {
      AGG_LOG(kInfo,
              "job %u: node %u sent as incarnation %08x, a new run: the job starts again "
              "(generation %u), and datagrams of the run that ended are refused (NACK run_ended)",
              id, node, static_cast<uint32_t>(request), job.generation());
    } else {
      AGG_LOG(kWarning,
              "job %u: the switch above ended its run %08x (NACK run_ended): a newer run holds "
              "the job there; the run ends here too (generation %u), and its members' datagrams "
              "are refused (NACK run_ended)",
              id, ended_above, job.generation());
    }
    ++started;
  }
  if (started > 0 && change_hook_) change_hook_();
  return started;
}

void JobControl::Execute(Command& command) {
  switch (command.kind) {
    case Command::Kind::kRun:
      command.status = command.fn();
      return;
    case Command::Kind::kAdd: {
      common::Result<const Job*> added = AddOnControl(command.request);
      if (!added.ok()) {
        command.status = added.status();
        return;
      }
      if (state_ && !command.request.body.empty()) {
        JobStateFile::Jobs next = saved_;
        next[command.request.job.id] = command.request.body;
        if (common::Status saved = state_->Save(next); !saved.ok()) {
          // Not kept, so not added: a restart must not lose a job the API took.
          (void)table_.Remove(command.request.job.id);
          tan_choices_.erase(command.request.job.id);
          command.status = common::Unavailable(saved.message() + "; job " +
                                               std::to_string(command.request.job.id) + " not added");
          return;
        }
        saved_ = std::move(next);
      }
      command.table.jobs.push_back(SnapshotOf(**added));
      return;
    }
    case Command::Kind::kRemove: {
      const bool was_saved = saved_.count(command.id) != 0;
      if (state_ && was_saved) {
        JobStateFile::Jobs next = saved_;
        next.erase(command.id);
        if (common::Status written = state_->Save(next); !written.ok()) {
          command.status = common::Unavailable(written.message() + "; job " + std::to_string(command.id) +
                                               " not removed");
          return;
        }
        saved_ = std::move(next);
      }
      command.status = table_.Remove(command.id);
      if (command.status.ok()) tan_choices_.erase(command.id);
      // A saved job the running config had refused is gone from the file: done.
      if (!command.status.ok() && was_saved) command.status = common::Status::Ok();
      return;
    }
    case Command::Kind::kList:
      command.table = Snapshot();
      return;
    case Command::Kind::kTan: {
      common::Result<TanReport> report = TanOnControl(command.id, command.tan_request);
      if (report.ok()) {
        command.tan_report = std::move(report).value();
      } else {
        command.status = report.status();
      }
      return;
    }
  }
}

common::Result<const Job*> JobControl::AddOnControl(const JobRequest& request) {
  const uint32_t id = request.job.id;
  if (admission_ != nullptr) {
    const Job* existing = table_.Find(id);
    if (existing != nullptr && existing->in_band()) (void)admission_->Displace(id);
  }
  auto admit = [&] {
    TanLoad load = CountTanLoad(table_);
    return AdmitJob(table_, request.job, base_.aggregation, JobSpec::Origin::kApi,
                    options_.tsc_hz, load);
  };
  common::Result<const Job*> added = admit();
  if (!added.ok() && added.status().code() == common::StatusCode::kResourceExhausted &&
      admission_ != nullptr && admission_->DisplaceIdlest()) {
    // The displaced job's index is free once the workers moved past it:
    // microseconds, a few polls each.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    do {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      table_.Reclaim();
      added = admit();
    } while (!added.ok() && added.status().code() == common::StatusCode::kResourceExhausted &&
             std::chrono::steady_clock::now() < deadline);
  }
  ASSIGN_OR_RETURN(const Job* job, std::move(added));
  RecordBuiltChoice(*job, request.job, TanReport::Source::kApi);
  if (change_hook_) change_hook_();
  return job;
}

dataplane::RegistrationResult JobControl::RegisterInBand(
    const dataplane::RegistrationRequest& request, std::chrono::steady_clock::time_point now) {
  using dataplane::RegistrationResult;
  if (const Job* existing = table_.Find(request.job_id); existing != nullptr) {
    return existing->key() == request.key ? RegistrationResult::existing
                                          : RegistrationResult::key_mismatch;
  }
  if (admission_ == nullptr) return RegistrationResult::invalid;
  if (const RegistrationResult allowed = admission_->Allow(request.src_ip, now);
      allowed != RegistrationResult::admitted) {
    return allowed;
  }
  const config::AggregationJobConfig job = InBandJobConfig(request);
  // Its members' part is checked as a config job's; its parents are the
  // switch's aggregation.upstreams. No upstream is said apart from the
  // other refusals, so that the sender learns why.
  config::AggregationJobConfig members_part = job;
  if (job.nodes > 1) {
    if (base_.aggregation.upstreams.empty()) return RegistrationResult::no_upstream;
    // A block past the job's last node, or cut short by the node id range.
    if (job.node_ids.size() != job.members || job.node_ids.front() / job.members >= job.nodes) {
      return RegistrationResult::invalid;
    }
    members_part.nodes = 1;
    // Verify mode acts at the job's root, which learns it from this
    // switch's partials (their task info says so).
    members_part.verify = false;
  }
  if (job.verify && job.nodes == 1) {
    // Verify mode needs the job's parameter node: the switch-wide remote TAN.
    const auto& tan = base_.aggregation.tan;
    if (!tan || tan->strategy == config::TanStrategy::kSelf) {
      return RegistrationResult::no_parameter_node;
    }
  }
  if (common::Status checked = CheckAsConfigJob(base_, members_part, {}, ""); !checked.ok()) {
    AGG_LOG(kDebug, "job %u: in-band registration from %s refused: %s", job.id,
            common::Ipv4Addr{request.src_ip}.ToString().c_str(), checked.message().c_str());
    return RegistrationResult::invalid;
  }
  TanLoad load = CountTanLoad(table_);
  common::Result<const Job*> added =
      AdmitJob(table_, job, base_.aggregation, JobSpec::Origin::kInBand, options_.tsc_hz, load);
  if (!added.ok()) {
    return added.status().code() == common::StatusCode::kResourceExhausted
               ? RegistrationResult::table_full
               : RegistrationResult::invalid;
  }
  admission_->Record(**added);
  RecordBuiltChoice(**added, job, TanReport::Source::kConfig);
  if (change_hook_) change_hook_();
  return RegistrationResult::admitted;
}

void JobControl::RecordBuiltChoice(const Job& job, const config::AggregationJobConfig& cfg,
                                   TanReport::Source source) {
  tan_choices_.erase(job.id());
  if (!job.is_root()) return;
  if (cfg.tan) {
    tan_choices_[job.id()] = {job.generation(), {source, *cfg.tan}};
  } else if (base_.aggregation.tan) {
    tan_choices_[job.id()] = {job.generation(),
                              {TanReport::Source::kConfig, *base_.aggregation.tan}};
  }
}

common::Result<TanReport> JobControl::TanOnControl(uint32_t id,
                                                   const std::optional<TanRequest>& request) {
  const Job* job = table_.Find(id);
  const std::string name = "job " + std::to_string(id);
  if (job == nullptr) return common::NotFound(name + " does not exist");
  if (request && request->choice && !job->is_root()) {
    const aggregator::JobPeer& up = job->upstreams().front();
    return common::FailedPrecondition(
        name + " has an upstream here (" + common::Ipv4Addr{up.ip}.ToString() + ":" +
        std::to_string(up.udp_port) +
        "): its TAN is chosen at its root; here only the member may be set");
  }
  if (request && request->set_member && request->member) {
    const int index = job->LocalIndex(*request->member);
    if (index < 0 || job->IsSwitch(static_cast<uint16_t>(index))) {
      return common::InvalidArgument("member: expected the node id of a worker of " + name +
                                     " at this switch, got " + std::to_string(*request->member));
    }
  }
  std::optional<TanChoice> choice;
  if (request && request->choice) {
    choice = ChooseTan(&*request->choice, id, CountTanLoad(table_, id));
    // The parameter server is the TAN: without a remote one the job has none.
    if (job->parameter_server() && choice->mode != JobSpec::Tan::kRemote) {
      return common::FailedPrecondition(
          name +
          " is a parameter-server job: its TAN (agg-ps --sgd) answers every chunk, so it must "
          "stay a remote one; choose among candidates, not \"self\"");
    }
    if (job->verify() && choice->mode != JobSpec::Tan::kRemote) {
      return common::FailedPrecondition(
          name +
          " is in verify mode: its TAN (agg-ps) checks every complete chunk, so it must stay a "
          "remote one; choose among candidates, not \"self\"");
    }
  }
  // A saved API job keeps its new TAN across restarts: the file first, so
  // that a change the file cannot keep is not made either.
  const auto saved = saved_.find(id);
  if (request && state_ && saved != saved_.end() && job->origin() == JobSpec::Origin::kApi) {
    common::Result<std::string> body = SavedJobWithTan(saved->second, *request);
    common::Status written = body.status();
    JobStateFile::Jobs next = saved_;
    if (written.ok()) {
      next[id] = *std::move(body);
      written = state_->Save(next);
    }
    if (!written.ok()) {
      return common::Unavailable(written.message() + "; " + name + "'s TAN not changed");
    }
    saved_ = std::move(next);
  }
  if (choice) {
    job->SetTan(choice->mode, choice->peer);
    tan_choices_[id] = {job->generation(), {TanReport::Source::kApi, *request->choice}};
  }
  if (request && request->set_member) {
    job->SetTanMember(request->member.value_or(aggregator::kNoNode));
  }
  if (request && request->choice && change_hook_) change_hook_();

  TanReport report;
  report.job = id;
  report.root = job->is_root();
  report.tan = TanState(*job);
  if (job->tan_member() != aggregator::kNoNode) report.member = job->tan_member();
  const auto it = tan_choices_.find(id);
  if (it != tan_choices_.end() && it->second.generation == job->generation()) {
    report.chosen = it->second.choice;
  }
  return report;
}

void JobControl::SetCounterReader(JobCounterReader reader) {
  counters_ = std::move(reader);
}

void JobControl::SetStoreReader(JobStoreReader reader) {
  store_ = std::move(reader);
}

void JobControl::SetChangeHook(std::function<void()> hook) {
  change_hook_ = std::move(hook);
}

JobSnapshot JobControl::SnapshotOf(const Job& job) const {
  return SnapshotJob(job, options_.port_names, options_.tsc_hz, regions_, counters_, store_);
}

JobTableSnapshot JobControl::Snapshot() const {
  JobTableSnapshot snap;
  snap.capacity = table_.max_jobs();
  snap.max_fan_in = table_.max_fan_in();
  snap.in_band_registration = options_.in_band_registration;
  if (admission_ != nullptr) {
    snap.in_band_capacity = admission_->options().max_jobs;
    snap.in_band_expired = admission_->expired();
    snap.in_band_displaced = admission_->displaced();
  }
  table_.ForEach([&](const Job& job) { snap.jobs.push_back(SnapshotOf(job)); });
  std::sort(snap.jobs.begin(), snap.jobs.end(),
            [](const JobSnapshot& a, const JobSnapshot& b) { return a.id < b.id; });
  return snap;
}

}  // namespace aggswitch::control
