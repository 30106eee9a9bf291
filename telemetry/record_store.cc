#include "telemetry/record_store.h"

#include <arpa/inet.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace aggswitch::telemetry {
namespace {

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS hop_records (
  received_ns        INTEGER NOT NULL,  -- the collector's clock, Unix ns
  node_id            INTEGER NOT NULL,  -- the reporting switch
  hw_id              INTEGER NOT NULL,
  report_seq         INTEGER NOT NULL,  -- per (node_id, hw_id)
  source_node        INTEGER NOT NULL,  -- path id: the first hop's node id
  path_seq           INTEGER NOT NULL,  --   and its sequence number
  hop_index          INTEGER NOT NULL,  -- 1 for the first hop
  last_hop           INTEGER NOT NULL,  -- 1: the end-of-path notice's hop
  src_ip             TEXT,              -- the datagram's, when the report carried it
  dst_ip             TEXT,
  protocol           INTEGER,
  src_port           INTEGER,
  dst_port           INTEGER,           -- the original port
  ingress_port       INTEGER,           -- NULL: not recorded by this hop
  egress_port        INTEGER,
  hop_latency_ns     INTEGER,
  queue_id           INTEGER,
  queue_occupancy    INTEGER,
  tx_utilization_ppm INTEGER
);
CREATE INDEX IF NOT EXISTS hop_records_path ON hop_records (source_node, path_seq);
CREATE INDEX IF NOT EXISTS hop_records_time ON hop_records (received_ns);
CREATE TABLE IF NOT EXISTS path_ends (
  received_ns  INTEGER NOT NULL,
  node_id      INTEGER NOT NULL,  -- the last hop
  source_node  INTEGER NOT NULL,
  path_seq     INTEGER NOT NULL,
  hops         INTEGER NOT NULL,  -- the path's length
  src_ip       TEXT,
  dst_ip       TEXT,
  protocol     INTEGER,
  src_port     INTEGER,
  dst_port     INTEGER
);
CREATE INDEX IF NOT EXISTS path_ends_time ON path_ends (received_ns);
)sql";

// One row per hop of a path id, and one notice: a report received again
// takes the place of the row it repeats (INSERT OR REPLACE), so that
// repeats cost one row however many come, and a path id's join with its
// notice stays as long as the path. A file written before these indexes
// existed keeps the latest of each hop's rows.
constexpr const char* kUniqueIndexes = R"sql(
DELETE FROM hop_records WHERE rowid NOT IN
  (SELECT max(rowid) FROM hop_records GROUP BY source_node, path_seq, hop_index);
CREATE UNIQUE INDEX IF NOT EXISTS hop_records_hop ON hop_records (source_node, path_seq, hop_index);
DELETE FROM path_ends WHERE rowid NOT IN
  (SELECT max(rowid) FROM path_ends GROUP BY source_node, path_seq);
CREATE UNIQUE INDEX IF NOT EXISTS path_ends_path ON path_ends (source_node, path_seq);
)sql";
constexpr const char* kHasUniqueIndexes =
    "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
    "name IN ('hop_records_hop', 'path_ends_path')";

constexpr const char* kInsertHop =
    "INSERT OR REPLACE INTO hop_records VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
    "?14, ?15, ?16, ?17, ?18, ?19)";
constexpr const char* kInsertEnd =
    "INSERT OR REPLACE INTO path_ends VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
// Rows to delete, at most ?2 of them: received before ?1, or (cap) with a
// rowid at or below ?1, the oldest first.
constexpr const char* kPruneSql[4] = {
    "DELETE FROM hop_records WHERE rowid IN (SELECT rowid FROM hop_records "
    "WHERE received_ns < ?1 LIMIT ?2)",
    "DELETE FROM hop_records WHERE rowid IN (SELECT rowid FROM hop_records "
    "WHERE rowid <= ?1 ORDER BY rowid LIMIT ?2)",
    "DELETE FROM path_ends WHERE rowid IN (SELECT rowid FROM path_ends "
    "WHERE received_ns < ?1 LIMIT ?2)",
    "DELETE FROM path_ends WHERE rowid IN (SELECT rowid FROM path_ends "
    "WHERE rowid <= ?1 ORDER BY rowid LIMIT ?2)",
};
constexpr const char* kMaxRowid[2] = {"SELECT max(rowid) FROM hop_records",
                                      "SELECT max(rowid) FROM path_ends"};

