#include "control/job_control.h"

#include <algorithm>
#include <utility>

#include "aggregator/job_table.h"

namespace aggswitch::control {
namespace {

using aggregator::Job;
using aggregator::JobSpec;

// Reads the job and, through `counters`, its counters: on the control thread,
// so that the job still owns its index (see job_control.h).
JobSnapshot SnapshotJob(const Job& job, const std::vector<std::string>& port_names,
                        const JobCounterReader& counters) {
  JobSnapshot s;
  s.id = job.id();
  s.index = job.index();
  s.origin = std::string(aggregator::OriginName(job.origin()));
  s.members = job.members();
  s.nodes = job.nodes();
  s.ordered = job.ordered();
  s.min_ack = job.MinAck();
  if (counters) s.counters = counters(job.index());
  for (uint16_t node = 0; node < job.members(); ++node) {
    aggregator::MemberAddr addr;
    const bool has_address = job.GetMember(node, &addr);
    const std::optional<uint32_t> ack = job.GetAck(node);
    if (!has_address && !ack) continue;
    JobMemberSnapshot& m = s.learned_members.emplace_back();
    m.node = node;
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
  return s;
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

JobSpec JobSpecFromConfig(const config::AggregationJobConfig& job,
                          const config::AggregationConfig& agg, uint64_t tsc_hz, TanLoad& load) {
  JobSpec spec;
  spec.id = job.id;
  spec.key = job.key;
  spec.members = job.members;
  spec.nodes = job.nodes;
  spec.ordered = job.ordered;
  spec.origin = JobSpec::Origin::kConfig;
  if (!job.node_ids.empty() || !job.switches.empty()) {
    spec.member_nodes = job.MemberNodeIds();
    spec.covers.assign(spec.member_nodes.size(), {});
    for (size_t i = 0; i < job.switches.size(); ++i) {
      std::vector<uint16_t>& covers = spec.covers[job.node_ids.size() + i];
      covers = job.switches[i].covers;
      // A child switch always covers something, if only itself: that marks it as a switch.
      if (covers.empty()) covers.push_back(job.switches[i].node);
    }
  }
  if (job.upstream) {
    spec.upstream.ip = job.upstream->address.addr;
    spec.upstream.udp_port = job.upstream->port;
    spec.upstream.node = job.upstream->node;
    spec.upstream.vlan = job.upstream->vlan;
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
  return spec;
}

common::Status AddConfigJobs(aggregator::JobTable& table, const config::AggregationConfig& agg,
                             uint64_t tsc_hz) {
  TanLoad load;
  for (size_t i = 0; i < agg.jobs.size(); ++i) {
    const JobSpec spec = JobSpecFromConfig(agg.jobs[i], agg, tsc_hz, load);
    common::Result<const Job*> added = table.Add(spec);
    if (!added.ok()) {
      return common::Status(added.status().code(), "aggregation.jobs[" + std::to_string(i) +
                                                       "]: " + added.status().message());
    }
  }
  return common::Status::Ok();
}

JobTableSnapshot SnapshotJobTable(const aggregator::JobTable& table, bool in_band_registration,
                                  const std::vector<std::string>& port_names,
                                  const JobCounterReader& counters) {
  JobTableSnapshot snap;
  snap.capacity = table.max_jobs();
  snap.max_fan_in = table.max_fan_in();
  snap.in_band_registration = in_band_registration;
  table.ForEach(
      [&](const Job& job) { snap.jobs.push_back(SnapshotJob(job, port_names, counters)); });
  std::sort(snap.jobs.begin(), snap.jobs.end(),
            [](const JobSnapshot& a, const JobSnapshot& b) { return a.id < b.id; });
  return snap;
}

// One request from a caller to the control thread, shared by both so that a
// caller that gave up does not leave the control thread a dangling pointer.
struct JobControl::Command {
  enum class Kind { kAdd, kRemove, kList, kRun };
  Kind kind = Kind::kList;
  std::function<common::Status()> fn;  // kRun
  JobRequest request;  // kAdd
  uint32_t id = 0;     // kRemove

  // Set by the control thread, under mu_.
  bool started = false;
  bool done = false;
  common::Status status;
  JobTableSnapshot table;  // kList: the table; kAdd: the new job in table.jobs[0]
};

JobControl::JobControl(aggregator::JobTable& table, Options options)
    : table_(table), options_(std::move(options)) {}

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

common::Result<JobSnapshot> JobControl::Add(const JobRequest& request) {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kAdd;
  command->request = request;
  RETURN_IF_ERROR(Post(command));
  return std::move(command->table.jobs.front());
}

common::Status JobControl::Remove(uint32_t id) {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kRemove;
  command->id = id;
  return Post(command);
}

common::Result<JobTableSnapshot> JobControl::List() {
  auto command = std::make_shared<Command>();
  command->kind = Command::Kind::kList;
  RETURN_IF_ERROR(Post(command));
  return std::move(command->table);
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

void JobControl::Execute(Command& command) {
  switch (command.kind) {
    case Command::Kind::kRun:
      command.status = command.fn();
      return;
    case Command::Kind::kAdd: {
      JobSpec spec;
      spec.id = command.request.id;
      spec.key = command.request.key;
      spec.members = command.request.members;
      spec.nodes = command.request.nodes;
      spec.ordered = command.request.ordered;
      spec.origin = JobSpec::Origin::kApi;
      common::Result<const Job*> added = table_.Add(spec);
      if (!added.ok()) {
        command.status = added.status();
        return;
      }
      command.table.jobs.push_back(SnapshotJob(**added, options_.port_names, counters_));
      return;
    }
    case Command::Kind::kRemove:
      command.status = table_.Remove(command.id);
      return;
    case Command::Kind::kList:
      command.table = Snapshot();
      return;
  }
}

void JobControl::SetCounterReader(JobCounterReader reader) {
  counters_ = std::move(reader);
}

JobTableSnapshot JobControl::Snapshot() const {
  return SnapshotJobTable(table_, options_.in_band_registration, options_.port_names, counters_);
}

}  // namespace aggswitch::control
