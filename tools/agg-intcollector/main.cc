// agg-intcollector: the in-band network telemetry collector
// (docs/telemetry.md). It receives the switches' Telemetry Reports over UDP,
// writes each to an SQLite record table an operator can query with sqlite3,
// and serves the paths between each source and destination and the best
// one by each rule (min latency, max bandwidth, fewest hops) over HTTP, with
// its counters in Prometheus's format. With --apply it pushes one rule's
// decisions to the switches of each path (decision_pusher.h).
//
//   agg-intcollector --listen 0.0.0.0:32766 --db /var/lib/aggswitch/int.db
//                    --http 127.0.0.1:9478 --window 60 --retain 3600 --max-rows 1000000
//                    --reporter 1=10.0.79.1 --reporter 2=10.0.79.2 ...
//                    [--apply min_latency --switch 1=10.0.79.1:9477,token-file=/etc/t1 ...]
//   curl http://127.0.0.1:9478/api/v1/decisions
//
// The loop itself is tools/agg-intcollector/collector.h.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM; 1 writing the record file failed
// while serving (a failed analysis is logged and counted, and the next one
// runs); 2 a bad command line, or the socket, the HTTP address or the record
// file could not be opened.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/stop_signals.h"
#include "common/http_server.h"
#include "tools/agg-intcollector/collector.h"

namespace aggswitch::tools {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int Main(int argc, char** argv) {
  std::string listen = "0.0.0.0:" + std::to_string(telemetry::kDefaultReportPort);
  std::string http = "127.0.0.1:9478";
  CollectorOptions options;
  uint32_t window_s = 60;
  uint32_t retain_s = 3600;
  uint32_t interval_ms = 1000;
  std::string log_level = "info";
  std::string apply;
  std::vector<std::string> switches;
  std::vector<std::string> reporters;

  CLI::App app{"agg-intcollector: the in-band network telemetry collector: Telemetry Reports in, "
               "an SQLite record table and path decisions out"};
  app.add_option("--listen", listen, "UDP address the switches send their reports to")
      ->type_name("ADDR:PORT")
      ->capture_default_str();
  app.add_option("--db", options.db_path, "The SQLite record file (created when missing)")
      ->capture_default_str();
  app.add_option("--http", http, "HTTP address of /metrics and /api/v1 (port 0: any free one)")
      ->type_name("ADDR:PORT")
      ->capture_default_str();
  app.add_option("--window", window_s,
                 "Seconds of traversals the analysis reads: paths and decisions of the last WINDOW")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str();
  app.add_option("--retain", retain_s,
                 "Seconds a report's rows stay in the record file (at least --window)")
      ->check(CLI::Range(1u, 100u * 365u * 86400u))
      ->capture_default_str();
  app.add_option("--max-rows", options.max_rows,
                 "Rows each table of the record file keeps at most: the oldest go first")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--interval-ms", interval_ms, "How often the analysis runs")
      ->check(CLI::Range(10u, 3600000u))
      ->capture_default_str();
  app.add_option("--apply", apply,
                 "Push each analysis's decisions by this rule to the switches of their paths: "
                 "min_latency, max_bandwidth or fewest_hops")
      ->check(CLI::IsMember({"min_latency", "max_bandwidth", "fewest_hops"}));
  app.add_option("--switch", switches,
                 "A switch decisions go to: its telemetry.node_id, its HTTP API, and the file "
                 "holding its API token (repeat per switch; with --apply)")
      ->type_name("NODE=ADDR:PORT[,token-file=PATH]");
  app.add_option("--reporter", reporters,
                 "A switch whose reports are accepted: its telemetry.node_id and the address its "
                 "reports come from (repeat per switch; each --switch is one too, from its API's "
                 "address); reports from anyone else are counted and dropped")
      ->type_name("NODE=ADDR");
  app.add_flag("--any-reporter", options.any_reporter,
               "Accept reports from anyone who can reach --listen (a lab; not with --apply)");
  app.add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  common::SetLogLevel(common::ParseLogLevel(log_level).value_or(common::LogLevel::kInfo));
  const std::optional<common::Ipv4Endpoint> at = common::Ipv4Endpoint::Parse(listen);
  if (!at) {
    std::fprintf(stderr,
                 "--listen: expected ADDR:PORT (an IPv4 address and a port 0..65535, e.g. "
                 "0.0.0.0:%u), got \"%s\"\n",
                 telemetry::kDefaultReportPort, listen.c_str());
    return kExitUsage;
  }
  options.listen = *at;
  options.window = std::chrono::seconds(window_s);
  options.retain = std::chrono::seconds(retain_s);
  if (apply.empty() != switches.empty()) {
    std::fprintf(stderr, "%s\n",
                 apply.empty() ? "--switch: expected --apply RULE too (which decisions to push)"
                               : "--apply: expected at least one --switch NODE=ADDR:PORT to push to");
    return kExitUsage;
  }
  if (!apply.empty()) options.apply = telemetry::RuleFromName(apply);
  for (const std::string& text : switches) {
    common::Result<SwitchEndpoint> sw = ParseSwitchOption(text);
    if (!sw.ok()) {
      std::fprintf(stderr, "%s\n", sw.status().message().c_str());
      return kExitUsage;
    }
    // A switch decisions go to reports from its API's address.
    options.reporters.push_back({sw->node_id, common::Ipv4Endpoint::Parse(sw->server)->ip.addr});
    options.switches.push_back(std::move(*sw));
  }
  for (const std::string& text : reporters) {
    common::Result<Reporter> r = ParseReporterOption(text);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return kExitUsage;
    }
    options.reporters.push_back(*r);
  }

  auto collector = Collector::Open(options);
  if (!collector.ok()) {
    std::fprintf(stderr, "%s\n", collector.status().message().c_str());
    return kExitUsage;
  }
  Collector& c = **collector;
  common::HttpServer::Options http_options;
  http_options.listen = http;
  http_options.threads = 4;
  auto server = common::HttpServer::Start(
      http_options, [&c](std::string_view method, std::string_view path, std::string_view query,
                         const std::string& body) { return c.Handle(method, path, query, body); });
  if (!server.ok()) {
    std::fprintf(stderr, "--http: %s\n", server.status().message().c_str());
    return kExitUsage;
  }
  common::InstallStopSignals();
  AGG_LOG(kInfo, "agg-intcollector: reports on udp %s:%u, records in %s, http://%s:%u",
          options.listen.ip.ToString().c_str(), c.port(), options.db_path.c_str(),
          http.substr(0, http.rfind(':')).c_str(), (*server)->port());

  using Clock = std::chrono::steady_clock;
  c.StartAnalysis(std::chrono::milliseconds(interval_ms));
  Clock::time_point next_flush = Clock::now();
  int rc = 0;
  while (!common::StopRequested()) {
    c.Poll(50);
    const Clock::time_point now = Clock::now();
    // Commits at least every 100 ms, so that sqlite3 and the analysis see
    // the reports soon.
    if (now >= next_flush) {
      if (const common::Status s = c.Flush(); !s.ok()) {
        AGG_LOG(kError, "%s", s.message().c_str());
        rc = kExitFailed;
        break;
      }
      next_flush = now + std::chrono::milliseconds(100);
    }
  }
  c.StopAnalysis();
  server->reset();
  if (rc == 0 && !c.Flush().ok()) rc = kExitFailed;
  return rc;
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) { return aggswitch::tools::Main(argc, argv); }
