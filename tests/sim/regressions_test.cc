// Regression tests for the defects the fabric simulator found: each a small
// scenario built by hand that runs the real switches, clients and agg-ps
// (run.h) and failed before its fix. The seeds that found them are in the
// simulator's own test (label "sim").
//
// Thread safety: test code; everything runs on the test's main thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "common/log.h"
#include "dataplane/eal.h"
#include "tests/sim/run.h"
#include "tests/sim/scenario.h"

namespace aggswitch::sim {
namespace {

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    common::SetLogLevel(common::LogLevel::kError);
    auto eal = dataplane::EalSession::Init(
        "sim_regressions", {"--no-huge", "-m", "512", "--no-pci", "--no-shconf", "--no-telemetry",
                            "--lcores", "0", "--file-prefix", "sim_regressions_" + std::to_string(getpid()),
                            "--log-level", "lib.*:error"});
    ASSERT_TRUE(eal.ok()) << eal.status().ToString();
    eal_ = std::move(eal).value();
  }
  void TearDown() override { eal_.reset(); }

 private:
  std::unique_ptr<dataplane::EalSession> eal_;
};
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

using aggregator::DType;
using aggregator::ReduceOp;

// A root and `leaves` leaves under it, nothing drawn at random.
Scenario Tree(uint32_t leaves) {
  Scenario s;
  s.seed = 7;
  s.switches.resize(1 + leaves);
  for (uint32_t i = 1; i <= leaves; ++i) s.switches[i].parent = 0;
  return s;
}

JobSpecSim Job(Origin origin, std::vector<int> rank_switch, std::vector<OpSpec> ops) {
  JobSpecSim j;
  j.origin = origin;
  j.rank_switch = std::move(rank_switch);
  j.ops = std::move(ops);
  j.start_ns = 1'000'000;
  return j;
}

std::string Findings(const Outcome& o) {
  std::string all;
  for (const std::string& f : o.failures) all += f + "\n";
  return all;
}

// In control-unit mode every rank but the announcer waits for the job to be
// announced on its own switch: with several nodes, each node's first rank
// announces it there. Before: only rank 0 did, and the other leaves never
// learned the job (every rank there failed with "unknown job").
TEST(SimRegressions, EachNodeOfAControlUnitJobAnnouncesItOnItsSwitch) {
  Scenario s = Tree(2);
  JobSpecSim j = Job(Origin::kInBand, {1, 1, 2, 2}, {{DType::kInt32, ReduceOp::kSum, 700, 0}});
  j.in_band_leaves = {1, 2};
  j.task_info = client::TaskInfoMode::kControlUnit;
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 4u);
}

// A batch trigger is a switch's own choice: a leaf that holds and reduces
// its members in order says nothing of it to its parent. Before, its
// partial carried ORDERED, and the parent refused it as a type mismatch
// when another leaf's (incremental) partial came first.
TEST(SimRegressions, LeavesWithDifferentTriggersMeetAtTheirParent) {
  Scenario s = Tree(2);
  s.switches[2].batch = true;  // in-band jobs take their switch's trigger
  JobSpecSim j = Job(Origin::kInBand, {1, 2}, {{DType::kInt32, ReduceOp::kSum, 1, 0}});
  j.in_band_leaves = {1, 2};
  j.task_info = client::TaskInfoMode::kInBand;
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 2u);
}

