// aggswitch: the switch daemon.
//
//   aggswitch                                  run the embedded default config
//   aggswitch --config tor1.yaml               run a config file
//   aggswitch --config tor1.yaml --check-config   validate, print every error, exit
//   aggswitch --config x.yaml -- --no-huge -m 512 append EAL arguments
//
// Exit codes: 0 clean stop (SIGINT/SIGTERM) or valid config; 1 start-up failure;
// 2 invalid config or command line.
#include <CLI/CLI.hpp>
#include <rte_version.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/version.h"
#include "config/loader.h"
#include "control/control_loop.h"
#include "common/http_guard.h"
#include "control/api_server.h"
#include "control/switch_node.h"
#include "control/switch_source.h"
#include "control/telemetry.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"

namespace {

using namespace aggswitch;

std::vector<std::string> SplitWords(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

void PrintSummary(const config::Config& cfg) {
  std::printf("config OK: %zu ports, %zu workers, MAC table %u entries (%zu static), http %s\n",
              cfg.ports.size(), cfg.workers.size(), cfg.mac_table.size,
              cfg.mac_table.static_entries.size(), cfg.http.listen.c_str());
}

// Everything between a valid config and a stop request. Returns the exit code.
int RunSwitch(const config::Config& cfg, const std::string& config_path,
              const std::vector<std::string>& eal_overrides) {
  const std::vector<std::string> eal_args = dataplane::BuildEalArgs(cfg, eal_overrides);
  auto eal = dataplane::EalSession::Init("aggswitch", eal_args);
  if (!eal.ok()) {
    AGG_LOG(kError, "%s", eal.status().message().c_str());
    return 1;
  }
  control::ControlLoop::InstallSignalHandlers();

  // The switch itself; the HTTP server, telemetry and systemd come on top
  // and go first (the node outlives them).
  auto created = control::SwitchNode::Create(cfg, {.config_path = config_path});
  if (!created.ok()) {
    AGG_LOG(kError, "%s", created.status().message().c_str());
    return 1;
  }
  control::SwitchNode& node = **created;
  dataplane::Dataplane& dp = node.dataplane();
  std::string token;
  if (!cfg.http.token_file.empty()) {
    auto loaded = common::LoadOrCreateToken(cfg.http.token_file);
    if (!loaded.ok()) {
      AGG_LOG(kError, "%s", loaded.status().message().c_str());
      return 1;
    }
    token = std::move(loaded).value();
  }
  control::DataSource source = control::SwitchDataSource(dp, &node.jobs(), node.tree());
  source.set_watch = control::WatchListSetter(dp, cfg);
  control::AttachPathDecisions(dp, source);
  auto http = control::StartApiServer(control::ApiServerOptions(cfg.http, std::move(token)), std::move(source));
  if (!http.ok()) {
    AGG_LOG(kError, "http: %s", http.status().message().c_str());
    return 1;
  }
  if (auto status = control::RegisterTelemetry(&dp); !status.ok()) {
    // Telemetry is an extra window on the stats; the switch runs without it.
    AGG_LOG(kWarning, "DPDK telemetry commands unavailable: %s", status.message().c_str());
  }
  if (auto status = dp.Start(); !status.ok()) {
    AGG_LOG(kError, "dataplane: %s", status.message().c_str());
    control::UnregisterTelemetry();
    return 1;
  }
  AGG_LOG(kInfo, "aggswitch %s running: %zu ports, %zu workers; metrics at http://%s/metrics",
          common::Version(), cfg.ports.size(), cfg.workers.size(), cfg.http.listen.c_str());

  // Under systemd (Type=notify): ready now, and the watchdog fed while the workers poll.
  control::ServiceNotifier notifier = control::ServiceNotifier::FromEnvironment();
  node.loop().SetServiceNotifier(&notifier);
  notifier.Ready("forwarding: " + std::to_string(cfg.ports.size()) + " ports, " +
                 std::to_string(cfg.workers.size()) + " workers");
  if (notifier.watchdog().count() != 0) {
    AGG_LOG(kInfo, "systemd watchdog: fed every %lld ms while every worker polls",
            static_cast<long long>(notifier.watchdog().count() / 2000));
  }
  node.loop().Run();

  AGG_LOG(kInfo, "stopping: waiting for workers to finish their burst");
  control::UnregisterTelemetry();
  http->reset();
  node.loop().SetServiceNotifier(nullptr);
  created->reset();  // stops the workers, then the rest
  AGG_LOG(kInfo, "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"aggswitch: DPDK software switch with in-network aggregation"};
  std::string config_path;
  bool check_only = false;
  bool show_version = false;
  std::string log_level = "info";
  std::string eal_args;
  app.add_option("-c,--config", config_path, "YAML config file (default: the embedded demo config)")
      ->check(CLI::ExistingFile);
  app.add_flag("--check-config", check_only, "Validate the config, print every error, and exit");
  app.add_flag("-V,--version", show_version, "Print the version and exit");
  app.add_option("--log-level", log_level, "error, warning, info or debug")
      ->check(CLI::IsMember({"error", "warning", "warn", "info", "debug"}));
  app.add_option("--eal-args", eal_args,
                 "Extra EAL arguments, appended after the config's (also accepted after --)");
  app.allow_extras();
  app.footer(
      "Signals: SIGINT/SIGTERM stop cleanly; SIGHUP reloads mac_table.static, "
      "mac_table.aging_seconds and telemetry.watch.\n"
      "Under systemd (Type=notify) it reports readiness, reloads and the stop with sd_notify, and "
      "feeds WatchdogSec while every worker lcore polls.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (show_version) {
    std::printf("aggswitch %s (%s)\n", common::Version(), rte_version());
    return 0;
  }
  common::SetLogLevel(*common::ParseLogLevel(log_level));

  std::vector<std::string> overrides = SplitWords(eal_args);
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;
    overrides.push_back(extra);
  }

  config::ConfigLoad load =
      config_path.empty() ? config::LoadConfigText(config::EmbeddedDefaultConfigText(), "<embedded>")
                          : config::LoadConfigFile(config_path);
  if (!load.ok()) {
    std::fprintf(stderr, "%s\n%zu error%s in %s\n", load.FormatErrors().c_str(), load.errors.size(),
                 load.errors.size() == 1 ? "" : "s", load.source_name.c_str());
    return 2;
  }
  if (check_only) {
    PrintSummary(load.config);
    return 0;
  }
  return RunSwitch(load.config, config_path, overrides);
}
