#include "telemetry/path_analysis.h"

#include <gtest/gtest.h>

namespace aggswitch::telemetry {
namespace {

constexpr uint32_t kSrc = 0x0a000001;
constexpr uint32_t kDst = 0x0a000002;

// A datagram from kSrc to kDst through `nodes` (egress port = next node's
// id, so that paths through other switches differ), each hop taking
// `hop_ns` and using `util_ppm` of its TX capacity.
Traversal Through(std::vector<uint32_t> nodes, uint32_t hop_ns,
                  std::optional<uint32_t> util_ppm = std::nullopt) {
  Traversal t{kSrc, kDst, {}};
  for (size_t i = 0; i < nodes.size(); ++i) {
    const uint16_t out = i + 1 < nodes.size() ? static_cast<uint16_t>(nodes[i + 1]) : 0;
    t.hops.push_back({nodes[i], 1, out, hop_ns, util_ppm});
  }
  return t;
}

FlowPaths OneFlow(const std::vector<Traversal>& ts) {
  std::vector<FlowPaths> flows = GroupByFlow(SummarisePaths(ts));
  EXPECT_EQ(flows.size(), 1u);
  return flows.empty() ? FlowPaths{} : flows[0];
}

std::vector<uint32_t> Nodes(const PathSummary& p) {
  std::vector<uint32_t> n;
  for (const RouteHop& h : p.route) n.push_back(h.node_id);
  return n;
}

TEST(PathAnalysis, DatagramsThroughTheSameSwitchesAndPortsShareAPath) {
  std::vector<Traversal> ts = {Through({1, 2, 4}, 10000), Through({1, 2, 4}, 20000),
                               Through({1, 3, 4}, 5000)};
  ts.push_back(ts[0]);
  ts.back().hops[1].egress_port = 9;  // another port of switch 2: another path
  const FlowPaths f = OneFlow(ts);
  ASSERT_EQ(f.paths.size(), 3u);
  EXPECT_EQ(f.paths[0].samples, 2u);
  EXPECT_DOUBLE_EQ(f.paths[0].latency_ns, 45000.0) << "the mean of 30 and 60 us";
  EXPECT_EQ(f.paths[0].hops(), 3u);
}

// Two paths of three hops, 40 us against 25 us end to end: the lower
// latency wins, for its own rule and as the tie-break of the fewest hops.
TEST(PathAnalysis, EqualHopsPickTheLowerLatency) {
  const FlowPaths f = OneFlow({Through({1, 2, 4}, 40000 / 3), Through({1, 3, 4}, 25000 / 3)});
  for (const Rule r : {Rule::kMinLatency, Rule::kFewestHops}) {
    const std::optional<size_t> best = Choose(f, r);
    ASSERT_TRUE(best.has_value()) << RuleName(r);
    EXPECT_EQ(Nodes(f.paths[*best]), (std::vector<uint32_t>{1, 3, 4})) << RuleName(r);
  }
}

// Two hops against three: the fewest hops win though slower; the lowest
// latency wins by its own rule.
TEST(PathAnalysis, FewestHopsWinsOverLatencyByTheRoutingRule) {
  const FlowPaths f = OneFlow({Through({1, 4}, 30000), Through({1, 2, 4}, 10000)});
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kFewestHops)]), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kMinLatency)]), (std::vector<uint32_t>{1, 2, 4}));
}

// The bottleneck is the busiest hop: a path whose every hop is half busy
// beats one that is idle but for a 90% busy hop.
TEST(PathAnalysis, MaxBandwidthPicksTheWidestBottleneck) {
  Traversal spiky = Through({1, 2, 4}, 1000, 0);
  spiky.hops[1].tx_utilization_ppm = 900000;
  const FlowPaths f = OneFlow({spiky, Through({1, 3, 4}, 9000, 500000)});
  ASSERT_TRUE(f.paths[0].free_share.has_value());
  EXPECT_NEAR(*f.paths[0].free_share, 0.1, 1e-9);
  EXPECT_NEAR(*f.paths[1].free_share, 0.5, 1e-9);
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kMaxBandwidth)]), (std::vector<uint32_t>{1, 3, 4}));
}

TEST(PathAnalysis, APathWithoutUtilisationIsNeverTheWidest) {
  Traversal half = Through({1, 2, 4}, 1000, 0);
  half.hops[2].tx_utilization_ppm.reset();  // latency only at the last hop
  FlowPaths f = OneFlow({half});
  EXPECT_FALSE(Choose(f, Rule::kMaxBandwidth).has_value());
  EXPECT_TRUE(Choose(f, Rule::kMinLatency).has_value());
  f = OneFlow({half, Through({1, 3, 4}, 1000, 999999)});
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kMaxBandwidth)]), (std::vector<uint32_t>{1, 3, 4}));
}

// Equal measures: the path with more samples, then the lower route, so a
// decision does not flap.
TEST(PathAnalysis, TiesGoToTheBetterKnownPathThenTheLowerRoute) {
  FlowPaths f = OneFlow({Through({1, 3, 4}, 1000), Through({1, 2, 4}, 1000), Through({1, 3, 4}, 1000)});
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kMinLatency)]), (std::vector<uint32_t>{1, 3, 4}));
  f = OneFlow({Through({1, 3, 4}, 1000), Through({1, 2, 4}, 1000)});
  EXPECT_EQ(Nodes(f.paths[*Choose(f, Rule::kMinLatency)]), (std::vector<uint32_t>{1, 2, 4}));
}

TEST(PathAnalysis, FlowsAreDecidedApart) {
  Traversal back = Through({4, 2, 1}, 1000);
  std::swap(back.src_ip, back.dst_ip);
  const std::vector<FlowPaths> flows =
      GroupByFlow(SummarisePaths(std::vector<Traversal>{Through({1, 2, 4}, 1000), back, {}}));
  ASSERT_EQ(flows.size(), 2u);
  EXPECT_EQ(flows[0].src_ip, kSrc);
  EXPECT_EQ(flows[1].src_ip, kDst);
  EXPECT_FALSE(Choose(FlowPaths{}, Rule::kMinLatency).has_value());
}

TEST(PathAnalysis, RulesHaveNames) {
  for (const Rule r : kRules) EXPECT_EQ(RuleFromName(RuleName(r)), r);
  EXPECT_FALSE(RuleFromName("shortest").has_value());
}

}  // namespace
}  // namespace aggswitch::telemetry
