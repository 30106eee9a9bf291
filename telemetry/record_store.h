// The collector's record table (docs/telemetry.md, "The record table"): an
// SQLite file with one row per hop per sampled datagram (hop_records) and
// one per end-of-path notice (path_ends), which an operator can query with
// sqlite3 while the collector writes (WAL journal).
//
// Rows are written in transactions of many reports: Add() opens one when
// none is open, Flush() commits it. Traversals() reads what is committed.
//
//   ASSIGN_OR_RETURN(RecordStore store, RecordStore::Open("/var/lib/aggswitch/int.db"));
//   RETURN_IF_ERROR(store.Add(report, now_ns));
//   RETURN_IF_ERROR(store.Flush());
//   ASSIGN_OR_RETURN(std::vector<Traversal> t, store.Traversals(now_ns - window_ns));
//
// Thread safety: each store is one connection, used by one thread at a
// time (the writer the collector's thread, a reader the analysis thread);
// Interrupt from any thread. The file may be read by other processes
// meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "telemetry/int_wire.h"
#include "telemetry/path_analysis.h"

struct sqlite3;
struct sqlite3_stmt;

namespace aggswitch::telemetry {

class RecordStore {
 public:
  // kWrite: the collector's one writer, which creates the file and its
  // tables when missing. kRead: a reader of a file a writer created (the
  // analysis), which sees what the writer committed; WAL lets it read
  // while the writer writes.
  enum class Access : uint8_t { kWrite, kRead };
  // Opens the record file at `path` (kWrite: ":memory:" for one that lives
  // as long as the store).
  static common::Result<RecordStore> Open(const std::string& path, Access access = Access::kWrite);
  RecordStore(RecordStore&&) noexcept;
  RecordStore& operator=(RecordStore&&) noexcept;
  ~RecordStore();

  // Records one hop's report, received at `received_ns` (Unix time): a
  // hop_records row, and a path_ends row when it is the last hop's.
  common::Status Add(const HopReport& report, int64_t received_ns);
  // Commits the reports added since the last Flush.
  common::Status Flush();

  // The complete traversals whose end-of-path notice came at or after
  // `since_ns`: every hop from index 1 to the notice's, each hop's report
  // received within kPathWindowNs of the notice. At most `limit`, the
  // latest first.
  common::Result<std::vector<Traversal>> Traversals(int64_t since_ns, size_t limit = 100000) const;

  // Rows deleted by one Prune, by table (0: hop_records, 1: path_ends).
  struct Pruned {
    uint64_t aged[2] = {0, 0};    // received before the retention
    uint64_t capped[2] = {0, 0};  // past the row cap
  };
  // Deletes, from each table, rows received before `before_ns`, and rows
  // more than `max_rows` inserts behind the latest (the oldest first; a
  // repeat that took a row's place counts as an insert), at most `budget`
  // of each kind: a bounded share of the work per call. [writer]
  common::Result<Pruned> Prune(int64_t before_ns, uint64_t max_rows, uint64_t budget);
  // Makes a query running on this store's connection return an error soon
  // (Traversals on the analysis's reader, when the collector stops). [any]
  void Interrupt();

  // Rows written (committed or not) since Open.
  uint64_t hop_rows() const { return hop_rows_; }
  uint64_t path_end_rows() const { return path_end_rows_; }

  // How far apart one datagram's reports may arrive: a path id the same
  // switch reused after a restart (its sequence starts again) is another
  // datagram's.
  static constexpr int64_t kPathWindowNs = 10'000'000'000;

 private:
  RecordStore() = default;
  common::Status Exec(const char* sql);
  // The first column of `sql`'s first row (0 without one).
  common::Result<int64_t> QueryInt(const char* sql) const;
  // Runs one of the prune deletes with ?1 = `bound` and ?2 = `budget`;
  // returns the rows deleted.
  common::Result<uint64_t> Delete(const char* sql, int64_t bound, uint64_t budget);

  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_hop_ = nullptr;
  sqlite3_stmt* insert_end_ = nullptr;
  sqlite3_stmt* select_traversals_ = nullptr;
  bool in_transaction_ = false;
  uint64_t hop_rows_ = 0;
  uint64_t path_end_rows_ = 0;
};

}  // namespace aggswitch::telemetry
