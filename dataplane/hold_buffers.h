// The payload buffers a worker's ordered slots hold (docs/aggregation.md,
// "Held contributions").
//
// An ordered (or batch) slot keeps each member's contribution until all are
// in, then reduces them in member order. It keeps a copy in a buffer of the
// hold pool, never the received mbuf: the mbuf pool feeds RX, and held mbufs
// would let one job (a few thousand small datagrams) empty it and stop every
// port. The contribution that completes a slot needs no buffer: it is reduced
// at once, from its mbuf.
//
// What one job may hold is bounded where its contributions are admitted
// (Job::HoldAllowed: only chunks within its hold window, so at most
// Job::hold_quota() buffers, and its oldest chunk can always complete); the
// pool bounds all jobs together; and in-band jobs together may hold at most
// their share of it (aggregation.in_band.held_total buffers, split evenly
// over the workers, whose slots a job's chunks spread over round robin), so
// that jobs anyone can register never take the buffers of the
// jobs the operator provisioned. A refused contribution is answered with
// NackReason::kHoldQuota.
//
//   HoldBuffers holds(pool, in_band_budget, max_payload);   // per worker
//   void* buf = holds.Take(job, payload, len, &why);        // a copy, or nullptr
//   slot holds HoldBuffers::Data(buf) ...; at completion:   holds.Give(buf);
//
// Each buffer starts with a 64-byte header that says whether an in-band
// job took it, so that Give() charges it back to the right budget.
//
// Thread safety: one HoldBuffers per worker lcore, used by it alone
// [owner lcore]; the pool is shared (rte_mempool with per-lcore caches).
#pragma once

#include <rte_mempool.h>

#include <cstdint>

#include "aggregator/job_table.h"

namespace aggswitch::dataplane {

class HoldBuffers {
 public:
  static constexpr uint32_t kHeaderBytes = 64;
  // The element size of a hold pool for payloads of up to `max_payload` bytes.
  static constexpr uint32_t ElementSize(uint32_t max_payload) { return kHeaderBytes + max_payload; }

  enum class Refusal : uint8_t { kNone, kInBandShare, kPoolEmpty };

  // Buffers from `pool` (elements of ElementSize(max_payload)); in-band jobs
  // may hold `in_band_budget` of them on this worker. [control]
  HoldBuffers(rte_mempool* pool, uint32_t in_band_budget, uint32_t max_payload)
      : pool_(pool), in_band_budget_(in_band_budget), max_payload_(max_payload) {}

  // A buffer holding a copy of `len` bytes at `payload` for `job`; nullptr
  // when in-band jobs hold their share here already or the pool is empty
  // (`*why`).
  void* Take(const aggregator::Job& job, const uint8_t* payload, uint32_t len, Refusal* why);
  // The payload copy in `buf`.
  static const uint8_t* Data(const void* buf) { return static_cast<const uint8_t*>(buf) + kHeaderBytes; }
  // Returns a buffer Take() handed out; nullptr is nothing (a completing
  // contribution held none).
  void Give(void* buf);

  // Buffers in-band jobs hold on this worker now. [owner lcore]
  uint32_t in_band_held() const { return in_band_held_; }

 private:
  struct Header {
    bool in_band;
  };

  rte_mempool* pool_;
  const uint32_t in_band_budget_;
  const uint32_t max_payload_;
  uint32_t in_band_held_ = 0;
};

}  // namespace aggswitch::dataplane
