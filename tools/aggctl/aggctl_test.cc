// aggctl against a live HTTP server whose DataSource records what it is
// asked: each option of `jobs add` and `tan` becomes the request the
// switch's parser reads back, the output shows the answers, and a command
// line aggctl cannot use sends nothing and fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "control/api.h"
#include "control/api_server.h"

extern char** environ;

namespace aggswitch::control {
namespace {

struct Exit {
  int code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs aggctl with `args`, its stdout and stderr in files.
Exit RunAggctl(const std::vector<std::string>& args) {
  char dir_template[] = "/tmp/aggctl_test_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  EXPECT_NE(dir, nullptr);
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  std::vector<std::string> argv_strings = {AGGCTL_PATH};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  Exit e;
  if (posix_spawn(&pid, AGGCTL_PATH, &actions, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    e.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  e.out = ReadFile(out_path);
  e.err = ReadFile(err_path);
  unlink(out_path.c_str());
  unlink(err_path.c_str());
  rmdir(dir);
  return e;
}

// The switch's side: the routes parse what aggctl sends; the source records
// it. One server for the suite (stopping civetweb takes a while).
class AggctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    DataSource source;
    source.snapshot = [] {
      // One aggregating lcore that moved and sent on collided chunks.
      StatsSnapshot s;
      LcoreSnapshot& l = s.lcores.emplace_back();
      l.lcore = 1;
      l.slots = 64;
      const auto set = [&](dataplane::AggCounter c, uint64_t v) {
        l.agg[static_cast<size_t>(c)] = v;
      };
      set(dataplane::AggCounter::collisions, 12);
      set(dataplane::AggCounter::escalations, 11);
      set(dataplane::AggCounter::relocated, 30);
      set(dataplane::AggCounter::hints_issued, 9);
      set(dataplane::AggCounter::slot_busy, 1);
      set(dataplane::AggCounter::conflicts_to_ps, 4);
      set(dataplane::AggCounter::conflicts_up, 2);
      set(dataplane::AggCounter::at_ps_forwarded, 7);
      set(dataplane::AggCounter::released_to_ps, 3);
      set(dataplane::AggCounter::moved, 40);
      set(dataplane::AggCounter::move_bounced, 2);
      s.aggregation.emplace();
      s.aggregation->spare = {16, 2, 10, 1, 3};
      return s;
    };
    source.mac_entries = [] { return std::vector<MacEntrySnapshot>{}; };
    source.jobs = []() -> common::Result<JobTableSnapshot> {
      JobTableSnapshot table;
      table.capacity = 16;
      table.max_fan_in = 16;
      JobSnapshot root = Leaf();  // a root whose TAN did not answer ARP yet
      root.id = 8;
      root.upstreams.clear();
      root.tan = JobTanSnapshot{"remote", *common::Ipv4Addr::Parse("10.0.9.50"), 47000, false};
      root.tan_member.reset();
      root.parameter_server = true;
      // An in-band leaf of a job of two nodes: its parent by addr_low, one of two.
      JobSnapshot in_band = Leaf();
      in_band.id = 9;
      in_band.origin = "in-band";
      in_band.switches.clear();
      in_band.tan_member.reset();
      in_band.upstreams.push_back(
          JobUpstreamSnapshot{*common::Ipv4Addr::Parse("10.0.9.2"), 47001, 101, 0, false});
      table.jobs = {Leaf(), root, in_band};
      return table;
    };
    source.add_job = [](const JobRequest& r) -> common::Result<JobSnapshot> {
      std::lock_guard<std::mutex> lock(mu_);
      added_.push_back(r);
      JobSnapshot s = Leaf();
      s.id = r.job.id;
      s.members = r.job.members;
      if (r.job.parameter_server) {  // a root, as the switch would show it
        s.upstreams.clear();
        s.tan = JobTanSnapshot{"remote", *common::Ipv4Addr::Parse("10.0.9.50"), 47000, true};
        s.parameter_server = true;
      }
      return s;
    };
    source.remove_job = [](uint32_t) { return common::Status::Ok(); };
    source.tan = [](uint32_t job, const std::optional<TanRequest>& r) -> common::Result<TanReport> {
      std::lock_guard<std::mutex> lock(mu_);
      tan_calls_.push_back(r);
      if (job == 8 && r && r->choice) {
        return common::FailedPrecondition("job 8 has an upstream here (10.0.9.1:47000)");
      }
      TanReport report;
      report.job = job;
      report.root = true;
      report.tan = JobTanSnapshot{"remote", *common::Ipv4Addr::Parse("10.0.9.51"), 47001, true};
      config::TanConfig choice;
      choice.strategy = config::TanStrategy::kFewestHops;
      choice.candidates.resize(1);
      choice.candidates[0].address = *common::Ipv4Addr::Parse("10.0.9.51");
      choice.candidates[0].port = 47001;
      choice.candidates[0].hops = 1;
      report.chosen = TanReport::Choice{TanReport::Source::kApi, choice};
      report.member = 2;
      return report;
    };
    source.stragglers = [](uint32_t job, const StragglerRequest& r) -> common::Result<StragglerReport> {
      std::lock_guard<std::mutex> lock(mu_);
      straggler_calls_.push_back(r);
      StragglerReport report;
      report.job = job;
      report.operations = 4;
      report.predicted = {{6, 0.5}, {5, 0.25}};
      if (r.apply) report.excluded = {6};
      return report;
    };
    // The API token aggctl reads from --token-file, as an operator's would.
    token_path_ = "/tmp/aggctl_test_token_" + std::to_string(getpid());
    std::ofstream(token_path_) << kToken << "\n";
    common::HttpServer::Options options;
    options.listen = "127.0.0.1:0";
    options.access.token = kToken;
    auto server = StartApiServer(options, std::move(source));
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value().release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    unlink(token_path_.c_str());
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    std::lock_guard<std::mutex> lock(mu_);
    added_.clear();
    tan_calls_.clear();
    straggler_calls_.clear();
  }

  // A leaf job as the API shows it: workers 4-7, upstream resolved, timer on.
  static JobSnapshot Leaf() {
    JobSnapshot s;
    s.id = 7;
    s.origin = "api";
    s.members = 5;
    s.nodes = 3;
    s.node_ids = {4, 5, 6, 7};
    s.switches = {{200, {20, 21, 22}}};
    s.upstreams = {JobUpstreamSnapshot{*common::Ipv4Addr::Parse("10.0.9.1"), 47000, 101, 10, true}};
    s.timeout_ms = 20;
    s.batch = true;
    s.tan_member = 5;
    return s;
  }

  Exit Aggctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", "127.0.0.1:" + std::to_string(server_->port()),
                               "--token-file", token_path_});
    return RunAggctl(args);
  }
  // The request the switch read from `jobs add ARGS`.
  std::optional<JobRequest> Added(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"jobs", "add", "--id", "9", "--key", "0x9"};
    all.insert(all.end(), args.begin(), args.end());
    const size_t before = Requests();
    const Exit e = Aggctl(all);
    EXPECT_EQ(e.code, 0) << e.err;
    std::lock_guard<std::mutex> lock(mu_);
    if (added_.size() + tan_calls_.size() != before + 1 || added_.empty()) return std::nullopt;
    return added_.back();
  }
  // The request the switch read from `tan --job 7 ARGS`.
  std::optional<TanRequest> TanCall(const std::vector<std::string>& args) {
    std::vector<std::string> all = {"tan", "--job", "7"};
    all.insert(all.end(), args.begin(), args.end());
    const size_t before = Requests();
    const Exit e = Aggctl(all);
    EXPECT_EQ(e.code, 0) << e.err;
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(added_.size() + tan_calls_.size(), before + 1);
    return tan_calls_.empty() ? std::nullopt : tan_calls_.back();
  }
  size_t Requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return added_.size() + tan_calls_.size();
  }

  static constexpr char kToken[] = "aggctl-test-token-0123456789";
  static inline common::HttpServer* server_ = nullptr;
  static inline std::string token_path_;
  static inline std::mutex mu_;
  static inline std::vector<JobRequest> added_;                     // guarded by mu_
  static inline std::vector<std::optional<TanRequest>> tan_calls_;  // guarded by mu_
  static inline std::vector<StragglerRequest> straggler_calls_;     // guarded by mu_
};

