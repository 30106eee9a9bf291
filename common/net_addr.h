// Address value types shared by config, dataplane and tools: MAC and IPv4.
//
// Both are plain values in network byte order, parsed and printed here and
// nowhere else.
//
//   auto mac = MacAddr::Parse("02:00:00:00:00:01");   // std::optional
//   auto ip = Ipv4Prefix::Parse("10.0.0.254/24");
//   auto at = Ipv4Endpoint::Parse("0.0.0.0:47000");
//
// Thread safety: value types; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace aggswitch::common {

struct MacAddr {
  std::array<uint8_t, 6> bytes{};

  static std::optional<MacAddr> Parse(std::string_view text);
  std::string ToString() const;

  bool IsMulticast() const { return (bytes[0] & 0x01) != 0; }  // includes broadcast
  bool IsBroadcast() const {
    for (uint8_t b : bytes) if (b != 0xff) return false;
    return true;
  }
  bool IsZero() const {
    for (uint8_t b : bytes) if (b != 0) return false;
    return true;
  }
  // The 48 bits as the low bits of an integer, first byte most significant.
  uint64_t ToU64() const {
    uint64_t v = 0;
    for (uint8_t b : bytes) v = (v << 8) | b;
    return v;
  }
  static MacAddr FromU64(uint64_t v) {
    MacAddr m;
    for (int i = 5; i >= 0; --i) { m.bytes[i] = static_cast<uint8_t>(v); v >>= 8; }
    return m;
  }
  friend bool operator==(const MacAddr& a, const MacAddr& b) { return a.bytes == b.bytes; }
  friend bool operator!=(const MacAddr& a, const MacAddr& b) { return !(a == b); }
};

// An IPv4 address; `addr` holds the host-order value.
struct Ipv4Addr {
  uint32_t addr = 0;

  static std::optional<Ipv4Addr> Parse(std::string_view text);
  std::string ToString() const;
  friend bool operator==(const Ipv4Addr& a, const Ipv4Addr& b) { return a.addr == b.addr; }
};

// "a.b.c.d:port": an IPv4 address and a UDP or TCP port (0: an ephemeral one).
struct Ipv4Endpoint {
  Ipv4Addr ip;
  uint16_t port = 0;

  static std::optional<Ipv4Endpoint> Parse(std::string_view text);
  // "a.b.c.d:port", or "a.b.c.d" alone with port 0 (any, or the default).
  static std::optional<Ipv4Endpoint> ParsePortOptional(std::string_view text);
  std::string ToString() const;
  friend bool operator==(const Ipv4Endpoint& a, const Ipv4Endpoint& b) {
    return a.ip == b.ip && a.port == b.port;
  }
};

// "a.b.c.d" or "a.b.c.d/len"; a missing length means /32.
struct Ipv4Prefix {
  Ipv4Addr ip;
  uint8_t length = 32;

  static std::optional<Ipv4Prefix> Parse(std::string_view text);
  std::string ToString() const;
  friend bool operator==(const Ipv4Prefix& a, const Ipv4Prefix& b) {
    return a.ip == b.ip && a.length == b.length;
  }
};

}  // namespace aggswitch::common
