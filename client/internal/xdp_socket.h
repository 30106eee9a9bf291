// The client's AF_XDP transport: one AF_XDP socket on a named interface and
// queue, with the client's XDP program (answer_redirect.bpf.c) attached
// through libxdp, so that the switch's answers to this client skip the
// kernel's UDP, IP and socket layers, while every other frame on the
// interface still reaches the kernel.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<XdpSocket> sock,
//                    XdpSocket::Open({.interface = "eth1", .queue = 0, .mtu = 3500,
//                                     .send_buffers = 129, .destinations = {switch_ip}}));
//   (transport.h has the calls)
//
// The UMEM holds one 4 KiB frame per send buffer and kRxFrames for receiving.
// A datagram is built in its send frame after room for the Ethernet, IPv4 and
// UDP headers, which Send writes in front of it: the chunk is never copied
// again. The destination's MAC is the next hop's from the kernel's tables,
// resolved once at Open (neighbor.h); the source address is the one the
// kernel uses toward the first destination, or bind_ip. The local UDP port
// is reserved with a kernel socket bound to it, so no other program gets it.
// IPv4 datagrams leave with DF set and no UDP checksum (0, allowed for IPv4;
// the Ethernet FCS covers the link).
//
// Zero-copy mode is used where the driver offers it, copy mode otherwise
// (veth). The program is attached in native (driver) mode where the driver
// has XDP, in generic mode otherwise. Only this client's answers arriving on
// `queue` reach it: on a NIC with several queues, steer them there (ethtool
// -N ... action queue) or use one queue.
//
// Errors are clear, and Open never hangs: missing privilege (AF_XDP needs
// CAP_NET_RAW and CAP_BPF, or root), no AF_XDP or XDP support, no such
// interface or queue, a queue already taken by another AF_XDP socket, an MTU
// larger than the interface's or the frame's, a switch that does not answer
// ARP.
//
// Thread safety: as transport.h says.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/internal/transport.h"
#include "common/net_addr.h"

namespace aggswitch::client::internal {

class XdpSocket final : public Transport {
 public:
  static constexpr uint32_t kFrameBytes = 4096;
  // Where a datagram's UDP payload starts in its frame: a cache line in, with
  // the 42 bytes of Ethernet, IPv4 and UDP headers just before it.
  static constexpr uint32_t kPayloadOffset = 64;
  static constexpr uint32_t kHeaderBytes = 14 + 20 + 8;
  // The largest IPv4 packet (MTU) a frame holds: in copy mode the kernel
  // keeps XDP_PACKET_HEADROOM (256) of each receive frame.
  static constexpr uint32_t kMaxMtu = kFrameBytes - 256 - 14;
  static constexpr uint32_t kRxFrames = 2048;

  struct Options {
    std::string interface;
    uint32_t queue = 0;
    common::Ipv4Addr bind_ip;  // 0.0.0.0: the kernel's source address toward destinations[0]
    uint16_t bind_port = 0;    // 0: an ephemeral port
    uint32_t mtu = 1500;
    uint32_t send_buffers = 1;
    // Every address the client sends to; their MACs are resolved at Open.
    std::vector<common::Ipv4Addr> destinations;
    std::chrono::milliseconds resolve_timeout{2000};
  };

  static common::Result<std::unique_ptr<XdpSocket>> Open(const Options& options);
  ~XdpSocket() override;

  uint8_t* send_buffer(uint32_t i) override { return FrameData(i) + kPayloadOffset; }
  bool SendBufferFree(uint32_t i) override;
  common::Result<uint32_t> Send(const OutDatagram* datagrams, uint32_t n) override;
  common::Result<std::span<const InDatagram>> Receive() override;
  common::Status Wait(Clock::time_point deadline, bool want_write) override;
  void Wake() const override;
  uint16_t local_port() const override { return local_port_; }
  TransportStats stats() const override;

  // How the socket runs: "af_xdp veth0 queue 0, copy mode, native XDP".
  const std::string& description() const { return description_; }
  bool zero_copy() const { return zero_copy_; }

 private:
  struct Rings;  // libxdp's rings and handles
  struct Neighbor {
    uint32_t ip = 0;  // host order
    common::MacAddr mac;
  };

  XdpSocket();
  common::Status Setup(const Options& options);
  common::Status AttachProgram(const Options& options);
  common::Status CreateSocket(const Options& options);
  uint8_t* FrameData(uint32_t frame) const { return umem_ + size_t{frame} * kFrameBytes; }
  void TakeCompletions();
  void Kick(uint32_t queued);
  // Writes the Ethernet, IPv4 and UDP headers in front of datagram d.
  bool WriteHeaders(const OutDatagram& d, uint8_t* frame_payload);

  std::unique_ptr<Rings> rings_;
  uint8_t* umem_ = nullptr;
  size_t umem_bytes_ = 0;
  uint32_t send_frames_ = 0;
  std::vector<uint16_t> tx_pending_;  // per send frame: sends the device has not completed
  uint32_t tx_outstanding_ = 0;       // their sum
  std::vector<uint64_t> held_;        // receive frames handed out by the last Receive
  std::unique_ptr<InDatagram[]> in_;
  std::vector<Neighbor> neighbors_;
  common::MacAddr own_mac_;
  uint32_t own_ip_ = 0;  // host order
  uint16_t local_port_ = 0;
  uint16_t ip_id_ = 0;
  bool zero_copy_ = false;
  std::string description_;
  UniqueFd port_fd_;  // the kernel UDP socket that reserves local_port_
  Waker waker_;
  std::atomic<uint64_t> malformed_{0};
};

}  // namespace aggswitch::client::internal
