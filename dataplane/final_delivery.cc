#include "dataplane/final_delivery.h"

#include <cstring>

namespace aggswitch::dataplane {

void FinalDelivery::Begin(const aggregator::Job& job, const aggregator::Slot& slot,
                          uint32_t global_slot) {
  Begin(job, Answers::ChunkFields(job, slot), slot.result(), slot.result_len(), slot.overflow(),
        global_slot);
}

void FinalDelivery::Begin(const aggregator::Job& job, const aggregator::AggFields& chunk,
                          const uint8_t* result, uint32_t len, bool overflow,
                          uint32_t global_slot) {
  AggregationCounters& c = stats_.lcore.agg;
  if (job.main_server_ip() == 0) {
    c.final_refused.Add(1);
    return;
  }
  // Delivered once: a member's retransmission of the chunk is answered
  // from the slot, and sends nothing new to the main server.
  for (const Pending& p : pending_) {
    if (p.used && p.job_id == job.id() && p.job_generation == job.generation() &&
        p.fields.seq == chunk.seq) {
      return;
    }
  }
  const uint32_t buffer = store_ == nullptr || len > store_->max_payload() || !HasRoom(job)
                              ? ParameterStore::kNoBuffer
                              : store_->TakeBuffer(job);
  if (buffer == ParameterStore::kNoBuffer) {
    c.final_refused.Add(1);
    TellRefused(job, chunk.seq);
    return;
  }
  Pending* p = pending_;
  while (p->used) ++p;
  p->used = true;
  p->job_id = job.id();
  p->job_generation = job.generation();
  p->job_index = job.index();
  p->buffer = buffer;
  p->len = len;
  std::memcpy(store_->BufferData(buffer), result, len);
  p->fields = chunk;
  p->fields.opcode = aggregator::Opcode::kResult;
  p->fields.flags = static_cast<uint16_t>(aggregator::flags::kFinal |
                                          (overflow ? aggregator::flags::kOverflow : 0));
  p->fields.aux = global_slot;  // echoed in the ACK: it finds this worker
  // The run it is the final result of: a new run of the job may deliver the
  // same seq while this one is in flight, and the ACK tells them apart.
  p->fields.incarnation = job.label();
  p->fields.node_count = job.members();
  p->deadline_tsc = clock_.tsc + give_up_cycles_;
  p->sends = 0;
  ++n_pending_;
  c.final_deliveries.Add(1);
  Send(job, *p);
  p->next_tsc = clock_.tsc + Backoff(*p);
}

bool FinalDelivery::HasRoom(const aggregator::Job& job) const {
  if (store_ == nullptr || n_pending_ >= kMaxPending || !store_->HasRoomFor(job)) return false;
  // By job id: the deliveries of its earlier runs (generations), which live
  // on until ACKed or given up, count too.
  uint32_t mine = 0;
  for (const Pending& p : pending_) mine += p.used && p.job_id == job.id();
  return mine < kMaxPerJob;
}

void FinalDelivery::TellRefused(const aggregator::Job& job, uint32_t seq) {
  aggregator::MemberAddr to;
  if (!job.GetMainServer(&to)) return;
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kNack;
  f.flags = aggregator::flags::kFinal;
  f.job_id = job.id();
  f.seq = seq;
  f.aux = static_cast<uint32_t>(aggregator::NackReason::kStoreFull);
  f.incarnation = job.label();
  f.node_count = job.members();
  (void)answers_.Acknowledge(f, to);
}

bool FinalDelivery::Send(const aggregator::Job& job, Pending& p) {
  aggregator::MemberAddr to;
  if (!job.GetMainServer(&to)) {
    stats_.lcore.agg.unresolved_next_hop.Add(1);
    return false;
  }
  if (!answers_.SendData(p.fields, store_->BufferData(p.buffer), p.len, to)) return false;
  if (p.sends++ != 0) stats_.lcore.agg.final_resends.Add(1);
  return true;
}

bool FinalDelivery::Acked(const aggregator::Job& job, uint32_t seq, uint32_t run) {
  // The delivery of that run; with label 0 (a main server that does not
  // echo the label), one of that seq of any run. An ACK that names a run
  // no delivery of the seq has is a repeat of one that came before (a
  // duplicate, or a resend crossing the first ACK): it frees nothing, where
  // freeing another run's delivery would lose that run's final result.
  Pending* any = nullptr;
  for (Pending& p : pending_) {
    if (!p.used || p.job_id != job.id() || p.fields.seq != seq) continue;
    if (p.fields.incarnation == run) {
      any = &p;
      break;
    }
    if (run == 0 && any == nullptr) any = &p;
  }
  if (any == nullptr) return false;
  stats_.lcore.agg.final_acked.Add(1);
  Free(*any);
  return true;
}

void FinalDelivery::Run() {
  if (n_pending_ == 0) return;
  const uint64_t now = clock_.tsc;
  for (Pending& p : pending_) {
    if (!p.used || now < p.next_tsc) continue;
    // A new run of the job does not end an earlier run's delivery: that run
    // completed, and its final result is the main server's.
    const aggregator::Job* job = jobs_->Find(p.job_id);
    if (job == nullptr || now >= p.deadline_tsc) {
      stats_.lcore.agg.final_given_up.Add(1);
      Free(p);
      continue;
    }
    Send(*job, p);
    p.next_tsc = now + Backoff(p);
  }
}

void FinalDelivery::Free(Pending& p) {
  store_->GiveBuffer(p.job_index, p.job_generation, p.buffer);
  p.used = false;
  p.buffer = ParameterStore::kNoBuffer;
  --n_pending_;
}

}  // namespace aggswitch::dataplane
