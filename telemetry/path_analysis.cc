#include "telemetry/path_analysis.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>

namespace aggswitch::telemetry {
namespace {

struct Sums {
  uint64_t samples = 0;
  double latency_ns = 0;
  double free_share = 0;
  bool every_hop_has_utilization = true;
};

}  // namespace

std::vector<PathSummary> SummarisePaths(std::span<const Traversal> traversals) {
  using Key = std::tuple<uint32_t, uint32_t, std::vector<RouteHop>>;
  std::map<Key, Sums> by_path;
  for (const Traversal& t : traversals) {
    if (t.hops.empty()) continue;
    std::vector<RouteHop> route;
    route.reserve(t.hops.size());
    double latency = 0;
    double bottleneck = 1.0;
    bool utilization = true;
    for (const PathHop& h : t.hops) {
      route.push_back({h.node_id, h.ingress_port, h.egress_port});
      latency += h.hop_latency_ns;
      if (!h.tx_utilization_ppm) {
        utilization = false;
        continue;
      }
      const double used = std::min(1.0, *h.tx_utilization_ppm / 1e6);
      bottleneck = std::min(bottleneck, 1.0 - used);
    }
    Sums& s = by_path[Key{t.src_ip, t.dst_ip, std::move(route)}];
    ++s.samples;
    s.latency_ns += latency;
    s.free_share += bottleneck;
    s.every_hop_has_utilization = s.every_hop_has_utilization && utilization;
  }
  std::vector<PathSummary> out;
  out.reserve(by_path.size());
  for (auto& [key, s] : by_path) {
    PathSummary p;
    p.src_ip = std::get<0>(key);
    p.dst_ip = std::get<1>(key);
    p.route = std::get<2>(key);
    p.samples = s.samples;
    const double n = static_cast<double>(s.samples);
    p.latency_ns = s.latency_ns / n;
    if (s.every_hop_has_utilization) p.free_share = s.free_share / n;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<FlowPaths> GroupByFlow(std::vector<PathSummary> paths) {
  std::vector<FlowPaths> flows;
  for (PathSummary& p : paths) {
    if (flows.empty() || flows.back().src_ip != p.src_ip || flows.back().dst_ip != p.dst_ip) {
      flows.push_back({p.src_ip, p.dst_ip, {}});
    }
    flows.back().paths.push_back(std::move(p));
  }
  return flows;
}

const char* RuleName(Rule r) {
  switch (r) {
    case Rule::kMinLatency:
      return "min_latency";
    case Rule::kMaxBandwidth:
      return "max_bandwidth";
    case Rule::kFewestHops:
      return "fewest_hops";
  }
  return "unknown";
}

std::optional<Rule> RuleFromName(std::string_view name) {
  for (const Rule r : kRules) {
    if (name == RuleName(r)) return r;
  }
  return std::nullopt;
}

std::optional<size_t> Choose(const FlowPaths& flow, Rule rule) {
  // Whether path a is better than path b by the rule (strictly), then by
  // the tie-breaks every rule shares: more samples, then the lower route.
  const auto better = [rule](const PathSummary& a, const PathSummary& b) {
    switch (rule) {
      case Rule::kMinLatency:
        if (a.latency_ns != b.latency_ns) return a.latency_ns < b.latency_ns;
        break;
      case Rule::kMaxBandwidth:
        if (*a.free_share != *b.free_share) return *a.free_share > *b.free_share;
        break;
      case Rule::kFewestHops:
        if (a.hops() != b.hops()) return a.hops() < b.hops();
        if (a.latency_ns != b.latency_ns) return a.latency_ns < b.latency_ns;
        break;
    }
    if (a.samples != b.samples) return a.samples > b.samples;
    return a.route < b.route;
  };
  std::optional<size_t> best;
  for (size_t i = 0; i < flow.paths.size(); ++i) {
    const PathSummary& p = flow.paths[i];
    if (rule == Rule::kMaxBandwidth && !p.free_share) continue;
    if (!best || better(p, flow.paths[*best])) best = i;
  }
  return best;
}

}  // namespace aggswitch::telemetry
