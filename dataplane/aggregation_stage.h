// The aggregation path of one worker (docs/aggregation.md): checks each
// datagram (job, key, member binding, quotas), hands the contributions for
// another worker's slots to that worker, one ring enqueue per owner and
// burst, and reduces its own into their slots. It runs the slots' timers and
// passes finished slots to the tree stage.
//
// Per vector of datagrams:
//   1. parse and check every one; answer (NACK) or drop the refused;
//   2. hand off the rest by slot owner: one rte_ring_enqueue_burst per owner;
//   3. look up each of its own slots and prefetch what the contribution
//      touches there (the slot, its bitmap, offsets and accumulator), then
//      reduce them in order, each payload prefetched one ahead; a completed
//      slot goes to the tree stage, which answers.
//
//   AggregationStage agg(setup, channels, pool, stats, tx, answers, tree, clock);
//   agg.Process(in_port, burst.agg);   // received datagrams
//   agg.DrainHandoffs();               // other workers' datagrams for this one's slots
//   agg.timers().Run();
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "aggregator/job_table.h"
#include "aggregator/relocation_map.h"
#include "aggregator/slot_placement.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"
#include "config/config.h"
#include "dataplane/agg_frame.h"
#include "dataplane/answers.h"
#include "dataplane/classify.h"
#include "dataplane/counters.h"
#include "dataplane/final_delivery.h"
#include "dataplane/from_above_node.h"
#include "dataplane/hold_buffers.h"
#include "dataplane/kept_results.h"
#include "dataplane/member_notices.h"
#include "dataplane/packet.h"
#include "dataplane/parameter_store.h"
#include "dataplane/query_node.h"
#include "dataplane/slot_timers.h"
#include "dataplane/store_node.h"
#include "dataplane/tree_bound_node.h"
#include "dataplane/tree_stage.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_slots.h"
#include "dataplane/worker_channels.h"

namespace aggswitch::dataplane {

// Checks the IPv4/UDP headers at `l3_offset` and the aggregation header
// behind them; false for anything that is not a valid aggregation datagram,
// with the reason in `*why` when given. [any thread]
inline bool ParseAggregationFrame(const uint8_t* frame, uint32_t len, uint32_t l3_offset, UdpInfo* udp,
                                  aggregator::AggPacket* pkt, MalformedReason* why = nullptr) {
  MalformedReason reason = MalformedReason::kNotIpv4Udp;
  switch (ParseIpv4Udp(frame, len, l3_offset, udp)) {
    case UdpParse::kOk: {
      const aggregator::WireError e =
          aggregator::ParseAggregation(frame + udp->payload_offset, udp->payload_len, pkt);
      if (e == aggregator::WireError::kOk) return true;
      reason = MalformedFrom(e);
      break;
    }
    case UdpParse::kNotUdp: reason = MalformedReason::kNotIpv4Udp; break;
    case UdpParse::kMalformed: reason = MalformedReason::kBadIpv4Udp; break;
    case UdpParse::kFragment: reason = MalformedReason::kFragment; break;
  }
  if (why != nullptr) *why = reason;
  return false;
}

// What one worker's aggregation path works with. jobs == nullptr: aggregation
// is off and every frame is switched at L2.
struct AggregationSetup {
  aggregator::JobTable* jobs = nullptr;
  aggregator::SlotTable* slots = nullptr;  // this worker's share of the slots
  uint32_t reader_id = 0;                  // this worker's QSBR id in the job table
  aggregator::SlotRegions regions;         // where each job's chunks live (slot_placement.h)
  HoldBuffers* holds = nullptr;            // copies of the contributions ordered slots hold
  // What jobs in store or both mode keep here, and the final results this
  // worker delivers to main servers; null: none (aggregation.store.buffers 0).
  ParameterStore* store = nullptr;
  FinalDelivery* finals = nullptr;  // set by the worker, which owns it
  // Final delivery's first retransmission interval and its give-up time, in
  // TSC cycles (aggregation.store.final_timeout_ms).
  uint64_t final_retry_cycles = 0;
  uint64_t final_give_up_cycles = 0;
  aggregator::BypassTable* bypass = nullptr;  // this worker's bypass entries
  JobCounters* job_counters = nullptr;     // JobTable::max_jobs() entries, by Job::index()
  // The chunks whose placed slot this worker owns that were moved to a spare
  // slot; null without spare slots (a collision is then refused at once).
  aggregator::RelocationMap* relocations = nullptr;
  // The results this worker let go at a root without a TAN before every
  // member had them (TreeStage::LeaveResult); null: none kept.
  KeptResults* kept = nullptr;
  // Members are bound to the address they send from (Job::BindMember) on a
  // clock of TSC >> seen_shift (about a millisecond a tick); a bound address
  // silent for rebind_ticks is presumed gone: it may be replaced, and its
  // watermark holds no slot of the job (Job::SlotWatermark; 0: never).
  uint32_t seen_shift = 21;
  uint32_t rebind_ticks = 0;
  // When the dataplane started (TSC cycles), and how long after it no job
  // fixes its run label before every member has sent (Job::UpLabel): the
  // restart grace, in which a restarted switch's members resend (0: none).
  uint64_t started_tsc = 0;
  uint64_t settle_cycles = 0;
  uint16_t n_workers = 1;
  uint16_t index = 0;  // this worker's position; owns slots i % n_workers == index
  rte_ring* handoff[config::kMaxWorkers] = {};  // each worker's hand-off ring (FrameRef, MP/SC)
  uint32_t address = 0;        // aggregation IPv4 address (host order); 0: none
  uint16_t udp_port = 0;
  uint32_t result_src_ip = 0;  // source address of what the switch sends
};

class AggregationStage {
 public:
  AggregationStage(const AggregationSetup& setup, WorkerChannels& channels, LcoreStats& stats,
                   TxBuffers& tx, Answers& answers, TreeStage& tree, const LcoreClock& clock);

