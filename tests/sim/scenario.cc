#include "tests/sim/scenario.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "aggregator/half.h"
#include "tests/sim/rng.h"

namespace aggswitch::sim {

namespace {

using aggregator::DType;
using aggregator::ReduceOp;

// The streams of a seed.
enum Stream : uint64_t {
  kTopology = 1,
  kSwitch = 2,
  kJob = 3,
  kData = 4,
  kFaults = 5,
  kOps = 6,
  kPredict = 8,  // 7 is the links' (run.cc)
  kRunIds = 9,
  kFinal = 10,
  kKeep = 14,  // 11 and 12 draw slot secrets, 13 incarnations (run.cc)
  kSgd = 15,
};

constexpr uint64_t kMs = 1'000'000;

struct LimitKey {
  const char* name;
  uint32_t Limits::*field;
  bool hex;
};
constexpr LimitKey kLimitKeys[] = {
    {"switches", &Limits::switches, false}, {"levels", &Limits::levels, false},
    {"ranks", &Limits::ranks, false},       {"jobs", &Limits::jobs, false},
    {"ops", &Limits::ops, false},           {"elems", &Limits::elems, false},
    {"faults", &Limits::faults, true},      {"features", &Limits::features, true},
    {"skip_jobs", &Limits::skip_jobs, true}, {"skip_ops", &Limits::skip_ops, true},
};

bool Has(const Limits& l, uint32_t feature) { return (l.features & feature) != 0; }
bool Allows(const Limits& l, uint32_t fault) { return (l.faults & fault) != 0; }

uint32_t Ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return a << 24 | b << 16 | c << 8 | d; }

common::MacAddr Mac(uint8_t a, uint8_t b, uint8_t c) {
  common::MacAddr m;
  m.bytes = {0x02, 0xa9, 0x9c, a, b, c};
  return m;
}

// The (dtype, op) pairs the protocol allows.
struct TypeOp {
  DType dtype;
  ReduceOp op;
  bool floats;
};
constexpr TypeOp kTypeOps[] = {
    {DType::kInt32, ReduceOp::kSum, false},    {DType::kInt32, ReduceOp::kMin, false},
    {DType::kInt32, ReduceOp::kMax, false},    {DType::kInt32, ReduceOp::kAnd, false},
    {DType::kInt32, ReduceOp::kOr, false},     {DType::kBool, ReduceOp::kAnd, false},
    {DType::kBool, ReduceOp::kOr, false},      {DType::kFloat32, ReduceOp::kSum, true},
    {DType::kFloat32, ReduceOp::kSum, true},   {DType::kFloat32, ReduceOp::kMin, true},
    {DType::kFloat32, ReduceOp::kMax, true},   {DType::kFloat16, ReduceOp::kSum, true},
    {DType::kFloat16, ReduceOp::kMax, true},   {DType::kBFloat16, ReduceOp::kSum, true},
    {DType::kBFloat16, ReduceOp::kMin, true},
};

}  // namespace

std::string Limits::ToString() const {
  std::string out;
  for (const LimitKey& k : kLimitKeys) {
    if (!out.empty()) out += ",";
    char buf[40];
    std::snprintf(buf, sizeof(buf), k.hex ? "%s=0x%x" : "%s=%u", k.name, this->*k.field);
    out += buf;
  }
  return out;
}

common::Result<Limits> Limits::Parse(std::string_view text) {
  Limits l;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return common::InvalidArgument("limits: expected key=value, got \"" + std::string(item) + "\"");
    }
    const std::string key(item.substr(0, eq));
    const std::string value(item.substr(eq + 1));
    const LimitKey* found = nullptr;
    for (const LimitKey& k : kLimitKeys) {
      if (key == k.name) found = &k;
    }
    if (found == nullptr) return common::InvalidArgument("limits: unknown key \"" + key + "\"");
    char* end = nullptr;
    const unsigned long v = std::strtoul(value.c_str(), &end, 0);
    if (value.empty() || *end != '\0' || v > 0xffffffffUL) {
      return common::InvalidArgument("limits." + key + ": expected an unsigned number, got \"" + value + "\"");
    }
    l.*(found->field) = static_cast<uint32_t>(v);
  }
  if (l.switches == 0 || l.levels == 0 || l.ranks == 0 || l.jobs == 0 || l.ops == 0 || l.elems == 0 ||
      (l.skip_jobs & ((1u << std::min<uint32_t>(l.jobs, 31)) - 1)) == ((1u << std::min<uint32_t>(l.jobs, 31)) - 1)) {
    return common::InvalidArgument("limits: switches, levels, ranks, jobs, ops and elems are at least 1");
  }
  return l;
}

