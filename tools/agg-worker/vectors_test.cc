#include "tools/agg-worker/vectors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "aggregator/half.h"

namespace aggswitch::tools {
namespace {

using aggregator::DType;
using aggregator::ReduceOp;

template <typename T>
std::vector<T> ReadAll(const RankVectors& v, uint16_t rank, uint32_t iteration) {
  std::vector<T> out(v.elements());
  v.Read(rank, iteration, 0, out.size(), reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

TEST(GeneratedVectorsTest, AnyRangeOfAnyRankIsReproducible) {
  const GeneratedVectors a(DType::kFloat32, ReduceOp::kSum, 4, 7, 1000);
  const GeneratedVectors b(DType::kFloat32, ReduceOp::kSum, 4, 7, 1000);
  const std::vector<float> whole = ReadAll<float>(a, 2, 3);
  EXPECT_EQ(whole, ReadAll<float>(b, 2, 3));  // another process computes the same
  std::vector<float> part(50);
  a.Read(2, 3, 600, 50, reinterpret_cast<uint8_t*>(part.data()));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 600));
  EXPECT_NE(whole, ReadAll<float>(a, 1, 3));  // another rank
  EXPECT_NE(whole, ReadAll<float>(a, 2, 4));  // another iteration
  const GeneratedVectors other_seed(DType::kFloat32, ReduceOp::kSum, 4, 8, 1000);
  EXPECT_NE(whole, ReadAll<float>(other_seed, 2, 3));
}

TEST(GeneratedVectorsTest, Int32SumsCannotSaturate) {
  for (const uint16_t world : {1, 3, 8, 1000}) {
    const GeneratedVectors v(DType::kInt32, ReduceOp::kSum, world, 1, 20000);
    int64_t largest = 0;
    for (const int32_t x : ReadAll<int32_t>(v, 0, 0)) {
      largest = std::max<int64_t>(largest, std::llabs(x));
    }
    EXPECT_LE(largest * world, int64_t{INT32_MAX}) << world;
    EXPECT_GT(largest * world, int64_t{INT32_MAX} * 9 / 10) << world;  // and use the range
  }
  // Other ops use every bit.
  const GeneratedVectors any(DType::kInt32, ReduceOp::kOr, 8, 1, 20000);
  int64_t largest = 0;
  for (const int32_t x : ReadAll<int32_t>(any, 0, 0)) {
    largest = std::max<int64_t>(largest, std::llabs(x));
  }
  EXPECT_GT(largest, int64_t{INT32_MAX} / 2);
}

TEST(GeneratedVectorsTest, FloatsSpreadOverManyBinades) {
  const GeneratedVectors v(DType::kFloat32, ReduceOp::kSum, 4, 1, 20000);
  std::set<int> exponents;
  for (const float x : ReadAll<float>(v, 0, 0)) {
    ASSERT_TRUE(std::isfinite(x));
    ASSERT_LT(std::fabs(x), 256.0f);
    int e;
    std::frexp(x, &e);
    exponents.insert(e);
  }
  EXPECT_GE(exponents.size(), 16u);
  const GeneratedVectors h(DType::kFloat16, ReduceOp::kSum, 4, 1, 20000);
  for (const uint16_t x : ReadAll<uint16_t>(h, 0, 0)) {
    ASSERT_LT(std::fabs(aggregator::HalfToFloat(x)), 4.0f);
  }
}

TEST(GeneratedVectorsTest, BoolResultsAreTrueAboutHalfTheTime) {
  const uint16_t world = 4;
  const size_t n = 20000;
  for (const ReduceOp op : {ReduceOp::kAnd, ReduceOp::kOr}) {
    const GeneratedVectors v(DType::kBool, op, world, 3, n);
    std::vector<uint8_t> all(n, 1), any(n, 0);
    for (uint16_t r = 0; r < world; ++r) {
      const std::vector<uint8_t> b = ReadAll<uint8_t>(v, r, 0);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(b[i], 1);
        all[i] &= b[i];
        any[i] |= b[i];
      }
    }
    const std::vector<uint8_t>& result = op == ReduceOp::kAnd ? all : any;
    const double ones = std::count(result.begin(), result.end(), 1) / static_cast<double>(n);
    EXPECT_NEAR(ones, 0.5, 0.03) << static_cast<int>(op);
  }
}

TEST(FileVectorsTest, ReadsOneFilePerRank) {
  EXPECT_EQ(RankPath("/data/g.{rank}.bin", 12), "/data/g.12.bin");
  EXPECT_EQ(RankPath("{rank}-{rank}", 3), "3-3");
  EXPECT_EQ(RankPath("plain", 3), "plain");

  const std::string dir = "/tmp/agg-worker-test." + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const auto write = [&](const std::string& name, const std::vector<int32_t>& v) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  };
  write("v.0", {1, 2, 3});
  write("v.1", {10, 20, 30});
  write("v.2", {1, 2});
  auto files = FileVectors::Load(dir + "/v.{rank}", DType::kInt32, {0, 1});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ((*files)->elements(), 3u);
  EXPECT_EQ(ReadAll<int32_t>(**files, 1, 0), (std::vector<int32_t>{10, 20, 30}));
  EXPECT_EQ(ReadAll<int32_t>(**files, 1, 5),
            (std::vector<int32_t>{10, 20, 30}));  // every iteration

  const auto uneven = FileVectors::Load(dir + "/v.{rank}", DType::kInt32, {0, 2});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("every rank needs as many"), std::string::npos);
  const auto missing = FileVectors::Load(dir + "/v.{rank}", DType::kInt32, {0, 7});
  EXPECT_EQ(missing.status().code(), common::StatusCode::kNotFound);
  std::ofstream(dir + "/odd.0", std::ios::binary) << "12345";
  const auto odd = FileVectors::Load(dir + "/odd.{rank}", DType::kInt32, {0});
  EXPECT_EQ(odd.status().code(), common::StatusCode::kInvalidArgument);
  ASSERT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace aggswitch::tools
