// Every (dtype, op) pair of the protocol (docs/protocol.md, "Data types and
// operations") through the real switch path: net_ring ports and one worker pass
// per frame (dataplane_test_fixture.h).
//
// For each pair, member count and payload size, the members' contributions go
// in in order, reversed and shuffled, and for every chunk:
//   * nothing leaves the switch before the last contribution; then every member
//     gets exactly one result, out of its own port, addressed to it;
//   * the result header carries the job, seq, dtype, op, scale and elem_count,
//     and OVERFLOW exactly when an int32 sum saturated (also counted in
//     saturated_sums);
//   * the payload is byte-for-byte the scalar reference kernels
//     (aggregator::reference) folded in the order the switch folds: arrival
//     order for a plain job, member order for an ordered one. Ordered results
//     are also identical across the three arrival orders;
//   * edge elements (saturation, NaN, +-Inf, -0, subnormals, non-1 true bytes)
//     equal a value worked out here without the kernels, and every NaN in a
//     result is the canonical one.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "aggregator/half.h"
#include "dataplane/dataplane_test_fixture.h"

namespace aggswitch::dataplane {
namespace {

using namespace fixtures;  // NOLINT(build/namespaces)
using aggregator::ElementSize;

const auto* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EalEnvironment("aggregation_types_test"));

constexpr uint32_t kJob = 11;

// Payload elements of `dtype` in one datagram on a 1500-byte MTU:
// 1500 - 20 (IPv4) - 8 (UDP) - 52 (aggregation header) = 1420 bytes.
constexpr uint16_t MtuElements(DType dtype) {
  return static_cast<uint16_t>((1500 - 20 - 8 - sizeof(aggregator::AggHeader)) / ElementSize(dtype));
}
static_assert(MtuElements(DType::kInt32) == 355 && MtuElements(DType::kFloat16) == 710 &&
              MtuElements(DType::kBool) == 1420);

// What the members send; see the *Column functions for the per-element patterns.
enum class Values : uint8_t {
  kEdges,       // random values mixed with the dtype's edge values (not for int32 sum)
  kNoOverflow,  // int32 sum: values so small that no sum saturates
  kSaturating,  // int32 sum: some sums saturate at INT32_MAX / INT32_MIN, some reach them exactly
};

struct TypeCase {
  DType dtype;
  ReduceOp op;
  bool ordered;  // AddJob(..., ordered): the switch folds in member order
  Values values;
};

// Every valid pair (ValidPairsAreAllCovered checks it). Float sums run twice:
// a plain job folds in arrival order, an ordered job in member order.
constexpr TypeCase kCases[] = {
    {DType::kInt32, ReduceOp::kSum, false, Values::kNoOverflow},
    {DType::kInt32, ReduceOp::kSum, false, Values::kSaturating},
    {DType::kInt32, ReduceOp::kMin, false, Values::kEdges},
    {DType::kInt32, ReduceOp::kMax, false, Values::kEdges},
    {DType::kInt32, ReduceOp::kAnd, false, Values::kEdges},
    {DType::kInt32, ReduceOp::kOr, false, Values::kEdges},
    {DType::kFloat32, ReduceOp::kSum, false, Values::kEdges},
    {DType::kFloat32, ReduceOp::kSum, true, Values::kEdges},
    {DType::kFloat32, ReduceOp::kMin, false, Values::kEdges},
    {DType::kFloat32, ReduceOp::kMax, false, Values::kEdges},
    {DType::kFloat16, ReduceOp::kSum, false, Values::kEdges},
    {DType::kFloat16, ReduceOp::kSum, true, Values::kEdges},
    {DType::kFloat16, ReduceOp::kMin, false, Values::kEdges},
    {DType::kFloat16, ReduceOp::kMax, false, Values::kEdges},
    {DType::kBFloat16, ReduceOp::kSum, false, Values::kEdges},
    {DType::kBFloat16, ReduceOp::kSum, true, Values::kEdges},
    {DType::kBFloat16, ReduceOp::kMin, false, Values::kEdges},
    {DType::kBFloat16, ReduceOp::kMax, false, Values::kEdges},
    {DType::kBool, ReduceOp::kAnd, false, Values::kEdges},
    {DType::kBool, ReduceOp::kOr, false, Values::kEdges},
};

constexpr uint16_t kMemberCounts[] = {3, 8, 33};
// 1, odd (a SIMD tail for every vector width), and a full 1500-byte-MTU datagram.
constexpr uint16_t kMtuMax = 0;
constexpr uint16_t kSizes[] = {1, 37, kMtuMax};
// The switch reduces with whatever kernel set dispatch picks; each test forces one.
constexpr aggregator::ReduceIsa kIsas[] = {aggregator::ReduceIsa::kScalar, aggregator::ReduceIsa::kAvx2,
                                           aggregator::ReduceIsa::kAvx512};

bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// ---------------------------------------------------------------------------
// Wire elements as bits (little-endian hosts, like the protocol).

uint32_t GetElement(DType t, const uint8_t* p, size_t i) {
  uint32_t v = 0;
  std::memcpy(&v, p + i * ElementSize(t), ElementSize(t));
  return v;
}

void PutElement(DType t, uint8_t* p, size_t i, uint32_t v) {
  std::memcpy(p + i * ElementSize(t), &v, ElementSize(t));
}

std::string DescribeElement(DType t, uint32_t bits) {
  char buf[80];
  switch (t) {
    case DType::kInt32:
      std::snprintf(buf, sizeof(buf), "%" PRId32 " (0x%08" PRIx32 ")", static_cast<int32_t>(bits), bits);
      break;
    case DType::kFloat32:
      std::snprintf(buf, sizeof(buf), "%.9g (0x%08" PRIx32 ")", std::bit_cast<float>(bits), bits);
      break;
    case DType::kFloat16:
      std::snprintf(buf, sizeof(buf), "%.9g (0x%04" PRIx32 ")",
                    aggregator::HalfToFloat(static_cast<uint16_t>(bits)), bits);
      break;
    case DType::kBFloat16:
      std::snprintf(buf, sizeof(buf), "%.9g (0x%04" PRIx32 ")",
                    aggregator::BFloat16ToFloat(static_cast<uint16_t>(bits)), bits);
      break;
    case DType::kBool: std::snprintf(buf, sizeof(buf), "0x%02" PRIx32, bits); break;
  }
  return buf;
}

// Whole payloads, byte for byte; a failure names the first differing element.
::testing::AssertionResult PayloadsEqual(DType t, const std::vector<uint8_t>& want,
                                         const std::vector<uint8_t>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "payload is " << got.size() << " bytes, want " << want.size();
  }
  if (want == got) return ::testing::AssertionSuccess();
  const size_t n = want.size() / ElementSize(t);
  size_t first = n, differing = 0;
  for (size_t i = 0; i < n; ++i) {
    if (GetElement(t, want.data(), i) != GetElement(t, got.data(), i)) {
      if (first == n) first = i;
      ++differing;
    }
  }
  return ::testing::AssertionFailure()
         << differing << " of " << n << " elements differ; first at [" << first
         << "]: want " << DescribeElement(t, GetElement(t, want.data(), first)) << ", got "
         << DescribeElement(t, GetElement(t, got.data(), first));
}