Scenario Generate(uint64_t seed, const Limits& limits) {
  Scenario s;
  s.seed = seed;
  s.limits = limits;

  // --- The switches: a tree of 1 to 3 levels, 1 to 8 switches. ---
  Rng topo(Mix(seed, kTopology));
  const uint32_t drawn_levels = static_cast<uint32_t>(topo.Range(1, 3));
  const uint32_t levels =
      Has(limits, kFeatureTrees) ? std::min(drawn_levels, limits.levels) : 1;
  struct Drawn {
    int parent;
    uint32_t level;
  };
  std::vector<Drawn> drawn{{-1, 1}};
  const uint32_t mids = static_cast<uint32_t>(topo.Range(1, 3));
  for (uint32_t i = 0; i < mids; ++i) drawn.push_back({0, 2});
  std::vector<uint32_t> leaves_under(mids);
  for (uint32_t i = 0; i < mids; ++i) leaves_under[i] = static_cast<uint32_t>(topo.Range(0, 2));
  if (std::all_of(leaves_under.begin(), leaves_under.end(), [](uint32_t n) { return n == 0; })) {
    leaves_under[0] = 1;
  }
  for (uint32_t i = 0; i < mids; ++i) {
    for (uint32_t k = 0; k < leaves_under[i]; ++k) drawn.push_back({static_cast<int>(1 + i), 3});
  }
  // The first `limits.switches` in breadth-first order, of the levels allowed.
  std::vector<int> index_of(drawn.size(), -1);
  for (size_t i = 0; i < drawn.size(); ++i) {
    if (drawn[i].level > levels || s.switches.size() >= std::min<size_t>(limits.switches, 8)) continue;
    if (drawn[i].parent >= 0 && index_of[drawn[i].parent] < 0) continue;
    index_of[i] = static_cast<int>(s.switches.size());
    SwitchSpec sw;
    sw.parent = drawn[i].parent < 0 ? -1 : index_of[drawn[i].parent];
    s.switches.push_back(sw);
  }
  for (size_t i = 0; i < s.switches.size(); ++i) {
    const int parent = s.switches[i].parent;
    if (parent >= 0) s.switches[parent].children.push_back(static_cast<int>(i));
  }

  // --- The parameter node, and each switch's configuration. ---
  Rng ps_rng(Mix(seed, kTopology, 1));
  s.param_node = ps_rng.Chance(0.6) && Has(limits, kFeatureParamNode);
  s.param_node_ip = Ip(10, 0, 200, 1);
  for (size_t i = 0; i < s.switches.size(); ++i) {
    SwitchSpec& sw = s.switches[i];
    Rng r(Mix(seed, kSwitch, i));
    sw.workers = static_cast<uint32_t>(r.Range(1, 2));
    if (!Has(limits, kFeatureTwoWorkers)) sw.workers = 1;
    const uint32_t slot_choices[] = {64, 128, 256, 1024};
    sw.slots = slot_choices[r.Below(4)];
    const bool tiny = r.Chance(0.3) && Has(limits, kFeatureTinyTables);
    if (tiny) sw.slots = 64;
    sw.spare_slots = tiny ? static_cast<uint32_t>(r.Range(0, 2)) : sw.slots / 16;
    sw.bypass_entries = tiny ? 64 : static_cast<uint32_t>(r.Range(64, 4096));
    sw.bypass_ttl_ms = static_cast<uint32_t>(r.Range(500, 5000));
    const bool timers = r.Chance(0.5) && Has(limits, kFeatureTimers);
    sw.timeout_ms = timers ? static_cast<uint32_t>(r.Range(2, 40)) : 0;
    sw.batch = r.Chance(0.3);
    sw.subswitch_nodes = r.Chance(0.5);
    // The hold pool is not among the tables drawn tiny: a pool smaller than
    // the jobs' chunks need at once can keep them all waiting
    // (docs/testing.md, "What the generator covers").
    sw.hold_buffers = 4096;
    sw.stale_slot_ms = static_cast<uint32_t>(r.Range(500, 3000));
    sw.member_rebind_ms = 30000;
    sw.give_up_ms = 2000;
    // Root jobs' TAN: needed wherever timers may leave a chunk short.
    if (s.param_node && r.Chance(0.6)) {
      sw.tan = SwitchSpec::Tan::kRemote;
    } else {
      sw.tan = r.Chance(0.7) ? SwitchSpec::Tan::kSelf : SwitchSpec::Tan::kNone;
    }
  }
  // Timers anywhere presume a TAN at the root; a switch-wide timer at the
  // root needs one there, and an in-band job's root may be any switch.
  for (SwitchSpec& sw : s.switches) {
    if (sw.timeout_ms > 0 && sw.tan == SwitchSpec::Tan::kNone) sw.tan = SwitchSpec::Tan::kSelf;
  }
  bool any_timer = false;
  for (const SwitchSpec& sw : s.switches) any_timer |= sw.timeout_ms > 0;
  if (any_timer && s.switches[0].tan == SwitchSpec::Tan::kNone) s.switches[0].tan = SwitchSpec::Tan::kSelf;

  // --- The jobs. ---
  std::vector<int> leaves;
  for (size_t i = 0; i < s.switches.size(); ++i) {
    if (s.switches[i].children.empty()) leaves.push_back(static_cast<int>(i));
  }
  Rng jobs_rng(Mix(seed, kJob));
  const uint32_t n_jobs = std::min<uint32_t>(static_cast<uint32_t>(jobs_rng.Range(1, 8)), limits.jobs);
  const uint32_t total_ranks = std::min<uint32_t>(static_cast<uint32_t>(jobs_rng.Range(2, 64)), limits.ranks);
  uint32_t ranks_left = std::max<uint32_t>(total_ranks, n_jobs);
  for (uint32_t j = 0; j < n_jobs; ++j) {
    Rng r(Mix(seed, kJob, 1 + j));
    JobSpecSim job;
    job.id = 1000 + j;
    job.key = r.Next() | 1;
    // Its ranks: an even share of what is left, at least one.
    const uint32_t share = std::max<uint32_t>(1, ranks_left / (n_jobs - j));
    const uint32_t drawn_ranks = static_cast<uint32_t>(r.Range(1, std::max<uint32_t>(1, 2 * share)));
    uint32_t ranks = std::max<uint32_t>(1, std::min(drawn_ranks, ranks_left - (n_jobs - j - 1)));
    const uint32_t origin_draw = static_cast<uint32_t>(r.Below(10));
    job.origin = origin_draw < 4 ? Origin::kConfig : origin_draw < 7 ? Origin::kApi : Origin::kInBand;
    if (job.origin == Origin::kApi && !Has(limits, kFeatureApi)) job.origin = Origin::kConfig;
    if (job.origin == Origin::kInBand && !Has(limits, kFeatureInBand)) job.origin = Origin::kConfig;
    const std::vector<int>& root_children = s.switches[0].children;
    if (job.origin == Origin::kInBand) {
      // Flat on one switch, or blocks of equal size on children of the root
      // (the design's two tiers).
      const bool multi_draw = r.Chance(0.5);
      const uint32_t want = static_cast<uint32_t>(r.Range(2, 3));
      const uint32_t nodes = std::min<uint32_t>({want, static_cast<uint32_t>(root_children.size()), ranks});
      if (multi_draw && nodes >= 2) {
        ranks -= ranks % nodes;
        for (uint32_t b = 0; b < nodes; ++b) job.in_band_leaves.push_back(root_children[b]);
        const uint32_t per = ranks / nodes;
        for (uint32_t rank = 0; rank < ranks; ++rank) job.rank_switch.push_back(job.in_band_leaves[rank / per]);
      } else {
        const int sw = static_cast<int>(r.Below(s.switches.size()));
        job.rank_switch.assign(ranks, sw);
      }
      job.task_info = r.Chance(0.7) ? client::TaskInfoMode::kInBand : client::TaskInfoMode::kControlUnit;
    } else {
      for (uint32_t rank = 0; rank < ranks; ++rank) {
        job.rank_switch.push_back(leaves[r.Below(leaves.size())]);
      }
      job.task_info = client::TaskInfoMode::kNone;
    }
    ranks_left -= std::min(ranks_left, ranks);
    // Timers and the TAN (config and API jobs; in-band ones take the switches').
    const bool timers = r.Chance(0.4) && Has(limits, kFeatureTimers);
    job.timeout_ms = timers ? static_cast<uint32_t>(r.Range(2, 40)) : 0;
    job.batch = r.Chance(0.3);
    const uint32_t tan_draw = static_cast<uint32_t>(r.Below(3));
    job.tan = tan_draw == 0 ? SwitchSpec::Tan::kNone : tan_draw == 1 ? SwitchSpec::Tan::kSelf
                                                                      : SwitchSpec::Tan::kRemote;
    if (job.tan == SwitchSpec::Tan::kRemote && !s.param_node) job.tan = SwitchSpec::Tan::kSelf;
    if (job.timeout_ms > 0 && job.tan == SwitchSpec::Tan::kNone) job.tan = SwitchSpec::Tan::kSelf;
    // What the job's root uses: its own choice, else the root switch's
    // aggregation.tan (an in-band job has only that).
    const int root = job.origin == Origin::kInBand && job.in_band_leaves.empty() ? job.rank_switch[0] : 0;
    if (job.origin == Origin::kInBand || job.tan == SwitchSpec::Tan::kNone) job.tan = s.switches[root].tan;
    const bool remote = job.tan == SwitchSpec::Tan::kRemote;
    job.verify = remote && r.Chance(0.3) && job.origin != Origin::kInBand;
    job.resend_to_parameter_node = remote && r.Chance(0.3);
    // The client.
    const uint32_t mode = static_cast<uint32_t>(r.Below(3));
    job.float_mode = mode == 0 ? client::FloatMode::kFixedPoint
                               : mode == 1 ? client::FloatMode::kFloat : client::FloatMode::kFloatOrdered;
    if (r.Chance(0.25) && Has(limits, kFeatureLimits)) job.headroom = static_cast<int>(r.Range(0, 2));
    job.window = static_cast<uint32_t>(r.Range(1, 48));
    job.max_chunk_elements = static_cast<uint32_t>(r.Range(1, 340));
    job.data_profile = Has(limits, kFeatureLimits) ? static_cast<uint32_t>(r.Below(3)) : 0;
    job.start_ns = static_cast<uint64_t>(r.Range(1, 20)) * kMs;
    // Its allreduces.
    Rng ops(Mix(seed, kOps, j));
    const uint32_t n_ops = std::min<uint32_t>(static_cast<uint32_t>(ops.Range(1, 6)), limits.ops);
    for (uint32_t k = 0; k < n_ops; ++k) {
      OpSpec op;
      const TypeOp& t = kTypeOps[ops.Below(std::size(kTypeOps))];
      op.dtype = t.dtype;
      op.op = t.op;
      if (t.floats && !Has(limits, kFeatureFloats)) {
        op.dtype = DType::kInt32;
        op.op = ReduceOp::kSum;
      }
      const uint32_t count_draw = ops.Chance(0.3) ? static_cast<uint32_t>(ops.Range(1, 8))
                                                  : static_cast<uint32_t>(ops.Range(1, 2000));
      op.count = std::min(count_draw, limits.elems);
      op.think_ns = static_cast<uint64_t>(ops.Range(0, 2000)) * 1000;
      if ((limits.skip_ops >> k & 1) == 0) job.ops.push_back(op);
    }
    // Faults of the job's own.
    Rng f(Mix(seed, kFaults, 1 + j));
    job.runs = f.Chance(0.2) && Allows(limits, kFaultRerun) ? 2 : 1;
    job.rerun_gap_ns = static_cast<uint64_t>(f.Range(0, 50)) * kMs;
    if (f.Chance(0.1) && Allows(limits, kFaultRankCrash)) {
      job.crash_rank = static_cast<int>(f.Below(job.ranks()));
      job.crash_after_ns = static_cast<uint64_t>(f.Range(0, 200)) * kMs;
    }
    // Straggler prediction, from a stream of its own (the draws above stay
    // what they were). Only where the job's root has a TAN: the excluded
    // members' data goes there as late data, and a root without one ends
    // every chunk that lacks them INCOMPLETE (docs/stragglers.md). A config
    // or API job with timers has one (above); an in-band job's timeout_ms is
    // not its own (it takes the switches'), and its TAN is its root
    // switch's, which may be none.
    Rng p(Mix(seed, kPredict, 1 + j));
    if (job.timeout_ms > 0 && job.tan != SwitchSpec::Tan::kNone && p.Chance(0.4) &&
        Has(limits, kFeaturePredict)) {
      job.predict_top = static_cast<uint32_t>(p.Range(1, job.ranks() + 1));
      job.predict_every_ns = static_cast<uint64_t>(p.Range(5, 60)) * kMs;
    }
    // Run ids, from a stream of their own. A run that lost a rank before it
    // sent anything can be told from the next run only by a shared run id
    // (docs/protocol.md, "Runs"): such a job always has them.
    Rng ids(Mix(seed, kRunIds, 1 + j));
    job.run_ids = ids.Chance(0.5) || (job.crash_rank >= 0 && job.runs > 1);
    // A main server, from a stream of its own. Verify jobs take every result
    // from the parameter node and deliver none; a job whose chunks may go to
    // the parameter node direct is left out too (such chunks are not
    // delivered either).
    Rng fin(Mix(seed, kFinal, 1 + j));
    const bool may_serve = job.origin != Origin::kInBand && !job.verify && !job.resend_to_parameter_node;
    job.main_server = fin.Chance(0.35) && Has(limits, kFeatureFinal) && may_serve;
    // Both mode, from a stream of its own: a job whose every contribution is
    // kept where it arrives (none bypasses the switch for a predicted
    // straggler), and whose main server fetches them all once a run ended.
    // A run's copies must fit the job's share of the store at once
    // (SwitchYaml's aggregation.store): its chunks are made large enough.
    Rng keep(Mix(seed, kKeep, 1 + j));
    if (keep.Chance(0.3) && Has(limits, kFeatureKeep) && may_serve) {
      job.keep = true;
      job.main_server = true;
      job.predict_top = 0;
      job.predict_every_ns = 0;
      // Store mode: on one switch, its first rank's, without timers.
      job.store = keep.Chance(0.4) && Has(limits, kFeatureStore);
      if (job.store) {
        job.rank_switch.assign(job.ranks(), job.rank_switch.front());
        job.timeout_ms = 0;
        job.batch = false;
      }
      uint64_t elems = 0;
      for (const OpSpec& op : job.ops) elems += op.count;
      // Chunks over every op, times the ranks at one switch at most, within
      // kKeptPerRun (fixed-point float ops add an exponent exchange each).
      const uint64_t chunks_allowed = std::max<uint64_t>(1, kKeptPerRun / job.ranks() / 2);
      const uint64_t at_least = (elems + chunks_allowed - 1) / chunks_allowed;
      job.max_chunk_elements = std::max<uint32_t>(job.max_chunk_elements, static_cast<uint32_t>(at_least));
    }
    // A parameter-server job, from a stream of its own: a root job (config
    // or API) on agg-ps, which answers every chunk. Its float32 sums are
    // gradients (the client's float modes: agg-ps refuses fixed point), its
    // other sums become float32 ones (agg-ps refuses sums of other types),
    // and its values stay finite (a NaN or infinity would propagate through
    // every later step). No final result (the root delivers none for it),
    // no both mode.
    Rng sgd(Mix(seed, kSgd, 1 + j));
    if (sgd.Chance(0.25) && Has(limits, kFeatureSgd) && s.param_node && job.origin != Origin::kInBand &&
        !job.store) {
      const float rates[] = {0.5f, 0.125f, 0.01f, 0.001f};
      job.learning_rate = rates[sgd.Below(std::size(rates))];
      job.tan = SwitchSpec::Tan::kRemote;
      job.verify = false;
      job.main_server = false;
      job.keep = false;
      if (job.float_mode == client::FloatMode::kFixedPoint) {
        job.float_mode = sgd.Chance(0.5) ? client::FloatMode::kFloat : client::FloatMode::kFloatOrdered;
      }
      if (job.data_profile == static_cast<uint32_t>(DataProfile::kSpecial)) {
        job.data_profile = static_cast<uint32_t>(DataProfile::kSmall);
      }
      for (OpSpec& op : job.ops) {
        if (op.op == ReduceOp::kSum) op.dtype = DType::kFloat32;
      }
    }
    MarkFinal(job);
    // Left out by the limits: everything it drew stays drawn.
    if ((limits.skip_jobs >> j & 1) == 0) s.jobs.push_back(std::move(job));
  }

  // --- Faults of the fabric. ---
  Rng f(Mix(seed, kFaults));
  if (f.Chance(0.5)) {
    s.links.loss = Allows(limits, kFaultLoss) ? f.Unit() * 0.05 : 0;
    s.links.duplicate = Allows(limits, kFaultDuplicate) ? f.Unit() * 0.03 : 0;
    s.links.reorder = Allows(limits, kFaultReorder) ? f.Unit() * 0.05 : 0;
  }
  if (f.Chance(0.15) && Allows(limits, kFaultSwitchRestart)) {
    SwitchRestart r;
    r.sw = static_cast<int>(f.Below(s.switches.size()));
    r.at_ns = static_cast<uint64_t>(f.Range(5, 300)) * kMs;
    r.down_ns = static_cast<uint64_t>(f.Range(1, 100)) * kMs;
    s.restarts.push_back(r);
  }
  // A switch back from a restart has not heard from a member that had every
  // result it needed before it went down: the rank of the next run in that
  // member's place is taken for the old run's, and its data may complete
  // the old run's leftovers, which only run ids tell apart (docs/protocol.md,
  // "Runs"; ClientOptions::run_id). Its ranks are told (the run ends), but
  // a FINAL chunk so completed reaches the main server under the old run's
  // label: a job with a main server run twice through a fabric with a
  // restart has run ids (seed 1432029).
  if (!s.restarts.empty()) {
    for (JobSpecSim& job : s.jobs) job.run_ids = job.run_ids || (job.runs > 1 && job.main_server);
  }
  if (s.param_node && f.Chance(0.15) && Allows(limits, kFaultTanLoss)) {
    Outage o;
    o.at_ns = static_cast<uint64_t>(f.Range(5, 300)) * kMs;
    o.down_ns = static_cast<uint64_t>(f.Range(1, 500)) * kMs;
    s.param_node_outages.push_back(o);
  }
  s.op_bound_ns = (ProgressTimeoutMs(s) + 1000) * kMs;
  for (SwitchSpec& sw : s.switches) sw.give_up_ms = static_cast<uint32_t>(TanGiveUpMs(s));
  s.limit_ns = 60'000 * kMs;
  Finalize(s);
  return s;
}

