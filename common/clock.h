// The time the switch's stages, the control thread, the client's engine and
// the parameter node read: one injected dependency, so that the fabric
// simulator (tests/sim) runs all of them on simulated time, and a run is a
// function of its seed.
//
// Two views of one clock: Now(), a steady_clock time point (control side,
// the client, the TAN and parameter node), and Cycles(), the dataplane's
// cycle counter (the TSC on a switch) at CyclesPerSecond(). A worker lcore
// reads Cycles() once per poll; every stage of that poll uses the value.
//
//   const common::Clock& clock = common::SteadyClock();     // a tool or the client
//   auto deadline = clock.Now() + std::chrono::milliseconds(5);
//   dataplane::Dataplane::Create(config, jobs, &dataplane::TscClock());  // the switch
//
// Thread safety: every method [any]; an implementation says who may move its
// time (the simulator's, its own thread between steps).
#pragma once

#include <chrono>
#include <cstdint>

namespace aggswitch::common {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  // Monotonic time.
  virtual TimePoint Now() const = 0;
  // The cycle counter the dataplane's timers, bindings and deadlines count
  // in, and its rate (> 0). Monotonic, as Now().
  virtual uint64_t Cycles() const = 0;
  virtual uint64_t CyclesPerSecond() const = 0;

  // Now() in nanoseconds since the clock's epoch: what the TAN and the
  // parameter node take as now_ns.
  uint64_t NowNs() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Now().time_since_epoch()).count());
  }
};

// std::chrono::steady_clock; its cycles are its nanoseconds. [any]
const Clock& SteadyClock();

}  // namespace aggswitch::common
