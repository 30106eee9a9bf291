#include "dataplane/packet.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dataplane/test_frames.h"

namespace aggswitch::dataplane {
namespace {

using testframes::Frame;

class PacketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config::Config cfg;
    cfg.ports.resize(2);
    cfg.ports[0].name = "a";
    cfg.ports[0].access_vlan = 10;
    cfg.ports[1].name = "t";
    cfg.ports[1].mode = config::VlanMode::kTrunk;
    cfg.ports[1].trunk_vlans = {10, 20};
    cfg.switch_.mac = kSwitchMac;
    cfg.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.10.254/24"), 0, {}});
    cfg.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.20.254/24"), 20, {}});
    plan_ = ForwardingPlan::Build(cfg);
  }

  const common::MacAddr kSwitchMac = *common::MacAddr::Parse("02:a9:9c:00:00:01");
  const common::MacAddr kHostMac = *common::MacAddr::Parse("02:00:00:00:00:0a");
  std::unique_ptr<ForwardingPlan> plan_;
};

TEST_F(PacketTest, ParsesUntaggedFrame) {
  Frame f = testframes::EthernetFrame(kHostMac, kSwitchMac, 0x0800, 46);
  L2Info l2;
  ASSERT_EQ(ParseL2(f.data(), f.size(), &l2), ParseStatus::kOk);
  EXPECT_FALSE(l2.has_tag);
  EXPECT_EQ(l2.l3_offset, 14u);
  EXPECT_EQ(l2.ether_type.host(), 0x0800);
}

TEST_F(PacketTest, ParsesTaggedFrameAndKeepsInnerEtherType) {
  Frame f = testframes::EthernetFrame(kHostMac, kSwitchMac, 0x0806, 46, /*vlan=*/20, /*pcp=*/5);
  L2Info l2;
  ASSERT_EQ(ParseL2(f.data(), f.size(), &l2), ParseStatus::kOk);
  EXPECT_TRUE(l2.has_tag);
  EXPECT_EQ(l2.vid, 20);
  EXPECT_EQ(l2.l3_offset, 18u);
  EXPECT_EQ(l2.ether_type.host(), 0x0806);
}

TEST_F(PacketTest, RejectsRuntsAndBrokenTags) {
  Frame f = testframes::EthernetFrame(kHostMac, kSwitchMac, 0x0800, 46, 20);
  L2Info l2;
  EXPECT_EQ(ParseL2(f.data(), 0, &l2), ParseStatus::kRunt);
  EXPECT_EQ(ParseL2(f.data(), 13, &l2), ParseStatus::kRunt);
  // 14 bytes reach the TPID but not the rest of the tag.
  EXPECT_EQ(ParseL2(f.data(), 14, &l2), ParseStatus::kBadVlan);
  EXPECT_EQ(ParseL2(f.data(), 17, &l2), ParseStatus::kBadVlan);
  EXPECT_EQ(ParseL2(f.data(), 18, &l2), ParseStatus::kOk);
  Frame reserved = testframes::EthernetFrame(kHostMac, kSwitchMac, 0x0800, 46, 4095);
  EXPECT_EQ(ParseL2(reserved.data(), reserved.size(), &l2), ParseStatus::kBadVlan);
}

TEST_F(PacketTest, PriorityTagIsParsedAsVlanZero) {
  Frame f = testframes::EthernetFrame(kHostMac, kSwitchMac, 0x0800, 46, 0, 3);
  L2Info l2;
  ASSERT_EQ(ParseL2(f.data(), f.size(), &l2), ParseStatus::kOk);
  EXPECT_TRUE(l2.has_tag);
  EXPECT_EQ(l2.vid, 0);
  // On an access port a priority-tagged frame belongs to the access VLAN.
  EXPECT_EQ(plan_->IngressVlan(0, true, 0), 10);
}

TEST_F(PacketTest, IngressVlanFollowsPortMode) {
  EXPECT_EQ(plan_->IngressVlan(0, false, 0), 10);
  EXPECT_EQ(plan_->IngressVlan(0, true, 10), 0) << "tagged frames are refused on access ports";
  EXPECT_EQ(plan_->IngressVlan(1, true, 20), 20);
  EXPECT_EQ(plan_->IngressVlan(1, true, 30), 0) << "VLAN 30 is not in the trunk list";
  EXPECT_EQ(plan_->IngressVlan(1, false, 0), 0) << "trunk without native VLAN refuses untagged";
  EXPECT_FALSE(plan_->EgressTagged(0, 10));
  EXPECT_TRUE(plan_->EgressTagged(1, 10));
  EXPECT_EQ(plan_->FloodMask(10), 0b11u);
  EXPECT_EQ(plan_->FloodMask(20), 0b10u);
  EXPECT_EQ(plan_->FloodMask(30), 0u);
}