uint64_t ProgressTimeoutMs(const Scenario& s) {
  uint64_t ms = 3000;
  bool crash = false;
  for (const JobSpecSim& j : s.jobs) crash = crash || j.crash_rank >= 0;
  if (crash) {
    for (const SwitchSpec& sw : s.switches) ms = std::max<uint64_t>(ms, sw.stale_slot_ms + 1000);
  }
  return ms;
}

uint64_t TanGiveUpMs(const Scenario& s) {
  bool crash = false;
  for (const JobSpecSim& j : s.jobs) crash = crash || j.crash_rank >= 0;
  return crash ? std::max<uint64_t>(2000, ProgressTimeoutMs(s)) : 2000;
}

void Finalize(Scenario& s) {
  for (SwitchSpec& sw : s.switches) sw.children.clear();
  for (size_t i = 0; i < s.switches.size(); ++i) {
    SwitchSpec& sw = s.switches[i];
    if (sw.parent >= 0) s.switches[sw.parent].children.push_back(static_cast<int>(i));
    sw.node_id = static_cast<uint16_t>(100 + i);
    sw.ip = Ip(10, 0, 100, static_cast<uint32_t>(1 + i));
    sw.mac = Mac(0, 1, static_cast<uint8_t>(1 + i));
  }
  s.param_node_ip = Ip(10, 0, 200, 1);
  s.main_server_ip = Ip(10, 0, 200, 2);
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    JobSpecSim& job = s.jobs[j];
    if (job.id == 0) job.id = static_cast<uint32_t>(1000 + j);
    if (job.key == 0) job.key = Mix(s.seed, kJob, 100 + j) | 1;
    const bool flat = (job.origin == Origin::kInBand && job.in_band_leaves.empty()) || job.store;
    const int root = flat ? job.rank_switch[0] : 0;
    if (job.origin == Origin::kInBand || job.tan == SwitchSpec::Tan::kNone) job.tan = s.switches[root].tan;
  }
  if (s.op_bound_ns == 0) s.op_bound_ns = (ProgressTimeoutMs(s) + 1000) * kMs;
  if (s.limit_ns == 0) s.limit_ns = 60'000 * kMs;
}

