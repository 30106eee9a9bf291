// One worker's view of the aggregation slots: which global slot indices it
// owns (slot i belongs to worker i % n_workers, as its local slot
// i / n_workers), where a job's chunk lies (its home slot, or its slot in the
// job's moved partition once this worker applied the job's move), and the
// slot of this worker that holds a chunk. Every node of the aggregation path
// finds a chunk's slot through it.
//
//   WorkerSlots slots(setup.slots, setup.regions, n_workers, index, jobs->max_jobs());
//   if (const aggregator::Slot* s = slots.OwnSlotOf(job, seq)) ...
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "aggregator/job_table.h"
#include "aggregator/slot_placement.h"
#include "aggregator/slot_table.h"

namespace aggswitch::dataplane {

class WorkerSlots {
 public:
  // `table`: this worker's share of the slots (null: aggregation is off);
  // `max_jobs`: the job table's size (JobTable::max_jobs()), 0 without one.
  WorkerSlots(aggregator::SlotTable* table, const aggregator::SlotRegions& regions,
              uint16_t n_workers, uint16_t index, uint32_t max_jobs)
      : table_(table), regions_(regions), n_workers_(n_workers), index_(index) {
    if (max_jobs != 0) moves_ = std::make_unique<uint32_t[]>(max_jobs);  // zeroed: no move applied
  }

  aggregator::SlotTable& table() const { return *table_; }
  const aggregator::SlotRegions& regions() const { return regions_; }
  bool Owns(uint32_t global) const { return global % n_workers_ == index_; }
  uint32_t Local(uint32_t global) const { return global / n_workers_; }

  // The home slot of chunk `seq` of `job` (Job::placement()).
  uint32_t Home(const aggregator::Job& job, uint32_t seq) const {
    return regions_.Of(job.in_band(), job.placement(), seq);
  }
  // The slot of chunk `seq` of `job` in its moved partition. Only once the
  // job moved.
  uint32_t Moved(const aggregator::Job& job, uint32_t seq) const {
    return regions_.For(job.in_band()).Of(job.moved_placement(), seq);
  }
  // Whether this worker sends the chunks of `job` whose home slot it owns
  // on to the moved partition: it applied the job's move (Relocation::kMove).
  bool MoveApplied(const aggregator::Job& job) const {
    return moves_[job.index()] == job.generation();
  }
  // Applies the move of `job`'s current generation. Written by this worker
  // only, in the order of its relocation ring.
  void ApplyMove(const aggregator::Job& job) { moves_[job.index()] = job.generation(); }

  // The slot that holds chunk `seq` of `job`, at home or in its moved
  // partition, when this worker owns that slot; nullptr otherwise (a slot
  // of another worker, where the region wrapped or the partitions differ,
  // is not looked at).
  const aggregator::Slot* OwnSlotOf(const aggregator::Job& job, uint32_t seq) const {
    const aggregator::Slot* s = nullptr;
    const uint32_t home = Home(job, seq);
    if (Owns(home)) s = table_->Holding(Local(home), job.id(), job.generation(), seq);
    if (s == nullptr && MoveApplied(job) && job.MovedFrom(seq)) {
      const uint32_t moved = Moved(job, seq);
      if (!Owns(moved)) return nullptr;
      s = table_->Holding(Local(moved), job.id(), job.generation(), seq);
    }
    return s;
  }

 private:
  aggregator::SlotTable* const table_;
  const aggregator::SlotRegions regions_;
  const uint16_t n_workers_;
  const uint16_t index_;
  // By job index: the job generation whose move this worker applied (0: none).
  std::unique_ptr<uint32_t[]> moves_;
};

}  // namespace aggswitch::dataplane
