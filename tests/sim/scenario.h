// A scenario of the fabric simulator, drawn from a seed: the switches and
// their tree, each switch's configuration, the parameter node, the jobs
// (their origin, tree, modes and timers, their ranks' allreduces and the
// data they reduce) and the faults (lossy, duplicating, reordering links;
// ranks that crash, switches that restart, a parameter node that goes away;
// jobs run again under the same id). Generate(seed, limits) is a pure
// function: the same pair draws the same scenario on every machine.
//
// Limits bound what is drawn, and so shrink a failing scenario: every value
// is drawn first and clamped after, and every job, switch and link draws
// from its own stream, so that a smaller limit keeps the rest of the
// scenario as it was.
//
//   Scenario s = Generate(1234, Limits{});
//   Limits smaller = s.limits; smaller.ranks = 3;
//   Scenario t = Generate(1234, smaller);     // the same scenario, fewer ranks
//
// Thread safety: pure functions; any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/types.h"
#include "client/client.h"
#include "common/net_addr.h"
#include "common/status.h"
#include "tests/sim/rank.h"

namespace aggswitch::sim {

// Kinds of fault a scenario may draw (Limits::faults, a bit each).
enum Fault : uint32_t {
  kFaultLoss = 1u << 0,
  kFaultDuplicate = 1u << 1,
  kFaultReorder = 1u << 2,
  kFaultRankCrash = 1u << 3,
  kFaultSwitchRestart = 1u << 4,
  kFaultTanLoss = 1u << 5,
  kFaultRerun = 1u << 6,
};
inline constexpr uint32_t kAllFaults = (1u << 7) - 1;

// Features a scenario may draw (Limits::features, a bit each).
enum Feature : uint32_t {
  kFeatureTrees = 1u << 0,         // more than one switch
  kFeatureTimers = 1u << 1,        // slot timers and a TAN
  kFeatureParamNode = 1u << 2,     // agg-ps: remote TAN, verify mode, resends to it
  kFeatureInBand = 1u << 3,        // jobs that register in band
  kFeatureApi = 1u << 4,           // jobs added through the API
  kFeatureFloats = 1u << 5,        // float, float16, bfloat16 allreduces
  kFeatureLimits = 1u << 6,        // values near the int32 and float limits, low headroom
  kFeatureTinyTables = 1u << 7,    // slot, spare and bypass tables near their minimum
  kFeatureTwoWorkers = 1u << 8,    // two worker lcores per switch (hand-offs)
  kFeaturePredict = 1u << 9,       // straggler predictions applied while jobs run
  kFeatureFinal = 1u << 10,        // a main server that takes each run's final result
  kFeatureKeep = 1u << 11,         // jobs in both mode, whose main server FETCHes what they kept
  kFeatureSgd = 1u << 12,          // parameter-server jobs: agg-ps --sgd answers every chunk
  kFeatureStore = 1u << 13,        // of the jobs kFeatureKeep draws, some in store mode
};
inline constexpr uint32_t kAllFeatures = (1u << 14) - 1;

struct Limits {
  uint32_t switches = 8;
  uint32_t levels = 3;
  uint32_t ranks = 64;   // over every job
  uint32_t jobs = 8;
  uint32_t ops = 6;      // allreduces per run of a job
  uint32_t elems = 4096; // elements per allreduce
  uint32_t faults = kAllFaults;
  uint32_t features = kAllFeatures;
  // Jobs (by index) and allreduces (by index in every job) left out, a bit
  // each: what remains is drawn as before.
  uint32_t skip_jobs = 0;
  uint32_t skip_ops = 0;

