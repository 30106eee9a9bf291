// agg-gen against the real switch: build/tools/aggswitch/aggswitch as the
// memif server with an aggregation: section, build/tools/agg-gen/agg-gen as
// the memif client, each its own DPDK process (--no-huge, --no-pci, own
// --file-prefix). A good run must answer every chunk correctly; a job declared
// with fewer members than agg-gen emulates, and a wrong key, must make agg-gen
// fail (exit 1) by itself, within its --give-up-ms.
//
// Every scenario starts its own switch, and stops it before agg-gen (which
// runs with --hold-port, as in bench/aggregation.sh). TestProcess reaps both
// processes whatever happens. Needs root (DPDK); ctest label "eal".
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/lib/test_process.h"

namespace aggswitch::tools {
namespace {

using json = nlohmann::json;

constexpr char kAggGen[] = AGG_GEN_BIN;
constexpr char kAggswitch[] = AGGSWITCH_BIN;
constexpr char kSwitchMac[] = "02:a9:9c:00:00:e2";
constexpr char kKey[] = "0x5eed0000000000e2";
// The switch's aggregation.slot_secret, and agg-gen's --slot-secret for the
// run of two jobs: agg-gen refuses a secret that starts jobs 1 and 2 within
// 2 * window slots of each other, where one's chunks would wait on the
// other's ACKs (a random secret does so about one run in 25).
constexpr char kSlotSecret[] = "0x5eed00000000000000000000000000e2";

class AggGenE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "DPDK needs root";
    std::string tmpl = ::testing::TempDir() + "agg_gen_e2e_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    prefix_ = "agg-gen-e2e-" + std::to_string(getpid());
    http_ = "127.0.0.1:" + std::to_string(FreeTcpPort());
  }

  void TearDown() override {
    sw_.reset();  // the switch first, as in StopBoth; both are reaped here at the latest
    gen_.reset();
    std::filesystem::remove_all("/var/run/dpdk/" + prefix_ + "-sw");
    std::filesystem::remove_all("/var/run/dpdk/" + prefix_ + "-gen");
    if (HasFailure()) {
      std::printf("--- aggswitch log:\n%s\n--- agg-gen log:\n%s\n",
                  ReadFile(dir_ + "/sw.log").c_str(), ReadFile(dir_ + "/gen.log").c_str());
    }
    std::filesystem::remove_all(dir_);
  }

