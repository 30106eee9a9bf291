// The switch's side of systemd's service protocol (sd_notify(3)): a unit of
// Type=notify learns when the switch forwards, reloads and stops, and its
// watchdog learns whether the dataplane still runs.
//
//   READY=1      once the dataplane is started and the API listens
//   RELOADING=1  while a SIGHUP reload is applied, then READY=1 again
//   STOPPING=1   when a stop was asked for
//   WATCHDOG=1   every half WatchdogSec, but only while every worker lcore
//                has passed over its queues since the last ping. A worker
//                that stops polling (a hung driver call, an endless loop)
//                withholds the ping and is named in STATUS=, so systemd
//                restarts the switch after WatchdogSec.
//
// Outside systemd (no NOTIFY_SOCKET) every call does nothing, so the switch
// runs the same from a shell.
//
//   ServiceNotifier notifier = ServiceNotifier::FromEnvironment();
//   notifier.Ready("forwarding: 4 ports, 2 workers");
//   for (;;) notifier.Poll(now, polls_of_each_worker);   // the control loop
//
// Thread safety: one owner; every call on the control thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace aggswitch::control {

class ServiceNotifier {
 public:
  using Clock = std::chrono::steady_clock;

  // What systemd passed: NOTIFY_SOCKET and WATCHDOG_USEC (for this process).
  static ServiceNotifier FromEnvironment();
  ServiceNotifier() = default;

  // Whether a service manager listens.
  bool enabled() const { return enabled_; }
  // WatchdogSec as the manager set it; zero without a watchdog.
  std::chrono::microseconds watchdog() const { return watchdog_; }

  void Ready(const std::string& status);
  void Reloading();
  void Stopping();

  // Every control-loop pass, with each worker lcore's poll counter: pings
  // the watchdog when half its period has passed and every counter moved
  // since the last ping. Returns whether it pinged.
  bool Poll(Clock::time_point now, const std::vector<uint64_t>& worker_polls);

  // Pings sent, and pings withheld for a stalled worker.
  uint64_t pings() const { return pings_; }
  uint64_t withheld() const { return withheld_; }

 private:
  void Send(const std::string& state);

  bool enabled_ = false;
  std::chrono::microseconds watchdog_{0};
  Clock::time_point next_ping_{};
  std::vector<uint64_t> last_polls_;
  bool stalled_ = false;  // the last check found a worker that had not polled
  uint64_t pings_ = 0;
  uint64_t withheld_ = 0;
};

}  // namespace aggswitch::control
