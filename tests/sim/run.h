// Runs one scenario: builds its world (the switches from their generated
// configs, the hosts, the parameter node, the links and their faults),
// starts every rank's process at its time, injects the scenario's faults,
// runs the simulated time until every process has ended, waits out the
// switches' timers, and hands what each rank got to the oracle, with the
// leak checks of every switch and of the parameter node.
//
//   Scenario s = Generate(seed, limits);
//   common::Result<Outcome> o = RunScenario(s, {});
//   if (o.ok() && !o->failures.empty()) ...   // the product broke its promise
//
// An error (not a failure) means the simulator could not build the world:
// a config the loader refused, EAL out of ports or memory.
//
// Thread safety: the thread that initialised EAL, one scenario at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "tests/sim/scenario.h"

namespace aggswitch::sim {

struct RunOptions {
  bool verbose = false;  // the scenario and each finding's detail on stderr
  bool print_frames = false;  // every frame a link delivers, on stderr
};

struct Outcome {
  std::vector<std::string> failures;  // the oracle's and the leak checks' findings
  uint64_t trace = 0;                 // the run's trace (World::trace): equal on a replay
  uint64_t sim_ns = 0;                // simulated time the scenario took
  uint64_t events = 0;
  uint32_t ops = 0;                   // allreduces run, over every rank
  uint32_t ops_ok = 0;
  bool ok() const { return failures.empty(); }
};

common::Result<Outcome> RunScenario(const Scenario& scenario, const RunOptions& options);

}  // namespace aggswitch::sim
