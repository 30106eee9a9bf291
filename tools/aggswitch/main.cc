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

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "common/log.h"
#include "common/siphash.h"
#include "common/version.h"
#include "config/loader.h"
#include "control/control_loop.h"
#include "control/http_server.h"
#include "control/int_exporter.h"
#include "control/switch_source.h"
#include "control/in_band_admission.h"
#include "control/job_control.h"
#include "control/telemetry.h"
#include "control/tree_control.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"

namespace {

using namespace aggswitch;

// Every VLAN a port carries: where the switch looks for a next hop whose
// VLAN nobody named.
std::vector<uint16_t> CarriedVlans(const config::Config& cfg) {
  std::vector<uint16_t> vlans;
  for (const config::PortConfig& port : cfg.ports) {
    if (port.mode == config::VlanMode::kAccess) {
      vlans.push_back(port.access_vlan);
    } else {
      vlans.insert(vlans.end(), port.trunk_vlans.begin(), port.trunk_vlans.end());
      if (port.native_vlan) vlans.push_back(*port.native_vlan);
    }
  }
  std::sort(vlans.begin(), vlans.end());
  vlans.erase(std::unique(vlans.begin(), vlans.end()), vlans.end());
  return vlans;
}

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

  // The job table outlives the dataplane and the HTTP server (declared first,
  // destroyed last): the API reaches it through job_control.
  auto job_table = aggregator::JobTable::Create(cfg.aggregation.max_jobs, cfg.aggregation.max_fan_in);
  if (!job_table.ok()) {
    AGG_LOG(kError, "aggregation: %s", job_table.status().message().c_str());
    return 1;
  }
  // The slot placement's secret: the config's (labs, benchmarks), else a
  // fresh one, so that nobody outside can tell where a job's chunks land.
  const std::optional<common::SipKey> secret = cfg.aggregation.slot_secret.empty()
                                                   ? common::SipKey::Random()
                                                   : common::SipKey::Parse(cfg.aggregation.slot_secret);
  if (!secret) {
    AGG_LOG(kError, "aggregation: cannot draw a random slot secret from the kernel");
    return 1;
  }
  (*job_table)->SetSlotSecret(*secret);
  if (auto status = control::AddConfigJobs(**job_table, cfg.aggregation, rte_get_tsc_hz()); !status.ok()) {
    AGG_LOG(kError, "aggregation: %s", status.message().c_str());
    return 1;
  }
  control::JobControl::Options job_options;
  job_options.in_band_registration = cfg.aggregation.in_band_registration;
  for (const config::PortConfig& port : cfg.ports) job_options.port_names.push_back(port.name);
  // API jobs take the config's defaults and rules (and are built like config jobs).
  job_options.config = cfg;
  job_options.tsc_hz = rte_get_tsc_hz();
  control::JobControl job_control(**job_table, std::move(job_options));
  control::InBandAdmission admission(**job_table,
                                     control::InBandAdmission::OptionsFrom(cfg.aggregation));
  job_control.SetInBandAdmission(&admission);
  // The API jobs of the last run (aggregation.state_file), before the workers start.
  if (auto restored = job_control.RestoreSavedJobs(); !restored.ok()) {
    // A broken file is moved aside: the switch starts without those jobs and says so.
    AGG_LOG(kError, "%s", restored.status().message().c_str());
  }

