#include "telemetry/int_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace aggswitch::telemetry {
namespace {

HopMetadata SampleHop() {
  HopMetadata h;
  h.node_id = 0x0a0b0c0d;
  h.ingress_port = 3;
  h.egress_port = 7;
  h.hop_latency_ns = 12345;
  h.queue_id = 1;
  h.queue_occupancy = 0x123456;
  h.tx_utilization = 250000;
  return h;
}

TEST(IntWire, HopMetadataLengthFollowsTheInstructionSet) {
  EXPECT_EQ(HopWords(instr::kLatencySet), 4);
  EXPECT_EQ(HopWords(instr::kBandwidthSet), 3);
  EXPECT_EQ(HopWords(instr::kBothSets), 5);
  // Timestamps and level 2 ports are 8 bytes each.
  EXPECT_EQ(HopWords(instr::kNodeId | 0x0800 | 0x0400 | 0x0200), 7);
}

// The layout of the INT 2.1 specification's INT-MD over UDP: shim (type 1,
// NPT 1, length in words without the shim, original port), the 12-byte
// INT-MD header (version 2, Hop ML, remaining hop count, instructions,
// domain), then the stack.
TEST(IntWire, FirstHopHeadersHaveTheSpecificationsLayout) {
  uint8_t b[kInsertedBytes];
  WriteIntHeaders(instr::kLatencySet, 47000, 8, 0x01020304, 0x0a0b0c0d, b);
  const std::vector<uint8_t> want = {
      0x14, 5, 0xb7, 0x98,                // type 1 | NPT 1, 5 words, port 47000
      0x20, 0, 4, 8,                      // version 2, Hop ML 4, 8 hops
      0xf0, 0x00, 0x41, 0x47,             // node id, ports, latency, queue; domain
      0x80, 0x00, 0x00, 0x08,             // path id instruction; the hop budget
      0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d};  // path id
  EXPECT_EQ(std::vector<uint8_t>(b, b + sizeof(b)), want);
  IntView v;
  ASSERT_EQ(ParseInt(b, sizeof(b), &v), IntError::kNone);
  EXPECT_EQ(v.shim->original_port.host(), 47000);
  EXPECT_EQ(v.md->remaining, 8);
  EXPECT_EQ(v.hop_bytes, 0u);
  EXPECT_EQ(v.source_node, 0x01020304u);
  EXPECT_EQ(v.path_seq, 0x0a0b0c0du);
  EXPECT_EQ(v.payload_offset, kInsertedBytes);
}

TEST(IntWire, HopMetadataRoundTripsAndUnrecordedBitsReadAsUnavailable) {
  const HopMetadata hop = SampleHop();
  uint8_t b[64];
  ASSERT_EQ(WriteHopMetadata(instr::kBothSets, hop, b), 20u);
  const HopMetadata back = ReadHopMetadata(instr::kBothSets, b);
  EXPECT_EQ(back.node_id, hop.node_id);
  EXPECT_EQ(back.ingress_port, 3);
  EXPECT_EQ(back.egress_port, 7);
  EXPECT_EQ(back.hop_latency_ns, 12345u);
  EXPECT_EQ(back.queue_id, 1);
  EXPECT_EQ(back.queue_occupancy, 0x123456u);
  EXPECT_EQ(back.tx_utilization, 250000u);
  // Latency only: no utilisation recorded.
  ASSERT_EQ(WriteHopMetadata(instr::kLatencySet, hop, b), 16u);
  EXPECT_EQ(ReadHopMetadata(instr::kLatencySet, b).tx_utilization, 0xFFFFFFFFu);
  // An instruction this switch does not record (egress timestamp, 8 bytes)
  // gets the all-ones value, and the words after it stay in place.
  const uint16_t odd = instr::kNodeId | 0x0400 | instr::kTxUtil;
  ASSERT_EQ(WriteHopMetadata(odd, hop, b), 16u);
  const std::vector<uint8_t> ones(8, 0xFF);
  EXPECT_EQ(std::vector<uint8_t>(b + 4, b + 12), ones);
  EXPECT_EQ(ReadHopMetadata(odd, b).tx_utilization, 250000u);
}

// A datagram with one hop's metadata pushed and the original payload after it.
TEST(IntWire, ParseFindsTheHopMetadataThePathIdAndThePayload) {
  std::vector<uint8_t> d(kInsertedBytes);
  WriteIntHeaders(instr::kBandwidthSet, 9000, 4, 5, 6, d.data());
  std::vector<uint8_t> hop(HopWords(instr::kBandwidthSet) * 4);
  WriteHopMetadata(instr::kBandwidthSet, SampleHop(), hop.data());
  const size_t at = sizeof(IntShim) + sizeof(IntMdHeader);
  d.insert(d.begin() + static_cast<long>(at), hop.begin(), hop.end());
  d[1] = static_cast<uint8_t>(d[1] + hop.size() / 4);
  const std::vector<uint8_t> payload = {'h', 'e', 'l', 'l', 'o'};
  d.insert(d.end(), payload.begin(), payload.end());
  IntView v;
  ASSERT_EQ(ParseInt(d.data(), d.size(), &v), IntError::kNone);
  EXPECT_EQ(v.hop_bytes, 12u);
  EXPECT_EQ(ReadHopMetadata(instr::kBandwidthSet, v.stack).tx_utilization, 250000u);
  EXPECT_EQ(v.source_node, 5u);
  EXPECT_EQ(v.path_seq, 6u);
  EXPECT_EQ(std::vector<uint8_t>(d.begin() + static_cast<long>(v.payload_offset), d.end()), payload);
}

TEST(IntWire, MalformedIntHeadersAreRefusedByReason) {
  uint8_t good[kInsertedBytes];
  WriteIntHeaders(instr::kLatencySet, 1, 8, 1, 1, good);
  IntView v;
  EXPECT_EQ(ParseInt(good, 10, &v), IntError::kTruncated);
  EXPECT_EQ(ParseInt(good, kInsertedBytes - 1, &v), IntError::kTruncated);
  const auto with = [&](size_t i, uint8_t value) {
    std::vector<uint8_t> b(good, good + sizeof(good));
    b.resize(b.size() + 4);  // a payload after the headers
    b[i] = value;
    return ParseInt(b.data(), b.size(), &v);
  };
  EXPECT_EQ(with(0, 0x24), IntError::kBadType) << "INT type 2 (destination)";
  EXPECT_EQ(with(0, 0x18), IntError::kBadType) << "NPT 2 (an L4 header follows)";
  EXPECT_EQ(with(4, 0x10), IntError::kBadVersion);
  EXPECT_EQ(with(1, 2), IntError::kBadLength) << "shorter than the INT-MD header";
  EXPECT_EQ(with(6, 0), IntError::kBadLength) << "Hop ML 0";
  EXPECT_EQ(with(1, 6), IntError::kBadLength) << "the stack is not whole hops plus the path id";
  EXPECT_EQ(with(10, 0), IntError::kForeignDomain);
  EXPECT_EQ(with(12, 0), IntError::kForeignDomain) << "no path id";
  EXPECT_STREQ(IntErrorName(IntError::kForeignDomain), "foreign_domain");
}

HopReport SampleReport(const uint8_t* inner) {
  HopReport r;
  r.node_id = 0x0a0b0c0d;
  r.hw_id = 2;
  r.sequence = 0x2abcde;
  r.instructions = instr::kBothSets;
  r.hop = SampleHop();
  r.source_node = 11;
  r.path_seq = 12;
  r.hop_index = 2;
  r.inner = inner;
  r.has_inner = true;
  return r;
}

// Telemetry Report v2.0: the group header (version 2, hw_id, 22-bit
// sequence, node id), then one individual report of type INT with an IPv4
// inner packet, whose RepMdBits leave out the node id (it is in the group
// header), and this domain's metadata (path id, hop index) after the
// baseline metadata.
TEST(IntWire, ReportHasTheSpecificationsLayout) {
  uint8_t inner[kReportInnerBytes];
  for (size_t i = 0; i < sizeof(inner); ++i) inner[i] = static_cast<uint8_t>(i);
  const HopReport r = SampleReport(inner);
  std::vector<uint8_t> b(ReportBytes(r.instructions, true));
  ASSERT_EQ(BuildReport(r, b.data(), b.size()), b.size());
  ASSERT_EQ(b.size(), 8u + 4 + 8 + 16 + 12 + 28);
  const std::vector<uint8_t> head = {
      0x20, 0xaa, 0xbc, 0xde,  // version 2, hw_id 2 (2 bits here), sequence 0x2abcde
      0x0a, 0x0b, 0x0c, 0x0d,         // node id
      0x14, 16, 7, 0x30,              // INT, IPv4 inner; 16 words; 7 of metadata; F, I
      0x71, 0x00, 0x41, 0x47,         // ports, latency, queue, utilisation; domain
      0xc0, 0x00, 0x00, 0x00};        // path id and hop index; status
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.begin() + 20), head);
  EXPECT_EQ(std::vector<uint8_t>(b.end() - 28, b.end()), std::vector<uint8_t>(inner, inner + 28));

  HopReport back;
  ASSERT_EQ(ParseReport(b.data(), b.size(), &back), ReportError::kNone);
  EXPECT_EQ(back.node_id, r.node_id);
  EXPECT_EQ(back.hw_id, 2);
  EXPECT_EQ(back.sequence, 0x2abcdeu);
  EXPECT_FALSE(back.last_hop);
  EXPECT_EQ(back.instructions, instr::kBothSets & ~instr::kNodeId);
  EXPECT_EQ(back.hop.node_id, r.node_id);
  EXPECT_EQ(back.hop.ingress_port, 3);
  EXPECT_EQ(back.hop.egress_port, 7);
  EXPECT_EQ(back.hop.hop_latency_ns, 12345u);
  EXPECT_EQ(back.hop.queue_occupancy, 0x123456u);
  EXPECT_EQ(back.hop.tx_utilization, 250000u);
  EXPECT_EQ(back.source_node, 11u);
  EXPECT_EQ(back.path_seq, 12u);
  EXPECT_EQ(back.hop_index, 2u);
  ASSERT_TRUE(back.has_inner);
  EXPECT_EQ(std::memcmp(back.inner, inner, kReportInnerBytes), 0);
}

