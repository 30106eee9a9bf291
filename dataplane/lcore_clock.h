// The time of the poll a worker lcore is in: one read of the switch's clock
// (common/clock.h; the TSC unless a simulator injects another) per poll,
// which every stage of that poll reads. A stage that needs the time after
// its work (a completion's latency, a hop's) reads the source again.
//
//   LcoreClock clock;                       // the TSC (EAL must be up)
//   clock.tsc = clock.Read();               // once per poll, by the worker
//   uint32_t tick = clock.SeenNow();        // the members' clock
//
// Thread safety: one per worker, written by that worker's thread only (a
// test thread drives a stage's clock as the worker would).
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "dataplane/eal.h"

namespace aggswitch::dataplane {

struct LcoreClock {
  uint64_t tsc = 0;
  uint32_t seen_shift = 21;  // the members' clock: TSC >> seen_shift, about a millisecond a tick
  const common::Clock* source = &TscClock();

  uint32_t SeenNow() const { return static_cast<uint32_t>(tsc >> seen_shift); }
  // A fresh read of the source, in its cycles.
  uint64_t Read() const { return source->Cycles(); }
  uint64_t hz() const { return source->CyclesPerSecond(); }
};

}  // namespace aggswitch::dataplane
