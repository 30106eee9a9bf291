// Leveled logging for control-side code (the control thread, the HTTP server,
// tools). Worker lcores never log: they count.
//
//   common::SetLogLevel(common::LogLevel::kDebug);
//   AGG_LOG(kInfo, "port %s up, %u rx queues", name.c_str(), nq);
//
// Thread safety: any non-worker thread. One line is written with one fprintf,
// so lines from different threads do not interleave.
#pragma once

#include <optional>
#include <string_view>

namespace aggswitch::common {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// "error", "warning", "info", "debug".
std::optional<LogLevel> ParseLogLevel(std::string_view name);

void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace aggswitch::common

#define AGG_LOG(level, ...)                                                        \
  do {                                                                             \
    if (::aggswitch::common::LogLevel::level <= ::aggswitch::common::GetLogLevel()) \
      ::aggswitch::common::Log(::aggswitch::common::LogLevel::level, __VA_ARGS__);  \
  } while (0)