  // Datagrams received on `in_port`.
  void Process(uint16_t in_port, const AggVector& v);
  // Datagrams other workers handed to this one's slots.
  void DrainHandoffs();
  // Datagrams back from in-band registration, with the control side's verdict.
  void DrainReinjects();
  // The control thread's answers to escalated collisions (Relocation).
  void DrainRelocations();
  // The slots' timers and sweeps, called by the worker's poll loop.
  SlotTimers& timers() { return timers_; }
  // A bounded share of a slot dump (Dataplane::DumpSlots).
  void ContinueSlotDump(SlotDumpExchange& d);

 private:
  // Where a datagram comes from: this worker's RX, another worker's hand-off
  // (already checked and bound there), or the control thread after in-band
  // registration.
  enum class Source : uint8_t { kRx, kHandoff, kReinject };

  using Where = AggFrame::Where;

  // Parses and checks one datagram. Returns true with `*out` filled when it
  // goes on to its slot; otherwise it was answered or dropped. `via` and
  // `spare`: how a hand-off was sent on (FrameRef::via, verdict_or_spare).
  bool Check(rte_mbuf* m, uint16_t in_port, const FrameMeta& meta, Source source, AggFrame* out,
             uint16_t spare = aggregator::RelocationMap::kNone, Via via = Via::kPlacement);
  // A datagram for a job the table does not hold: up to the control thread
  // when it carries task info and registration is on, else a NACK.
  void HandleUnknownJob(rte_mbuf* m, const aggregator::AggPacket& pkt,
                        const aggregator::MemberAddr& sender, uint16_t in_port,
                        const FrameMeta& meta, Source source);
  // Hands `items` [0, n) to their slots' owners, one enqueue per owner, and
  // reduces this worker's own.
  void Dispatch(AggFrame* items, uint16_t n);
  void Reduce(AggFrame* items, uint16_t n);
  // One datagram at its slot, this worker's: a contribution (or QUERY)
  // counted or answered there, a result from above kept and replicated.
  void AtSlot(const AggFrame& c);
  void Contribute(const AggFrame& c);
  // A datagram at a slot that does not hold its chunk (docs/aggregation.md,
  // "Collisions" and "Moves"):
  //   - at the home slot: sent on to the chunk's spare slot when the
  //     relocation map has it, else to the moved partition when its job
  //     moved (this worker applied the move) and the chunk lies at or after
  //     the cut;
  //   - at a slot its member's hint named: a spare slot's is dropped, the
  //     member told to forget the hint; the moved partition's goes back to
  //     the home slot, which decides.
  // Returns true when the datagram was dealt with.
  bool Redirect(const AggFrame& c);
  // A result from above at its chunk's home slot, which does not hold the
  // chunk: sent on, as Redirect sends a contribution, to the slot that
  // does, so that the result is kept there for the members that ask again.
  // Returns true when it was sent on.
  bool RedirectResult(const AggFrame& c);
  // Sends `c`, at a slot that does not hold its chunk `seq`, on to where the
  // switch sent the chunk: the spare slot in this worker's relocation map,
  // or, from the home slot, the moved partition. False: nowhere.
  bool SentOn(const AggFrame& c, uint32_t seq);
  // Whether this worker sent no chunk of `job` on from its home slots: its
  // relocation map is empty and it applied no move of the job.
  bool NothingSentOn(const aggregator::Job& job) const {
    return (s_.relocations == nullptr || s_.relocations->empty()) && !slots_.MoveApplied(job);
  }
  // The ring element that hands `c` to its slot's owner.
  FrameRef HandOff(const AggFrame& c) const;
  // `c` bound for `slot` instead (`where`, `claim`): reduced here when this
  // worker owns the slot, else handed to its owner.
  void SendOn(const AggFrame& c, uint32_t slot, Where where, bool claim);
  // A contribution whose placed slot holds another chunk: up to the control
  // thread, which moves the chunk to a spare slot (DrainRelocations).
  void Escalate(const AggFrame& c);
  // No slot for the chunk now: what its job does then (Job::WhenNoSlot):
  // the contribution goes to the parameter node marked CONFLICT, or on as
  // late data behind the chunk sent up as missing (UpAsMissing); else, or
  // when that cannot be sent, NACK slot_busy.
  void RefuseSlotBusy(const AggFrame& c);
  // Whether the slot `c` is at holds its chunk `seq` complete (its result).
  bool CompleteHere(const AggFrame& c, uint32_t seq) const {
    const aggregator::Slot* s =
        s_.slots->Holding(slots_.Local(c.slot), c.job->id(), c.job->generation(), seq);
    return s != nullptr && s->state() == aggregator::Slot::State::kComplete;
  }
  // A contribution for the parameter node (docs/parameter-node.md).
  static bool IsForPs(const aggregator::AggPacket& pkt) {
    return pkt.opcode == aggregator::Opcode::kContribution &&
           (pkt.header->flags.host() & aggregator::flags::kAggregateAtPs) != 0;
  }
  // A LATE from a child switch under run label `label` (`run_id`: flagged
  // RUN_ID, the run's id), for node `node`:
  // checks it against the member bound to where it came from, as that
  // child's partial would be (a new label is the child's new run:
  // RequestNewRun). From a child not bound yet (its late overtook its first
  // partial), binds the one child whose node id or covered ids name `node`,
  // as its partial would have: without that, this switch has no run label
  // yet and the late could not go on. Returns whether the late goes on;
  // `*new_run` (when not null) is set when it does not because its label
  // started a new run here.
  bool BindLateSender(const aggregator::Job& job, const UdpInfo& udp,
                      const aggregator::MemberAddr& sender, uint32_t label, bool run_id, uint16_t node,
                      bool* new_run = nullptr);
  // Whether `it`, a member's datagram the control thread sends to a spare
  // slot (Relocation::kPlace) after its chunk's home slot gave the chunk
  // up, is stale: a float sum (not ordered) at a root that is its own TAN
  // or has none (ResultLost's scope), whose sender's ack watermark is past
  // the chunk. The sender has the result: the home slot completed the chunk
  // while the datagram waited for the control thread, and a spare slot
  // would complete it again in another order, to the members and the main
  // server. O(1).
  bool StaleForSpare(const AggFrame& it) const;
  // `it`, a child switch's partial for a chunk `slot` counted that child in,
  // holds only ranks the counted partial lacked (the ids the slot inherited
  // from its missing list): the child's slot gave way, and members whose
  // data had gone around it (excluded as predicted stragglers, then
  // included again) took a slot there anew with their resends. Dropped as
  // a repeat, their data would reach nobody: it goes on as late data
  // naming those ranks (CONTENT), towards the TAN that waits for them.
  // With `resend` (the slot's resend gap has passed: SlotOutcome::
  // kForwardedAgain), the forwarded slot's partial, or first data at a
  // root, goes again before it: the child repeats because no answer
  // reached it, and that partial may have been lost on the way.
  // Consumes `it.m` when it returns true. O(covered ids × (missing +
  // inherited ids)), for a repeated partial only.
  bool ForwardedAsLate(const AggFrame& it, const aggregator::Slot& slot, bool resend);

  const AggregationSetup s_;
  WorkerChannels& channels_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  Answers& answers_;
  TreeStage& tree_;
  const LcoreClock& clock_;
  WorkerSlots slots_;
  StoreNode store_;
  MemberNotices notices_;
  FromAboveNode above_;
  SlotTimers timers_;
  QueryNode queries_;
  TreeBoundNode bound_;
};

}  // namespace aggswitch::dataplane
