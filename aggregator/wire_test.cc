#include "aggregator/wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace aggswitch::aggregator {
namespace {

AggFields SampleFields() {
  AggFields f;
  f.opcode = Opcode::kContribution;
  f.flags = flags::kTaskInfo | flags::kRetransmission;
  f.node_id = 513;
  f.job_id = 0xdeadbeef;
  f.seq = 0x01020304;
  f.job_key = 0x1122334455667788ULL;
  f.ack_watermark = 0x01020300;
  f.addr_low = 0x00abc000;
  f.expected = 8;
  f.node_count = 2;
  f.slot_hint = 77;
  f.elem_count = 3;
  f.dtype = DType::kFloat32;
  f.op = ReduceOp::kMax;
  f.scale = -7;
  f.aux = 0;
  f.incarnation = 0xc0ffee01;
  return f;
}

std::vector<uint8_t> Build(const AggFields& f, std::vector<uint16_t> missing = {},
                           std::vector<uint8_t> payload = {}) {
  if (payload.empty()) payload.assign(f.elem_count * ElementSize(f.dtype), 0x5a);
  std::vector<uint8_t> buf(2048);
  const uint32_t n = BuildAggregation(f, missing.data(), static_cast<uint8_t>(missing.size()),
                                      payload.data(), static_cast<uint32_t>(payload.size()),
                                      buf.data(), static_cast<uint32_t>(buf.size()));
  buf.resize(n);
  return buf;
}

TEST(WireTest, HeaderLayoutMatchesTheProtocolDocument) {
  EXPECT_EQ(offsetof(AggHeader, opcode), 3u);
  EXPECT_EQ(offsetof(AggHeader, node_id), 6u);
  EXPECT_EQ(offsetof(AggHeader, job_id), 8u);
  EXPECT_EQ(offsetof(AggHeader, seq), 12u);
  EXPECT_EQ(offsetof(AggHeader, job_key), 16u);
  EXPECT_EQ(offsetof(AggHeader, ack_watermark), 24u);
  EXPECT_EQ(offsetof(AggHeader, addr_low), 28u);
  EXPECT_EQ(offsetof(AggHeader, expected), 32u);
  EXPECT_EQ(offsetof(AggHeader, elem_count), 38u);
  EXPECT_EQ(offsetof(AggHeader, dtype), 40u);
  EXPECT_EQ(offsetof(AggHeader, missing_count), 43u);
  EXPECT_EQ(offsetof(AggHeader, aux), 44u);
  EXPECT_EQ(offsetof(AggHeader, incarnation), 48u);
}

TEST(WireTest, BytesAreBigEndianOnTheWire) {
  const std::vector<uint8_t> b = Build(SampleFields());
  ASSERT_EQ(b.size(), sizeof(AggHeader) + 12u);
  EXPECT_EQ(b[0], 0xA6);
  EXPECT_EQ(b[1], 0x5C);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 1);
  EXPECT_EQ(b[6], 0x02);  // node 513
  EXPECT_EQ(b[7], 0x01);
  EXPECT_EQ(b[8], 0xde);
  EXPECT_EQ(b[11], 0xef);
  EXPECT_EQ(b[16], 0x11);
  EXPECT_EQ(b[23], 0x88);
  EXPECT_EQ(static_cast<int8_t>(b[42]), -7);
  EXPECT_EQ(b[48], 0xc0);  // incarnation 0xc0ffee01
  EXPECT_EQ(b[51], 0x01);
}

TEST(WireTest, RoundTripsEveryField) {
  AggFields f = SampleFields();
  const std::vector<uint16_t> missing = {3, 0x1234, 65535};
  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<uint8_t> b = Build(f, missing, payload);
  AggPacket p;
  ASSERT_EQ(ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &p), WireError::kOk);
  const AggFields g = ReadAggFields(*p.header);
  EXPECT_EQ(g.opcode, f.opcode);
  EXPECT_EQ(g.flags, f.flags);
  EXPECT_EQ(g.node_id, f.node_id);
  EXPECT_EQ(g.job_id, f.job_id);
  EXPECT_EQ(g.seq, f.seq);
  EXPECT_EQ(g.job_key, f.job_key);
  EXPECT_EQ(g.ack_watermark, f.ack_watermark);
  EXPECT_EQ(g.addr_low, f.addr_low);
  EXPECT_EQ(g.expected, f.expected);
  EXPECT_EQ(g.node_count, f.node_count);
  EXPECT_EQ(g.slot_hint, f.slot_hint);
  EXPECT_EQ(g.elem_count, f.elem_count);
  EXPECT_EQ(g.dtype, f.dtype);
  EXPECT_EQ(g.op, f.op);
  EXPECT_EQ(g.scale, f.scale);
  EXPECT_EQ(g.aux, f.aux);
  EXPECT_EQ(g.incarnation, f.incarnation);
  EXPECT_EQ(p.dtype, DType::kFloat32);
  EXPECT_EQ(p.op, ReduceOp::kMax);
  ASSERT_EQ(p.header->missing_count, 3);
  EXPECT_EQ(p.MissingNode(0), 3);
  EXPECT_EQ(p.MissingNode(1), 0x1234);
  EXPECT_EQ(p.MissingNode(2), 65535);
  ASSERT_EQ(p.payload_len, 12u);
  EXPECT_EQ(0, std::memcmp(p.payload, payload.data(), 12));
}

