// Path decisions applied: each hop of a flow's best path decides its node's
// egress port for the destination; the pusher sends each switch its set
// through the switch's real API route (PUT /api/v1/int/decisions, with the
// token), again only when the set changed or the last push failed.
#include "tools/agg-intcollector/decision_pusher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "control/api_server.h"

namespace aggswitch::tools {
namespace {

using telemetry::FlowPaths;
using telemetry::PathSummary;
using telemetry::RouteHop;
using telemetry::Rule;

constexpr uint32_t kSrc = 0x0a000001;   // 10.0.0.1
constexpr uint32_t kSrc2 = 0x0a000005;  // 10.0.0.5
constexpr uint32_t kDst = 0x0a000002;   // 10.0.0.2

PathSummary Path(uint32_t src, std::vector<RouteHop> route, double latency_ns, uint64_t samples) {
  PathSummary p;
  p.src_ip = src;
  p.dst_ip = kDst;
  p.route = std::move(route);
  p.latency_ns = latency_ns;
  p.samples = samples;
  return p;
}

// leaf 1 -> spine 2 (port 3 of leaf 1) or spine 4 (port 4) -> leaf 5 (port 1 toward the host).
std::vector<RouteHop> ViaSpine(uint32_t spine) {
  return {{1, 0, static_cast<uint16_t>(spine == 2 ? 3 : 4)}, {spine, 0, 1}, {5, 2, 1}};
}

TEST(PlanDecisions, EachHopOfTheBestPathDecidesItsNodesEgressForTheDestination) {
  const std::vector<FlowPaths> flows = {
      {kSrc, kDst, {Path(kSrc, ViaSpine(2), 40000, 10), Path(kSrc, ViaSpine(4), 25000, 10)}}};
  const NodeDecisions plan = PlanDecisions(flows, Rule::kMinLatency);
  ASSERT_EQ(plan.size(), 3u) << "leaf 1, spine 4, leaf 5: not the slower spine 2";
  EXPECT_EQ(plan.at(1).at(kDst), 4);
  EXPECT_EQ(plan.at(4).at(kDst), 1);
  EXPECT_EQ(plan.at(5).at(kDst), 1);
  EXPECT_EQ(plan.count(2), 0u);
}

TEST(PlanDecisions, FlowsThatDisagreeAtANodeGoByTheBetterKnownPath) {
  const std::vector<FlowPaths> flows = {
      {kSrc, kDst, {Path(kSrc, ViaSpine(2), 1000, 3)}},
      {kSrc2, kDst, {Path(kSrc2, ViaSpine(4), 1000, 30)}}};
  const NodeDecisions plan = PlanDecisions(flows, Rule::kFewestHops);
  EXPECT_EQ(plan.at(1).at(kDst), 4) << "30 samples through spine 4 against 3 through spine 2";
  EXPECT_EQ(plan.at(2).at(kDst), 1) << "spine 2 still carries its flow's decision";
}

TEST(ParseSwitchOption, TakesNodeAddressAndTokenFile) {
  char path[] = "/tmp/agg_pusher_token.XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "0123456789abcdef0123\n", 21), 21);
  close(fd);
  auto sw = ParseSwitchOption(std::string("7=10.0.79.1:9477,token-file=") + path);
  ASSERT_TRUE(sw.ok()) << sw.status().message();
  EXPECT_EQ(sw->node_id, 7u);
  EXPECT_EQ(sw->server, "10.0.79.1:9477");
  EXPECT_EQ(sw->token, "0123456789abcdef0123");
  std::remove(path);
  for (const char* bad : {"7", "x=10.0.79.1:9477", "7=10.0.79.1", "7=host:1", "7=10.0.79.1:9477,token=x",
                          "7=10.0.79.1:9477,token-file=/nonexistent/t"}) {
    auto r = ParseSwitchOption(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("expected NODE=ADDR:PORT"), std::string::npos) << bad;
  }
}

// A switch's API as the switch serves it (the real route and body parser),
// with what it was told kept.
class FakeSwitch {
 public:
  explicit FakeSwitch(const std::string& token) {
    control::DataSource source;
    source.decisions = [this] {
      control::PathDecisionsView v;
      v.decisions = taken;
      return v;
    };
    source.set_decisions = [this](const std::vector<control::PathDecisionEntry>& d) {
      ++puts;
      taken = d;
      return common::Status::Ok();
    };
    common::HttpServer::Options o;
    o.listen = "127.0.0.1:0";
    o.threads = 2;
    o.access.token = token;
    auto s = control::StartApiServer(o, std::move(source));
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (s.ok()) server_ = std::move(*s);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  std::vector<control::PathDecisionEntry> taken;
  int puts = 0;

 private:
  std::unique_ptr<common::HttpServer> server_;
};

TEST(DecisionPusher, SendsEachSwitchItsSetWithItsTokenOnlyWhenItChanges) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  FakeSwitch leaf(token);
  FakeSwitch spine(token);
  DecisionPusher pusher({{1, leaf.address(), token}, {4, spine.address(), token}});
  const std::vector<FlowPaths> flows = {
      {kSrc, kDst, {Path(kSrc, ViaSpine(2), 40000, 10), Path(kSrc, ViaSpine(4), 25000, 10)}}};
  const auto t0 = std::chrono::steady_clock::now();
  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), t0);
  ASSERT_EQ(leaf.taken.size(), 1u);
  EXPECT_EQ(leaf.taken[0].dst.ToString(), "10.0.0.2/32");
  EXPECT_EQ(leaf.taken[0].port_index, 4);
  ASSERT_EQ(spine.taken.size(), 1u);
  EXPECT_EQ(spine.taken[0].port_index, 1);
  DecisionPusher::Counts c = pusher.counts();
  EXPECT_EQ(c.pushed, 2u);
  EXPECT_EQ(c.failed, 0u);
  EXPECT_EQ(c.decisions, 2u);
  EXPECT_EQ(c.unknown_nodes, 1u) << "leaf 5 has no --switch";

  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), t0 + std::chrono::seconds(1));
  EXPECT_EQ(leaf.puts, 1) << "unchanged: not sent again";
  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), t0 + std::chrono::seconds(31));
  EXPECT_EQ(leaf.puts, 2) << "sent again after the refresh time";

  // The decision moves: the leaf is told, spine 4 loses its part.
  const std::vector<FlowPaths> moved = {
      {kSrc, kDst, {Path(kSrc, ViaSpine(2), 20000, 10), Path(kSrc, ViaSpine(4), 25000, 10)}}};
  pusher.Push(PlanDecisions(moved, Rule::kMinLatency), t0 + std::chrono::seconds(32));
  ASSERT_EQ(leaf.taken.size(), 1u);
  EXPECT_EQ(leaf.taken[0].port_index, 3);
  EXPECT_TRUE(spine.taken.empty());
  EXPECT_NE(pusher.StateJson().find("\"port\":3"), std::string::npos) << pusher.StateJson();
}

