#include "client/internal/neighbor.h"

#include <arpa/inet.h>
#include <netinet/ip_icmp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "client/internal/transport.h"
#include "dataplane/udp_headers.h"

namespace aggswitch::client::internal {

namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// /proc/net/route prints addresses as the hex of their 32 bits in memory
// (network order) read as a host integer.
std::optional<uint32_t> ParseRouteAddress(const std::string& hex) {
  if (hex.size() != 8) return std::nullopt;
  char* end = nullptr;
  const unsigned long v = std::strtoul(hex.c_str(), &end, 16);
  if (end != hex.c_str() + hex.size()) return std::nullopt;
  return ntohl(static_cast<uint32_t>(v));
}

constexpr unsigned kRouteUp = 0x1;       // RTF_UP
constexpr unsigned kRouteGateway = 0x2;  // RTF_GATEWAY
constexpr unsigned kArpComplete = 0x2;   // ATF_COM

// One ICMP echo to `ip` through the kernel: the kernel resolves the next hop
// with ARP to send it. Best effort: without CAP_NET_RAW a UDP datagram to the
// discard port does the same.
void Probe(common::Ipv4Addr ip) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(ip.addr);
  UniqueFd raw(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
  if (raw.get() >= 0) {
    uint8_t echo[8] = {ICMP_ECHO, 0, 0, 0, 0x61, 0x67, 0, 1};
    const uint16_t sum = dataplane::InternetChecksum(echo, sizeof(echo));
    std::memcpy(echo + 2, &sum, sizeof(sum));
    (void)sendto(raw.get(), echo, sizeof(echo), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to),
                 sizeof(to));
    return;
  }
  UniqueFd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (udp.get() < 0) return;
  to.sin_port = htons(9);
  (void)sendto(udp.get(), "", 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof(to));
}

}  // namespace

common::Result<NextHop> LookUpRoute(std::string_view table, common::Ipv4Addr dst) {
  std::istringstream lines{std::string(table)};
  std::string line;
  std::getline(lines, line);  // the heading
  std::optional<NextHop> best;
  int best_len = -1;
  unsigned long best_metric = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string iface, dest_hex, gw_hex, mask_hex;
    unsigned flags = 0;
    unsigned long refcnt, use, metric = 0;
    if (!(f >> iface >> dest_hex >> gw_hex >> std::hex >> flags >> std::dec >> refcnt >> use >>
          metric >> mask_hex)) {
      continue;
    }
    const auto dest = ParseRouteAddress(dest_hex);
    const auto gw = ParseRouteAddress(gw_hex);
    const auto mask = ParseRouteAddress(mask_hex);
    if (!dest || !gw || !mask || (flags & kRouteUp) == 0) continue;
    if ((dst.addr & *mask) != (*dest & *mask)) continue;
    const int len = std::popcount(*mask);
    if (len < best_len || (len == best_len && metric >= best_metric)) continue;
    best_len = len;
    best_metric = metric;
    best = NextHop{iface, common::Ipv4Addr{(flags & kRouteGateway) != 0 ? *gw : dst.addr}};
  }
  if (!best) return common::NotFound("no route to " + dst.ToString());
  return *best;
}

std::optional<common::MacAddr> LookUpNeighbor(std::string_view table, common::Ipv4Addr ip,
                                              std::string_view interface) {
  std::istringstream lines{std::string(table)};
  std::string line;
  std::getline(lines, line);  // the heading
  const std::string want = ip.ToString();
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string addr, hw_type, flags_hex, mac, mask, device;
    if (!(f >> addr >> hw_type >> flags_hex >> mac >> mask >> device)) continue;
    if (addr != want || device != interface) continue;
    const unsigned long flags = std::strtoul(flags_hex.c_str(), nullptr, 16);
    if ((flags & kArpComplete) == 0) continue;
    return common::MacAddr::Parse(mac);
  }
  return std::nullopt;
}

common::Result<common::MacAddr> ResolveNeighbor(common::Ipv4Addr dst, const std::string& interface,
                                                std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(const NextHop hop, LookUpRoute(ReadFile("/proc/thread-self/net/route"), dst));
  if (hop.interface != interface) {
    return common::FailedPrecondition("the route to " + dst.ToString() + " leaves through " +
                                      hop.interface + ", not " + interface +
                                      ": give the interface that reaches the switch");
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  // A probe now and then: the first one's ARP request may be lost too.
  Clock::time_point next_probe = Clock::now();
  for (;;) {
    if (auto mac = LookUpNeighbor(ReadFile("/proc/thread-self/net/arp"), hop.via, interface)) return *mac;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    if (now >= next_probe) {
      Probe(hop.via);
      next_probe = now + std::chrono::milliseconds(250);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return common::Unavailable(
      (hop.via.addr == dst.addr ? "the switch " + dst.ToString()
                                : "the gateway " + hop.via.ToString() + " to " + dst.ToString()) +
      " did not answer ARP on " + interface + " within " + std::to_string(timeout.count()) +
      " ms");
}

}  // namespace aggswitch::client::internal