config::TanCandidate Candidate(const char* address, uint16_t port, uint16_t hops) {
  config::TanCandidate c;
  c.address = *common::Ipv4Addr::Parse(address);
  c.port = port;
  c.hops = hops;
  return c;
}

// A command that changes something without the token, or with another,
// sends its request and fails with the switch's reason; a read needs none.
TEST_F(AggctlTest, ChangesNeedTheApiToken) {
  const std::string server = "127.0.0.1:" + std::to_string(server_->port());
  const size_t before = Requests();
  Exit e = RunAggctl({"--server", server, "jobs", "add", "--id", "9", "--key", "9", "--members", "5"});
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(e.err.find("HTTP 401"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("--token-file or AGGCTL_TOKEN"), std::string::npos) << e.err;
  const std::string wrong = token_path_ + ".wrong";
  std::ofstream(wrong) << "not-the-token-of-this-switch\n";
  e = RunAggctl({"--server", server, "--token-file", wrong, "tan", "--job", "7", "--self"});
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(e.err.find("the API token is wrong"), std::string::npos) << e.err;
  unlink(wrong.c_str());
  EXPECT_EQ(Requests(), before) << "a refused request reached the router";
  e = RunAggctl({"--server", server, "jobs", "show"});
  EXPECT_EQ(e.code, 0) << e.err;
  // AGGCTL_TOKEN carries the token itself.
  setenv("AGGCTL_TOKEN", kToken, 1);
  e = RunAggctl({"--server", server, "tan", "--job", "7", "--self"});
  unsetenv("AGGCTL_TOKEN");
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(Requests(), before + 1);
}

TEST_F(AggctlTest, JobsAddSendsTheTree) {
  const std::optional<JobRequest> r = Added({"--nodes",
                                             "3",
                                             "--ordered",
                                             "--node-ids",
                                             "0-3,7",
                                             "--switch",
                                             "100=10-11,12",
                                             "--switch",
                                             "101",
                                             "--timeout-ms",
                                             "20",
                                             "--trigger",
                                             "batch",
                                             "--tan-strategy",
                                             "fewest_hops",
                                             "--tan-candidate",
                                             "10.0.9.50,hops=3",
                                             "--tan-candidate",
                                             "10.0.9.51:47001,hops=1",
                                             "--tan-member",
                                             "7",
                                             "--parameter-server"});
  ASSERT_TRUE(r);
  const config::AggregationJobConfig& job = r->job;
  EXPECT_EQ(job.id, 9u);
  EXPECT_EQ(job.key, 9u);
  EXPECT_EQ(job.nodes, 3);
  EXPECT_TRUE(job.ordered);
  EXPECT_EQ(job.node_ids, (std::vector<uint16_t>{0, 1, 2, 3, 7}));
  ASSERT_EQ(job.switches.size(), 2u);
  EXPECT_EQ(job.switches[0].node, 100);
  EXPECT_EQ(job.switches[0].covers, (std::vector<uint16_t>{10, 11, 12}));
  EXPECT_EQ(job.switches[1].node, 101);
  EXPECT_TRUE(job.switches[1].covers.empty());
  EXPECT_EQ(job.members, 7) << "counted from the lists";
  EXPECT_FALSE(job.upstream);
  EXPECT_EQ(job.timeout_ms, std::optional<uint32_t>(20));
  EXPECT_EQ(job.trigger, std::optional(config::AggTrigger::kBatch));
  ASSERT_TRUE(job.tan);
  EXPECT_EQ(job.tan->strategy, config::TanStrategy::kFewestHops);
  EXPECT_EQ(job.tan->candidates,
            (std::vector<config::TanCandidate>{Candidate("10.0.9.50", 47000, 3),
                                               Candidate("10.0.9.51", 47001, 1)}));
  EXPECT_EQ(job.tan_member, std::optional<uint16_t>(7));
  EXPECT_TRUE(job.parameter_server);
}

TEST_F(AggctlTest, JobsAddSendsAnUpstreamAndItsDefaults) {
  std::optional<JobRequest> r = Added({"--members", "4", "--upstream", "10.0.9.1:47001",
                                       "--upstream-node", "100", "--upstream-vlan", "10"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->job.members, 4);
  EXPECT_TRUE(r->job.node_ids.empty());
  ASSERT_TRUE(r->job.upstream);
  EXPECT_EQ(r->job.upstream->address.ToString(), "10.0.9.1");
  EXPECT_EQ(r->job.upstream->port, 47001);
  EXPECT_EQ(r->job.upstream->node, 100);
  EXPECT_EQ(r->job.upstream->vlan, 10);
  // Without the options, the config's defaults (no per-job value is sent).
  r = Added({"--members", "2", "--upstream", "10.0.9.1", "--upstream-node", "100"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->job.upstream->port, 47000);
  EXPECT_EQ(r->job.upstream->vlan, 0);
  EXPECT_FALSE(r->job.timeout_ms);
  EXPECT_FALSE(r->job.trigger);
  EXPECT_FALSE(r->job.tan);
  EXPECT_FALSE(r->job.tan_member);
  EXPECT_FALSE(r->job.parameter_server);
  r = Added({"--members", "2", "--tan-self"});
  ASSERT_TRUE(r && r->job.tan);
  EXPECT_EQ(r->job.tan->strategy, config::TanStrategy::kSelf);
  r = Added({"--members", "2", "--tan-candidate", "10.0.9.50"});
  ASSERT_TRUE(r && r->job.tan);
  EXPECT_EQ(r->job.tan->strategy, config::TanStrategy::kFixed);
  EXPECT_EQ(r->job.tan->candidates,
            std::vector<config::TanCandidate>{Candidate("10.0.9.50", 47000, 0)});
  EXPECT_EQ(r->job.timeout_ms, std::nullopt);
  r = Added({"--node-ids", "4", "--timeout-ms", "0", "--trigger", "incremental"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->job.members, 1);
  EXPECT_EQ(r->job.timeout_ms, std::optional<uint32_t>(0));
  EXPECT_EQ(r->job.trigger, std::optional(config::AggTrigger::kIncremental));
}

TEST_F(AggctlTest, JobsAddPrintsTheNewJob) {
  Exit e = Aggctl({"jobs", "add", "--id", "9", "--key", "9", "--members", "5"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out, "added job 9 (index 0, 5 members, 3 nodes, upstream 10.0.9.1:47000)\n");
  e = Aggctl({"jobs", "add", "--id", "9", "--key", "9", "--members", "5", "--parameter-server"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out,
            "added job 9 (index 0, 5 members, 3 nodes, root here, TAN 10.0.9.50:47000, its "
            "parameter server)\n");
}

// A command line aggctl cannot use: a usage error (CLI11's exit code and
// message), and nothing is sent.
TEST_F(AggctlTest, JobsAddRefusesWhatItCannotSend) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "--members: give the member count, or the members with --node-ids and --switch"},
      {{"--node-ids", "1-"},
       "--node-ids: expected node ids N or ranges A-B, comma-separated, got '1-'"},
      {{"--node-ids", "0,,1"}, "--node-ids: expected node ids N or ranges A-B"},
      {{"--switch", "x"}, "--switch: expected NODE or NODE=COVERS (COVERS like 0-3,7), got 'x'"},
      {{"--switch", "100=a"}, "--switch: expected NODE or NODE=COVERS"},
      {{"--members", "2", "--upstream", "10.0.9.1"}, "--upstream requires --upstream-node"},
      {{"--members", "2", "--upstream", "10.0.9.1:x", "--upstream-node", "1"},
       "--upstream: expected ADDR[:PORT], got '10.0.9.1:x'"},
      {{"--members", "2", "--upstream-node", "1"}, "--upstream-node requires --upstream"},
      {{"--members", "2", "--upstream-vlan", "1"}, "--upstream-vlan requires --upstream"},
      {{"--members", "2", "--upstream-node", "65535", "--upstream", "10.0.9.1"}, "--upstream-node"},
      {{"--members", "2", "--timeout-ms", "3600001"}, "--timeout-ms"},
      {{"--members", "2", "--trigger", "eager"}, "--trigger"},
      {{"--members", "2", "--tan-strategy", "random"}, "--tan-strategy requires --tan-candidate"},
      {{"--members", "2", "--tan-strategy", "self", "--tan-candidate", "10.0.9.50"},
       "--tan-strategy"},
      {{"--members", "2", "--tan-self", "--tan-candidate", "10.0.9.50"}, "excludes"},
      {{"--members", "2", "--tan-candidate", "10.0.9.50,hops"},
       "--tan-candidate: expected ADDR[:PORT][,hops=H], got '10.0.9.50,hops'"},
      {{"--members", "2", "--upstream", "10.0.9.1", "--upstream-node", "1", "--tan-self"},
       "excludes"},
      {{"--members", "2", "--tan-member", "65535"}, "--tan-member"},
      {{"--members", "2", "--parameter-server", "--tan-self"}, "excludes"},
      {{"--members", "2", "--upstream", "10.0.9.1", "--upstream-node", "1", "--parameter-server"},
       "excludes"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> all = {"jobs", "add", "--id", "9", "--key", "9"};
    all.insert(all.end(), args.begin(), args.end());
    const Exit e = Aggctl(all);
    EXPECT_NE(e.code, 0) << e.out;
    EXPECT_NE(e.code, 1) << "1 is for the switch's refusals";
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
  }
  EXPECT_EQ(Requests(), 0u);
}

TEST_F(AggctlTest, TanSendsEveryForm) {
  std::optional<TanRequest> r = TanCall({});
  EXPECT_FALSE(r) << "no option: show";
  r = TanCall({"--strategy", "least_load", "--candidate", "10.0.9.50", "--candidate",
               "10.0.9.51:47001,hops=2"});
  ASSERT_TRUE(r && r->choice);
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kLeastLoad);
  EXPECT_EQ(r->choice->candidates,
            (std::vector<config::TanCandidate>{Candidate("10.0.9.50", 47000, 0),
                                               Candidate("10.0.9.51", 47001, 2)}));
  EXPECT_FALSE(r->set_member);
  for (const char* strategy : {"fixed", "random", "fewest_hops"}) {
    r = TanCall({"--strategy", strategy, "--candidate", "10.0.9.50"});
    ASSERT_TRUE(r && r->choice) << strategy;
  }
  r = TanCall({"--candidate", "10.0.9.50:47100"});
  ASSERT_TRUE(r && r->choice);
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kFixed) << "the management node's own pick";
  r = TanCall({"--self"});
  ASSERT_TRUE(r && r->choice);
  EXPECT_EQ(r->choice->strategy, config::TanStrategy::kSelf);
  EXPECT_TRUE(r->choice->candidates.empty());
  r = TanCall({"--member", "3"});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->choice);
  EXPECT_TRUE(r->set_member);
  EXPECT_EQ(r->member, std::optional<uint16_t>(3));
  r = TanCall({"--no-member"});
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->set_member);
  EXPECT_FALSE(r->member);
  r = TanCall({"--self", "--member", "0"});
  ASSERT_TRUE(r && r->choice);
  EXPECT_EQ(r->member, std::optional<uint16_t>(0));
}

