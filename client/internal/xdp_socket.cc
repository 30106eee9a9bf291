#include "client/internal/xdp_socket.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_ether.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "client/client.h"
#include "client/internal/answer_redirect_bpf.h"
#include "client/internal/neighbor.h"
#include "dataplane/udp_headers.h"

namespace aggswitch::client::internal {

static_assert(XdpSocket::kMaxMtu == kMaxAfXdpMtu, "client.h states the AF_XDP MTU limit");

struct XdpSocket::Rings {
  xsk_ring_prod fill{};
  xsk_ring_cons comp{};
  xsk_ring_cons rx{};
  xsk_ring_prod tx{};
  xsk_umem* umem = nullptr;
  xsk_socket* xsk = nullptr;
  xdp_program* program = nullptr;
  int ifindex = 0;
  enum xdp_attach_mode mode = XDP_MODE_UNSPEC;
  int fd = -1;  // the AF_XDP socket's
};

namespace {

constexpr uint32_t kRingSize = 2048;  // every ring; kRxFrames fit in the fill ring
constexpr uint32_t kEthOffset = XdpSocket::kPayloadOffset - XdpSocket::kHeaderBytes;
// Queue ids the XDP program has map entries for (AGG_MAX_QUEUES).
constexpr uint32_t kMaxQueues = 64;

// The value of the program's agg_answer_to map.
struct AnswerTo {
  uint32_t ip;    // network order
  uint16_t port;  // network order
  uint16_t pad;
};

std::string ErrnoText(int err) {
  return std::strerror(err);
}

uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

// The number of receive queues the kernel shows for `interface`.
uint32_t QueueCount(const std::string& interface) {
  std::error_code ec;
  uint32_t n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator("/sys/class/net/" + interface + "/queues", ec)) {
    if (e.path().filename().string().rfind("rx-", 0) == 0) ++n;
  }
  return n;
}

std::string Privilege(const std::string& what) {
  return what + ": AF_XDP needs CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF (run as root), or use "
                "the udp transport";
}

// libbpf and libxdp print their own diagnostics: only warnings, and only when
// the caller asked for logs, would help; the errors returned here say what
// failed. Quiet for the whole process, set once.
int Quiet(enum libbpf_print_level, const char*, va_list) {
  return 0;
}
int QuietXdp(enum libxdp_print_level, const char*, va_list) {
  return 0;
}

}  // namespace

XdpSocket::XdpSocket() : rings_(std::make_unique<Rings>()) {}

XdpSocket::~XdpSocket() {
  if (rings_->program != nullptr) {
    if (rings_->mode != XDP_MODE_UNSPEC) {
      xdp_program__detach(rings_->program, rings_->ifindex, rings_->mode, 0);
    }
    xdp_program__close(rings_->program);
  }
  if (rings_->xsk != nullptr) xsk_socket__delete(rings_->xsk);
  if (rings_->umem != nullptr) xsk_umem__delete(rings_->umem);
  if (umem_ != nullptr) munmap(umem_, umem_bytes_);
}

common::Result<std::unique_ptr<XdpSocket>> XdpSocket::Open(const Options& options) {
  std::unique_ptr<XdpSocket> s(new XdpSocket());
  RETURN_IF_ERROR(s->Setup(options));
  return s;
}

