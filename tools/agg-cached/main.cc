// agg-cached: one node of the data cache (docs/cache.md). It registers a
// region of memory for RDMA, fills it from the external store with this
// node's share of the dataset (consistent hashing, `replicas` copies),
// publishes where each item lives in the records (etcd or a file), and
// serves one-sided reads to the loaders of allowed nodes and jobs.
//
//   agg-cached --config /etc/aggswitch/cache.yaml [--progress] [--check-config]
//   curl http://127.0.0.1:9480/metrics
//
// The daemon itself is cache/cache_daemon.h.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM; 2 a bad command line or config,
// or the region, UCX, the store or the records could not be opened.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cache/cache_daemon.h"
#include "common/log.h"
#include "common/stop_signals.h"
#include "common/http_server.h"
#include "common/prometheus.h"
#include "tools/agg-cached/cache_metrics.h"

namespace aggswitch::tools {
namespace {

constexpr int kExitUsage = 2;

int Main(int argc, char** argv) {
  std::string config_path;
  std::string log_level = "info";
  bool check_only = false;
  bool progress = false;
  CLI::App app{"agg-cached: a node of the aggswitch data cache: fills its memory from the "
               "external store and serves it to loaders by RDMA (UCX)"};
  app.add_option("--config", config_path, "The cache config (YAML, a `cache:` section)")->required();
  app.add_flag("--check-config", check_only, "Check the config, print the errors, and exit");
  app.add_flag("--progress", progress, "Draw the fill's progress bar on stderr (default: when it is a terminal)");
  app.add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "info", "debug"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  common::SetLogLevel(common::ParseLogLevel(log_level).value_or(common::LogLevel::kInfo));
  auto config = cache::LoadDaemonConfig(config_path);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().message().c_str());
    return kExitUsage;
  }
  if (check_only) {
    std::printf("%s: ok\n", config_path.c_str());
    return 0;
  }
  auto daemon = cache::CacheDaemon::Start(*config);
  if (!daemon.ok()) {
    std::fprintf(stderr, "agg-cached: %s\n", daemon.status().message().c_str());
    return kExitUsage;
  }
  cache::CacheDaemon& d = **daemon;
  std::unique_ptr<common::HttpServer> http;
  if (!config->metrics.empty()) {
    common::HttpServer::Options options;
    options.listen = config->metrics;
    options.threads = 2;
    auto server = common::HttpServer::Start(
        options, [&d](std::string_view method, std::string_view path, std::string_view,
                      const std::string&) {
          if (path != "/metrics") {
            return common::HttpResponse{404, common::kJsonContentType,
                                        common::ErrorJson("no such path; the cache serves /metrics")};
          }
          if (method != "GET") {
            return common::HttpResponse{405, common::kJsonContentType, common::ErrorJson("/metrics takes GET")};
          }
          return common::HttpResponse{200, common::kPrometheusContentType,
                                      RenderCacheMetrics(d.stats(), d.config())};
        });
    if (!server.ok()) {
      std::fprintf(stderr, "cache.metrics: %s\n", server.status().message().c_str());
      return kExitUsage;
    }
    http = std::move(server).value();
  }
  common::InstallStopSignals();
  const common::Status run = d.Run(common::StopFlag(), progress || ::isatty(2));
  http.reset();
  if (!run.ok()) {
    std::fprintf(stderr, "agg-cached: %s\n", run.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) { return aggswitch::tools::Main(argc, argv); }
