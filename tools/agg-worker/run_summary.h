// agg-worker's numbers: sizes on the command line, per-iteration latency
// statistics, throughput, the end-of-run summary for people and as JSON.
//
// Throughput is algorithm bandwidth, as nccl-tests defines it: the vector's
// bytes divided by the time of one allreduce (the median iteration), whatever
// the algorithm moves underneath. Through a switch every rank sends its
// vector once and receives it once, so bus bandwidth equals it.
//
//   ASSIGN_OR_RETURN(uint64_t bytes, ParseSize("4M"));       // 4194304
//   LatencySummary lat = Summarize(seconds_per_iteration);   // median, p99, ...
//   PrintSummary(stdout, summary);
//   RETURN_IF_ERROR(WriteJsonSummary("run.json", summary));
//
// Thread safety: pure functions and stdio; the main thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/status.h"

namespace aggswitch::tools {

// "4096", "64K", "4M", "1G" (powers of 1024, case-insensitive, optional "iB"
// or "B": "4MiB", "4MB"): bytes.
common::Result<uint64_t> ParseSize(const std::string& text);

// "4.0 MiB", "512 B".
std::string FormatBytes(uint64_t bytes);

struct LatencySummary {
  double min = 0, median = 0, p99 = 0, max = 0, mean = 0;  // seconds
};

// Order statistics by nearest rank (p99 of 10 samples is the largest).
// All zero for no samples.
LatencySummary Summarize(std::vector<double> seconds);

// Everything a run reports.
struct RunSummary {
  uint16_t rank = 0;
  uint16_t world = 0;
  uint32_t job = 0;
  std::string dtype;
  std::string op;
  std::string float_mode;
  std::string switches;   // "10.0.10.253:47000,..."
  std::string transport;  // Client::transport_description()
  uint64_t elements = 0;
  uint64_t bytes = 0;
  uint32_t iterations = 0;  // asked for
  uint32_t completed = 0;   // allreduces that returned OK
  bool verify = false;
  uint32_t verified = 0;      // iterations whose result matched
  uint64_t mismatches = 0;    // over all iterations
  // Iterations (int32 sums, with --verify) that failed with the overflow
  // error where the verifier found a sum that can saturate: the answer
  // they must give.
  uint32_t overflows = 0;
  std::vector<std::string> mismatch_examples;
  std::string error;  // the allreduce failure, if any
  LatencySummary latency;
  client::ClientStats stats;

  // Bytes per second at the median latency.
  double AlgorithmBandwidth() const { return latency.median > 0 ? bytes / latency.median : 0; }
  bool ok() const {
    return error.empty() && mismatches == 0 && completed + overflows == iterations;
  }
};

// The human-readable summary, ending with "RESULT ok" or "RESULT FAIL: why".
void PrintSummary(FILE* out, const RunSummary& s);

common::Status WriteJsonSummary(const std::string& path, const RunSummary& s);

}  // namespace aggswitch::tools