// The bits of the float formats, as the dtype's wire elements.
struct FloatFormat {
  uint32_t sign, inf, canonical_nan, max_subnormal;
  std::vector<uint32_t> nans;  // input NaNs: signalling, negative, with payloads
};

const FloatFormat& Format(DType t) {
  static const FloatFormat f32{0x80000000u, 0x7F800000u, aggregator::kCanonicalNaNBits, 0x007FFFFFu,
                               {0x7FA00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FC00001u}};
  static const FloatFormat f16{0x8000u, 0x7C00u, 0x7E00u, 0x03FFu, {0x7C01u, 0xFE00u, 0x7D00u, 0xFFFFu}};
  static const FloatFormat bf16{0x8000u, 0x7F80u, 0x7FC0u, 0x007Fu, {0x7F81u, 0xFFC0u, 0x7FA0u, 0xFFFFu}};
  return t == DType::kFloat32 ? f32 : t == DType::kFloat16 ? f16 : bf16;
}

bool IsNaN(DType t, uint32_t bits) {
  const FloatFormat& f = Format(t);
  return (bits & ~f.sign) > f.inf;
}

// ---------------------------------------------------------------------------
// Deterministic inputs. Element i of round r follows pattern (i + r) % Patterns():
// a payload of at least Patterns() elements holds every pattern, and a 1-element
// chunk sees each in turn over the rounds. Each *Column function fills one
// element across the members and returns the result's bits when they follow
// from the pattern without running the kernels.