common::Status XdpSocket::Setup(const Options& o) {
  static const bool quiet = [] {
    libbpf_set_print(Quiet);
    libxdp_set_print(QuietXdp);
    return true;
  }();
  (void)quiet;
  const std::string where = "af_xdp on " + o.interface + " queue " + std::to_string(o.queue);
  if (o.interface.empty()) return common::InvalidArgument("af_xdp: an interface is required");
  rings_->ifindex = static_cast<int>(if_nametoindex(o.interface.c_str()));
  if (rings_->ifindex == 0) {
    return common::NotFound(where + ": no interface " + o.interface + " in this network namespace");
  }
  const uint32_t queues = QueueCount(o.interface);
  if (o.queue >= kMaxQueues || (queues > 0 && o.queue >= queues)) {
    return common::InvalidArgument(where + ": " + o.interface + " has " + std::to_string(queues) +
                                   " receive queues (0.." + std::to_string(queues - 1) + ")");
  }
  if (o.destinations.empty()) return common::InvalidArgument(where + ": no destination");

  // Privilege and kernel support first: the clearest errors.
  {
    UniqueFd probe(socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0));
    if (probe.get() < 0) {
      if (errno == EPERM || errno == EACCES) return common::FailedPrecondition(Privilege(where));
      return common::Unavailable(where + ": no AF_XDP sockets in this kernel (" +
                                 ErrnoText(errno) + ")");
    }
  }

  // The interface: its MAC and MTU.
  {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq req{};
    std::strncpy(req.ifr_name, o.interface.c_str(), IFNAMSIZ - 1);
    if (fd.get() < 0 || ioctl(fd.get(), SIOCGIFHWADDR, &req) != 0) {
      return common::Unavailable(where + ": cannot read the interface's MAC: " + ErrnoText(errno));
    }
    std::memcpy(own_mac_.bytes.data(), req.ifr_hwaddr.sa_data, 6);
    if (ioctl(fd.get(), SIOCGIFMTU, &req) != 0) {
      return common::Unavailable(where + ": cannot read the interface's MTU: " + ErrnoText(errno));
    }
    const uint32_t if_mtu = static_cast<uint32_t>(req.ifr_mtu);
    if (o.mtu > if_mtu || o.mtu > kMaxMtu) {
      return common::InvalidArgument(
          where + ": mtu " + std::to_string(o.mtu) + " is larger than " +
          (o.mtu > if_mtu ? "the interface's MTU, " + std::to_string(if_mtu)
                          : "an AF_XDP frame holds, " + std::to_string(kMaxMtu)));
    }
  }

  // Addresses: ours, and the next hop's MAC for every destination.
  sockaddr_in local{};
  local.sin_family = AF_INET;
  if (o.bind_ip.addr != 0) {
    local.sin_addr.s_addr = htonl(o.bind_ip.addr);
  } else {
    UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(o.destinations[0].addr);
    to.sin_port = htons(9);
    socklen_t len = sizeof(local);
    if (fd.get() < 0 || connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 ||
        getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      return common::Unavailable(where + ": no route to " + o.destinations[0].ToString() + ": " +
                                 ErrnoText(errno));
    }
  }
  own_ip_ = ntohl(local.sin_addr.s_addr);
  for (const common::Ipv4Addr& d : o.destinations) {
    if (std::any_of(neighbors_.begin(), neighbors_.end(),
                    [&](const Neighbor& n) { return n.ip == d.addr; })) {
      continue;
    }
    ASSIGN_OR_RETURN(const common::MacAddr mac,
                     ResolveNeighbor(d, o.interface, o.resolve_timeout));
    neighbors_.push_back({d.addr, mac});
  }
  // The port, held by a kernel socket for the client's lifetime.
  port_fd_ = UniqueFd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  local.sin_port = htons(o.bind_port);
  if (port_fd_.get() < 0 ||
      bind(port_fd_.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    return common::Unavailable(where + ": bind " + common::Ipv4Addr{own_ip_}.ToString() + ":" +
                               std::to_string(o.bind_port) + ": " + ErrnoText(errno));
  }
  socklen_t len = sizeof(local);
  getsockname(port_fd_.get(), reinterpret_cast<sockaddr*>(&local), &len);
  local_port_ = ntohs(local.sin_port);

  ASSIGN_OR_RETURN(waker_, Waker::Create());

  // The UMEM: the send frames, then the receive frames.
  send_frames_ = o.send_buffers;
  umem_bytes_ = size_t{send_frames_ + kRxFrames} * kFrameBytes;
  void* area = mmap(nullptr, umem_bytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (area == MAP_FAILED) {
    return common::ResourceExhausted(where + ": cannot map " + std::to_string(umem_bytes_ >> 20) +
                                     " MiB of UMEM: " + ErrnoText(errno));
  }
  umem_ = static_cast<uint8_t*>(area);
  tx_pending_.assign(send_frames_, 0);
  held_.reserve(kBatch);
  in_ = std::make_unique<InDatagram[]>(kBatch);

  RETURN_IF_ERROR(AttachProgram(o));
  RETURN_IF_ERROR(CreateSocket(o));

  // Hand every receive frame to the kernel.
  uint32_t idx = 0;
  if (xsk_ring_prod__reserve(&rings_->fill, kRxFrames, &idx) != kRxFrames) {
    return common::Internal(where + ": the fill ring does not take every receive frame");
  }
  for (uint32_t i = 0; i < kRxFrames; ++i) {
    *xsk_ring_prod__fill_addr(&rings_->fill, idx + i) = uint64_t{send_frames_ + i} * kFrameBytes;
  }
  xsk_ring_prod__submit(&rings_->fill, kRxFrames);

  // Only now point the program at the socket.
  bpf_object* obj = xdp_program__bpf_obj(rings_->program);
  bpf_map* xsks = bpf_object__find_map_by_name(obj, "agg_answer_xsks");
  bpf_map* to = bpf_object__find_map_by_name(obj, "agg_answer_to");
  const uint32_t key = o.queue;
  const int fd = rings_->fd;
  const AnswerTo value{htonl(own_ip_), htons(local_port_), 0};
  if (xsks == nullptr || to == nullptr ||
      bpf_map_update_elem(bpf_map__fd(xsks), &key, &fd, BPF_ANY) != 0 ||
      bpf_map_update_elem(bpf_map__fd(to), &key, &value, BPF_ANY) != 0) {
    return common::Internal(where + ": cannot fill the XDP program's maps: " + ErrnoText(errno));
  }
  description_ = "af_xdp " + o.interface + " queue " + std::to_string(o.queue) + ", " +
                 (zero_copy_ ? "zero-copy" : "copy") + " mode, " +
                 (rings_->mode == XDP_MODE_NATIVE ? "native" : "generic") + " XDP";
  return common::Status::Ok();
}

common::Status XdpSocket::AttachProgram(const Options& o) {
  const std::string where = "af_xdp on " + o.interface;
  const std::span<const uint8_t> object = AnswerRedirectBpfObject();
  DECLARE_LIBBPF_OPTS(bpf_object_open_opts, open_opts, .object_name = "agg_answer_redirect");
  bpf_object* obj = bpf_object__open_mem(object.data(), object.size(), &open_opts);
  if (libbpf_get_error(obj) != 0) {
    return common::Internal(where + ": cannot open the embedded XDP program");
  }
  rings_->program = xdp_program__from_bpf_obj(obj, "xdp");
  if (libxdp_get_error(rings_->program) != 0) {
    const int err = static_cast<int>(-libxdp_get_error(rings_->program));
    rings_->program = nullptr;
    bpf_object__close(obj);
    return common::Internal(where + ": cannot use the embedded XDP program: " + ErrnoText(err));
  }
  // Native (driver) XDP where the driver has it, generic XDP otherwise.
  int err = 0;
  for (const enum xdp_attach_mode mode : {XDP_MODE_NATIVE, XDP_MODE_SKB}) {
    err = -xdp_program__attach(rings_->program, rings_->ifindex, mode, 0);
    if (err == 0) {
      rings_->mode = mode;
      return common::Status::Ok();
    }
    if (err == EPERM || err == EACCES) break;
  }
  if (err == EPERM || err == EACCES) {
    return common::FailedPrecondition(Privilege(where + ": attaching the XDP program"));
  }
  if (err == EBUSY || err == EEXIST) {
    return common::Unavailable(where + ": the interface is busy: another XDP program that libxdp "
                                       "cannot run beside ours is attached (ip link show " +
                               o.interface + ")");
  }
  if (err == EOPNOTSUPP) {
    return common::Unavailable(where + ": the interface has no XDP support");
  }
  return common::Unavailable(where + ": cannot attach the XDP program: " + ErrnoText(err));
}

common::Status XdpSocket::CreateSocket(const Options& o) {
  const std::string where = "af_xdp on " + o.interface + " queue " + std::to_string(o.queue);
  xsk_umem_config umem_config{};
  umem_config.fill_size = kRingSize;
  umem_config.comp_size = kRingSize;
  umem_config.frame_size = kFrameBytes;
  umem_config.frame_headroom = 0;
  xsk_socket_config config{};
  config.rx_size = kRingSize;
  config.tx_size = kRingSize;
  config.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  // Zero-copy where the driver offers it; copy mode otherwise. A failed
  // bind leaves the UMEM's rings half set up, so each try gets a new UMEM.
  //
  // A socket closed on the queue a moment ago (a client of this process, or
  // a rank that restarted) keeps the queue busy until the kernel has
  // released it; the queue's socket fails with EBUSY meanwhile. Seen in
  // client_af_xdp_test: a client opened right after the previous test's was
  // destroyed. So EBUSY is tried again for up to kBusyWait before it counts.
  constexpr auto kBusyWait = std::chrono::milliseconds(500);
  constexpr auto kBusyStep = std::chrono::milliseconds(10);
  const auto busy_until = std::chrono::steady_clock::now() + kBusyWait;
  int err = 0;
  bool zero_copy = true;
  while (true) {
    err = -xsk_umem__create(&rings_->umem, umem_, umem_bytes_, &rings_->fill, &rings_->comp,
                            &umem_config);
    if (err != 0) break;
    config.bind_flags =
        static_cast<uint16_t>(XDP_USE_NEED_WAKEUP | (zero_copy ? XDP_ZEROCOPY : XDP_COPY));
    err = -xsk_socket__create(&rings_->xsk, o.interface.c_str(), o.queue, rings_->umem,
                              &rings_->rx, &rings_->tx, &config);
    if (err == 0) {
      zero_copy_ = zero_copy;
      rings_->fd = xsk_socket__fd(rings_->xsk);
      return common::Status::Ok();
    }
    rings_->xsk = nullptr;
    xsk_umem__delete(rings_->umem);
    rings_->umem = nullptr;
    if (err == EBUSY && std::chrono::steady_clock::now() < busy_until) {
      std::this_thread::sleep_for(kBusyStep);  // the same mode again
      continue;
    }
    if (err == EPERM || err == EACCES || err == EBUSY || !zero_copy) break;
    zero_copy = false;
  }
  if (err == EPERM || err == EACCES) return common::FailedPrecondition(Privilege(where));
  if (err == EBUSY) {
    return common::Unavailable(where + ": the queue is busy: another AF_XDP socket is bound to it");
  }
  if (err == ENOMEM || err == ENOBUFS) {
    return common::ResourceExhausted(where + ": cannot register the UMEM (" + ErrnoText(err) +
                                     "): raise the locked-memory limit (ulimit -l)");
  }
  return common::Unavailable(where + ": cannot create the AF_XDP socket: " + ErrnoText(err));
}

void XdpSocket::TakeCompletions() {
  if (tx_outstanding_ == 0) return;
  uint32_t idx = 0;
  const uint32_t n = xsk_ring_cons__peek(&rings_->comp, kRingSize, &idx);
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t addr = *xsk_ring_cons__comp_addr(&rings_->comp, idx + i);
    const uint32_t frame = static_cast<uint32_t>(addr / kFrameBytes);
    if (frame < send_frames_ && tx_pending_[frame] > 0) --tx_pending_[frame];
  }
  xsk_ring_cons__release(&rings_->comp, n);
  tx_outstanding_ -= std::min(tx_outstanding_, n);
}

