// agg-ps: the parameter node. It plays the timeout aggregation node (TAN) of
// docs/stragglers.md: it merges a root switch's first data (PARTIAL) with the
// late data of the members it timed out on and sends the RESULT back to the
// root. For a parameter-server job (--sgd JOB=LR; the root sends it every
// chunk) it is the parameter server: it keeps the job's float32 parameters,
// applies each chunk's gradient sum (p = p - LR * g) and answers with the
// updated parameters instead of the sum (tools/agg-ps/sgd.h).
//
//   agg-ps --listen 10.0.10.5:47000 --give-up-ms 5000 --trigger batch
//          --covers 7:100=0-3 --covers 7:101=4-7 --stats /run/agg-ps.json
//   agg-ps --listen 10.0.10.5:47000 --sgd 9=0.01     # job 9: SGD, learning rate 0.01
//   agg-ps --job 7:0x5eed:8 --job 8:0x77:4 --listed-jobs-only  # only jobs 7 and 8, keys checked
//
// The loop itself is tools/agg-ps/server.h.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM; 1 the socket failed while
// serving; 2 a bad command line, or the socket could not be bound.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/stop_signals.h"
#include "tools/agg-ps/server.h"

namespace aggswitch::tools {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int Main(int argc, char** argv) {
  std::string listen = "0.0.0.0:47000";
  uint64_t give_up_ms = 5000;
  uint32_t node_id = 65534;
  std::string trigger = "incremental";
  std::vector<std::string> covers;
  std::vector<std::string> sgd;
  std::vector<std::string> jobs;
  PsServerOptions options;
  std::string log_level = "info";
  bool quiet = false;