uint32_t Patterns(const TypeCase& c) {
  if (IsFloat(c.dtype)) return 12;
  if (c.dtype == DType::kBool) return 6;
  switch (c.values) {
    case Values::kNoOverflow: return 1;
    case Values::kSaturating: return 5;
    case Values::kEdges: return 8;
  }
  return 1;
}

int64_t Uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

std::optional<uint32_t> Int32Column(const TypeCase& c, uint32_t pattern, std::mt19937& rng,
                                    std::vector<uint32_t>& column, bool* saturates) {
  const size_t m = column.size();
  const size_t k = rng() % m;  // the member that gets the special value
  constexpr int64_t kSmall = INT32_MAX / 256;  // no sum of max_fan_in of them saturates
  std::vector<int32_t> v(m);
  auto fill = [&](int64_t lo, int64_t hi) {
    for (int32_t& x : v) x = static_cast<int32_t>(Uniform(rng, lo, hi));
  };
  if (c.values == Values::kNoOverflow) {
    fill(-kSmall, kSmall);
  } else if (c.values == Values::kSaturating) {
    // Every member has the same sign (or the values are small), so the
    // saturating sum is the clamped exact sum whatever the order.
    switch (pattern) {
      case 0: fill(int64_t{1} << 30, INT32_MAX); break;   // -> INT32_MAX, saturated
      case 1: fill(INT32_MIN, -(int64_t{1} << 30)); break;  // -> INT32_MIN, saturated
      case 2:
      case 3: {  // shares of exactly INT32_MAX / INT32_MIN: reaches the bound, no saturation
        const int64_t total = pattern == 2 ? INT32_MAX : INT32_MIN;
        int64_t rest = total;
        for (size_t j = 0; j + 1 < m; ++j) {
          v[j] = static_cast<int32_t>(total / static_cast<int64_t>(m) +
                                      (pattern == 2 ? -1 : 1) * Uniform(rng, 0, 1000));
          rest -= v[j];
        }
        v[m - 1] = static_cast<int32_t>(rest);
        break;
      }
      default: fill(-kSmall, kSmall); break;
    }
  } else {
    fill(INT32_MIN, INT32_MAX);
    switch (pattern) {
      case 0: v[k] = INT32_MIN; break;
      case 1: v[k] = INT32_MAX; break;
      case 2: std::fill(v.begin(), v.end(), v[k]); break;
      case 3: for (int32_t& x : v) x = (rng() & 1) ? 0 : -1; break;
      default: break;
    }
  }
  int64_t sum = 0;
  int32_t lo = v[0], hi = v[0], all = -1, any = 0;
  for (int32_t x : v) {
    sum += x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    all &= x;
    any |= x;
  }
  for (size_t j = 0; j < m; ++j) column[j] = static_cast<uint32_t>(v[j]);
  switch (c.op) {
    case ReduceOp::kSum: {
      if (c.values == Values::kEdges) return std::nullopt;  // saturation would depend on the order
      const int64_t clamped = std::clamp<int64_t>(sum, INT32_MIN, INT32_MAX);
      if (clamped != sum) *saturates = true;
      return static_cast<uint32_t>(static_cast<int32_t>(clamped));
    }
    case ReduceOp::kMin: return static_cast<uint32_t>(lo);
    case ReduceOp::kMax: return static_cast<uint32_t>(hi);
    case ReduceOp::kAnd: return static_cast<uint32_t>(all);
    case ReduceOp::kOr: return static_cast<uint32_t>(any);
  }
  return std::nullopt;
}

