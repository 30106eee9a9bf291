// What an agg-gen run did: counters, per-second samples and the first wrong
// answers, printed for people and written as JSON for bench/aggregation.sh.
//
//   RunReport report = ...;               // filled by main.cc from the port runner
//   PrintReport(stdout, report);
//   RETURN_IF_ERROR(WriteJsonReport("run.json", report));
//   return report.ok() ? 0 : 1;
//
// Rates: "contributions/s" counts answered contributions (the first answer
// for each worker, job and chunk), so retransmissions and duplicates do not
// inflate it; Gbit/s of gradient is that times elems * 4 bytes * 8.
//
// Thread safety: value types and control-side functions (stdio, files); the
// main thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/agg-gen/engine.h"
#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

// Counter changes over one sampling interval (about a second).
struct RateSample {
  double end_epoch_s = 0;  // wall clock at the end of the interval
  double seconds = 0;      // length of the interval, by the generator lcore's TSC
  uint64_t sent = 0;
  uint64_t retransmits = 0;
  uint64_t completed = 0;
  uint64_t errors = 0;

  double CompletedPerSecond() const { return seconds > 0 ? completed / seconds : 0; }
};

// The port side of a run.
struct PortStats {
  uint64_t tx_full = 0;    // TX bursts the port did not take in full (retried)
  uint64_t no_mbuf = 0;    // mbuf allocations that failed (retried)
  uint64_t acks_sent = 0;  // final ACKs transmitted (one per worker and job in a good run)
};

struct RunReport {
  GenConfig cfg;
  std::string port;  // "port 0 (net_memif)"
  GenCounters counters;
  uint64_t unanswered = 0;  // sent, never answered
  bool stalled = false;     // ended by --give-up-ms
  double seconds = 0;       // traffic time: first send to the end of the loop
  PortStats port_stats;
  std::vector<RateSample> samples;
  std::vector<ErrorDetail> details;

  bool ok() const { return counters.Errors() == 0 && unanswered == 0 && !stalled; }
};

// Median of the samples' answered contributions per second (0 without samples).
double MedianCompletedPerSecond(const std::vector<RateSample>& samples);

// One line per sample, for --stats-interval.
void PrintSample(FILE* out, const GenConfig& cfg, double since_start_s, const RateSample& s);

// The end-of-run summary, ending with "RESULT ok" or "RESULT FAIL: <why>".
void PrintReport(FILE* out, const RunReport& r);

common::Status WriteJsonReport(const std::string& path, const RunReport& r);

}  // namespace aggswitch::tools
