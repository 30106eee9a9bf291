#include "client/internal/udp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/udp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace aggswitch::client::internal {

namespace {

std::string ErrnoText(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Room for one SO_RXQ_OVFL control message.
constexpr size_t kControlBytes = CMSG_SPACE(sizeof(uint32_t));
// Room for one UDP_SEGMENT control message.
constexpr size_t kSegmentControlBytes = CMSG_SPACE(sizeof(uint16_t));

bool SameDestination(const sockaddr_in* a, const sockaddr_in* b) {
  return a == b || (a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port);
}

}  // namespace

common::Result<std::unique_ptr<UdpSocket>> UdpSocket::Open(const Options& options) {
  std::unique_ptr<UdpSocket> owned(new UdpSocket());
  UdpSocket& s = *owned;
  s.fd_ = UniqueFd(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.fd_.get() < 0) return common::Unavailable(ErrnoText("socket(AF_INET, SOCK_DGRAM)"));
  const int fd = s.fd_.get();
  // Buffer sizes are wishes: the kernel caps them at net.core.[rw]mem_max,
  // and a smaller buffer only means more retransmissions under load.
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.buffer_bytes, sizeof(options.buffer_bytes));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.buffer_bytes, sizeof(options.buffer_bytes));
  // Every received batch says how many datagrams the kernel dropped for a
  // full receive buffer so far.
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof(on));
  const int pmtu = IP_PMTUDISC_DO;
  if (setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu)) != 0) {
    return common::Unavailable(ErrnoText("setsockopt(IP_MTU_DISCOVER)"));
  }
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(options.bind_ip.addr);
  local.sin_port = htons(options.bind_port);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    return common::Unavailable(ErrnoText(
        ("bind " + options.bind_ip.ToString() + ":" + std::to_string(options.bind_port)).c_str()));
  }
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  s.local_port_ = ntohs(local.sin_port);
  if (options.segmentation_offload) {
    // The option exists where the kernel can segment UDP (Linux 4.18 on).
    int segment = 0;
    socklen_t segment_len = sizeof(segment);
    s.gso_ = getsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &segment, &segment_len) == 0;
  }

  ASSIGN_OR_RETURN(s.waker_, Waker::Create());

  s.buffer_bytes_ = options.mtu - 28;
  s.send_buffers_ = std::make_unique<uint8_t[]>(size_t{options.send_buffers} * s.buffer_bytes_);
  s.buffers_ = std::make_unique<uint8_t[]>(size_t{kBatch} * s.buffer_bytes_);
  s.in_msgs_ = std::make_unique<mmsghdr[]>(kBatch);
  s.in_iov_ = std::make_unique<iovec[]>(kBatch);
  s.in_from_ = std::make_unique<sockaddr_in[]>(kBatch);
  s.in_control_ = std::make_unique<uint8_t[]>(kBatch * kControlBytes);
  s.in_ = std::make_unique<InDatagram[]>(kBatch);
  s.out_msgs_ = std::make_unique<mmsghdr[]>(kBatch);
  s.out_iov_ = std::make_unique<iovec[]>(kBatch);
  s.out_control_ = std::make_unique<uint8_t[]>(kBatch * kSegmentControlBytes);
  s.out_datagrams_ = std::make_unique<uint32_t[]>(kBatch);
  return owned;
}

TransportStats UdpSocket::stats() const {
  TransportStats t;
  t.rx_dropped = rx_dropped_.load(std::memory_order_relaxed);
  return t;
}

uint32_t UdpSocket::PlanSends(const OutDatagram* datagrams, uint32_t n) {
  uint32_t sends = 0;
  for (uint32_t i = 0; i < n; ++sends) {
    const uint32_t first = i;
    const uint32_t size = datagrams[first].length;
    uint32_t bytes = size;
    out_iov_[i] = iovec{const_cast<uint8_t*>(datagrams[i].data), size};
    ++i;
    // A run: datagrams of the first one's size to its destination; one
    // shorter datagram may end it (the kernel cuts every gso_size bytes,
    // and the rest is the last datagram).
    while (gso_ && size > 0 && i < n && i - first < kMaxSegments &&
           SameDestination(datagrams[i].to, datagrams[first].to) && datagrams[i].length > 0 &&
           datagrams[i].length <= size && bytes + datagrams[i].length <= kMaxSendBytes) {
      const uint32_t length = datagrams[i].length;
      out_iov_[i] = iovec{const_cast<uint8_t*>(datagrams[i].data), length};
      bytes += length;
      ++i;
      if (length < size) break;
    }
    msghdr& h = out_msgs_[sends].msg_hdr;
    h = msghdr{};
    h.msg_name = const_cast<sockaddr_in*>(datagrams[first].to);
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &out_iov_[first];
    h.msg_iovlen = i - first;
    if (i - first > 1) {
      h.msg_control = out_control_.get() + size_t{sends} * kSegmentControlBytes;
      h.msg_controllen = kSegmentControlBytes;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const auto segment = static_cast<uint16_t>(size);
      std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    }
    out_datagrams_[sends] = i - first;
  }
  return sends;
}

