// Shrinks a failing scenario: smaller limits (jobs and allreduces left out
// one at a time; fewer switches, levels, jobs, ranks, allreduces and
// elements; fewer kinds of fault and feature) under
// which the same seed still fails. A scenario draws every value before it
// clamps it (scenario.h), so the smaller one is the same scenario with less
// in it, not a new one.
//
//   Limits small = Shrink(seed, Limits{}, options);
//   // agg-sim --seed <seed> --limits <small.ToString()> still fails
//
// Thread safety: as RunScenario.
#pragma once

#include <cstdint>

#include "tests/sim/run.h"
#include "tests/sim/scenario.h"

namespace aggswitch::sim {

// At most `budget` scenarios are run. Returns `limits` when nothing smaller fails.
Limits Shrink(uint64_t seed, const Limits& limits, const RunOptions& options, uint32_t budget = 150);

}  // namespace aggswitch::sim