std::optional<uint32_t> BoolColumn(ReduceOp op, uint32_t pattern, std::mt19937& rng,
                                   std::vector<uint32_t>& column) {
  static constexpr uint8_t kTrue[] = {1, 2, 0x7F, 0x80, 0xFF};
  auto truthy = [&]() -> uint32_t {
    return (rng() & 1) ? kTrue[rng() % std::size(kTrue)] : 1 + rng() % 255;
  };
  const size_t k = rng() % column.size();
  switch (pattern) {
    case 0: for (uint32_t& x : column) x = truthy(); break;              // and 1, or 1
    case 1: for (uint32_t& x : column) x = truthy(); column[k] = 0; break;  // and 0, or 1
    case 2: std::fill(column.begin(), column.end(), 0u); break;          // and 0, or 0
    case 3: std::fill(column.begin(), column.end(), 0u); column[k] = truthy(); break;
    default: for (uint32_t& x : column) x = (rng() & 1) ? truthy() : 0; break;
  }
  const bool all = std::all_of(column.begin(), column.end(), [](uint32_t x) { return x != 0; });
  const bool any = std::any_of(column.begin(), column.end(), [](uint32_t x) { return x != 0; });
  return (op == ReduceOp::kAnd ? all : any) ? 1u : 0u;
}

// A normal value of mixed magnitude and sign: sums of these depend on the order.
uint32_t RandomFloat(DType t, std::mt19937& rng) {
  const int range = t == DType::kFloat32 ? 24 : 12;  // float16 keeps 2^-12 .. 2^13 normal
  const float magnitude = std::ldexp(1.0f + std::uniform_real_distribution<float>(0.0f, 1.0f)(rng),
                                     static_cast<int>(Uniform(rng, -range, range)));
  const float v = (rng() & 1) ? -magnitude : magnitude;
  switch (t) {
    case DType::kFloat16: return aggregator::FloatToHalf(v);
    case DType::kBFloat16: return aggregator::FloatToBFloat16(v);
    default: return std::bit_cast<uint32_t>(v);
  }
}

// At least 1.5 x 2^(emax): the sum of any two overflows to +Inf.
uint32_t LargeFloat(DType t, std::mt19937& rng) {
  switch (t) {
    case DType::kFloat16: return 0x7A00u | (rng() & 0x1FFu);
    case DType::kBFloat16: return 0x7F40u | (rng() & 0x3Fu);
    default: return 0x7F400000u | (rng() & 0x3FFFFFu);
  }
}

// B = 2^15 (float16) or 2^40 and positive values in [2^-10, 2^-9), so small
// that each one added to B (in float32) is lost, while their sum is not.
uint32_t BigFloat(DType t) {
  switch (t) {
    case DType::kFloat16: return aggregator::FloatToHalf(32768.0f);
    case DType::kBFloat16: return aggregator::FloatToBFloat16(std::ldexp(1.0f, 40));
    default: return std::bit_cast<uint32_t>(std::ldexp(1.0f, 40));
  }
}
uint32_t SmallFloat(DType t, std::mt19937& rng) {
  const float v = std::ldexp(1.0f + std::uniform_real_distribution<float>(0.0f, 0.99f)(rng), -10);
  switch (t) {
    case DType::kFloat16: return aggregator::FloatToHalf(v);
    case DType::kBFloat16: return aggregator::FloatToBFloat16(v);
    default: return std::bit_cast<uint32_t>(v);
  }
}

