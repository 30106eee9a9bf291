#include "telemetry/record_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace aggswitch::telemetry {
namespace {

// The datagram's IPv4 and UDP headers: 10.0.0.1:5000 -> 10.0.0.2:47000.
const uint8_t kInner[kReportInnerBytes] = {0x45, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0,
                                           10, 0, 0, 1, 10, 0, 0, 2,
                                           0x13, 0x88, 0xb7, 0x98, 0, 40, 0, 0};

HopReport Hop(uint32_t node, uint32_t index, uint32_t of, uint32_t seq, uint32_t latency_ns) {
  HopReport r;
  r.node_id = node;
  r.sequence = seq;
  r.last_hop = index == of;
  r.instructions = instr::kLatencySet & ~instr::kNodeId;
  r.hop.node_id = node;
  r.hop.ingress_port = 1;
  r.hop.egress_port = static_cast<uint16_t>(node + 1);
  r.hop.hop_latency_ns = latency_ns;
  r.hop.queue_occupancy = 3;
  r.source_node = 100;
  r.path_seq = seq;
  r.hop_index = index;
  r.inner = kInner;
  r.has_inner = true;
  return r;
}

class RecordStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/record_store_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/int.db";
  }
  void TearDown() override { (void)std::system(("rm -rf " + dir_).c_str()); }

  // The first column of the first row of `sql`, read as an operator would:
  // another connection to the file.
  std::string Query(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string out = "<none>";
    if (sqlite3_step(s) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(s, 0);
      out = t == nullptr ? "NULL" : reinterpret_cast<const char*>(t);
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return out;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(RecordStoreTest, ARowPerHopAndOnePerEndOfPathNotice) {
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  for (uint32_t i = 1; i <= 3; ++i) ASSERT_TRUE(store->Add(Hop(i, i, 3, 7, 1000 * i), 5).ok());
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records"), "0") << "not committed yet";
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->hop_rows(), 3u);
  EXPECT_EQ(store->path_end_rows(), 1u);
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records WHERE source_node = 100 AND path_seq = 7"), "3");
  EXPECT_EQ(Query("SELECT sum(hop_latency_ns) FROM hop_records"), "6000");
  EXPECT_EQ(Query("SELECT src_ip || ':' || src_port || ' > ' || dst_ip || ':' || dst_port "
                  "FROM hop_records LIMIT 1"),
            "10.0.0.1:5000 > 10.0.0.2:47000");
  EXPECT_EQ(Query("SELECT hops || ' ' || node_id FROM path_ends"), "3 3");
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records WHERE tx_utilization_ppm IS NULL"), "3")
      << "latency only: no utilisation recorded";
  EXPECT_EQ(Query("PRAGMA journal_mode"), "wal");
}

TEST_F(RecordStoreTest, TraversalsAreTheCompletePathsInOrder) {
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok());
  // Datagram 1: hops in any order, one report twice. Datagram 2: hop 2 lost.
  // Datagram 3: no notice yet.
  for (uint32_t i : {3u, 1u, 2u, 2u}) ASSERT_TRUE(store->Add(Hop(i, i, 3, 1, 100 * i), 10).ok());
  for (uint32_t i : {1u, 3u}) ASSERT_TRUE(store->Add(Hop(i, i, 3, 2, 100), 10).ok());
  for (uint32_t i : {1u, 2u}) ASSERT_TRUE(store->Add(Hop(i, i, 3, 3, 100), 10).ok());
  ASSERT_TRUE(store->Flush().ok());
  auto t = store->Traversals(0);
  ASSERT_TRUE(t.ok()) << t.status().message();
  ASSERT_EQ(t->size(), 1u);
  const Traversal& d = (*t)[0];
  EXPECT_EQ(d.src_ip, 0x0a000001u);
  EXPECT_EQ(d.dst_ip, 0x0a000002u);
  ASSERT_EQ(d.hops.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d.hops[i].node_id, i + 1);
    EXPECT_EQ(d.hops[i].hop_latency_ns, 100 * (i + 1));
    EXPECT_FALSE(d.hops[i].tx_utilization_ppm.has_value());
  }
  EXPECT_TRUE(store->Traversals(11)->empty()) << "only notices since the time asked";
}

// A switch that restarted numbers its paths from the start again: a path id
// seen long before is another datagram's.
TEST_F(RecordStoreTest, AReusedPathIdJoinsOnlyReportsOfItsOwnTime) {
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->Add(Hop(1, 1, 2, 9, 100), 0).ok());
  const int64_t later = 2 * RecordStore::kPathWindowNs;
  ASSERT_TRUE(store->Add(Hop(2, 2, 2, 9, 100), later).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_TRUE(store->Traversals(0)->empty());
  ASSERT_TRUE(store->Add(Hop(1, 1, 2, 9, 100), later).ok());
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(store->Traversals(0)->size(), 1u);
}

