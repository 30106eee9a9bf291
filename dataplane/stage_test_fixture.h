// A bench for one worker stage on its own, without a Dataplane: EAL (through
// EalEnvironment), an mbuf pool, four net_ring ports whose TX rings the test
// reads, the ForwardingPlan of the dataplane tests' switch (a0, a1: access
// VLAN 10; b: access VLAN 20; t: trunk [10, 20], native 30), an LcoreStats
// and the TxBuffers every stage ends in.
//
//   class L2StageTest : public StageTest {};
//   TEST_F(L2StageTest, X) { rte_mbuf* m = Mbuf(frame); ...; tx().Flush(); auto out = Sent(); }
//
// Thread safety: test code; everything runs on the test's main thread.
#pragma once

#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/slot_table.h"
#include "config/loader.h"
#include "dataplane/counters.h"
#include "dataplane/dataplane_test_fixture.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/tx_buffers.h"

namespace aggswitch::dataplane::fixtures {

// The dataplane tests' frame builders and parsers, for tests without a Dataplane.
struct Frames : AggregationTest {
  using AggregationTest::Contribution;
  using AggregationTest::Datagram;
  using AggregationTest::DatagramFrom;
  using AggregationTest::Int32Payload;
  using AggregationTest::MemberIp;
  using AggregationTest::MemberMac;
  using AggregationTest::MemberPort;
  using AggregationTest::ParseResult;
  using AggregationTest::Result;
  using DataplaneTest::DrainRing;
};

// The key of the stage tests' jobs.
inline constexpr uint64_t kStageKey = 0x5eed;

// A slot release check that keeps every slot: the stage tests release none.
inline bool KeepSlots(void*, uint32_t, uint32_t, uint32_t, bool) { return false; }

// Members [0, n) of `job` contribute the value m + 1 (one int32) to chunk
// `seq` in slot `local` of `slots`, which waits for `needed` of them (0:
// every member); returns the slot.
inline const aggregator::Slot& ContributeInSlot(aggregator::SlotTable& slots, uint32_t local,
                                                const aggregator::Job& job, uint32_t seq,
                                                uint16_t n, uint64_t tsc, uint16_t needed = 0) {
  const aggregator::Slot* slot = nullptr;
  for (uint16_t m = 0; m < n; ++m) {
    const int32_t v = m + 1;
    aggregator::Contribution c;
    c.job_id = job.id();
    c.job_generation = job.generation();
    c.seq = seq;
    c.node = m;
    c.expected = job.members();
    c.needed = needed;
    c.elem_count = 1;
    c.payload = reinterpret_cast<const uint8_t*>(&v);
    slot = slots.Contribute(local, c, tsc, KeepSlots, nullptr).slot;
  }
  return *slot;
}

// ContributeInSlot, in slot 0.
inline const aggregator::Slot& ContributeInSlot0(aggregator::SlotTable& slots,
                                                 const aggregator::Job& job, uint32_t seq,
                                                 uint16_t n, uint64_t tsc, uint16_t needed = 0) {
  return ContributeInSlot(slots, 0, job, seq, n, tsc, needed);
}

class StageTest : public ::testing::Test {
 protected:
  static constexpr int kPorts = 4;

  void SetUp() override { Build(""); }

