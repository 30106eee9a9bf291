// The scalar reference kernels (the specification) and the run-time dispatch.
#include "aggregator/reduce.h"

#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "aggregator/half.h"
#include "aggregator/reduce_dispatch.h"

namespace aggswitch::aggregator {
namespace {

// Element i of a packed array of T at any alignment.
template <typename T>
T LoadAt(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void StoreAt(void* base, size_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(base) + i * sizeof(T), &v, sizeof(T));
}

float CanonicalNaN() {
  return std::bit_cast<float>(kCanonicalNaNBits);
}

float SumFloat(float a, float b) {
  const float r = a + b;
  return std::isnan(r) ? CanonicalNaN() : r;
}

// For equal operands (only +-0 can differ in bits) OR-ing the bits gives -0 if either is -0.
float MinFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return CanonicalNaN();
  if (a < b) return a;
  if (b < a) return b;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(a) | std::bit_cast<uint32_t>(b));
}

// For equal operands AND-ing the bits gives +0 if either is +0.
float MaxFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return CanonicalNaN();
  if (a > b) return a;
  if (b > a) return b;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(a) & std::bit_cast<uint32_t>(b));
}

int32_t SaturatingSum(int32_t a, int32_t b, bool& saturated) {
  int32_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    saturated = true;
    return a < 0 ? INT32_MIN : INT32_MAX;  // overflow needs both operands of a's sign
  }
  return r;
}

// Wire element i of a float type, as float32.
template <DType kWire>
float ReadFloat(const uint8_t* p, size_t i) {
  if constexpr (kWire == DType::kFloat32) {
    return LoadAt<float>(p, i);
  } else if constexpr (kWire == DType::kFloat16) {
    return HalfToFloat(LoadAt<uint16_t>(p, i));
  } else {
    static_assert(kWire == DType::kBFloat16);
    return BFloat16ToFloat(LoadAt<uint16_t>(p, i));
  }
}

// The scalar kernel set (reduce_dispatch.h): one element at a time.
struct Scalar {
  template <ReduceOp kOp>
  static bool Int32(uint8_t* acc, const uint8_t* p, uint32_t n) {
    bool saturated = false;
    for (size_t i = 0; i < n; ++i) {
      const int32_t a = LoadAt<int32_t>(acc, i);
      const int32_t b = LoadAt<int32_t>(p, i);
      int32_t r;
      if constexpr (kOp == ReduceOp::kSum) {
        r = SaturatingSum(a, b, saturated);
      } else if constexpr (kOp == ReduceOp::kMin) {
        r = a < b ? a : b;
      } else if constexpr (kOp == ReduceOp::kMax) {
        r = a > b ? a : b;
      } else if constexpr (kOp == ReduceOp::kAnd) {
        r = a & b;
      } else {
        static_assert(kOp == ReduceOp::kOr);
        r = a | b;
      }
      StoreAt<int32_t>(acc, i, r);
    }
    return saturated;
  }

  template <DType kWire, ReduceOp kOp>
  static bool Float(uint8_t* acc, const uint8_t* p, uint32_t n) {
    for (size_t i = 0; i < n; ++i) {
      const float a = LoadAt<float>(acc, i);
      const float b = ReadFloat<kWire>(p, i);
      float r;
      if constexpr (kOp == ReduceOp::kSum) {
        r = SumFloat(a, b);
      } else if constexpr (kOp == ReduceOp::kMin) {
        r = MinFloat(a, b);
      } else {
        static_assert(kOp == ReduceOp::kMax);
        r = MaxFloat(a, b);
      }
      StoreAt<float>(acc, i, r);
    }
    return false;
  }

  // The accumulator holds 0/1 after LoadFirst, but any non-zero byte counts
  // as true here too.
  template <ReduceOp kOp>
  static bool Bool(uint8_t* acc, const uint8_t* p, uint32_t n) {
    for (size_t i = 0; i < n; ++i) {
      if constexpr (kOp == ReduceOp::kAnd) {
        acc[i] = acc[i] != 0 && p[i] != 0 ? 1 : 0;
      } else {
        static_assert(kOp == ReduceOp::kOr);
        acc[i] = acc[i] != 0 || p[i] != 0 ? 1 : 0;
      }
    }
    return false;
  }

  template <DType kWire>
  static void Widen(const uint8_t* p, uint32_t n, uint8_t* acc) {
    for (size_t i = 0; i < n; ++i) StoreAt<float>(acc, i, ReadFloat<kWire>(p, i));
  }

  template <DType kWire>
  static void Narrow(const uint8_t* acc, uint32_t n, uint8_t* out) {
    for (size_t i = 0; i < n; ++i) {
      const float f = LoadAt<float>(acc, i);
      if constexpr (kWire == DType::kFloat16) {
        StoreAt<uint16_t>(out, i, FloatToHalf(f));
      } else {
        static_assert(kWire == DType::kBFloat16);
        StoreAt<uint16_t>(out, i, FloatToBFloat16(f));
      }
    }
  }

