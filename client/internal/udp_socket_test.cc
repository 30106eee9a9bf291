#include "client/internal/udp_socket.h"

#include <arpa/inet.h>
#include <poll.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace aggswitch::client::internal {
namespace {

// A plain UDP socket on 127.0.0.1 that collects what arrives.
class Receiver {
 public:
  Receiver() : fd_(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    const int bytes = 8 << 20;
    setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
    addr_.sin_family = AF_INET;
    addr_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_)), 0);
    socklen_t len = sizeof(addr_);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr_), &len);
  }
  const sockaddr_in* addr() const { return &addr_; }

  // The next datagram, or an empty one after 1 s of silence.
  std::vector<uint8_t> Next() {
    pollfd p{fd_.get(), POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return {};
    std::vector<uint8_t> d(65536);
    const ssize_t n = recv(fd_.get(), d.data(), d.size(), 0);
    d.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return d;
  }
  // Whether nothing more arrives within 50 ms.
  bool Quiet() {
    pollfd p{fd_.get(), POLLIN, 0};
    return poll(&p, 1, 50) == 0;
  }

 private:
  UniqueFd fd_;
  sockaddr_in addr_{};
};

// Datagram i of a test: `length` bytes, each (i * 7 + byte index) mod 251,
// so that a byte in the wrong datagram or place shows.
void Fill(uint8_t* buf, uint32_t i, uint32_t length) {
  for (uint32_t b = 0; b < length; ++b) buf[b] = static_cast<uint8_t>((i * 7 + b) % 251);
}
std::vector<uint8_t> Expected(uint32_t i, uint32_t length) {
  std::vector<uint8_t> d(length);
  Fill(d.data(), i, length);
  return d;
}

struct Planned {
  const sockaddr_in* to;
  uint32_t length;
};

// Sends `plan` in one batch through a socket at `mtu`, all of it.
std::unique_ptr<UdpSocket> SendAll(const std::vector<Planned>& plan, uint32_t mtu, bool offload) {
  auto opened = UdpSocket::Open({.bind_ip = *common::Ipv4Addr::Parse("127.0.0.1"),
                                 .mtu = mtu,
                                 .send_buffers = static_cast<uint32_t>(plan.size()),
                                 .segmentation_offload = offload});
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  if (!opened.ok()) return nullptr;
  std::unique_ptr<UdpSocket> sock = std::move(*opened);
  std::vector<OutDatagram> out;
  for (uint32_t i = 0; i < plan.size(); ++i) {
    Fill(sock->send_buffer(i), i, plan[i].length);
    out.push_back({plan[i].to, sock->send_buffer(i), plan[i].length});
  }
  uint32_t done = 0;
  while (done < out.size()) {
    auto taken = sock->Send(out.data() + done, static_cast<uint32_t>(out.size() - done));
    EXPECT_TRUE(taken.ok()) << taken.status().ToString();
    if (!taken.ok()) break;
    done += *taken;
    if (done < out.size()) {
      EXPECT_TRUE(sock->Wait(UdpSocket::Clock::now() + std::chrono::seconds(1), true).ok());
    }
  }
  return sock;
}

TEST(UdpSocketTest, ARunOfEqualDatagramsGoesAsOneSendAndArrivesAsTheSameDatagrams) {
  Receiver a, b;
  // A window of chunks and the transfer's shorter last chunk to a, a query
  // to b, then more to a.
  std::vector<Planned> plan;
  for (int i = 0; i < 10; ++i) plan.push_back({a.addr(), 1472});
  plan.push_back({a.addr(), 600});
  plan.push_back({b.addr(), 48});
  for (int i = 0; i < 3; ++i) plan.push_back({a.addr(), 1472});
  auto sock = SendAll(plan, 1500, true);
  ASSERT_NE(sock, nullptr);
  ASSERT_TRUE(sock->segmentation_offload()) << "this kernel has UDP GSO (Linux 4.18 on)";
  EXPECT_EQ(sock->sends(), 3u) << "the 11 to a, the one to b, the 3 to a";
  for (uint32_t i = 0; i < plan.size(); ++i) {
    Receiver& r = plan[i].to == a.addr() ? a : b;
    EXPECT_EQ(r.Next(), Expected(i, plan[i].length)) << "datagram " << i;
  }
  EXPECT_TRUE(a.Quiet());
  EXPECT_TRUE(b.Quiet());
}

TEST(UdpSocketTest, ALongerDatagramOrTheSegmentLimitStartsANewSend) {
  Receiver a;
  std::vector<Planned> plan;
  plan.push_back({a.addr(), 200});
  plan.push_back({a.addr(), 300});  // longer than the run's segments: a new run
  for (uint32_t i = 0; i < UdpSocket::kMaxSegments + 1; ++i) plan.push_back({a.addr(), 300});
  auto sock = SendAll(plan, 1500, true);
  ASSERT_NE(sock, nullptr);
  EXPECT_EQ(sock->sends(), 3u) << "200; 64 of 300; the 65th of 300";
  for (uint32_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(a.Next(), Expected(i, plan[i].length)) << "datagram " << i;
  }
  EXPECT_TRUE(a.Quiet());
}

TEST(UdpSocketTest, ASendHoldsNoMoreThanAnIpv4PacketCarries) {
  Receiver a;
  // 20 datagrams of 8972 bytes: 7 to a send (62804 bytes; 8 would exceed
  // 65507).
  std::vector<Planned> plan(20, Planned{a.addr(), 8972});
  auto sock = SendAll(plan, 9000, true);
  ASSERT_NE(sock, nullptr);
  EXPECT_EQ(sock->sends(), 3u);
  for (uint32_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(a.Next(), Expected(i, plan[i].length)) << "datagram " << i;
  }
}

TEST(UdpSocketTest, WithoutOffloadEveryDatagramIsASend) {
  Receiver a;
  std::vector<Planned> plan(12, Planned{a.addr(), 1000});
  auto sock = SendAll(plan, 1500, false);
  ASSERT_NE(sock, nullptr);
  EXPECT_FALSE(sock->segmentation_offload());
  EXPECT_EQ(sock->sends(), 12u);
  for (uint32_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(a.Next(), Expected(i, plan[i].length)) << "datagram " << i;
  }
}

}  // namespace
}  // namespace aggswitch::client::internal