TEST_F(AggctlTest, TanPrintsTheReport) {
  Exit e = Aggctl({"tan", "--job", "7"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.out,
            "job 7 (root here): TAN 10.0.9.51:47001 (resolved)\n"
            "chosen through the API: fewest_hops among 10.0.9.51:47001 (1 hop)\n"
            "member running the TAN here: 2\n");
  e = Aggctl({"--json", "tan", "--job", "7"});
  EXPECT_EQ(e.code, 0);
  EXPECT_NE(e.out.find("\"chosen_by\": \"api\""), std::string::npos) << e.out;
  // The switch's refusal: one line on stderr, exit 1.
  e = Aggctl({"tan", "--job", "8", "--self"});
  EXPECT_EQ(e.code, 1);
  EXPECT_EQ(e.err, "aggctl: aggswitch at 127.0.0.1:" + std::to_string(server_->port()) +
                       " answered POST /api/v1/jobs/8/tan with HTTP 409: job 8 has an upstream "
                       "here (10.0.9.1:47000)\n");
}

TEST_F(AggctlTest, TanRefusesWhatItCannotSend) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--strategy", "random"}, "--strategy requires --candidate"},
      {{"--strategy", "self", "--candidate", "10.0.9.50"}, "--strategy"},
      {{"--self", "--candidate", "10.0.9.50"}, "excludes"},
      {{"--self", "--strategy", "fixed"}, "--strategy requires --candidate"},
      {{"--member", "1", "--no-member"}, "excludes"},
      {{"--member", "65535"}, "--member"},
      {{"--candidate", ":47000"}, "--candidate: expected ADDR[:PORT][,hops=H], got ':47000'"},
      {{"--candidate", "10.0.9.50,weight=2"}, "--candidate: expected ADDR[:PORT][,hops=H]"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> all = {"tan", "--job", "7"};
    all.insert(all.end(), args.begin(), args.end());
    const Exit e = Aggctl(all);
    EXPECT_NE(e.code, 0);
    EXPECT_NE(e.code, 1);
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
  }
  const Exit e = Aggctl({"tan", "--member", "1"});
  EXPECT_NE(e.code, 0);
  EXPECT_NE(e.err.find("--job is required"), std::string::npos) << e.err;
  EXPECT_EQ(Requests(), 0u);
}

