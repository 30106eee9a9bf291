#include "dataplane/slot_timers.h"

#include <rte_ring.h>

#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

SlotTimers::SlotTimers(WorkerSlots& slots, const aggregator::JobTable* jobs, HoldBuffers* holds,
                       TreeStage& tree, WorkerChannels& channels, LcoreStats& stats,
                       const LcoreClock& clock)
    : slots_(slots),
      jobs_(jobs),
      holds_(holds),
      tree_(tree),
      channels_(channels),
      stats_(stats),
      clock_(clock) {
  const double hz = static_cast<double>(clock.hz());
  for (size_t i = 0; i + 1 < kSlotLatencyBuckets; ++i) {
    latency_bounds_[i] = static_cast<uint64_t>(kSlotLatencyBoundsSeconds[i] * hz);
  }
}

void SlotTimers::Run() {
  uint32_t expired[kExpiriesPerPoll];
  const uint32_t n = table().Expired(clock_.tsc, kExpiriesPerPoll, expired);
  for (uint32_t i = 0; i < n; ++i) {
    if (RetryRefused(expired[i])) continue;
    if (PostponeUnlistable(expired[i])) continue;
    if (Expire(expired[i], true)) stats_.lcore.agg.timeouts.Add(1);
  }
}

bool SlotTimers::RetryRefused(uint32_t local) {
  // The parent refused the forwarded slot's partial "not now" a resend gap
  // ago (FromAboveNode::Refused): it goes again, from the slot, the same bytes, which
  // the parent counts once or answers as a repeat with its cached result.
  if (!table().RetryRefused(local, clock_.tsc)) return false;
  const aggregator::Slot& slot = table().slot(local);
  const aggregator::Job* job = jobs_->Find(slot.job_id());
  if (job == nullptr || job->generation() != slot.job_generation()) return true;
  stats_.lcore.agg.partials_resent.Add(1);
  (void)tree_.FinishSlot(*job, local, slot, false, nullptr, 0);
  return true;
}

bool SlotTimers::PostponeUnlistable(uint32_t local) {
  // Its partial would end the chunk INCOMPLETE for members whose data is
  // only late (missing_list_overflow): it waits for their resends instead,
  // as a slot without a timer does, the rule a member's query on such a
  // slot follows (TreeBoundNode::ToParameterNode). A slot that never completes goes stale.
  const aggregator::Slot& slot = table().slot(local);
  if (slot.state() != aggregator::Slot::State::kAggregating || slot.count() == 0) return false;
  const aggregator::Job* job = jobs_->Find(slot.job_id());
  if (job == nullptr || job->generation() != slot.job_generation() ||
      tree_.MissingListFits(*job, slot)) {
    return false;
  }
  if (!table().Postpone(local, clock_.tsc)) return false;
  stats_.lcore.agg.timers_postponed.Add(1);
  return true;
}

bool SlotTimers::Expire(uint32_t local, bool timer) {
  aggregator::SlotTable& slots = table();
  aggregator::SlotUpdate u;
  if (!slots.Expire(local, &u)) return false;
  // The held contributions are reduced into the slot's result: give them back.
  for (uint16_t k = 0; k < u.n_released; ++k) holds_->Give(u.released[k]);
  const aggregator::Slot& slot = *u.slot;
  const aggregator::Job* job = jobs_->Find(slot.job_id());
  if (job == nullptr || job->generation() != slot.job_generation()) {
    slots.Release(local);
    return false;
  }
  // Only a timer says how late the missing members are.
  if (timer) SampleOffsets(*job, slot, true);
  (void)tree_.FinishSlot(*job, local, slot, true, nullptr, 0);
  return true;
}

void SlotTimers::SweepStale() {
  void* handles[aggregator::kMaxJobFanIn];
  uint32_t evicted = 0;
  const uint32_t n =
      table().SweepStale(clock_.tsc, kSweepSlots, handles, aggregator::kMaxJobFanIn, &evicted);
  for (uint32_t i = 0; i < n; ++i) holds_->Give(handles[i]);
  if (evicted != 0) stats_.lcore.agg.stale_slots.Add(evicted);
}

void SlotTimers::SweepExcluded() {
  aggregator::SlotTable& slots = table();
  const uint32_t size = slots.size();
  for (uint32_t k = 0; k < kSweepSlots && k < size; ++k) {
    const uint32_t local = excluded_cursor_;
    excluded_cursor_ = excluded_cursor_ + 1 == size ? 0 : excluded_cursor_ + 1;
    const aggregator::Slot& slot = slots.slot(local);
    if (slot.state() != aggregator::Slot::State::kAggregating) continue;
    const aggregator::Job* job = jobs_->Find(slot.job_id());
    if (job == nullptr || job->generation() != slot.job_generation() ||
        job->excluded_count() == 0 || slot.expected() != job->members()) {
      continue;
    }
    bool awaited = false;
    for (uint16_t m = 0; m < slot.expected() && !awaited; ++m) {
      awaited = !slot.HasContributed(m) && !job->Excluded(m);
    }
    if (awaited) continue;
    if (Expire(local, false)) stats_.lcore.agg.excluded_sent_on.Add(1);
  }
}

void SlotTimers::SampleOffsets(const aggregator::Job& job, const aggregator::Slot& slot,
                               bool expired) {
  rte_ring* full = channels_.samples_full.get();
  if (full == nullptr || (slot.seq() & (kOffsetSampleEvery - 1)) != 0) return;
  void* free_sample = nullptr;
  if (rte_ring_sc_dequeue(channels_.samples_free.get(), &free_sample) != 0) return;
  auto* sample = static_cast<OffsetSample*>(free_sample);
  sample->job_id = job.id();
  sample->job_generation = job.generation();
  sample->seq = slot.seq();
  sample->members = slot.expected();
  const uint64_t waited = (clock_.tsc - slot.first_tsc()) >> aggregator::Slot::kOffsetShift;
  const uint32_t at_expiry = waited > UINT32_MAX ? UINT32_MAX - 1 : static_cast<uint32_t>(waited);
  for (uint16_t i = 0; i < slot.expected(); ++i) {
    if (slot.HasContributed(i)) {
      sample->offsets[i] = slot.arrival_offset(i);
    } else {
      sample->offsets[i] = expired && !job.Excluded(i) ? at_expiry : kOffsetMissing;
    }
  }
  // The ring holds more than the pool has samples: this cannot fail.
  (void)rte_ring_sp_enqueue(full, sample);
}

void SlotTimers::RecordCompletion(const aggregator::Slot& slot) {
  LatencyHistogram& h = stats_.lcore.slot_latency;
  const uint64_t cycles = clock_.Read() - slot.first_tsc();
  size_t b = 0;
  while (b < kSlotLatencyBuckets - 1 && cycles > latency_bounds_[b]) ++b;
  h.buckets[b].Add(1);
  h.sum_cycles.Add(cycles);
  h.count.Add(1);
}

}  // namespace aggswitch::dataplane
