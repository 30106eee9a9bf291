// The AF_XDP socket counters on a real socket: in a network namespace of
// its own, the test binds a socket to one end of a veth pair, finds it among
// the process's files, leaves its RX ring unread and sends frames from the
// other end. Those the ring has no room for must show as rx_ring_full.
// Needs root (label "system").
#include "dataplane/xsk_stats.h"

#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace aggswitch::dataplane {
namespace {

TEST(XskStatsTest, NoSocketsNoCounters) {
  EXPECT_TRUE(ListXskSockets().empty()) << "this process holds no AF_XDP socket yet";
  const XskCounters c = ReadXskCounters({});
  EXPECT_EQ(c.sockets, 0u);
  // A descriptor that is not an AF_XDP socket, or no longer the same file.
  EXPECT_EQ(ReadXskCounters({XskSocket{0, 1}}).sockets, 0u);
  EXPECT_EQ(ReadXskCounters({XskSocket{-1, 0}}).sockets, 0u);
}

TEST(XskStatsTest, NewSocketsAreThoseTheListGained) {
  const std::vector<XskSocket> before = {{3, 10}, {5, 11}};
  const std::vector<XskSocket> after = {{3, 10}, {5, 12}, {7, 13}};
  const std::vector<XskSocket> expected = {{5, 12}, {7, 13}};
  EXPECT_EQ(NewXskSockets(before, after), expected) << "fd 5 was closed and reused";
  EXPECT_TRUE(NewXskSockets(after, after).empty());
}

bool Sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(XskStatsTest, FramesTheRxRingHasNoRoomForAreCounted) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: a network namespace and an AF_XDP socket";
  // A namespace of this process's own: the veth pair goes when it does.
  ASSERT_EQ(unshare(CLONE_NEWNET), 0) << std::strerror(errno);
  // No IPv6: its router solicitations would add frames of their own.
  ASSERT_TRUE(Sh("sysctl -qw net.ipv6.conf.default.disable_ipv6=1") &&
              Sh("ip link add xska type veth peer name xskb") &&
              Sh("ip link set xska up") && Sh("ip link set xskb up"));
  const unsigned peer = if_nametoindex("xskb");
  ASSERT_NE(peer, 0u);
  const std::vector<XskSocket> before = ListXskSockets();

  constexpr uint32_t kFrames = 256, kFrameSize = 4096, kRxRing = 64;
  void* area = std::aligned_alloc(kFrameSize, kFrames * kFrameSize);
  ASSERT_NE(area, nullptr);
  xsk_umem* umem = nullptr;
  xsk_ring_prod fill{};
  xsk_ring_cons comp{};
  xsk_umem_config ucfg{};
  ucfg.fill_size = kFrames;
  ucfg.comp_size = kRxRing;
  ucfg.frame_size = kFrameSize;
  ASSERT_EQ(xsk_umem__create(&umem, area, kFrames * kFrameSize, &fill, &comp, &ucfg), 0);
  xsk_socket* xsk = nullptr;
  xsk_ring_cons rx{};
  xsk_ring_prod tx{};
  xsk_socket_config scfg{};
  scfg.rx_size = kRxRing;
  scfg.tx_size = kRxRing;
  scfg.bind_flags = XDP_COPY;  // libxdp loads its program redirecting queue 0 to the socket
  const int rc = xsk_socket__create(&xsk, "xska", 0, umem, &rx, &tx, &scfg);
  if (rc != 0) {
    xsk_umem__delete(umem);
    std::free(area);
    GTEST_SKIP() << "no AF_XDP socket on a veth here: " << std::strerror(-rc);
  }
  uint32_t idx = 0;
  ASSERT_EQ(xsk_ring_prod__reserve(&fill, kFrames, &idx), kFrames);
  for (uint32_t i = 0; i < kFrames; ++i) *xsk_ring_prod__fill_addr(&fill, idx + i) = i * kFrameSize;
  xsk_ring_prod__submit(&fill, kFrames);

  const std::vector<XskSocket> mine = NewXskSockets(before, ListXskSockets());
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].fd, xsk_socket__fd(xsk));
  const XskCounters idle = ReadXskCounters(mine);
  EXPECT_EQ(idle.sockets, 1u);
  EXPECT_EQ(idle.rx_ring_full, 0u);

  // Frames into xska from its peer; the socket's RX ring is never read.
  const int out = socket(AF_PACKET, SOCK_RAW, 0);
  ASSERT_GE(out, 0);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(peer);
  to.sll_halen = ETH_ALEN;
  unsigned char frame[64] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5};
  constexpr uint32_t kSent = 200;
  for (uint32_t i = 0; i < kSent; ++i) {
    ASSERT_EQ(sendto(out, frame, sizeof(frame), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)),
              static_cast<ssize_t>(sizeof(frame)));
  }
  close(out);
  // The kernel receives them in its softirq: at most a moment later.
  XskCounters after;
  for (int i = 0; i < 100; ++i) {
    after = ReadXskCounters(mine);
    if (after.rx_ring_full >= kSent - kRxRing) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after.sockets, 1u);
  EXPECT_EQ(after.rx_ring_full, kSent - kRxRing) << "the ring took " << kRxRing << " frames";
  EXPECT_EQ(after.rx_dropped, 0u) << "the fill ring had a buffer for every frame";
  EXPECT_EQ(xsk_ring_cons__peek(&rx, kFrames, &idx), kRxRing);

  xsk_socket__delete(xsk);
  xsk_umem__delete(umem);
  std::free(area);
  EXPECT_EQ(ReadXskCounters(mine).sockets, 0u) << "closed";
}

}  // namespace
}  // namespace aggswitch::dataplane
