// agg-ps --sgd: the option parser and SgdModel's update, with exact float32
// checks (two roundings, no fused multiply-add), offsets, growth, and what is
// passed through or refused.
#include "tools/agg-ps/sgd.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace aggswitch::tools {
namespace {

using aggregator::AggFields;
using aggregator::DType;
using aggregator::Opcode;
using aggregator::ReduceOp;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kJob = 7;

Bytes PackFloats(const std::vector<float>& v) {
  Bytes out(v.size() * 4);
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());  // x86: little-endian
  return out;
}

std::vector<float> UnpackFloats(const Bytes& b) {
  std::vector<float> out(b.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (const float f : v) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

std::vector<uint32_t> Bits(std::span<const float> v) {
  return Bits(std::vector<float>(v.begin(), v.end()));
}

// p - lr * g with both roundings, as the model documents.
float Step(float p, float lr, float g) {
  const volatile float product = lr * g;
  return p - product;
}

AggFields Chunk(uint32_t aux, uint16_t elem_count, DType dtype = DType::kFloat32,
                ReduceOp op = ReduceOp::kSum, uint32_t job = kJob) {
  AggFields f;
  f.opcode = Opcode::kResult;
  f.job_id = job;
  f.seq = 1;
  f.aux = aux;
  f.elem_count = elem_count;
  f.dtype = dtype;
  f.op = op;
  return f;
}

TEST(SgdOptionsTest, ParsesJobEqualsLearningRate) {
  auto j = ParseSgd("7=0.01");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->job_id, 7u);
  EXPECT_EQ(j->learning_rate, 0.01f);
  EXPECT_EQ(ParseSgd("4294967295=1e-3")->learning_rate, 1e-3f);
  for (const char* bad : {"7", "=0.1", "7=", "x=0.1", "7=0", "7=-0.1", "7=inf", "7=nan", "7=0.1x",
                          "4294967296=0.1", "7:0.1"}) {
    auto r = ParseSgd(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--sgd: expected JOB=LR"), std::string::npos)
        << r.status().message();
  }
}

TEST(SgdModelTest, AddJobRefusesRepeatsAndBadRates) {
  SgdModel sgd;
  ASSERT_TRUE(sgd.AddJob({kJob, 0.5f}).ok());
  EXPECT_TRUE(sgd.HasJob(kJob));
  const common::Status again = sgd.AddJob({kJob, 0.1f});
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("--sgd: job 7 given twice"), std::string::npos) << again.message();
  EXPECT_FALSE(sgd.AddJob({8, 0.0f}).ok());
  EXPECT_FALSE(sgd.AddJob({8, std::numeric_limits<float>::infinity()}).ok());
  EXPECT_EQ(sgd.jobs(), 1u);
}

TEST(SgdModelTest, AppliesMinusLrTimesTheGradientAtTheChunksOffset) {
  SgdModel sgd;
  ASSERT_TRUE(sgd.AddJob({kJob, 0.1f}).ok());
  // Chunk 1 first (offset 4): the parameters grow to 6, zeros before it.
  Bytes p1 = PackFloats({-10.0f, 2.5f});
  ASSERT_TRUE(sgd.Apply(Chunk(4, 2), p1));
  const std::vector<float> after1 = {Step(0, 0.1f, -10.0f), Step(0, 0.1f, 2.5f)};
  EXPECT_EQ(Bits(UnpackFloats(p1)), Bits(after1));
  EXPECT_EQ(Bits(sgd.Parameters(kJob)), Bits(std::vector<float>{0, 0, 0, 0, after1[0], after1[1]}));
  Bytes p0 = PackFloats({1.0f, -1.0f, 0.5f, 3.0f});
  ASSERT_TRUE(sgd.Apply(Chunk(0, 4), p0));
  EXPECT_EQ(Bits(UnpackFloats(p0)),
            Bits(std::vector<float>{Step(0, 0.1f, 1.0f), Step(0, 0.1f, -1.0f), Step(0, 0.1f, 0.5f),
                                    Step(0, 0.1f, 3.0f)}));
  // The second iteration starts from the first's parameters.
  Bytes again = PackFloats({0.3f, 0.0f});
  ASSERT_TRUE(sgd.Apply(Chunk(4, 2), again));
  const std::vector<float> after2 = {Step(after1[0], 0.1f, 0.3f), after1[1]};
  EXPECT_EQ(Bits(UnpackFloats(again)), Bits(after2));
  EXPECT_EQ(sgd.Parameters(kJob).size(), 6u);
  EXPECT_EQ(sgd.Parameters(kJob)[4], after2[0]);
  // 0.1f * -10 rounds to -1, so element 4 is exactly 1 and then 1 - r(0.1f * 0.3f):
  // a fused multiply-add would give other bits.
  EXPECT_EQ(after1[0], 1.0f);
  EXPECT_NE(std::bit_cast<uint32_t>(after2[0]),
            std::bit_cast<uint32_t>(std::fma(-0.1f, 0.3f, 1.0f)));
  const SgdCounters& c = sgd.counters();
  EXPECT_EQ(c.updates, 3u);
  EXPECT_EQ(c.elements, 8u);
  EXPECT_EQ(c.passed, 0u);
  EXPECT_EQ(c.refused, 0u);
}

TEST(SgdModelTest, WritesLittleEndianFloat32) {
  SgdModel sgd;
  ASSERT_TRUE(sgd.AddJob({kJob, 1.0f}).ok());
  Bytes p = {0x00, 0x00, 0x80, 0x3f};  // 1.0f, little-endian
  ASSERT_TRUE(sgd.Apply(Chunk(0, 1), p));
  EXPECT_EQ(p, (Bytes{0x00, 0x00, 0x80, 0xbf}));  // -1.0f
}

TEST(SgdModelTest, OtherOpsPassThroughAndOtherSumTypesAreRefused) {
  SgdModel sgd;
  ASSERT_TRUE(sgd.AddJob({kJob, 0.1f}).ok());
  // The int32 max a client exchanges to agree on a fixed-point exponent.
  const Bytes exponent = {5, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff};
  Bytes p = exponent;
  EXPECT_TRUE(sgd.Apply(Chunk(0, 2, DType::kInt32, ReduceOp::kMax), p));
  EXPECT_EQ(p, exponent);
  Bytes fmin = PackFloats({1.0f});
  EXPECT_TRUE(sgd.Apply(Chunk(0, 1, DType::kFloat32, ReduceOp::kMin), fmin));
  EXPECT_EQ(UnpackFloats(fmin), std::vector<float>{1.0f});
  // Fixed-point and 16-bit sums are no float32 gradient.
  p = exponent;
  EXPECT_FALSE(sgd.Apply(Chunk(0, 2, DType::kInt32), p));
  EXPECT_EQ(p, exponent);
  Bytes half = {0x00, 0x3c};
  EXPECT_FALSE(sgd.Apply(Chunk(0, 1, DType::kFloat16), half));
  EXPECT_EQ(half, (Bytes{0x00, 0x3c}));
  // A payload that does not hold elem_count float32s.
  Bytes short_payload = PackFloats({1.0f});
  EXPECT_FALSE(sgd.Apply(Chunk(0, 2), short_payload));
  const SgdCounters& c = sgd.counters();
  EXPECT_EQ(c.passed, 2u);
  EXPECT_EQ(c.refused, 3u);
  EXPECT_EQ(c.updates, 0u);
  EXPECT_TRUE(sgd.Parameters(kJob).empty());
}

TEST(SgdModelTest, JobsWithoutSgdPassThroughUncounted) {
  SgdModel sgd;
  ASSERT_TRUE(sgd.AddJob({kJob, 0.1f}).ok());
  Bytes p = PackFloats({2.0f});
  EXPECT_TRUE(sgd.Apply(Chunk(0, 1, DType::kFloat32, ReduceOp::kSum, 8), p));
  EXPECT_EQ(UnpackFloats(p), std::vector<float>{2.0f});
  Bytes i = {1, 0, 0, 0};
  EXPECT_TRUE(sgd.Apply(Chunk(0, 1, DType::kInt32, ReduceOp::kSum, 8), i));
  EXPECT_EQ(sgd.counters().passed, 0u);
  EXPECT_EQ(sgd.counters().refused, 0u);
  EXPECT_EQ(sgd.counters().updates, 0u);
  EXPECT_TRUE(sgd.Parameters(8).empty());
}

TEST(SgdModelTest, ChunksBeyondMaxElemsAreRefused) {
  SgdModel sgd(8);
  ASSERT_TRUE(sgd.AddJob({kJob, 0.5f}).ok());
  Bytes last = PackFloats({2.0f, 4.0f});
  EXPECT_TRUE(sgd.Apply(Chunk(6, 2), last)) << "ends exactly at max_elems";
  EXPECT_EQ(UnpackFloats(last), (std::vector<float>{-1.0f, -2.0f}));
  Bytes beyond = PackFloats({2.0f, 4.0f});
  EXPECT_FALSE(sgd.Apply(Chunk(7, 2), beyond));
  EXPECT_EQ(UnpackFloats(beyond), (std::vector<float>{2.0f, 4.0f}));
  Bytes far = PackFloats({1.0f});
  EXPECT_FALSE(sgd.Apply(Chunk(0xFFFFFFFFu, 1), far));
  EXPECT_EQ(sgd.Parameters(kJob).size(), 8u);
  EXPECT_EQ(sgd.counters().refused, 2u);
  EXPECT_EQ(sgd.counters().updates, 1u);
}

}  // namespace
}  // namespace aggswitch::tools
