#include "tests/sim/run.h"

#include <rte_mempool.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "common/log.h"
#include "client/internal/engine.h"
#include "control/api.h"
#include "tests/sim/host.h"
#include "tests/sim/main_server.h"
#include "tests/sim/oracle.h"
#include "tests/sim/param_node.h"
#include "tests/sim/rank.h"
#include "tests/sim/sim_switch.h"
#include "tests/sim/store_rank.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint16_t kAggPort = 47000;
constexpr uint16_t kVlan = 10;
constexpr uint64_t kLinkStream = 7;
constexpr uint64_t kIncarnations = 13;  // the streams 11 and 12 draw slot secrets

std::string IpText(uint32_t ip) { return common::Ipv4Addr{ip}.ToString(); }

std::string KeyText(uint64_t key) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, key);
  return buf;
}

std::string IdList(const std::vector<uint16_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// A switch port that faces a segment of hosts: a frame goes to the hosts it
// is addressed to (or every host, broadcast), each by its own link.
class Segment final : public FrameSink {
 public:
  void Add(Host* host, Link* down) { hosts_.push_back({host, down}); }
  void Receive(Frame frame) override {
    const bool broadcast = std::all_of(frame.begin(), frame.begin() + 6, [](uint8_t b) { return b == 0xff; });
    for (const auto& [host, down] : hosts_) {
      if (broadcast || std::equal(frame.begin(), frame.begin() + 6, host->mac().bytes.begin())) {
        down->Send(frame.data(), frame.size());
      }
    }
  }

 private:
  std::vector<std::pair<Host*, Link*>> hosts_;
};

// Where each switch's ports lead.
struct PortPlan {
  std::vector<std::string> names;  // "h", "c<k>", "up", "ps", "ms"
  int hosts = -1;                  // the host segment's port
  int up = -1;
  int ps = -1;
  int ms = -1;
  std::map<int, int> child;        // child switch -> port
};

class Runner {
 public:
  Runner(const Scenario& s, const RunOptions& options) : s_(s), options_(options), world_(s.seed) {
    world_.set_print(options.print_frames);
  }
  ~Runner() { TearDown(); }

  common::Result<Outcome> Run();

 private:
  struct RunState {
    std::vector<std::unique_ptr<Process>> procs;  // by rank
    bool started = false;
    uint64_t start_ns = 0;
    // The job's run label at its root once every process ended (0: not
    // read): what the run's final deliveries carry.
    uint32_t label = 0;
    // Both mode: the main server read back what the switches kept of it
    // (fetch_started: it began to), once every process ended.
    bool fetch_started = false;
    bool fetched = false;
    std::vector<MainServer::Fetched> kept;
  };
  struct JobState {
    std::vector<std::unique_ptr<Host>> hosts;  // by rank
    std::vector<RunState> runs;
  };

  common::Status Build();
  bool AnyMainServer() const {
    return std::any_of(s_.jobs.begin(), s_.jobs.end(), [](const JobSpecSim& j) { return j.main_server; });
  }
  std::string SwitchYaml(size_t i, const std::vector<std::string>& rings) const;
  std::string JobConfig(size_t job, size_t sw, bool json) const;
  LinkFaults DrawFaults(uint64_t id);
  Link* NewLink(FrameSink* to, LinkFaults faults);
  client::ClientOptions OptionsFor(size_t job, uint32_t run, uint32_t rank) const;
  // Applies job `job`'s straggler prediction at its switches, and again
  // every predict_every_ns until its runs are over.
  void Predict(size_t job);
  void StartRun(size_t job, uint32_t run);
  common::Status AddApiJobs(size_t sw);
  bool AllDone() const;
  void Watch();
  // Has the main server read back (and free) every contribution the ranks
  // of run `run` of job `job` sent.
  void FetchKept(size_t job, uint32_t run);
  // Judges those answers against what each rank sent.
  void JudgeKept(size_t job, uint32_t run, Outcome* out) const;
  void CheckLeaks(Outcome* out);
  // Judges what the main server got of run `run`'s final allreduce `op` of
  // job `job`, against what its ranks got.
  void JudgeFinal(size_t job, uint32_t run, uint32_t op, const OpView& v, Outcome* out) const;
  std::string ExcuseFor(size_t job, uint32_t run, const OpOutcome* earliest, uint64_t end) const;
  void Judge(Outcome* out);
  void TearDown();

  const Scenario& s_;
  const RunOptions options_;
  World world_;
  std::vector<PortPlan> ports_;
  std::vector<JobTree> trees_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<Segment>> segments_;
  std::vector<std::unique_ptr<SimSwitch>> switches_;
  std::unique_ptr<Host> ps_host_;
  std::unique_ptr<ParamNode> ps_;
  std::unique_ptr<Host> ms_host_;
  std::unique_ptr<MainServer> ms_;
  std::vector<JobState> jobs_;
  std::string state_dir_;
  uint64_t start_ns_ = 0;
  uint64_t last_activity_ns_ = 0;
  std::vector<std::string> build_errors_;
};

LinkFaults Runner::DrawFaults(uint64_t id) {
  Rng r(Mix(s_.seed, kLinkStream, id));
  LinkFaults f;
  f.loss = r.Unit() * s_.links.loss;
  f.duplicate = r.Unit() * s_.links.duplicate;
  f.reorder = r.Unit() * s_.links.reorder;
  f.delay_ns = static_cast<uint64_t>(r.Range(2, 50)) * 1000;
  f.reorder_ns = static_cast<uint64_t>(r.Range(10, 500)) * 1000;
  return f;
}

Link* Runner::NewLink(FrameSink* to, LinkFaults faults) {
  const uint64_t id = links_.size();
  links_.push_back(std::make_unique<Link>(world_, to, std::move(faults), Mix(s_.seed, kLinkStream, id, 1), id));
  return links_.back().get();
}

std::string Runner::JobConfig(size_t job, size_t sw, bool json) const {
  const JobSpecSim& j = s_.jobs[job];
  const JobTree& tree = trees_[job];
  const JobTree::Node& node = tree.at.at(static_cast<int>(sw));
  const SwitchSpec& me = s_.switches[sw];
  std::ostringstream o;
  const char* q = json ? "\"" : "";
  const auto key = [&](const char* k) { return std::string(q) + k + q + ": "; };
  o << "{" << key("id") << j.id << ", " << key("key") << "\"" << KeyText(j.key) << "\", "
    << key("nodes") << tree.at.size();
  if (!node.ranks.empty()) o << ", " << key("node_ids") << IdList(node.ranks);
  if (!node.children.empty()) {
    o << ", " << key("switches") << "[";
    for (size_t c = 0; c < node.children.size(); ++c) {
      const int child = node.children[c];
      o << (c ? ", " : "") << "{" << key("node") << s_.switches[child].node_id << ", " << key("covers")
        << IdList(tree.Covers(child)) << "}";
    }
    o << "]";
  }
  if (static_cast<int>(sw) != tree.root) {
    o << ", " << key("upstream") << "{" << key("address") << "\"" << IpText(s_.switches[me.parent].ip) << "\", "
      << key("node") << me.node_id << ", " << key("vlan") << kVlan << "}";
  }
  o << ", " << key("timeout_ms") << j.timeout_ms << ", " << key("trigger") << "\""
    << (j.batch ? "batch" : "incremental") << "\"";
  if (static_cast<int>(sw) == tree.root) {
    if (j.tan == SwitchSpec::Tan::kSelf) {
      o << ", " << key("tan") << "{" << key("strategy") << "\"self\"}";
    } else if (j.tan == SwitchSpec::Tan::kRemote) {
      o << ", " << key("tan") << "{" << key("strategy") << "\"fixed\", " << key("candidates") << "[{"
        << key("address") << "\"" << IpText(s_.param_node_ip) << "\", " << key("port") << kAggPort << "}]}";
    }
    if (j.verify) o << ", " << key("verify") << "true";
  }
  // Every switch of a parameter-server job says so (below the root: hold
  // back the run label until every member has sent).
  if (j.learning_rate > 0) o << ", " << key("parameter_server") << "true";
  // The root delivers final results to the main server; every switch of a
  // job in both mode answers its FETCHes.
  if (j.main_server && (j.keep || static_cast<int>(sw) == tree.root)) {
    o << ", " << key("main_server") << "\"" << IpText(s_.main_server_ip) << "\"";
  }
  if (j.keep) o << ", " << key("mode") << (j.store ? "\"store\"" : "\"both\"");
  o << "}";
  return o.str();
}

std::string Runner::SwitchYaml(size_t i, const std::vector<std::string>& rings) const {
  const SwitchSpec& sw = s_.switches[i];
  const PortPlan& plan = ports_[i];
  std::ostringstream y;
  y << "eal: {lcores: \"0,1,2\"}\n"
    << "switch:\n  name: s" << i << "\n  mac: " << sw.mac.ToString() << "\n"
    << "  addresses: [{address: " << IpText(sw.ip) << "/16, vlan: " << kVlan << "}]\n"
    << "ports:\n";
  for (size_t p = 0; p < plan.names.size(); ++p) {
    y << "  - {name: " << plan.names[p] << ", devargs: net_ring_" << rings[p] << ", access: " << kVlan << "}\n";
  }
  y << "workers:\n";
  for (uint32_t w = 0; w < sw.workers; ++w) {
    y << "  - {lcore: " << (w + 1) << ", rx: [";
    bool first = true;
    for (size_t p = w; p < plan.names.size(); p += sw.workers) {
      y << (first ? "" : ", ") << plan.names[p];
      first = false;
    }
    y << "]}\n";
  }
  // A worker that polls no port would not validate: two workers need two ports.
  y << "mempool: {mbufs: 4095, cache: 0}\n"
    << "mac_table: {size: 1024}\n"
    << "aggregation:\n"
    << "  address: {address: " << IpText(sw.ip) << ", vlan: " << kVlan << "}\n"
    << "  slot_secret: \"0x" << KeyText(Mix(s_.seed, 11, i)).substr(2) << KeyText(Mix(s_.seed, 12, i)).substr(2)
    << "\"\n"
    << "  slots: " << sw.slots << "\n  spare_slots: " << sw.spare_slots << "\n"
    << "  max_fan_in: 64\n  max_jobs: 32\n"
    << "  stale_slot_ms: " << sw.stale_slot_ms << "\n  member_rebind_ms: " << sw.member_rebind_ms << "\n"
    << "  timeout_ms: " << sw.timeout_ms << "\n  trigger: " << (sw.batch ? "batch" : "incremental") << "\n"
    << "  give_up_ms: " << sw.give_up_ms << "\n"
    << "  bypass: {entries: " << sw.bypass_entries << ", ttl_ms: " << sw.bypass_ttl_ms
    << ", subswitch: " << (sw.subswitch_nodes ? "nodes" : "switch") << "}\n"
    << "  hold: {buffers: " << sw.hold_buffers << "}\n"
    << "  in_band: {idle_timeout_ms: 1000}\n"
    << "  state_file: " << state_dir_ << "/s" << i << ".json\n";
  // Room for several runs' kept contributions (kKeptPerRun) of every job in
  // both mode here.
  bool keeps = false;
  for (size_t j = 0; j < s_.jobs.size(); ++j) keeps |= s_.jobs[j].keep && trees_[j].at.count(static_cast<int>(i)) != 0;
  if (keeps) y << "  store: {buffers: " << 8 * kKeptPerRun << ", per_job: " << 8 * kKeptPerRun << "}\n";
  if (sw.tan == SwitchSpec::Tan::kSelf) {
    y << "  tan: {strategy: self}\n";
  } else if (sw.tan == SwitchSpec::Tan::kRemote) {
    y << "  tan: {strategy: fixed, candidates: [{address: " << IpText(s_.param_node_ip) << ", port: " << kAggPort
      << "}]}\n";
  }
  if (sw.parent >= 0) {
    y << "  upstreams: [{address: " << IpText(s_.switches[sw.parent].ip) << ", vlan: " << kVlan << "}]\n";
  }
  y << "  jobs:\n";
  bool any = false;
  for (size_t j = 0; j < s_.jobs.size(); ++j) {
    if (s_.jobs[j].origin != Origin::kConfig || trees_[j].at.count(static_cast<int>(i)) == 0) continue;
    y << "    - " << JobConfig(j, i, false) << "\n";
    any = true;
  }
  if (!any) y << "    []\n";
  std::string text = y.str();
  if (!any) {
    const size_t at = text.rfind("  jobs:\n    []\n");
    text.replace(at, std::string::npos, "  jobs: []\n");
  }
  return text;
}

client::ClientOptions Runner::OptionsFor(size_t job, uint32_t run, uint32_t rank) const {
  const JobSpecSim& j = s_.jobs[job];
  client::ClientOptions o;
  o.switches = {client::SwitchAddress{common::Ipv4Addr{s_.switches[j.rank_switch[rank]].ip}, kAggPort}};
  o.job_id = j.id;
  o.job_key = j.key;
  o.rank = static_cast<uint16_t>(rank);
  o.world = static_cast<uint16_t>(j.ranks());
  o.task_info = j.task_info;
  o.node_count = static_cast<uint16_t>(std::max<size_t>(1, j.in_band_leaves.size()));
  o.float_mode = j.float_mode;
  o.headroom = j.headroom;
  o.window = j.window;
  o.max_chunk_elements = j.max_chunk_elements;
  o.resend_to_parameter_node = j.resend_to_parameter_node;
  o.verify = j.verify;
  o.progress_timeout = std::chrono::milliseconds(ProgressTimeoutMs(s_));
  // Each process its own run, drawn from the seed so that a replay is exact.
  o.incarnation = static_cast<uint32_t>(Mix(s_.seed, kIncarnations, job << 32 | run, rank)) | 1;
  if (j.run_ids) {
    o.incarnation = 0;
    o.run_id = static_cast<uint32_t>(Mix(s_.seed, kIncarnations, job << 32 | run, 0xffff)) | 1;
  }
  return o;
}

common::Status Runner::Build() {
  // Where the API jobs of each switch are kept across its restarts.
  char tmpl[] = "/tmp/agg-sim.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return common::Internal("cannot make a temporary directory");
  state_dir_ = tmpl;
  for (size_t j = 0; j < s_.jobs.size(); ++j) trees_.push_back(TreeOf(s_, j));

  // Ports: the host segment, the children, the parent, the parameter node.
  ports_.resize(s_.switches.size());
  std::set<int> with_hosts;
  for (const JobSpecSim& j : s_.jobs) with_hosts.insert(j.rank_switch.begin(), j.rank_switch.end());
  for (size_t i = 0; i < s_.switches.size(); ++i) {
    PortPlan& p = ports_[i];
    const auto add = [&](const std::string& name) {
      p.names.push_back(name);
      return static_cast<int>(p.names.size() - 1);
    };
    if (with_hosts.count(static_cast<int>(i)) != 0) p.hosts = add("h");
    for (int c : s_.switches[i].children) p.child[c] = add("c" + std::to_string(c));
    if (s_.switches[i].parent >= 0) p.up = add("up");
    if (i == 0 && s_.param_node) p.ps = add("ps");
    if (i == 0 && AnyMainServer()) p.ms = add("ms");
    // Every worker polls a port of its own.
    while (p.names.size() < s_.switches[i].workers) add("x" + std::to_string(p.names.size()));
  }
  for (size_t i = 0; i < s_.switches.size(); ++i) {
    switches_.push_back(std::make_unique<SimSwitch>(
        world_, "s" + std::to_string(i), ports_[i].names.size(), s_.switches[i].workers,
        [this, i](const std::vector<std::string>& rings) { return SwitchYaml(i, rings); }));
  }
  // Switch to switch.
  uint64_t link_id = 0;
  for (size_t i = 0; i < s_.switches.size(); ++i) {
    const int parent = s_.switches[i].parent;
    if (parent < 0) continue;
    SimSwitch& up = *switches_[parent];
    SimSwitch& down = *switches_[i];
    up.SetLink(ports_[parent].child.at(static_cast<int>(i)),
               NewLink(down.port_sink(ports_[i].up), DrawFaults(link_id++)));
    down.SetLink(ports_[i].up, NewLink(up.port_sink(ports_[parent].child.at(static_cast<int>(i))),
                                       DrawFaults(link_id++)));
  }
  // Hosts: each rank of each job on its switch's segment.
  segments_.resize(s_.switches.size());
  for (size_t i = 0; i < s_.switches.size(); ++i) {
    if (ports_[i].hosts < 0) continue;
    segments_[i] = std::make_unique<Segment>();
    LinkFaults clean;
    clean.delay_ns = 0;
    switches_[i]->SetLink(ports_[i].hosts, NewLink(segments_[i].get(), clean));
  }
  jobs_.resize(s_.jobs.size());
  for (size_t j = 0; j < s_.jobs.size(); ++j) {
    const JobSpecSim& spec = s_.jobs[j];
    for (uint32_t r = 0; r < spec.ranks(); ++r) {
      const int sw = spec.rank_switch[r];
      common::MacAddr mac;
      mac.bytes = {0x02, 0x00, static_cast<uint8_t>(j), static_cast<uint8_t>(r), 0x00, 0x01};
      auto host = std::make_unique<Host>(world_, "j" + std::to_string(j) + "r" + std::to_string(r), mac,
                                         (10u << 24) | ((1 + j) << 8) | (1 + r));
      for (const SwitchSpec& other : s_.switches) host->AddNeighbor(other.ip, other.mac);
      host->SetUplink(NewLink(switches_[sw]->port_sink(ports_[sw].hosts), DrawFaults(link_id++)));
      segments_[sw]->Add(host.get(), NewLink(host.get(), DrawFaults(link_id++)));
      jobs_[j].hosts.push_back(std::move(host));
    }
    jobs_[j].runs.resize(spec.runs);
  }
  // The parameter node on the root.
  if (s_.param_node) {
    common::MacAddr mac;
    mac.bytes = {0x02, 0x00, 0xff, 0x00, 0x00, 0x01};
    ps_host_ = std::make_unique<Host>(world_, "agg-ps", mac, s_.param_node_ip);
    for (const SwitchSpec& sw : s_.switches) ps_host_->AddNeighbor(sw.ip, sw.mac);
    ps_host_->SetUplink(NewLink(switches_[0]->port_sink(ports_[0].ps), DrawFaults(link_id++)));
    switches_[0]->SetLink(ports_[0].ps, NewLink(ps_host_.get(), DrawFaults(link_id++)));
    aggregator::PsOptions options;
    options.tan.give_up_ns = TanGiveUpMs(s_) * kMs;
    options.tan.node_id = 65534;
    std::vector<tools::CoverSpec> covers;
    // What every switch of each tree covers, as an operator gives agg-ps
    // (--covers): a late partial from any depth resolves its ranks.
    for (size_t j = 0; j < s_.jobs.size(); ++j) {
      if (s_.jobs[j].origin == Origin::kInBand) continue;
      for (const auto& [sw, node] : trees_[j].at) {
        if (sw == trees_[j].root) continue;
        covers.push_back(tools::CoverSpec{s_.jobs[j].id, s_.switches[sw].node_id, trees_[j].Covers(sw)});
      }
    }
    std::vector<tools::SgdJob> sgd;
    for (const JobSpecSim& j : s_.jobs) {
      if (j.learning_rate > 0) sgd.push_back(tools::SgdJob{j.id, j.learning_rate});
    }
    ps_ = std::make_unique<ParamNode>(world_, *ps_host_, kAggPort, options, covers, std::move(sgd));
  }
  // The main server of the jobs that have one, on the root.
  if (AnyMainServer()) {
    common::MacAddr mac;
    mac.bytes = {0x02, 0x00, 0xff, 0x00, 0x00, 0x02};
    ms_host_ = std::make_unique<Host>(world_, "main-server", mac, s_.main_server_ip);
    for (const SwitchSpec& sw : s_.switches) ms_host_->AddNeighbor(sw.ip, sw.mac);
    ms_host_->SetUplink(NewLink(switches_[0]->port_sink(ports_[0].ms), DrawFaults(link_id++)));
    switches_[0]->SetLink(ports_[0].ms, NewLink(ms_host_.get(), DrawFaults(link_id++)));
    std::map<uint32_t, uint64_t> keys;
    for (const JobSpecSim& j : s_.jobs) {
      if (j.main_server) keys[j.id] = j.key;
    }
    ms_ = std::make_unique<MainServer>(world_, *ms_host_, kAggPort, std::move(keys));
  }
  for (size_t i = 0; i < switches_.size(); ++i) {
    if (common::Status st = switches_[i]->Start(); !st.ok()) return st;
    RETURN_IF_ERROR(AddApiJobs(i));
  }
  return common::Status::Ok();
}

common::Status Runner::AddApiJobs(size_t sw) {
  for (size_t j = 0; j < s_.jobs.size(); ++j) {
    if (s_.jobs[j].origin != Origin::kApi || trees_[j].at.count(static_cast<int>(sw)) == 0) continue;
    const std::string body = JobConfig(j, sw, true);
    auto request = control::ParseJobRequest(body);
    if (!request.ok()) return common::InvalidArgument("s" + std::to_string(sw) + ": " + request.status().message() + ": " + body);
    auto added = switches_[sw]->node().jobs().AddNow(*request);
    // Restored from the state file after a restart: already there.
    if (!added.ok() && added.status().code() != common::StatusCode::kAlreadyExists) {
      return common::Status(added.status().code(),
                            "s" + std::to_string(sw) + ": API job " + std::to_string(s_.jobs[j].id) + ": " +
                                added.status().message());
    }
  }
  return common::Status::Ok();
}

void Runner::Predict(size_t job) {
  const JobSpecSim& j = s_.jobs[job];
  const auto& runs = jobs_[job].runs;
  const bool over = std::all_of(runs.begin(), runs.end(), [](const RunState& r) {
    return r.started && std::all_of(r.procs.begin(), r.procs.end(), [](const auto& p) { return p->done(); });
  });
  if (over) return;
  // Each switch where the job has ranks, as an operator's aggctl would.
  control::StragglerRequest request;
  request.top = j.predict_top;
  request.apply = true;
  std::set<int> at(j.rank_switch.begin(), j.rank_switch.end());
  for (const int sw : at) {
    if (!switches_[sw]->up() || switches_[sw]->node().tree() == nullptr) continue;
    (void)switches_[sw]->node().tree()->Stragglers(j.id, request);
  }
  world_.At(world_.now() + j.predict_every_ns, [this, job] { Predict(job); });
}

void Runner::StartRun(size_t job, uint32_t run) {
  const JobSpecSim& j = s_.jobs[job];
  RunState& state = jobs_[job].runs[run];
  state.started = true;
  state.start_ns = world_.now();
  for (uint32_t r = 0; r < j.ranks(); ++r) {
    auto data = [this, job, run, r](uint32_t op) { return RankData(s_, job, run, r, op); };
    const client::ClientOptions o = OptionsFor(job, run, r);
    if (j.store) {
      StoreRank::Options so;
      so.job_id = j.id;
      so.key = j.key;
      so.node = static_cast<uint16_t>(r);
      so.incarnation = o.run_id != 0 ? o.run_id : o.incarnation;
      so.run_id = o.run_id != 0;
      so.switch_ip = s_.switches[j.rank_switch[r]].ip;
      so.switch_port = kAggPort;
      so.window = j.window;
      so.max_chunk_elements = j.max_chunk_elements;
      so.progress_timeout_ns = ProgressTimeoutMs(s_) * kMs;
      state.procs.push_back(std::make_unique<StoreRank>(world_, *jobs_[job].hosts[r], so, j.ops, data, world_.now()));
    } else {
      state.procs.push_back(std::make_unique<RankProcess>(world_, *jobs_[job].hosts[r], o, j.ops, data, world_.now()));
    }
  }
  if (run == 0 && j.predict_top > 0) {
    world_.At(world_.now() + j.predict_every_ns, [this, job] { Predict(job); });
  }
  if (run == 0 && j.crash_rank >= 0) {
    Process* victim = state.procs[j.crash_rank].get();
    world_.At(world_.now() + j.crash_after_ns, [victim] { victim->Kill(); });
  }
}

bool Runner::AllDone() const {
  for (const JobState& job : jobs_) {
    for (const RunState& run : job.runs) {
      if (!run.started || run.procs.empty()) return false;
      for (const auto& p : run.procs) {
        if (!p->done()) return false;
      }
      if (!run.fetched && s_.jobs[&job - jobs_.data()].keep) return false;
    }
  }
  return true;
}

void Runner::FetchKept(size_t job, uint32_t run) {
  const JobSpecSim& j = s_.jobs[job];
  RunState& state = jobs_[job].runs[run];
  std::vector<MainServer::FetchRequest> requests;
  for (uint32_t r = 0; r < state.procs.size(); ++r) {
    for (const auto& [seq, versions] : state.procs[r]->sent()) {
      requests.push_back(MainServer::FetchRequest{j.id, s_.switches[j.rank_switch[r]].ip, seq, static_cast<uint16_t>(r)});
    }
  }
  ms_->Fetch(std::move(requests), [this, job, run](std::vector<MainServer::Fetched> got) {
    RunState& done = jobs_[job].runs[run];
    done.kept = std::move(got);
    done.fetched = true;
  });
}

void Runner::Watch() {
  // Reruns start once every process of the run before has ended.
  for (size_t j = 0; j < jobs_.size(); ++j) {
    JobState& job = jobs_[j];
    for (RunState& run : job.runs) {
      if (!run.started || run.procs.empty() ||
          !std::all_of(run.procs.begin(), run.procs.end(), [](const auto& p) { return p->done(); })) {
        continue;
      }
      // Both mode: what the switches kept is read back a little after the
      // last process ended (a resend of its may still be on a link).
      if (s_.jobs[j].keep && !run.fetch_started) {
        run.fetch_started = true;
        const auto index = static_cast<uint32_t>(&run - job.runs.data());
        world_.At(world_.now() + 10 * kMs, [this, j, index] { FetchKept(j, index); });
      }
    }
    // The run's label at its root, read while the run is the root's last:
    // once every process has its last allreduce's answer (they may idle on
    // for their ACK repeats), before the next run starts. A restarted root
    // that came back after that knows only the next run's.
    for (size_t r = 0; r < job.runs.size(); ++r) {
      RunState& run = job.runs[r];
      if (run.label != 0 || !run.started || run.procs.empty() ||
          (r + 1 < job.runs.size() && !job.runs[r + 1].procs.empty())) {
        continue;
      }
      const bool answered = std::all_of(run.procs.begin(), run.procs.end(), [](const auto& p) {
        return p->done() || (!p->outcomes().empty() && p->outcomes().back().end_ns != 0);
      });
      SimSwitch& root = *switches_[trees_[j].root];
      if (!answered || !root.up()) continue;
      if (const aggregator::Job* at = root.node().table().Find(s_.jobs[j].id)) run.label = at->label();
    }
    for (uint32_t run = 1; run < job.runs.size(); ++run) {
      if (job.runs[run].started || !job.runs[run - 1].started) continue;
      const auto& procs = job.runs[run - 1].procs;
      if (!std::all_of(procs.begin(), procs.end(), [](const auto& p) { return p->done(); })) continue;
      // A new run's contributions would replace the old run's copies.
      if (s_.jobs[j].keep && !job.runs[run - 1].fetched) continue;
      job.runs[run].started = true;  // StartRun sets it again, at its time
      world_.At(world_.now() + s_.jobs[j].rerun_gap_ns, [this, j, run] { StartRun(j, run); });
    }
  }
  if (!AllDone()) world_.At(world_.now() + kMs, [this] { Watch(); });
}

std::string Runner::ExcuseFor(size_t job, uint32_t run, const OpOutcome* earliest, uint64_t end) const {
  const JobSpecSim& j = s_.jobs[job];
  if (run == 0 && j.crash_rank >= 0) return "rank " + std::to_string(j.crash_rank) + " crashed";
  const uint64_t from = earliest != nullptr ? earliest->start_ns : 0;
  for (const SwitchRestart& r : s_.restarts) {
    const uint64_t at = start_ns_ + r.at_ns;
    if (trees_[job].at.count(r.sw) != 0 && at <= end && at + r.down_ns + 50 * kMs >= from) {
      return "switch s" + std::to_string(r.sw) + " restarted";
    }
  }
  // A switch of the job that ran out of bypass entries cannot send a chunk
  // up as missing (it refuses it for now, NACK slot_busy) nor list late
  // members by entry: its chunks may end INCOMPLETE or time out, which the
  // ranks are told. Only its failures are excused; a wrong sum never is.
  for (const auto& [sw, node] : trees_[job].at) {
    if (!switches_[sw]->up()) continue;
    dataplane::Dataplane& dp = switches_[sw]->node().dataplane();
    uint64_t full = 0;
    for (size_t w = 0; w < dp.worker_count(); ++w) {
      uint64_t counters[dataplane::kNumAggCounters];
      dp.worker_stats(w).lcore.agg.Read(counters);
      full += counters[static_cast<size_t>(dataplane::AggCounter::bypass_full)];
    }
    if (full > 0) return "switch s" + std::to_string(sw) + " ran out of bypass entries";
  }
  // A rerun without run ids after a restart of one of the job's switches:
  // a rank of the new run that sent first into a place the restarted
  // switch had not bound again (a member of the old run it had not heard
  // from since) ends with the old run, told so (NACK run ended), once a
  // member the old run had bound there comes back after it. The switch
  // cannot tell the two apart (docs/protocol.md, "Runs"; run ids can).
  if (run > 0 && !j.run_ids) {
    bool run_ended = false;
    for (const auto& p : jobs_[job].runs[run].procs) {
      for (const OpOutcome& o : p->outcomes()) {
        run_ended |= o.message.find("(NACK 21)") != std::string::npos ||
                     o.message.find("NACK reason 21") != std::string::npos;
      }
    }
    for (const SwitchRestart& r : s_.restarts) {
      if (run_ended && trees_[job].at.count(r.sw) != 0 && start_ns_ + r.at_ns <= from) {
        return "a rank of the rerun was taken for the old run's after switch s" +
               std::to_string(r.sw) + " restarted";
      }
    }
  }
  // A chunk whose result reached some ranks before a switch of the job
  // restarted, a float sum in arrival order that cannot be reduced again
  // to the same bytes: the ranks that lacked it are told (NACK result
  // lost) and stop, as after any failure, and the run's later allreduces
  // fail without them, told so.
  {
    bool result_lost = false;
    for (const auto& p : jobs_[job].runs[run].procs) {
      for (const OpOutcome& o : p->outcomes()) {
        result_lost |= o.message.find("(NACK 22)") != std::string::npos;
      }
    }
    for (const SwitchRestart& r : s_.restarts) {
      if (result_lost && trees_[job].at.count(r.sw) != 0 && start_ns_ + r.at_ns <= from) {
        return "a rank lost a chunk's result when switch s" + std::to_string(r.sw) + " restarted";
      }
    }
  }
  const bool uses_ps = j.tan == SwitchSpec::Tan::kRemote;
  for (const Outage& o : s_.param_node_outages) {
    const uint64_t at = start_ns_ + o.at_ns;
    if (uses_ps && at <= end && at + o.down_ns + 50 * kMs >= from) return "agg-ps went away";
  }
  return "";
}

void Runner::Judge(Outcome* out) {
  for (size_t j = 0; j < s_.jobs.size(); ++j) {
    const JobSpecSim& spec = s_.jobs[j];
    // A parameter-server job's parameters at agg-ps, as its allreduces left
    // them (runs and allreduces follow each other, and agg-ps keeps them
    // across runs): zero at first, then what the ranks got from each step;
    // unknown where a step failed or every rank died in it (agg-ps applied
    // the chunks it answered before), and everywhere once agg-ps restarted
    // (it starts again from zero).
    std::vector<float> params;
    std::vector<bool> known;
    uint64_t since = start_ns_;  // the last step's start
    for (uint32_t run = 0; run < jobs_[j].runs.size(); ++run) {
      const RunState& state = jobs_[j].runs[run];
      // A rank that failed an allreduce for a fault of the scenario's stops,
      // as after any failure: the run's later allreduces fail without it
      // (its peers are told that a member stopped sending), excused as the
      // failure that stopped it. Never a wrong sum.
      std::string stopped;
      for (uint32_t op = 0; op < spec.ops.size(); ++op) {
        OpView v;
        v.scenario = &s_;
        v.job = j;
        v.run = run;
        v.op = op;
        const OpOutcome* earliest = nullptr;
        const OpOutcome* died = nullptr;  // a rank whose process died in it
        uint64_t end = 0;
        for (uint32_t r = 0; r < spec.ranks(); ++r) {
          const OpOutcome* o = r < state.procs.size() ? &state.procs[r]->outcomes()[op] : nullptr;
          v.outcomes.push_back(o != nullptr && o->ran ? o : nullptr);
          v.inputs.push_back(RankData(s_, j, run, r, op));
          if (o != nullptr && o->died && died == nullptr) died = o;
          if (o != nullptr && o->ran) {
            ++out->ops;
            if (o->code == common::StatusCode::kOk) ++out->ops_ok;
            if (earliest == nullptr || o->start_ns < earliest->start_ns) earliest = o;
            end = std::max(end, o->end_ns);
          }
        }
        v.excuse = ExcuseFor(j, run, earliest, end);
        if (v.excuse.empty()) v.excuse = stopped;
        if (!v.excuse.empty() && stopped.empty()) {
          for (uint32_t r = 0; r < v.outcomes.size(); ++r) {
            const OpOutcome* o = v.outcomes[r];
            if (o != nullptr && o->code != common::StatusCode::kOk &&
                o->code != common::StatusCode::kOutOfRange) {
              stopped = "rank " + std::to_string(r) + " stopped after allreduce " + std::to_string(op) +
                        " failed (" + v.excuse + ")";
              break;
            }
          }
        }
        if (spec.store) {
          // Nothing reduced: each rank's operation succeeds (every chunk
          // ACKed, judged by what the main server reads back) or fails
          // for a fault of the scenario's.
          for (uint32_t r = 0; r < v.outcomes.size(); ++r) {
            const OpOutcome* o = v.outcomes[r];
            if (o == nullptr || o->code == common::StatusCode::kOk || !v.excuse.empty()) continue;
            out->failures.push_back("job " + std::to_string(spec.id) + " run " + std::to_string(run) + " op " +
                                    std::to_string(op) + " (store): rank " + std::to_string(r) + " failed (" +
                                    common::StatusCodeName(o->code) + "): " + o->message);
          }
          continue;
        }
        const OpSpec& o = spec.ops[op];
        // A step some rank began. One that every rank died in is a step
        // too: agg-ps applied what it answered of it before they died.
        const OpOutcome* began = earliest != nullptr ? earliest : died;
        const bool step = spec.learning_rate > 0 && o.dtype == aggregator::DType::kFloat32 &&
                          o.op == aggregator::ReduceOp::kSum && began != nullptr;
        if (step) {
          for (const Outage& x : s_.param_node_outages) {
            if (start_ns_ + x.at_ns >= since && start_ns_ + x.at_ns <= end) known.assign(known.size(), false);
          }
          if (params.size() < o.count) {
            params.resize(o.count, 0.0f);
            known.resize(o.count, true);
          }
          v.params = params;
          v.known = known;
          since = began->start_ns;
        }
        JudgeOp(v, &out->failures);
        if (step) {
          // The step every rank got the result of is what agg-ps holds now;
          // one that failed, or that its ranks died in, may have been
          // applied in part.
          const OpOutcome* ok = nullptr;
          for (const OpOutcome* r : v.outcomes) {
            if (r != nullptr && r->code == common::StatusCode::kOk) ok = r;
          }
          for (uint32_t e = 0; e < o.count; ++e) {
            if (ok != nullptr) std::memcpy(&params[e], ok->data.data() + size_t{e} * 4, 4);
            known[e] = ok != nullptr;
          }
        }
        if (spec.ops[op].final) JudgeFinal(j, run, op, v, out);
      }
      if (spec.keep) JudgeKept(j, run, out);
      for (uint32_t r = 0; r < state.procs.size(); ++r) {
        if (!state.procs[r]->setup_error().empty()) {
          out->failures.push_back("job " + std::to_string(spec.id) + " rank " + std::to_string(r) +
                                  ": no engine: " + state.procs[r]->setup_error());
        }
      }
    }
  }
}

void Runner::JudgeKept(size_t job, uint32_t run, Outcome* out) const {
  const JobSpecSim& spec = s_.jobs[job];
  const RunState& state = jobs_[job].runs[run];
  if (!state.fetched) {
    if (state.fetch_started) {
      out->failures.push_back("job " + std::to_string(spec.id) + " run " + std::to_string(run) +
                              ": the main server's FETCHes did not end");
    }
    return;
  }
  for (const MainServer::Fetched& f : state.kept) {
    const uint16_t r = f.request.node;
    const int sw = spec.rank_switch[r];
    char where[128];
    std::snprintf(where, sizeof(where), "job %u run %u: switch s%d, asked for rank %u's contribution to seq %u,",
                  spec.id, run, sw, r, f.request.seq);
    // Which allreduce of the rank's the chunk was part of, and how it ended.
    const OpOutcome* op = nullptr;
    for (const OpOutcome& o : state.procs[r]->outcomes()) {
      if (o.ran && f.request.seq - o.first_seq < o.next_seq - o.first_seq) op = &o;
    }
    // A copy is lost with its switch's restart, and a rank that failed may
    // have had its contribution refused; otherwise a contribution that was
    // reduced was kept.
    bool restarted = !switches_[sw]->up();
    for (const SwitchRestart& x : s_.restarts) {
      restarted |= x.sw == sw && start_ns_ + x.at_ns + x.down_ns >= state.start_ns;
    }
    const bool reduced = op != nullptr && (op->code == common::StatusCode::kOk ||
                                           op->code == common::StatusCode::kOutOfRange);
    const std::string excuse = ExcuseFor(job, run, op, op != nullptr ? op->end_ns : 0);
    const bool may_miss = restarted || !reduced || !excuse.empty();
    if (!f.answered) {
      if (!may_miss) out->failures.push_back(std::string(where) + " never answered");
      continue;
    }
    if (!f.found) {
      if (f.nack != static_cast<uint32_t>(aggregator::NackReason::kNotStored)) {
        out->failures.push_back(std::string(where) + " answered NACK reason " + std::to_string(f.nack) +
                                " (docs/protocol.md), not the copy or not stored");
      } else if (!may_miss) {
        out->failures.push_back(std::string(where) + " answered not_stored for a contribution it reduced");
      }
      continue;
    }
    const auto sent = state.procs[r]->sent().find(f.request.seq);
    if (sent == state.procs[r]->sent().end() ||
        std::find(sent->second.begin(), sent->second.end(), f.copy) == sent->second.end()) {
      out->failures.push_back(std::string(where) + " gave back " + std::to_string(f.copy.payload.size()) +
                              " bytes (dtype " + std::to_string(f.copy.dtype) + ", scale " +
                              std::to_string(f.copy.scale) + ") that the rank never sent it");
    }
  }
}

void Runner::JudgeFinal(size_t job, uint32_t run, uint32_t op, const OpView& view, Outcome* out) const {
  const JobSpecSim& spec = s_.jobs[job];
  const OpSpec& o = spec.ops[op];
  char where[64];
  std::snprintf(where, sizeof(where), "job %u run %u op %u: the main server", spec.id, run, op);
  // The sequence numbers the op's chunks went under, and when it began.
  const OpOutcome* any = nullptr;
  uint64_t begun = UINT64_MAX;
  bool answered = false;  // some rank got the result (an overflowed sum is one)
  for (const OpOutcome* r : view.outcomes) {
    if (r == nullptr) continue;
    if (any == nullptr) any = r;
    begun = std::min(begun, r->start_ns);
    answered |= r->code == common::StatusCode::kOk || r->code == common::StatusCode::kOutOfRange;
  }
  if (any == nullptr) return;  // no rank ran it: nothing was sent
  client::ClientOptions options;
  options.max_chunk_elements = spec.max_chunk_elements;
  const uint32_t per_chunk = client::internal::ChunkElementsFor(options, o.dtype);
  const auto chunks = static_cast<uint32_t>((o.count + per_chunk - 1) / per_chunk);
  if (any->next_seq - any->first_seq != chunks) {
    out->failures.push_back(std::string(where) + ": the ranks took " + std::to_string(any->next_seq - any->first_seq) +
                            " sequence numbers for " + std::to_string(chunks) + " chunks");
    return;
  }
  // Deliveries of this run: from its final op's start to the next run's.
  uint64_t until = UINT64_MAX;
  if (run + 1 < jobs_[job].runs.size()) {
    for (const auto& p : jobs_[job].runs[run + 1].procs) {
      if (p->outcomes()[op].ran) until = std::min(until, p->outcomes()[op].start_ns);
    }
  }
  // What an earlier run's delivery of a seq was: its resends may come late.
  std::map<uint32_t, std::vector<std::vector<uint8_t>>> before;
  OpView::Partial got;
  got.who = "the main server";
  got.data.assign(size_t{o.count} * aggregator::ElementSize(o.dtype), 0);
  got.per_chunk = per_chunk;
  got.have.assign(chunks, false);
  got.flags.assign(chunks, 0);
  // An earlier run's delivery sent again looks like this run's when the
  // two runs' results are the same bytes: such a one is taken only for a
  // chunk nothing else delivered.
  std::vector<const MainServer::Delivery*> mine, again;
  // By the run label each carries, when the run's is known; else by time.
  const uint32_t label = jobs_[job].runs[run].label;
  for (const MainServer::Delivery& d : ms_->deliveries()) {
    if (d.job_id != spec.id || d.seq - any->first_seq >= chunks) continue;
    if (label != 0) {
      if (d.run == label) mine.push_back(&d);
      continue;
    }
    if (d.at_ns < begun) {
      before[d.seq].push_back(d.bytes);
      continue;
    }
    if (d.at_ns >= until) continue;
    const std::vector<std::vector<uint8_t>>& earlier = before[d.seq];
    (std::find(earlier.begin(), earlier.end(), d.bytes) != earlier.end() ? again : mine).push_back(&d);
  }
  for (const MainServer::Delivery* d : again) {
    if (std::none_of(mine.begin(), mine.end(), [d](const MainServer::Delivery* m) { return m->seq == d->seq; })) {
      mine.push_back(d);
    }
  }
  for (const MainServer::Delivery* dp : mine) {
    const MainServer::Delivery& d = *dp;
    const uint32_t c = d.seq - any->first_seq;
    const size_t at = size_t{c} * per_chunk * aggregator::ElementSize(o.dtype);
    const size_t len = size_t{std::min<uint32_t>(per_chunk, o.count - c * per_chunk)} * aggregator::ElementSize(o.dtype);
    if (d.bytes.size() != len) {
      out->failures.push_back(std::string(where) + " got " + std::to_string(d.bytes.size()) + " bytes for chunk " +
                              std::to_string(c) + " of " + std::to_string(len));
      continue;
    }
    if (got.have[c] && (!std::equal(d.bytes.begin(), d.bytes.end(), got.data.begin() + at) || got.flags[c] != d.flags)) {
      out->failures.push_back(std::string(where) + " got chunk " + std::to_string(c) + " twice, different");
      continue;
    }
    std::copy(d.bytes.begin(), d.bytes.end(), got.data.begin() + at);
    got.have[c] = true;
    got.flags[c] = d.flags;
  }
  OpView partial = view;
  partial.outcomes.assign(view.outcomes.size(), nullptr);  // judged already
  partial.partials.push_back(got);
  JudgeOp(partial, &out->failures);
  // Every chunk the ranks got reaches the main server, unless a fault of
  // the job's, or a restart of the root that delivers it, explains it.
  if (!answered || !view.excuse.empty()) return;
  for (const SwitchRestart& r : s_.restarts) {
    if (r.sw == trees_[job].root && start_ns_ + r.at_ns + r.down_ns >= begun) return;
  }
  for (uint32_t c = 0; c < chunks; ++c) {
    if (!got.have[c]) {
      out->failures.push_back(std::string(where) + " never got chunk " + std::to_string(c) + " (seq " +
                              std::to_string(any->first_seq + c) + ") of " + std::to_string(chunks));
      break;
    }
  }
}

void Runner::CheckLeaks(Outcome* out) {
  for (size_t i = 0; i < switches_.size(); ++i) {
    SimSwitch& sw = *switches_[i];
    if (!sw.up()) continue;
    const std::string name = "switch s" + std::to_string(i);
    dataplane::Dataplane& dp = sw.node().dataplane();
    for (const dataplane::PoolStats& p : dp.PoolStatsNow()) {
      if (p.available != p.capacity) {
        out->failures.push_back(name + ": " + std::to_string(p.capacity - p.available) + " of its " + p.name +
                                " buffers are still held after the jobs ended");
      }
    }
    for (size_t w = 0; w < dp.worker_count(); ++w) {
      // Final results in delivery live in the store until ACKed or given up,
      // kept contributions until the main server's RELEASE.
      if (const dataplane::ParameterStore* store = dp.worker_store(w); store != nullptr && store->used() != 0) {
        out->failures.push_back(name + ": worker " + std::to_string(w) + " still holds " +
                                std::to_string(store->used()) + " store buffers after the jobs ended");
      }
      const aggregator::BypassTable* bypass = dp.worker_bypass(w);
      if (bypass != nullptr && bypass->live() != 0) {
        out->failures.push_back(name + ": worker " + std::to_string(w) + " still has " +
                                std::to_string(bypass->live()) + " bypass entries after their TTL");
      }
    }
    if (const uint32_t leased = dp.LiveSpareLeases(world_.clock().Now()); leased != 0) {
      out->failures.push_back(name + ": " + std::to_string(leased) +
                              " spare slots still needed by their chunks after the jobs ended");
    }
    if (control::TreeControl* tree = sw.node().tree(); tree != nullptr && tree->tan_pending() != 0) {
      out->failures.push_back(name + ": its own TAN still holds " + std::to_string(tree->tan_pending()) +
                              " chunks after its give-up time");
    }
  }
  if (ps_ != nullptr && ps_->engine() != nullptr) {
    const aggregator::PsEngine& e = *ps_->engine();
    if (e.pending() != 0 || e.kept() != 0 || e.tan().pending() != 0 || e.tan().held_lates() != 0) {
      out->failures.push_back("agg-ps: still holds " + std::to_string(e.pending()) + " direct chunks, " +
                              std::to_string(e.kept()) + " contributions, " + std::to_string(e.tan().pending()) +
                              " TAN chunks and " + std::to_string(e.tan().held_lates()) +
                              " late payloads after its give-up time");
    }
  }
}

common::Result<Outcome> Runner::Run() {
  start_ns_ = world_.now();
  if (common::Status st = Build(); !st.ok()) return st;
  // Faults of the fabric.
  for (const SwitchRestart& r : s_.restarts) {
    SimSwitch* sw = switches_[r.sw].get();
    world_.At(start_ns_ + r.at_ns, [sw] { sw->Stop(); });
    world_.At(start_ns_ + r.at_ns + r.down_ns, [this, sw, idx = r.sw] {
      if (common::Status st = sw->Start(); !st.ok()) build_errors_.push_back(st.ToString());
      if (common::Status st = AddApiJobs(idx); !st.ok()) build_errors_.push_back(st.ToString());
    });
  }
  for (const Outage& o : s_.param_node_outages) {
    world_.At(start_ns_ + o.at_ns, [this] { ps_->Crash(); });
    world_.At(start_ns_ + o.at_ns + o.down_ns, [this] { ps_->Restart(); });
  }
  for (size_t j = 0; j < s_.jobs.size(); ++j) {
    world_.At(start_ns_ + s_.jobs[j].start_ns, [this, j] { StartRun(j, 0); });
  }
  world_.At(start_ns_ + kMs, [this] { Watch(); });
  const bool finished = world_.Run(start_ns_ + s_.limit_ns, [this] { return AllDone(); });
  Outcome out;
  out.sim_ns = world_.now() - start_ns_;
  if (!finished) {
    out.failures.push_back("the scenario did not end within " + std::to_string(s_.limit_ns / kMs) +
                           " ms of simulated time");
  }
  for (const std::string& e : build_errors_) out.failures.push_back("simulator: " + e);
  // The jobs ended: every timer the switches and agg-ps run out, then nothing
  // may be held (a spare slot's lease ends by age at twice stale_slot_ms).
  uint64_t quiet = 0;
  for (const SwitchSpec& sw : s_.switches) {
    quiet = std::max<uint64_t>({quiet, sw.bypass_ttl_ms, 2ull * sw.stale_slot_ms, sw.give_up_ms});
  }
  quiet = std::max<uint64_t>(quiet, 2000) + 1500;
  world_.Run(world_.now() + quiet * kMs, [] { return false; });
  CheckLeaks(&out);
  Judge(&out);
  if (options_.verbose) {
    // Every switch's aggregation counters that moved, over its workers.
    for (size_t i = 0; i < switches_.size(); ++i) {
      if (!switches_[i]->up()) continue;
      dataplane::Dataplane& dp = switches_[i]->node().dataplane();
      uint64_t sum[dataplane::kNumAggCounters] = {};
      for (size_t w = 0; w < dp.worker_count(); ++w) {
        uint64_t one[dataplane::kNumAggCounters];
        dp.worker_stats(w).lcore.agg.Read(one);
        for (size_t c = 0; c < dataplane::kNumAggCounters; ++c) sum[c] += one[c];
      }
      std::fprintf(stderr, "s%zu:", i);
      for (size_t c = 0; c < dataplane::kNumAggCounters; ++c) {
        if (sum[c] != 0) std::fprintf(stderr, " %s=%" PRIu64, dataplane::kAggCounterText[c].name, sum[c]);
      }
      std::fprintf(stderr, "\n");
      // Its own TAN's, when it is one.
      if (control::TreeControl* tree = switches_[i]->node().tree(); tree != nullptr) {
        const aggregator::TanCounters& t = tree->tan_counters();
        const std::pair<const char*, uint64_t> tan[] = {
            {"first", t.first_data},          {"late", t.late},
            {"merged", t.merged},             {"dup", t.duplicate_late},
            {"completed", t.completed},       {"gave_up", t.gave_up},
            {"orphan", t.orphan_late},        {"after_done", t.late_after_done},
            {"repeat_first", t.repeat_first}, {"refused_full", t.refused_full},
            {"new_runs", t.new_runs},         {"run_ended", t.run_ended},
            {"queries", t.queries},           {"by_members", t.by_members}};
        if (t.first_data != 0 || t.late != 0) {
          std::fprintf(stderr, "s%zu tan:", i);
          for (const auto& [name, value] : tan) {
            if (value != 0) std::fprintf(stderr, " %s=%" PRIu64, name, value);
          }
          std::fprintf(stderr, "\n");
        }
      }
    }
  }
  if (options_.verbose && ps_ != nullptr && ps_->engine() != nullptr) {
    const aggregator::TanCounters& t = ps_->engine()->tan().counters();
    const aggregator::PsCounters& p = ps_->engine()->counters();
    std::fprintf(stderr,
                 "agg-ps: rx %" PRIu64 " parse errors %" PRIu64 "; tan first %" PRIu64 " late %" PRIu64
                 " merged %" PRIu64 " dup %" PRIu64 " key %" PRIu64 " completed %" PRIu64 " gave up %" PRIu64
                 " orphan %" PRIu64 " after done %" PRIu64 " repeat first %" PRIu64 " malformed %" PRIu64
                 " ignored %" PRIu64 "; direct %" PRIu64 " reduced %" PRIu64 " verify %" PRIu64 "\n",
                 ps_->counters().rx_datagrams, ps_->counters().parse_errors, t.first_data, t.late, t.merged,
                 t.duplicate_late, t.key_mismatch, t.completed, t.gave_up, t.orphan_late, t.late_after_done,
                 t.repeat_first, t.malformed, t.ignored, p.direct, p.reduced, p.verify);
  }
  out.trace = world_.trace();
  out.events = world_.events();
  return out;
}

void Runner::TearDown() {
  world_.Clear();
  jobs_.clear();
  ms_.reset();
  ms_host_.reset();
  ps_.reset();
  ps_host_.reset();
  for (auto& sw : switches_) sw->Stop();
  world_.Clear();
  switches_.clear();
  if (!state_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(state_dir_, ec);
  }
}

}  // namespace

common::Result<Outcome> RunScenario(const Scenario& scenario, const RunOptions& options) {
  Runner runner(scenario, options);
  return runner.Run();
}

}  // namespace aggswitch::sim
