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
