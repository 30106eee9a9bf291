#include "control/control_loop.h"

#include <chrono>
#include <csignal>
#include <ctime>

#include "aggregator/job_table.h"
#include "common/log.h"
#include "config/loader.h"
#include "control/in_band_admission.h"
#include "control/int_exporter.h"
#include "control/job_control.h"
#include "control/tree_control.h"

namespace aggswitch::control {
namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_reload = 0;

void OnSignal(int sig) {
  if (sig == SIGHUP) {
    g_reload = 1;
  } else {
    g_stop = 1;
  }
}

constexpr long kLoopPeriodNs = 1'000'000;  // 1 ms: learning latency and aging granularity

}  // namespace

ControlLoop::ControlLoop(dataplane::Dataplane& dataplane, config::Config config,
                         std::string config_path, JobControl* jobs, TreeControl* tree,
                         InBandAdmission* admission, IntExporter* int_exporter)
    : dataplane_(dataplane),
      config_(std::move(config)),
      config_path_(std::move(config_path)),
      jobs_(jobs),
      tree_(tree),
      admission_(admission),
      int_exporter_(int_exporter) {}

void ControlLoop::InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

void ControlLoop::RequestStop() { g_stop = 1; }
bool ControlLoop::StopRequested() { return g_stop != 0; }

void ControlLoop::Step(std::chrono::steady_clock::time_point now) {
  dataplane_.ProcessLearnRequests();
  dataplane_.AgeMacTable();
  dataplane_.WatchGroupLinks();
  if (jobs_ != nullptr) {
    dataplane_.ProcessRegistrations([&](const dataplane::RegistrationRequest& request) {
      return jobs_->RegisterInBand(request, now);
    });
    dataplane_.ProcessEscalations(now);
    if (admission_ != nullptr) admission_->ExpireIdle(now);
    jobs_->ProcessPending();
    jobs_->StartNewRuns();
    jobs_->table().Reclaim();
  }
  if (tree_ != nullptr) tree_->Poll(now);
  if (int_exporter_ != nullptr) int_exporter_->Poll(now);
}

void ControlLoop::Run() {
  const common::Clock& clock = dataplane_.clock();
  while (!g_stop) {
    Step(clock.Now());
    if (notifier_ != nullptr) {
      worker_polls_.resize(dataplane_.worker_count());
      for (size_t i = 0; i < worker_polls_.size(); ++i) {
        worker_polls_[i] = dataplane_.worker_stats(i).lcore.polls.Get();
      }
      notifier_->Poll(clock.Now(), worker_polls_);
    }
    if (g_reload) {
      g_reload = 0;
      if (notifier_ != nullptr) notifier_->Reloading();
      auto result = Reload();
      if (!result.ok()) {
        AGG_LOG(kError, "reload rejected, running configuration unchanged:\n%s",
                result.status().message().c_str());
      } else if (result->empty()) {
        AGG_LOG(kInfo, "reload applied (mac_table.static, mac_table.aging_seconds, telemetry.watch)");
      } else {
        for (const std::string& key : *result) {
          AGG_LOG(kWarning, "reload: '%s' changed but needs a restart; still running the old value",
                  key.c_str());
        }
      }
      if (notifier_ != nullptr) {
        notifier_->Ready(result.ok() ? "forwarding: configuration reloaded"
                                     : "forwarding: reload rejected, configuration unchanged");
      }
    }
    timespec ts{0, kLoopPeriodNs};
    nanosleep(&ts, nullptr);
  }
  if (notifier_ != nullptr) notifier_->Stopping();
}

common::Result<std::vector<std::string>> ControlLoop::Reload() {
  config::ConfigLoad load = config_path_.empty()
                                ? config::LoadConfigText(config::EmbeddedDefaultConfigText(), "<embedded>")
                                : config::LoadConfigFile(config_path_);
  if (!load.ok()) return common::InvalidArgument(load.FormatErrors());
  std::vector<std::string> restart = RestartRequiredChanges(config_, load.config);
  RETURN_IF_ERROR(dataplane_.ApplyMacTableConfig(load.config.mac_table));
  config_.mac_table = load.config.mac_table;
  // A changed watch list replaces the one in force (the API's too).
  if (dataplane_.int_settings() != nullptr && !(config_.telemetry.watch == load.config.telemetry.watch)) {
    RETURN_IF_ERROR(dataplane_.SetWatchList(load.config.telemetry.watch));
    config_.telemetry.watch = load.config.telemetry.watch;
  }
  return restart;
}

std::vector<std::string> RestartRequiredChanges(const config::Config& running,
                                                const config::Config& next) {
  std::vector<std::string> changed;
  if (!(running.eal == next.eal)) changed.push_back("eal");
  if (!(running.switch_ == next.switch_)) changed.push_back("switch");
  if (!(running.ports == next.ports)) changed.push_back("ports");
  if (!(running.workers == next.workers)) changed.push_back("workers");
  if (running.mac_table.size != next.mac_table.size) changed.push_back("mac_table.size");
  if (!(running.mempool == next.mempool)) changed.push_back("mempool");
  if (!(running.http == next.http)) changed.push_back("http");
  if (!(running.aggregation == next.aggregation)) changed.push_back("aggregation");
  // The watch list applies at run time (when the switch runs telemetry).
  config::TelemetryConfig running_telemetry = running.telemetry, next_telemetry = next.telemetry;
  running_telemetry.watch.clear();
  next_telemetry.watch.clear();
  if (!(running_telemetry == next_telemetry) ||
      (running.telemetry.enabled() != next.telemetry.enabled())) {
    changed.push_back("telemetry");
  }
  return changed;
}

}  // namespace aggswitch::control
