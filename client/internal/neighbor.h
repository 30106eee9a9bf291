// The next hop and link-layer address of an IPv4 destination, as the kernel
// knows them: the AF_XDP transport writes its own Ethernet headers, so it asks
// the kernel once, at start, where the switch is.
//
//   ASSIGN_OR_RETURN(NextHop hop, LookUpRoute(ReadFile("/proc/net/route"), dst));
//   ASSIGN_OR_RETURN(common::MacAddr mac, ResolveNeighbor(dst, "veth0", 1000ms));
//
// ResolveNeighbor reads the main routing table and the neighbour table of the
// calling thread's network namespace (/proc/thread-self/net/route and arp).
// When the next hop has no complete entry it sends the next hop an ICMP echo
// through the kernel (again every 250 ms), which makes the kernel resolve it
// with ARP, and reads the table again until the entry is complete or the
// timeout passes. The parsers are separate so that tests can feed them
// tables.
//
// Thread safety: every function [any].
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::client::internal {

// Where the kernel sends packets for a destination.
struct NextHop {
  std::string interface;
  common::Ipv4Addr via;  // the gateway, or the destination itself when on-link
};

// The most specific route of `table` (the text of /proc/net/route) for `dst`;
// among equally specific ones, the lowest metric. kNotFound when none matches.
common::Result<NextHop> LookUpRoute(std::string_view table, common::Ipv4Addr dst);

// The link-layer address of `ip` on `interface` in `table` (the text of
// /proc/net/arp), if the entry is complete.
std::optional<common::MacAddr> LookUpNeighbor(std::string_view table, common::Ipv4Addr ip,
                                              std::string_view interface);

// The MAC to send to for `dst` out of `interface`: the next hop's, resolved by
// the kernel. Fails when the route to dst leaves through another interface, or
// the next hop does not answer ARP within `timeout`.
common::Result<common::MacAddr> ResolveNeighbor(common::Ipv4Addr dst, const std::string& interface,
                                                std::chrono::milliseconds timeout);

}  // namespace aggswitch::client::internal
