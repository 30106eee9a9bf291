// intcollector_fuzz: agg-intcollector's intake, record table and analysis
// (tools/agg-intcollector/collector.h) on a sequence of datagrams from
// several addresses: a real Collector, its record file in a temporary
// directory, fed through OnDatagram, then committed (and pruned) and
// analysed.
//
// Input: byte 0 sets the row cap (--max-rows): 1 + byte % 64 below 128,
// else 10^6; then records, each a sender byte (the low 3 bits: 10.0.0.x)
// and a FuzzReader record (a 16-bit length and the report's bytes). The
// collector knows nodes 1 to 4, node n reporting from 10.0.0.n.
//
// Invariants, each a finding when broken:
//   * every datagram is counted once, as ParseReport and the reporter list
//     say: accepted, refused by its parse error, or an unknown sender;
//   * nothing an unknown sender says is recorded;
//   * below the cap, hop_records holds one row per (path id, hop index) of
//     the accepted reports and path_ends one per path id of their
//     end-of-path notices, however often each came; with a cap, no table
//     holds more rows than the cap or than that;
//   * the reports counted lost are at most 1024 per accepted report;
//   * the analysis succeeds, its paths JSON parses, and it counts no more
//     traversals than there are notices.
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "telemetry/int_wire.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/agg-intcollector/collector.h"

namespace aggswitch::tools {
namespace {

constexpr uint32_t kSenderBase = 0x0a000000;  // 10.0.0.x
constexpr uint32_t kKnownNodes = 4;
constexpr uint64_t kNoCap = 1'000'000;

// The directory the record files go in, made once.
const std::string& Dir() {
  static const std::string dir = [] {
    char t[] = "/tmp/intcollector_fuzz.XXXXXX";
    FUZZ_CHECK(mkdtemp(t) != nullptr);
    return std::string(t);
  }();
  return dir;
}

void RemoveFiles(const std::string& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) (void)unlink((db + suffix).c_str());
}

// count(*) of `table`, read as an operator would: another connection.
uint64_t Rows(const std::string& db, const char* table) {
  sqlite3* c = nullptr;
  FUZZ_CHECK(sqlite3_open_v2(db.c_str(), &c, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  const std::string sql = std::string("SELECT count(*) FROM ") + table;
  FUZZ_CHECK(sqlite3_prepare_v2(c, sql.c_str(), -1, &s, nullptr) == SQLITE_OK);
  FUZZ_CHECK(sqlite3_step(s) == SQLITE_ROW);
  const auto n = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  sqlite3_finalize(s);
  sqlite3_close(c);
  return n;
}

void Run(const uint8_t* data, size_t size) {
  fuzz::FuzzReader in(data, size);
  const uint8_t cap_byte = in.Byte();
  const uint64_t cap = cap_byte < 128 ? 1 + cap_byte % 64 : kNoCap;
  const std::string db = Dir() + "/int.db";
  RemoveFiles(db);
  CollectorOptions o;
  o.listen = *common::Ipv4Endpoint::Parse("127.0.0.1:0");
  o.db_path = db;
  o.max_rows = cap;
  for (uint32_t n = 1; n <= kKnownNodes; ++n) o.reporters.push_back({n, kSenderBase + n});
  auto opened = Collector::Open(o);
  FUZZ_CHECK(opened.ok());
  Collector& c = **opened;
  // Now: the rows are inside the retention and the analysis's window.
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();

  std::array<uint64_t, telemetry::kNumReportErrors> parsed{};
  uint64_t unknown = 0;
  uint64_t accepted_reports = 0;
  std::set<std::tuple<uint32_t, uint32_t, uint32_t>> hops;  // (source_node, path_seq, hop_index)
  std::set<std::pair<uint32_t, uint32_t>> notices;          // (source_node, path_seq)
  while (!in.empty()) {
    const uint32_t from = kSenderBase + (in.Byte() & 7);
    const std::span<const uint8_t> report = in.Record();
    telemetry::HopReport r;
    const telemetry::ReportError why = telemetry::ParseReport(report.data(), report.size(), &r);
    if (why != telemetry::ReportError::kNone) {
      ++parsed[static_cast<size_t>(why)];
    } else if (r.node_id < 1 || r.node_id > kKnownNodes || from != kSenderBase + r.node_id) {
      ++unknown;
    } else {
      ++parsed[0];
      ++accepted_reports;
      hops.insert({r.source_node, r.path_seq, r.hop_index});
      if (r.last_hop) notices.insert({r.source_node, r.path_seq});
    }
    c.OnDatagram(report.data(), report.size(), from, now);
  }
  FUZZ_CHECK(c.Flush().ok());
  FUZZ_CHECK(c.Analyse().ok());

  const Collector::Counts n = c.counts();
  for (size_t i = 0; i < parsed.size(); ++i) FUZZ_CHECK(n.reports[i] == parsed[i]);
  FUZZ_CHECK(n.unknown_sender == unknown);
  FUZZ_CHECK(n.reports_lost <= accepted_reports * kMaxCountedGap);
  const uint64_t hop_rows = Rows(db, "hop_records");
  const uint64_t end_rows = Rows(db, "path_ends");
  if (cap >= accepted_reports) {
    FUZZ_CHECK(hop_rows == hops.size());
    FUZZ_CHECK(end_rows == notices.size());
  } else {
    FUZZ_CHECK(hop_rows <= cap && hop_rows <= hops.size());
    FUZZ_CHECK(end_rows <= cap && end_rows <= notices.size());
  }
  FUZZ_CHECK(n.traversals <= end_rows);
  const common::HttpResponse paths = c.Handle("GET", "/api/v1/paths", "", "");
  FUZZ_CHECK(paths.status == 200);
  FUZZ_CHECK(nlohmann::json::accept(paths.body));
  opened->reset();
  RemoveFiles(db);
}

}  // namespace
}  // namespace aggswitch::tools

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aggswitch::tools::Run(data, size);
  return 0;
}