  // "switches=8,levels=3,ranks=64,jobs=8,ops=6,elems=4096,faults=0x7f,features=0x3fff,
  // skip_jobs=0x0,skip_ops=0x0"
  std::string ToString() const;
  // That form, any subset of its keys; an error names the key.
  static common::Result<Limits> Parse(std::string_view text);
  friend bool operator==(const Limits&, const Limits&) = default;
};

struct SwitchSpec {
  int parent = -1;         // the switch above; -1: the tree's root
  uint16_t node_id = 0;    // its node id at the parent
  std::vector<int> children;
  uint32_t ip = 0;         // its aggregation address (host order)
  common::MacAddr mac;
  uint32_t workers = 1;
  uint32_t slots = 256;
  uint32_t spare_slots = 16;
  uint32_t bypass_entries = 4096;
  uint32_t bypass_ttl_ms = 2000;
  uint32_t timeout_ms = 0;  // the switch-wide slot timer (in-band jobs)
  bool batch = false;
  bool subswitch_nodes = false;
  uint32_t hold_buffers = 2048;
  uint32_t stale_slot_ms = 2000;
  uint32_t member_rebind_ms = 30000;
  uint32_t give_up_ms = 2000;  // its own TAN's
  // The switch-wide TAN of root jobs: none, itself, or the parameter node.
  enum class Tan : uint8_t { kNone, kSelf, kRemote };
  Tan tan = Tan::kNone;
};

enum class Origin : uint8_t { kConfig, kApi, kInBand };

struct JobSpecSim {
  uint32_t id = 0;
  uint64_t key = 0;
  Origin origin = Origin::kConfig;
  // The switch each rank's host hangs off (rank r: node id r).
  std::vector<int> rank_switch;
  // In-band jobs of several nodes: the leaves, in block order (rank r at
  // leaves[r / (ranks / leaves.size())]); empty for a flat one.
  std::vector<int> in_band_leaves;
  uint32_t timeout_ms = 0;  // config and API jobs, at every switch of the job
  bool batch = false;
  SwitchSpec::Tan tan = SwitchSpec::Tan::kNone;  // config and API jobs, at the root
  bool verify = false;
  client::FloatMode float_mode = client::FloatMode::kFixedPoint;
  std::optional<int> headroom;
  bool resend_to_parameter_node = false;
  client::TaskInfoMode task_info = client::TaskInfoMode::kNone;
  uint32_t window = 32;
  uint32_t max_chunk_elements = 0;
  std::vector<OpSpec> ops;
  uint32_t data_profile = 0;  // how its values are drawn (DataProfile)
  uint64_t start_ns = 0;      // after the world's start
  uint32_t runs = 1;          // 2: run again under the same id once the first run ended
  uint64_t rerun_gap_ns = 0;
  int crash_rank = -1;        // a rank whose first run's process dies
  uint64_t crash_after_ns = 0;
  // Straggler prediction (jobs with slot timers): every `predict_every_ns`
  // from the job's start, each switch where it has ranks applies the
  // prediction of its `predict_top` latest members (0: none), as
  // `aggctl stragglers --top N --apply` would.
  uint32_t predict_top = 0;
  uint64_t predict_every_ns = 0;
  // The ranks of each run share a run id (ClientOptions::run_id) instead of
  // drawing their own incarnations.
  bool run_ids = false;
  // The job names a main server (config and API jobs), which the root
  // delivers each run's final result to: its last allreduce, marked FINAL
  // (OpSpec::final) unless it is a float32 sum in fixed point.
  bool main_server = false;
  // Both mode (aggregation.jobs[].mode, at every switch of the job): each
  // switch keeps its ranks' contributions as it reduces them, and once a run
  // has ended the main server (which such a job always has) FETCHes every
  // contribution each rank sent, then frees it (RELEASE).
  bool keep = false;
  // Store mode (with keep): the job reduces nothing. Its ranks, all on one
  // switch (a store job spans no switches), send each chunk and take the
  // switch's ACK (StoreRank); the main server reads the copies back as in
  // both mode.
  bool store = false;
  // A parameter-server job (parameter_server at its root, agg-ps its TAN,
  // run there with --sgd ID=learning_rate; 0: not one): every chunk goes to
  // agg-ps, and a float32 sum comes back as the job's parameters after one
  // SGD step, params - learning_rate * sum (tools/agg-ps/sgd.h). Its sums
  // are float32 in float or ordered mode, its values never special.
  float learning_rate = 0;
  // Inputs given by hand (hand-built scenarios): op -> rank -> the bytes
  // RankData returns instead of drawing them.
  std::map<uint32_t, std::map<uint32_t, std::vector<uint8_t>>> inputs;
  uint32_t ranks() const { return static_cast<uint32_t>(rank_switch.size()); }
};

// What a run of a job in both mode keeps at one switch at most, about: its
// chunks over every allreduce (an exponent exchange's included) times its
// ranks there. Generate makes such a job's chunks large enough; the
// switches' stores (aggregation.store) hold several times as much.
inline constexpr uint64_t kKeptPerRun = 4096;

struct SwitchRestart {
  int sw = 0;
  uint64_t at_ns = 0;
  uint64_t down_ns = 0;
};

struct Outage {
  uint64_t at_ns = 0;
  uint64_t down_ns = 0;
};

struct LinkProfile {
  double loss = 0, duplicate = 0, reorder = 0;
};

struct Scenario {
  uint64_t seed = 0;
  Limits limits;
  std::vector<SwitchSpec> switches;  // [0] is the root
  bool param_node = false;           // agg-ps on the root's "ps" port
  uint32_t param_node_ip = 0;
  uint32_t main_server_ip = 0;       // on the root's "ms" port, when a job has one
  std::vector<JobSpecSim> jobs;
  LinkProfile links;                 // the most a link may draw
  std::vector<SwitchRestart> restarts;
  std::vector<Outage> param_node_outages;
  // Every allreduce that no fault touches ends within this much simulated
  // time of its start.
  uint64_t op_bound_ns = 0;
  // The scenario's simulated time at most.
  uint64_t limit_ns = 0;

