// One worker's share of the parameter store (docs/protocol.md, "Store"): the
// members' contributions that jobs in store or both mode keep, and the final
// results the root delivers to a job's main server (FinalDelivery).
//
// A contribution is kept at its chunk's home slot owner (the worker whose
// slots hold the chunk's home slot), so that a FETCH for it, sent there the
// same way, finds it. It is keyed by (job, sequence number, member): a
// member's later contribution to the same chunk replaces the copy in place.
// The copy lives in a buffer of this worker's own memory, never in the
// received mbuf (the mbuf pool feeds RX, and kept mbufs would let one job
// stop every port).
//
// What it may hold is bounded twice: this worker's buffers (aggregation.
// store.buffers split evenly over the workers, whose home slots a job's
// chunks spread over), and a job's share of them (its store quota split the
// same way). Past either, Keep() refuses (NackReason::kStoreFull) and keeps
// nothing. A copy is freed when a FETCH with RELEASE takes it, or when its job
// is removed: Sweep() finds those a few table positions a poll.
//
//   ParameterStore store(capacity, max_payload, max_jobs, n_workers);  // [control]
//   switch (store.Keep(job, member, seq, pkt)) { ... }                 // [owner lcore]
//   if (const ParameterStore::Copy* c = store.Find(job, seq, member)) answer with c->data
//   store.Sweep(jobs, 32);                                             // each poll
//
// Thread safety: one per worker. Everything but the [any] readers is for the
// owner lcore alone; those read relaxed atomics the owner writes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "aggregator/job_table.h"
#include "aggregator/wire.h"

namespace aggswitch::dataplane {

class ParameterStore {
 public:
  static constexpr uint32_t kNoBuffer = UINT32_MAX;

  // A kept contribution: where it is and what it holds.
  struct Copy {
    uint32_t job_id = 0;
    uint32_t job_generation = 0;
    uint32_t seq = 0;
    uint16_t job_index = 0;
    uint16_t member = 0;  // the member's local index in its job
    uint32_t buffer = kNoBuffer;  // kNoBuffer: a free table position
    uint16_t elem_count = 0;
    uint8_t dtype = 0;
    uint8_t op = 0;
    int8_t scale = 0;
    const uint8_t* data = nullptr;
    uint32_t len() const { return len_; }

   private:
    friend class ParameterStore;
    uint32_t len_ = 0;
  };

  enum class Kept : uint8_t {
    kStored,    // a new copy
    kReplaced,  // the member's earlier contribution to the chunk, overwritten
    kJobFull,   // the job holds its share of this worker's buffers
    kFull,      // every buffer of this worker is taken
  };

  // `capacity` buffers of `max_payload` bytes each; jobs of up to `max_jobs`
  // indexes; a job's store quota is split over `n_workers`. [control]
  ParameterStore(uint32_t capacity, uint32_t max_payload, uint32_t max_jobs, uint16_t n_workers);
  ~ParameterStore();
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // Keeps a copy of the contribution `pkt` member `member` (local index)
  // sent to chunk pkt.header->seq, replacing its earlier one to that chunk.
  Kept Keep(const aggregator::Job& job, uint16_t member, const aggregator::AggPacket& pkt);
  // The copy of member `member`'s contribution to chunk `seq`; nullptr when
  // none is kept.
  const Copy* Find(const aggregator::Job& job, uint32_t seq, uint16_t member) const;
  // Frees the copy Find() returned.
  void Release(const Copy* copy);
  // Frees the copies of removed jobs: examines up to `budget` table
  // positions from where the last call stopped.
  void Sweep(const aggregator::JobTable& jobs, uint32_t budget);

  // A buffer for `job` outside the table (a final result FinalDelivery
  // keeps), counted as the job's and within its share; kNoBuffer when the
  // share, or every buffer of this worker, is taken (HasRoomFor).
  uint32_t TakeBuffer(const aggregator::Job& job);
  // Whether `job` may take one more buffer now.
  bool HasRoomFor(const aggregator::Job& job) const;
  uint8_t* BufferData(uint32_t buffer) { return memory_.get() + size_t{buffer} * max_payload_; }
  // Returns a TakeBuffer() buffer of the job at `job_index`, `generation`.
  void GiveBuffer(uint16_t job_index, uint32_t job_generation, uint32_t buffer);

  uint32_t capacity() const { return capacity_; }
  uint32_t max_payload() const { return max_payload_; }
  // Buffers taken now (copies and final results). [any]
  uint32_t used() const { return used_.load(std::memory_order_relaxed); }
  // Buffers job `index` of `generation` holds here now. [any]
  uint32_t JobUsed(uint16_t index, uint32_t generation) const;

 private:
  // Per job index: the generation whose buffers `count` counts.
  struct JobUse {
    std::atomic<uint32_t> generation{0};
    std::atomic<uint32_t> count{0};
  };

  // The buffers of this worker's a job may hold: its store quota split
  // over the workers (rounded up).
  uint32_t Share(const aggregator::Job& job) const {
    return job.store_quota() == 0 ? capacity_ : (job.store_quota() + n_workers_ - 1u) / n_workers_;
  }
  size_t Home(uint16_t job_index, uint32_t seq, uint16_t member) const;
  // The table position of the key, or of the free position it would take.
  size_t Probe(const aggregator::Job& job, uint32_t seq, uint16_t member) const;
  // Counts one more buffer of the job's; false (and nothing counted) when
  // its share is full.
  bool Charge(const aggregator::Job& job);
  void Uncharge(uint16_t job_index, uint32_t job_generation);
  uint32_t PopFree();
  void PushFree(uint32_t buffer);
  // Empties table position `i`, moving later entries of its probe run back
  // (linear probing's deletion without tombstones).
  void EraseAt(size_t i);

  const uint32_t capacity_;
  const uint32_t max_payload_;
  const uint32_t max_jobs_;
  const uint16_t n_workers_;
  const size_t mask_;  // table size - 1; the table is at most half full
  std::unique_ptr<uint8_t[]> memory_;
  std::unique_ptr<Copy[]> table_;
  std::unique_ptr<uint32_t[]> free_;  // a stack of free buffers
  uint32_t n_free_ = 0;
  std::unique_ptr<JobUse[]> jobs_;
  size_t sweep_at_ = 0;
  std::atomic<uint32_t> used_{0};
};

}  // namespace aggswitch::dataplane