  static void NormalizeBool(const uint8_t* in, uint32_t n, uint8_t* out) {
    for (size_t i = 0; i < n; ++i) out[i] = in[i] != 0 ? 1 : 0;
  }
};

using LoadFirstFn = void (*)(DType, const uint8_t*, uint32_t, void*);
using AccumulateFn = bool (*)(DType, ReduceOp, void*, const uint8_t*, uint32_t);
using StoreResultFn = void (*)(DType, const void*, uint32_t, uint8_t*);

struct KernelSet {
  ReduceIsa isa;
  LoadFirstFn load_first;
  AccumulateFn accumulate;
  StoreResultFn store_result;
};

// Indexed by ReduceIsa.
constexpr KernelSet kKernelSets[] = {
    {ReduceIsa::kScalar, reference::LoadFirst, reference::Accumulate, reference::StoreResult},
    {ReduceIsa::kAvx2, internal::LoadFirstAvx2, internal::AccumulateAvx2,
     internal::StoreResultAvx2},
    {ReduceIsa::kAvx512, internal::LoadFirstAvx512, internal::AccumulateAvx512,
     internal::StoreResultAvx512},
};

// The one piece of process-wide state: which kernel set runs, like an ifunc
// resolution but overridable for tests. It only ever points into the constant
// kKernelSets, so relaxed ordering is enough; null until the first pick.
std::atomic<const KernelSet*> g_active{nullptr};

const KernelSet* PickBest() {
  return &kKernelSets[static_cast<size_t>(common::BestSimdIsa())];
}

const KernelSet* Active() {
  const KernelSet* k = g_active.load(std::memory_order_relaxed);
  if (k != nullptr) [[likely]]
    return k;
  // Racing first callers all compute the same answer; whichever store lands is fine.
  const KernelSet* best = PickBest();
  const KernelSet* expected = nullptr;
  g_active.compare_exchange_strong(expected, best, std::memory_order_relaxed);
  return g_active.load(std::memory_order_relaxed);
}

}  // namespace

namespace reference {

void LoadFirst(DType dtype, const uint8_t* payload, uint32_t n, void* acc) {
  ReduceDispatch<Scalar>::LoadFirst(dtype, payload, n, acc);
}

bool Accumulate(DType dtype, ReduceOp op, void* acc, const uint8_t* payload, uint32_t n) {
  return ReduceDispatch<Scalar>::Accumulate(dtype, op, acc, payload, n);
}

void StoreResult(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out) {
  ReduceDispatch<Scalar>::StoreResult(dtype, acc, n, payload_out);
}

}  // namespace reference

size_t AccumulatorElementSize(DType dtype) {
  switch (dtype) {
    case DType::kInt32:
    case DType::kFloat32:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 4;
    case DType::kBool:
      return 1;
  }
  return 0;
}

void LoadFirst(DType dtype, const uint8_t* payload, uint32_t n, void* acc) {
  Active()->load_first(dtype, payload, n, acc);
}

bool Accumulate(DType dtype, ReduceOp op, void* acc, const uint8_t* payload, uint32_t n) {
  return Active()->accumulate(dtype, op, acc, payload, n);
}

void StoreResult(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out) {
  Active()->store_result(dtype, acc, n, payload_out);
}

void StoreIdentity(DType dtype, ReduceOp op, uint32_t n, uint8_t* payload_out) {
  if (!IsValid(dtype, op)) return;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float f = op == ReduceOp::kMin ? kInf : op == ReduceOp::kMax ? -kInf : -0.0f;
  switch (dtype) {
    case DType::kInt32: {
      const int32_t e = op == ReduceOp::kMin   ? INT32_MAX
                        : op == ReduceOp::kMax ? INT32_MIN
                        : op == ReduceOp::kAnd ? -1
                                               : 0;
      for (size_t i = 0; i < n; ++i) StoreAt<int32_t>(payload_out, i, e);
      return;
    }
    case DType::kFloat32:
      for (size_t i = 0; i < n; ++i) StoreAt<float>(payload_out, i, f);
      return;
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i) StoreAt<uint16_t>(payload_out, i, FloatToHalf(f));
      return;
    case DType::kBFloat16:
      for (size_t i = 0; i < n; ++i) StoreAt<uint16_t>(payload_out, i, FloatToBFloat16(f));
      return;
    case DType::kBool:
      if (n != 0) std::memset(payload_out, op == ReduceOp::kAnd ? 1 : 0, n);
      return;
  }
}

void InitReduceKernels() {
  g_active.store(PickBest(), std::memory_order_relaxed);
}

const char* ActiveReduceIsa() {
  return ReduceIsaName(Active()->isa);
}

const char* ReduceIsaName(ReduceIsa isa) {
  return common::SimdIsaName(isa);
}

bool ReduceIsaSupported(ReduceIsa isa) {
  return common::SimdIsaSupported(isa);
}

bool ForceReduceIsa(ReduceIsa isa) {
  if (!ReduceIsaSupported(isa)) return false;
  g_active.store(&kKernelSets[static_cast<size_t>(isa)], std::memory_order_relaxed);
  return true;
}

}  // namespace aggswitch::aggregator
