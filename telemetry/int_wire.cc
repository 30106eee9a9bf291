#include "telemetry/int_wire.h"

#include <cstring>

namespace aggswitch::telemetry {
namespace {

constexpr uint32_t kUnavailable = 0xFFFFFFFFu;
// The bits a report's RepMdBits may carry: what a hop records, less the node
// id (which the group header carries).
constexpr uint16_t kReportable = instr::kPorts | instr::kHopLatency | instr::kQueue | instr::kTxUtil;

void Put32(uint8_t* p, uint32_t v) {
  const be32_t b = be32_t::FromHost(v);
  std::memcpy(p, &b, 4);
}
uint32_t Get32(const uint8_t* p) {
  be32_t b;
  std::memcpy(&b, p, 4);
  return b.host();
}

// The value of instruction bit `bit` (one of the 4-byte ones) for `hop`.
uint32_t WordOf(uint16_t bit, const HopMetadata& hop) {
  switch (bit) {
    case instr::kNodeId:
      return hop.node_id;
    case instr::kPorts:
      return uint32_t{hop.ingress_port} << 16 | hop.egress_port;
    case instr::kHopLatency:
      return hop.hop_latency_ns;
    case instr::kQueue:
      return uint32_t{hop.queue_id} << 24 | (hop.queue_occupancy & 0xFFFFFFu);
    case instr::kTxUtil:
      return hop.tx_utilization;
    default:
      return kUnavailable;
  }
}

void SetWord(uint16_t bit, uint32_t v, HopMetadata* hop) {
  switch (bit) {
    case instr::kNodeId:
      hop->node_id = v;
      break;
    case instr::kPorts:
      hop->ingress_port = static_cast<uint16_t>(v >> 16);
      hop->egress_port = static_cast<uint16_t>(v);
      break;
    case instr::kHopLatency:
      hop->hop_latency_ns = v;
      break;
    case instr::kQueue:
      hop->queue_id = static_cast<uint8_t>(v >> 24);
      hop->queue_occupancy = v & 0xFFFFFFu;
      break;
    case instr::kTxUtil:
      hop->tx_utilization = v;
      break;
    default:
      break;
  }
}

// Words of metadata `bits` stand for: 2 for each 8-byte bit, 1 for the rest
// (bit 15, the checksum complement, is 4 bytes too).
uint8_t WordsOf(uint16_t bits) {
  return static_cast<uint8_t>(__builtin_popcount(bits) + __builtin_popcount(bits & instr::kEightByte));
}

}  // namespace

uint8_t HopWords(uint16_t instructions) { return WordsOf(instructions); }

size_t WriteHopMetadata(uint16_t instructions, const HopMetadata& hop, uint8_t* out) {
  uint8_t* p = out;
  for (uint16_t bit = 0x8000; bit != 0; bit >>= 1) {
    if ((instructions & bit) == 0) continue;
    Put32(p, WordOf(bit, hop));
    p += 4;
    if (bit & instr::kEightByte) {
      Put32(p, kUnavailable);
      p += 4;
    }
  }
  return static_cast<size_t>(p - out);
}

HopMetadata ReadHopMetadata(uint16_t instructions, const uint8_t* in) {
  HopMetadata hop;
  hop.node_id = hop.hop_latency_ns = hop.tx_utilization = kUnavailable;
  hop.ingress_port = hop.egress_port = 0xFFFF;
  hop.queue_id = 0xFF;
  hop.queue_occupancy = 0xFFFFFF;
  const uint8_t* p = in;
  for (uint16_t bit = 0x8000; bit != 0; bit >>= 1) {
    if ((instructions & bit) == 0) continue;
    SetWord(bit, Get32(p), &hop);
    p += (bit & instr::kEightByte) ? 8 : 4;
  }
  return hop;
}

void WriteIntHeaders(uint16_t instructions, uint16_t original_port, uint8_t max_hops,
                     uint32_t source_node, uint32_t path_seq, uint8_t* out) {
  IntShim shim;
  shim.type_npt = static_cast<uint8_t>(kShimTypeMd << 4 | kNptUdpPayload << 2);
  shim.length = static_cast<uint8_t>((sizeof(IntMdHeader) + kPathIdBytes) / 4);
  shim.original_port = be16_t::FromHost(original_port);
  IntMdHeader md;
  md.ver_flags = static_cast<uint8_t>(kMdVersion << 4);
  md.reserved = 0;
  md.hop_ml = HopWords(instructions) & 0x1F;
  md.remaining = max_hops;
  md.instructions = be16_t::FromHost(instructions);
  md.domain_id = be16_t::FromHost(kDomainId);
  md.ds_instructions = be16_t::FromHost(kDsPathId);
  md.ds_flags = be16_t::FromHost(max_hops);  // the hop budget: hops' indices follow from it
  std::memcpy(out, &shim, sizeof(shim));
  std::memcpy(out + sizeof(shim), &md, sizeof(md));
  Put32(out + sizeof(shim) + sizeof(md), source_node);
  Put32(out + sizeof(shim) + sizeof(md) + 4, path_seq);
}

const char* IntErrorName(IntError e) {
  switch (e) {
    case IntError::kNone:
      return "none";
    case IntError::kTruncated:
      return "truncated";
    case IntError::kBadType:
      return "bad_type";
    case IntError::kBadVersion:
      return "bad_version";
    case IntError::kBadLength:
      return "bad_length";
    case IntError::kForeignDomain:
      return "foreign_domain";
  }
  return "unknown";
}

IntError ParseInt(uint8_t* udp_payload, size_t len, IntView* out) {
  if (len < sizeof(IntShim) + sizeof(IntMdHeader)) return IntError::kTruncated;
  auto* shim = reinterpret_cast<IntShim*>(udp_payload);
  if ((shim->type_npt >> 4) != kShimTypeMd || ((shim->type_npt >> 2) & 3) != kNptUdpPayload) {
    return IntError::kBadType;
  }
  const size_t int_bytes = size_t{shim->length} * 4;
  if (int_bytes < sizeof(IntMdHeader)) return IntError::kBadLength;
  if (sizeof(IntShim) + int_bytes > len) return IntError::kTruncated;
  auto* md = reinterpret_cast<IntMdHeader*>(udp_payload + sizeof(IntShim));
  if ((md->ver_flags >> 4) != kMdVersion) return IntError::kBadVersion;
  if (md->domain_id.host() != kDomainId || (md->ds_instructions.host() & kDsPathId) == 0) {
    return IntError::kForeignDomain;
  }
  const size_t stack = int_bytes - sizeof(IntMdHeader);
  const size_t per_hop = size_t{static_cast<uint8_t>(md->hop_ml & 0x1F)} * 4;
  if (stack < kPathIdBytes || per_hop == 0 || (stack - kPathIdBytes) % per_hop != 0) {
    return IntError::kBadLength;
  }
  out->shim = shim;
  out->md = md;
  out->stack = udp_payload + sizeof(IntShim) + sizeof(IntMdHeader);
  out->stack_bytes = stack;
  out->hop_bytes = stack - kPathIdBytes;
  out->source_node = Get32(out->stack + out->hop_bytes);
  out->path_seq = Get32(out->stack + out->hop_bytes + 4);
  out->payload_offset = sizeof(IntShim) + int_bytes;
  return IntError::kNone;
}

size_t ReportBytes(uint16_t instructions, bool with_inner) {
  return sizeof(ReportGroupHeader) + sizeof(IndividualReportHeader) + sizeof(IntReportMain) +
         size_t{WordsOf(instructions & kReportable)} * 4 + kPathIdBytes + 4 +
         (with_inner ? kReportInnerBytes : 0);
}

size_t BuildReport(const HopReport& r, uint8_t* out, size_t cap) {
  const uint16_t md_bits = r.instructions & kReportable;
  const size_t total = ReportBytes(r.instructions, r.has_inner);
  if (cap < total) return 0;
  ReportGroupHeader g;
  g.ver_hw_seq = be32_t::FromHost(uint32_t{kReportVersion} << 28 | uint32_t{r.hw_id & 0x3Fu} << 22 |
                                  (r.sequence & 0x3FFFFFu));
  g.node_id = be32_t::FromHost(r.node_id);
  const size_t md_words = WordsOf(md_bits) + (kPathIdBytes + 4) / 4;
  IndividualReportHeader h;
  h.rep_in_type = static_cast<uint8_t>(kRepTypeInt << 4 | (r.has_inner ? kInTypeIpv4 : kInTypeNone));
  h.report_length = static_cast<uint8_t>((total - sizeof(g) - sizeof(h)) / 4);
  h.md_length = static_cast<uint8_t>(md_words);
  h.flags = static_cast<uint8_t>(kReportFlagF | (r.last_hop ? 0 : kReportFlagI));
  IntReportMain m;
  m.rep_md_bits = be16_t::FromHost(md_bits);
  m.domain_id = be16_t::FromHost(kDomainId);
  m.ds_md_bits = be16_t::FromHost(kDsReportPathId | kDsReportHopIndex);
  m.ds_md_status = be16_t::FromHost(0);
  uint8_t* p = out;
  std::memcpy(p, &g, sizeof(g));
  p += sizeof(g);
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  std::memcpy(p, &m, sizeof(m));
  p += sizeof(m);
  p += WriteHopMetadata(md_bits, r.hop, p);
  Put32(p, r.source_node);
  Put32(p + 4, r.path_seq);
  Put32(p + 8, r.hop_index);
  p += kPathIdBytes + 4;
  if (r.has_inner) {
    std::memcpy(p, r.inner, kReportInnerBytes);
    p += kReportInnerBytes;
  }
  return static_cast<size_t>(p - out);
}

const char* ReportErrorName(ReportError e) {
  switch (e) {
    case ReportError::kNone:
      return "none";
    case ReportError::kTruncated:
      return "truncated";
    case ReportError::kBadVersion:
      return "bad_version";
    case ReportError::kNotInt:
      return "not_int";
    case ReportError::kBadLength:
      return "bad_length";
    case ReportError::kNoPathId:
      return "no_path_id";
  }
  return "unknown";
}

ReportError ParseReport(const uint8_t* payload, size_t len, HopReport* out) {
  constexpr size_t kFixed =
      sizeof(ReportGroupHeader) + sizeof(IndividualReportHeader) + sizeof(IntReportMain);
  if (len < sizeof(ReportGroupHeader) + sizeof(IndividualReportHeader)) return ReportError::kTruncated;
  ReportGroupHeader g;
  std::memcpy(&g, payload, sizeof(g));
  const uint32_t word = g.ver_hw_seq.host();
  if ((word >> 28) != kReportVersion) return ReportError::kBadVersion;
  IndividualReportHeader h;
  std::memcpy(&h, payload + sizeof(g), sizeof(h));
  if ((h.rep_in_type >> 4) != kRepTypeInt) return ReportError::kNotInt;
  const size_t body = size_t{h.report_length} * 4;
  if (len < sizeof(g) + sizeof(h) + body || body < sizeof(IntReportMain)) {
    return ReportError::kTruncated;
  }
  IntReportMain m;
  std::memcpy(&m, payload + sizeof(g) + sizeof(h), sizeof(m));
  const uint16_t md_bits = m.rep_md_bits.host();
  const uint16_t ds_bits = m.ds_md_bits.host();
  if (m.domain_id.host() != kDomainId || (ds_bits & kDsReportPathId) == 0 ||
      (ds_bits & kDsReportHopIndex) == 0) {
    return ReportError::kNoPathId;
  }
  // This domain's metadata: the path id then the hop index, after the
  // baseline metadata; no other domain bits.
  if ((ds_bits & ~(kDsReportPathId | kDsReportHopIndex)) != 0) return ReportError::kBadLength;
  const size_t baseline = size_t{WordsOf(md_bits)} * 4;
  const size_t md = baseline + kPathIdBytes + 4;
  if (size_t{h.md_length} * 4 != md || sizeof(IntReportMain) + md > body) {
    return ReportError::kBadLength;
  }
  const uint8_t in_type = h.rep_in_type & 0x0F;
  const size_t inner = body - sizeof(IntReportMain) - md;
  if (in_type == kInTypeIpv4 ? inner < kReportInnerBytes : in_type != kInTypeNone) {
    return ReportError::kBadLength;
  }
  const uint8_t* p = payload + kFixed;
  HopReport r;
  r.node_id = g.node_id.host();
  r.hw_id = static_cast<uint8_t>((word >> 22) & 0x3F);
  r.sequence = word & 0x3FFFFF;
  r.last_hop = (h.flags & kReportFlagI) == 0;
  r.instructions = md_bits;
  r.hop = ReadHopMetadata(md_bits, p);
  r.hop.node_id = r.node_id;
  p += baseline;
  r.source_node = Get32(p);
  r.path_seq = Get32(p + 4);
  r.hop_index = Get32(p + 8);
  p += kPathIdBytes + 4;
  if (in_type == kInTypeIpv4) {
    r.inner = p;
    r.has_inner = true;
  }
  *out = r;
  return ReportError::kNone;
}

}  // namespace aggswitch::telemetry
