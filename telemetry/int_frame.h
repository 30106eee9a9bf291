// What a switch does to a watched IPv4/UDP datagram's bytes
// (docs/telemetry.md, "INT-MD over UDP"): the first hop inserts the INT
// headers, each hop pushes its metadata and pops it again once reported,
// and the last hop strips INT entirely.
//
// Every change keeps the datagram valid on the wire: the IPv4 total length
// and header checksum, the UDP length, destination port and checksum follow
// it. The checksums are updated incrementally (RFC 1624), never recomputed,
// so stripping gives back the original bytes exactly, whatever checksums
// the sender wrote (a UDP checksum of 0, none, stays 0).
//
//   size_t len = ip_total_length;
//   InsertInt(ip, &len, cap, {...});      // first hop
//   PushHop(ip, &len, cap, hop);          // every hop, the first too
//   ... report the hop ...
//   PopHop(ip, &len);                      // before it leaves
//   StripInt(ip, &len);                    // last hop: the original datagram
//
// A switch that reports each hop at once takes the hop instead of pushing
// and popping it: TakeHop(ip, len, &taken).
//
// `ip` points at the IPv4 header, `*len` is the datagram's length (its
// total length) and `cap` the bytes the buffer has from `ip` on.
//
// Thread safety: pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "telemetry/int_wire.h"

namespace aggswitch::telemetry {

// RFC 1624: the Internet checksum `checksum` (as stored) after a 16-bit
// word it covers changed from `from` to `to`.
uint16_t ChecksumAfter(uint16_t checksum, uint16_t from, uint16_t to);

enum class FrameError : uint8_t {
  kNone = 0,
  kNotUdp,     // not IPv4 carrying UDP, or a fragment
  kBadLength,  // the lengths disagree with each other or with `*len`
  kNoRoom,     // the buffer (or the caller's MTU) cannot take the bytes
  kNotInt,     // no INT headers of this switch's kind (ParseInt refused them)
  kNoHop,      // nothing pushed to pop
  kHopsDone,   // the remaining hop count is 0: flag E set, nothing pushed
};
const char* FrameErrorName(FrameError e);

struct InsertSpec {
  uint16_t int_port = kDefaultIntPort;
  uint16_t instructions = instr::kLatencySet;
  uint8_t max_hops = 8;
  uint32_t source_node = 0;
  uint32_t path_seq = 0;
};

// First hop: the INT headers (kInsertedBytes) after the UDP header, the
// destination port replaced by the INT port, kept in the shim.
FrameError InsertInt(uint8_t* ip, size_t* len, size_t cap, const InsertSpec& spec);
// This hop's metadata on top of the stack; the remaining hop count one
// less. Needs HopWords(instructions) * 4 bytes of room.
FrameError PushHop(uint8_t* ip, size_t* len, size_t cap, const HopMetadata& hop);
// A hop that reports its metadata instead of pushing it (what a push, a
// report and a pop amount to, without moving the payload twice): the
// remaining hop count one less, and what the report needs in `out`: the
// instructions, the path id and this hop's index (1 + the budget the first
// hop wrote in the DS flags, less the remaining count found). kHopsDone
// with flag E set when no hop count remains.
struct HopTaken {
  uint16_t instructions = 0;
  uint32_t source_node = 0;
  uint32_t path_seq = 0;
  uint32_t hop_index = 0;
  uint16_t original_port = 0;
};
FrameError TakeHop(uint8_t* ip, size_t len, HopTaken* out);
// Removes the metadata on top of the stack (the hop's own, once reported).
FrameError PopHop(uint8_t* ip, size_t* len);
// Last hop: removes the INT headers and any metadata, and puts the original
// destination port back.
FrameError StripInt(uint8_t* ip, size_t* len);

// The INT headers of a datagram (its UDP payload's), for reading. kNotUdp,
// kBadLength or kNotInt when it has none.
FrameError ViewInt(uint8_t* ip, size_t len, uint16_t int_port, IntView* out);

}  // namespace aggswitch::telemetry