TEST_F(PacketTest, ArpRequestForOwnAddressBecomesReply) {
  Frame f = testframes::ArpRequest(kHostMac, "10.0.10.1", "10.0.10.254");
  ASSERT_EQ(HandleArp(f.data(), f.size(), 14, 10, *plan_, false), LocalVerdict::kReplied);
  const auto* eth = reinterpret_cast<const EtherHdr*>(f.data());
  EXPECT_EQ(0, std::memcmp(eth->dst, kHostMac.bytes.data(), 6));
  EXPECT_EQ(0, std::memcmp(eth->src, kSwitchMac.bytes.data(), 6));
  const auto* arp = reinterpret_cast<const ArpHdr*>(f.data() + 14);
  EXPECT_EQ(arp->oper, kArpOpReply);
  EXPECT_EQ(0, std::memcmp(arp->sha, kSwitchMac.bytes.data(), 6));
  EXPECT_EQ(arp->spa.host(), common::Ipv4Addr::Parse("10.0.10.254")->addr);
  EXPECT_EQ(0, std::memcmp(arp->tha, kHostMac.bytes.data(), 6));
  EXPECT_EQ(arp->tpa.host(), common::Ipv4Addr::Parse("10.0.10.1")->addr);
}

TEST_F(PacketTest, ArpForOtherHostsOrVlansIsNotLocal) {
  Frame other = testframes::ArpRequest(kHostMac, "10.0.10.1", "10.0.10.2");
  Frame before = other;
  EXPECT_EQ(HandleArp(other.data(), other.size(), 14, 10, *plan_, false), LocalVerdict::kNotLocal);
  EXPECT_EQ(other, before) << "a frame that is not ours must not be modified";
  // 10.0.20.254 is bound to VLAN 20 only.
  Frame wrong_vlan = testframes::ArpRequest(kHostMac, "10.0.20.1", "10.0.20.254");
  EXPECT_EQ(HandleArp(wrong_vlan.data(), wrong_vlan.size(), 14, 10, *plan_, false),
            LocalVerdict::kNotLocal);
  EXPECT_EQ(HandleArp(wrong_vlan.data(), wrong_vlan.size(), 14, 20, *plan_, false),
            LocalVerdict::kReplied);
}

TEST_F(PacketTest, MalformedArpToSwitchIsCounted) {
  Frame f = testframes::ArpRequest(kHostMac, "10.0.10.1", "10.0.10.254");
  EXPECT_EQ(HandleArp(f.data(), 14 + 27, 14, 10, *plan_, true), LocalVerdict::kMalformed);
  EXPECT_EQ(HandleArp(f.data(), 14 + 27, 14, 10, *plan_, false), LocalVerdict::kNotLocal);
  f[14 + 4] = 8;  // hlen
  EXPECT_EQ(HandleArp(f.data(), f.size(), 14, 10, *plan_, true), LocalVerdict::kMalformed);
}

TEST_F(PacketTest, IcmpEchoRequestBecomesValidReply) {
  Frame f = testframes::IcmpEcho(kHostMac, kSwitchMac, "10.0.10.1", "10.0.10.254", 0x1234, 7, 56);
  const size_t len = f.size();
  ASSERT_EQ(HandleIpv4ToSwitch(f.data(), f.size(), 14, 10, *plan_), LocalVerdict::kReplied);
  ASSERT_EQ(f.size(), len);
  const auto* eth = reinterpret_cast<const EtherHdr*>(f.data());
  EXPECT_EQ(0, std::memcmp(eth->dst, kHostMac.bytes.data(), 6));
  EXPECT_EQ(0, std::memcmp(eth->src, kSwitchMac.bytes.data(), 6));
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(f.data() + 14);
  EXPECT_EQ(ip->src.host(), common::Ipv4Addr::Parse("10.0.10.254")->addr);
  EXPECT_EQ(ip->dst.host(), common::Ipv4Addr::Parse("10.0.10.1")->addr);
  EXPECT_EQ(InternetChecksum(ip, 20), 0) << "IPv4 header checksum must verify";
  const auto* icmp = reinterpret_cast<const IcmpHdr*>(f.data() + 34);
  EXPECT_EQ(icmp->type, kIcmpEchoReply);
  EXPECT_EQ(icmp->id.host(), 0x1234);
  EXPECT_EQ(icmp->seq.host(), 7);
  EXPECT_EQ(InternetChecksum(icmp, 8 + 56), 0) << "ICMP checksum must verify";
}

