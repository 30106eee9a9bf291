// The client's kernel UDP transport: one non-blocking IPv4 datagram socket
// that sends batches with sendmmsg and receives batches with recvmmsg, plus an
// eventfd that another thread can use to wake a waiting owner. It works
// unprivileged.
//
// Segmentation offload (UDP GSO, where the kernel has it): a run of
// datagrams of one size to one destination (a window of chunks), the last
// of the run possibly shorter, goes down the stack as one send of up to
// 64 KiB that the kernel cuts into those datagrams just before the device
// (or the device itself does). The receiver sees the same datagrams as
// without it; the sender's stack walks the socket, route and IP layers once
// per run instead of once per datagram. A device that cannot take it (no
// checksum offload) makes the socket fall back to one send per datagram.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<UdpSocket> sock,
//                    UdpSocket::Open({.mtu = 1500, .send_buffers = 129}));
//   (transport.h has the calls)
//
// Packets leave with DF set (IP_PMTUDISC_DO): aggregation datagrams must never
// be fragmented (docs/protocol.md), and one that does not fit the path fails
// to send with a clear error instead. The kernel's count of datagrams it
// dropped for a full receive buffer (SO_RXQ_OVFL) is stats().rx_dropped.
//
// Thread safety: as transport.h says.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "client/internal/transport.h"
#include "common/net_addr.h"

namespace aggswitch::client::internal {

class UdpSocket final : public Transport {
 public:
  struct Options {
    common::Ipv4Addr bind_ip;    // 0.0.0.0: any
    uint16_t bind_port = 0;      // 0: an ephemeral port
    uint32_t mtu = 1500;         // buffers hold mtu - 28 bytes
    uint32_t send_buffers = 1;   // send_buffer(0 .. send_buffers - 1)
    int buffer_bytes = 4 << 20;  // SO_RCVBUF / SO_SNDBUF wish (the kernel may cap it)
    bool segmentation_offload = true;  // UDP GSO where the kernel has it
  };

  // Datagrams in one segmentation-offload send, at most: the kernel's limit
  // since UDP GSO came (later kernels take more).
  static constexpr uint32_t kMaxSegments = 64;
  // Bytes of UDP payload in one send, at most (an IPv4 packet's 65535 less
  // the IPv4 and UDP headers).
  static constexpr uint32_t kMaxSendBytes = 65535 - 20 - 8;

  static common::Result<std::unique_ptr<UdpSocket>> Open(const Options& options);

  uint8_t* send_buffer(uint32_t i) override {
    return send_buffers_.get() + size_t{i} * buffer_bytes_;
  }
  bool SendBufferFree(uint32_t) override { return true; }  // sendmmsg copies
  common::Result<uint32_t> Send(const OutDatagram* datagrams, uint32_t n) override;
  common::Result<std::span<const InDatagram>> Receive() override;
  common::Status Wait(Clock::time_point deadline, bool want_write) override;
  void Wake() const override;
  uint16_t local_port() const override { return local_port_; }
  TransportStats stats() const override;

  // Whether sends use segmentation offload now (it may have fallen back).
  bool segmentation_offload() const { return gso_; }  // [owner]
  // Sends made so far, each one datagram or one offloaded run of them. [owner]
  uint64_t sends() const { return sends_; }

 private:
  UdpSocket() = default;

  // Fills out_msgs_ with the sends for datagrams[0, n): runs of them when
  // gso_ is on, one each otherwise; the datagrams each takes in
  // out_datagrams_. Returns the number of sends.
  uint32_t PlanSends(const OutDatagram* datagrams, uint32_t n);

  UniqueFd fd_;
  Waker waker_;
  uint16_t local_port_ = 0;
  uint32_t buffer_bytes_ = 0;
  bool gso_ = false;
  uint64_t sends_ = 0;
  // Single writer (the owner), read by stats() from any thread.
  std::atomic<uint64_t> rx_dropped_{0};
  std::unique_ptr<uint8_t[]> send_buffers_;
  std::unique_ptr<uint8_t[]> buffers_;  // kBatch receive buffers
  std::unique_ptr<mmsghdr[]> in_msgs_;
  std::unique_ptr<iovec[]> in_iov_;
  std::unique_ptr<sockaddr_in[]> in_from_;
  std::unique_ptr<uint8_t[]> in_control_;  // kBatch SO_RXQ_OVFL control messages
  std::unique_ptr<InDatagram[]> in_;
  std::unique_ptr<mmsghdr[]> out_msgs_;
  std::unique_ptr<iovec[]> out_iov_;
  std::unique_ptr<uint8_t[]> out_control_;     // a UDP_SEGMENT control message per send
  std::unique_ptr<uint32_t[]> out_datagrams_;  // datagrams per send
};

}  // namespace aggswitch::client::internal
