// A UDP socket bound to an IPv4 address, for the tools that serve on one
// (agg-ps, agg-intcollector): non-blocking, close-on-exec, 4 MiB buffers
// asked for (the kernel caps them).
//
//   ASSIGN_OR_RETURN(BoundUdp s, BindUdp(listen, "--listen 0.0.0.0:47000"));
//   ... recvmmsg(s.fd, ...) ...; close(s.fd);
//
// Thread safety: any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::common {

struct BoundUdp {
  int fd = -1;        // the caller's to close
  uint16_t port = 0;  // the port bound (the ephemeral one for port 0)
};

// An error names `where` (the option that asked for the address) and why.
Result<BoundUdp> BindUdp(const Ipv4Endpoint& at, const std::string& where);

}  // namespace aggswitch::common