std::vector<uint8_t> Int32s(std::vector<int32_t> v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A sum that saturates at a leaf fails as an overflow at every rank, though
// its true value (1e9) fits: the leaf's partial says OVERFLOW and the root
// carries it on, to the members or, in verify mode, to the parameter node
// (which answers EXCEPTION_RETRANSMIT). Before, the root dropped the flag
// and every rank got 147,483,647 as the sum, without an error.
TEST(SimRegressions, AnOverflowAtALeafReachesEveryRank) {
  for (const bool verify : {false, true}) {
    Scenario s = Tree(2);
    s.param_node = verify;
    JobSpecSim j = Job(Origin::kConfig, {1, 1, 2, 2}, {{DType::kInt32, ReduceOp::kSum, 1, 0}});
    j.inputs[0] = {{0, Int32s({1'500'000'000})},
                   {1, Int32s({1'500'000'000})},
                   {2, Int32s({-1'000'000'000})},
                   {3, Int32s({-1'000'000'000})}};
    if (verify) {
      j.tan = SwitchSpec::Tan::kRemote;
      j.verify = true;
    }
    s.jobs.push_back(j);
    Finalize(s);
    auto o = RunScenario(s, {});
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_TRUE(o->ok()) << (verify ? "verify mode: " : "") << Findings(*o);
    EXPECT_EQ(o->ops, 4u);
    EXPECT_EQ(o->ops_ok, 0u) << "every rank fails with the overflow";
  }
}

// A job of one rank at each of two switches, the parent down for its first
// `down_ns` and the job starting at `start_ns`, once it is back: until the
// leaf's ARP for the parent is answered, its partials have nowhere to go.
common::Result<Outcome> RunWithParentDownAtFirst(uint64_t down_ns, uint64_t start_ns) {
  Scenario s = Tree(1);
  s.restarts.push_back({0, 0, down_ns});
  JobSpecSim j = Job(Origin::kConfig, {1, 1}, {{DType::kInt32, ReduceOp::kSum, 64, 0}});
  j.start_ns = start_ns;
  s.jobs.push_back(j);
  Finalize(s);
  return RunScenario(s, {});
}

// A leaf whose first ARP for its parent goes unanswered asks again soon,
// not a second later. Before, the next request went after arp_retry (1 s),
// and every chunk of the job waited that long; with more losses on the
// way, ranks timed out (3 s) on a fabric without a lasting fault.
TEST(SimRegressions, AnUnansweredArpIsAskedAgainSoon) {
  auto o = RunWithParentDownAtFirst(20'000'000, 30'000'000);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 2u);
  EXPECT_LT(o->sim_ns, 600'000'000u) << "the allreduce waited for the next ARP";
}

// The second request comes within milliseconds too, not at the next scan of
// the jobs' hops: a leaf whose first ARP went unanswered had every chunk
// wait 200 ms, long enough for a slot timer above to send its chunks on
// without the leaf's share.
TEST(SimRegressions, AnUnansweredArpIsAskedAgainWithinMilliseconds) {
  auto o = RunWithParentDownAtFirst(2'000'000, 5'000'000);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 2u);
  EXPECT_LT(o->sim_ns, 100'000'000u) << "the allreduce waited for the next scan";
}

// A root's VERIFY to its parameter node crosses the switches between them
// at L2, as the parameter node's answer does. Before, a switch with an
// aggregation address took it by the port trigger and dropped it (a
// switch does not take VERIFY): an in-band job rooted at a leaf, whose
// parameter node hangs off the spine, never had a saturated sum answered.
TEST(SimRegressions, AVerifyCrossesTheSwitchesOnItsWayToTheParameterNode) {
  Scenario s = Tree(1);
  s.param_node = true;
  s.switches[1].tan = SwitchSpec::Tan::kRemote;  // in-band jobs at the leaf: agg-ps
  JobSpecSim j = Job(Origin::kInBand, {1, 1}, {{DType::kInt32, ReduceOp::kSum, 1, 0}});
  j.task_info = client::TaskInfoMode::kInBand;
  j.inputs[0] = {{0, Int32s({2'000'000'000})}, {1, Int32s({2'000'000'000})}};
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops, 2u);
  EXPECT_EQ(o->ops_ok, 0u) << "both fail with the overflow the parameter node found";
  EXPECT_LT(o->sim_ns, 1'000'000'000u) << "answered, not timed out";
}

// A straggler prediction that names every member of a job at its switch
// (--top at least the member count) leaves the least late one in. Before,
// it excluded them all: no slot took a chunk, no first data reached the TAN,
// their data reached it as late data for nothing, and every rank timed out.
TEST(SimRegressions, APredictionOfEveryMemberLeavesOneIn) {
  Scenario s = Tree(0);
  JobSpecSim j = Job(Origin::kConfig, {0, 0, 0},
                     {{DType::kInt32, ReduceOp::kSum, 3000, 0}, {DType::kInt32, ReduceOp::kSum, 3000, 0},
                      {DType::kInt32, ReduceOp::kSum, 3000, 0}, {DType::kInt32, ReduceOp::kSum, 3000, 0}});
  j.timeout_ms = 5;
  j.tan = SwitchSpec::Tan::kSelf;
  j.window = 4;
  j.max_chunk_elements = 100;
  j.predict_top = 3;
  j.predict_every_ns = 2'000'000;
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 12u);
}

// A prediction that names more members than a partial can list beside a
// full chunk excludes only as many as its members' clients leave room for
// (32 ids by default), the latest first. Before, it excluded all but one:
// a leaf's slot completed with the one member in and could not carry its
// list of 39 ids up beside 340 int32 elements, so it answered every chunk
// INCOMPLETE (missing_list_overflow; seed 1394933).
TEST(SimRegressions, APredictionExcludesNoMoreMembersThanAPartialLists) {
  Scenario s = Tree(1);
  std::vector<OpSpec> ops;
  for (int k = 0; k < 12; ++k) ops.push_back({DType::kInt32, ReduceOp::kSum, 3 * 340, 1'000'000});
  JobSpecSim j = Job(Origin::kConfig, std::vector<int>(40, 1), ops);
  j.timeout_ms = 5;
  j.batch = true;
  j.tan = SwitchSpec::Tan::kSelf;
  j.window = 4;
  j.max_chunk_elements = 340;  // a full chunk: 32 ids of room at a 1500-byte MTU
  j.predict_top = 40;
  j.predict_every_ns = 2'000'000;
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops_ok, 12u * 40u);
}

// agg-ps keeps a parameter-server job's parameters across its runs, and
// applies the step of every chunk it answers, also of an allreduce whose
// ranks all died before they got the rest: the next run's step starts from
// those parameters, not from the ones before the allreduce. Before, the
// oracle took such an allreduce for one never begun and expected the next
// run's parameters from zero: the real result, built on the dead run's
// chunks as documented, was judged a wrong value.
TEST(SimRegressions, AStepEveryRankDiedInLeavesTheParametersUnknown) {
  Scenario s = Tree(0);
  s.param_node = true;
  constexpr uint32_t kCount = 2000;
  JobSpecSim j = Job(Origin::kApi, {0}, {{DType::kFloat32, ReduceOp::kSum, kCount, 0}});
  j.tan = SwitchSpec::Tan::kRemote;
  j.learning_rate = 0.5f;
  j.float_mode = client::FloatMode::kFloat;
  j.window = 1;
  j.max_chunk_elements = 1;  // one round trip per element: the crash falls in the middle
  j.runs = 2;
  j.run_ids = true;
  j.crash_rank = 0;
  j.crash_after_ns = 20'000'000;
  std::vector<uint8_t> grad(size_t{kCount} * 4);
  for (uint32_t e = 0; e < kCount; ++e) {
    const float g = 1000.0f + static_cast<float>(e);
    std::memcpy(&grad[size_t{e} * 4], &g, 4);
  }
  j.inputs[0] = {{0, grad}};
  s.jobs.push_back(j);
  Finalize(s);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops, 1u) << "the first run's rank died in its allreduce";
  EXPECT_EQ(o->ops_ok, 1u) << "the second run's succeeded";
}


// A switch that restarted in the middle of a config job's first run fixed
// its label before all its ranks had sent again (its slot timer fired),
// and the root took it for a new run: a generation no run started. The
// second run's ranks on the other leaf sent first into it, and its chunks
// the generation had given up long before answered them INCOMPLETE; the
// oracle excused it. Within its restart grace the leaf now fixes no label
// of some members: its ranks resend, its label is the run's from before
// the restart, and every allreduce of both runs succeeds. Drawn from seed
// 550246: a restart, two runs, lost and reordered frames and a straggler
// prediction together.
TEST(SimRegressions, ALeafBackFromARestartKeepsItsRunsLabel) {
  auto limits = Limits::Parse(
      "switches=3,levels=2,ranks=7,jobs=1,ops=1,elems=2013,faults=0x7f,features=0x3fff,skip_jobs=0xfe,"
      "skip_ops=0x3e");
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  Scenario s = Generate(550246, *limits);
  ASSERT_EQ(s.jobs.size(), 1u);
  ASSERT_EQ(s.jobs[0].runs, 2u);
  // As drawn before a job with a main server run twice through a restart
  // had run ids: its ranks each their own incarnation.
  ASSERT_TRUE(s.jobs[0].run_ids);
  s.jobs[0].run_ids = false;
  ASSERT_EQ(s.restarts.size(), 1u);
  auto o = RunScenario(s, {});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->ok()) << Findings(*o);
  EXPECT_EQ(o->ops, 14u);
  EXPECT_EQ(o->ops_ok, 14u) << "the root goes on with the run the leaf was in";
}

}  // namespace
}  // namespace aggswitch::sim
