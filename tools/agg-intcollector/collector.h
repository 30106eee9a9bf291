// agg-intcollector's core (docs/telemetry.md): it receives the Telemetry
// Reports that switches send for sampled datagrams, records each in the
// SQLite record table, and turns the recent complete traversals into
// paths and the best path of each (source, destination) by each rule.
//
// The collector's thread receives and records, and commits every so often
// (Flush, which also deletes rows past the retention and the row cap). The
// analysis runs on a thread of its own, reading what was committed through
// a connection of its own: however long it takes, intake goes on. The HTTP
// server's threads read what the last analysis published, and the
// counters, through Handle().
//
//   ASSIGN_OR_RETURN(auto c, Collector::Open(options));
//   c->StartAnalysis(std::chrono::seconds(1));  // read the window, decide, apply
//   while (!stop) {
//     c->Poll(50);                              // receive and record
//     if (due) RETURN_IF_ERROR(c->Flush());     // commit, prune
//   }
//   c->StopAnalysis();                          // within a moment, whatever it was doing
//
// Trust: a report is accepted only from a switch the collector knows, its
// node id from the address listed for it (CollectorOptions::reporters);
// any other is counted (reports_total{result="unknown_sender"}) and
// dropped, and nothing it says is recorded or counted lost.
//
// Bad input: a report that does not parse is counted by reason
// (aggswitch_intcollector_reports_total{result=...}) and dropped; a gap in
// a known switch's (node, hw_id) report sequence numbers is counted as
// reports lost, at most kMaxCountedGap for one report.
//
// Thread safety: Open, Poll, Flush, StartAnalysis and StopAnalysis on the
// collector thread; Analyse on one thread at a time (the analysis thread
// once started); Handle and counts on any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/net_addr.h"
#include "common/status.h"
#include "common/http_response.h"
#include "telemetry/int_wire.h"
#include "telemetry/record_store.h"
#include "tools/agg-intcollector/decision_pusher.h"

namespace aggswitch::tools {

// A switch whose reports the collector accepts: its telemetry.node_id, and
// the IPv4 address (host order) its reports come from.
struct Reporter {
  uint32_t node_id = 0;
  uint32_t ip = 0;
};
// "NODE=ADDR"; an error names what is wrong.
common::Result<Reporter> ParseReporterOption(std::string_view text);

// A gap in a switch's report sequence numbers beyond this is counted as
// no loss: the switch restarted, or the report came far out of order.
inline constexpr uint32_t kMaxCountedGap = 1024;

struct CollectorOptions {
  common::Ipv4Endpoint listen{{0}, telemetry::kDefaultReportPort};
  std::string db_path = "int.db";
  // The analysis reads the traversals whose end-of-path notice came within
  // this long.
  std::chrono::seconds window{60};
  // Rows received longer ago than this are deleted (at least the window).
  std::chrono::seconds retain{3600};
  // Rows more than this many inserts behind the latest are deleted, in
  // each table.
  uint64_t max_rows = 1'000'000;
  // When set, each analysis applies the decisions of this rule at
  // `switches` (decision_pusher.h).
  std::optional<telemetry::Rule> apply;
  std::vector<SwitchEndpoint> switches;
  // Whose reports are accepted. Empty only with any_reporter.
  std::vector<Reporter> reporters;
  // Accept reports from anyone who can reach `listen` (a lab): not with
  // `apply`, where a forged report would choose the switches' uplinks.
  bool any_reporter = false;
};

class Collector {
 public:
  // Opens the record file and binds the UDP socket. An unusable file or
  // address is an error naming it.
  static common::Result<std::unique_ptr<Collector>> Open(const CollectorOptions& options);
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;

  // The UDP port bound (the one asked for, or the ephemeral one for 0).
  uint16_t port() const { return port_; }

