// TxBuffers on net_ring ports: frames leave in one burst per port when
// flushed, a full buffer flushes itself, a full TX ring is counted as
// tx_full on the egress port, drops are counted on the port they are charged
// to (none for the switch's own frames), and a TX fault injector's held
// frames go out on Release(), and a chained frame for a port that sends
// single buffers only is copied flat (or dropped, counted, when it cannot be).
#include "dataplane/tx_buffers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dataplane/stage_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::StageTest;

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new fixtures::EalEnvironment("tx_buffers_test"));

testframes::Frame Frame(uint8_t tag) {
  testframes::Frame f = testframes::EthernetFrame(fixtures::kH0, fixtures::kH1, 0x0800, 46);
  f[20] = tag;
  return f;
}

class TxBuffersTest : public StageTest {
 protected:
  // A result as Answers builds it: `copies` header buffers chained to one
  // payload buffer they share.
  static std::vector<rte_mbuf*> SharedPayloadFrames(int copies, uint16_t payload_len) {
    rte_mbuf* payload = rte_pktmbuf_alloc(Pool());
    auto* bytes = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(payload, payload_len));
    for (uint16_t i = 0; i < payload_len; ++i) bytes[i] = static_cast<uint8_t>(i * 7);
    std::vector<rte_mbuf*> out;
    for (int c = 0; c < copies; ++c) {
      rte_mbuf* hdr = rte_pktmbuf_alloc(Pool());
      auto* h = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(hdr, 14));
      std::memset(h, 0xa0 + c, 14);
      hdr->next = payload;
      hdr->nb_segs = 2;
      hdr->pkt_len = 14u + payload_len;
      out.push_back(hdr);
    }
    rte_mbuf_refcnt_update(payload, static_cast<int16_t>(copies - 1));
    return out;
  }
};

TEST_F(TxBuffersTest, FramesLeaveOnFlushInOrderAndAreCounted) {
  const unsigned in_use = InUse();
  for (uint8_t i = 0; i < 5; ++i) tx().Enqueue(1, Mbuf(Frame(i)));
  tx().Enqueue(3, Mbuf(Frame(9)));
  EXPECT_TRUE(tx().pending());
  EXPECT_TRUE(Sent().empty()) << "nothing leaves before the flush";
  tx().Flush();
  EXPECT_FALSE(tx().pending());
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 5u);
  for (uint8_t i = 0; i < 5; ++i) EXPECT_EQ(sent[1][i][20], i);
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(stats().ports[1].tx_packets.Get(), 5u);
  EXPECT_EQ(stats().ports[1].tx_bytes.Get(), 5u * 60);
  EXPECT_EQ(stats().ports[3].tx_packets.Get(), 1u);
  EXPECT_EQ(InUse(), in_use);
}

TEST_F(TxBuffersTest, AFullBufferFlushesBeforeTakingMore) {
  for (uint16_t i = 0; i < kBurstSize + 3; ++i) tx().Enqueue(0, Mbuf(Frame(static_cast<uint8_t>(i))));
  EXPECT_EQ(Sent()[0].size(), kBurstSize) << "the first burst went when the 33rd frame came";
  tx().Flush();
  EXPECT_EQ(Sent()[0].size(), 3u);
}

TEST_F(TxBuffersTest, AFullTxRingIsCountedOnTheEgressPort) {
  Build("", /*tx_ring_size=*/8);
  const unsigned in_use = InUse();
  for (uint8_t i = 0; i < 12; ++i) tx().Enqueue(2, Mbuf(Frame(i)));
  tx().Flush();
  EXPECT_EQ(Sent()[2].size(), 7u);  // a ring of 8 holds 7
  EXPECT_EQ(Drops(2, DropReason::kTxFull), 5u);
  EXPECT_EQ(stats().ports[2].tx_packets.Get(), 7u);
  EXPECT_EQ(InUse(), in_use) << "the frames the ring refused are freed";
}