// A report received again takes the place of the row it repeats: 6,000
// copies of one path's reports are that path's three rows and its notice,
// and the analysis joins three rows, not 6,000 x 6,000.
TEST_F(RecordStoreTest, RepeatedReportsOfAPathTakeOneRowPerHop) {
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok());
  for (int k = 0; k < 2000; ++k) {
    for (uint32_t i = 1; i <= 3; ++i) ASSERT_TRUE(store->Add(Hop(i, i, 3, 7, 100 * i), 10 + k).ok());
  }
  ASSERT_TRUE(store->Flush().ok());
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records"), "3");
  EXPECT_EQ(Query("SELECT count(*) FROM path_ends"), "1");
  EXPECT_EQ(Query("SELECT min(received_ns) FROM hop_records"), "2009") << "the latest copy";
  EXPECT_EQ(store->hop_rows(), 6000u) << "rows written, repeats too";
  auto t = store->Traversals(0);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].hops.size(), 3u);
}

// A file written before the one-row-per-hop indexes keeps the latest of a
// hop's rows, and gets the indexes.
TEST_F(RecordStoreTest, AnOlderFileKeepsTheLatestRowOfEachHop) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE hop_records (received_ns INTEGER NOT NULL, node_id INTEGER "
                         "NOT NULL, hw_id INTEGER NOT NULL, report_seq INTEGER NOT NULL, "
                         "source_node INTEGER NOT NULL, path_seq INTEGER NOT NULL, hop_index "
                         "INTEGER NOT NULL, last_hop INTEGER NOT NULL, src_ip TEXT, dst_ip TEXT, "
                         "protocol INTEGER, src_port INTEGER, dst_port INTEGER, ingress_port "
                         "INTEGER, egress_port INTEGER, hop_latency_ns INTEGER, queue_id INTEGER, "
                         "queue_occupancy INTEGER, tx_utilization_ppm INTEGER);"
                         "INSERT INTO hop_records (received_ns, node_id, hw_id, report_seq, "
                         "source_node, path_seq, hop_index, last_hop) VALUES "
                         "(1, 1, 0, 0, 100, 5, 1, 0), (2, 1, 0, 1, 100, 5, 1, 0), "
                         "(3, 2, 0, 0, 100, 5, 2, 1);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records"), "2");
  EXPECT_EQ(Query("SELECT received_ns FROM hop_records WHERE hop_index = 1"), "2");
  EXPECT_EQ(Query("SELECT count(*) FROM sqlite_master WHERE name = 'hop_records_hop'"), "1");
}

// Rows past the retention go, and rows past the cap, the oldest first, a
// bounded number per call.
TEST_F(RecordStoreTest, PruneDeletesRowsPastTheRetentionOrTheCapInBoundedShares) {
  auto store = RecordStore::Open(path_);
  ASSERT_TRUE(store.ok());
  // Paths 1..10 of two hops each, path p received at time p.
  for (uint32_t p = 1; p <= 10; ++p) {
    for (uint32_t i = 1; i <= 2; ++i) ASSERT_TRUE(store->Add(Hop(i, i, 2, p, 100), p).ok());
  }
  ASSERT_TRUE(store->Flush().ok());
  // Received before 4: paths 1..3, 6 hop rows and 3 notices; 4 at a time.
  auto pruned = store->Prune(4, 1000, 4);
  ASSERT_TRUE(pruned.ok()) << pruned.status().message();
  EXPECT_EQ(pruned->aged[0], 4u);
  EXPECT_EQ(pruned->aged[1], 3u);
  EXPECT_EQ(pruned->capped[0], 0u);
  pruned = store->Prune(4, 1000, 4);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(pruned->aged[0], 2u);
  EXPECT_EQ(Query("SELECT min(received_ns) FROM hop_records"), "4");
  // A cap of 6 rows a table: of the 14 hop rows left (paths 4 to 10), those
  // of paths 4 to 7 go; of the 7 notices (paths 4 to 10), path 4's.
  pruned = store->Prune(0, 6, 100);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(pruned->aged[0], 0u);
  EXPECT_EQ(pruned->capped[0], 8u);
  EXPECT_EQ(pruned->capped[1], 1u);
  EXPECT_EQ(Query("SELECT count(*) FROM hop_records"), "6");
  EXPECT_EQ(Query("SELECT min(path_seq) FROM hop_records"), "8");
  EXPECT_EQ(Query("SELECT count(*) FROM path_ends"), "6");
  EXPECT_EQ(store->Traversals(0)->size(), 3u);
}

TEST_F(RecordStoreTest, AnExistingFileIsKeptAndAnUnwritableOneIsAnError) {
  {
    auto store = RecordStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(store->Add(Hop(1, 1, 1, 1, 100), 1).ok());
  }  // committed on close
  auto again = RecordStore::Open(path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Traversals(0)->size(), 1u);
  auto bad = RecordStore::Open(dir_ + "/no/such/dir/int.db");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot open the record file"), std::string::npos);
}

}  // namespace
}  // namespace aggswitch::telemetry