TEST(WireTest, EveryTypeFromOneElementToAFullPacket) {
  for (uint8_t t = 0; t < kNumDTypes; ++t) {
    const DType dtype = static_cast<DType>(t);
    const ReduceOp op = dtype == DType::kBool ? ReduceOp::kOr : ReduceOp::kSum;
    const uint32_t max = (1500 - 20 - 8 - sizeof(AggHeader)) / static_cast<uint32_t>(ElementSize(dtype));
    for (uint32_t n : {1u, 2u, max}) {
      AggFields f = SampleFields();
      f.dtype = dtype;
      f.op = op;
      f.elem_count = static_cast<uint16_t>(n);
      const std::vector<uint8_t> b = Build(f);
      ASSERT_LE(b.size(), 1500u - 28u);
      AggPacket p;
      ASSERT_EQ(ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &p), WireError::kOk)
          << DTypeName(dtype) << " x" << n;
      EXPECT_EQ(p.payload_len, n * ElementSize(dtype));
    }
  }
}

TEST(WireTest, IgnoresTrailingPadding) {
  std::vector<uint8_t> b = Build(SampleFields());
  b.resize(b.size() + 6, 0);
  AggPacket p;
  EXPECT_EQ(ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &p), WireError::kOk);
  EXPECT_EQ(p.payload_len, 12u);
}

TEST(WireTest, RejectsMalformedPackets) {
  const std::vector<uint8_t> good = Build(SampleFields());
  auto parse = [](std::vector<uint8_t> b) {
    AggPacket p;
    return ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &p);
  };
  EXPECT_EQ(parse(std::vector<uint8_t>(good.begin(), good.begin() + sizeof(AggHeader) - 1)), WireError::kTruncated);
  EXPECT_EQ(parse({}), WireError::kTruncated);
  auto with = [&](size_t offset, uint8_t value) {
    std::vector<uint8_t> b = good;
    b[offset] = value;
    return b;
  };
  EXPECT_EQ(parse(with(0, 0x00)), WireError::kBadMagic);
  EXPECT_EQ(parse(with(2, 1)), WireError::kBadVersion);  // the header before incarnations
  EXPECT_EQ(parse(with(2, 3)), WireError::kBadVersion);
  EXPECT_EQ(parse(with(2, 0)), WireError::kBadVersion);
  EXPECT_EQ(parse(with(3, 0)), WireError::kUnknownOpcode);
  EXPECT_EQ(parse(with(3, kMaxOpcode + 1)), WireError::kUnknownOpcode);
  EXPECT_EQ(parse(with(40, kNumDTypes)), WireError::kUnknownDType);
  EXPECT_EQ(parse(with(41, kNumReduceOps)), WireError::kUnknownOp);
  // float32 with "and" is not defined.
  EXPECT_EQ(parse(with(41, static_cast<uint8_t>(ReduceOp::kAnd))), WireError::kBadTypeOp);
  // The count says more elements than the datagram holds.
  EXPECT_EQ(parse(with(39, 4)), WireError::kCountMismatch);
  EXPECT_EQ(parse(with(38, 0xff)), WireError::kCountMismatch);
  // A missing list that does not fit.
  EXPECT_EQ(parse(with(43, 1)), WireError::kCountMismatch);
  // One byte short of the payload.
  EXPECT_EQ(parse(std::vector<uint8_t>(good.begin(), good.end() - 1)), WireError::kCountMismatch);
}

TEST(WireTest, PayloadFreePacketsNeedNoValidTypeOpPair) {
  AggFields f = SampleFields();
  f.opcode = Opcode::kAck;
  f.elem_count = 0;
  f.dtype = DType::kBool;
  f.op = ReduceOp::kSum;
  const std::vector<uint8_t> b = Build(f, {}, {});
  ASSERT_EQ(b.size(), sizeof(AggHeader));
  AggPacket p;
  EXPECT_EQ(ParseAggregation(b.data(), sizeof(AggHeader), &p), WireError::kOk);
  EXPECT_EQ(p.opcode, Opcode::kAck);
}

TEST(WireTest, BuilderRefusesInconsistentLengthsAndSmallBuffers) {
  AggFields f = SampleFields();
  uint8_t payload[12] = {};
  uint8_t buf[100];
  EXPECT_EQ(BuildAggregation(f, nullptr, 0, payload, 11, buf, sizeof(buf)), 0u);
  EXPECT_EQ(BuildAggregation(f, nullptr, 0, payload, 12, buf, sizeof(AggHeader) + 11), 0u);
  EXPECT_EQ(BuildAggregation(f, nullptr, 0, payload, 12, buf, sizeof(AggHeader) + 12),
            sizeof(AggHeader) + 12);
}

TEST(WireTest, SequenceOrderWrapsAround) {
  EXPECT_TRUE(SeqBefore(1, 2));
  EXPECT_FALSE(SeqBefore(2, 1));
  EXPECT_FALSE(SeqBefore(5, 5));
  EXPECT_TRUE(SeqBefore(0xfffffff0u, 3));
  EXPECT_FALSE(SeqBefore(3, 0xfffffff0u));
}

TEST(WireTest, ErrorLabelsAreDistinct) {
  for (size_t i = 0; i < kNumWireErrors; ++i) {
    for (size_t j = i + 1; j < kNumWireErrors; ++j) {
      EXPECT_STRNE(WireErrorLabel(static_cast<WireError>(i)), WireErrorLabel(static_cast<WireError>(j)));
    }
  }
  EXPECT_STREQ(WireErrorLabel(WireError::kCountMismatch), "count_mismatch");
}

}  // namespace
}  // namespace aggswitch::aggregator
