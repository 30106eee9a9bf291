#include "tests/sim/shrink.h"

#include <algorithm>
#include <vector>

namespace aggswitch::sim {

Limits Shrink(uint64_t seed, const Limits& limits, const RunOptions& options, uint32_t budget) {
  uint32_t runs = 0;
  const auto fails = [&](const Limits& l) {
    if (runs >= budget) return false;
    ++runs;
    auto o = RunScenario(Generate(seed, l), options);
    return o.ok() && !o->ok();
  };
  Limits best = limits;
  // The counts: each down as far as it still fails (1, half, one less).
  uint32_t Limits::*counts[] = {&Limits::switches, &Limits::levels, &Limits::jobs,
                                &Limits::ranks,    &Limits::ops,    &Limits::elems};
  bool progress = true;
  while (progress && runs < budget) {
    progress = false;
    // Whole jobs, then allreduces, one at a time.
    for (uint32_t bit = 0; bit < std::min<uint32_t>(best.jobs, 31) && runs < budget; ++bit) {
      Limits trial = best;
      trial.skip_jobs |= 1u << bit;
      if (trial.skip_jobs == best.skip_jobs || !Limits::Parse(trial.ToString()).ok()) continue;
      if (fails(trial)) {
        best = trial;
        progress = true;
      }
    }
    for (uint32_t bit = 0; bit < std::min<uint32_t>(best.ops, 31) && runs < budget; ++bit) {
      Limits trial = best;
      trial.skip_ops |= 1u << bit;
      if (trial.skip_ops != best.skip_ops && fails(trial)) {
        best = trial;
        progress = true;
      }
    }
    for (uint32_t Limits::*field : counts) {
      while (best.*field > 1 && runs < budget) {
        const uint32_t now = best.*field;
        bool moved = false;
        for (const uint32_t next : {1u, now / 2, now - 1}) {
          if (next >= now || next == 0) continue;
          Limits trial = best;
          trial.*field = next;
          if (fails(trial)) {
            best = trial;
            moved = progress = true;
            break;
          }
        }
        if (!moved) break;
      }
    }
    // The kinds of fault and feature, one bit at a time.
    for (uint32_t Limits::*mask : {&Limits::faults, &Limits::features}) {
      for (uint32_t bit = 0; bit < 32 && runs < budget; ++bit) {
        if ((best.*mask & (1u << bit)) == 0) continue;
        Limits trial = best;
        trial.*mask &= ~(1u << bit);
        if (fails(trial)) {
          best = trial;
          progress = true;
        }
      }
    }
  }
  return best;
}

}  // namespace aggswitch::sim