// Each recent notice with its hops, in path order; a path is complete when
// its hops are exactly indices 1..hops.
constexpr const char* kSelectTraversals = R"sql(
SELECT e.rowid, e.hops, e.src_ip, e.dst_ip, h.hop_index, h.node_id, h.ingress_port,
       h.egress_port, h.hop_latency_ns, h.tx_utilization_ppm
FROM (SELECT rowid, * FROM path_ends WHERE received_ns >= ?1
      ORDER BY received_ns DESC LIMIT ?2) AS e
JOIN hop_records AS h
  ON h.source_node = e.source_node AND h.path_seq = e.path_seq
 AND h.received_ns BETWEEN e.received_ns - ?3 AND e.received_ns + ?3
ORDER BY e.rowid DESC, h.hop_index
)sql";

// The datagram's addresses and ports from the report's inner IPv4 and UDP
// headers (an IPv4 header with options: addresses only).
struct Flow {
  bool known = false;
  char src[INET_ADDRSTRLEN] = {};
  char dst[INET_ADDRSTRLEN] = {};
  uint8_t protocol = 0;
  bool ports = false;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
};

Flow FlowOf(const HopReport& r) {
  Flow f;
  if (!r.has_inner || (r.inner[0] >> 4) != 4) return f;
  f.known = true;
  inet_ntop(AF_INET, r.inner + 12, f.src, sizeof(f.src));
  inet_ntop(AF_INET, r.inner + 16, f.dst, sizeof(f.dst));
  f.protocol = r.inner[9];
  if ((r.inner[0] & 0x0F) == 5) {
    f.ports = true;
    f.src_port = static_cast<uint16_t>(r.inner[20] << 8 | r.inner[21]);
    f.dst_port = static_cast<uint16_t>(r.inner[22] << 8 | r.inner[23]);
  }
  return f;
}

// Binds the flow's five columns from parameter `first` on (NULL when unknown).
void BindFlow(sqlite3_stmt* s, int first, const Flow& f) {
  if (!f.known) {
    for (int i = 0; i < 5; ++i) sqlite3_bind_null(s, first + i);
    return;
  }
  sqlite3_bind_text(s, first, f.src, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, first + 1, f.dst, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(s, first + 2, f.protocol);
  if (f.ports) {
    sqlite3_bind_int(s, first + 3, f.src_port);
    sqlite3_bind_int(s, first + 4, f.dst_port);
  } else {
    sqlite3_bind_null(s, first + 3);
    sqlite3_bind_null(s, first + 4);
  }
}

void BindIf(sqlite3_stmt* s, int i, bool recorded, int64_t v) {
  if (recorded) {
    sqlite3_bind_int64(s, i, v);
  } else {
    sqlite3_bind_null(s, i);
  }
}

uint32_t ParseIp(const unsigned char* text) {
  in_addr a{};
  if (text == nullptr || inet_pton(AF_INET, reinterpret_cast<const char*>(text), &a) != 1) return 0;
  return ntohl(a.s_addr);
}

}  // namespace

