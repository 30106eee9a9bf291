// Tests of MacAddr, Ipv4Addr and Ipv4Prefix: parsing edge cases and printing.
#include "common/net_addr.h"

#include <gtest/gtest.h>

namespace aggswitch::common {
namespace {

TEST(MacAddrTest, ParsesColonAndDashForms) {
  const auto mac = MacAddr::Parse("02:a9:9C:00:ff:01");
  ASSERT_TRUE(mac.has_value());
  EXPECT_EQ(mac->bytes, (std::array<uint8_t, 6>{0x02, 0xa9, 0x9c, 0x00, 0xff, 0x01}));
  EXPECT_EQ(mac->ToString(), "02:a9:9c:00:ff:01");
  const auto dashed = MacAddr::Parse("02-A9-9C-00-FF-01");
  ASSERT_TRUE(dashed.has_value());
  EXPECT_EQ(*dashed, *mac);
}

TEST(MacAddrTest, RejectsMalformedText) {
  for (const char* bad :
       {"", "02:00:00:00:00", "02:00:00:00:00:00:00", "02:00:00:00:00:0", "2:00:00:00:00:001",
        "02:00:00:00:00:0g", "02.00.00.00.00.00", "02:00:00:00:00:00 ", " 02:00:00:00:00:00",
        "0200:00:00:00:00:", "+2:00:00:00:00:00", "02:00:00:00:00:-1"}) {
    EXPECT_FALSE(MacAddr::Parse(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(MacAddrTest, Classification) {
  EXPECT_TRUE(MacAddr::Parse("ff:ff:ff:ff:ff:ff")->IsBroadcast());
  EXPECT_TRUE(MacAddr::Parse("ff:ff:ff:ff:ff:ff")->IsMulticast());
  EXPECT_TRUE(MacAddr::Parse("01:00:5e:00:00:01")->IsMulticast());
  EXPECT_FALSE(MacAddr::Parse("01:00:5e:00:00:01")->IsBroadcast());
  EXPECT_FALSE(MacAddr::Parse("02:00:00:00:00:01")->IsMulticast());
  EXPECT_FALSE(MacAddr::Parse("fe:ff:ff:ff:ff:ff")->IsMulticast());
  EXPECT_TRUE(MacAddr{}.IsZero());
  EXPECT_FALSE(MacAddr::Parse("00:00:00:00:00:01")->IsZero());
  EXPECT_EQ(MacAddr{}.ToString(), "00:00:00:00:00:00");
}

TEST(MacAddrTest, U64RoundTrip) {
  const MacAddr mac = *MacAddr::Parse("02:a9:9c:00:00:01");
  EXPECT_EQ(mac.ToU64(), 0x02a99c000001ull);
  EXPECT_EQ(MacAddr::FromU64(0x02a99c000001ull), mac);
  EXPECT_EQ(MacAddr::FromU64(0xffffffffffffull).ToString(), "ff:ff:ff:ff:ff:ff");
  // Bits above the 48 are dropped.
  EXPECT_EQ(MacAddr::FromU64(0xabcd000000000001ull).ToString(), "00:00:00:00:00:01");
  EXPECT_NE(MacAddr::FromU64(1), MacAddr::FromU64(2));
}

TEST(Ipv4AddrTest, ParsesDottedQuads) {
  EXPECT_EQ(Ipv4Addr::Parse("10.0.10.254")->addr, 0x0a000afeu);
  EXPECT_EQ(Ipv4Addr::Parse("0.0.0.0")->addr, 0u);
  EXPECT_EQ(Ipv4Addr::Parse("255.255.255.255")->addr, 0xffffffffu);
  EXPECT_EQ(Ipv4Addr::Parse("1.2.3.4")->ToString(), "1.2.3.4");
  EXPECT_EQ(Ipv4Addr{0xc0a80001}.ToString(), "192.168.0.1");
  EXPECT_EQ(*Ipv4Addr::Parse("192.168.0.1"), Ipv4Addr{0xc0a80001});
}

TEST(Ipv4AddrTest, RejectsMalformedText) {
  for (const char* bad :
       {"", "1.2.3", "1.2.3.4.5", "1.2.3.", ".1.2.3", "1..2.3", "256.0.0.0", "1.2.3.256",
        "01.2.3.4", "1.2.3.04", "00.0.0.0", "-1.2.3.4", "+1.2.3.4", "1.2.3.4 ", " 1.2.3.4",
        "1.2.3.4/32", "a.b.c.d", "99999999999.0.0.0", "0x1.2.3.4"}) {
    EXPECT_FALSE(Ipv4Addr::Parse(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(Ipv4PrefixTest, LengthDefaultsTo32) {
  const auto prefix = Ipv4Prefix::Parse("10.0.0.1");
  ASSERT_TRUE(prefix.has_value());
  EXPECT_EQ(prefix->length, 32);
  EXPECT_EQ(prefix->ToString(), "10.0.0.1/32");
}

TEST(Ipv4PrefixTest, ParsesLengths0To32) {
  EXPECT_EQ(Ipv4Prefix::Parse("0.0.0.0/0")->length, 0);
  EXPECT_EQ(Ipv4Prefix::Parse("10.0.10.254/24")->length, 24);
  EXPECT_EQ(Ipv4Prefix::Parse("10.0.10.254/24")->ip.addr, 0x0a000afeu);
  EXPECT_EQ(Ipv4Prefix::Parse("10.0.0.1/32")->length, 32);
  // Host bits are kept: the prefix names an address and its subnet.
  EXPECT_EQ(Ipv4Prefix::Parse("10.0.10.254/24")->ToString(), "10.0.10.254/24");
}

TEST(Ipv4PrefixTest, RejectsMalformedText) {
  for (const char* bad :
       {"", "/24", "10.0.0.1/", "10.0.0.1/33", "10.0.0.1/-1", "10.0.0.1/+8", "10.0.0.1/2a",
        "10.0.0.1/24/8", "10.0.0.1 /24", "10.0.0/24", "10.0.0.256/24", "10.0.0.1/99999999999"}) {
    EXPECT_FALSE(Ipv4Prefix::Parse(bad).has_value()) << '"' << bad << '"';
  }
}

TEST(Ipv4EndpointTest, ThePortMayBeLeftOut) {
  EXPECT_EQ(Ipv4Endpoint::ParsePortOptional("10.0.0.9")->ToString(), "10.0.0.9:0");
  EXPECT_EQ(Ipv4Endpoint::ParsePortOptional("10.0.0.9:45000")->port, 45000);
  for (const char* bad : {"", "host", "10.0.0.9:", "10.0.0.9:x", "10.0.0:1"}) {
    EXPECT_FALSE(Ipv4Endpoint::ParsePortOptional(bad).has_value()) << bad;
  }
}

TEST(Ipv4EndpointTest, ParsesAddressAndPort) {
  const auto e = Ipv4Endpoint::Parse("10.0.0.1:47000");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->ip.addr, 0x0a000001u);
  EXPECT_EQ(e->port, 47000);
  EXPECT_EQ(e->ToString(), "10.0.0.1:47000");
  EXPECT_EQ(Ipv4Endpoint::Parse("0.0.0.0:0")->port, 0);
  for (const char* bad : {"10.0.0.1", "10.0.0.1:", ":80", "10.0.0.1:65536", "10.0.0.1:-1",
                          "10.0.0.1:80x", "host:80", "10.0.0.1:80:81"}) {
    EXPECT_FALSE(Ipv4Endpoint::Parse(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace aggswitch::common
