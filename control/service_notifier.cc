#include "control/service_notifier.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <ctime>

#include "common/log.h"

namespace aggswitch::control {

ServiceNotifier ServiceNotifier::FromEnvironment() {
  ServiceNotifier n;
  n.enabled_ = std::getenv("NOTIFY_SOCKET") != nullptr;
  uint64_t usec = 0;
  // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is this process.
  if (n.enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0) {
    n.watchdog_ = std::chrono::microseconds(usec);
  }
  return n;
}

void ServiceNotifier::Send(const std::string& state) {
  if (!enabled_) return;
  const int rc = sd_notify(/*unset_environment=*/0, state.c_str());
  if (rc < 0) AGG_LOG(kWarning, "sd_notify: cannot tell the service manager \"%s\" (error %d)", state.c_str(), -rc);
}

void ServiceNotifier::Ready(const std::string& status) { Send("READY=1\nSTATUS=" + status); }

void ServiceNotifier::Reloading() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const unsigned long long usec =
      static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ULL + static_cast<unsigned long long>(ts.tv_nsec) / 1000;
  Send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) + "\nSTATUS=reloading the configuration");
}

void ServiceNotifier::Stopping() { Send("STOPPING=1\nSTATUS=stopping"); }

bool ServiceNotifier::Poll(Clock::time_point now, const std::vector<uint64_t>& worker_polls) {
  if (!enabled_ || watchdog_.count() == 0 || now < next_ping_) return false;
  next_ping_ = now + watchdog_ / 2;
  size_t stalled = worker_polls.size();
  if (last_polls_.size() == worker_polls.size()) {
    for (size_t i = 0; i < worker_polls.size() && stalled == worker_polls.size(); ++i) {
      if (worker_polls[i] == last_polls_[i]) stalled = i;
    }
  }
  last_polls_ = worker_polls;
  if (stalled != worker_polls.size()) {
    ++withheld_;
    if (!stalled_) {
      const std::string why = "worker " + std::to_string(stalled) + " has not polled its queues for " +
                              std::to_string(watchdog_.count() / 2000) + " ms; the watchdog is not fed";
      AGG_LOG(kError, "%s", why.c_str());
      Send("STATUS=" + why);
    }
    stalled_ = true;
    return false;
  }
  if (stalled_) Send("STATUS=forwarding: every worker polls again");
  stalled_ = false;
  Send("WATCHDOG=1");
  ++pings_;
  return true;
}

}  // namespace aggswitch::control