// `stragglers --apply` excludes at most --max-excluded members, by default
// as many as a client leaves room for in a chunk; the bound goes only with
// --apply, within 1..255.
TEST_F(AggctlTest, StragglersSendsTheBoundOnExcludedMembers) {
  Exit e = Aggctl({"stragglers", "--job", "7", "--top", "40", "--apply", "--max-excluded", "48"});
  EXPECT_EQ(e.code, 0) << e.err;
  e = Aggctl({"stragglers", "--job", "7", "--top", "40", "--apply"});
  EXPECT_EQ(e.code, 0) << e.err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_EQ(straggler_calls_.size(), 2u);
    EXPECT_TRUE(straggler_calls_[0].apply);
    EXPECT_EQ(straggler_calls_[0].top, std::optional<uint32_t>(40));
    EXPECT_EQ(straggler_calls_[0].max_excluded, 48u);
    EXPECT_EQ(straggler_calls_[1].max_excluded, aggregator::kDefaultReservedMissingIds);
  }
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--top", "40", "--max-excluded", "48"}, "--max-excluded goes with --apply"},
           {{"--top", "40", "--apply", "--max-excluded", "0"}, "--max-excluded"},
           {{"--top", "40", "--apply", "--max-excluded", "256"}, "--max-excluded"}}) {
    std::vector<std::string> all = {"stragglers", "--job", "7"};
    all.insert(all.end(), args.begin(), args.end());
    e = Aggctl(all);
    EXPECT_NE(e.code, 0);
    EXPECT_NE(e.code, 1) << "refused by aggctl, not the switch";
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
  }
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(straggler_calls_.size(), 2u);
}

