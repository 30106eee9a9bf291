#include "client/internal/neighbor.h"

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

common::Ipv4Addr Ip(const char* text) {
  return *common::Ipv4Addr::Parse(text);
}

// As /proc/net/route prints them on a little-endian host.
constexpr char kRoutes[] =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"      // default via 10.0.0.1
    "eth0\t0000000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"      // 10.0.0.0/24
    "eth1\t000A000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"        // 10.0.10.0/24
    "eth2\t000A000A\t00000000\t0001\t0\t0\t50\t00FFFFFF\t0\t0\t0\n"       // same, lower metric
    "eth3\t0014000A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";       // 10.0.20.0/24, down

TEST(LookUpRouteTest, TheMostSpecificRouteWinsAndOnLinkDestinationsAreTheirOwnNextHop) {
  auto hop = LookUpRoute(kRoutes, Ip("10.0.0.7"));
  ASSERT_TRUE(hop.ok()) << hop.status().ToString();
  EXPECT_EQ(hop->interface, "eth0");
  EXPECT_EQ(hop->via.ToString(), "10.0.0.7");
}

TEST(LookUpRouteTest, AGatewayRouteGivesTheGateway) {
  auto hop = LookUpRoute(kRoutes, Ip("192.168.1.1"));
  ASSERT_TRUE(hop.ok());
  EXPECT_EQ(hop->interface, "eth0");
  EXPECT_EQ(hop->via.ToString(), "10.0.0.1");
}

TEST(LookUpRouteTest, AmongEquallySpecificRoutesTheLowestMetricWins) {
  auto hop = LookUpRoute(kRoutes, Ip("10.0.10.254"));
  ASSERT_TRUE(hop.ok());
  EXPECT_EQ(hop->interface, "eth1");
}

TEST(LookUpRouteTest, ARouteThatIsDownIsSkipped) {
  auto hop = LookUpRoute(kRoutes, Ip("10.0.20.5"));
  ASSERT_TRUE(hop.ok());
  EXPECT_EQ(hop->interface, "eth0") << "the default route, not the down eth3 one";
  EXPECT_EQ(hop->via.ToString(), "10.0.0.1");
}

TEST(LookUpRouteTest, NoMatchingRouteIsNotFound) {
  auto hop = LookUpRoute(std::string(kRoutes).substr(0, std::string(kRoutes).find("eth0\t0000000A")),
                         Ip("10.0.0.7"));
  ASSERT_TRUE(hop.ok()) << "the default route matches everything";
  EXPECT_EQ(LookUpRoute("Iface\tDestination\n", Ip("10.0.0.7")).status().code(),
            common::StatusCode::kNotFound);
  EXPECT_EQ(LookUpRoute("Iface\nbad line\neth0 zz 00000000 1 0 0 0 00000000\n", Ip("10.0.0.7"))
                .status()
                .code(),
            common::StatusCode::kNotFound)
      << "unparseable lines are skipped";
}

constexpr char kArp[] =
    "IP address       HW type     Flags       HW address            Mask     Device\n"
    "10.0.10.254      0x1         0x2         02:00:00:00:00:fe     *        eth1\n"
    "10.0.10.253      0x1         0x0         00:00:00:00:00:00     *        eth1\n"
    "10.0.0.1         0x1         0x2         02:00:00:00:00:01     *        eth0\n";

TEST(LookUpNeighborTest, OnlyCompleteEntriesOnTheInterfaceCount) {
  auto mac = LookUpNeighbor(kArp, Ip("10.0.10.254"), "eth1");
  ASSERT_TRUE(mac.has_value());
  EXPECT_EQ(mac->ToString(), "02:00:00:00:00:fe");
  EXPECT_FALSE(LookUpNeighbor(kArp, Ip("10.0.10.253"), "eth1").has_value()) << "incomplete";
  EXPECT_FALSE(LookUpNeighbor(kArp, Ip("10.0.10.254"), "eth0").has_value()) << "other device";
  EXPECT_FALSE(LookUpNeighbor(kArp, Ip("10.9.9.9"), "eth1").has_value());
  EXPECT_FALSE(LookUpNeighbor("", Ip("10.0.10.254"), "eth1").has_value());
}

}  // namespace
}  // namespace aggswitch::client::internal
