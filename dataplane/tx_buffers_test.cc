// TxBuffers on net_ring ports: frames leave in one burst per port when
// flushed, a full buffer flushes itself, a full TX ring is counted as
// tx_full on the egress port, drops are counted on the port they are charged
// to (none for the switch's own frames), and a TX fault injector's held
// frames go out on Release().
#include "dataplane/tx_buffers.h"

#include <gtest/gtest.h>

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

class TxBuffersTest : public StageTest {};

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
