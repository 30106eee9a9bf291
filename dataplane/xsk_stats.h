// The kernel's own counters of the AF_XDP sockets behind a net_af_xdp port
// (getsockopt XDP_STATISTICS).
//
// DPDK 22.11's net_af_xdp adds only the socket's rx_dropped to the port's
// imissed. A frame the kernel dropped because the socket's RX ring was full
// (a worker lcore came back to the port too late) is counted nowhere else,
// and a sender sees it only as a loss. The switch reads these counters from
// the sockets its process holds. The driver keeps their descriptors to
// itself, and an AF_XDP socket does not tell its interface (no getsockname,
// and sock_diag for XDP is often not built in), so the port's sockets are
// the ones that appeared among the process's open files while the port was
// set up:
//
//   std::vector<XskSocket> before = ListXskSockets();
//   ... rte_eth_rx_queue_setup, rte_eth_dev_start ...
//   std::vector<XskSocket> mine = NewXskSockets(before, ListXskSockets());
//   XskCounters c = ReadXskCounters(mine);  // later, at each scrape
//
// No DPDK here. Thread safety: these make system calls, so the control
// thread (port set-up, metrics, API) calls them, never a worker lcore.
#pragma once

#include <cstdint>
#include <vector>

namespace aggswitch::dataplane {

// An AF_XDP socket of this process: its descriptor, and the socket's inode,
// which tells whether the descriptor still holds the same socket.
struct XskSocket {
  int fd = -1;
  uint64_t inode = 0;
  bool operator==(const XskSocket&) const = default;
};

// struct xdp_statistics, summed over the sockets read.
struct XskCounters {
  uint64_t rx_dropped = 0;                // no fill-ring buffer, or a frame too long for one
  uint64_t rx_invalid_descs = 0;
  uint64_t tx_invalid_descs = 0;
  uint64_t rx_ring_full = 0;              // the RX ring had no room: the frame is lost
  uint64_t rx_fill_ring_empty_descs = 0;  // times the fill ring was found empty
  uint64_t tx_ring_empty_descs = 0;
  uint32_t sockets = 0;                   // sockets read (still open, still the same)
};

// Every AF_XDP socket this process holds, by descriptor. Empty when
// /proc/self/fd cannot be read. [control thread]
std::vector<XskSocket> ListXskSockets();

// The sockets of `after` that `before` does not hold. [any thread]
std::vector<XskSocket> NewXskSockets(const std::vector<XskSocket>& before,
                                     const std::vector<XskSocket>& after);

// Sums the counters of `sockets`, skipping any whose descriptor was closed
// or now holds another file. [control thread]
XskCounters ReadXskCounters(const std::vector<XskSocket>& sockets);

}  // namespace aggswitch::dataplane