std::optional<uint32_t> FloatColumn(DType t, ReduceOp op, uint32_t pattern, std::mt19937& rng,
                                    std::vector<uint32_t>& column) {
  const FloatFormat& f = Format(t);
  const size_t m = column.size();
  const size_t k = rng() % m;
  const size_t k2 = (k + 1 + rng() % (m - 1)) % m;  // another member
  for (uint32_t& x : column) x = RandomFloat(t, rng);
  bool positive = false;  // every value positive: min and max follow from the bits
  switch (pattern) {
    case 0:  // one NaN of any sign or payload: canonical NaN for every op
      column[k] = f.nans[rng() % f.nans.size()];
      return f.canonical_nan;
    case 1:  // +Inf and -Inf
      column[k] = f.inf;
      column[k2] = f.sign | f.inf;
      return op == ReduceOp::kSum ? f.canonical_nan : op == ReduceOp::kMin ? f.sign | f.inf : f.inf;
    case 2: {  // one Inf of either sign among finite values
      const bool negative = rng() & 1;
      column[k] = (negative ? f.sign : 0u) | f.inf;
      if (op == ReduceOp::kSum || (op == ReduceOp::kMin && negative) ||
          (op == ReduceOp::kMax && !negative)) {
        return column[k];
      }
      return std::nullopt;
    }
    case 3:  // all -0: -0 for every op
      std::fill(column.begin(), column.end(), f.sign);
      return f.sign;
    case 4:  // +0 and -0 mixed: sum +0, min -0, max +0
      for (uint32_t& x : column) x = (rng() & 1) ? f.sign : 0u;
      column[k] = 0;
      column[k2] = f.sign;
      return op == ReduceOp::kMin ? f.sign : 0u;
    case 5:  // positive subnormals
      for (uint32_t& x : column) x = 1 + rng() % f.max_subnormal;
      positive = true;
      break;
    case 6:  // subnormals of either sign
      for (uint32_t& x : column) x = ((rng() & 1) ? f.sign : 0u) | (1 + rng() % f.max_subnormal);
      return std::nullopt;
    case 7:  // near the largest finite value: the sum overflows to +Inf
      for (uint32_t& x : column) x = LargeFloat(t, rng);
      if (op == ReduceOp::kSum) return f.inf;
      positive = true;
      break;
    case 8: {  // +B and -B among small positive values: the sum depends on where they fall
      const uint32_t big = BigFloat(t);
      for (uint32_t& x : column) x = SmallFloat(t, rng);
      column[k] = big;
      column[k2] = f.sign | big;
      if (op == ReduceOp::kSum) return std::nullopt;
      return op == ReduceOp::kMin ? f.sign | big : big;
    }
    default: return std::nullopt;  // random values
  }
  if (!positive || op == ReduceOp::kSum) return std::nullopt;
  // For positive floats the order of the bits is the order of the values.
  return op == ReduceOp::kMin ? *std::min_element(column.begin(), column.end())
                              : *std::max_element(column.begin(), column.end());
}

struct Inputs {
  std::vector<std::vector<uint8_t>> payloads;  // one per member, wire format
  std::vector<std::optional<uint32_t>> known;  // result elements worked out without the kernels
  bool saturates = false;                      // some int32 sum leaves the int32 range
};

Inputs MakeInputs(const TypeCase& c, uint16_t members, uint16_t n, uint32_t round, std::mt19937& rng) {
  Inputs in;
  in.payloads.assign(members, std::vector<uint8_t>(n * ElementSize(c.dtype)));
  in.known.resize(n);
  std::vector<uint32_t> column(members);
  for (uint16_t i = 0; i < n; ++i) {
    const uint32_t pattern = (i + round) % Patterns(c);
    if (c.dtype == DType::kInt32) {
      in.known[i] = Int32Column(c, pattern, rng, column, &in.saturates);
    } else if (c.dtype == DType::kBool) {
      in.known[i] = BoolColumn(c.op, pattern, rng, column);
    } else {
      in.known[i] = FloatColumn(c.dtype, c.op, pattern, rng, column);
    }
    for (uint16_t m = 0; m < members; ++m) PutElement(c.dtype, in.payloads[m].data(), i, column[m]);
  }
  return in;
}

// ---------------------------------------------------------------------------
// The expected result: the scalar reference kernels, folded in `order`.

struct Reduced {
  std::vector<uint8_t> payload;
  bool overflow = false;
};

Reduced ReferenceReduce(DType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                        const std::vector<uint16_t>& order, uint16_t n) {
  std::vector<uint8_t> acc(aggregator::AccumulatorElementSize(t) * n);
  Reduced r;
  r.payload.resize(ElementSize(t) * n);
  aggregator::reference::LoadFirst(t, inputs[order[0]].data(), n, acc.data());
  for (size_t k = 1; k < order.size(); ++k) {
    r.overflow |= aggregator::reference::Accumulate(t, op, acc.data(), inputs[order[k]].data(), n);
  }
  aggregator::reference::StoreResult(t, acc.data(), n, r.payload.data());
  return r;
}

// Elements the inputs pin down, and the invariants of every result: NaNs are
// canonical, bools are 0 or 1.
::testing::AssertionResult MatchesKnownValues(DType t, const std::vector<std::optional<uint32_t>>& known,
                                              const std::vector<uint8_t>& got) {
  for (size_t i = 0; i < known.size() && (i + 1) * ElementSize(t) <= got.size(); ++i) {
    const uint32_t bits = GetElement(t, got.data(), i);
    if (known[i] && *known[i] != bits) {
      return ::testing::AssertionFailure() << "element [" << i << "]: want " << DescribeElement(t, *known[i])
                                           << ", got " << DescribeElement(t, bits);
    }
    if (IsFloat(t) && IsNaN(t, bits) && bits != Format(t).canonical_nan) {
      return ::testing::AssertionFailure() << "element [" << i << "] is a non-canonical NaN "
                                           << DescribeElement(t, bits);
    }
    if (t == DType::kBool && bits > 1) {
      return ::testing::AssertionFailure() << "element [" << i << "] is bool " << DescribeElement(t, bits);
    }
  }
  return ::testing::AssertionSuccess();
}