common::Result<RecordStore> RecordStore::Open(const std::string& path, Access access) {
  RecordStore s;
  const int flags = access == Access::kRead ? SQLITE_OPEN_READONLY
                                            : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &s.db_, flags, nullptr) != SQLITE_OK) {
    return common::Unavailable("cannot open the record file " + path + ": " +
                               (s.db_ != nullptr ? sqlite3_errmsg(s.db_) : "out of memory"));
  }
  // Readers (sqlite3, the HTTP API) may hold the file briefly.
  sqlite3_busy_timeout(s.db_, 2000);
  if (access == Access::kWrite) {
    RETURN_IF_ERROR(s.Exec(kSchema));
    ASSIGN_OR_RETURN(const int64_t unique, s.QueryInt(kHasUniqueIndexes));
    if (unique != 2) {
      RETURN_IF_ERROR(s.Exec("BEGIN"));
      RETURN_IF_ERROR(s.Exec(kUniqueIndexes));
      RETURN_IF_ERROR(s.Exec("COMMIT"));
    }
  }
  std::vector<std::pair<const char*, sqlite3_stmt**>> statements = {
      {kSelectTraversals, &s.select_traversals_}};
  if (access == Access::kWrite) {
    statements.push_back({kInsertHop, &s.insert_hop_});
    statements.push_back({kInsertEnd, &s.insert_end_});
  }
  for (auto [sql, stmt] : statements) {
    if (sqlite3_prepare_v2(s.db_, sql, -1, stmt, nullptr) != SQLITE_OK) {
      return common::Internal(std::string("record file ") + path + ": " + sqlite3_errmsg(s.db_));
    }
  }
  return s;
}

RecordStore::RecordStore(RecordStore&& o) noexcept { *this = std::move(o); }

RecordStore& RecordStore::operator=(RecordStore&& o) noexcept {
  std::swap(db_, o.db_);
  std::swap(insert_hop_, o.insert_hop_);
  std::swap(insert_end_, o.insert_end_);
  std::swap(select_traversals_, o.select_traversals_);
  std::swap(in_transaction_, o.in_transaction_);
  std::swap(hop_rows_, o.hop_rows_);
  std::swap(path_end_rows_, o.path_end_rows_);
  return *this;
}

RecordStore::~RecordStore() {
  if (db_ == nullptr) return;
  if (in_transaction_) (void)Flush();
  sqlite3_finalize(insert_hop_);
  sqlite3_finalize(insert_end_);
  sqlite3_finalize(select_traversals_);
  sqlite3_close(db_);
}

common::Status RecordStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return common::Internal("record file: " + m);
  }
  return common::Status::Ok();
}

common::Result<int64_t> RecordStore::QueryInt(const char* sql) const {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) {
    return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  }
  const int rc = sqlite3_step(s);
  const int64_t v = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
  sqlite3_finalize(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  }
  return v;
}

common::Result<uint64_t> RecordStore::Delete(const char* sql, int64_t bound, uint64_t budget) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) != SQLITE_OK) {
    return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  }
  sqlite3_bind_int64(s, 1, bound);
  sqlite3_bind_int64(s, 2, static_cast<int64_t>(std::min<uint64_t>(budget, INT64_MAX)));
  const int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  return static_cast<uint64_t>(sqlite3_changes(db_));
}

common::Result<RecordStore::Pruned> RecordStore::Prune(int64_t before_ns, uint64_t max_rows,
                                                       uint64_t budget) {
  Pruned out;
  for (size_t t = 0; t < 2; ++t) {
    ASSIGN_OR_RETURN(out.aged[t], Delete(kPruneSql[2 * t], before_ns, budget));
    ASSIGN_OR_RETURN(const int64_t last, QueryInt(kMaxRowid[t]));
    // Rowids ascend with each insert, a repeat's too: the rows past the
    // cap are those more than max_rows rowids behind the last.
    if (last > 0 && static_cast<uint64_t>(last) > max_rows) {
      ASSIGN_OR_RETURN(out.capped[t],
                       Delete(kPruneSql[2 * t + 1], last - static_cast<int64_t>(max_rows), budget));
    }
  }
  return out;
}

void RecordStore::Interrupt() { sqlite3_interrupt(db_); }