TEST(IntWire, TheLastHopsReportIsTheEndOfPathNotice) {
  HopReport r = SampleReport(nullptr);
  r.has_inner = false;
  r.last_hop = true;
  r.instructions = instr::kLatencySet;
  std::vector<uint8_t> b(ReportBytes(r.instructions, false));
  ASSERT_EQ(BuildReport(r, b.data(), b.size()), b.size());
  EXPECT_EQ(b[8], 0x10) << "INT, no inner packet";
  EXPECT_EQ(b[11], 0x20) << "F without I";
  HopReport back;
  ASSERT_EQ(ParseReport(b.data(), b.size(), &back), ReportError::kNone);
  EXPECT_TRUE(back.last_hop);
  EXPECT_FALSE(back.has_inner);
  EXPECT_EQ(back.hop.tx_utilization, 0xFFFFFFFFu) << "not asked for";
  EXPECT_EQ(BuildReport(r, b.data(), b.size() - 1), 0u) << "no room";
}

TEST(IntWire, MalformedReportsAreRefusedByReason) {
  uint8_t inner[kReportInnerBytes] = {};
  const HopReport r = SampleReport(inner);
  std::vector<uint8_t> good(ReportBytes(r.instructions, true));
  ASSERT_EQ(BuildReport(r, good.data(), good.size()), good.size());
  HopReport out;
  for (size_t n : {size_t{0}, size_t{11}, good.size() - 1}) {
    EXPECT_EQ(ParseReport(good.data(), n, &out), ReportError::kTruncated) << n;
  }
  const auto with = [&](size_t i, uint8_t value) {
    std::vector<uint8_t> b = good;
    b[i] = value;
    return ParseReport(b.data(), b.size(), &out);
  };
  EXPECT_EQ(with(0, 0x10), ReportError::kBadVersion);
  EXPECT_EQ(with(8, 0x04), ReportError::kNotInt) << "inner only";
  EXPECT_EQ(with(10, 6), ReportError::kBadLength) << "metadata length off by one";
  EXPECT_EQ(with(12, 0x79), ReportError::kBadLength) << "a metadata bit more than the length";
  EXPECT_EQ(with(14, 0), ReportError::kNoPathId) << "another domain";
  EXPECT_EQ(with(16, 0x80), ReportError::kNoPathId) << "no hop index";
  EXPECT_EQ(with(16, 0xe0), ReportError::kBadLength) << "a domain bit of unknown length";
  EXPECT_EQ(with(9, 200), ReportError::kTruncated) << "report length past the datagram";
  EXPECT_EQ(with(8, 0x15), ReportError::kBadLength) << "IPv6 inner type";
  EXPECT_STREQ(ReportErrorName(ReportError::kNoPathId), "no_path_id");
}

}  // namespace
}  // namespace aggswitch::telemetry
