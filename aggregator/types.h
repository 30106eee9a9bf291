// Element types and reduction operators of the aggregation protocol, with the
// wire values they carry (docs/protocol.md). Shared by the switch, the client
// library and the tools.
//
//   if (!IsValid(dtype, op)) reject;
//   size_t bytes = ElementSize(DType::kFloat16) * count;
//
// Thread safety: constants and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace aggswitch::aggregator {

// Wire values of the header's dtype field.
enum class DType : uint8_t {
  kInt32 = 0,     // two's complement; fixed point with the header's scale exponent
  kFloat32 = 1,   // IEEE 754 binary32
  kFloat16 = 2,   // IEEE 754 binary16, accumulated in float32
  kBFloat16 = 3,  // bfloat16, accumulated in float32
  kBool = 4,      // one byte per element, 0 or 1
};
inline constexpr uint8_t kNumDTypes = 5;

// Wire values of the header's op field.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kMin = 1,
  kMax = 2,
  kAnd = 3,  // bool: logical; int32: bitwise
  kOr = 4,   // bool: logical; int32: bitwise
};
inline constexpr uint8_t kNumReduceOps = 5;

// The node ids a member's chunk leaves room for beside its payload by
// default: a switch's partial carries a missing list of up to that many ids
// upstream with a full chunk (the client's reserve_missing_ids), so a
// switch excludes at most that many predicted stragglers of a job by
// default (docs/stragglers.md, "Straggler prediction").
inline constexpr uint32_t kDefaultReservedMissingIds = 32;

constexpr size_t ElementSize(DType t) {
  switch (t) {
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kBool: return 1;
  }
  return 0;
}

// Whether the pair is defined: and/or need an integer or bool type; sum/min/max
// need a numeric type (sum of bools is not defined; use int32).
constexpr bool IsValid(DType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax: return t != DType::kBool;
    case ReduceOp::kAnd:
    case ReduceOp::kOr: return t == DType::kInt32 || t == DType::kBool;
  }
  return false;
}

constexpr std::optional<DType> DTypeFromWire(uint8_t v) {
  return v < kNumDTypes ? std::optional<DType>(static_cast<DType>(v)) : std::nullopt;
}
constexpr std::optional<ReduceOp> ReduceOpFromWire(uint8_t v) {
  return v < kNumReduceOps ? std::optional<ReduceOp>(static_cast<ReduceOp>(v)) : std::nullopt;
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kInt32: return "int32";
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

constexpr std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAnd: return "and";
    case ReduceOp::kOr: return "or";
  }
  return "unknown";
}

// The inverses of DTypeName and ReduceOpName; nullopt for any other text.
constexpr std::optional<DType> DTypeFromName(std::string_view name) {
  for (uint8_t v = 0; v < kNumDTypes; ++v) {
    if (DTypeName(static_cast<DType>(v)) == name) return static_cast<DType>(v);
  }
  return std::nullopt;
}
constexpr std::optional<ReduceOp> ReduceOpFromName(std::string_view name) {
  for (uint8_t v = 0; v < kNumReduceOps; ++v) {
    if (ReduceOpName(static_cast<ReduceOp>(v)) == name) return static_cast<ReduceOp>(v);
  }
  return std::nullopt;
}

}  // namespace aggswitch::aggregator
