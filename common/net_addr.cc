#include "common/net_addr.h"

#include <charconv>
#include <cstdio>

namespace aggswitch::common {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<MacAddr> MacAddr::Parse(std::string_view text) {
  // Exactly six two-digit hex groups separated by ':' or '-'.
  if (text.size() != 17) return std::nullopt;
  MacAddr mac;
  for (size_t i = 0; i < 6; ++i) {
    const int hi = HexDigit(text[i * 3]);
    const int lo = HexDigit(text[i * 3 + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    if (i < 5 && text[i * 3 + 2] != ':' && text[i * 3 + 2] != '-') return std::nullopt;
    mac.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return mac;
}

std::string MacAddr::ToString() const {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1],
                bytes[2], bytes[3], bytes[4], bytes[5]);
  return buf;
}

std::optional<Ipv4Addr> Ipv4Addr::Parse(std::string_view text) {
  uint32_t addr = 0;
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0) {
      if (p == end || *p != '.') return std::nullopt;
      ++p;
    }
    // Reject empty octets, signs and leading zeros ("01"), which some parsers read as octal.
    if (p == end || *p < '0' || *p > '9') return std::nullopt;
    if (*p == '0' && p + 1 != end && p[1] >= '0' && p[1] <= '9') return std::nullopt;
    unsigned value = 0;
    auto [next, ec] = std::from_chars(p, end, value);
    if (ec != std::errc() || value > 255) return std::nullopt;
    addr = (addr << 8) | value;
    p = next;
  }
  if (p != end) return std::nullopt;
  return Ipv4Addr{addr};
}

std::string Ipv4Addr::ToString() const {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u", addr >> 24, (addr >> 16) & 0xff,
                (addr >> 8) & 0xff, addr & 0xff);
  return buf;
}

std::optional<Ipv4Endpoint> Ipv4Endpoint::Parse(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto ip = Ipv4Addr::Parse(text.substr(0, colon));
  const std::string_view port = text.substr(colon + 1);
  uint16_t value = 0;
  const auto [next, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (!ip || port.empty() || ec != std::errc() || next != port.data() + port.size()) {
    return std::nullopt;
  }
  return Ipv4Endpoint{*ip, value};
}

std::optional<Ipv4Endpoint> Ipv4Endpoint::ParsePortOptional(std::string_view text) {
  if (text.find(':') != std::string_view::npos) return Parse(text);
  const auto ip = Ipv4Addr::Parse(text);
  if (!ip) return std::nullopt;
  return Ipv4Endpoint{*ip, 0};
}

std::string Ipv4Endpoint::ToString() const { return ip.ToString() + ":" + std::to_string(port); }

std::optional<Ipv4Prefix> Ipv4Prefix::Parse(std::string_view text) {
  Ipv4Prefix prefix;
  const size_t slash = text.find('/');
  auto ip = Ipv4Addr::Parse(text.substr(0, slash));
  if (!ip) return std::nullopt;
  prefix.ip = *ip;
  if (slash != std::string_view::npos) {
    const std::string_view len = text.substr(slash + 1);
    unsigned value = 0;
    auto [next, ec] = std::from_chars(len.data(), len.data() + len.size(), value);
    if (len.empty() || ec != std::errc() || next != len.data() + len.size() || value > 32) {
      return std::nullopt;
    }
    prefix.length = static_cast<uint8_t>(value);
  }
  return prefix;
}

std::string Ipv4Prefix::ToString() const {
  return ip.ToString() + "/" + std::to_string(length);
}

}  // namespace aggswitch::common
