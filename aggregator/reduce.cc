// The scalar reference kernels (the specification) and the run-time dispatch.
#include "aggregator/reduce.h"

#include <atomic>
#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "aggregator/half.h"

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

// Wire element i converted to the accumulator type.
int32_t ReadInt32(const uint8_t* p, size_t i) {
  return LoadAt<int32_t>(p, i);
}
float ReadFloat32(const uint8_t* p, size_t i) {
  return LoadAt<float>(p, i);
}
float ReadFloat16(const uint8_t* p, size_t i) {
  return HalfToFloat(LoadAt<uint16_t>(p, i));
}
float ReadBFloat16(const uint8_t* p, size_t i) {
  return BFloat16ToFloat(LoadAt<uint16_t>(p, i));
}
uint8_t ReadBool(const uint8_t* p, size_t i) {
  return p[i] != 0 ? 1 : 0;
}

template <typename Acc, typename Read>
void Convert(const uint8_t* payload, uint32_t n, void* acc, Read read) {
  for (size_t i = 0; i < n; ++i) StoreAt<Acc>(acc, i, read(payload, i));
}

// acc[i] = op(acc[i], read(payload, i)); op(a, b, saturated&).
template <typename Acc, typename Read, typename Op>
bool Fold(void* acc, const uint8_t* payload, uint32_t n, Read read, Op op) {
  bool saturated = false;
  for (size_t i = 0; i < n; ++i) {
    StoreAt<Acc>(acc, i, op(LoadAt<Acc>(acc, i), read(payload, i), saturated));
  }
  return saturated;
}

template <typename Read>
bool AccumulateFloat(ReduceOp op, void* acc, const uint8_t* payload, uint32_t n, Read read) {
  switch (op) {
    case ReduceOp::kSum:
      return Fold<float>(acc, payload, n, read,
                         [](float a, float b, bool&) { return SumFloat(a, b); });
    case ReduceOp::kMin:
      return Fold<float>(acc, payload, n, read,
                         [](float a, float b, bool&) { return MinFloat(a, b); });
    case ReduceOp::kMax:
      return Fold<float>(acc, payload, n, read,
                         [](float a, float b, bool&) { return MaxFloat(a, b); });
    case ReduceOp::kAnd:
    case ReduceOp::kOr:
      return false;
  }
  return false;
}

bool AccumulateInt32(ReduceOp op, void* acc, const uint8_t* payload, uint32_t n) {
  using I = int32_t;
  switch (op) {
    case ReduceOp::kSum:
      return Fold<I>(acc, payload, n, ReadInt32, SaturatingSum);
    case ReduceOp::kMin:
      return Fold<I>(acc, payload, n, ReadInt32, [](I a, I b, bool&) { return a < b ? a : b; });
    case ReduceOp::kMax:
      return Fold<I>(acc, payload, n, ReadInt32, [](I a, I b, bool&) { return a > b ? a : b; });
    case ReduceOp::kAnd:
      return Fold<I>(acc, payload, n, ReadInt32, [](I a, I b, bool&) { return a & b; });
    case ReduceOp::kOr:
      return Fold<I>(acc, payload, n, ReadInt32, [](I a, I b, bool&) { return a | b; });
  }
  return false;
}

// The accumulator holds 0/1 after LoadFirst, but any non-zero byte counts as true here too.
bool AccumulateBool(ReduceOp op, void* acc, const uint8_t* payload, uint32_t n) {
  using B = uint8_t;
  switch (op) {
    case ReduceOp::kAnd:
      return Fold<B>(acc, payload, n, ReadBool,
                     [](B a, B b, bool&) -> B { return a != 0 && b != 0 ? 1 : 0; });
    case ReduceOp::kOr:
      return Fold<B>(acc, payload, n, ReadBool,
                     [](B a, B b, bool&) -> B { return a != 0 || b != 0 ? 1 : 0; });
    case ReduceOp::kSum:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return false;
  }
  return false;
}

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
  switch (dtype) {
    case DType::kInt32:
    case DType::kFloat32:
      if (n != 0) std::memcpy(acc, payload, size_t{n} * 4);  // n == 0 may come with null pointers
      return;
    case DType::kFloat16:
      Convert<float>(payload, n, acc, ReadFloat16);
      return;
    case DType::kBFloat16:
      Convert<float>(payload, n, acc, ReadBFloat16);
      return;
    case DType::kBool:
      Convert<uint8_t>(payload, n, acc, ReadBool);
      return;
  }
}

bool Accumulate(DType dtype, ReduceOp op, void* acc, const uint8_t* payload, uint32_t n) {
  switch (dtype) {
    case DType::kInt32:
      return AccumulateInt32(op, acc, payload, n);
    case DType::kFloat32:
      return AccumulateFloat(op, acc, payload, n, ReadFloat32);
    case DType::kFloat16:
      return AccumulateFloat(op, acc, payload, n, ReadFloat16);
    case DType::kBFloat16:
      return AccumulateFloat(op, acc, payload, n, ReadBFloat16);
    case DType::kBool:
      return AccumulateBool(op, acc, payload, n);
  }
  return false;
}

void StoreResult(DType dtype, const void* acc, uint32_t n, uint8_t* payload_out) {
  switch (dtype) {
    case DType::kInt32:
    case DType::kFloat32:
      if (n != 0)
        std::memcpy(payload_out, acc, size_t{n} * 4);  // n == 0 may come with null pointers
      return;
    case DType::kFloat16:
      for (size_t i = 0; i < n; ++i)
        StoreAt<uint16_t>(payload_out, i, FloatToHalf(LoadAt<float>(acc, i)));
      return;
    case DType::kBFloat16:
      for (size_t i = 0; i < n; ++i) {
        StoreAt<uint16_t>(payload_out, i, FloatToBFloat16(LoadAt<float>(acc, i)));
      }
      return;
    case DType::kBool:
      for (size_t i = 0; i < n; ++i) payload_out[i] = LoadAt<uint8_t>(acc, i) != 0 ? 1 : 0;
      return;
  }
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