JobTree TreeOf(const Scenario& s, size_t job) {
  const JobSpecSim& j = s.jobs[job];
  JobTree t;
  if ((j.origin == Origin::kInBand && j.in_band_leaves.empty()) || j.store) {
    // Flat: every rank at one switch, which is the job's root.
    t.root = j.rank_switch.front();
    for (uint32_t r = 0; r < j.ranks(); ++r) t.at[t.root].ranks.push_back(static_cast<uint16_t>(r));
    return t;
  }
  t.root = 0;
  for (uint32_t r = 0; r < j.ranks(); ++r) {
    int sw = j.rank_switch[r];
    t.at[sw].ranks.push_back(static_cast<uint16_t>(r));
    // Every switch up to the root takes part.
    while (sw != 0) {
      const int parent = s.switches[sw].parent;
      std::vector<int>& kids = t.at[parent].children;
      if (std::find(kids.begin(), kids.end(), sw) == kids.end()) kids.push_back(sw);
      sw = parent;
    }
  }
  t.at[0];
  for (auto& [sw, node] : t.at) {
    std::sort(node.ranks.begin(), node.ranks.end());
    if (j.origin == Origin::kInBand) {
      // The root's members are the leaves in block order (their node ids).
      if (sw == 0) node.children = j.in_band_leaves;
    } else {
      std::sort(node.children.begin(), node.children.end());  // node id = 100 + index
    }
  }
  return t;
}

