// How the client's engine moves datagrams: the interface both transports
// implement, kernel UDP (udp_socket.h) and AF_XDP (xdp_socket.h).
//
// The engine builds every datagram it sends in one of the transport's send
// buffers, in place: with AF_XDP those are UMEM frames, so a chunk goes from
// the caller's array to the wire with no copy in between. Buffer i keeps its
// bytes until the engine writes it again, so a retransmission sends the same
// buffer again.
//
//   std::unique_ptr<Transport> t = ...;                    // UdpSocket::Open or XdpSocket::Open
//   uint8_t* buf = t->send_buffer(k);                        // build datagram k here
//   ASSIGN_OR_RETURN(uint32_t taken, t->Send(out, n));       // may be < n
//   ASSIGN_OR_RETURN(std::span<const InDatagram> in, t->Receive());
//   RETURN_IF_ERROR(t->Wait(deadline, /*want_write=*/taken < n));
//
// Thread safety: the owner thread (the client's I/O thread) calls everything
// except Wake, local_port and stats, which any thread may call.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <span>

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

// How a transport's owner sleeps: on its socket and on an eventfd that any
// thread may write to wake it. Both transports use one.
class Waker {
 public:
  using Clock = std::chrono::steady_clock;
  static common::Result<Waker> Create();
  // Blocks until `fd` has one of `events`, Wake() was called, or `deadline`
  // passes (time_point::max(): none). Consumes the wake-up. [owner]
  common::Status Wait(int fd, short events, Clock::time_point deadline) const;
  void Wake() const;  // [any thread]

 private:
  UniqueFd fd_;
};

// One datagram to send: a UDP payload in one of the transport's send buffers,
// and its destination.
struct OutDatagram {
  const sockaddr_in* to = nullptr;
  const uint8_t* data = nullptr;
  uint32_t length = 0;
};

// One received UDP payload and its sender. Valid until the next Receive.
struct InDatagram {
  const uint8_t* data = nullptr;
  uint32_t length = 0;
  sockaddr_in from{};
};

// Where a transport lost or refused frames; monotonic counters.
struct TransportStats {
  // Datagrams that arrived for the client and were dropped before it read
  // them: a full socket buffer (UDP), a full RX or empty fill ring (AF_XDP).
  uint64_t rx_dropped = 0;
  // Frames addressed to the client whose IPv4 or UDP lengths do not add up
  // (AF_XDP); dropped. The engine counts them with its stray datagrams.
  uint64_t malformed = 0;
};

class Transport {
 public:
  using Clock = std::chrono::steady_clock;
  // Datagrams per Send and Receive call, at most.
  static constexpr uint32_t kBatch = 64;

  virtual ~Transport() = default;

  // Send buffer i (0 <= i < the count given at Open), room for one datagram
  // of the MTU given at Open.
  virtual uint8_t* send_buffer(uint32_t i) = 0;
  // Whether buffer i may be written: no earlier send of it is still being
  // read by the device (AF_XDP in zero-copy mode). The engine builds a new
  // datagram only into a free buffer. Takes in completions.
  virtual bool SendBufferFree(uint32_t i) = 0;

  // Hands up to kBatch datagrams, each in a send buffer, to the network.
  // Returns how many were taken: fewer than n (maybe 0) when the transport's
  // queue is full; Wait with want_write and send the rest. An error names
  // the cause.
  virtual common::Result<uint32_t> Send(const OutDatagram* datagrams, uint32_t n) = 0;

  // The datagrams waiting, up to kBatch, without blocking; empty when none.
  virtual common::Result<std::span<const InDatagram>> Receive() = 0;

  // Blocks until a datagram is waiting, the transport can take more (when
  // want_write), Wake() was called, or `deadline` passes
  // (time_point::max(): no deadline). Consumes the wake-up.
  virtual common::Status Wait(Clock::time_point deadline, bool want_write) = 0;

  // Makes the owner's current or next Wait return. [any thread]
  virtual void Wake() const = 0;

  virtual uint16_t local_port() const = 0;   // [any thread]
  virtual TransportStats stats() const = 0;  // [any thread]
};

}  // namespace aggswitch::client::internal