enum class Arrival { kInOrder, kReversed, kShuffled };
constexpr Arrival kArrivals[] = {Arrival::kInOrder, Arrival::kReversed, Arrival::kShuffled};

const char* ArrivalName(Arrival a) {
  return a == Arrival::kInOrder ? "in order" : a == Arrival::kReversed ? "reversed" : "shuffled";
}

std::vector<uint16_t> MemberOrder(uint16_t members) {
  std::vector<uint16_t> order(members);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<uint16_t> ArrivalOrder(Arrival a, uint16_t members, std::mt19937& rng) {
  const std::vector<uint16_t> in_order = MemberOrder(members);
  const std::vector<uint16_t> reversed(in_order.rbegin(), in_order.rend());
  if (a == Arrival::kInOrder) return in_order;
  if (a == Arrival::kReversed) return reversed;
  std::vector<uint16_t> order = in_order;
  do {
    std::shuffle(order.begin(), order.end(), rng);
  } while (order == in_order || order == reversed);
  return order;
}

// Members are spread over the VLAN 10 ports: a0, a1 (access) and t (trunk, tagged 10).
constexpr int kMemberPorts[] = {0, 1, 3};
int PortOf(uint16_t node) { return kMemberPorts[node % 3]; }

// case, members, elements (or kMtuMax), the kernel set the switch uses
using Param = std::tuple<TypeCase, uint16_t, uint16_t, aggregator::ReduceIsa>;

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [c, members, size, isa] = info.param;
  static constexpr const char* kValues[] = {"", "_small", "_saturating"};
  std::string name = std::string(aggregator::DTypeName(c.dtype)) + "_" +
                     std::string(aggregator::ReduceOpName(c.op)) + (c.ordered ? "_ordered" : "") +
                     kValues[static_cast<int>(c.values)] + "_m" + std::to_string(members) + "_n" +
                     (size == kMtuMax ? "mtu" : std::to_string(size)) + "_" + aggregator::ReduceIsaName(isa);
  return name;
}

class AggregationTypesTest : public AggregationTest, public ::testing::WithParamInterface<Param> {
 protected:
  void SetUp() override {
    const aggregator::ReduceIsa isa = std::get<3>(GetParam());
    if (!aggregator::ReduceIsaSupported(isa)) {
      GTEST_SKIP() << "this CPU cannot run the " << aggregator::ReduceIsaName(isa) << " kernels";
    }
    ASSERT_TRUE(aggregator::ForceReduceIsa(isa));
    AggregationTest::SetUp();
  }
  void TearDown() override {
    AggregationTest::TearDown();
    aggregator::InitReduceKernels();  // back to the widest kernel set
  }

