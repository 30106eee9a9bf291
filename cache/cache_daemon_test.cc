// Two cache daemons and loaders in one process, over UCX's TCP transport on
// loopback, with file records and a directory store: fill, remote and local
// loads, a refused job, a miss, stale and malformed records, an owner gone,
// requests passed over, and request bytes that outlive their loader.
#include "cache/cache_daemon.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cache/handshake.h"
#include "cache/loader.h"
#include "cache/ucx_transport.h"
#include "tests/lib/test_process.h"

namespace aggswitch::cache {
namespace {

class CacheDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = "/tmp/aggswitch-cache-daemon-test." + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/store/shard");
    std::mt19937 rng(11);
    for (int i = 0; i < 40; ++i) {
      std::string bytes(1 + rng() % 200000, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      const std::string name = "shard/" + std::to_string(1000 + i) + ".bin";
      std::ofstream(dir_ + "/store/" + name, std::ios::binary) << bytes;
      source_[name] = bytes;
    }
    records_ = "file:" + dir_ + "/records.json";
    for (int n = 0; n < 2; ++n) {
      DaemonConfig c;
      c.node = "n" + std::to_string(n + 1);
      c.nodes = {"n1", "n2"};
      // A port the kernel has free now: fixed ones collide with other
      // tests' and with the loaders' own ephemeral ports.
      c.listen = "127.0.0.1:" + std::to_string(tools::FreeTcpPort());
      listens_.push_back(c.listen);
      c.memory = 16 << 20;
      c.region_dir = "/dev/shm";
      c.store = dir_ + "/store";
      c.dataset = "ds";
      c.records = records_;
      c.replicas = 2;
      c.allow_nodes = {*common::Ipv4Prefix::Parse("127.0.0.0/8")};
      c.allow_jobs = {"train"};
      c.ucx_tls = "tcp";
      c.metrics = "";
      auto d = CacheDaemon::Start(c);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      daemons_.push_back(std::move(d).value());
      stops_.push_back(std::make_unique<std::atomic<bool>>(false));
    }
    for (size_t n = 0; n < daemons_.size(); ++n) {
      threads_.emplace_back([this, n] { (void)daemons_[n]->Run(*stops_[n], false); });
    }
    for (int i = 0; i < 1000; ++i) {
      bool done = true;
      for (auto& d : daemons_) done = done && d->stats().initial_fill_done;
      if (done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  void TearDown() override {
    for (size_t n = 0; n < daemons_.size(); ++n) Stop(n);
    daemons_.clear();
    std::filesystem::remove_all(dir_);
  }
  void Stop(size_t n) {
    if (!threads_[n].joinable()) return;
    stops_[n]->store(true);
    threads_[n].join();
  }
  LoaderConfig Config(const std::string& node = "", const std::string& job = "train") {
    LoaderConfig c;
    c.records = records_;
    c.dataset = "ds";
    c.node = node;
    c.job = job;
    c.store = dir_ + "/store";
    c.amount = 1 << 20;
    c.ucx_tls = "tcp";
    c.owner_timeout_ms = 1000;
    return c;
  }
  // Loads one pass; returns how many items differ from the source.
  int LoadAll(Loader& l) {
    int wrong = 0;
    uint64_t items = 0;
    while (items < l.size()) {
      auto b = l.Next();
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok()) return -1;
      for (const auto& it : (*b)->items) {
        const std::string got(reinterpret_cast<const char*>((*b)->data + it.offset), it.length);
        wrong += got != source_[it.name];
      }
      items += (*b)->items.size();
    }
    return wrong;
  }

  std::string dir_, records_;
  std::vector<std::string> listens_;  // each daemon's UCX listener
  std::map<std::string, std::string> source_;
  std::vector<std::unique_ptr<CacheDaemon>> daemons_;
  std::vector<std::unique_ptr<std::atomic<bool>>> stops_;
  std::vector<std::thread> threads_;
};

TEST_F(CacheDaemonTest, FillsEveryItemAndLoadsThemRemotely) {
  for (auto& d : daemons_) {
    EXPECT_TRUE(d->stats().initial_fill_done);
    EXPECT_EQ(d->stats().filled_items, 40u) << "replicas 2 of 2 nodes: each holds all";
    EXPECT_EQ(d->stats().fill_errors, 0u);
  }
  auto records = OpenRecords(records_, kDefaultPrefix);
  ASSERT_TRUE(records.ok());
  auto list = (*records)->List("ds");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 40u);
  for (const ItemRecord& r : *list) EXPECT_EQ(r.holders.size(), 2u) << r.item;

  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats& s = (*loader)->stats();
  EXPECT_EQ(s.owner + s.replica, 40u);
  EXPECT_EQ(s.owner, 40u);
  EXPECT_EQ(s.store, 0u);
  EXPECT_EQ((*loader)->store_requests(), 0u) << "no store reads while everything is cached";
  EXPECT_NE((*loader)->transports().find("tcp/"), std::string::npos) << (*loader)->transports();
}

TEST_F(CacheDaemonTest, ItemsOnThisNodeTakeTheLocalPath) {
  auto loader = Loader::Open(Config("n1"));
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  EXPECT_EQ((*loader)->stats().local, 40u) << "n1 holds every item";
  EXPECT_TRUE((*loader)->transports().empty()) << "no connection was needed";
}

TEST_F(CacheDaemonTest, AJobOutsideTheListIsRefusedAndReadsTheStore) {
  LoaderConfig c = Config("", "intruder");
  auto loader = Loader::Open(c);
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  EXPECT_EQ((*loader)->stats().store, 40u);
  EXPECT_GE(daemons_[0]->stats().refused_job + daemons_[1]->stats().refused_job, 2u);
  c.miss = MissPolicy::kFail;
  auto strict = Loader::Open(c);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ((*strict)->Next().status().code(), common::StatusCode::kNotFound);
}

TEST_F(CacheDaemonTest, AMissReadsThroughAndAsksTheOwnerToFill) {
  auto records = OpenRecords(records_, kDefaultPrefix);
  const std::string item = "shard/1003.bin";
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n1").ok());
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n2").ok());
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  EXPECT_EQ((*loader)->stats().misses, 1u);
  EXPECT_EQ((*loader)->stats().store, 1u);
  EXPECT_EQ((*loader)->stats().fills_requested, 1u);
  for (int i = 0; i < 300 && !(*records)->Get("ds", item)->has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE((*records)->Get("ds", item)->has_value()) << "the owner filled it again";
}

TEST_F(CacheDaemonTest, AStaleRecordIsNeverHandedOut) {
  auto records = OpenRecords(records_, kDefaultPrefix);
  const std::string item = "shard/1005.bin";
  ItemRecord r = **(*records)->Get("ds", item);
  // The record claims another version: the header read after the bytes disagrees.
  ItemRecord lie = r;
  lie.version += 1;
  for (const Holder& h : r.holders) {
    ASSERT_TRUE((*records)->AddHolder("ds", lie, h, [](const std::string& n) { return n == "n1" ? 0 : 1; }).ok());
  }
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  EXPECT_GE((*loader)->stats().stale, 2u);
  EXPECT_EQ((*loader)->stats().store, 1u);
}

TEST_F(CacheDaemonTest, AStaleRecordIsReadAgainAndTheFreshOneServes) {
  auto records = OpenRecords(records_, kDefaultPrefix);
  const std::string item = "shard/1006.bin";
  const ItemRecord truth = **(*records)->Get("ds", item);
  auto rank = [](const std::string& n) { return n == "n1" ? 0 : 1; };
  ItemRecord lie = truth;
  lie.version += 1;
  for (const Holder& h : truth.holders) ASSERT_TRUE((*records)->AddHolder("ds", lie, h, rank).ok());
  auto loader = Loader::Open(Config());  // it knows the stale record
  ASSERT_TRUE(loader.ok());
  for (const Holder& h : truth.holders) ASSERT_TRUE((*records)->AddHolder("ds", truth, h, rank).ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats s = (*loader)->stats();
  EXPECT_EQ(s.stale, 2u) << "both holders' headers disagree with the stale record";
  EXPECT_EQ(s.store, 0u) << "the record read again names where the item is";
  EXPECT_EQ(s.owner + s.replica, 40u);
}

TEST_F(CacheDaemonTest, AMalformedRecordCostsOnlyItsItem) {
  const std::string path = dir_ + "/records.json";
  nlohmann::json j;
  std::ifstream(path) >> j;
  j["items"]["ds"]["shard/1007.bin"] = "not a record";
  j["nodes"]["ghost"] = nlohmann::json::array({1, 2});
  std::ofstream(path, std::ios::trunc) << j.dump();
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats s = (*loader)->stats();
  EXPECT_EQ(s.store, 1u);
  EXPECT_EQ(s.owner + s.replica, 39u);
  EXPECT_GE(s.malformed_records, 2u) << "the item and the node record, each counted";
}

TEST_F(CacheDaemonTest, ALocalRecordOutsideTheRegionIsStaleNotACrash) {
  auto records = OpenRecords(records_, kDefaultPrefix);
  const std::string item = "shard/1009.bin";
  ItemRecord r = **(*records)->Get("ds", item);
  ItemRecord bent = r;
  for (Holder& h : bent.holders) {
    if (h.node == "n1") h.addr = std::numeric_limits<uint64_t>::max() - 8;  // addr + length wraps
  }
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n1").ok());
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n2").ok());
  for (const Holder& h : bent.holders) {
    ASSERT_TRUE((*records)->AddHolder("ds", bent, h, [](const std::string& n) { return n == "n1" ? 0 : 1; }).ok());
  }
  auto loader = Loader::Open(Config("n1"));
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats s = (*loader)->stats();
  EXPECT_EQ(s.local, 39u);
  EXPECT_GE(s.forged, 1u);
  EXPECT_EQ(s.replica + s.store, 1u) << "read from n2, or the store when n2's copy disagrees too";
}

// A record anybody who can write the records may have written: one holder's
// address past the end of the region its daemon announced, the other a node
// that is no node of this cache. Neither is read (over UCX's TCP transport
// nothing else would stop the first read); the item comes from the store.
TEST_F(CacheDaemonTest, ARemoteRecordOutsideTheRegionOrAtAnotherNodeIsRefusedAndCounted) {
  auto records = OpenRecords(records_, kDefaultPrefix);
  const std::string item = "shard/1011.bin";
  const ItemRecord r = **(*records)->Get("ds", item);
  ASSERT_EQ(r.holders.size(), 2u);
  ItemRecord forged = r;
  for (Holder& h : forged.holders) {
    if (h.node == "n1") {
      h.addr += 16 << 20;  // the region's size on: the daemon's memory past its region
    } else {
      h.node = "n9";
    }
  }
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n1").ok());
  ASSERT_TRUE((*records)->RemoveHolder("ds", item, "n2").ok());
  for (const Holder& h : forged.holders) {
    ASSERT_TRUE((*records)->AddHolder("ds", forged, h, [](const std::string& n) { return n == "n1" ? 0 : 1; }).ok());
  }
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats s = (*loader)->stats();
  EXPECT_GE(s.forged, 2u) << "both holders, before and after the record is read again";
  EXPECT_EQ(s.store, 1u);
  EXPECT_EQ(s.owner + s.replica, 39u);
}

// A flood of fill requests: each item of the node's share is queued once
// while it waits, and names the store does not list for the node (or no
// store would take) are ignored without asking the store or the records.
TEST_F(CacheDaemonTest, AFloodOfFillRequestsQueuesOnlyListedItemsOnce) {
  auto ucx = UcxWorker::Create({.tls = "tcp", .net_devices = ""});
  ASSERT_TRUE(ucx.ok());
  auto ep = (*ucx)->Connect(listens_[0], [](void*, ucp_ep_h, ucs_status_t) {}, nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  const CacheDaemon::Stats before = daemons_[0]->stats();
  uint64_t sent = 0;
  const auto send = [&](const std::string& name) {
    ASSERT_EQ((*ucx)->WaitFor((*ucx)->SendAm(*ep, kAmFill, name.data(), name.size(), false), 2000), UCS_OK);
    ++sent;
  };
  for (int i = 0; i < 3000; ++i) {
    send("shard/1000.bin");                                // listed: this node holds every item
    send("shard/unlisted-" + std::to_string(i) + ".bin");  // a name the store does not list
    send("../escape-" + std::to_string(i));                // no store's name
  }
  CacheDaemon::Stats after;
  for (int i = 0; i < 500; ++i) {
    (*ucx)->Progress();
    after = daemons_[0]->stats();
    if (after.fill_requests + after.fill_requests_ignored - before.fill_requests -
            before.fill_requests_ignored == sent) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint64_t queued = after.fill_requests - before.fill_requests;
  const uint64_t ignored = after.fill_requests_ignored - before.fill_requests_ignored;
  EXPECT_EQ(queued + ignored, sent);
  EXPECT_GE(ignored, 6000u) << "every unlisted and invalid name";
  EXPECT_LE(queued, 3000u);
  EXPECT_EQ(after.store_requests - before.store_requests, after.filled_items - before.filled_items)
      << "the store read only for items filled again";
  (*ucx)->Close(*ep, true);
}

// A flood of hellos on one connection from a loader that reads no reply:
// the daemon keeps one reply in flight for the connection, and counts the
// hellos sent again before it went as bad ones, rather than queue a reply
// per hello.
TEST_F(CacheDaemonTest, AFloodOfHellosHoldsOneReplyPerConnection) {
  auto ucx = UcxWorker::Create({.tls = "tcp", .net_devices = ""});
  ASSERT_TRUE(ucx.ok());
  auto ep = (*ucx)->Connect(listens_[0], [](void*, ucp_ep_h, ucs_status_t) {}, nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  const CacheDaemon::Stats before = daemons_[0]->stats();
  const std::string hello = BuildHello("train");
  constexpr uint64_t kSent = 3000;
  std::vector<ucs_status_ptr_t> requests;
  for (uint64_t i = 0; i < kSent; ++i) {
    requests.push_back((*ucx)->SendAm(*ep, kAmHello, hello.data(), hello.size(), true));
  }
  for (ucs_status_ptr_t r : requests) ASSERT_EQ((*ucx)->WaitFor(r, 5000), UCS_OK);
  CacheDaemon::Stats after;
  for (int i = 0; i < 500; ++i) {
    after = daemons_[0]->stats();
    if (after.hellos + after.bad_hellos - before.hellos - before.bad_hellos == kSent) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint64_t answered = after.hellos - before.hellos;
  const uint64_t repeats = after.bad_hellos - before.bad_hellos;
  EXPECT_EQ(answered + repeats, kSent);
  EXPECT_GE(answered, 1u);
  EXPECT_GE(repeats, 1u) << "hellos sent again while the connection's reply waited";
  (*ucx)->Close(*ep, true);
}

// Messages of ids the daemon serves no handler for: the id of its own
// reply, ids between and beyond its own, and the largest. Each is counted and
// dropped, and the daemon goes on serving. (UCX 1.13 alone would call a stray
// handler for some of them: the process would crash.)
TEST_F(CacheDaemonTest, AMessageOfAKindTheDaemonDoesNotServeIsCountedAndDropped) {
  auto ucx = UcxWorker::Create({.tls = "tcp", .net_devices = ""});
  ASSERT_TRUE(ucx.ok());
  auto ep = (*ucx)->Connect(listens_[0], [](void*, ucp_ep_h, ucs_status_t) {}, nullptr);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  const uint64_t before = daemons_[0]->stats().unknown_messages;
  const std::string bytes = BuildHello("train");
  uint64_t sent = 0;
  for (uint16_t id : {0, static_cast<int>(kAmHelloReply), 4, 200, 8191, 32768, 65535}) {
    for (bool want_reply : {false, true}) {
      ASSERT_EQ((*ucx)->WaitFor((*ucx)->SendAm(*ep, static_cast<AmId>(id), bytes.data(), bytes.size(), want_reply),
                                2000),
                UCS_OK)
          << id;
      ++sent;
    }
  }
  uint64_t unknown = 0;
  for (int i = 0; i < 500 && unknown < sent; ++i) {
    (*ucx)->Progress();
    unknown = daemons_[0]->stats().unknown_messages - before;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(unknown, sent);
  EXPECT_EQ((*ucx)->unknown_messages(), 0u) << "the daemon answered none of them";
  (*ucx)->Close(*ep, true);
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  EXPECT_EQ(LoadAll(**loader), 0) << "the daemon serves on";
  EXPECT_EQ((*loader)->stats().store, 0u);
}

TEST_F(CacheDaemonTest, ASkippedRequestIsNotRead) {
  LoaderConfig c = Config();
  c.amount = 600000;
  auto loader = Loader::Open(c);
  ASSERT_TRUE(loader.ok());
  auto first = (*loader)->Next();
  ASSERT_TRUE(first.ok());
  const size_t first_items = (*first)->items.size();
  auto skipped = (*loader)->Skip();
  ASSERT_TRUE(skipped.ok());
  ASSERT_GE(*skipped, 1u);
  auto third = (*loader)->Next();
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)->items[0].name, (*loader)->name(first_items + *skipped));
  EXPECT_EQ((*loader)->stats().requests, 2u);
  EXPECT_EQ((*loader)->stats().items, first_items + (*third)->items.size()) << "nothing read for the skipped one";
}

TEST_F(CacheDaemonTest, RequestBytesOutliveALargerRequestAndTheLoader) {
  LoaderConfig c = Config();
  c.amount = 300000;
  auto loader = Loader::Open(c);
  ASSERT_TRUE(loader.ok());
  auto small = (*loader)->Next();
  ASSERT_TRUE(small.ok());
  const Loader::Item kept = (*small)->items[0];
  std::shared_ptr<const uint8_t> storage = (*small)->storage;
  const uint8_t* data = (*small)->data;
  ASSERT_TRUE((*loader)->SetRequest(64 << 20, Component::kCpu).ok());
  ASSERT_TRUE((*loader)->Next().ok());  // a larger buffer replaces the first
  loader->reset();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data + kept.offset), kept.length), source_[kept.name])
      << "the first request's memory is still mapped, and nothing wrote over it";
}

TEST_F(CacheDaemonTest, AnOwnerGoneFallsBackToTheReplica) {
  auto loader = Loader::Open(Config());
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->Next().ok());  // connected to the owners
  // n1 goes away; the loader still holds the records that name it first.
  auto records = OpenRecords(records_, kDefaultPrefix);
  const size_t before = (*records)->List("ds")->size();
  stops_[0]->store(true);
  threads_[0].join();
  daemons_[0].reset();  // the region and listener are gone
  EXPECT_EQ((*records)->List("ds")->size(), before);
  (*loader)->Seek(0);
  EXPECT_EQ(LoadAll(**loader), 0);
  const Loader::Stats& s = (*loader)->stats();
  EXPECT_EQ(s.store, 0u);
  EXPECT_GT(s.replica, 0u);
}

}  // namespace
}  // namespace aggswitch::cache
