#include "client/mpi/mpi_env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "client/chunking.h"

namespace aggswitch::client::mpi {
namespace {

std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string Lower(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

common::Result<std::vector<SwitchAddress>> ParseSwitchList(const char* name, std::string_view text) {
  std::vector<SwitchAddress> switches;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    common::Result<SwitchAddress> address = ParseSwitchAddress(item);
    if (!address.ok()) {
      return common::InvalidArgument(std::string(name) +
                                     ": expected a.b.c.d[:port], or several separated by commas, got " +
                                     Quoted(text) + " (" + Quoted(item) + " is none)");
    }
    switches.push_back(*address);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (switches.size() > kMaxSwitches) {
    return common::InvalidArgument(std::string(name) + ": at most " + std::to_string(kMaxSwitches) +
                                   " switches expected, got " + std::to_string(switches.size()));
  }
  return switches;
}

common::Result<bool> ParseFlag(const char* name, std::string_view text) {
  const std::string v = Lower(text);
  if (v == "1" || v == "yes" || v == "true" || v == "on") return true;
  if (v == "0" || v == "no" || v == "false" || v == "off") return false;
  return common::InvalidArgument(std::string(name) + ": expected 1 or 0 (yes/no, true/false, on/off), got " +
                                 Quoted(text));
}

common::Result<std::chrono::milliseconds> ParseSeconds(const char* name, std::string_view text) {
  double seconds = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [next, ec] = std::from_chars(first, last, seconds);
  if (first == last || ec != std::errc() || next != last || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > kMaxTimeoutSeconds) {
    return common::InvalidArgument(std::string(name) + ": expected seconds, a number above 0 and at most " +
                                   std::to_string(static_cast<int>(kMaxTimeoutSeconds)) +
                                   " (such as 10 or 0.5), got " + Quoted(text));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

common::Result<uint32_t> ParseCount(const char* name, std::string_view text, uint32_t low,
                                    uint32_t high) {
  uint32_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [next, ec] = std::from_chars(first, last, value);
  if (first == last || ec != std::errc() || next != last || value < low || value > high) {
    return common::InvalidArgument(std::string(name) + ": expected an integer from " +
                                   std::to_string(low) + " to " + std::to_string(high) + ", got " +
                                   Quoted(text));
  }
  return value;
}

common::Result<ShimOptions> ParseShimEnv(const EnvLookup& env) {
  ShimOptions o;
  if (const char* v = env(kSwitchVar); v != nullptr && *v != '\0') {
    ASSIGN_OR_RETURN(o.switches, ParseSwitchList(kSwitchVar, v));
  }
  if (const char* v = env(kFallbackVar); v != nullptr) {
    ASSIGN_OR_RETURN(o.fallback, ParseFlag(kFallbackVar, v));
  }
  if (const char* v = env(kTimeoutVar); v != nullptr) {
    ASSIGN_OR_RETURN(o.timeout, ParseSeconds(kTimeoutVar, v));
  }
  if (const char* v = env(kProbeTimeoutVar); v != nullptr) {
    ASSIGN_OR_RETURN(o.probe_timeout, ParseSeconds(kProbeTimeoutVar, v));
  }
  if (const char* v = env(kMtuVar); v != nullptr) {
    ASSIGN_OR_RETURN(o.mtu, ParseCount(kMtuVar, v, kMinMtu, kMaxMtu));
  }
  if (const char* v = env(kWindowVar); v != nullptr) {
    ASSIGN_OR_RETURN(o.window, ParseCount(kWindowVar, v, 1, kMaxWindow));
  }
  return o;
}

bool FallbackRule(const EnvLookup& env) {
  const char* v = env(kFallbackVar);
  if (v == nullptr) return true;
  common::Result<bool> fallback = ParseFlag(kFallbackVar, v);
  return fallback.ok() ? *fallback : true;
}

}  // namespace aggswitch::client::mpi
