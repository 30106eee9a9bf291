#include "aggregator/wire.h"

#include <cstring>

namespace aggswitch::aggregator {

const char* WireErrorLabel(WireError e) {
  switch (e) {
    case WireError::kOk: return "ok";
#define AGG_WIRE_LABEL(name, label, help) \
  case WireError::name: return label;
      AGG_WIRE_ERRORS(AGG_WIRE_LABEL)
#undef AGG_WIRE_LABEL
    case WireError::kCount: break;
  }
  return "unknown";
}

WireError ParseAggregation(const uint8_t* data, uint32_t len, AggPacket* out) {
  if (len < sizeof(AggHeader)) return WireError::kTruncated;
  const auto* h = reinterpret_cast<const AggHeader*>(data);
  if (h->magic.host() != kAggMagic) return WireError::kBadMagic;
  if (h->version != kAggVersion) return WireError::kBadVersion;
  if (h->opcode == 0 || h->opcode > kMaxOpcode) return WireError::kUnknownOpcode;
  const auto dtype = DTypeFromWire(h->dtype);
  if (!dtype) return WireError::kUnknownDType;
  const auto op = ReduceOpFromWire(h->op);
  if (!op) return WireError::kUnknownOp;
  const uint32_t count = h->elem_count.host();
  // Packets without a payload (task info, ack, nack) carry a dtype/op too, but
  // only payload-bearing packets must pair them validly.
  if (count > 0 && !IsValid(*dtype, *op)) return WireError::kBadTypeOp;
  const uint32_t missing_bytes = 2u * h->missing_count;
  const uint32_t payload_len = count * static_cast<uint32_t>(ElementSize(*dtype));
  if (sizeof(AggHeader) + missing_bytes + payload_len > len) return WireError::kCountMismatch;
  out->header = h;
  out->missing = data + sizeof(AggHeader);
  out->payload = out->missing + missing_bytes;
  out->payload_len = payload_len;
  out->opcode = static_cast<Opcode>(h->opcode);
  out->dtype = *dtype;
  out->op = *op;
  return WireError::kOk;
}

void WriteAggHeader(const AggFields& f, uint8_t missing_count, AggHeader* h) {
  h->magic = be16_t::FromHost(kAggMagic);
  h->version = kAggVersion;
  h->opcode = static_cast<uint8_t>(f.opcode);
  h->flags = be16_t::FromHost(f.flags);
  h->node_id = be16_t::FromHost(f.node_id);
  h->job_id = be32_t::FromHost(f.job_id);
  h->seq = be32_t::FromHost(f.seq);
  h->job_key = be64_t::FromHost(f.job_key);
  h->ack_watermark = be32_t::FromHost(f.ack_watermark);
  h->addr_low = be32_t::FromHost(f.addr_low);
  h->expected = be16_t::FromHost(f.expected);
  h->node_count = be16_t::FromHost(f.node_count);
  h->slot_hint = be16_t::FromHost(f.slot_hint);
  h->elem_count = be16_t::FromHost(f.elem_count);
  h->dtype = static_cast<uint8_t>(f.dtype);
  h->op = static_cast<uint8_t>(f.op);
  h->scale = f.scale;
  h->missing_count = missing_count;
  h->aux = be32_t::FromHost(f.aux);
  h->incarnation = be32_t::FromHost(f.incarnation);
}

uint32_t BuildAggregation(const AggFields& f, const uint16_t* missing, uint8_t missing_count,
                          const uint8_t* payload, uint32_t payload_len, uint8_t* buf,
                          uint32_t buf_size) {
  if (payload_len != f.elem_count * ElementSize(f.dtype)) return 0;
  const uint32_t total = sizeof(AggHeader) + 2u * missing_count + payload_len;
  if (total > buf_size) return 0;
  WriteAggHeader(f, missing_count, reinterpret_cast<AggHeader*>(buf));
  uint8_t* p = buf + sizeof(AggHeader);
  for (uint8_t i = 0; i < missing_count; ++i) {
    *p++ = static_cast<uint8_t>(missing[i] >> 8);
    *p++ = static_cast<uint8_t>(missing[i]);
  }
  if (payload_len != 0 && payload != nullptr) std::memcpy(p, payload, payload_len);
  return total;
}

AggFields ReadAggFields(const AggHeader& h) {
  AggFields f;
  f.opcode = static_cast<Opcode>(h.opcode);
  f.flags = h.flags.host();
  f.node_id = h.node_id.host();
  f.job_id = h.job_id.host();
  f.seq = h.seq.host();
  f.job_key = h.job_key.host();
  f.ack_watermark = h.ack_watermark.host();
  f.addr_low = h.addr_low.host();
  f.expected = h.expected.host();
  f.node_count = h.node_count.host();
  f.slot_hint = h.slot_hint.host();
  f.elem_count = h.elem_count.host();
  f.dtype = static_cast<DType>(h.dtype);
  f.op = static_cast<ReduceOp>(h.op);
  f.scale = h.scale;
  f.aux = h.aux.host();
  f.incarnation = h.incarnation.host();
  return f;
}

}  // namespace aggswitch::aggregator
