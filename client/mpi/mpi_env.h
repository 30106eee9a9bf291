// The environment of libaggswitch_mpi.so (aggswitch_mpi.cc, docs/mpi.md):
// which switch MPI_Allreduce goes through, what happens when it cannot be
// reached, and how long an allreduce may go without progress.
//
//   AGGSWITCH_SWITCH          a.b.c.d[:port][,a.b.c.d[:port]...] (agg-worker --switch);
//                             unset or empty: every call goes to MPI's own
//   AGGSWITCH_FALLBACK        1 (default): MPI's own allreduce when the switch
//                             is unreachable; 0: fail instead
//   AGGSWITCH_TIMEOUT         seconds an allreduce may go without a result (10)
//   AGGSWITCH_PROBE_TIMEOUT   seconds a communicator's first, one-element
//                             allreduce may take before the switch counts as
//                             unreachable (2)
//   AGGSWITCH_MTU             the path MTU the clients fill (1500)
//   AGGSWITCH_WINDOW          chunks in flight per client (128)
//
//   auto env = [](const char* name) { return std::getenv(name); };
//   common::Result<ShimOptions> options = ParseShimEnv(env);
//   if (!options.ok()) complain(options.status().message()), fall back if FallbackRule(env);
//
// Pure functions of their arguments; no MPI. Thread safety: any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "common/status.h"

namespace aggswitch::client::mpi {

inline constexpr char kSwitchVar[] = "AGGSWITCH_SWITCH";
inline constexpr char kFallbackVar[] = "AGGSWITCH_FALLBACK";
inline constexpr char kTimeoutVar[] = "AGGSWITCH_TIMEOUT";
inline constexpr char kProbeTimeoutVar[] = "AGGSWITCH_PROBE_TIMEOUT";
inline constexpr char kMtuVar[] = "AGGSWITCH_MTU";
inline constexpr char kWindowVar[] = "AGGSWITCH_WINDOW";

// Longest timeout the variables take: a day.
inline constexpr double kMaxTimeoutSeconds = 86400;

struct ShimOptions {
  // Where allreduces go; empty when AGGSWITCH_SWITCH is unset or empty.
  std::vector<SwitchAddress> switches;
  // When a communicator cannot use the switch: MPI's own allreduce (true)
  // or an error through the communicator's error handler (false).
  bool fallback = true;
  // The clients' progress_timeout.
  std::chrono::milliseconds timeout{10'000};
  // How long the probe of a communicator's first allreduce may take.
  std::chrono::milliseconds probe_timeout{2'000};
  // The clients' mtu (kMinMtu..kMaxMtu) and window (1..kMaxWindow).
  uint32_t mtu = 1500;
  uint32_t window = 128;

  bool enabled() const { return !switches.empty(); }
};

// Looks a variable up: its value, or nullptr when it is unset.
using EnvLookup = std::function<const char*(const char* name)>;

// Every variable above. An error's message is one line that names the first
// bad variable and says what it expected and what it got. [any]
common::Result<ShimOptions> ParseShimEnv(const EnvLookup& env);

// The rule for a communicator that cannot use the switch, even when
// ParseShimEnv failed: AGGSWITCH_FALLBACK when it is valid, else the
// default, fall back. [any]
bool FallbackRule(const EnvLookup& env);

// The parts, for their messages and tests. `name` is the variable's name.
// A comma-separated list of a.b.c.d[:port], 1..kMaxSwitches entries. [any]
common::Result<std::vector<SwitchAddress>> ParseSwitchList(const char* name, std::string_view text);
// 1/0, yes/no, true/false, on/off (any case). [any]
common::Result<bool> ParseFlag(const char* name, std::string_view text);
// Seconds, a decimal number above 0 and at most kMaxTimeoutSeconds, rounded
// up to whole milliseconds. [any]
common::Result<std::chrono::milliseconds> ParseSeconds(const char* name, std::string_view text);
// A decimal integer in low..high. [any]
common::Result<uint32_t> ParseCount(const char* name, std::string_view text, uint32_t low,
                                    uint32_t high);

}  // namespace aggswitch::client::mpi