  auto dp = dataplane::Dataplane::Create(cfg, cfg.aggregation.enabled ? job_table->get() : nullptr);
  if (!dp.ok()) {
    AGG_LOG(kError, "dataplane: %s", dp.status().message().c_str());
    return 1;
  }
  if ((*dp)->aggregation_enabled()) {
    // Job snapshots (API, /metrics) carry each job's counters, read on this
    // thread with the job list (see job_control.h). Set before the HTTP server
    // starts; the dataplane outlives every List() (http is reset first).
    const dataplane::Dataplane& counting = **dp;
    job_control.SetCounterReader(
        [&counting](uint16_t index) { return control::CollectJobCounters(counting, index); });
    job_control.SetStoreReader([&counting](uint16_t index, uint32_t generation) {
      return counting.JobStoreBuffers(index, generation);
    });
  }
  // The job trees: next hops by ARP, straggler prediction, this switch's own TAN.
  std::unique_ptr<control::TreeControl> tree;
  if ((*dp)->aggregation_enabled()) {
    control::TreeControl::Options tree_options;
    if (cfg.aggregation.address) {
      tree_options.own_ip = cfg.aggregation.address->prefix.ip.addr;
      tree_options.own_vlan = cfg.aggregation.address->vlan;
    }
    tree_options.vlans = CarriedVlans(cfg);
    tree_options.switch_mac = cfg.switch_.mac;
    tree_options.udp_port = cfg.aggregation.udp_port;
    tree_options.tan.give_up_ns = uint64_t{cfg.aggregation.give_up_ms} * 1'000'000;
    tree_options.tan.trigger = cfg.aggregation.trigger == config::AggTrigger::kBatch
                                   ? aggregator::TanTrigger::kBatch
                                   : aggregator::TanTrigger::kIncremental;
    tree = std::make_unique<control::TreeControl>(**dp, **job_table, std::move(tree_options));
    // A job added, or a TAN changed, through the API: resolve its next hops now.
    job_control.SetChangeHook([t = tree.get()] { t->ScanSoon(); });
  }
  std::string token;
  if (!cfg.http.token_file.empty()) {
    auto loaded = control::LoadOrCreateToken(cfg.http.token_file);
    if (!loaded.ok()) {
      AGG_LOG(kError, "%s", loaded.status().message().c_str());
      return 1;
    }
    token = std::move(loaded).value();
  }
  control::DataSource source = control::SwitchDataSource(**dp, &job_control, tree.get());
  source.set_watch = control::WatchListSetter(**dp, cfg);
  control::AttachPathDecisions(**dp, source);
  auto http = control::HttpServer::Start(control::HttpServer::OptionsFrom(cfg.http, std::move(token)),
                                         std::move(source));
  if (!http.ok()) {
    AGG_LOG(kError, "http: %s", http.status().message().c_str());
    return 1;
  }
  if (auto status = control::RegisterTelemetry(dp->get()); !status.ok()) {
    // Telemetry is an extra window on the stats; the switch runs without it.
    AGG_LOG(kWarning, "DPDK telemetry commands unavailable: %s", status.message().c_str());
  }
  if (auto status = (*dp)->Start(); !status.ok()) {
    AGG_LOG(kError, "dataplane: %s", status.message().c_str());
    control::UnregisterTelemetry();
    return 1;
  }
  AGG_LOG(kInfo, "aggswitch %s running: %zu ports, %zu workers; metrics at http://%s/metrics",
          common::Version(), cfg.ports.size(), cfg.workers.size(), cfg.http.listen.c_str());

  // In-band jobs expire on the clock their members' datagrams are stamped with.
  admission.SetClock([&dp = **dp] { return dp.SeenTick(); }, (*dp)->MillisecondsToTicks(1000));
  // In-band telemetry: the hop records become reports to the collector.
  std::unique_ptr<control::IntExporter> int_exporter;
  if ((*dp)->int_settings() != nullptr && cfg.telemetry.collector) {
    auto created = control::IntExporter::Create(**dp, cfg.telemetry);
    if (!created.ok()) {
      AGG_LOG(kError, "telemetry: %s", created.status().message().c_str());
      (*dp)->Stop();
      control::UnregisterTelemetry();
      return 1;
    }
    int_exporter = std::move(created).value();
  }
  control::ControlLoop loop(**dp, cfg, config_path, &job_control, tree.get(), &admission,
                            int_exporter.get());
  // Under systemd (Type=notify): ready now, and the watchdog fed while the workers poll.
  control::ServiceNotifier notifier = control::ServiceNotifier::FromEnvironment();
  loop.SetServiceNotifier(&notifier);
  notifier.Ready("forwarding: " + std::to_string(cfg.ports.size()) + " ports, " +
                 std::to_string(cfg.workers.size()) + " workers");
  if (notifier.watchdog().count() != 0) {
    AGG_LOG(kInfo, "systemd watchdog: fed every %lld ms while every worker polls",
            static_cast<long long>(notifier.watchdog().count() / 2000));
  }
  loop.Run();

  AGG_LOG(kInfo, "stopping: waiting for workers to finish their burst");
  control::UnregisterTelemetry();
  http->reset();
  job_control.SetCounterReader(nullptr);  // it outlives the dataplane
  job_control.SetChangeHook(nullptr);     // and the tree
  (*dp)->Stop();
  dp->reset();
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
