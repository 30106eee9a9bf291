#include "common/simd_isa.h"

#include <cpuid.h>

#include <initializer_list>

namespace aggswitch::common {

namespace {
// F16C from CPUID leaf 1 (ECX bit 29): clang before 16 does not know "f16c"
// in __builtin_cpu_supports. The OS saving YMM state is covered by "avx2".
bool HasF16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
}  // namespace

bool SimdIsaSupported(SimdIsa isa) {
  // libgcc's probe also checks that the OS saves YMM/ZMM state (XGETBV). The explicit
  // init makes this safe even from a static constructor that runs before libgcc's.
  __builtin_cpu_init();
  switch (isa) {
    case SimdIsa::kScalar:
      return true;
    case SimdIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && HasF16c();
    case SimdIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

SimdIsa BestSimdIsa() {
  for (SimdIsa isa : {SimdIsa::kAvx512, SimdIsa::kAvx2}) {
    if (SimdIsaSupported(isa)) return isa;
  }
  return SimdIsa::kScalar;
}

const char* SimdIsaName(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kScalar:
      return "scalar";
    case SimdIsa::kAvx2:
      return "avx2";
    case SimdIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace aggswitch::common
