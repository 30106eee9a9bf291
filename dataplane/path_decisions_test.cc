// The path decision table: longest prefix wins, a miss is kNone, and
// Build refuses what would make a lookup ambiguous.
#include "dataplane/path_decisions.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace aggswitch::dataplane {
namespace {

PathDecision D(const std::string& prefix, uint16_t port) {
  return {*common::Ipv4Prefix::Parse(prefix), port};
}
uint32_t Ip(const std::string& text) { return common::Ipv4Addr::Parse(text)->addr; }

TEST(PathDecisions, TheLongestPrefixHoldingTheDestinationDecides) {
  auto table = PathDecisions::Build(std::vector<PathDecision>{
      D("10.0.0.0/8", 1), D("10.1.0.0/16", 2), D("10.1.2.3/32", 3), D("0.0.0.0/0", 4)});
  ASSERT_TRUE(table.ok()) << table.status().message();
  const PathDecisions& t = **table;
  EXPECT_EQ(t.Lookup(Ip("10.1.2.3")), 3);
  EXPECT_EQ(t.Lookup(Ip("10.1.2.4")), 2);
  EXPECT_EQ(t.Lookup(Ip("10.2.0.1")), 1);
  EXPECT_EQ(t.Lookup(Ip("192.168.0.1")), 4);
  EXPECT_EQ(t.entries().size(), 4u);
}

TEST(PathDecisions, ManyHostsEachFindTheirOwn) {
  std::vector<PathDecision> hosts;
  for (uint32_t i = 0; i < PathDecisions::kMaxDecisions; ++i) {
    hosts.push_back({{{0x0a000000u + i * 7}, 32}, static_cast<uint16_t>(i % 64)});
  }
  auto table = PathDecisions::Build(hosts);
  ASSERT_TRUE(table.ok());
  for (uint32_t i = 0; i < PathDecisions::kMaxDecisions; ++i) {
    ASSERT_EQ((*table)->Lookup(0x0a000000u + i * 7), i % 64) << i;
    ASSERT_EQ((*table)->Lookup(0x0a000000u + i * 7 + 1), PathDecisions::kNone) << i;
  }
}

TEST(PathDecisions, AnEmptyTableDecidesNothing) {
  auto table = PathDecisions::Build({});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->Lookup(Ip("10.0.0.1")), PathDecisions::kNone);
}

TEST(PathDecisions, BuildRefusesAmbiguousTables) {
  auto twice = PathDecisions::Build(std::vector<PathDecision>{D("10.0.0.1/32", 1), D("10.0.0.1/32", 2)});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "decisions[1].dst: expected each destination once, got 10.0.0.1/32 again (also "
            "decisions[0])");
  auto host_bits = PathDecisions::Build(std::vector<PathDecision>{{{{Ip("10.0.0.1")}, 24}, 1}});
  ASSERT_FALSE(host_bits.ok());
  EXPECT_NE(host_bits.status().message().find("decisions[0].dst: expected a prefix without host bits"),
            std::string::npos);
  std::vector<PathDecision> many(PathDecisions::kMaxDecisions + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = {{{static_cast<uint32_t>(i)}, 32}, 1};
  EXPECT_FALSE(PathDecisions::Build(many).ok());
}

}  // namespace
}  // namespace aggswitch::dataplane