TEST_F(PacketTest, IcmpChecksOrderAndVerdicts) {
  auto verdict = [&](Frame f, size_t len) {
    return HandleIpv4ToSwitch(f.data(), static_cast<uint32_t>(len), 14, 10, *plan_);
  };
  Frame ok = testframes::IcmpEcho(kHostMac, kSwitchMac, "10.0.10.1", "10.0.10.254", 1, 1, 8);
  EXPECT_EQ(verdict(ok, 14 + 19), LocalVerdict::kMalformed) << "truncated IPv4 header";
  Frame bad_csum = ok;
  bad_csum[14 + 10] ^= 0xff;
  EXPECT_EQ(verdict(bad_csum, bad_csum.size()), LocalVerdict::kMalformed);
  Frame bad_version = ok;
  bad_version[14] = 0x65;
  EXPECT_EQ(verdict(bad_version, bad_version.size()), LocalVerdict::kMalformed);
  Frame long_total = ok;
  EXPECT_EQ(verdict(long_total, long_total.size() - 1), LocalVerdict::kMalformed)
      << "IPv4 total length beyond the frame";
  Frame bad_icmp = ok;
  bad_icmp[14 + 20 + 2] ^= 0xff;
  EXPECT_EQ(verdict(bad_icmp, bad_icmp.size()), LocalVerdict::kMalformed);
  Frame not_ours = testframes::IcmpEcho(kHostMac, kSwitchMac, "10.0.10.1", "10.0.10.9", 1, 1, 8);
  EXPECT_EQ(verdict(not_ours, not_ours.size()), LocalVerdict::kUnhandled);
  Frame udp = ok;
  udp[14 + 9] = kIpProtoUdp;
  udp[14 + 10] = udp[14 + 11] = 0;
  const uint16_t csum = InternetChecksum(udp.data() + 14, 20);
  std::memcpy(udp.data() + 14 + 10, &csum, 2);
  EXPECT_EQ(verdict(udp, udp.size()), LocalVerdict::kUnhandled);
}

TEST(UdpTest, WrittenHeadersParseBack) {
  const uint8_t dst[6] = {2, 0, 0, 0, 0, 0xa};
  const uint8_t src[6] = {2, 0xa9, 0x9c, 0, 0, 1};
  for (uint16_t vlan : {uint16_t{0}, uint16_t{20}}) {
    std::vector<uint8_t> f(200, 0xee);
    const uint32_t hdr = WriteUdpHeaders(f.data(), dst, src, vlan, 0x0a000afe, 0x0a000a01, 47000,
                                         40001, 7, 100);
    EXPECT_EQ(hdr, vlan ? 46u : 42u);
    f.resize(hdr + 100);
    L2Info l2;
    ASSERT_EQ(ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2), ParseStatus::kOk);
    EXPECT_EQ(l2.has_tag, vlan != 0);
    EXPECT_EQ(l2.vid, vlan);
    EXPECT_EQ(l2.ether_type, kEtherTypeIpv4);
    UdpInfo u;
    ASSERT_EQ(ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &u), UdpParse::kOk);
    EXPECT_EQ(u.src_ip, 0x0a000afeu);
    EXPECT_EQ(u.dst_ip, 0x0a000a01u);
    EXPECT_EQ(u.src_port, 47000);
    EXPECT_EQ(u.dst_port, 40001);
    EXPECT_EQ(u.payload_offset, hdr);
    EXPECT_EQ(u.payload_len, 100u);
  }
}