common::Status RecordStore::Add(const HopReport& r, int64_t received_ns) {
  if (!in_transaction_) {
    RETURN_IF_ERROR(Exec("BEGIN"));
    in_transaction_ = true;
  }
  const Flow flow = FlowOf(r);
  sqlite3_stmt* s = insert_hop_;
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, received_ns);
  sqlite3_bind_int64(s, 2, r.node_id);
  sqlite3_bind_int(s, 3, r.hw_id);
  sqlite3_bind_int64(s, 4, r.sequence);
  sqlite3_bind_int64(s, 5, r.source_node);
  sqlite3_bind_int64(s, 6, r.path_seq);
  sqlite3_bind_int64(s, 7, r.hop_index);
  sqlite3_bind_int(s, 8, r.last_hop ? 1 : 0);
  BindFlow(s, 9, flow);
  const uint16_t bits = r.instructions;
  BindIf(s, 14, bits & instr::kPorts, r.hop.ingress_port);
  BindIf(s, 15, bits & instr::kPorts, r.hop.egress_port);
  BindIf(s, 16, bits & instr::kHopLatency, r.hop.hop_latency_ns);
  BindIf(s, 17, bits & instr::kQueue, r.hop.queue_id);
  BindIf(s, 18, bits & instr::kQueue, r.hop.queue_occupancy);
  BindIf(s, 19, bits & instr::kTxUtil, r.hop.tx_utilization);
  if (sqlite3_step(s) != SQLITE_DONE) return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  ++hop_rows_;
  if (!r.last_hop) return common::Status::Ok();
  s = insert_end_;
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, received_ns);
  sqlite3_bind_int64(s, 2, r.node_id);
  sqlite3_bind_int64(s, 3, r.source_node);
  sqlite3_bind_int64(s, 4, r.path_seq);
  sqlite3_bind_int64(s, 5, r.hop_index);
  BindFlow(s, 6, flow);
  if (sqlite3_step(s) != SQLITE_DONE) return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  ++path_end_rows_;
  return common::Status::Ok();
}

common::Status RecordStore::Flush() {
  if (!in_transaction_) return common::Status::Ok();
  in_transaction_ = false;
  return Exec("COMMIT");
}

common::Result<std::vector<Traversal>> RecordStore::Traversals(int64_t since_ns, size_t limit) const {
  sqlite3_stmt* s = select_traversals_;
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, since_ns);
  sqlite3_bind_int64(s, 2, static_cast<int64_t>(limit));
  sqlite3_bind_int64(s, 3, kPathWindowNs);
  std::vector<Traversal> out;
  int64_t current = -1;
  int64_t hops = 0;
  bool whole = false;
  // A notice's traversal is kept when its rows were exactly hops 1..n.
  const auto finish = [&] {
    if (current >= 0 && (!whole || static_cast<int64_t>(out.back().hops.size()) != hops)) {
      out.pop_back();
    }
  };
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int64_t rowid = sqlite3_column_int64(s, 0);
    if (rowid != current) {
      finish();
      current = rowid;
      hops = sqlite3_column_int64(s, 1);
      whole = true;
      out.push_back({ParseIp(sqlite3_column_text(s, 2)), ParseIp(sqlite3_column_text(s, 3)), {}});
    }
    Traversal& t = out.back();
    const int64_t index = sqlite3_column_int64(s, 4);
    const auto have = static_cast<int64_t>(t.hops.size());
    if (index <= have) continue;  // a report received twice
    if (index != have + 1) {
      whole = false;  // a hop's report is missing
      continue;
    }
    PathHop h;
    h.node_id = static_cast<uint32_t>(sqlite3_column_int64(s, 5));
    h.ingress_port = static_cast<uint16_t>(sqlite3_column_int(s, 6));
    h.egress_port = static_cast<uint16_t>(sqlite3_column_int(s, 7));
    h.hop_latency_ns = static_cast<uint32_t>(sqlite3_column_int64(s, 8));
    if (sqlite3_column_type(s, 9) != SQLITE_NULL) {
      h.tx_utilization_ppm = static_cast<uint32_t>(sqlite3_column_int64(s, 9));
    }
    t.hops.push_back(h);
  }
  finish();
  if (rc != SQLITE_DONE) return common::Internal(std::string("record file: ") + sqlite3_errmsg(db_));
  return out;
}

}  // namespace aggswitch::telemetry
