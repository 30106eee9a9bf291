// agg-gen: emulates the workers of allreduce jobs at line rate against an
// aggswitch (or a reflecting peer), and checks every answer.
//
//   agg-gen [options] -- EAL-ARGS                 run on a DPDK port (--port, default 0)
//   agg-gen --pcap-out FILE --chunks K [options]  write the frames to a pcap file; no EAL
//
//   agg-gen --workers 4 --jobs 2 --chunks 2000 --switch-mac 02:a9:9c:00:00:b2 --
//       --lcores 0@0,1@0 --no-huge -m 1024 --no-pci --file-prefix gen
//       --vdev net_memif0,role=client,socket=/tmp/agg.sock,socket-abstract=no
//
// Threads: the EAL main lcore runs this file (start-up, once-a-second samples,
// signals, the report); the first worker lcore runs the generator loop
// (port_runner.h). SIGINT/SIGTERM stop sending; the run then drains, sends
// the final ACKs and reports. With --hold-port the port stays open (not
// polled) after the report until the next SIGINT/SIGTERM, so that a memif
// peer can stop first: the DPDK 22.11 memif PMD can crash a process whose
// lcore polls while its peer disconnects. agg-gen and aggswitch guard against
// that (dataplane/unmap_guard.h); testpmd, the benchmarks' baseline, does not.
//
// Exit codes: 0 every contribution answered, every answer right; 1 wrong
// answers, unanswered chunks, a stall (--give-up-ms) or a start-up failure;
// 2 a bad command line.
#include <rte_eal.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
#include <random>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/job_key.h"
#include "common/net_addr.h"
#include "dataplane/eal.h"
#include "tools/agg-gen/gen_config.h"
#include "tools/agg-gen/pcap_capture.h"
#include "tools/agg-gen/port_runner.h"
#include "tools/agg-gen/report.h"

