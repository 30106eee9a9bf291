// The client's kernel UDP socket: one non-blocking IPv4 datagram socket that
// sends batches with sendmmsg and receives batches with recvmmsg, plus an
// eventfd that another thread can use to wake a waiting owner.
//
//   ASSIGN_OR_RETURN(UdpSocket sock, UdpSocket::Open({.mtu = 1500}));
//   ASSIGN_OR_RETURN(uint32_t taken, sock.Send(datagrams, n));   // may be < n
//   ASSIGN_OR_RETURN(uint32_t got, sock.Receive());              // 0: nothing waiting
//   for (uint32_t i = 0; i < got; ++i) use(sock.data(i), sock.length(i));
//   RETURN_IF_ERROR(sock.Wait(deadline, want_write));            // then look at everything
//
// Packets leave with DF set (IP_PMTUDISC_DO): aggregation datagrams must never
// be fragmented (docs/protocol.md), and one that does not fit the path fails
// to send with a clear error instead.
//
// Thread safety: the owner thread (the client's I/O thread) calls everything
// except Wake, which any thread may call.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::client::internal {

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// One datagram to send: payload and destination, owned by the caller.
struct OutDatagram {
  const sockaddr_in* to = nullptr;
  const uint8_t* data = nullptr;
  uint32_t length = 0;
};

class UdpSocket {
 public:
  using Clock = std::chrono::steady_clock;
  // Datagrams per sendmmsg and recvmmsg call.
  static constexpr uint32_t kBatch = 64;

  struct Options {
    common::Ipv4Addr bind_ip;    // 0.0.0.0: any
    uint16_t bind_port = 0;      // 0: an ephemeral port
    uint32_t mtu = 1500;         // receive buffers hold mtu - 28 bytes
    int buffer_bytes = 4 << 20;  // SO_RCVBUF / SO_SNDBUF wish (the kernel may cap it)
  };

  static common::Result<UdpSocket> Open(const Options& options);

  // Hands up to kBatch datagrams to the kernel. Returns how many it took:
  // fewer than n (maybe 0) when the send buffer is full; Wait for writable
  // and send the rest. An error names the cause (no route, message too long).
  common::Result<uint32_t> Send(const OutDatagram* datagrams, uint32_t n);

  // Receives up to kBatch waiting datagrams without blocking; 0 when none.
  // Datagram i is valid until the next Receive. A truncated datagram (larger
  // than the receive buffers) has length 0 and is counted in truncated().
  common::Result<uint32_t> Receive();
  const uint8_t* data(uint32_t i) const { return buffers_.get() + size_t{i} * buffer_bytes_; }
  uint32_t length(uint32_t i) const { return in_msgs_[i].msg_len; }
  const sockaddr_in& from(uint32_t i) const { return in_from_[i]; }
  uint64_t truncated() const { return truncated_; }

  // Blocks until a datagram is waiting, the socket is writable (when
  // want_write), Wake() was called, or `deadline` passes (time_point::max():
  // no deadline). Consumes the wake-up.
  common::Status Wait(Clock::time_point deadline, bool want_write);

  // Makes the owner's current or next Wait return. [any thread]
  void Wake() const;

  uint16_t local_port() const { return local_port_; }

 private:
  UdpSocket() = default;

  UniqueFd fd_;
  UniqueFd wake_fd_;
  uint16_t local_port_ = 0;
  uint32_t buffer_bytes_ = 0;
  uint64_t truncated_ = 0;
  std::unique_ptr<uint8_t[]> buffers_;  // kBatch receive buffers
  std::unique_ptr<mmsghdr[]> in_msgs_;
  std::unique_ptr<iovec[]> in_iov_;
  std::unique_ptr<sockaddr_in[]> in_from_;
  std::unique_ptr<mmsghdr[]> out_msgs_;
  std::unique_ptr<iovec[]> out_iov_;
};

}  // namespace aggswitch::client::internal
