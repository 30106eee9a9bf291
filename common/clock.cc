#include "common/clock.h"

namespace aggswitch::common {

namespace {

class Steady final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  uint64_t Cycles() const override { return NowNs(); }
  uint64_t CyclesPerSecond() const override { return 1'000'000'000; }
};

}  // namespace

const Clock& SteadyClock() {
  static const Steady clock;
  return clock;
}

}  // namespace aggswitch::common