bool XdpSocket::SendBufferFree(uint32_t i) {
  if (tx_pending_[i] == 0) return true;
  TakeCompletions();
  return tx_pending_[i] == 0;
}

void XdpSocket::Kick(uint32_t queued) {
  if (!xsk_ring_prod__needs_wakeup(&rings_->tx)) return;
  // In copy mode each call sends at most 32 frames and says EAGAIN when more
  // wait: a bounded number of calls sends them all.
  for (uint32_t calls = queued / 32 + 2; calls > 0; --calls) {
    if (sendto(rings_->fd, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) break;
    if (errno != EAGAIN && errno != EBUSY && errno != EINTR) break;
  }
}

bool XdpSocket::WriteHeaders(const OutDatagram& d, uint8_t* payload) {
  const uint32_t to_ip = ntohl(d.to->sin_addr.s_addr);
  const auto n = std::find_if(neighbors_.begin(), neighbors_.end(),
                              [to_ip](const Neighbor& e) { return e.ip == to_ip; });
  if (n == neighbors_.end()) return false;
  dataplane::WriteUdpHeaders(payload - kHeaderBytes, n->mac.bytes.data(), own_mac_.bytes.data(), 0,
                             own_ip_, to_ip, local_port_, ntohs(d.to->sin_port), ip_id_++,
                             d.length);
  return true;
}

common::Result<uint32_t> XdpSocket::Send(const OutDatagram* datagrams, uint32_t n) {
  if (n > kBatch) n = kBatch;
  TakeCompletions();
  n = std::min(n, xsk_prod_nb_free(&rings_->tx, n));
  uint32_t idx = 0;
  if (n == 0 || xsk_ring_prod__reserve(&rings_->tx, n, &idx) != n) {
    Kick(0);
    return 0u;
  }
  for (uint32_t i = 0; i < n; ++i) {
    const OutDatagram& d = datagrams[i];
    const size_t offset = static_cast<size_t>(d.data - umem_);
    const uint32_t frame = static_cast<uint32_t>(offset / kFrameBytes);
    if (d.data < umem_ || frame >= send_frames_ || offset % kFrameBytes != kPayloadOffset ||
        !WriteHeaders(d, const_cast<uint8_t*>(d.data))) {
      // Not a send buffer, or an address never resolved: a caller's bug.
      rings_->tx.cached_prod -= n;  // take the reservation back
      return common::Internal("af_xdp: datagram " + std::to_string(i) +
                              " is not in a send buffer or goes to an unresolved address");
    }
    xdp_desc* desc = xsk_ring_prod__tx_desc(&rings_->tx, idx + i);
    desc->addr = uint64_t{frame} * kFrameBytes + kEthOffset;
    desc->len = kHeaderBytes + d.length;
    desc->options = 0;
    ++tx_pending_[frame];
  }
  tx_outstanding_ += n;
  xsk_ring_prod__submit(&rings_->tx, n);
  Kick(n);
  return n;
}

common::Result<std::span<const InDatagram>> XdpSocket::Receive() {
  // The frames of the last batch go back to the kernel first.
  if (!held_.empty()) {
    uint32_t idx = 0;
    const uint32_t n = static_cast<uint32_t>(held_.size());
    // The fill ring holds every receive frame, so this always succeeds.
    if (xsk_ring_prod__reserve(&rings_->fill, n, &idx) == n) {
      for (uint32_t i = 0; i < n; ++i) *xsk_ring_prod__fill_addr(&rings_->fill, idx + i) = held_[i];
      xsk_ring_prod__submit(&rings_->fill, n);
      held_.clear();
    }
    if (xsk_ring_prod__needs_wakeup(&rings_->fill)) {
      (void)recvfrom(rings_->fd, nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
  }
  uint32_t idx = 0;
  const uint32_t got = xsk_ring_cons__peek(&rings_->rx, kBatch, &idx);
  uint32_t out = 0;
  for (uint32_t i = 0; i < got; ++i) {
    const xdp_desc* desc = xsk_ring_cons__rx_desc(&rings_->rx, idx + i);
    held_.push_back(xsk_umem__extract_addr(desc->addr));
    const uint8_t* eth = static_cast<const uint8_t*>(xsk_umem__get_data(umem_, desc->addr));
    const uint32_t len = desc->len;
    // The program sent only IPv4 UDP with a 20-byte header here; the lengths
    // are still the sender's to get wrong.
    const uint8_t* ip = eth + 14;
    const uint8_t* udp = ip + 20;
    const uint32_t udp_len = len >= kHeaderBytes ? Get16(udp + 4) : 0;
    if (len < kHeaderBytes || Get16(eth + 12) != ETH_P_IP || ip[0] != 0x45 ||
        udp_len < 8 || 14 + 20 + udp_len > len || Get16(ip + 2) != 20 + udp_len) {
      malformed_.store(malformed_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      continue;
    }
    InDatagram& d = in_[out++];
    d.data = udp + 8;
    d.length = udp_len - 8;
    d.from = sockaddr_in{};
    d.from.sin_family = AF_INET;
    std::memcpy(&d.from.sin_addr.s_addr, ip + 12, 4);
    std::memcpy(&d.from.sin_port, udp, 2);
  }
  xsk_ring_cons__release(&rings_->rx, got);
  return std::span<const InDatagram>(in_.get(), out);
}

common::Status XdpSocket::Wait(Clock::time_point deadline, bool want_write) {
  // Sends the device has not completed hold their frames: look again soon.
  if (tx_outstanding_ > 0) {
    TakeCompletions();
    if (tx_outstanding_ > 0) {
      deadline = std::min(deadline, Clock::now() + std::chrono::microseconds(50));
    }
  }
  return waker_.Wait(rings_->fd, static_cast<short>(POLLIN | (want_write ? POLLOUT : 0)),
                     deadline);
}

void XdpSocket::Wake() const {
  waker_.Wake();
}

TransportStats XdpSocket::stats() const {
  TransportStats t;
  xdp_statistics x{};
  socklen_t len = sizeof(x);
  if (getsockopt(rings_->fd, SOL_XDP, XDP_STATISTICS, &x, &len) == 0) {
    t.rx_dropped = x.rx_dropped + x.rx_ring_full + x.rx_fill_ring_empty_descs;
  }
  t.malformed = malformed_.load(std::memory_order_relaxed);
  return t;
}

}  // namespace aggswitch::client::internal
