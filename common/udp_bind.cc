#include "common/udp_bind.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace aggswitch::common {

Result<BoundUdp> BindUdp(const Ipv4Endpoint& at, const std::string& where) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket(AF_INET, SOCK_DGRAM): ") + std::strerror(errno));
  const int buffer_bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof(buffer_bytes));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof(buffer_bytes));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(at.ip.addr);
  local.sin_port = htons(at.port);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return Unavailable(where + ": cannot bind: " + why +
                       " (expected a local IPv4 address and a free UDP port)");
  }
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  return BoundUdp{fd, ntohs(local.sin_port)};
}

}  // namespace aggswitch::common
