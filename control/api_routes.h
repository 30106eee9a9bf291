// The paths of the switch's API routes, written once: the router's table
// (api.h, ApiRoutes) is built on them, and aggctl fills them in (ApiPath).
// Header-only, so that aggctl links nothing of control/.
//
//   std::string target = ApiPath(routes::kJobTan, 7);  // "/api/v1/jobs/7/tan"
//
// Thread safety: [any].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace aggswitch::control {
namespace routes {
inline constexpr std::string_view kMetrics = "/metrics";
inline constexpr std::string_view kPorts = "/api/v1/ports";
inline constexpr std::string_view kMac = "/api/v1/mac";
inline constexpr std::string_view kLcores = "/api/v1/lcores";
inline constexpr std::string_view kStats = "/api/v1/stats";
inline constexpr std::string_view kJobs = "/api/v1/jobs";
inline constexpr std::string_view kJob = "/api/v1/jobs/<id>";
inline constexpr std::string_view kJobStragglers = "/api/v1/jobs/<id>/stragglers";
inline constexpr std::string_view kJobTan = "/api/v1/jobs/<id>/tan";
inline constexpr std::string_view kJobMember = "/api/v1/jobs/<id>/members/<node>";
inline constexpr std::string_view kSlots = "/api/v1/slots";
inline constexpr std::string_view kBypass = "/api/v1/bypass";
inline constexpr std::string_view kInt = "/api/v1/int";
inline constexpr std::string_view kDecisions = "/api/v1/int/decisions";
}  // namespace routes

// `pattern` with its <id> and <node> segments filled in.
inline std::string ApiPath(std::string_view pattern, uint64_t id = 0, uint64_t node = 0) {
  std::string out;
  while (!pattern.empty()) {
    const size_t open = pattern.find('<');
    out.append(pattern.substr(0, open));
    if (open == std::string_view::npos) break;
    const size_t close = pattern.find('>', open);
    const std::string_view name = pattern.substr(open, close - open + 1);
    out += std::to_string(name == "<node>" ? node : id);
    pattern.remove_prefix(close + 1);
  }
  return out;
}

}  // namespace aggswitch::control
