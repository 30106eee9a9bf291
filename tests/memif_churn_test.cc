// A memif peer that comes and goes must never take the switch down.
//
// The real aggswitch binary runs as the memif server with an L2 config that
// floods everything from the memif port to a net_null port. This test process
// is the memif client: it hot-plugs the client port, floods the switch with
// full-size frames, and unplugs the port while the switch's worker is still
// busy with the frames in the ring, over and over. The switch's worker shares
// a CPU with its EAL interrupt thread, so the PMD's disconnect (which unmaps
// the shared regions) preempts the worker in the middle of a burst as often
// as it can. Without the dataplane's unmap guard (dataplane/unmap_guard.h)
// the DPDK 22.11 memif PMD faults in eth_memif_rx here within a few cycles.
//
// Needs root (DPDK); ctest label "eal".
#include <gtest/gtest.h>
#include <rte_bus_vdev.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "dataplane/dataplane_test_fixture.h"
#include "tests/lib/test_process.h"

namespace aggswitch::dataplane {
namespace {

using fixtures::EalEnvironment;
using tools::FreeTcpPort;
using tools::ReadFile;
using tools::TestProcess;
using tools::WaitFor;

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("memif_churn_test"));

constexpr int kCycles = 60;
constexpr uint16_t kFrameLen = 1400;

class MemifChurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "DPDK needs root";
    std::string tmpl = ::testing::TempDir() + "memif_churn_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    prefix_ = "memif-churn-" + std::to_string(getpid());
    pool_ = rte_pktmbuf_pool_create("churn_pool", 4095, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                    SOCKET_ID_ANY);
    ASSERT_NE(pool_, nullptr);
  }

  void TearDown() override {
    sw_.reset();
    rte_mempool_free(pool_);
    std::filesystem::remove_all("/var/run/dpdk/" + prefix_);
    if (HasFailure()) std::printf("--- aggswitch log:\n%s\n", ReadFile(dir_ + "/sw.log").c_str());
    std::filesystem::remove_all(dir_);
  }

  // The worker (lcore 1) and the EAL interrupt thread share CPU 0.
  void StartSwitch() {
    std::ofstream(dir_ + "/aggswitch.yaml") << "eal:\n"
                                               "  lcores: \"0@0,1@0\"\n"
                                               "  main_lcore: 0\n"
                                               "  memory_mb: 256\n"
                                               "  hugepages: false\n"
                                               "  file_prefix: "
                                            << prefix_
                                            << "\n"
                                               "  telemetry: false\n"
                                               "ports:\n"
                                               "  - name: peer\n"
                                               "    devargs: net_memif0,role=server,id=0,socket="
                                            << dir_
                                            << "/memif.sock,socket-abstract=no\n"
                                               "    access: 1\n"
                                               "  - name: sink\n"
                                               "    devargs: net_null0\n"
                                               "    access: 1\n"
                                               "workers:\n"
                                               "  - lcore: 1\n"
                                               "    rx: [peer, sink]\n"
                                               "http:\n"
                                               "  listen: 127.0.0.1:"
                                            << FreeTcpPort() << "\n";
    sw_ =
        TestProcess::Start({AGGSWITCH_BIN, "--config", dir_ + "/aggswitch.yaml"}, dir_ + "/sw.log");
    ASSERT_NE(sw_, nullptr);
    ASSERT_TRUE(WaitFor(30, [&] {
      return !sw_->Running() || ReadFile(dir_ + "/sw.log").find(" running: ") != std::string::npos;
    }));
    ASSERT_TRUE(sw_->Running()) << "aggswitch exited during start-up";
  }

  // Plugs the client port in, floods the switch for `flood`, unplugs it.
  // Returns the frames the switch took.
  uint64_t Cycle(std::chrono::microseconds flood) {
    const std::string args = "role=client,id=0,socket=" + dir_ + "/memif.sock,socket-abstract=no";
    EXPECT_EQ(rte_eal_hotplug_add("vdev", "net_memif_churn", args.c_str()), 0);
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name("net_memif_churn", &port) != 0) return 0;
    rte_eth_conf conf{};
    EXPECT_EQ(rte_eth_dev_configure(port, 1, 1, &conf), 0);
    EXPECT_EQ(rte_eth_rx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr, pool_), 0);
    EXPECT_EQ(rte_eth_tx_queue_setup(port, 0, 1024, SOCKET_ID_ANY, nullptr), 0);
    EXPECT_EQ(rte_eth_dev_start(port), 0);
    const bool up = WaitFor(
        5,
        [&] {
          rte_eth_link link{};
          return rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
        },
        std::chrono::milliseconds(1));
    EXPECT_TRUE(up) << "the memif client never connected";
    uint64_t sent = 0;
    const auto end = std::chrono::steady_clock::now() + flood;
    while (up && std::chrono::steady_clock::now() < end) {
      rte_mbuf* burst[32];
      if (rte_pktmbuf_alloc_bulk(pool_, burst, 32) != 0) break;
      for (rte_mbuf* m : burst) {
        auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kFrameLen));
        std::memset(p, 0, kFrameLen);
        const uint8_t dst[] = {0x02, 0, 0, 0, 0, 0xee};  // never learned: flooded to the sink
        const uint8_t src[] = {0x02, 0, 0, 0, 0, 0x11};
        std::memcpy(p, dst, 6);
        std::memcpy(p + 6, src, 6);
        p[12] = 0x88;  // a local experimental EtherType: plain L2 traffic
        p[13] = 0xb5;
      }
      const uint16_t n = rte_eth_tx_burst(port, 0, burst, 32);
      sent += n;
      rte_pktmbuf_free_bulk(burst + n, 32 - n);
      // Drain what the switch might send back so our ring never fills.
      rte_mbuf* rx[32];
      rte_pktmbuf_free_bulk(rx, rte_eth_rx_burst(port, 0, rx, 32));
    }
    EXPECT_EQ(rte_eth_dev_stop(port), 0);
    EXPECT_EQ(rte_eth_dev_close(port), 0);
    EXPECT_EQ(rte_eal_hotplug_remove("vdev", "net_memif_churn"), 0);
    return sent;
  }

  std::string dir_;
  std::string prefix_;
  rte_mempool* pool_ = nullptr;
  std::unique_ptr<TestProcess> sw_;
};

TEST_F(MemifChurnTest, SwitchSurvivesPeerDisconnectsUnderLoad) {
  StartSwitch();
  uint64_t sent = 0;
  for (int cycle = 0; cycle < kCycles && !HasFailure(); ++cycle) {
    // 0.2 to 3 ms of flood: the unplug lands at a different point of the
    // switch's bursts each time.
    sent += Cycle(std::chrono::microseconds(200 + 47 * cycle));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(sw_->Running()) << "aggswitch died after cycle " << cycle << " (exit "
                                << sw_->Wait(0).value_or(-1) << ")";
  }
  EXPECT_GT(sent, uint64_t{kCycles}) << "the switch took no traffic; the test proved nothing";
  sw_->Signal(SIGTERM);
  EXPECT_EQ(sw_->Wait(15), 0) << "aggswitch did not stop cleanly";
}

}  // namespace
}  // namespace aggswitch::dataplane
