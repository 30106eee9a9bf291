// wire_fuzz: aggregator::ParseAggregation (aggregator/wire.h), the one parser
// of the aggregation header and its missing list, on arbitrary bytes taken as
// one UDP payload (what the switch, agg-ps and the client library hand it).
//
// Invariants, each a finding when broken:
//   * an error names a check that really fails: kTruncated exactly when the
//     input is shorter than the 52-byte header, kBadMagic only when the magic
//     is wrong, ..., kCountMismatch only when header + missing list + payload
//     exceed the input; kOk only when every check passes;
//   * a parsed datagram's header, missing list and payload lie inside the
//     input, back to back in that order, payload_len = elem_count *
//     ElementSize(dtype), and opcode, dtype and op are the header's;
//   * ReadAggFields + WriteAggHeader reproduce the 52 header bytes;
//   * BuildAggregation of the parsed fields, missing ids and payload
//     reproduces the datagram up to the payload's end (trailing bytes are
//     Ethernet padding), refuses a buffer one byte short, and what it builds
//     parses to the same packet;
//   * SeqBefore is a strict order on any two distinct sequence numbers.
#include <cstring>
#include <vector>

#include "aggregator/wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace aggswitch::aggregator {
namespace {

void CheckError(const uint8_t* data, size_t size, WireError err) {
  FUZZ_CHECK((err == WireError::kTruncated) == (size < sizeof(AggHeader)));
  if (size < sizeof(AggHeader)) return;
  const auto* h = reinterpret_cast<const AggHeader*>(data);
  const bool magic = h->magic.host() == kAggMagic;
  const bool version = h->version == kAggVersion;
  const bool opcode = h->opcode >= 1 && h->opcode <= kMaxOpcode;
  const bool dtype = h->dtype < kNumDTypes;
  const bool op = h->op < kNumReduceOps;
  const uint32_t count = h->elem_count.host();
  const bool type_op = !dtype || !op || count == 0 ||
                       IsValid(static_cast<DType>(h->dtype), static_cast<ReduceOp>(h->op));
  const bool fits = !dtype || sizeof(AggHeader) + 2u * h->missing_count +
                                      count * ElementSize(static_cast<DType>(h->dtype)) <=
                                  size;
  switch (err) {
    case WireError::kOk:
      FUZZ_CHECK(magic && version && opcode && dtype && op && type_op && fits);
      break;
    case WireError::kTruncated:
      break;
    case WireError::kBadMagic:
      FUZZ_CHECK(!magic);
      break;
    case WireError::kBadVersion:
      FUZZ_CHECK(!version);
      break;
    case WireError::kUnknownOpcode:
      FUZZ_CHECK(!opcode);
      break;
    case WireError::kUnknownDType:
      FUZZ_CHECK(!dtype);
      break;
    case WireError::kUnknownOp:
      FUZZ_CHECK(!op);
      break;
    case WireError::kBadTypeOp:
      FUZZ_CHECK(!type_op);
      break;
    case WireError::kCountMismatch:
      FUZZ_CHECK(!fits);
      break;
    case WireError::kCount:
      FUZZ_CHECK(false);
      break;
  }
  FUZZ_CHECK(std::strcmp(WireErrorLabel(err), "unknown") != 0);
}

void CheckPacket(const uint8_t* data, size_t size, const AggPacket& pkt) {
  const uint8_t* end = data + size;
  FUZZ_CHECK(reinterpret_cast<const uint8_t*>(pkt.header) == data);
  FUZZ_CHECK(pkt.missing == data + sizeof(AggHeader));
  const uint8_t missing_count = pkt.header->missing_count;
  FUZZ_CHECK(pkt.payload == pkt.missing + 2u * missing_count);
  FUZZ_CHECK(pkt.payload <= end && pkt.payload_len <= static_cast<size_t>(end - pkt.payload));
  FUZZ_CHECK(pkt.payload_len == pkt.header->elem_count.host() * ElementSize(pkt.dtype));
  FUZZ_CHECK(static_cast<uint8_t>(pkt.opcode) == pkt.header->opcode);
  FUZZ_CHECK(static_cast<uint8_t>(pkt.dtype) == pkt.header->dtype);
  FUZZ_CHECK(static_cast<uint8_t>(pkt.op) == pkt.header->op);

  // The header through the builder's field struct and back.
  const AggFields f = ReadAggFields(*pkt.header);
  AggHeader rewritten;
  WriteAggHeader(f, missing_count, &rewritten);
  FUZZ_CHECK(std::memcmp(&rewritten, data, sizeof(AggHeader)) == 0);

  // The whole datagram through the builder.
  std::vector<uint16_t> missing(missing_count);
  for (uint32_t i = 0; i < missing_count; ++i) missing[i] = pkt.MissingNode(i);
  const uint32_t total =
      static_cast<uint32_t>(sizeof(AggHeader)) + 2u * missing_count + pkt.payload_len;
  std::vector<uint8_t> buf(total);
  FUZZ_CHECK(BuildAggregation(f, missing.data(), missing_count, pkt.payload, pkt.payload_len,
                              buf.data(), total - 1) == 0);
  FUZZ_CHECK(BuildAggregation(f, missing.data(), missing_count, pkt.payload, pkt.payload_len,
                              buf.data(), total) == total);
  FUZZ_CHECK(std::memcmp(buf.data(), data, total) == 0);
  AggPacket again;
  FUZZ_CHECK(ParseAggregation(buf.data(), total, &again) == WireError::kOk);
  FUZZ_CHECK(again.payload_len == pkt.payload_len && again.opcode == pkt.opcode &&
             again.dtype == pkt.dtype && again.op == pkt.op);
}

}  // namespace
}  // namespace aggswitch::aggregator

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace aggswitch::aggregator;
  AggPacket pkt;
  const WireError err = ParseAggregation(data, static_cast<uint32_t>(size), &pkt);
  CheckError(data, size, err);
  if (err == WireError::kOk) CheckPacket(data, size, pkt);

  if (size >= 8) {
    uint32_t a, b;
    std::memcpy(&a, data, 4);
    std::memcpy(&b, data + 4, 4);
    FUZZ_CHECK(!SeqBefore(a, a));
    if (a != b) FUZZ_CHECK(SeqBefore(a, b) != SeqBefore(b, a) || a - b == 0x80000000u);
  }
  return 0;
}