  // A contribution as Contribution() builds it, with a scale and from the
  // member's port (tagged VLAN 10 on the trunk).
  static Frame ContributionFrame(const TypeCase& c, uint32_t seq, uint16_t node, int8_t scale,
                                 const std::vector<uint8_t>& payload) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kContribution;
    f.node_id = node;
    f.job_id = kJob;
    f.seq = seq;
    f.job_key = 0x5eed;
    f.ack_watermark = seq;  // the previous chunks' slots may be reused
    f.dtype = c.dtype;
    f.op = c.op;
    f.scale = scale;
    f.elem_count = static_cast<uint16_t>(payload.size() / ElementSize(c.dtype));
    std::vector<uint8_t> agg(2048);
    const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, payload.data(),
                                                   static_cast<uint32_t>(payload.size()), agg.data(),
                                                   static_cast<uint32_t>(agg.size()));
    EXPECT_GT(n, 0u);
    EXPECT_LE(20 + 8 + n, 1500u) << "the IPv4 packet must fit a 1500-byte MTU";
    Frame frame(46 + n);
    const common::MacAddr mac = MemberMac(node);
    const uint32_t hdr = WriteUdpHeaders(frame.data(), kSwitchMac.bytes.data(), mac.bytes.data(),
                                         PortOf(node) == 3 ? 10 : 0, MemberIp(node), kAggIp,
                                         MemberPort(node), aggregator::kAggUdpPort, 1, n);
    frame.resize(hdr + n);
    std::memcpy(frame.data() + hdr, agg.data(), n);
    return frame;
  }

  // Injects the chunk's contributions in `order`, one worker pass each (so the
  // switch sees exactly this order across ports), and returns the result each
  // member got. Checks that nothing leaves before the last contribution and
  // that every result is addressed to its member and leaves by its port.
  std::map<uint16_t, Result> RunChunk(const TypeCase& c, uint32_t seq, int8_t scale,
                                      const std::vector<std::vector<uint8_t>>& payloads,
                                      const std::vector<uint16_t>& order) {
    std::map<uint16_t, Result> results;
    for (size_t i = 0; i < order.size(); ++i) {
      Inject(PortOf(order[i]), ContributionFrame(c, seq, order[i], scale, payloads[order[i]]));
      Step();
      if (i + 1 < order.size()) {
        const auto early = Drain();
        EXPECT_TRUE(early.empty()) << "frames left the switch after " << i + 1 << " of "
                                   << order.size() << " contributions";
      }
    }
    for (const auto& [port, frames] : Drain()) {
      for (const Frame& f : frames) {
        Result r = ParseResult(f);
        const uint16_t node = static_cast<uint16_t>(r.dst_port - 40000);
        if (node >= order.size() || r.dst_port < 40000) {
          ADD_FAILURE() << "result to unknown UDP port " << r.dst_port << " on port " << port;
          continue;
        }
        EXPECT_EQ(port, PortOf(node)) << "node " << node;
        EXPECT_EQ(r.dst_mac, MemberMac(node)) << "node " << node;
        EXPECT_EQ(r.dst_ip, MemberIp(node)) << "node " << node;
        EXPECT_EQ(r.tagged, PortOf(node) == 3) << "node " << node;
        if (r.tagged) {
          EXPECT_EQ(r.vid, 10) << "node " << node;
        }
        EXPECT_TRUE(results.emplace(node, std::move(r)).second) << "node " << node << " got two results";
      }
    }
    return results;
  }
};

