// Final delivery (docs/protocol.md, "Final delivery"): the root sends a
// chunk its members marked FINAL, once complete, to the job's main server,
// and sends it again until the main server ACKs it or the time runs out.
//
// The result is copied into a buffer of the worker's parameter store (the
// slot may be reused before the ACK comes), so final results are bounded and
// accounted with the store: a job's deliveries take buffers within its share
// of the store (its store quota split over the workers), and a job keeps at
// most a quarter of a worker's delivery entries, so that a job whose main
// server never ACKs holds back its own final chunks, never another job's.
// A final chunk held back or refused for want of room reaches the main
// server as a NACK store_full flagged FINAL (TellRefused). Each delivery carries,
// in `aux`, the global index
// of the slot that completed it; the main server echoes it in its ACK, which
// takes it to this worker (AggregationStage::Check).
//
//   FinalDelivery finals(store, answers, stats, clock, retry_cycles, give_up_cycles);
//   finals.Begin(job, slot, global_slot);   // the root completed a FINAL chunk
//   finals.Acked(job, seq);                  // the main server's ACK
//   finals.Run();                            // each poll: resends, gives up
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/parameter_store.h"

namespace aggswitch::dataplane {

class FinalDelivery {
 public:
  // Deliveries one worker keeps in flight at once, and one job of them.
  static constexpr uint32_t kMaxPending = 64;
  static constexpr uint32_t kMaxPerJob = kMaxPending / 4;

  FinalDelivery(const aggregator::JobTable* jobs, ParameterStore* store, Answers& answers,
                LcoreStats& stats, const LcoreClock& clock, uint64_t retry_cycles,
                uint64_t give_up_cycles)
      : jobs_(jobs), store_(store), answers_(answers), stats_(stats), clock_(clock),
        retry_cycles_(retry_cycles), give_up_cycles_(give_up_cycles) {}

  // The root completed `slot` (global index `global_slot`) of `job`, marked
  // FINAL: keeps a copy and sends it to the job's main server. Counted as
  // final_refused when the job has no main server, or no room (HasRoom);
  // the main server is told with a NACK store_full.
  void Begin(const aggregator::Job& job, const aggregator::Slot& slot, uint32_t global_slot);
  // The same for a result in hand: `chunk` its header's fields (seq,
  // elements, dtype, op, scale, addr_low), `result` its `len` payload bytes,
  // `overflow` its flag. The TAN's result for a FINAL chunk that found no
  // slot at the root, or whose slot went to another chunk meanwhile.
  void Begin(const aggregator::Job& job, const aggregator::AggFields& chunk, const uint8_t* result,
             uint32_t len, bool overflow, uint32_t global_slot);
  // The main server ACKed chunk `seq` of `job`, of the run labelled `run`
  // (the delivery's incarnation, echoed; label 0, when no delivery of `seq`
  // carries it, frees one of any run, and another label none carries frees
  // nothing); false when no delivery
  // of it is in flight here (ACKed before, given up, or never sent). A
  // delivery lives on through new runs of its job, until ACKed, given up, or
  // its job is removed.
  bool Acked(const aggregator::Job& job, uint32_t seq, uint32_t run);
  // Sends the due deliveries again and gives up those past their time
  // (bounded: kMaxPending entries).
  void Run();
  bool pending() const { return n_pending_ != 0; }
  // Tells the job's main server, when its address is resolved, that the
  // final result of chunk `seq` was not kept for it: a NACK store_full
  // flagged FINAL, with the run label a delivery would carry. Begin sends
  // it when it refuses; the caller when it holds a final chunk back for
  // want of room (the members' resend brings it again).
  void TellRefused(const aggregator::Job& job, uint32_t seq);
  // Whether Begin would find room for a delivery of `job` now: an entry
  // (kMaxPending, and kMaxPerJob of them for the job id, whatever run each
  // delivers) and a store buffer within the job's share.
  bool HasRoom(const aggregator::Job& job) const;

 private:
  struct Pending {
    bool used = false;
    uint32_t job_id = 0;
    uint32_t job_generation = 0;
    uint16_t job_index = 0;
    uint32_t buffer = ParameterStore::kNoBuffer;
    aggregator::AggFields fields;  // the delivery's header
    uint32_t len = 0;              // payload bytes in the buffer
    uint64_t next_tsc = 0;         // when to send again
    uint64_t deadline_tsc = 0;     // when to give up
    uint32_t sends = 0;
  };

  // Sends `p` to the job's main server; false while its address is not
  // resolved or no mbuf is free (the next Run() tries again).
  bool Send(const aggregator::Job& job, Pending& p);
  // The wait before the next send: the retry interval after the first,
  // doubled after each later one, up to 32 times it.
  uint64_t Backoff(const Pending& p) const {
    const uint32_t doublings = p.sends <= 1 ? 0 : p.sends - 1;
    return retry_cycles_ << (doublings < 5 ? doublings : 5);
  }
  void Free(Pending& p);

  const aggregator::JobTable* jobs_;
  ParameterStore* store_;
  Answers& answers_;
  LcoreStats& stats_;
  const LcoreClock& clock_;
  const uint64_t retry_cycles_;
  const uint64_t give_up_cycles_;
  Pending pending_[kMaxPending];
  uint32_t n_pending_ = 0;
};

}  // namespace aggswitch::dataplane