  // A few lines for a person: topology, jobs, faults.
  std::string Describe() const;
};

Scenario Generate(uint64_t seed, const Limits& limits);

// How long a rank waits for progress before its allreduce fails (the
// client's progress_timeout): 3 s; when a rank of some job crashes, also
// longer than the switches' stale_slot_ms, the time the dead member's
// chunks may hold slots another job needs, plus a second.
uint64_t ProgressTimeoutMs(const Scenario& s);

// How long a TAN (agg-ps, and each switch's own) waits for a chunk's late
// data before it answers INCOMPLETE: 2 s; when a rank of some job crashes,
// as long as the ranks' progress timeout, since a leaf without slot timers
// or spare slots may hold another job's chunk back until the dead member's
// slots there go stale (stale_slot_ms).
uint64_t TanGiveUpMs(const Scenario& s);

// Fills what a hand-built scenario derives from its switches' parents:
// each switch's children, node id (100 + index), aggregation address and
// MAC, and the parameter node's address; and gives every job the defaults
// Generate draws (its TAN resolved against its root's, a window, an op
// bound and a time limit when unset). Generate calls it too.
void Finalize(Scenario& s);

// Marks the allreduce a job with a main server delivers as its final
// result: its last, unless that is a float32 sum in fixed point (whose
// chunks' order on the wire the oracle does not follow); no other. [any]
void MarkFinal(JobSpecSim& job);

// A job's tree: the switches it spans and, at each, its members in member
// index order (its ranks there, by node id, then its child switches, by node
// id), as the generated configs declare them. In-band jobs: their one
// switch, or their leaves under the root in block order.
struct JobTree {
  int root = 0;
  struct Node {
    std::vector<uint16_t> ranks;  // node ids of the ranks at this switch
    std::vector<int> children;    // switches below it in the job
  };
  std::map<int, Node> at;         // by switch index
  // The ranks below switch `sw` (inclusive of its own).
  std::vector<uint16_t> Covers(int sw) const;
};
JobTree TreeOf(const Scenario& s, size_t job);

// How values are drawn (JobSpecSim::data_profile).
enum class DataProfile : uint32_t {
  kSmall = 0,    // small integers and floats: sums are exact everywhere
  kWide = 1,     // large magnitudes: int32 sums that saturate somewhere, floats near their limits
  kSpecial = 2,  // -0, NaN, Inf, subnormals and extremes mixed in
};

// The input of `rank` to allreduce `op` of run `run` of job `job` (index in
// the scenario): count * size(dtype) little-endian bytes. [any]
std::vector<uint8_t> RankData(const Scenario& s, size_t job, uint32_t run, uint32_t rank, uint32_t op);

}  // namespace aggswitch::sim
