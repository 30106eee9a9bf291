// int_fuzz: the two parsers of in-band network telemetry (telemetry/int_wire.h)
// and what a switch does to a datagram with INT (telemetry/int_frame.h), on
// arbitrary bytes: the first byte picks which, the rest is the input.
//   even, not 2 mod 4: ParseInt, the INT headers at the start of a UDP
//             payload, as a switch reads a watched datagram from a fabric port;
//   odd:      ParseReport, a Telemetry Report's UDP payload, as
//             agg-intcollector reads it;
//   2 mod 4:  the input as the UDP payload of a datagram to the INT port,
//             through ViewInt, TakeHop and StripInt as a transit switch and
//             then the last one treat it.
//
// Invariants, each a finding when broken:
//   * ParseInt accepts only INT-MD with NPT 1, version 2 and aggswitch's
//     path id; what it returns lies inside the input: the stack ends where
//     the payload begins, the hop metadata is whole hops of Hop ML words,
//     and the path id is the last 8 bytes of the stack;
//   * ParseReport accepts only version 2 INT reports of aggswitch's domain;
//     the inner headers lie inside the input; building the parsed report
//     again and parsing that gives the same fields;
//   * a datagram ViewInt accepts survives TakeHop and StripInt: the strip
//     succeeds, removes exactly the INT headers and hops, puts the original
//     port back, and leaves the IPv4 and UDP lengths consistent;
//   * the error names are never empty.
#include <cstring>
#include <vector>

#include "telemetry/int_frame.h"
#include "telemetry/int_wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace aggswitch::telemetry {
namespace {

void FuzzInt(const uint8_t* data, size_t size) {
  std::vector<uint8_t> copy(data, data + size);  // ParseInt's views are writable
  IntView v;
  const IntError e = ParseInt(copy.data(), copy.size(), &v);
  FUZZ_CHECK(IntErrorName(e)[0] != '\0');
  if (e != IntError::kNone) return;
  const uint8_t* begin = copy.data();
  FUZZ_CHECK(reinterpret_cast<uint8_t*>(v.shim) == begin);
  FUZZ_CHECK((v.shim->type_npt >> 4) == kShimTypeMd && ((v.shim->type_npt >> 2) & 3) == kNptUdpPayload);
  FUZZ_CHECK((v.md->ver_flags >> 4) == kMdVersion);
  FUZZ_CHECK(v.md->domain_id.host() == kDomainId);
  FUZZ_CHECK(v.payload_offset <= size);
  FUZZ_CHECK(v.stack + v.stack_bytes == begin + v.payload_offset);
  FUZZ_CHECK(v.stack_bytes == v.hop_bytes + kPathIdBytes);
  const size_t per_hop = size_t{static_cast<uint8_t>(v.md->hop_ml & 0x1F)} * 4;
  FUZZ_CHECK(per_hop != 0 && v.hop_bytes % per_hop == 0);
  // Every hop reads inside the stack (AddressSanitizer sees the rest).
  const uint16_t bits = v.md->instructions.host();
  if (size_t{HopWords(bits)} * 4 == per_hop) {
    for (size_t at = 0; at < v.hop_bytes; at += per_hop) (void)ReadHopMetadata(bits, v.stack + at);
  }
  uint32_t id[2];
  std::memcpy(id, v.stack + v.hop_bytes, sizeof(id));
  FUZZ_CHECK(__builtin_bswap32(id[0]) == v.source_node && __builtin_bswap32(id[1]) == v.path_seq);
}

void FuzzReport(const uint8_t* data, size_t size) {
  HopReport r;
  const ReportError e = ParseReport(data, size, &r);
  FUZZ_CHECK(ReportErrorName(e)[0] != '\0');
  if (e != ReportError::kNone) return;
  FUZZ_CHECK(size >= ReportBytes(r.instructions, false));
  if (r.has_inner) FUZZ_CHECK(r.inner >= data && r.inner + kReportInnerBytes <= data + size);
  // Bits this switch does not record read as unavailable and are not
  // written again: compare what both sides record.
  constexpr uint16_t kRecorded = instr::kPorts | instr::kHopLatency | instr::kQueue | instr::kTxUtil;
  if ((r.instructions & ~kRecorded) != 0) return;
  std::vector<uint8_t> again(ReportBytes(r.instructions, r.has_inner));
  FUZZ_CHECK(BuildReport(r, again.data(), again.size()) == again.size());
  HopReport back;
  FUZZ_CHECK(ParseReport(again.data(), again.size(), &back) == ReportError::kNone);
  FUZZ_CHECK(back.node_id == r.node_id && back.hw_id == r.hw_id && back.sequence == r.sequence);
  FUZZ_CHECK(back.last_hop == r.last_hop && back.instructions == r.instructions);
  FUZZ_CHECK(back.source_node == r.source_node && back.path_seq == r.path_seq &&
             back.hop_index == r.hop_index);
  FUZZ_CHECK(back.hop.ingress_port == r.hop.ingress_port && back.hop.egress_port == r.hop.egress_port &&
             back.hop.hop_latency_ns == r.hop.hop_latency_ns &&
             back.hop.queue_occupancy == r.hop.queue_occupancy &&
             back.hop.tx_utilization == r.hop.tx_utilization);
  FUZZ_CHECK(back.has_inner == r.has_inner);
  if (r.has_inner) FUZZ_CHECK(std::memcmp(back.inner, r.inner, kReportInnerBytes) == 0);
}

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

void FuzzFrame(const uint8_t* data, size_t size) {
  if (size > 1400) return;
  // IPv4 (no checksum needed by the INT operations) and UDP to port 7700.
  std::vector<uint8_t> d(28 + size);
  const size_t len = d.size();
  d[0] = 0x45;
  d[2] = static_cast<uint8_t>(len >> 8);
  d[3] = static_cast<uint8_t>(len);
  d[8] = 64;
  d[9] = 17;
  d[22] = 7700 >> 8;
  d[23] = 7700 & 0xFF;
  d[24] = static_cast<uint8_t>((len - 20) >> 8);
  d[25] = static_cast<uint8_t>(len - 20);
  d[26] = 0x12;  // some checksum: kept up to date, never 0
  std::memcpy(d.data() + 28, data, size);
  IntView v;
  const FrameError e = ViewInt(d.data(), len, 7700, &v);
  FUZZ_CHECK(FrameErrorName(e)[0] != '\0');
  if (e != FrameError::kNone) return;
  const size_t int_bytes = v.payload_offset;
  const uint16_t original = v.shim->original_port.host();
  HopTaken taken;
  const FrameError took = TakeHop(d.data(), len, &taken);
  FUZZ_CHECK(took == FrameError::kNone || took == FrameError::kHopsDone);
  if (took == FrameError::kNone) FUZZ_CHECK(taken.hop_index >= 1 && taken.original_port == original);
  size_t after = len;
  FUZZ_CHECK(StripInt(d.data(), &after) == FrameError::kNone);
  FUZZ_CHECK(after == len - int_bytes);
  FUZZ_CHECK(Get16(d.data() + 2) == after && Get16(d.data() + 24) == after - 20);
  FUZZ_CHECK(Get16(d.data() + 22) == original);
  FUZZ_CHECK(Get16(d.data() + 26) != 0);
}

}  // namespace
}  // namespace aggswitch::telemetry

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    aggswitch::telemetry::FuzzReport(data + 1, size - 1);
  } else if ((data[0] & 3) == 2) {
    aggswitch::telemetry::FuzzFrame(data + 1, size - 1);
  } else {
    aggswitch::telemetry::FuzzInt(data + 1, size - 1);
  }
  return 0;
}
