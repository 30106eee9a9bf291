// SIGINT and SIGTERM ask a tool's loop to stop (agg-ps, agg-intcollector):
// the handler only sets a flag, and a blocking wait returns at once (no
// SA_RESTART), so the loop sees it within one wait.
//
//   InstallStopSignals();
//   while (!StopRequested()) { poll(...); ... }
//   server->Run(StopFlag());      // a loop that takes the flag itself
//
// Thread safety: InstallStopSignals on the main thread, once; StopRequested
// on any thread.
#pragma once

#include <atomic>

namespace aggswitch::common {

void InstallStopSignals();
bool StopRequested();
// The flag the signals set.
const std::atomic<bool>& StopFlag();

}  // namespace aggswitch::common
