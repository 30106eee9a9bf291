#include "telemetry/int_frame.h"

#include <cstring>

namespace aggswitch::telemetry {
namespace {

constexpr size_t kUdpHeader = 8;

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

// The datagram's UDP header and lengths, checked against each other.
struct Udp {
  uint8_t* ip = nullptr;
  uint8_t* udp = nullptr;
  size_t header = 0;      // IPv4 header bytes
  bool checksum = false;  // the sender sent a UDP checksum (not 0)
};

FrameError Locate(uint8_t* ip, size_t len, Udp* out) {
  if (len < 20 || (ip[0] >> 4) != 4) return FrameError::kNotUdp;
  const size_t header = size_t{ip[0] & 0x0Fu} * 4;
  if (header < 20 || ip[9] != 17) return FrameError::kNotUdp;
  if ((Get16(ip + 6) & 0x3FFF) != 0) return FrameError::kNotUdp;  // MF or an offset: a fragment
  if (Get16(ip + 2) != len || header + kUdpHeader > len) return FrameError::kBadLength;
  if (Get16(ip + header + 4) != len - header) return FrameError::kBadLength;
  *out = {ip, ip + header, header, Get16(ip + header + 6) != 0};
  return FrameError::kNone;
}

// One word of what the UDP checksum covers changes from `from` to `to`
// (checksum 0: the sender sent none, and none is kept). Whether there is
// one was read before any change: an update may pass through 0.
void UdpWordChanged(const Udp& u, uint16_t from, uint16_t to) {
  if (u.checksum) Put16(u.udp + 6, ChecksumAfter(Get16(u.udp + 6), from, to));
}

// Words appear in (or leave) what the UDP checksum covers: `n` bytes (even)
// at an even offset of the UDP datagram.
void UdpWords(const Udp& u, const uint8_t* p, size_t n, bool added) {
  for (size_t i = 0; i < n; i += 2) {
    const uint16_t w = Get16(p + i);
    UdpWordChanged(u, added ? 0 : w, added ? w : 0);
  }
}

// The UDP and IPv4 lengths change by `delta` bytes (the datagram grew or shrank).
void Resize(const Udp& u, ptrdiff_t delta) {
  const uint16_t udp_len = Get16(u.udp + 4);
  const auto new_udp = static_cast<uint16_t>(udp_len + delta);
  Put16(u.udp + 4, new_udp);
  // In the UDP header and in the pseudo-header.
  UdpWordChanged(u, udp_len, new_udp);
  UdpWordChanged(u, udp_len, new_udp);
  const uint16_t total = Get16(u.ip + 2);
  const auto new_total = static_cast<uint16_t>(total + delta);
  Put16(u.ip + 2, new_total);
  Put16(u.ip + 10, ChecksumAfter(Get16(u.ip + 10), total, new_total));
}

// A byte of the UDP payload at `p` changes: the checksum follows its word.
void SetByte(const Udp& u, uint8_t* p, uint8_t value) {
  uint8_t* word = u.udp + ((p - u.udp) & ~ptrdiff_t{1});
  const uint16_t from = Get16(word);
  *p = value;
  UdpWordChanged(u, from, Get16(word));
}

// The UDP checksum as sent: an updated sum of zero is sent as 0xFFFF, since
// 0 says "no checksum" (RFC 768).
void SealChecksum(const Udp& u) {
  if (u.checksum && Get16(u.udp + 6) == 0) Put16(u.udp + 6, 0xFFFF);
}

FrameError Parse(uint8_t* ip, size_t len, Udp* u, IntView* v) {
  if (const FrameError e = Locate(ip, len, u); e != FrameError::kNone) return e;
  const size_t payload = len - u->header - kUdpHeader;
  if (ParseInt(u->udp + kUdpHeader, payload, v) != IntError::kNone) return FrameError::kNotInt;
  return FrameError::kNone;
}

}  // namespace

uint16_t ChecksumAfter(uint16_t checksum, uint16_t from, uint16_t to) {
  // HC' = ~(~HC + ~m + m'), in one's complement (RFC 1624, equation 3).
  uint32_t sum = uint32_t{static_cast<uint16_t>(~checksum)} + static_cast<uint16_t>(~from) + to;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

const char* FrameErrorName(FrameError e) {
  switch (e) {
    case FrameError::kNone:
      return "none";
    case FrameError::kNotUdp:
      return "not_udp";
    case FrameError::kBadLength:
      return "bad_length";
    case FrameError::kNoRoom:
      return "no_room";
    case FrameError::kNotInt:
      return "not_int";
    case FrameError::kNoHop:
      return "no_hop";
    case FrameError::kHopsDone:
      return "hops_done";
  }
  return "unknown";
}

FrameError InsertInt(uint8_t* ip, size_t* len, size_t cap, const InsertSpec& spec) {
  Udp u;
  if (const FrameError e = Locate(ip, *len, &u); e != FrameError::kNone) return e;
  if (*len + kInsertedBytes > cap || *len + kInsertedBytes > 0xFFFF) return FrameError::kNoRoom;
  uint8_t* payload = u.udp + kUdpHeader;
  std::memmove(payload + kInsertedBytes, payload, *len - u.header - kUdpHeader);
  const uint16_t port = Get16(u.udp + 2);
  WriteIntHeaders(spec.instructions, port, spec.max_hops, spec.source_node, spec.path_seq, payload);
  UdpWords(u, payload, kInsertedBytes, true);
  Put16(u.udp + 2, spec.int_port);
  UdpWordChanged(u, port, spec.int_port);
  Resize(u, static_cast<ptrdiff_t>(kInsertedBytes));
  SealChecksum(u);
  *len += kInsertedBytes;
  return FrameError::kNone;
}

FrameError PushHop(uint8_t* ip, size_t* len, size_t cap, const HopMetadata& hop) {
  Udp u;
  IntView v;
  if (const FrameError e = Parse(ip, *len, &u, &v); e != FrameError::kNone) return e;
  const uint16_t bits = v.md->instructions.host();
  const size_t bytes = size_t{HopWords(bits)} * 4;
  if (bytes != size_t{static_cast<uint8_t>(v.md->hop_ml & 0x1F)} * 4) return FrameError::kBadLength;
  if (v.md->remaining == 0) {
    SetByte(u, &v.md->ver_flags, static_cast<uint8_t>(v.md->ver_flags | kFlagE));
    SealChecksum(u);
    return FrameError::kHopsDone;
  }
  if (*len + bytes > cap || *len + bytes > 0xFFFF || v.shim->length + bytes / 4 > 0xFF) {
    SetByte(u, &v.md->ver_flags, static_cast<uint8_t>(v.md->ver_flags | kFlagM));
    SealChecksum(u);
    return FrameError::kNoRoom;
  }
  uint8_t* top = v.stack;
  std::memmove(top + bytes, top, static_cast<size_t>(ip + *len - top));
  WriteHopMetadata(bits, hop, top);
  UdpWords(u, top, bytes, true);
  SetByte(u, &v.shim->length, static_cast<uint8_t>(v.shim->length + bytes / 4));
  SetByte(u, &v.md->remaining, static_cast<uint8_t>(v.md->remaining - 1));
  Resize(u, static_cast<ptrdiff_t>(bytes));
  SealChecksum(u);
  *len += bytes;
  return FrameError::kNone;
}

FrameError TakeHop(uint8_t* ip, size_t len, HopTaken* out) {
  Udp u;
  IntView v;
  if (const FrameError e = Parse(ip, len, &u, &v); e != FrameError::kNone) return e;
  const uint8_t budget = static_cast<uint8_t>(v.md->ds_flags.host());
  const uint8_t remaining = v.md->remaining;
  if (remaining == 0 || remaining > budget) {
    SetByte(u, &v.md->ver_flags, static_cast<uint8_t>(v.md->ver_flags | kFlagE));
    SealChecksum(u);
    return FrameError::kHopsDone;
  }
  SetByte(u, &v.md->remaining, static_cast<uint8_t>(remaining - 1));
  SealChecksum(u);
  *out = HopTaken{v.md->instructions.host(), v.source_node, v.path_seq,
                  uint32_t{budget} - remaining + 1u, v.shim->original_port.host()};
  return FrameError::kNone;
}

FrameError PopHop(uint8_t* ip, size_t* len) {
  Udp u;
  IntView v;
  if (const FrameError e = Parse(ip, *len, &u, &v); e != FrameError::kNone) return e;
  if (v.hop_bytes == 0) return FrameError::kNoHop;
  const size_t bytes = size_t{static_cast<uint8_t>(v.md->hop_ml & 0x1F)} * 4;
  uint8_t* top = v.stack;
  UdpWords(u, top, bytes, false);
  std::memmove(top, top + bytes, static_cast<size_t>(ip + *len - top - bytes));
  SetByte(u, &v.shim->length, static_cast<uint8_t>(v.shim->length - bytes / 4));
  Resize(u, -static_cast<ptrdiff_t>(bytes));
  SealChecksum(u);
  *len -= bytes;
  return FrameError::kNone;
}

FrameError StripInt(uint8_t* ip, size_t* len) {
  Udp u;
  IntView v;
  if (const FrameError e = Parse(ip, *len, &u, &v); e != FrameError::kNone) return e;
  uint8_t* headers = u.udp + kUdpHeader;
  const size_t bytes = v.payload_offset;
  const uint16_t original = v.shim->original_port.host();
  UdpWords(u, headers, bytes, false);
  std::memmove(headers, headers + bytes, static_cast<size_t>(ip + *len - headers - bytes));
  const uint16_t port = Get16(u.udp + 2);
  Put16(u.udp + 2, original);
  UdpWordChanged(u, port, original);
  Resize(u, -static_cast<ptrdiff_t>(bytes));
  SealChecksum(u);
  *len -= bytes;
  return FrameError::kNone;
}

FrameError ViewInt(uint8_t* ip, size_t len, uint16_t int_port, IntView* out) {
  Udp u;
  if (const FrameError e = Locate(ip, len, &u); e != FrameError::kNone) return e;
  if (Get16(u.udp + 2) != int_port) return FrameError::kNotInt;
  if (ParseInt(u.udp + kUdpHeader, len - u.header - kUdpHeader, out) != IntError::kNone) {
    return FrameError::kNotInt;
  }
  return FrameError::kNone;
}

}  // namespace aggswitch::telemetry