  // Starts aggswitch with jobs 1 and 2 (4 members), 11 (3 members) and 21
  // (4 members), all with kKey, and waits until its dataplane runs.
  void StartSwitch() {
    std::string yaml = R"(eal:
  lcores: "0@0,1@1"
  main_lcore: 0
  memory_mb: 1024
  hugepages: false
  file_prefix: @PREFIX@-sw
  telemetry: false
switch:
  mac: @MAC@
ports:
  - name: gen
    devargs: net_memif0,role=server,id=0,socket=@DIR@/memif.sock,socket-abstract=no
    access: 1
workers:
  - lcore: 1
    rx: [gen]
http:
  listen: @HTTP@
aggregation:
  address: 10.0.10.253
  in_band_registration: false
  slot_secret: "@SECRET@"
  slots: 4096
  spare_slots: 0
  max_fan_in: 16
  max_jobs: 8
  jobs:
    - {id: 1, key: "@KEY@", members: 4}
    - {id: 2, key: "@KEY@", members: 4}
    - {id: 11, key: "@KEY@", members: 3}
    - {id: 21, key: "@KEY@", members: 4}
)";
    for (const auto& [from, to] : {std::pair<std::string, std::string>{"@PREFIX@", prefix_},
                                   {"@MAC@", kSwitchMac},
                                   {"@DIR@", dir_},
                                   {"@HTTP@", http_},
                                   {"@KEY@", kKey},
                                   {"@SECRET@", kSlotSecret}}) {
      for (size_t at; (at = yaml.find(from)) != std::string::npos;) {
        yaml.replace(at, from.size(), to);
      }
    }
    const std::string config = dir_ + "/aggswitch.yaml";
    std::ofstream(config) << yaml;
    sw_ = TestProcess::Start({kAggswitch, "--config", config}, dir_ + "/sw.log");
    ASSERT_NE(sw_, nullptr);
    // The memif server accepts a client once its port has started; the
    // switch logs "running" after that.
    ASSERT_TRUE(WaitFor(30, [&] {
      return !sw_->Running() || ReadFile(dir_ + "/sw.log").find(" running: ") != std::string::npos;
    }));
    ASSERT_TRUE(sw_->Running()) << "aggswitch exited during start-up";
  }

  // Starts agg-gen as the memif client with `args`, `key` and --hold-port,
  // and waits until its run is over (it reports and holds the port) or it exits.
  void RunGen(std::vector<std::string> args, double timeout_s, const std::string& key = kKey) {
    std::vector<std::string> argv = {kAggGen, "--hold-port"};
    argv.insert(argv.end(), {"--switch-mac", kSwitchMac});
    argv.insert(argv.end(), {"--key", key});
    argv.insert(argv.end(), {"--json", dir_ + "/gen.json"});
    args.insert(args.begin(), argv.begin(), argv.end());
    for (const char* eal : {"--", "--lcores", "0@0,1@0", "--no-huge", "-m", "1024", "--no-pci",
                            "--no-telemetry", "--file-prefix"}) {
      args.push_back(eal);
    }
    args.push_back(prefix_ + "-gen");
    args.push_back("--vdev");
    args.push_back("net_memif0,role=client,socket=" + dir_ + "/memif.sock,socket-abstract=no");
    gen_ = TestProcess::Start(args, dir_ + "/gen.log");
    ASSERT_NE(gen_, nullptr);
    const auto run_over = [&] {
      return !gen_->Running() || ReadFile(dir_ + "/gen.log").find("holding") != std::string::npos;
    };
    ASSERT_TRUE(WaitFor(timeout_s, run_over))
        << "agg-gen did not finish its run within " << timeout_s << " s";
  }

  // The switch's aggregation counters of lcore 1, from /api/v1/lcores.
  json SwitchCounters() {
    const std::string cmd = "curl -sf --max-time 2 http://" + http_ + "/api/v1/lcores";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> chunk;
    size_t n;
    while (pipe != nullptr && (n = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) {
      out.append(chunk.data(), n);
    }
    if (pipe != nullptr) pclose(pipe);
    const json doc = json::parse(out, nullptr, false);
    if (doc.is_discarded() || !doc.contains("lcores") || doc["lcores"].empty()) {
      ADD_FAILURE() << "no lcores from " << cmd << ": " << out;
      return json::object();
    }
    return doc["lcores"][0]["aggregation"];
  }

  // Stops the switch, then agg-gen; returns agg-gen's exit code.
  int StopBoth() {
    sw_->Signal(SIGTERM);
    EXPECT_EQ(sw_->Wait(15), 0) << "aggswitch did not stop cleanly";
    gen_->Signal(SIGTERM);
    const std::optional<int> code = gen_->Wait(15);
    EXPECT_TRUE(code.has_value()) << "agg-gen did not stop";
    return code.value_or(-1);
  }

  json GenReport() {
    const json doc = json::parse(ReadFile(dir_ + "/gen.json"), nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << "no JSON report from agg-gen";
    return doc.is_discarded() ? json::object() : doc;
  }

  std::string dir_, prefix_, http_;
  std::unique_ptr<TestProcess> sw_, gen_;
};

TEST_F(AggGenE2eTest, EveryChunkOfTwoJobsIsAnsweredCorrectly) {
  ASSERT_NO_FATAL_FAILURE(StartSwitch());
  ASSERT_NO_FATAL_FAILURE(
      RunGen({"--workers", "4", "--jobs", "2", "--job-base", "1", "--chunks", "2000",
              "--slot-secret", kSlotSecret},
             60));
  const json sw = SwitchCounters();
  EXPECT_EQ(StopBoth(), 0);
  const json r = GenReport();
  EXPECT_EQ(r.value("ok", false), true) << r.dump(1);
  EXPECT_EQ(r.value("completed", 0), 2 * 4 * 2000);
  EXPECT_EQ(r.value("errors_total", -1), 0);
  EXPECT_EQ(r.value("unanswered", -1), 0);
  EXPECT_EQ(r.value("stalled", true), false);
  EXPECT_EQ(r["port_stats"].value("acks_sent", 0), 8);
  // The switch's side: every member counted once per chunk (a retransmission
  // is a duplicate), every chunk completed once, one result per member.
  EXPECT_EQ(sw.value("contributions", 0), 2 * 4 * 2000);
  EXPECT_EQ(sw.value("completions", 0), 2 * 2000);
  EXPECT_EQ(sw.value("results_sent", 0), 2 * 4 * 2000 + sw.value("duplicate_results", 0));
  EXPECT_EQ(sw.value("collisions", -1), 0);
  EXPECT_EQ(sw.value("rejected", -1), 0);
}

TEST_F(AggGenE2eTest, AJobWithFewerMembersThanWorkersFails) {
  ASSERT_NO_FATAL_FAILURE(StartSwitch());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(RunGen(
      {"--workers", "4", "--job-base", "11", "--chunks", "500", "--give-up-ms", "1000"}, 30));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const json sw = SwitchCounters();
  EXPECT_EQ(StopBoth(), 1);
  const json r = GenReport();
  EXPECT_EQ(r.value("ok", true), false);
  EXPECT_EQ(r.value("stalled", false), true);
  // Workers 0..2 got sums over 3 members, worker 3 nothing.
  EXPECT_GT(r["errors"].value("payload", 0), 0) << r.dump(1);
  EXPECT_GT(r.value("unanswered", 0), 0);
  EXPECT_GT(sw.value("rejected", 0), 0) << "the switch should refuse member 3";
  EXPECT_LT(took, 20.0) << "agg-gen should give up after --give-up-ms";
}

TEST_F(AggGenE2eTest, AWrongKeyFails) {
  ASSERT_NO_FATAL_FAILURE(StartSwitch());
  ASSERT_NO_FATAL_FAILURE(
      RunGen({"--workers", "4", "--job-base", "21", "--chunks", "500", "--give-up-ms", "1000"}, 30,
             "0x5eed0000000000e3"));
  const json sw = SwitchCounters();
  EXPECT_EQ(StopBoth(), 1);
  const json r = GenReport();
  EXPECT_EQ(r.value("ok", true), false);
  EXPECT_EQ(r.value("completed", -1), 0);
  EXPECT_EQ(r.value("stalled", false), true);
  EXPECT_GT(sw.value("key_failures", 0), 0);
}

}  // namespace
}  // namespace aggswitch::tools
