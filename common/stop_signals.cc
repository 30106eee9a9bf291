#include "common/stop_signals.h"

#include <signal.h>

#include <atomic>

namespace aggswitch::common {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

void OnStopSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

}  // namespace

void InstallStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the loop's wait returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }

const std::atomic<bool>& StopFlag() { return g_stop; }

}  // namespace aggswitch::common