TEST_F(TxBuffersTest, DropsAreChargedToTheirPortAndOwnFramesToNone) {
  const unsigned in_use = InUse();
  tx().Drop(1, DropReason::kHairpin, Mbuf(Frame(1)));
  tx().Drop(kOwnFrame, DropReason::kAggNoTan, Mbuf(Frame(2)));
  tx().CountDrop(3, DropReason::kNoMbuf);
  EXPECT_EQ(Drops(1, DropReason::kHairpin), 1u);
  EXPECT_EQ(Drops(3, DropReason::kNoMbuf), 1u);
  for (int p = 0; p < kPorts; ++p) EXPECT_EQ(Drops(p, DropReason::kAggNoTan), 0u) << p;
  EXPECT_EQ(InUse(), in_use);
  EXPECT_TRUE(Sent().empty());
}

TEST_F(TxBuffersTest, AChainedFrameForASingleBufferPortIsCopiedFlat) {
  Build("", 256, /*linear_ports=*/uint64_t{1} << 1);
  const unsigned in_use = InUse();
  std::vector<rte_mbuf*> frames = SharedPayloadFrames(3, 1400);
  tx().Enqueue(1, frames[0]);
  tx().Enqueue(1, frames[1]);
  tx().Enqueue(3, frames[2]);  // a port that sends chains
  tx().Flush();
  std::map<int, std::vector<uint16_t>> segments;
  auto sent = Sent(&segments);
  ASSERT_EQ(sent[1].size(), 2u);
  ASSERT_EQ(sent[3].size(), 1u);
  EXPECT_EQ(segments[1], (std::vector<uint16_t>{1, 1})) << "flat for the single-buffer port";
  EXPECT_EQ(segments[3], (std::vector<uint16_t>{2})) << "left chained where chains go";
  for (const auto& [port, list] : sent) {
    for (const testframes::Frame& f : list) {
      ASSERT_EQ(f.size(), 14u + 1400);
      for (uint16_t i = 0; i < 1400; ++i) ASSERT_EQ(f[14 + i], static_cast<uint8_t>(i * 7)) << i;
    }
  }
  EXPECT_EQ(sent[1][0][0], 0xa0);
  EXPECT_EQ(sent[1][1][0], 0xa1);
  EXPECT_EQ(stats().ports[1].tx_bytes.Get(), 2u * (14 + 1400));
  EXPECT_EQ(InUse(), in_use) << "the shared payload is freed once every copy let go of it";
}

TEST_F(TxBuffersTest, AChainedFrameTooLargeForOneBufferIsDroppedOnTheEgressPort) {
  Build("", 256, /*linear_ports=*/uint64_t{1} << 2);
  const unsigned in_use = InUse();
  const uint16_t too_long = static_cast<uint16_t>(RTE_MBUF_DEFAULT_DATAROOM - 14 + 1);
  std::vector<rte_mbuf*> frames = SharedPayloadFrames(1, too_long);
  tx().Enqueue(2, frames[0]);
  tx().Flush();
  EXPECT_TRUE(Sent()[2].empty());
  EXPECT_EQ(Drops(2, DropReason::kNoTailroom), 1u);
  EXPECT_EQ(InUse(), in_use);
}

TEST_F(TxBuffersTest, HeldFramesOfATxInjectorLeaveOnRelease) {
  Build("");
  // Every frame held back, on port 1 only.
  config_.ports[1].faults = config::FaultConfig{};
  config_.ports[1].faults->reorder = 1.0;
  config_.ports[1].faults->direction = config::FaultDirection::kTx;
  const config::FaultConfig* faults[config::kMaxPorts] = {};
  faults[1] = &*config_.ports[1].faults;
  tx_ = std::make_unique<TxBuffers>(port_ids_, 0, Pool(), stats(), faults, 1);
  tx().Enqueue(1, Mbuf(Frame(7)));
  tx().Flush();
  EXPECT_TRUE(Sent()[1].empty()) << "held back";
  EXPECT_EQ(stats().ports[1].faults[static_cast<size_t>(Fault::kReorder)].Get(), 1u);
  tx().Release();
  auto sent = Sent();
  ASSERT_EQ(sent[1].size(), 1u);
  EXPECT_EQ(sent[1][0][20], 7);
}

}  // namespace
}  // namespace aggswitch::dataplane
