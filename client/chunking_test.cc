#include "client/chunking.h"

#include <gtest/gtest.h>

namespace aggswitch::client {
namespace {

using aggregator::DType;

TEST(ChunkingTest, ElementsPerChunkFillTheMtu) {
  // docs/protocol.md: 1500 - 20 - 8 - 52 = 1420 payload bytes.
  EXPECT_EQ(ElementsPerChunk(DType::kInt32, 1500), 355u);
  EXPECT_EQ(ElementsPerChunk(DType::kFloat32, 1500), 355u);
  EXPECT_EQ(ElementsPerChunk(DType::kFloat16, 1500), 710u);
  EXPECT_EQ(ElementsPerChunk(DType::kBFloat16, 1500), 710u);
  EXPECT_EQ(ElementsPerChunk(DType::kBool, 1500), 1420u);
  EXPECT_EQ(ElementsPerChunk(DType::kFloat32, 9000), 2230u);
  EXPECT_EQ(ElementsPerChunk(DType::kInt32, 83), 0u);  // 80 bytes of headers, 3 left
  EXPECT_EQ(ElementsPerChunk(DType::kInt32, 84), 1u);
  EXPECT_EQ(ElementsPerChunk(DType::kBool, 70000), kMaxChunkElements);  // elem_count is 16 bits
  for (const DType t : {DType::kInt32, DType::kFloat16, DType::kBool}) {
    for (const uint32_t mtu : {kMinMtu, 1500u, kMaxMtu}) {
      const uint32_t n = ElementsPerChunk(t, mtu);
      EXPECT_LE(DatagramBytes(t, n) + kIpv4UdpHeaderBytes, mtu);
      EXPECT_GT(DatagramBytes(t, n + 1) + kIpv4UdpHeaderBytes, mtu);
    }
  }
}

TEST(ChunkingTest, ChunkCountRoundsUp) {
  EXPECT_EQ(ChunkCount(0, 356), 0u);
  EXPECT_EQ(ChunkCount(1, 356), 1u);
  EXPECT_EQ(ChunkCount(356, 356), 1u);
  EXPECT_EQ(ChunkCount(357, 356), 2u);
  EXPECT_EQ(ChunkCount(uint64_t{1} << 40, 1), uint64_t{1} << 40);
}

TEST(ChunkingTest, SwitchIndexIsAddrLowModuloTheSwitches) {
  EXPECT_EQ(SwitchIndex(12345, 1), 0u);
  for (uint32_t a = 0; a < 16; ++a) EXPECT_EQ(SwitchIndex(a, 4), a & 3u);  // the low two bits
  EXPECT_EQ(SwitchIndex(7, 3), 1u);
  EXPECT_EQ(SwitchIndex(0xFFFFFFFFu, 2), 1u);
}

}  // namespace
}  // namespace aggswitch::client
