#include "tools/agg-worker/run_summary.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace aggswitch::tools {
namespace {

TEST(ParseSizeTest, BytesWithBinaryUnits) {
  const std::pair<std::string, uint64_t> good[] = {
      {"4096", 4096},    {"64K", 65536},   {"64k", 65536},     {"4M", 4194304},
      {"4MiB", 4194304}, {"4MB", 4194304}, {"1G", 1073741824}, {"12B", 12}};
  for (const auto& [text, bytes] : good) {
    const auto r = ParseSize(text);
    ASSERT_TRUE(r.ok()) << text;
    EXPECT_EQ(*r, bytes) << text;
  }
  for (const std::string bad : {"", "M", "4X", "-4", "4 M", "99999999999999999999G"}) {
    EXPECT_FALSE(ParseSize(bad).ok()) << bad;
  }
}

TEST(FormatBytesTest, PicksTheUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(4194304), "4.0 MiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
}

TEST(SummarizeTest, NearestRankStatistics) {
  std::vector<double> s;
  for (int i = 100; i >= 1; --i) s.push_back(i * 1e-3);  // 1..100 ms, unsorted
  const LatencySummary l = Summarize(s);
  EXPECT_DOUBLE_EQ(l.min, 1e-3);
  EXPECT_DOUBLE_EQ(l.median, 50e-3);
  EXPECT_DOUBLE_EQ(l.p99, 99e-3);
  EXPECT_DOUBLE_EQ(l.max, 100e-3);
  EXPECT_DOUBLE_EQ(l.mean, 50.5e-3);
  const LatencySummary ten = Summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(ten.median, 5);
  EXPECT_EQ(ten.p99, 10);
  EXPECT_EQ(Summarize({}).median, 0);
  EXPECT_EQ(Summarize({7}).p99, 7);
}

TEST(RunSummaryTest, VerdictBandwidthAndJson) {
  RunSummary s;
  s.bytes = 4 << 20;
  s.iterations = 2;
  s.completed = 2;
  s.verify = true;
  s.verified = 2;
  s.latency = Summarize({0.004, 0.002});
  s.stats.notices = 3;
  s.stats.kept_local = 4;
  s.stats.held_notices = 5;
  s.stats.round_trip_us = 1250;
  EXPECT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s.AlgorithmBandwidth(), (4 << 20) / 0.002);
  s.mismatches = 3;
  EXPECT_FALSE(s.ok());
  s.mismatches = 0;
  s.completed = 1;
  s.error = "allreduce 2 of 2 failed: UNAVAILABLE: no result";
  EXPECT_FALSE(s.ok());

  const std::string path = "/tmp/agg-worker-summary." + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(WriteJsonSummary(path, s).ok());
  std::ifstream f(path);
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["ok"], false);
  EXPECT_EQ(doc["failure"], s.error);
  EXPECT_EQ(doc["bytes"], 4 << 20);
  EXPECT_DOUBLE_EQ(doc["latency_s"]["median"].get<double>(), 0.002);
  EXPECT_TRUE(doc["client"].contains("retransmissions"));
  EXPECT_EQ(doc["client"]["notices"], 3) << "told to flag its data for bypass";
  EXPECT_EQ(doc["client"]["kept_local"], 4) << "given to the TAN in its own process";
  EXPECT_EQ(doc["client"]["held_notices"], 5);
  EXPECT_EQ(doc["client"]["round_trip_us"], 1250);
  std::remove(path.c_str());

  char* text = nullptr;
  size_t len = 0;
  FILE* out = open_memstream(&text, &len);
  PrintSummary(out, s);
  std::fclose(out);
  EXPECT_NE(std::string(text).find("RESULT FAIL: allreduce 2 of 2 failed"), std::string::npos);
  std::free(text);
}

}  // namespace
}  // namespace aggswitch::tools