TEST_P(AggregationTypesTest, EveryMemberGetsTheBitExactReduction) {
  const auto& [c, members, size, isa] = GetParam();
  ASSERT_STREQ(aggregator::ActiveReduceIsa(), aggregator::ReduceIsaName(isa));
  const uint16_t n = size == kMtuMax ? MtuElements(c.dtype) : size;
  const bool float_sum = IsFloat(c.dtype) && c.op == ReduceOp::kSum;
  AddJob(kJob, members, c.ordered);
  std::seed_seq seed{static_cast<uint32_t>(c.dtype), static_cast<uint32_t>(c.op),
                     static_cast<uint32_t>(c.ordered), static_cast<uint32_t>(c.values),
                     static_cast<uint32_t>(members), static_cast<uint32_t>(n)};
  std::mt19937 rng(seed);
  const uint32_t rounds = n >= Patterns(c) ? 2 : Patterns(c);
  uint32_t seq = 100;
  for (uint32_t round = 0; round < rounds; ++round) {
    const Inputs in = MakeInputs(c, members, n, round, rng);
    // int32 scale is echoed (real value = integer x 2^scale); 0 for the other types.
    const int8_t scale = c.dtype == DType::kInt32 ? static_cast<int8_t>(round % 2 ? 5 : -9) : 0;
    std::vector<std::vector<uint8_t>> wants;  // per arrival order
    std::vector<uint8_t> first_result;
    for (Arrival arrival : kArrivals) {
      ++seq;
      SCOPED_TRACE(::testing::Message() << "round " << round << ", seq " << seq << ", arrival "
                                        << ArrivalName(arrival));
      const std::vector<uint16_t> order = ArrivalOrder(arrival, members, rng);
      // The switch folds a plain job in arrival order, an ordered one in member order.
      const Reduced want =
          ReferenceReduce(c.dtype, c.op, in.payloads, c.ordered ? MemberOrder(members) : order, n);
      wants.push_back(want.payload);
      if (!float_sum) {
        // Order-free ops (and int32 sums whose saturation is order-free by
        // construction): the expectation itself does not depend on the order.
        ASSERT_TRUE(PayloadsEqual(
            c.dtype, ReferenceReduce(c.dtype, c.op, in.payloads, MemberOrder(members), n).payload,
            want.payload));
      }
      // The test's own values agree with the reference.
      ASSERT_TRUE(MatchesKnownValues(c.dtype, in.known, want.payload)) << "test inputs vs reference";
      ASSERT_EQ(want.overflow, in.saturates) << "test inputs vs reference";

      const uint64_t contributions = Agg().contributions.Get();
      const uint64_t completions = Agg().completions.Get();
      const uint64_t saturated = Agg().saturated_sums.Get();
      const uint64_t results_sent = Agg().results_sent.Get();
      const std::map<uint16_t, Result> results = RunChunk(c, seq, scale, in.payloads, order);
      ASSERT_EQ(results.size(), members) << "one result per member";
      EXPECT_EQ(Agg().contributions.Get() - contributions, members);
      EXPECT_EQ(Agg().completions.Get() - completions, 1u);
      EXPECT_EQ(Agg().saturated_sums.Get() - saturated, in.saturates ? 1u : 0u);
      EXPECT_EQ(Agg().results_sent.Get() - results_sent, members);
      EXPECT_EQ(Agg().collisions.Get() + Agg().rejected.Get() + Agg().duplicates.Get(), 0u);

      for (const auto& [node, r] : results) {
        SCOPED_TRACE(::testing::Message() << "result to node " << node);
        const aggregator::AggFields& f = r.fields;
        EXPECT_EQ(f.opcode, aggregator::Opcode::kResult);
        EXPECT_EQ(f.job_id, kJob);
        EXPECT_EQ(f.seq, seq);
        EXPECT_EQ(f.dtype, c.dtype);
        EXPECT_EQ(f.op, c.op);
        EXPECT_EQ(int{f.scale}, int{scale});
        EXPECT_EQ(f.elem_count, n);
        EXPECT_EQ((f.flags & aggregator::flags::kOverflow) != 0, in.saturates) << "OVERFLOW flag";
        EXPECT_EQ(f.flags & aggregator::flags::kIncomplete, 0);
        ASSERT_TRUE(PayloadsEqual(c.dtype, want.payload, r.payload));
        ASSERT_TRUE(MatchesKnownValues(c.dtype, in.known, r.payload));
      }
      if (c.ordered) {
        const std::vector<uint8_t>& got = results.begin()->second.payload;
        if (first_result.empty()) first_result = got;
        EXPECT_TRUE(PayloadsEqual(c.dtype, first_result, got)) << "ordered result differs from in-order arrival";
      }
    }
    // A plain float sum must be able to tell the orders apart, or the test
    // could not notice a switch that ignores the arrival order.
    if (float_sum && !c.ordered && members >= 8 && n >= 37) {
      EXPECT_FALSE(wants[0] == wants[1] && wants[1] == wants[2])
          << "round " << round << ": inputs too tame, every order sums to the same bits";
    }
  }
  EXPECT_STREQ(aggregator::ActiveReduceIsa(), aggregator::ReduceIsaName(isa)) << "the switch changed kernels";
}

INSTANTIATE_TEST_SUITE_P(Types, AggregationTypesTest,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kMemberCounts),
                                            ::testing::ValuesIn(kSizes), ::testing::ValuesIn(kIsas)),
                         ParamName);

// The table above covers exactly the protocol's valid (dtype, op) pairs.
TEST(AggregationTypesTable, ValidPairsAreAllCovered) {
  for (uint8_t t = 0; t < aggregator::kNumDTypes; ++t) {
    for (uint8_t o = 0; o < aggregator::kNumReduceOps; ++o) {
      const auto dtype = static_cast<DType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const bool covered = std::any_of(std::begin(kCases), std::end(kCases), [&](const TypeCase& c) {
        return c.dtype == dtype && c.op == op && !c.ordered;
      });
      EXPECT_EQ(covered, aggregator::IsValid(dtype, op))
          << aggregator::DTypeName(dtype) << " " << aggregator::ReduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace aggswitch::dataplane
