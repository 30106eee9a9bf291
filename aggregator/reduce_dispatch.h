// The reduction kernels' dtype x op dispatch (reduce.h), written once for
// every kernel set: the scalar reference, AVX2 and AVX-512 each provide the
// loop for one wire type and one operation, and ReduceDispatch<K> maps a
// datagram's (dtype, op) onto them. Only the valid pairs (types.h IsValid)
// reach a kernel; any other does nothing, and Accumulate returns false.
//
// A kernel set K is a struct of static member functions:
//   template <ReduceOp kOp> bool Int32(uint8_t* acc, const uint8_t* p, uint32_t n);
//       kOp: sum (saturating; true when any element saturated), min, max, and, or
//   template <DType kWire, ReduceOp kOp> bool Float(uint8_t* acc, const uint8_t* p, uint32_t n);
//       kWire: float32, float16 or bfloat16, folded into a float32
//       accumulator; kOp: sum, min, max
//   template <ReduceOp kOp> bool Bool(uint8_t* acc, const uint8_t* p, uint32_t n);
//       kOp: and, or
//   template <DType kWire> void Widen(const uint8_t* p, uint32_t n, uint8_t* acc);
//   template <DType kWire> void Narrow(const uint8_t* acc, uint32_t n, uint8_t* out);
//       kWire: float16 or bfloat16, to and from the float32 accumulator
//   void NormalizeBool(const uint8_t* in, uint32_t n, uint8_t* out);
//       any non-zero byte to 1
// int32 and float32 accumulate in their wire format: their load and store
// are a copy, here.
//
//   struct Avx2 { ... };   // a kernel set, its functions under its target
//   AGG_TARGET_AVX2 bool AccumulateAvx2(DType t, ReduceOp op, void* acc, const uint8_t* p, uint32_t
//   n) {
//     return ReduceDispatch<Avx2>::Accumulate(t, op, acc, p, n);
//   }
//
// The dispatch is inlined into its caller (always_inline), so the kernels
// are called, and inlined, under the caller's target: a kernel set's entry
// points carry its target attribute.
//
// Thread safety: [any], as reduce.h's functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "aggregator/types.h"

namespace aggswitch::aggregator {

template <typename K>
struct ReduceDispatch {
  [[gnu::always_inline]] static inline void LoadFirst(DType dtype, const uint8_t* payload,
                                                      uint32_t n, void* acc) {
    uint8_t* a = static_cast<uint8_t*>(acc);
    switch (dtype) {
      case DType::kInt32:
      case DType::kFloat32:
        if (n != 0) std::memcpy(a, payload, size_t{n} * 4);  // n == 0 may come with null pointers
        return;
      case DType::kFloat16:
        K::template Widen<DType::kFloat16>(payload, n, a);
        return;
      case DType::kBFloat16:
        K::template Widen<DType::kBFloat16>(payload, n, a);
        return;
      case DType::kBool:
        K::NormalizeBool(payload, n, a);
        return;
    }
  }

  [[gnu::always_inline]] static inline bool Accumulate(DType dtype, ReduceOp op, void* acc,
                                                       const uint8_t* payload, uint32_t n) {
    uint8_t* a = static_cast<uint8_t*>(acc);
    switch (dtype) {
      case DType::kInt32:
        switch (op) {
          case ReduceOp::kSum:
            return K::template Int32<ReduceOp::kSum>(a, payload, n);
          case ReduceOp::kMin:
            return K::template Int32<ReduceOp::kMin>(a, payload, n);
          case ReduceOp::kMax:
            return K::template Int32<ReduceOp::kMax>(a, payload, n);
          case ReduceOp::kAnd:
            return K::template Int32<ReduceOp::kAnd>(a, payload, n);
          case ReduceOp::kOr:
            return K::template Int32<ReduceOp::kOr>(a, payload, n);
        }
        return false;
      case DType::kFloat32:
        return Float<DType::kFloat32>(op, a, payload, n);
      case DType::kFloat16:
        return Float<DType::kFloat16>(op, a, payload, n);
      case DType::kBFloat16:
        return Float<DType::kBFloat16>(op, a, payload, n);
      case DType::kBool:
        switch (op) {
          case ReduceOp::kAnd:
            return K::template Bool<ReduceOp::kAnd>(a, payload, n);
          case ReduceOp::kOr:
            return K::template Bool<ReduceOp::kOr>(a, payload, n);
          case ReduceOp::kSum:
          case ReduceOp::kMin:
          case ReduceOp::kMax:
            return false;
        }
        return false;
    }
    return false;
  }

  [[gnu::always_inline]] static inline void StoreResult(DType dtype, const void* acc, uint32_t n,
                                                        uint8_t* payload_out) {
    const uint8_t* a = static_cast<const uint8_t*>(acc);
    switch (dtype) {
      case DType::kInt32:
      case DType::kFloat32:
        if (n != 0)
          std::memcpy(payload_out, a, size_t{n} * 4);  // n == 0 may come with null pointers
        return;
      case DType::kFloat16:
        K::template Narrow<DType::kFloat16>(a, n, payload_out);
        return;
      case DType::kBFloat16:
        K::template Narrow<DType::kBFloat16>(a, n, payload_out);
        return;
      case DType::kBool:
        K::NormalizeBool(a, n, payload_out);
        return;
    }
  }

 private:
  template <DType kWire>
  [[gnu::always_inline]] static inline bool Float(ReduceOp op, uint8_t* acc, const uint8_t* p,
                                                  uint32_t n) {
    switch (op) {
      case ReduceOp::kSum:
        return K::template Float<kWire, ReduceOp::kSum>(acc, p, n);
      case ReduceOp::kMin:
        return K::template Float<kWire, ReduceOp::kMin>(acc, p, n);
      case ReduceOp::kMax:
        return K::template Float<kWire, ReduceOp::kMax>(acc, p, n);
      case ReduceOp::kAnd:
      case ReduceOp::kOr:
        return false;
    }
    return false;
  }
};

}  // namespace aggswitch::aggregator
