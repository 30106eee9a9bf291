// The control thread's loop on the main lcore: MAC learning from the workers'
// rings, MAC aging, in-band job registration and expiry, job commands from
// the API and job reclamation, signals and configuration reload.
//
// Signals only raise flags (async-signal-safe); the loop acts on them:
//   SIGINT, SIGTERM  stop: Run() returns, the caller stops the dataplane.
//   SIGHUP           reload: re-read the config file, apply what can change at
//                    run time (mac_table.static, mac_table.aging_seconds,
//                    telemetry.watch), and log each changed key that needs a
//                    restart.
// Under systemd the loop tells the unit about reloads and the stop, and feeds
// its watchdog while every worker polls (service_notifier.h).
//
//   ControlLoop loop(*dataplane, config, config_path, &job_control);
//   ControlLoop::InstallSignalHandlers();
//   loop.Run();   // until SIGINT/SIGTERM
//
// Thread safety: Run() and Reload() on the control thread (main lcore) only;
// InstallSignalHandlers() once from main; RequestStop() from any thread or a
// signal handler.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/config.h"
#include "control/service_notifier.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {

class InBandAdmission;
class IntExporter;
class JobControl;
class TreeControl;

class ControlLoop {
 public:
  // `config_path` empty: the embedded default is in use and reload re-reads it.
  // `jobs` (optional, must outlive the loop): each iteration runs its queued
  // API commands and reclaims removed jobs of its table.
  // `tree` (optional, must outlive the loop): polled every iteration (next
  // hops, this switch's own TAN).
  // `admission` (optional, must outlive the loop): registers the jobs the
  // workers pass up from in-band task info, and expires idle ones. Without
  // it in-band registrations are refused.
  // `int_exporter` (optional, must outlive the loop): sends the workers' hop
  // records to the INT collector every iteration.
  ControlLoop(dataplane::Dataplane& dataplane, config::Config config, std::string config_path,
              JobControl* jobs = nullptr, TreeControl* tree = nullptr,
              InBandAdmission* admission = nullptr, IntExporter* int_exporter = nullptr);

  // `notifier` (optional, must outlive the loop): told of reloads and the
  // stop, and fed the workers' poll counters every iteration. [control]
  void SetServiceNotifier(ServiceNotifier* notifier) { notifier_ = notifier; }

  // Loops about every millisecond until a stop is requested: Step, the
  // service notifier, a reload when SIGHUP asked for one. [control]
  void Run();
  // One pass of the loop's work at `now` (the dataplane's clock): MAC
  // learning and aging, in-band registrations, escalations, idle in-band
  // jobs, queued API commands, reclamation, the job trees (next hops, own
  // TAN, straggler samples) and the INT exporter. Run calls it every
  // iteration; the fabric simulator (tests/sim) calls it on simulated time.
  // [control]
  void Step(std::chrono::steady_clock::time_point now);
  // Re-reads the configuration and applies what can change at run time.
  // Returns the keys that changed but need a restart. [control]
  common::Result<std::vector<std::string>> Reload();

  static void InstallSignalHandlers();
  static void RequestStop();
  static bool StopRequested();

 private:
  dataplane::Dataplane& dataplane_;
  config::Config config_;
  std::string config_path_;
  JobControl* jobs_;
  TreeControl* tree_;
  InBandAdmission* admission_;
  IntExporter* int_exporter_;
  ServiceNotifier* notifier_ = nullptr;
  std::vector<uint64_t> worker_polls_;  // reused every iteration
};

// The top-level keys whose values differ between `running` and `next` and that
// only take effect after a restart (everything except mac_table.static,
// mac_table.aging_seconds and telemetry.watch; aggregation, jobs included,
// needs a restart). [any]
std::vector<std::string> RestartRequiredChanges(const config::Config& running,
                                                const config::Config& next);

}  // namespace aggswitch::control