  CLI::App app{
      "agg-ps: the parameter node: the timeout aggregation node (TAN) of root switches, and "
      "the parameter server of --sgd jobs"};
  app.add_option("--listen", listen, "UDP address to serve on (port 0: an ephemeral one)")
      ->type_name("ADDR:PORT")
      ->capture_default_str();
  app.add_option("--give-up-ms", give_up_ms,
                 "Send an INCOMPLETE result this long after a chunk's first data when late data "
                 "is still missing; held late data and finished results are kept as long")
      ->capture_default_str();
  app.add_option("--trigger", trigger,
                 "incremental: fold late data on arrival; batch: reduce when all is in (ORDERED "
                 "chunks always reduce in batch, in node id order)")
      ->check(CLI::IsMember({"incremental", "batch"}))
      ->capture_default_str();
  app.add_option("--node-id", node_id, "node_id of the RESULTs it sends, 0..65535")
      ->capture_default_str();
  app.add_option("--covers", covers,
                 "JOB:SWITCH=IDS: switch node SWITCH of job JOB covers node ids IDS (like 0-3,7); "
                 "its late partial resolves them, less its own missing list. Repeatable")
      ->type_name("JOB:SWITCH=IDS");
  app.add_option("--sgd", sgd,
                 "JOB=LR: job JOB is a parameter-server job: keep its float32 parameters (from "
                 "zero), apply each chunk's gradient sum as p = p - LR * g and answer with the "
                 "parameters instead of the sum. Other ops (e.g. the fixed-point exponent's max) "
                 "pass through; sums of other types are refused (INCOMPLETE): use agg-worker "
                 "--float-mode float or ordered. Repeatable")
      ->type_name("JOB=LR");
  app.add_option("--job", jobs,
                 "JOB:KEY[:WORLD]: job JOB's datagrams must carry KEY (decimal or 0x-hex), and "
                 "its data sent to the parameter node itself (AGGREGATE_AT_PS) must say WORLD "
                 "ranks; others are dropped and counted. Repeatable")
      ->type_name("JOB:KEY[:WORLD]");
  app.add_flag("--listed-jobs-only", options.listed_jobs_only,
               "Drop (and count) the datagrams of every job that no --job lists");
  app.add_option("--sgd-max-elems", options.sgd_max_elems,
                 "Parameters per --sgd job at most (float32 each); chunks beyond are refused "
                 "(INCOMPLETE)")
      ->capture_default_str();
  app.add_option("--max-pending", options.tan.max_pending,
                 "Chunks in progress at most (more are refused and counted)")
      ->capture_default_str();
  app.add_option("--stats", options.stats_path,
                 "Write the counters as JSON to FILE every 500 ms and at exit (atomically)")
      ->type_name("FILE");
  app.add_option("--metrics", options.metrics_path,
                 "Write the counters in Prometheus's text format to FILE every 500 ms and at exit "
                 "(atomically; for node_exporter's textfile collector, name it *.prom)")
      ->type_name("FILE");
  app.add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "warn", "info", "debug"}))
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "Log errors only (same as --log-level error)");
  app.footer(
      "Signals: SIGINT/SIGTERM stop cleanly (exit 0). Exit 2: bad arguments or the "
      "socket cannot be bound; 1: the socket failed while serving.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  const auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "agg-ps: error: %s\n", message.c_str());
    return kExitUsage;
  };
  common::SetLogLevel(quiet ? common::LogLevel::kError : *common::ParseLogLevel(log_level));
  auto address = ParseListen(listen);
  if (!address.ok()) return usage_error(address.status().message());
  options.listen = *address;
  if (give_up_ms == 0 || give_up_ms > 3'600'000) {
    return usage_error("--give-up-ms: expected 1..3600000 milliseconds, got " +
                       std::to_string(give_up_ms));
  }
  options.tan.give_up_ns = give_up_ms * 1'000'000;
  if (node_id > 0xFFFF) {
    return usage_error("--node-id: expected a node id 0..65535, got " + std::to_string(node_id));
  }
  options.tan.node_id = static_cast<uint16_t>(node_id);
  options.tan.trigger =
      trigger == "batch" ? aggregator::TanTrigger::kBatch : aggregator::TanTrigger::kIncremental;
  if (options.tan.max_pending == 0) return usage_error("--max-pending: expected at least 1");
  for (const std::string& text : covers) {
    auto spec = ParseCovers(text);
    if (!spec.ok()) return usage_error(spec.status().message());
    options.covers.push_back(std::move(*spec));
  }
  for (const std::string& text : jobs) {
    auto job = ParseJob(text);
    if (!job.ok()) return usage_error(job.status().message());
    options.jobs.push_back(*job);
  }
  if (options.listed_jobs_only && options.jobs.empty()) {
    return usage_error("--listed-jobs-only: no job is listed (give each with --job)");
  }
  for (const std::string& text : sgd) {
    auto job = ParseSgd(text);
    if (!job.ok()) return usage_error(job.status().message());
    options.sgd.push_back(*job);
  }

  auto server = PsServer::Open(options);
  if (!server.ok()) return usage_error(server.status().message());
  common::InstallStopSignals();
  AGG_LOG(kInfo,
          "agg-ps serving as TAN on %s:%u: trigger %s, give-up %lu ms, node id %u, %zu "
          "coverage entries, %zu --sgd jobs%s%s",
          options.listen.ip.ToString().c_str(), (*server)->port(), trigger.c_str(),
          static_cast<unsigned long>(give_up_ms), options.tan.node_id, options.covers.size(),
          options.sgd.size(), options.stats_path.empty() ? "" : ", stats in ",
          options.stats_path.c_str());
  const common::Status status = (*server)->Run(common::StopFlag());
  if (!status.ok()) {
    AGG_LOG(kError, "%s", status.message().c_str());
    return kExitFailed;
  }
  const aggregator::TanCounters& c = (*server)->engine().tan().counters();
  AGG_LOG(kInfo,
          "agg-ps stopped: %lu completed, %lu gave up, %zu pending, %lu reduced from direct "
          "data, %lu sgd updates",
          static_cast<unsigned long>(c.completed), static_cast<unsigned long>(c.gave_up),
          (*server)->engine().tan().pending(),
          static_cast<unsigned long>((*server)->engine().counters().reduced),
          static_cast<unsigned long>((*server)->sgd().counters().updates));
  return 0;
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) {
  return aggswitch::tools::Main(argc, argv);
}