  // The switch of DataplaneTest with `extra` config (aggregation: ...) and
  // ports[].faults where `faults` names them.
  // `linear_ports`: ports TxBuffers treats as sending single buffers only.
  void Build(const std::string& extra, unsigned tx_ring_size = 256, uint64_t linear_ports = 0) {
    TearDown();
    static int instance = 0;
    ++instance;
    std::string ports;
    const char* const modes[kPorts] = {"access: 10", "access: 10", "access: 20",
                                       "trunk: [10, 20], native: 30"};
    const char* const names[kPorts] = {"a0", "a1", "b", "t"};
    for (int p = 0; p < kPorts; ++p) {
      const std::string name = "s" + std::to_string(instance) + "_" + std::to_string(p);
      ring_names_.push_back(name);
      const std::string group = p < 2 && !a_group_.empty() ? ", group: " + a_group_ : "";
      ports += std::string("  - {name: ") + names[p] + ", devargs: net_ring_" + name + ", " +
               modes[p] + group + "}\n";
    }
    const std::string yaml =
        "eal: {lcores: \"0,1\"}\n"
        "switch:\n"
        "  mac: 02:a9:9c:00:00:01\n"
        "  addresses: [10.0.10.254/24, {address: 10.0.20.254/24, vlan: 20}]\n"
        "ports:\n" + ports +
        "workers: [{lcore: 1, rx: [a0, a1, b, t]}]\n" + extra;
    config::ConfigLoad load = config::LoadConfigText(yaml, "stage_test.yaml");
    ASSERT_TRUE(load.ok()) << load.FormatErrors();
    config_ = load.config;
    for (int p = 0; p < kPorts; ++p) {
      rte_ring* rx = rte_ring_create((ring_names_[p] + "_rx").c_str(), 64, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      rte_ring* tx = rte_ring_create((ring_names_[p] + "_tx").c_str(), tx_ring_size, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      ASSERT_NE(rx, nullptr);
      ASSERT_NE(tx, nullptr);
      rx_.push_back(rx);
      tx_rings_.push_back(tx);
      const int id = rte_eth_from_rings(ring_names_[p].c_str(), &rx, 1, &tx, 1, SOCKET_ID_ANY);
      ASSERT_GE(id, 0);
      port_ids_[p] = static_cast<uint16_t>(id);
      rte_eth_conf conf{};
      ASSERT_EQ(rte_eth_dev_configure(port_ids_[p], 1, 1, &conf), 0);
      ASSERT_EQ(rte_eth_rx_queue_setup(port_ids_[p], 0, 64, SOCKET_ID_ANY, nullptr, Pool()), 0);
      ASSERT_EQ(rte_eth_tx_queue_setup(port_ids_[p], 0, 64, SOCKET_ID_ANY, nullptr), 0);
      ASSERT_EQ(rte_eth_dev_start(port_ids_[p]), 0);
    }
    plan_ = ForwardingPlan::Build(config_);
    stats_ = std::make_unique<LcoreStats>();
    const config::FaultConfig* faults[config::kMaxPorts] = {};
    for (size_t p = 0; p < config_.ports.size(); ++p) {
      if (config_.ports[p].faults) faults[p] = &*config_.ports[p].faults;
    }
    tx_ = std::make_unique<TxBuffers>(port_ids_, 0, Pool(), *stats_, faults, 1, linear_ports);
  }

  void TearDown() override {
    tx_.reset();
    for (int p = 0; p < static_cast<int>(rx_.size()); ++p) {
      rte_eth_dev_stop(port_ids_[p]);
      rte_eth_dev_close(port_ids_[p]);
    }
    for (rte_ring* r : rx_) Frames::DrainRing(r), rte_ring_free(r);
    for (rte_ring* r : tx_rings_) Frames::DrainRing(r), rte_ring_free(r);
    rx_.clear();
    tx_rings_.clear();
    ring_names_.clear();
  }

  // One pool for every stage test of the process.
  static rte_mempool* Pool() {
    static rte_mempool* pool =
        rte_pktmbuf_pool_create("stage_test_pool", 2047, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    return pool;
  }

  // A fresh mbuf holding `frame`.
  static rte_mbuf* Mbuf(const testframes::Frame& frame) {
    rte_mbuf* m = rte_pktmbuf_alloc(Pool());
    EXPECT_NE(m, nullptr);
    if (m == nullptr) return nullptr;
    char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size()));
    EXPECT_NE(data, nullptr);
    std::memcpy(data, frame.data(), frame.size());
    return m;
  }

  // Everything that left each port (its TX ring) since the last call.
  // The frames each port sent, their bytes; with the buffer count of each
  // in `segments` when given.
  std::map<int, std::vector<testframes::Frame>> Sent(
      std::map<int, std::vector<uint16_t>>* segments = nullptr) {
    std::map<int, std::vector<testframes::Frame>> out;
    for (int p = 0; p < static_cast<int>(tx_rings_.size()); ++p) {
      void* obj;
      while (rte_ring_dequeue(tx_rings_[p], &obj) == 0) {
        auto* m = static_cast<rte_mbuf*>(obj);
        testframes::Frame f(m->pkt_len);
        const auto* d = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, f.data()));
        if (d != f.data()) std::memcpy(f.data(), d, m->pkt_len);
        out[p].push_back(std::move(f));
        if (segments != nullptr) (*segments)[p].push_back(m->nb_segs);
        rte_pktmbuf_free(m);
      }
    }
    return out;
  }

  uint64_t Drops(int port, DropReason reason) const {
    return stats_->ports[port].drops[static_cast<size_t>(reason)].Get();
  }
  // Mbufs of the pool in use: a stage that leaks or frees twice shows here.
  static unsigned InUse() { return rte_mempool_in_use_count(Pool()); }

  TxBuffers& tx() { return *tx_; }
  LcoreStats& stats() { return *stats_; }
  const ForwardingPlan& plan() const { return *plan_; }

  config::Config config_;
  // When not empty, the next Build() puts a0 and a1 in an uplink group of
  // this name.
  std::string a_group_;
  uint16_t port_ids_[config::kMaxPorts] = {};
  std::vector<std::string> ring_names_;
  std::vector<rte_ring*> rx_, tx_rings_;
  std::unique_ptr<ForwardingPlan> plan_;
  std::unique_ptr<LcoreStats> stats_;
  std::unique_ptr<TxBuffers> tx_;
};

}  // namespace aggswitch::dataplane::fixtures
