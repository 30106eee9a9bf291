// Simulated time for every part of a simulated fabric (common/clock.h): the
// switches' workers and control threads, the clients' engines and the
// parameter nodes read it; only the simulator's event loop moves it. Its
// cycles are nanoseconds (a 1 GHz "TSC").
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>

#include "common/clock.h"

namespace aggswitch::sim {

class SimClock final : public common::Clock {
 public:
  // Time starts well after 0: code that takes 0 for "not yet" never sees it.
  static constexpr uint64_t kEpochNs = 10'000'000'000;

  TimePoint Now() const override { return TimePoint(std::chrono::nanoseconds(now_ns_)); }
  uint64_t Cycles() const override { return now_ns_; }
  uint64_t CyclesPerSecond() const override { return 1'000'000'000; }

  uint64_t ns() const { return now_ns_; }
  // Moves time forward (never back).
  void AdvanceTo(uint64_t ns) {
    if (ns > now_ns_) now_ns_ = ns;
  }
  // Simulated time since the epoch, in milliseconds (for messages).
  double ms() const { return static_cast<double>(now_ns_ - kEpochNs) / 1e6; }

 private:
  uint64_t now_ns_ = kEpochNs;
};

}  // namespace aggswitch::sim
