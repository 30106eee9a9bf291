#include "dataplane/fault_injector.h"

#include <rte_cycles.h>

#include <algorithm>
#include <cmath>

namespace aggswitch::dataplane {
namespace {

// p in [0, 1] as a threshold on a uniform 32-bit number (p = 1 saturates).
uint32_t Below(double p) {
  return static_cast<uint32_t>(std::min(std::ldexp(p, 32), 4294967295.0));
}

void CountFault(PortCounters& c, Fault f, uint64_t n = 1) {
  c.faults[static_cast<size_t>(f)].Add(n);
}

}  // namespace

FaultInjector::FaultInjector(const config::FaultConfig& cfg, uint64_t stream, uint64_t hz)
    // splitmix64 of seed and stream: distinct, well-mixed, never zero in practice.
    : state_([&] {
        uint64_t z = cfg.seed + 0x9e3779b97f4a7c15ULL * (stream + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        return z != 0 ? z : 1;
      }()),
      loss_below_(Below(cfg.loss)),
      reorder_below_(Below(std::min(1.0, cfg.loss + cfg.reorder))),
      dup_below_(Below(cfg.duplicate)),
      always_lose_(cfg.loss >= 1),
      delay_cycles_(static_cast<uint64_t>(cfg.delay_us * 1e-6 * static_cast<double>(hz))) {
  if (delay_cycles_ != 0) delayed_ = std::make_unique<Delayed[]>(kDelayMax);
}

FaultInjector::~FaultInjector() {
  rte_pktmbuf_free_bulk(held_, n_held_);
  for (uint32_t i = 0; i < n_delayed_; ++i) {
    rte_pktmbuf_free(delayed_[(first_delayed_ + i) % kDelayMax].m);
  }
}

uint64_t FaultInjector::Next() {
  // xorshift64*
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545f4914f6cdd1dULL;
}

uint16_t FaultInjector::Delay(rte_mbuf** out, uint16_t n, uint16_t cap, PortCounters& c,
                              uint64_t now_tsc) {
  uint16_t lost = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (n_delayed_ == kDelayMax) {
      rte_pktmbuf_free(out[i]);
      ++lost;
      continue;
    }
    delayed_[(first_delayed_ + n_delayed_++) % kDelayMax] = {out[i], now_tsc + delay_cycles_};
  }
  if (n != lost) CountFault(c, Fault::kDelay, n - lost);
  if (lost) CountFault(c, Fault::kDrop, lost);
  uint16_t due = 0;
  while (n_delayed_ != 0 && due < cap && delayed_[first_delayed_].due_tsc <= now_tsc) {
    out[due++] = delayed_[first_delayed_].m;
    first_delayed_ = (first_delayed_ + 1) % kDelayMax;
    --n_delayed_;
  }
  return due;
}

uint16_t FaultInjector::Apply(rte_mbuf** pkts, uint16_t n, uint16_t cap, rte_mempool* pool,
                              PortCounters& c, uint64_t now_tsc) {
  cap = std::min(cap, kMaxOut);
  rte_mbuf* out[kMaxOut];
  uint16_t n_out = 0;
  rte_mbuf* hold[kMaxOut];
  uint16_t n_hold = 0;
  uint16_t lost = 0;
  // Passed frames first, in order, each duplicate right behind its original.
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    const uint64_t r = Next();
    const auto low = static_cast<uint32_t>(r);
    if (always_lose_ || low < loss_below_) {
      rte_pktmbuf_free(m);
      CountFault(c, Fault::kDrop);
      continue;
    }
    if (low < reorder_below_) {
      hold[n_hold++] = m;
      continue;
    }
    out[n_out++] = m;
    // A copy only where it cannot crowd out a later frame of this burst.
    if (static_cast<uint32_t>(r >> 32) < dup_below_ && n_out + (n - i - 1) < cap) {
      rte_mbuf* copy = rte_pktmbuf_copy(m, pool, 0, UINT32_MAX);
      if (copy != nullptr) {
        out[n_out++] = copy;
        CountFault(c, Fault::kDuplicate);
      }
    }
  }
  // Then the frames held back before: overtaken by this call's.
  uint16_t released = 0;
  while (released < n_held_ && n_out < cap) out[n_out++] = held_[released++];
  const uint16_t still_held = n_held_ - released;
  std::copy(held_ + released, held_ + n_held_, held_);
  n_held_ = still_held;
  for (uint16_t i = 0; i < n_hold; ++i) {
    if (n_held_ < kHeldMax) {
      held_[n_held_++] = hold[i];
      CountFault(c, Fault::kReorder);
    } else {
      rte_pktmbuf_free(hold[i]);
      ++lost;
    }
  }
  if (lost) CountFault(c, Fault::kDrop, lost);
  if (delay_cycles_ != 0) n_out = Delay(out, n_out, cap, c, now_tsc);
  std::copy(out, out + n_out, pkts);
  return n_out;
}

}  // namespace aggswitch::dataplane