TEST(DecisionPusher, ARefusedOrUnreachableSwitchCountsAFailureAndIsTriedAgain) {
  FakeSwitch leaf("0123456789abcdef0123456789abcdef");
  DecisionPusher pusher({{1, leaf.address(), "fedcba9876543210fedcba9876543210"},
                         {4, "127.0.0.1:1", ""}},
                        std::chrono::seconds(30), 500);
  const std::vector<FlowPaths> flows = {{kSrc, kDst, {Path(kSrc, ViaSpine(4), 25000, 10)}}};
  const auto t0 = std::chrono::steady_clock::now();
  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), t0);
  EXPECT_EQ(leaf.puts, 0) << "a wrong token is refused before the route";
  EXPECT_EQ(pusher.counts().failed, 2u);
  EXPECT_NE(pusher.StateJson().find("HTTP 401"), std::string::npos) << pusher.StateJson();
  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), t0 + std::chrono::seconds(1));
  EXPECT_EQ(pusher.counts().failed, 4u) << "a failed switch is tried at every analysis";
}

// A stop asked for while a push is under way sends to no more switches: the
// collector's SIGTERM waits for one switch's answer at most, not one per
// switch.
TEST(DecisionPusher, AStopSendsToNoMoreSwitches) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  FakeSwitch leaf(token);
  FakeSwitch spine(token);
  DecisionPusher pusher({{1, leaf.address(), token}, {4, spine.address(), token}});
  const std::vector<FlowPaths> flows = {{kSrc, kDst, {Path(kSrc, ViaSpine(4), 25000, 10)}}};
  int asked = 0;
  pusher.Push(PlanDecisions(flows, Rule::kMinLatency), std::chrono::steady_clock::now(),
              [&] { return ++asked > 1; });
  EXPECT_EQ(asked, 2) << "asked before each switch it would send to";
  EXPECT_EQ(leaf.puts, 1);
  EXPECT_EQ(spine.puts, 0) << "not sent once stopping";
  EXPECT_EQ(pusher.counts().pushed, 1u);
}

}  // namespace
}  // namespace aggswitch::tools