namespace aggswitch::tools {
namespace {

// Signals seen so far. A signal handler can only reach file-scope state.
std::atomic<int> g_signals{0};

void OnSignal(int) {
  g_signals.fetch_add(1, std::memory_order_relaxed);
}

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Command-line text before it is checked and converted.
struct CliText {
  std::string key = "0x5eed0000000000a1";
  std::string dtype = "int32";
  std::string op = "sum";
  std::string expect = "results";
  std::string switch_mac = "02:a9:9c:00:00:01";
  std::string switch_ip = "10.0.10.253";
  std::string src_mac = "02:a9:9c:01:00:00";
  std::string src_ip = "10.0.10.10";
  std::string slot_secret;
};

// Options beyond GenConfig: where the run goes and what it reports.
struct RunOptions {
  uint16_t port = 0;
  double link_timeout_s = 10;
  double stats_interval_s = 0;
  std::string json_path;
  std::string pcap_path;
  bool hold_port = false;
};

// Fills the typed fields of `cfg` from their text.
common::Status ApplyText(const CliText& t, GenConfig& cfg) {
  ASSIGN_OR_RETURN(cfg.key, common::ParseJobKeyOption("--key", t.key));
  // A new process is a new run of its jobs (docs/protocol.md, "Runs").
  std::random_device device;
  do cfg.incarnation = device(); while (cfg.incarnation == 0);
  cfg.dtype = t.dtype == "float32" ? aggregator::DType::kFloat32 : aggregator::DType::kInt32;
  cfg.op = t.op == "min"   ? aggregator::ReduceOp::kMin
           : t.op == "max" ? aggregator::ReduceOp::kMax
                           : aggregator::ReduceOp::kSum;
  cfg.expect = t.expect == "echo" ? Expect::kEcho : Expect::kResults;
  const auto mac = [](const std::string& flag, const std::string& text,
                      common::MacAddr& out) -> common::Status {
    const auto parsed = common::MacAddr::Parse(text);
    if (!parsed) {
      return common::InvalidArgument(flag + ": expected xx:xx:xx:xx:xx:xx, got \"" + text + "\"");
    }
    out = *parsed;
    return common::Status::Ok();
  };
  const auto ip = [](const std::string& flag, const std::string& text,
                     common::Ipv4Addr& out) -> common::Status {
    const auto parsed = common::Ipv4Addr::Parse(text);
    if (!parsed) return common::InvalidArgument(flag + ": expected a.b.c.d, got \"" + text + "\"");
    out = *parsed;
    return common::Status::Ok();
  };
  RETURN_IF_ERROR(mac("--switch-mac", t.switch_mac, cfg.switch_mac));
  RETURN_IF_ERROR(mac("--src-mac", t.src_mac, cfg.src_mac));
  RETURN_IF_ERROR(ip("--switch-ip", t.switch_ip, cfg.switch_ip));
  RETURN_IF_ERROR(ip("--src-ip", t.src_ip, cfg.src_ip));
  if (!t.slot_secret.empty()) {
    cfg.slot_secret = common::SipKey::Parse(t.slot_secret);
    if (!cfg.slot_secret) {
      return common::InvalidArgument("--slot-secret: expected \"0x\" and 32 hex digits, got \"" +
                                     t.slot_secret + "\"");
    }
  }
  return ValidateGenConfig(cfg);
}

double EpochSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Samples the running generator lcore's counters once a second until it
// finishes, turns the first signal into a stop request, and waits for the
// lcore to return. [main]
std::vector<RateSample> SampleUntilFinished(PortRunner& runner, const GenConfig& cfg,
                                            unsigned lcore, double stats_interval_s) {
  std::vector<RateSample> samples;
  const double hz = static_cast<double>(rte_get_tsc_hz());
  // The first sample starts where the lcore starts (its first Publish).
  while (runner.ReadProgress().tsc == 0 && !runner.finished()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  Progress last = runner.ReadProgress();
  double next_sample = 1, next_print = stats_interval_s;
  bool stop_sent = false, answered = false;
  while (!runner.finished()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!stop_sent && g_signals.load(std::memory_order_relaxed) > 0) {
      runner.RequestStop();
      stop_sent = true;
      std::printf("agg-gen: stopping: no new chunks, waiting for those in flight\n");
      std::fflush(stdout);
    }
    const double t = since_start();
    if (!answered && runner.ReadProgress().completed > 0) {
      answered = true;
      std::printf("agg-gen: first answer after %.3f s\n", t);
      std::fflush(stdout);
    }
    if (t < next_sample) continue;
    next_sample += 1;
    const Progress now = runner.ReadProgress();
    RateSample s;
    s.end_epoch_s = EpochSeconds();
    s.seconds = static_cast<double>(now.tsc - last.tsc) / hz;
    s.sent = now.sent - last.sent;
    s.retransmits = now.retransmits - last.retransmits;
    s.completed = now.completed - last.completed;
    s.errors = now.errors - last.errors;
    last = now;
    samples.push_back(s);
    if (stats_interval_s > 0 && t >= next_print) {
      next_print += stats_interval_s;
      PrintSample(stdout, cfg, t, s);
    }
  }
  rte_eal_wait_lcore(lcore);
  return samples;
}

// Runs on the port; returns the exit code. [main]
int RunOnPort(const GenConfig& cfg, const RunOptions& opt,
              const std::vector<std::string>& eal_args) {
  auto eal = dataplane::EalSession::Init("agg-gen", eal_args);
  if (!eal.ok()) {
    std::fprintf(stderr, "error: %s\n", eal.status().message().c_str());
    return 1;
  }
  const unsigned lcore = rte_get_next_lcore(-1, 1, 0);
  if (lcore >= RTE_MAX_LCORE) {
    std::fprintf(stderr,
                 "error: agg-gen needs a worker lcore besides the main one (e.g. --lcores 0@0,1@0: "
                 "lcore 0 samples, lcore 1 generates)\n");
    return 1;
  }
  InstallSignalHandlers();
  auto runner = PortRunner::Create(cfg, opt.port, opt.link_timeout_s);
  if (!runner.ok()) {
    std::fprintf(stderr, "error: %s\n", runner.status().message().c_str());
    return 1;
  }
  PortRunner& r = **runner;
  std::printf("agg-gen: %s link up; %u workers x %u jobs, generator on lcore %u\n",
              r.description().c_str(), cfg.workers, cfg.jobs, lcore);
  std::fflush(stdout);
  if (rte_eal_remote_launch(PortRunner::LcoreEntry, &r, lcore) != 0) {
    std::fprintf(stderr, "error: cannot launch the generator on lcore %u\n", lcore);
    return 1;
  }

  RunReport report;
  report.samples = SampleUntilFinished(r, cfg, lcore, opt.stats_interval_s);
  report.cfg = cfg;
  report.port = r.description();
  report.counters = r.engine().counters();
  report.unanswered = r.engine().Unanswered();
  report.stalled = r.stalled();
  report.seconds = r.seconds();
  report.port_stats = r.port_stats();
  report.details.assign(r.engine().details(), r.engine().details() + r.engine().n_details());
  PrintReport(stdout, report);
  int rc = report.ok() ? 0 : 1;
  if (!opt.json_path.empty()) {
    if (auto status = WriteJsonReport(opt.json_path, report); !status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      rc = 1;
    }
  }
  if (opt.hold_port) {
    const int seen = g_signals.load(std::memory_order_relaxed);
    std::printf("agg-gen: holding %s open until SIGINT or SIGTERM\n", r.description().c_str());
    std::fflush(stdout);
    while (g_signals.load(std::memory_order_relaxed) == seen) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return rc;
}

int Main(int argc, char** argv) {
  GenConfig cfg;
  CliText text;
  RunOptions opt;
  CLI::App app{
      "agg-gen: emulated allreduce workers at line rate, every answer checked\n"
      "  agg-gen [OPTIONS] -- EAL-ARGS                 run on a DPDK port\n"
      "  agg-gen --pcap-out FILE --chunks K [OPTIONS]  write the frames to a pcap file; no EAL"};
  // The traffic.
  app.add_option("--workers", cfg.workers, "Emulated workers, members 0..N-1 of every job")
      ->capture_default_str();
  app.add_option("--jobs", cfg.jobs, "Jobs, ids --job-base.. --job-base+J-1")
      ->capture_default_str();
  app.add_option("--job-base", cfg.job_base, "First job id")->capture_default_str();
  app.add_option("--key", text.key, "Job key shared by every job (0x... or decimal)")
      ->capture_default_str();
  app.add_option("--elems", cfg.elems, "Elements per contribution (1..356)")->capture_default_str();
  app.add_option("--dtype", text.dtype, "Element type")
      ->check(CLI::IsMember({"int32", "float32"}))
      ->capture_default_str();
  app.add_option("--op", text.op, "Reduction")
      ->check(CLI::IsMember({"sum", "min", "max"}))
      ->capture_default_str();
  app.add_flag("--task-info", cfg.task_info,
               "Set TASK_INFO (expected = workers, node_count = 1): in-band registration");
  app.add_option("--expect", text.expect,
                 "What answers a contribution: results (an aggswitch; every payload checked) or "
                 "echo (a reflector such as testpmd io; the contribution itself)")
      ->check(CLI::IsMember({"results", "echo"}))
      ->capture_default_str();
  // The closed loop.
  app.add_option("--window", cfg.window, "Chunks in flight per worker and job")
      ->capture_default_str();
  app.add_option("--timeout-ms", cfg.timeout_ms, "Retransmit a chunk unanswered for this long")
      ->capture_default_str();
  app.add_option("--give-up-ms", cfg.give_up_ms,
                 "Fail the run when no chunk is answered at every worker for this long")
      ->capture_default_str();
  app.add_option("--slots", cfg.slots,
                 "Slots of the switch's region the jobs use (aggregation.slots, minus "
                 "aggregation.in_band.slots with in-band registration on, minus "
                 "aggregation.spare_slots), to check that the jobs' chunks cannot collide")
      ->capture_default_str();
  app.add_option("--slot-secret", text.slot_secret,
                 "The switch's aggregation.slot_secret: the check then also knows where each job "
                 "starts");
  app.add_option("--duration", cfg.duration_s, "Stop sending after this many seconds (0: no limit)")
      ->capture_default_str();
  app.add_option("--chunks", cfg.chunks,
                 "Stop after this many chunks per worker and job (0: no limit)")
      ->capture_default_str();
  // Addresses.
  app.add_option("--switch-mac", text.switch_mac, "Ethernet destination of contributions")
      ->capture_default_str();
  app.add_option("--switch-ip", text.switch_ip, "The switch's aggregation address")
      ->capture_default_str();
  app.add_option("--switch-port", cfg.switch_port, "The switch's aggregation UDP port")
      ->capture_default_str();
  app.add_option("--src-mac", text.src_mac, "Worker 0's MAC; worker w uses it + w")
      ->capture_default_str();
  app.add_option("--src-ip", text.src_ip, "Worker 0's IPv4 address; worker w uses it + w")
      ->capture_default_str();
  app.add_option("--src-port", cfg.src_port, "Worker 0's UDP port; worker w uses it + w")
      ->capture_default_str();
  // Where it runs and what it reports.
  app.add_option("--port", opt.port, "DPDK port id")->capture_default_str();
  app.add_option("--link-timeout", opt.link_timeout_s, "Seconds to wait for the port's link")
      ->capture_default_str();
  app.add_option("--stats-interval", opt.stats_interval_s,
                 "Print a rate line every this many seconds (0: only the final report)")
      ->capture_default_str();
  app.add_option("--json", opt.json_path, "Write the report, with 1-s samples, as JSON here");
  app.add_option("--pcap-out", opt.pcap_path,
                 "Write the frames of --chunks chunks to this pcap file instead of a port; no EAL");
  app.add_flag("--hold-port", opt.hold_port,
               "After the report keep the port open, unpolled, until SIGINT/SIGTERM");
  app.allow_extras();
  app.footer("EAL arguments follow --. Worker w sends from src-mac + w, src-ip + w, src-port + w.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (common::Status status = ApplyText(text, cfg); !status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return 2;
  }
  std::vector<std::string> eal_args;
  for (const std::string& extra : app.remaining()) {
    if (extra != "--") eal_args.push_back(extra);
  }

  if (!opt.pcap_path.empty()) {
    if (cfg.chunks == 0) {
      std::fprintf(stderr, "error: --pcap-out needs --chunks\n");
      return 2;
    }
    uint64_t frames = 0;
    if (common::Status status = WritePcapCapture(cfg, opt.pcap_path, &frames); !status.ok()) {
      std::fprintf(stderr, "error: %s\n", status.message().c_str());
      return 1;
    }
    std::printf("agg-gen: wrote %llu frames to %s\n", static_cast<unsigned long long>(frames),
                opt.pcap_path.c_str());
    return 0;
  }
  return RunOnPort(cfg, opt, eal_args);
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) {
  return aggswitch::tools::Main(argc, argv);
}
