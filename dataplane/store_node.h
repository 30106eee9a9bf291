// The store's node of the aggregation path (docs/protocol.md, "Store" and
// "Final delivery"): what a job's members keep in the switch, what is
// fetched from it, and the main server's ACKs of final results. It takes the
// datagrams the checks (AggregationStage::Check) sent to a chunk's home slot
// owner for the store:
//   - a contribution to a job in store or both mode: kept (Keep);
//   - a FETCH from a member or the job's main server: the kept copy, or
//     NACK not_stored (Fetch);
//   - the main server's ACK of a final result (FinalAck).
//
//   StoreNode store(setup.store, setup.finals, stats, tx, answers);
//   if (f.pkt.opcode == Opcode::kFetch) store.Fetch(f);
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include "dataplane/agg_frame.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/final_delivery.h"
#include "dataplane/parameter_store.h"
#include "dataplane/tx_buffers.h"

namespace aggswitch::dataplane {

class StoreNode {
 public:
  // `store` null: nothing is kept (aggregation.store.buffers 0), a
  // contribution to keep is refused NACK store_full and a FETCH answered
  // not_stored. `finals` null: no final delivery, every final ACK unmatched.
  StoreNode(ParameterStore* store, FinalDelivery* finals, LcoreStats& stats, TxBuffers& tx,
            Answers& answers)
      : store_(store), finals_(finals), stats_(stats), tx_(tx), answers_(answers) {}

  // A member's contribution to a job in store or both mode, at its home
  // slot's owner: kept in the store. Store mode ACKs it; both mode goes on
  // to reduce it. When the store (or the job's share of it) is full it is
  // refused, NACK store_full, neither kept nor reduced. Returns whether the
  // caller goes on to reduce it (`f` not consumed).
  bool Keep(const AggFrame& f);
  // A FETCH: the kept contribution of member `aux` in a FETCH answer, to a
  // member at its bound address or to the main server (flagged FINAL) at
  // the address it sent from; with RELEASE the copy is freed as it goes.
  // Else NACK not_stored. Consumes `f.m`.
  void Fetch(const AggFrame& f);
  // The main server's ACK of a final result: ends its delivery
  // (FinalDelivery::Acked), else counted final_ack_unmatched. Consumes `f.m`.
  void FinalAck(const AggFrame& f);

 private:
  ParameterStore* const store_;
  FinalDelivery* const finals_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  Answers& answers_;
};

}  // namespace aggswitch::dataplane
