// A worker's slot clocks: the timers that fire (a slot's partial sent on
// as its timeout says, a refused partial sent again, a partial that could
// not list its missing members postponed), the sweeps of stale slots and of
// slots whose awaited members are all excluded now, and what a slot's timing
// tells: the completion latency histogram and the members' arrival offsets
// sampled for the straggler predictor (docs/stragglers.md).
//
//   SlotTimers timers(worker_slots, jobs, holds, tree, channels, stats, clock);
//   if (timers.armed()) timers.Run();   // every poll
//   timers.SweepStale();                 // every kControlEvery polls
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/slot_table.h"
#include "dataplane/counters.h"
#include "dataplane/hold_buffers.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/tree_stage.h"
#include "dataplane/worker_channels.h"
#include "dataplane/worker_slots.h"

namespace aggswitch::dataplane {

class SlotTimers {
 public:
  SlotTimers(WorkerSlots& slots, const aggregator::JobTable* jobs, HoldBuffers* holds,
             TreeStage& tree, WorkerChannels& channels, LcoreStats& stats, const LcoreClock& clock);

  // Expires slots whose timer fired (a bounded number per call).
  void Run();
  // Frees a bounded share of the stale holding slots and their held
  // contributions (SlotTable::SweepStale). Every kControlEvery polls; kSweepSlots a call.
  void SweepStale();
  // Slots SweepStale looks at per call.
  // Sends on, as its timer would, each aggregating slot every member of
  // whose chunk has contributed or is excluded now: a prediction applied
  // after the slot took its first contribution (the slot counts on the
  // members who took part then, and an excluded member's data goes around
  // it). A bounded share of the slots per call, as SweepStale.
  void SweepExcluded();
  // Whether any slot's timer is armed (Run has work).
  bool armed() const { return table().armed_timers() != 0; }
  // Sends an aggregating slot's partial on as its timer would (`timer`:
  // it did; else its arrival offsets are not sampled). False when the slot
  // was not aggregating, or its job is gone (the slot is freed).
  bool Expire(uint32_t local, bool timer);
  // Every kOffsetSampleEvery-th chunk: its members' arrival offsets, up to
  // the control thread, when a free sample is at hand.
  void SampleOffsets(const aggregator::Job& job, const aggregator::Slot& slot, bool expired);
  void RecordCompletion(const aggregator::Slot& slot);

 private:
  // Timer expiries handled per call; the rest wait for the next poll.
  static constexpr uint32_t kExpiriesPerPoll = 64;
  // Slots SweepStale and SweepExcluded look at per call.
  static constexpr uint32_t kSweepSlots = 64;

  // A slot whose timer fired while its partial could not carry the list of
  // the members it lacks: it keeps aggregating, its timer armed again
  // (SlotTable::Postpone). Whether it did.
  bool PostponeUnlistable(uint32_t local);
  // A forwarded slot whose partial the parent refused "not now" and whose
  // retry timer fired (SlotTable::RetryRefused): its partial goes again.
  // Whether it was such a slot.
  bool RetryRefused(uint32_t local);

  aggregator::SlotTable& table() const { return slots_.table(); }

  WorkerSlots& slots_;
  const aggregator::JobTable* const jobs_;
  HoldBuffers* const holds_;
  TreeStage& tree_;
  WorkerChannels& channels_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
  // Slot completion latency bucket bounds in TSC cycles (kSlotLatencyBoundsSeconds).
  uint64_t latency_bounds_[kSlotLatencyBuckets - 1] = {};
  uint32_t excluded_cursor_ = 0;  // SweepExcluded's next slot
};

}  // namespace aggswitch::dataplane
