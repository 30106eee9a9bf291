// Loses, duplicates and reorders a port's frames on purpose (ports[].faults in
// the config), so that tests see loss, duplication and reordering without
// kernel netem. A worker lcore keeps one injector per faulty port and
// direction and runs every burst it receives (after RX) or sends (before TX)
// through it.
//
// Each frame draws one 64-bit random number. Its low half decides: dropped
// (probability loss), held back (probability reorder), or passed; its high
// half whether a passed frame is also duplicated (a deep copy right behind
// it). Held frames go out at the next call, behind that call's frames, so
// they are overtaken by whatever the port carries meanwhile; with no traffic
// they go out on the next poll. A frame to hold that finds the held queue
// full is dropped and counted as loss.
//
// With a delay (delay_us), what would go out now goes into a FIFO instead,
// due delay_us after this call, and each call first lets out the frames that
// are due (in order, a poll late at most): a link that is that much longer.
// A frame that finds the FIFO full (kDelayMax) is dropped and counted as
// loss, as a full queue would.
//
//   FaultInjector inj(cfg, stream);                 // [control] before the lcore runs
//   n = inj.Apply(pkts, n, kBurstSize, pool, port_counters, now_tsc);   // [worker lcore]
//
// Thread safety: one lcore uses an injector (Apply, holding); built and
// destroyed on the control thread while that lcore does not run.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <memory>

#include "config/config.h"
#include "dataplane/counters.h"

namespace aggswitch::dataplane {

// The random stream of the injector of one lcore, port and direction. [any]
constexpr uint64_t FaultStream(unsigned lcore, uint16_t port, bool tx) {
  return ((uint64_t{lcore} << 16 | port) << 1) | (tx ? 1 : 0);
}

class FaultInjector {
 public:
  // Frames held back at most, per injector.
  static constexpr uint16_t kHeldMax = 64;
  // Output frames at most per call.
  static constexpr uint16_t kMaxOut = 64;
  // Frames delayed at most, per injector: 10 ms of a 10 Gbit/s link's
  // 1500-byte frames.
  static constexpr uint32_t kDelayMax = 8192;

  // `stream` tells apart the injectors that share cfg.seed (lcore, port,
  // direction); `hz`: the cycles per second of the calls' now_tsc.
  FaultInjector(const config::FaultConfig& cfg, uint64_t stream, uint64_t hz);
  ~FaultInjector();
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Replaces pkts[0..n) by the frames to deliver now, at most `cap` (n <=
  // cap <= kMaxOut; room above n is for duplicates and held frames), and
  // returns their count. Duplicates are copied from `pool`. Counts into
  // c.faults[]. `now_tsc` is the time of the call (the delay's clock).
  // [worker lcore]
  uint16_t Apply(rte_mbuf** pkts, uint16_t n, uint16_t cap, rte_mempool* pool, PortCounters& c,
                 uint64_t now_tsc);

  // Whether frames wait for a later call. [worker lcore]
  bool holding() const { return n_held_ != 0 || n_delayed_ != 0; }

 private:
  struct Delayed {
    rte_mbuf* m;
    uint64_t due_tsc;
  };

  uint64_t Next();
  // Puts out[0..n) in the FIFO and replaces them by the frames due, at most
  // `cap`; returns their count.
  uint16_t Delay(rte_mbuf** out, uint16_t n, uint16_t cap, PortCounters& c, uint64_t now_tsc);

  uint64_t state_;
  uint32_t loss_below_;     // low half < this: dropped
  uint32_t reorder_below_;  // else low half < this: held back
  uint32_t dup_below_;      // passed and high half < this: duplicated
  bool always_lose_;        // loss == 1 (a 32-bit threshold cannot say it)
  uint16_t n_held_ = 0;
  rte_mbuf* held_[kHeldMax];
  const uint64_t delay_cycles_;          // 0: no delay
  std::unique_ptr<Delayed[]> delayed_;   // a ring of kDelayMax, when delaying
  uint32_t first_delayed_ = 0;
  uint32_t n_delayed_ = 0;
};

}  // namespace aggswitch::dataplane
