// EtcdRecords against a real etcd (Debian's etcd-server), started on
// loopback by the test and torn down with it: items, nodes on leases, the
// compare-and-swap merge under concurrent writers, a lease that lapses.
#include "cache/etcd_records.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tests/lib/test_process.h"

namespace aggswitch::cache {
namespace {

using tools::TestProcess;

class EtcdRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/aggswitch-etcd-test." + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const uint16_t client = tools::FreeTcpPort();
    const uint16_t peer = tools::FreeTcpPort();
    endpoint_ = "127.0.0.1:" + std::to_string(client);
    etcd_ = TestProcess::Start(
        {"/usr/bin/etcd", "--data-dir", dir_ + "/data", "--listen-client-urls", "http://" + endpoint_,
         "--advertise-client-urls", "http://" + endpoint_, "--listen-peer-urls",
         "http://127.0.0.1:" + std::to_string(peer), "--initial-advertise-peer-urls",
         "http://127.0.0.1:" + std::to_string(peer), "--initial-cluster",
         "default=http://127.0.0.1:" + std::to_string(peer)},
        dir_ + "/etcd.log");
    ASSERT_NE(etcd_, nullptr);
    for (int i = 0; i < 100 && !records_; ++i) {
      auto r = OpenRecords("etcd://" + endpoint_, "/test");
      if (r.ok()) records_ = std::move(r).value();
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(records_, nullptr) << tools::ReadFile(dir_ + "/etcd.log");
  }
  void TearDown() override {
    records_.reset();
    etcd_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_, endpoint_;
  std::unique_ptr<TestProcess> etcd_;
  std::unique_ptr<Records> records_;
};

size_t Rank(const std::string& node) { return static_cast<size_t>(node[1] - '0'); }

TEST_F(EtcdRecordsTest, ItemsMergeUnderConcurrentWriters) {
  const ItemRecord fresh{"dir/item 1.bin", 100, 9, 77, {}};
  // Eight writers, each its own connection, add themselves at once.
  std::vector<std::thread> writers;
  for (int n = 1; n <= 8; ++n) {
    writers.emplace_back([&, n] {
      auto r = OpenRecords("etcd://" + endpoint_, "/test");
      ASSERT_TRUE(r.ok());
      const Holder h{"n" + std::to_string(n), uint64_t(n) * 4096, uint32_t(n)};
      EXPECT_TRUE((*r)->AddHolder("ds", fresh, h, Rank).ok());
    });
  }
  for (auto& t : writers) t.join();
  auto got = records_->Get("ds", "dir/item 1.bin");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  ASSERT_EQ((*got)->holders.size(), 8u) << "no writer's entry was lost";
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ((*got)->holders[i].node, "n" + std::to_string(i + 1));
  EXPECT_EQ(records_->List("ds")->size(), 1u);
  EXPECT_TRUE(records_->List("d")->empty()) << "a prefix of the dataset name is another dataset";
  for (int n = 1; n <= 8; ++n) ASSERT_TRUE(records_->RemoveHolder("ds", fresh.item, "n" + std::to_string(n)).ok());
  EXPECT_FALSE(records_->Get("ds", fresh.item)->has_value());
}

TEST_F(EtcdRecordsTest, AManifestLargerThanOneValueComesBackWhole) {
  std::string manifest;
  for (int i = 0; i < 60000; ++i) manifest += "train/" + std::to_string(i) + ".bin " + std::to_string(i) + "\n";
  ASSERT_GT(manifest.size(), 2 * Records::kManifestPiece);
  ASSERT_TRUE(records_->PutManifest("ds", manifest).ok());
  EXPECT_EQ(*records_->Manifest("ds"), manifest);
  ASSERT_TRUE(records_->PutManifest("ds", "a 1\n").ok());
  EXPECT_EQ(*records_->Manifest("ds"), "a 1\n") << "the old pieces are gone";
  EXPECT_EQ(*records_->Manifest("other"), "");
}

TEST_F(EtcdRecordsTest, ANodeRecordLivesOnItsLease) {
  NodeRecord n{"n1", "10.0.0.1:7400", "/dev/shm/r", 1 << 20, 2 << 20, 5, 1, {"n1"}};
  ASSERT_TRUE(records_->PutNode(n, 2).ok());
  ASSERT_EQ(records_->Nodes()->size(), 1u);
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ASSERT_TRUE(records_->KeepAlive().ok());
  }
  EXPECT_EQ(records_->Nodes()->size(), 1u) << "kept alive past its TTL";
  // Not renewed: etcd removes it (leases are checked about every 500 ms).
  bool gone = false;
  for (int i = 0; i < 60 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = records_->Nodes()->empty();
  }
  EXPECT_TRUE(gone);
  EXPECT_FALSE(records_->KeepAlive().ok()) << "an expired lease is an error, so the daemon announces again";
  ASSERT_TRUE(records_->PutNode(n, 10).ok());
  ASSERT_TRUE(records_->DropNode("n1").ok());
  EXPECT_TRUE(records_->Nodes()->empty());
}

TEST_F(EtcdRecordsTest, AMalformedRecordIsSkippedAndCounted) {
  ASSERT_TRUE(records_->AddHolder("ds", ItemRecord{"good", 10, 1, 2, {}}, Holder{"n1", 4096, 7}, Rank).ok());
  ASSERT_TRUE(records_->PutNode(NodeRecord{"n1", "10.0.0.1:7400", "/dev/shm/r", 1 << 20, 2 << 20, 5, 1, {"n1"}}, 10).ok());
  // Written by something else: etcdctl, as an operator would.
  const std::string put = "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=http://" + endpoint_ + " put ";
  ASSERT_EQ(std::system((put + "/test/items/ds/bad '{\"item\": 7' >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((put + "/test/nodes/ghost '[1, 2]' >/dev/null").c_str()), 0);
  auto items = records_->List("ds");
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  ASSERT_EQ(items->size(), 1u);
  EXPECT_EQ((*items)[0].item, "good");
  EXPECT_EQ(records_->malformed(), 1u);
  auto nodes = records_->Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ(records_->malformed(), 2u);
}

TEST_F(EtcdRecordsTest, AnUnreachableEtcdIsAnError) {
  etcd_.reset();
  auto got = records_->Get("ds", "x");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), common::StatusCode::kUnavailable);
  EXPECT_NE(got.status().message().find(endpoint_), std::string::npos) << got.status().message();
  EXPECT_FALSE(OpenRecords("etcd://" + endpoint_, "/test").ok());
}

}  // namespace
}  // namespace aggswitch::cache