std::vector<uint16_t> JobTree::Covers(int sw) const {
  std::vector<uint16_t> out;
  const auto it = at.find(sw);
  if (it == at.end()) return out;
  out = it->second.ranks;
  for (int c : it->second.children) {
    const std::vector<uint16_t> below = Covers(c);
    out.insert(out.end(), below.begin(), below.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

const char* OriginName(Origin o) {
  switch (o) {
    case Origin::kConfig: return "config";
    case Origin::kApi: return "api";
    case Origin::kInBand: return "in-band";
  }
  return "?";
}

const char* TanName(SwitchSpec::Tan t) {
  switch (t) {
    case SwitchSpec::Tan::kNone: return "none";
    case SwitchSpec::Tan::kSelf: return "self";
    case SwitchSpec::Tan::kRemote: return "agg-ps";
  }
  return "?";
}

}  // namespace

void MarkFinal(JobSpecSim& job) {
  for (OpSpec& op : job.ops) op.final = false;
  if (!job.main_server || job.store || job.ops.empty()) return;  // a store job has no result
  OpSpec& last = job.ops.back();
  last.final = !(last.dtype == DType::kFloat32 && last.op == ReduceOp::kSum &&
                 job.float_mode == client::FloatMode::kFixedPoint);
}

std::string Scenario::Describe() const {
  std::ostringstream o;
  o << "seed " << seed << " limits " << limits.ToString() << "\n";
  for (size_t i = 0; i < switches.size(); ++i) {
    const SwitchSpec& sw = switches[i];
    o << "  switch s" << i << (sw.parent < 0 ? " (root)" : " under s" + std::to_string(sw.parent))
      << ": " << sw.workers << " worker(s), " << sw.slots << " slots (" << sw.spare_slots
      << " spare), bypass " << sw.bypass_entries << "/" << sw.bypass_ttl_ms << " ms"
      << (sw.subswitch_nodes ? " nodes" : " switch") << ", timeout " << sw.timeout_ms << " ms"
      << (sw.batch ? " batch" : "") << ", tan " << TanName(sw.tan) << "\n";
  }
  if (param_node) o << "  agg-ps on the root\n";
  for (const JobSpecSim& j : jobs) {
    o << "  job " << j.id << " (" << OriginName(j.origin) << "): " << j.ranks() << " ranks on";
    for (int sw : j.rank_switch) o << " s" << sw;
    o << "; timeout " << j.timeout_ms << " ms" << (j.batch ? " batch" : "") << ", tan " << TanName(j.tan)
      << (j.verify ? ", verify" : "") << (j.resend_to_parameter_node ? ", resends to agg-ps" : "")
      << ", float mode " << static_cast<int>(j.float_mode)
      << (j.headroom ? ", headroom " + std::to_string(*j.headroom) : "") << ", window " << j.window
      << ", chunks of " << j.max_chunk_elements << ", data " << j.data_profile << ", " << j.runs
      << " run(s)";
    if (j.crash_rank >= 0) o << ", rank " << j.crash_rank << " crashes at +" << j.crash_after_ns / kMs << " ms";
    if (j.run_ids) o << ", run ids";
    if (j.main_server) o << ", main server";
    if (j.keep) o << (j.store ? ", store mode" : ", both mode");
    if (j.learning_rate > 0) o << ", parameter server (agg-ps --sgd, learning rate " << j.learning_rate << ")";
    if (j.predict_top > 0) {
      o << ", stragglers top " << j.predict_top << " applied every " << j.predict_every_ns / kMs << " ms";
    }
    o << "\n    ops:";
    for (const OpSpec& op : j.ops) {
      o << " " << aggregator::DTypeName(op.dtype) << "/" << aggregator::ReduceOpName(op.op) << "x" << op.count
        << (op.final ? " final" : "");
    }
    o << "\n";
  }
  o << "  links: loss " << links.loss << ", duplicate " << links.duplicate << ", reorder " << links.reorder << "\n";
  for (const SwitchRestart& r : restarts) {
    o << "  s" << r.sw << " restarts at " << r.at_ns / kMs << " ms, down " << r.down_ns / kMs << " ms\n";
  }
  for (const Outage& p : param_node_outages) {
    o << "  agg-ps down at " << p.at_ns / kMs << " ms for " << p.down_ns / kMs << " ms\n";
  }
  return o.str();
}

namespace {

int32_t DrawInt(Rng& r, DataProfile p, uint32_t world) {
  switch (p) {
    case DataProfile::kSmall:
      return static_cast<int32_t>(r.Range(-1000, 1000));
    case DataProfile::kWide: {
      // Sums near the limits: some saturate at a switch, some only in an
      // order that a partial takes, some fit.
      const int64_t span = int64_t{INT32_MAX} / std::max<uint32_t>(1, world / 2 + 1);
      return static_cast<int32_t>(r.Range(-span, span));
    }
    case DataProfile::kSpecial: {
      const uint64_t k = r.Below(8);
      if (k == 0) return INT32_MAX;
      if (k == 1) return INT32_MIN;
      if (k == 2) return static_cast<int32_t>(r.Range(1'000'000'000, INT32_MAX));
      if (k == 3) return static_cast<int32_t>(r.Range(INT32_MIN, -1'000'000'000));
      return static_cast<int32_t>(r.Range(-100, 100));
    }
  }
  return 0;
}

float DrawFloat(Rng& r, DataProfile p, uint32_t world) {
  switch (p) {
    case DataProfile::kSmall:
      return static_cast<float>(r.Range(-4096, 4096)) / 64.0f;
    case DataProfile::kWide: {
      const double mag = std::ldexp(r.Unit(), static_cast<int>(r.Range(-30, 120)));
      return static_cast<float>(r.Chance(0.5) ? -mag : mag) / static_cast<float>(std::max<uint32_t>(1, world));
    }
    case DataProfile::kSpecial: {
      const uint64_t k = r.Below(16);
      if (k == 0) return -0.0f;
      if (k == 1) return std::numeric_limits<float>::infinity();
      if (k == 2) return -std::numeric_limits<float>::infinity();
      if (k == 3) return std::bit_cast<float>(0x7FA00000u | static_cast<uint32_t>(r.Below(1u << 20)));  // NaN
      if (k == 4) return std::numeric_limits<float>::denorm_min() * static_cast<float>(r.Range(1, 1000));
      if (k == 5) return std::numeric_limits<float>::max() * static_cast<float>(r.Unit());
      if (k == 6) return -std::numeric_limits<float>::max() * static_cast<float>(r.Unit());
      return static_cast<float>(r.Range(-1000, 1000)) / 8.0f;
    }
  }
  return 0;
}

}  // namespace

std::vector<uint8_t> RankData(const Scenario& s, size_t job, uint32_t run, uint32_t rank, uint32_t op) {
  const JobSpecSim& j = s.jobs[job];
  const OpSpec& spec = j.ops[op];
  if (const auto o = j.inputs.find(op); o != j.inputs.end()) {
    if (const auto r = o->second.find(rank); r != o->second.end()) return r->second;
  }
  Rng r(Mix(s.seed, kData, job, uint64_t{run} << 40 | uint64_t{rank} << 20 | op));
  const auto profile = static_cast<DataProfile>(j.data_profile);
  const uint32_t world = j.ranks();
  std::vector<uint8_t> out(size_t{spec.count} * aggregator::ElementSize(spec.dtype));
  for (uint32_t i = 0; i < spec.count; ++i) {
    switch (spec.dtype) {
      case DType::kInt32: {
        int32_t v = DrawInt(r, profile, world);
        if (spec.op == ReduceOp::kAnd || spec.op == ReduceOp::kOr) v = static_cast<int32_t>(r.Next());
        std::memcpy(&out[size_t{i} * 4], &v, 4);
        break;
      }
      case DType::kFloat32: {
        const float v = DrawFloat(r, profile, world);
        std::memcpy(&out[size_t{i} * 4], &v, 4);
        break;
      }
      case DType::kFloat16: {
        const uint16_t v = aggregator::FloatToHalf(DrawFloat(r, profile == DataProfile::kWide ? DataProfile::kSmall : profile, world));
        std::memcpy(&out[size_t{i} * 2], &v, 2);
        break;
      }
      case DType::kBFloat16: {
        const uint16_t v = aggregator::FloatToBFloat16(DrawFloat(r, profile, world));
        std::memcpy(&out[size_t{i} * 2], &v, 2);
        break;
      }
      case DType::kBool:
        out[i] = r.Chance(0.5) ? static_cast<uint8_t>(r.Range(1, 255)) : 0;
        break;
    }
  }
  return out;
}

}  // namespace aggswitch::sim
