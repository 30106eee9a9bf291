// The collector's analysis (docs/telemetry.md, "Path decisions"): from the
// paths that sampled datagrams took between a source and a destination, the
// best one by each rule.
//
//   - min latency: the lowest mean end-to-end latency (the sum of the hops'
//     latencies, averaged over the path's samples);
//   - max bandwidth: the highest bottleneck, the least free share of TX
//     capacity (1 - utilisation) over the path's hops, averaged likewise; a
//     path some hop of which did not report utilisation has none and is
//     never chosen by it;
//   - fewest hops: the fewest hops, lower mean latency breaking a tie (the
//     routing table's rule, with the tie-break the measurements allow).
//
// A path is the sequence of (node, ingress port, egress port) its hops
// reported: two datagrams through the same switches and ports took the same
// path. Ties left after a rule's measure go to the path with more samples,
// then to the lower sequence, so that a decision never flaps between equals.
//
//   std::vector<PathSummary> paths = SummarisePaths(traversals);
//   for (const FlowPaths& f : GroupByFlow(paths))
//     if (auto best = Choose(f, Rule::kMinLatency)) push(f.src_ip, f.dst_ip, f.paths[*best]);
//
// Thread safety: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace aggswitch::telemetry {

// One hop of a datagram's path, as its report said. Utilisation in parts
// per million of the line rate; nullopt when the hop did not record it.
struct PathHop {
  uint32_t node_id = 0;
  uint16_t ingress_port = 0;
  uint16_t egress_port = 0;
  uint32_t hop_latency_ns = 0;
  std::optional<uint32_t> tx_utilization_ppm;
};

// One sampled datagram from a source to a destination: its hops in path
// order (hop index 1 first), all of them (the end-of-path notice came).
struct Traversal {
  uint32_t src_ip = 0;  // host order
  uint32_t dst_ip = 0;
  std::vector<PathHop> hops;
};

struct RouteHop {
  uint32_t node_id = 0;
  uint16_t ingress_port = 0;
  uint16_t egress_port = 0;
  auto operator<=>(const RouteHop&) const = default;
};

struct PathSummary {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  std::vector<RouteHop> route;
  uint64_t samples = 0;
  double latency_ns = 0;             // mean end-to-end
  std::optional<double> free_share;  // mean bottleneck, 0..1
  size_t hops() const { return route.size(); }
};

// The paths of `traversals`, one summary per (source, destination, route),
// ordered by source, destination, then route.
std::vector<PathSummary> SummarisePaths(std::span<const Traversal> traversals);

struct FlowPaths {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  std::vector<PathSummary> paths;
};
// SummarisePaths' output split by (source, destination).
std::vector<FlowPaths> GroupByFlow(std::vector<PathSummary> paths);

enum class Rule : uint8_t { kMinLatency, kMaxBandwidth, kFewestHops };
inline constexpr Rule kRules[] = {Rule::kMinLatency, Rule::kMaxBandwidth, Rule::kFewestHops};
const char* RuleName(Rule r);  // "min_latency", "max_bandwidth", "fewest_hops"
std::optional<Rule> RuleFromName(std::string_view name);

// The index in `flow.paths` of the best path by `rule`; nullopt when none
// qualifies (no paths, or no path with utilisation for max bandwidth).
std::optional<size_t> Choose(const FlowPaths& flow, Rule rule);

}  // namespace aggswitch::telemetry
