#include "dataplane/xsk_stats.h"

#include <dirent.h>
#include <linux/if_xdp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#ifndef SOL_XDP
#define SOL_XDP 283
#endif

namespace aggswitch::dataplane {
namespace {

// The socket's statistics when `fd` is an AF_XDP socket (only one answers
// SOL_XDP); else false. `len` is what the kernel filled.
bool Statistics(int fd, xdp_statistics* s, socklen_t* len) {
  *s = xdp_statistics{};
  *len = sizeof(*s);
  return getsockopt(fd, SOL_XDP, XDP_STATISTICS, s, len) == 0;
}

}  // namespace

std::vector<XskSocket> ListXskSockets() {
  std::vector<XskSocket> out;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  const int dir_fd = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dir_fd) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    xdp_statistics s;
    socklen_t len;
    if (!Statistics(static_cast<int>(fd), &s, &len)) continue;
    out.push_back(XskSocket{static_cast<int>(fd), static_cast<uint64_t>(st.st_ino)});
  }
  closedir(dir);
  return out;
}

std::vector<XskSocket> NewXskSockets(const std::vector<XskSocket>& before,
                                     const std::vector<XskSocket>& after) {
  std::vector<XskSocket> out;
  for (const XskSocket& s : after) {
    if (std::find(before.begin(), before.end(), s) == before.end()) out.push_back(s);
  }
  return out;
}

XskCounters ReadXskCounters(const std::vector<XskSocket>& sockets) {
  XskCounters total;
  for (const XskSocket& sock : sockets) {
    struct stat st {};
    if (fstat(sock.fd, &st) != 0 || static_cast<uint64_t>(st.st_ino) != sock.inode) continue;
    xdp_statistics s;
    socklen_t len;
    if (!Statistics(sock.fd, &s, &len)) continue;
    total.rx_dropped += s.rx_dropped;
    total.rx_invalid_descs += s.rx_invalid_descs;
    total.tx_invalid_descs += s.tx_invalid_descs;
    // The last three fields came with Linux 5.9; an older kernel fills less.
    if (len >= sizeof(s)) {
      total.rx_ring_full += s.rx_ring_full;
      total.rx_fill_ring_empty_descs += s.rx_fill_ring_empty_descs;
      total.tx_ring_empty_descs += s.tx_ring_empty_descs;
    }
    ++total.sockets;
  }
  return total;
}

}  // namespace aggswitch::dataplane