  // Waits up to `timeout_ms` for reports, then takes every report queued
  // (a bounded batch): parsed, counted, recorded. Returns how many
  // datagrams it took. [collector]
  size_t Poll(int timeout_ms);
  // Handles one datagram from `from_ip` (host order) received at `now_ns`
  // (Unix time). [collector]
  void OnDatagram(const uint8_t* data, size_t len, uint32_t from_ip, int64_t now_ns);
  // Commits what was recorded, then deletes a bounded share of the rows
  // past the retention and the cap (counted by table and reason). [collector]
  common::Status Flush();
  // Reads the window's complete traversals that were committed, and
  // publishes their paths and decisions for Handle(); with options.apply,
  // pushes the rule's decisions to the switches. [analysis]
  common::Status Analyse();
  // Runs Analyse every `interval` on a thread of its own; a failed one is
  // logged and counted as a store error, and the next one runs as due.
  // [collector]
  void StartAnalysis(std::chrono::milliseconds interval);
  // Stops that thread: an analysis under way is interrupted. [collector]
  void StopAnalysis();

  // GET /metrics, /api/v1/paths, /api/v1/decisions, /api/v1/applied and
  // /api/v1/stats. [any]
  common::HttpResponse Handle(std::string_view method, std::string_view path,
                               std::string_view query, const std::string& body) const;

  // The counters, by name and value, in /metrics order. [any]
  struct Counts {
    std::array<uint64_t, telemetry::kNumReportErrors> reports{};  // [0]: accepted
    uint64_t reports_lost = 0;
    uint64_t unknown_sender = 0;  // parsed, but from no switch the collector knows
    // [table][0 retention, 1 cap], table 0 hop_records, 1 path_ends.
    uint64_t rows_deleted[2][2] = {{0, 0}, {0, 0}};
    uint64_t store_errors = 0;
    uint64_t hop_records = 0;
    uint64_t path_ends = 0;
    uint64_t traversals = 0;  // complete, in the last analysis's window
    uint64_t flows = 0;
    uint64_t paths = 0;
  };
  Counts counts() const;

 private:
  Collector(const CollectorOptions& options, telemetry::RecordStore store,
            telemetry::RecordStore reader, int fd, uint16_t port);
  void AnalysisLoop(std::chrono::milliseconds interval);
  static int64_t NowNs();

  const CollectorOptions options_;
  telemetry::RecordStore store_;   // the writer [collector]
  telemetry::RecordStore reader_;  // the analysis's connection [analysis]
  const int fd_;
  const uint16_t port_;
  std::unique_ptr<DecisionPusher> pusher_;  // with options.apply
  std::vector<uint8_t> buffers_;  // Poll's receive buffers [collector]
  // Next expected report sequence per (node id, hw_id). [collector]
  std::map<std::pair<uint32_t, uint8_t>, uint32_t> next_sequence_;
  std::set<std::pair<uint32_t, uint32_t>> reporters_;  // (node id, ip)
  uint64_t rows_at_prune_ = 0;  // hop rows written at the last prune [collector]

  std::thread analysis_;
  std::mutex analysis_mu_;
  std::condition_variable analysis_cv_;
  bool analysis_stop_ = false;  // guarded by analysis_mu_

  std::array<std::atomic<uint64_t>, telemetry::kNumReportErrors> reports_{};
  std::atomic<uint64_t> reports_lost_{0};
  std::atomic<uint64_t> unknown_sender_{0};
  std::atomic<uint64_t> rows_deleted_[2][2] = {{0, 0}, {0, 0}};
  std::atomic<uint64_t> store_errors_{0};
  std::atomic<uint64_t> hop_records_{0};
  std::atomic<uint64_t> path_ends_{0};
  std::atomic<uint64_t> traversals_{0};
  std::atomic<uint64_t> flows_{0};
  std::atomic<uint64_t> paths_{0};

  // What the last analysis published.
  mutable std::mutex published_mu_;
  std::string paths_json_;      // guarded by published_mu_
  std::string decisions_json_;  // guarded by published_mu_
};

}  // namespace aggswitch::tools
