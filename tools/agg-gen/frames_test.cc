// agg-gen's frames read back through the dataplane's and the wire format's
// parsers, and the classification of every kind of frame that can come back.
#include "tools/agg-gen/frames.h"

#include <gtest/gtest.h>

#include "dataplane/net_headers.h"
#include "dataplane/packet.h"
#include "tools/agg-gen/test_switch.h"

namespace aggswitch::tools {
namespace {

using common::be16_t;

using aggregator::Opcode;

GenConfig TestConfig() {
  GenConfig cfg;
  cfg.workers = 3;
  cfg.jobs = 2;
  cfg.job_base = 70;
  cfg.elems = 10;
  cfg.switch_mac = *common::MacAddr::Parse("02:a9:9c:00:00:b2");
  return cfg;
}

struct Parsed {
  dataplane::UdpInfo udp;
  aggregator::AggPacket pkt;
};

common::MacAddr MacAt(const uint8_t* p) {
  common::MacAddr m;
  std::memcpy(m.bytes.data(), p, 6);
  return m;
}

Parsed Parse(const Frame& f) {
  Parsed p;
  dataplane::L2Info l2;
  const auto len = static_cast<uint32_t>(f.size());
  EXPECT_EQ(dataplane::ParseL2(f.data(), len, &l2), dataplane::ParseStatus::kOk);
  EXPECT_EQ(l2.ether_type, dataplane::kEtherTypeIpv4);
  EXPECT_FALSE(l2.has_tag);
  EXPECT_EQ(dataplane::ParseIpv4Udp(f.data(), len, l2.l3_offset, &p.udp), dataplane::UdpParse::kOk);
  EXPECT_EQ(
      aggregator::ParseAggregation(f.data() + p.udp.payload_offset, p.udp.payload_len, &p.pkt),
      aggregator::WireError::kOk);
  return p;
}

TEST(FramesTest, ContributionCarriesEveryFieldAndTheWorkersAddresses) {
  GenConfig cfg = TestConfig();
  cfg.task_info = true;
  const FrameFactory frames(cfg);
  Frame f(frames.contribution_len());
  EXPECT_EQ(f.size(), 42u + sizeof(aggregator::AggHeader) + 40u);
  frames.WriteContribution(1, 2, 77, 60, true, f.data());
  const Parsed p = Parse(f);
  ASSERT_NE(p.pkt.header, nullptr);
  const auto* eth = reinterpret_cast<const dataplane::EtherHdr*>(f.data());
  EXPECT_EQ(MacAt(eth->dst), cfg.switch_mac);
  EXPECT_EQ(MacAt(eth->src), WorkerMac(cfg, 2));
  EXPECT_EQ(p.udp.src_ip, WorkerIp(cfg, 2));
  EXPECT_EQ(p.udp.dst_ip, cfg.switch_ip.addr);
  EXPECT_EQ(p.udp.src_port, 40002);
  EXPECT_EQ(p.udp.dst_port, 47000);
  const aggregator::AggFields h = aggregator::ReadAggFields(*p.pkt.header);
  EXPECT_EQ(h.opcode, Opcode::kContribution);
  EXPECT_EQ(h.flags, aggregator::flags::kRetransmission | aggregator::flags::kTaskInfo);
  EXPECT_EQ(h.node_id, 2);
  EXPECT_EQ(h.job_id, 71u);
  EXPECT_EQ(h.seq, 77u);
  EXPECT_EQ(h.job_key, cfg.key);
  EXPECT_EQ(h.ack_watermark, 60u);
  EXPECT_EQ(h.expected, 3);
  EXPECT_EQ(h.node_count, 1);
  EXPECT_EQ(h.slot_hint, aggregator::kNoSlotHint);
  EXPECT_EQ(h.elem_count, 10);
  EXPECT_EQ(h.dtype, aggregator::DType::kInt32);
  EXPECT_EQ(h.op, aggregator::ReduceOp::kSum);
  ASSERT_EQ(p.pkt.payload_len, 40u);
  int32_t v[10];
  std::memcpy(v, p.pkt.payload, sizeof(v));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(v[i], 3 * (i + 1) + 77) << i;
}

TEST(FramesTest, AckCarriesOnlyTheWatermark) {
  const GenConfig cfg = TestConfig();
  const FrameFactory frames(cfg);
  Frame f(frames.ack_len());
  EXPECT_EQ(f.size(), 42u + sizeof(aggregator::AggHeader));
  frames.WriteAck(0, 1, 1234, f.data());
  const Parsed p = Parse(f);
  ASSERT_NE(p.pkt.header, nullptr);
  EXPECT_EQ(p.pkt.opcode, Opcode::kAck);
  EXPECT_EQ(p.pkt.header->ack_watermark.host(), 1234u);
  EXPECT_EQ(p.pkt.header->node_id.host(), 1);
  EXPECT_EQ(p.pkt.header->job_id.host(), 70u);
  EXPECT_EQ(p.pkt.payload_len, 0u);
  EXPECT_EQ(p.udp.src_port, 40001);
}

TEST(FramesTest, ClassifiesResultsByDestinationPortAndChecksTheirAddresses) {
  const GenConfig cfg = TestConfig();
  const FrameFactory frames(cfg);
  const TestSwitch sw(cfg);
  aggregator::AggFields f;
  f.opcode = Opcode::kResult;
  f.job_id = 70;
  f.seq = 5;
  f.elem_count = 2;
  const Frame payload(8, 0);

  for (uint16_t m = 0; m < 3; ++m) {
    const Frame result = sw.Result(f, payload, m);
    const Reply r = frames.Classify(result.data(), static_cast<uint32_t>(result.size()));
    EXPECT_EQ(r.kind, ReplyKind::kResult);
    EXPECT_EQ(r.worker, m);
    ASSERT_NE(r.pkt.header, nullptr);
    EXPECT_EQ(r.pkt.header->seq.host(), 5u);
  }
  const auto classify = [&frames](const Frame& fr) {
    return frames.Classify(fr.data(), static_cast<uint32_t>(fr.size())).kind;
  };
  Frame wrong_mac = sw.Result(f, payload, 1);
  wrong_mac[5] ^= 0x01;  // worker 1's port, another MAC
  EXPECT_EQ(classify(wrong_mac), ReplyKind::kMisaddressed);
  Frame wrong_ip = sw.Result(f, payload, 1);
  wrong_ip[14 + 19] = 12;  // 10.0.10.12 (worker 2) on worker 1's port; fix the checksum
  dataplane::Ipv4Hdr* ip = reinterpret_cast<dataplane::Ipv4Hdr*>(wrong_ip.data() + 14);
  ip->checksum = 0;
  ip->checksum = dataplane::InternetChecksum(ip, 20);
  EXPECT_EQ(classify(wrong_ip), ReplyKind::kMisaddressed);

  Frame bad_magic = sw.Result(f, payload, 0);
  bad_magic[42] = 0;
  EXPECT_EQ(classify(bad_magic), ReplyKind::kMalformed);
  aggregator::AggFields too_long = f;
  too_long.elem_count = 3;  // announces 12 bytes of payload, carries 8
  Frame cut = sw.Result(too_long, Frame(12, 0), 0);
  cut.resize(cut.size() - 4);
  auto* cut_ip = reinterpret_cast<dataplane::Ipv4Hdr*>(cut.data() + 14);
  auto* cut_udp = reinterpret_cast<dataplane::UdpHdr*>(cut.data() + 34);
  cut_ip->total_length = be16_t::FromHost(static_cast<uint16_t>(cut_ip->total_length.host() - 4));
  cut_ip->checksum = 0;
  cut_ip->checksum = dataplane::InternetChecksum(cut_ip, 20);
  cut_udp->length = be16_t::FromHost(static_cast<uint16_t>(cut_udp->length.host() - 4));
  EXPECT_EQ(classify(cut), ReplyKind::kMalformed);
  // A broken IPv4 header names no worker one can trust.
  Frame bad_ip_checksum = sw.Result(f, payload, 0);
  bad_ip_checksum[14 + 10] ^= 0xff;
  EXPECT_EQ(classify(bad_ip_checksum), ReplyKind::kOther);

  aggregator::AggFields nack = f;
  nack.opcode = Opcode::kNack;
  nack.elem_count = 0;
  nack.aux = static_cast<uint32_t>(aggregator::NackReason::kKeyMismatch);
  EXPECT_EQ(classify(sw.Result(nack, {}, 2)), ReplyKind::kNack);
}

TEST(FramesTest, ClassifiesAReflectedContributionAsAnEcho) {
  const GenConfig cfg = TestConfig();
  const FrameFactory frames(cfg);
  Frame f(frames.contribution_len());
  frames.WriteContribution(0, 1, 9, 0, false, f.data());
  const Reply r = frames.Classify(f.data(), static_cast<uint32_t>(f.size()));
  EXPECT_EQ(r.kind, ReplyKind::kEcho);
  EXPECT_EQ(r.worker, 1);
  // The final ACKs come back from a reflector too: not answers.
  Frame ack(frames.ack_len());
  frames.WriteAck(0, 1, 9, ack.data());
  EXPECT_EQ(frames.Classify(ack.data(), static_cast<uint32_t>(ack.size())).kind, ReplyKind::kOther);
}

TEST(FramesTest, LeavesOtherTrafficAlone) {
  const GenConfig cfg = TestConfig();
  const FrameFactory frames(cfg);
  Frame arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_EQ(frames.Classify(arp.data(), 60).kind, ReplyKind::kOther);
  EXPECT_EQ(frames.Classify(arp.data(), 10).kind, ReplyKind::kOther);  // runt
  // UDP between ports that are not the workers'.
  Frame udp(60, 0);
  dataplane::WriteUdpHeaders(udp.data(), WorkerMac(cfg, 0).bytes.data(),
                             cfg.switch_mac.bytes.data(), 0, cfg.switch_ip.addr, WorkerIp(cfg, 0),
                             53, 53, 0, 18);
  EXPECT_EQ(frames.Classify(udp.data(), 60).kind, ReplyKind::kOther);
}

}  // namespace
}  // namespace aggswitch::tools
