// In-band network telemetry on the wire (docs/telemetry.md): the INT-MD
// headers a switch inserts into a watched UDP datagram (INT 2.1, INT over
// UDP with a destination port of its own), the metadata each hop pushes, and
// the Telemetry Report (v2.0) each hop sends the collector. One builder and
// one parser for each, shared by the switch, agg-intcollector and the tests.
//
// A watched datagram between two switches:
//
//   IPv4 | UDP (dport = INT port) | shim (4) | INT-MD header (12) |
//     path id (8, source-only domain metadata) | original UDP payload
//
// Inside a switch the hop pushes its own metadata between the INT-MD header
// and the path id, reports it, and strips it before the datagram leaves, so
// the headers never grow with the hop count. The shim keeps the original
// destination port (NPT 1); the last hop restores it and removes the rest.
//
// The path id (source node id, sequence) is this project's INT domain
// (domain id kDomainId by default): the first hop writes it once, and every
// hop's report carries it, with the hop's index on the path, so that the
// collector can put one datagram's hops together.
//
// Thread safety: pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/big_endian.h"

namespace aggswitch::telemetry {

using common::be16_t;
using common::be32_t;

// --- INT-MD over UDP ------------------------------------------------------

// Instruction bitmap bits (bit 0 is the most significant) this switch
// records. Every one is 4 bytes of hop metadata.
namespace instr {
inline constexpr uint16_t kNodeId = 0x8000;      // bit 0: node id
inline constexpr uint16_t kPorts = 0x4000;       // bit 1: ingress (16) + egress (16) port
inline constexpr uint16_t kHopLatency = 0x2000;  // bit 2: hop latency, ns
inline constexpr uint16_t kQueue = 0x1000;       // bit 3: queue id (8) + occupancy (24)
inline constexpr uint16_t kTxUtil = 0x0100;      // bit 7: egress TX utilisation
// Bits 4, 5 and 6 ask for 8 bytes each (timestamps, level 2 ports); this
// switch answers them, and any other bit it does not record, with the
// all-ones "unavailable" value, as the specification asks.
inline constexpr uint16_t kEightByte = 0x0800 | 0x0400 | 0x0200;
// The two sets a watch entry chooses from, and both.
inline constexpr uint16_t kLatencySet = kNodeId | kPorts | kHopLatency | kQueue;
inline constexpr uint16_t kBandwidthSet = kNodeId | kPorts | kTxUtil;
inline constexpr uint16_t kBothSets = kLatencySet | kBandwidthSet;
}  // namespace instr

// The UDP destination port that says "INT follows" on links between
// switches, and the one reports go to at the collector: both configurable,
// these are the defaults (the Wireshark dissector's too).
inline constexpr uint16_t kDefaultIntPort = 7700;
inline constexpr uint16_t kDefaultReportPort = 32766;

inline constexpr uint8_t kShimTypeMd = 1;   // INT-MD
inline constexpr uint8_t kNptUdpPayload = 1;  // the original UDP payload follows; dport in the shim
inline constexpr uint8_t kMdVersion = 2;
inline constexpr uint16_t kDomainId = 0x4147;  // this project's INT domain ("AG")
// Domain instruction bit 0: the path id, source-only, 8 bytes.
inline constexpr uint16_t kDsPathId = 0x8000;
inline constexpr size_t kPathIdBytes = 8;

struct [[gnu::packed]] IntShim {
  uint8_t type_npt;      // type (4) | NPT (2) | reserved (2)
  uint8_t length;        // INT-MD header + stack, in 4-byte words (not the shim)
  be16_t original_port;  // NPT 1: the original UDP destination port
};
static_assert(sizeof(IntShim) == 4);

struct [[gnu::packed]] IntMdHeader {
  uint8_t ver_flags;    // version (4) | D | E | M | reserved
  uint8_t reserved;
  uint8_t hop_ml;       // reserved (3) | per-hop metadata length in words (5)
  uint8_t remaining;    // hops that may still push metadata
  be16_t instructions;  // instr:: bits
  be16_t domain_id;
  be16_t ds_instructions;
  be16_t ds_flags;     // this domain's: the remaining hop count the first hop wrote
};
static_assert(sizeof(IntMdHeader) == 12);
inline constexpr uint8_t kFlagE = 0x04;  // a hop found no remaining hop count
inline constexpr uint8_t kFlagM = 0x02;  // a hop could not add its metadata within the MTU

// The INT headers a first hop inserts, before any hop metadata: shim, INT-MD
// header and path id.
inline constexpr size_t kInsertedBytes = sizeof(IntShim) + sizeof(IntMdHeader) + kPathIdBytes;

// Words of hop metadata `instructions` asks of every hop (Hop ML).
uint8_t HopWords(uint16_t instructions);

// One hop's measurements, as a switch takes them.
struct HopMetadata {
  uint32_t node_id = 0;
  uint16_t ingress_port = 0;
  uint16_t egress_port = 0;
  uint32_t hop_latency_ns = 0;
  uint8_t queue_id = 0;
  uint32_t queue_occupancy = 0;  // 24 bits: frames in the TX ring
  uint32_t tx_utilization = 0;   // egress TX use, in parts per million of the line rate
};

// Writes the metadata `instructions` asks for, in bit order, to `out` (room
// for HopWords(instructions) * 4 bytes). Returns the bytes written.
size_t WriteHopMetadata(uint16_t instructions, const HopMetadata& hop, uint8_t* out);
// Reads metadata written by WriteHopMetadata (or another switch: values it
// did not record read as all ones). `in` holds HopWords(instructions) * 4 bytes.
HopMetadata ReadHopMetadata(uint16_t instructions, const uint8_t* in);

// Writes the INT headers of a first hop (shim, INT-MD header, path id) to
// `out` (kInsertedBytes), for a datagram whose destination port was
// `original_port`. `max_hops` is the remaining hop count it starts with,
// also written to the DS flags (the hop budget), from which every hop
// learns its index on the path.
void WriteIntHeaders(uint16_t instructions, uint16_t original_port, uint8_t max_hops,
                     uint32_t source_node, uint32_t path_seq, uint8_t* out);

// A datagram's INT headers as read: views into the caller's bytes.
struct IntView {
  IntShim* shim = nullptr;
  IntMdHeader* md = nullptr;
  uint8_t* stack = nullptr;    // hop metadata then the path id
  size_t stack_bytes = 0;      // shim length * 4 - 12
  size_t hop_bytes = 0;        // of hop metadata (a multiple of Hop ML * 4)
  uint32_t source_node = 0;    // the path id
  uint32_t path_seq = 0;
  size_t payload_offset = 0;   // of the original UDP payload, from the shim
};

enum class IntError : uint8_t {
  kNone = 0,
  kTruncated,    // shorter than its shim says
  kBadType,      // not INT-MD with the original UDP payload after it
  kBadVersion,   // INT-MD header version other than 2
  kBadLength,    // the stack is not a whole number of hops plus the path id
  kForeignDomain,  // no path id of this project's domain
};
inline constexpr size_t kNumIntErrors = 6;
const char* IntErrorName(IntError e);

// Reads the INT headers at the start of a UDP payload of `len` bytes.
IntError ParseInt(uint8_t* udp_payload, size_t len, IntView* out);

// --- Telemetry Report v2.0 -----------------------------------------------

struct [[gnu::packed]] ReportGroupHeader {
  be32_t ver_hw_seq;  // version (4) | hw_id (6) | sequence (22)
  be32_t node_id;
};
static_assert(sizeof(ReportGroupHeader) == 8);

struct [[gnu::packed]] IndividualReportHeader {
  uint8_t rep_in_type;  // report type (4) | inner type (4)
  uint8_t report_length;  // words after this one
  uint8_t md_length;      // words of metadata
  uint8_t flags;          // D | Q | F | I | reserved (4)
};
static_assert(sizeof(IndividualReportHeader) == 4);

struct [[gnu::packed]] IntReportMain {
  be16_t rep_md_bits;
  be16_t domain_id;
  be16_t ds_md_bits;
  be16_t ds_md_status;
};
static_assert(sizeof(IntReportMain) == 8);

inline constexpr uint8_t kReportVersion = 2;
inline constexpr uint8_t kRepTypeInt = 1;
inline constexpr uint8_t kInTypeNone = 0;
inline constexpr uint8_t kInTypeIpv4 = 4;
inline constexpr uint8_t kReportFlagD = 0x80;
inline constexpr uint8_t kReportFlagQ = 0x40;
inline constexpr uint8_t kReportFlagF = 0x20;  // a tracked (watched) flow
inline constexpr uint8_t kReportFlagI = 0x10;  // an intermediate hop's report
// Domain metadata bits of a report: the path id (8 bytes) and the hop's
// index on the path (4 bytes: 1 for the first hop).
inline constexpr uint16_t kDsReportPathId = 0x8000;
inline constexpr uint16_t kDsReportHopIndex = 0x4000;

// The original datagram's headers a report carries (its IPv4 and UDP
// headers, with INT removed: the destination port is the original one).
inline constexpr size_t kReportInnerBytes = 28;

// One hop's report, as the switch sends it and the collector reads it.
struct HopReport {
  uint32_t node_id = 0;
  uint8_t hw_id = 0;
  uint32_t sequence = 0;   // 22 bits, per (node, hw_id)
  bool last_hop = false;   // the path's end: the end-of-path notice (flag I clear)
  uint16_t instructions = 0;  // the datagram's INT instructions
  HopMetadata hop;
  uint32_t source_node = 0;
  uint32_t path_seq = 0;
  uint32_t hop_index = 0;
  // The original IPv4 and UDP headers (kReportInnerBytes), or none.
  const uint8_t* inner = nullptr;
  bool has_inner = false;
};

// Bytes of the report BuildReport writes for `instructions`.
size_t ReportBytes(uint16_t instructions, bool with_inner);
// Writes the UDP payload of a report (group header and one INT individual
// report) to `out` of `cap` bytes. Returns the bytes written, 0 when `cap`
// is too small.
size_t BuildReport(const HopReport& r, uint8_t* out, size_t cap);

enum class ReportError : uint8_t {
  kNone = 0,
  kTruncated,     // shorter than its headers or its report length
  kBadVersion,    // group header version other than 2
  kNotInt,        // an individual report of another type
  kBadLength,     // metadata length disagrees with its bits
  kNoPathId,      // no path id and hop index of this project's domain
};
inline constexpr size_t kNumReportErrors = 6;
const char* ReportErrorName(ReportError e);

// Reads the first INT individual report of a report's UDP payload. Node id,
// ports, latency and the rest come back in `out`; `out->inner` points into
// `payload`.
ReportError ParseReport(const uint8_t* payload, size_t len, HopReport* out);

}  // namespace aggswitch::telemetry