// `stats` sums the lcores' collision and parameter-node counters and shows
// the spare slots' leases.
TEST_F(AggctlTest, StatsShowsCollisionsAndTheParameterNode) {
  const Exit e = Aggctl({"stats"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("collisions 12, escalated 11, sent on to spare slots 30, hints issued 9, "
                       "hints refused 0, refused slot_busy 1"),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("spare slots: 2 of 16 leased, 10 relocations, 1 refused"), std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("jobs moved to a partition of their own 3; sent on to a moved partition 40, "
                       "moved hints sent back home 2"),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("to the parameter node: conflicts 4, forwarded unreduced 7, slots released "
                       "3, refused no_parameter_node 0; chunks up as missing 2"),
            std::string::npos)
      << e.out;
}

TEST_F(AggctlTest, JobsShowPrintsTheTree) {
  Exit e = Aggctl({"jobs", "show", "7"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("\nTree\n"
                       "  workers    4-7\n"
                       "  switches   200 (covers 20-22)\n"
                       "  upstream   10.0.9.1:47000, as node 101 on VLAN 10 (resolved)\n"
                       "  timer      20 ms, trigger batch\n"
                       "  TAN        chosen by the root; run by worker 5 here\n"),
            std::string::npos)
      << e.out;
  e = Aggctl({"jobs", "show"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("UPSTREAM"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("  10.0.9.1:47000                  -\n"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("  root                            10.0.9.50:47000? (ps)\n"),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("\n?: next hop not resolved by ARP yet\n"
                       "(ps): the TAN is the job's parameter server\n"),
            std::string::npos)
      << e.out;
  EXPECT_NE(e.out.find("  10.0.9.1:47000,10.0.9.2:47001?  -\n"), std::string::npos) << e.out;
  e = Aggctl({"jobs", "show", "9"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("  upstream   one of, by the chunk's addr_low mod 2: 10.0.9.1:47000, as "
                       "node 101 on VLAN 10 (resolved); 10.0.9.2:47001, as node 101 (not "
                       "resolved yet)\n"),
            std::string::npos)
      << e.out;
  e = Aggctl({"jobs", "show", "8"});
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("  TAN        10.0.9.50:47000 (not resolved yet), the job's parameter "
                       "server\n"),
            std::string::npos)
      << e.out;
}

}  // namespace
}  // namespace aggswitch::control
