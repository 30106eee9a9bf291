// The closed form against the switch's own reduction: N contributions made by
// ChunkValues::Fill, reduced by the reference kernels (aggregator/reduce.h),
// must be exactly what ChunkValues expects.
#include "tools/agg-gen/chunk_values.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "aggregator/reduce.h"

namespace aggswitch::tools {
namespace {

using aggregator::DType;
using aggregator::ReduceOp;

std::vector<uint8_t> Reduce(const GenConfig& cfg, const ChunkValues& values, uint32_t seq) {
  const uint32_t bytes = values.payload_bytes();
  std::vector<uint8_t> payload(bytes), acc(bytes), out(bytes);
  for (uint16_t w = 0; w < cfg.workers; ++w) {
    values.Fill(w, seq, payload.data());
    if (w == 0) {
      aggregator::reference::LoadFirst(cfg.dtype, payload.data(), cfg.elems, acc.data());
    } else {
      EXPECT_FALSE(aggregator::reference::Accumulate(cfg.dtype, cfg.op, acc.data(), payload.data(),
                                                     cfg.elems));
    }
  }
  aggregator::reference::StoreResult(cfg.dtype, acc.data(), cfg.elems, out.data());
  return out;
}

TEST(ChunkValuesTest, ClosedFormMatchesTheReductionForEveryTypeOpAndFanIn) {
  for (DType dtype : {DType::kInt32, DType::kFloat32}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      for (uint16_t workers : {1, 2, 7, 16, 256}) {
        GenConfig cfg;
        cfg.dtype = dtype;
        cfg.op = op;
        cfg.workers = workers;
        cfg.elems = kMaxGenElems;  // the largest sums: exact in float32 too
        const ChunkValues values(cfg);
        for (uint32_t seq : {0u, 1u, 255u, 256u, 0xfffffffeu}) {
          SCOPED_TRACE(std::string(aggregator::DTypeName(dtype)) + " " +
                       std::string(aggregator::ReduceOpName(op)) + " workers " +
                       std::to_string(workers) + " seq " + std::to_string(seq));
          const std::vector<uint8_t> result = Reduce(cfg, values, seq);
          EXPECT_EQ(values.FirstMismatch(seq, result.data()), -1);
          for (uint32_t i : {0u, 100u, kMaxGenElems - 1u}) {
            uint32_t bits;
            std::memcpy(&bits, result.data() + 4 * i, 4);
            EXPECT_EQ(values.ExpectedBits(seq, i), bits) << "element " << i;
          }
        }
      }
    }
  }
}

TEST(ChunkValuesTest, FindsTheFirstWrongElement) {
  GenConfig cfg;
  cfg.workers = 4;
  cfg.elems = 64;
  const ChunkValues values(cfg);
  std::vector<uint8_t> result = Reduce(cfg, values, 9);
  ASSERT_EQ(values.FirstMismatch(9, result.data()), -1);
  result[4 * 37] ^= 1;
  result[4 * 50 + 3] ^= 0x80;
  EXPECT_EQ(values.FirstMismatch(9, result.data()), 37);
  // The chunk's own seq byte is in every value: another chunk's result is wrong.
  EXPECT_EQ(values.FirstMismatch(10, Reduce(cfg, values, 9).data()), 0);
  // So is a reduction over fewer workers.
  GenConfig three = cfg;
  three.workers = 3;
  EXPECT_EQ(values.FirstMismatch(9, Reduce(three, ChunkValues(three), 9).data()), 0);
}

TEST(ChunkValuesTest, ContributionsAreTheDocumentedValues) {
  GenConfig cfg;
  cfg.elems = 3;
  cfg.dtype = DType::kFloat32;
  const ChunkValues values(cfg);
  std::vector<uint8_t> payload(values.payload_bytes());
  values.Fill(2, 0x105, payload.data());  // v = 3 * (i + 1) + 5
  float v[3];
  std::memcpy(v, payload.data(), sizeof(v));
  EXPECT_EQ(v[0], 8.0f);
  EXPECT_EQ(v[1], 11.0f);
  EXPECT_EQ(v[2], 14.0f);
}

}  // namespace
}  // namespace aggswitch::tools