TEST(UdpTest, WrittenIpv4ChecksumVerifiesForCarryHeavyFields) {
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  for (const uint32_t src : {0u, 0x0a000afeu, 0xffffffffu, 0xfffe0001u}) {
    for (const uint32_t dst : {0u, 0xc0a80101u, 0xffffffffu}) {
      for (const uint16_t id : {uint16_t{0}, uint16_t{0x1234}, uint16_t{0xffff}}) {
        for (const uint32_t len : {0u, 1u, 1472u}) {
          std::vector<uint8_t> f(64, 0);
          WriteUdpHeaders(f.data(), mac, mac, 0, src, dst, 1, 2, id, len);
          EXPECT_EQ(InternetChecksum(f.data() + 14, 20), 0)
              << std::hex << src << " " << dst << " " << id << " " << len;
        }
      }
    }
  }
}

TEST(UdpTest, RejectsWhatIsNotAWellFormedUnfragmentedDatagram) {
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  std::vector<uint8_t> good(42 + 16);
  WriteUdpHeaders(good.data(), mac, mac, 0, 1, 2, 3, 4, 5, 16);
  auto parse = [](std::vector<uint8_t> f) {
    UdpInfo u;
    return ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), 14, &u);
  };
  EXPECT_EQ(parse(good), UdpParse::kOk);
  EXPECT_EQ(parse(std::vector<uint8_t>(good.begin(), good.begin() + 33)), UdpParse::kMalformed);
  EXPECT_EQ(parse(std::vector<uint8_t>(good.begin(), good.end() - 1)), UdpParse::kMalformed)
      << "IPv4 total length beyond the frame";
  auto with = [&](size_t at, uint8_t v, bool fix_checksum) {
    std::vector<uint8_t> f = good;
    f[at] = v;
    if (fix_checksum) {
      f[24] = f[25] = 0;
      const uint16_t c = InternetChecksum(f.data() + 14, 20);
      std::memcpy(f.data() + 24, &c, 2);
    }
    return f;
  };
  EXPECT_EQ(parse(with(23, kIpProtoIcmp, true)), UdpParse::kNotUdp);
  EXPECT_EQ(parse(with(26, 0x99, false)), UdpParse::kMalformed) << "header checksum";
  EXPECT_EQ(parse(with(14, 0x65, true)), UdpParse::kMalformed) << "version 6";
  EXPECT_EQ(parse(with(20, 0x20, true)), UdpParse::kFragment) << "more fragments";
  EXPECT_EQ(parse(with(21, 0x01, true)), UdpParse::kFragment) << "fragment offset";
  EXPECT_EQ(parse(with(39, 0xff, false)), UdpParse::kMalformed) << "UDP length beyond IPv4";
  EXPECT_EQ(parse(with(39, 7, false)), UdpParse::kMalformed) << "UDP length below its header";
}

TEST(ChecksumTest, MatchesKnownValue) {
  // RFC 1071 example words 0x0001 0xf203 0xf4f5 0xf6f7 sum to 0xddf2; checksum 0x220d.
  const uint8_t data[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  const uint16_t c = InternetChecksum(data, sizeof(data));
  const auto* bytes = reinterpret_cast<const uint8_t*>(&c);
  EXPECT_EQ(bytes[0], 0x22);
  EXPECT_EQ(bytes[1], 0x0d);
}

TEST(ChecksumTest, AgreesWithWordByWordSumForEveryLengthAndAlignment) {
  // The RFC 1071 definition, one big-endian 16-bit word at a time.
  const auto reference = [](const uint8_t* p, uint32_t len) {
    uint32_t sum = 0;
    for (uint32_t i = 0; i < len; i += 2) {
      sum += static_cast<uint32_t>(p[i] << 8 | (i + 1 < len ? p[i + 1] : 0));
    }
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
  };
  std::vector<uint8_t> data(160);
  uint32_t x = 12345;
  for (int round = 0; round < 8; ++round) {
    for (uint8_t& b : data) {
      x = x * 1103515245 + 12345;
      // Mostly 0xff bytes in some rounds, to force the carries.
      b = round % 2 ? 0xff ^ static_cast<uint8_t>((x >> 16) & 3) : static_cast<uint8_t>(x >> 16);
    }
    for (uint32_t offset = 0; offset < 4; ++offset) {
      for (uint32_t len = 0; len + offset <= data.size(); ++len) {
        const uint16_t c = InternetChecksum(data.data() + offset, len);
        const auto* bytes = reinterpret_cast<const uint8_t*>(&c);
        ASSERT_EQ(bytes[0] << 8 | bytes[1], reference(data.data() + offset, len))
            << "round " << round << " offset " << offset << " length " << len;
      }
    }
  }
}

}  // namespace
}  // namespace aggswitch::dataplane