common::Result<uint32_t> UdpSocket::Send(const OutDatagram* datagrams, uint32_t n) {
  if (n > kBatch) n = kBatch;
  uint32_t sends = PlanSends(datagrams, n);
  uint32_t taken = 0;  // datagrams
  uint32_t sent = 0;   // sends
  while (sent < sends) {
    const int r = sendmmsg(fd_.get(), &out_msgs_[sent], sends - sent, MSG_DONTWAIT);
    if (r > 0) {
      for (int k = 0; k < r; ++k) taken += out_datagrams_[sent + k];
      sent += static_cast<uint32_t>(r);
      sends_ += static_cast<uint64_t>(r);
      continue;
    }
    if (errno == EINTR) continue;
    // A full send buffer or device queue: the caller waits and sends the rest.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
    if ((errno == EIO || errno == EINVAL) && out_datagrams_[sent] > 1) {
      // The route's device cannot checksum a segmented send (EIO), or the
      // segments do not fit its MTU (EINVAL): from now on one send per
      // datagram, which says EMSGSIZE in the second case.
      gso_ = false;
      ASSIGN_OR_RETURN(const uint32_t rest, Send(datagrams + taken, n - taken));
      return taken + rest;
    }
    const sockaddr_in& to = *datagrams[taken].to;
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &to.sin_addr, ip, sizeof(ip));
    std::string what = "send to " + std::string(ip) + ":" + std::to_string(ntohs(to.sin_port));
    if (errno == EMSGSIZE) what += " (the datagram exceeds the path MTU; lower the client's mtu)";
    return common::Unavailable(ErrnoText(what.c_str()));
  }
  return taken;
}

common::Result<std::span<const InDatagram>> UdpSocket::Receive() {
  for (uint32_t i = 0; i < kBatch; ++i) {
    in_iov_[i] = iovec{buffers_.get() + size_t{i} * buffer_bytes_, buffer_bytes_};
    msghdr& h = in_msgs_[i].msg_hdr;
    h = msghdr{};
    h.msg_name = &in_from_[i];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &in_iov_[i];
    h.msg_iovlen = 1;
    h.msg_control = in_control_.get() + i * kControlBytes;
    h.msg_controllen = kControlBytes;
  }
  int r;
  do {
    r = recvmmsg(fd_.get(), in_msgs_.get(), kBatch, MSG_DONTWAIT, nullptr);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::span<const InDatagram>();
    return common::Unavailable(ErrnoText("recvmmsg"));
  }
  for (int i = 0; i < r; ++i) {
    const msghdr& h = in_msgs_[i].msg_hdr;
    InDatagram& d = in_[i];
    d.data = static_cast<const uint8_t*>(h.msg_iov->iov_base);
    d.length = in_msgs_[i].msg_len;
    d.from = in_from_[i];
    // A truncated datagram is not the one that was sent: it reads as empty
    // (and the engine counts it as stray).
    if (h.msg_flags & MSG_TRUNC) d.length = 0;
    for (const cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&h), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        uint32_t dropped;  // the socket's drops since it was opened
        std::memcpy(&dropped, CMSG_DATA(c), sizeof(dropped));
        rx_dropped_.store(dropped, std::memory_order_relaxed);
      }
    }
  }
  return std::span<const InDatagram>(in_.get(), static_cast<size_t>(r));
}

common::Status UdpSocket::Wait(Clock::time_point deadline, bool want_write) {
  return waker_.Wait(fd_.get(), static_cast<short>(POLLIN | (want_write ? POLLOUT : 0)), deadline);
}

void UdpSocket::Wake() const {
  waker_.Wake();
}

}  // namespace aggswitch::client::internal
