// Which x86-64 SIMD instruction sets this CPU and OS can run: the one probe
// behind every run-time kernel choice (the switch's reduction kernels,
// aggregator/reduce.h; the client's fixed-point conversions,
// client/fixed_point.h). Kernels carry function target attributes instead of
// per-file -m flags, so a binary built for any -march picks the widest set
// the machine it runs on supports.
//
//   if (common::SimdIsaSupported(common::SimdIsa::kAvx512)) ...
//
// Thread safety: pure queries; any thread, also from static constructors.
#pragma once

#include <cstdint>

namespace aggswitch::common {

// Kernel sets, widest last. kAvx2 means AVX2 and F16C; kAvx512 means
// AVX-512 F, BW and VL.
enum class SimdIsa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Whether this CPU, and the OS (it saves the YMM/ZMM state), can run `isa`.
// kScalar always. [any]
bool SimdIsaSupported(SimdIsa isa);

// The widest set SimdIsaSupported accepts. [any]
SimdIsa BestSimdIsa();

// "scalar", "avx2", "avx512". [any]
const char* SimdIsaName(SimdIsa isa);

}  // namespace aggswitch::common
