// The job tree (docs/stragglers.md): what happens to a chunk past this
// switch. A finished slot goes as far as this switch can take it: a partial
// upstream, first data to the TAN, or at the root, with nothing missing, the
// result to every member (Answers). Late data goes on unreduced towards the
// TAN; results from above (the upstream switch or the TAN) are cached and
// replicated down; members' ACKs are relayed upstream when their smallest
// watermark moves. A timeout leaves bypass entries, which late data matches.
//
//   TreeStage tree(setup, channels, stats, tx, answers, clock, pool);
//   bool consumed = tree.FinishSlot(job, local, slot, expired, carrier, header_offset);
//   tree.ForwardLate(m, job, header_offset);
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstdint>
#include <span>

#include "aggregator/bypass_table.h"
#include "aggregator/job_table.h"
#include "aggregator/relocation_map.h"
#include "aggregator/slot_placement.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"
#include "dataplane/answers.h"
#include "dataplane/counters.h"
#include "dataplane/final_delivery.h"
#include "dataplane/hold_buffers.h"
#include "dataplane/kept_results.h"
#include "dataplane/tx_buffers.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

class TreeStage {
 public:
  struct Setup {
    const aggregator::JobTable* jobs = nullptr;
    aggregator::SlotTable* slots = nullptr;    // this worker's share
    aggregator::BypassTable* bypass = nullptr;  // this worker's entries
    aggregator::SlotRegions regions;
    uint16_t n_workers = 1;
    uint16_t index = 0;         // this worker's position (AggregationSetup::index)
    uint32_t rebind_ticks = 0;  // AggregationSetup::rebind_ticks
    // When the switch started, and its restart grace (TSC cycles;
    // AggregationSetup::started_tsc, settle_cycles): no run label is fixed
    // early before settle_cycles have passed since started_tsc (Settling).
    uint64_t started_tsc = 0;
    uint64_t settle_cycles = 0;
    // The root's deliveries of FINAL chunks to their job's main server;
    // null: none.
    FinalDelivery* finals = nullptr;
    // A root that is its own TAN: first and late data up to the control
    // thread's TAN engine, its results back down (mbufs from the
    // aggregation header on).
    rte_ring* tan_up = nullptr;
    rte_ring* tan_down = nullptr;
    // Copies of the contributions ordered and batch slots hold
    // (AggregationSetup::holds): a result from above that completes such a
    // slot gives them back.
    HoldBuffers* holds = nullptr;
    // The chunks whose placed slot this worker owns that were moved to a
    // spare slot (AggregationSetup::relocations; read here only, on the
    // same lcore); null without spare slots.
    const aggregator::RelocationMap* relocations = nullptr;
    // Where a root without a TAN keeps a result that gives way before every
    // member has it (AggregationSetup::kept); null: nowhere.
    KeptResults* kept = nullptr;
  };

  TreeStage(const Setup& setup, rte_mempool* pool, LcoreStats& stats, TxBuffers& tx,
            Answers& answers, const LcoreClock& clock)
      : s_(setup), pool_(pool), stats_(stats), tx_(tx), answers_(answers), clock_(clock) {}

  // The slot's result went as far as this switch can take it: a partial
  // upstream, first data to the TAN, or (nothing missing at the root) the
  // result to every member, or to the parameter node as VERIFY (verify
  // mode, or a saturated sum in a job with one; the slot is held until the
  // answer). A result to every member whose chunk was marked FINAL also
  // goes to the job's main server (FinalDelivery). `expired`: its timer
  // fired. Bypass entries are written for the missing that do not flag
  // their own data (not excluded): after a timeout, and after a slot that
  // completed at the count it needed when it took its chunk, when a member
  // it went on without has been included again since. `carrier` as for
  // Answers::SendResult. Returns whether the carrier was consumed.
  bool FinishSlot(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot,
                  bool expired, rte_mbuf* carrier, uint32_t header_offset);
  // At the root, complete `slot` gives way before every member has
  // acknowledged its result (two jobs held each other's oldest chunks back:
  // aggregation_stage.cc, SlotReleasable). Every member was sent the result,
  // but the slot is its only copy: it goes to the TAN first, as first data
  // lacking nothing, which the TAN answers at once (the answer comes down to
  // every member again) and keeps for its give-up time, so that a member
  // whose copy was lost still gets it by asking (the root's QUERY, or its
  // resend to the parameter node). Not flagged FINAL: the slot delivered
  // it to the main server already. Nothing for a result that came down from
  // the TAN, which keeps its own (a parameter-server job's step is applied
  // once). A job without a TAN has no other copy: the result is kept here
  // (KeptResults), under the job's run label, and answered from there
  // (SendKept). [owner lcore]
  void LeaveResult(const aggregator::Job& job, const aggregator::Slot& slot);
  // Whether a result of `job` is kept here (LeaveResult). [owner lcore]
  bool HasKept() const { return s_.kept != nullptr && !s_.kept->empty(); }
  // Sends member `to` chunk `seq`'s result, if it is kept here under the
  // job's run label; false otherwise, or when the pool is empty. [owner lcore]
  bool SendKept(const aggregator::Job& job, uint32_t seq, const aggregator::MemberAddr& to);
  // Whether the partial that FinishSlot would send now for aggregating
  // `slot` fits one datagram with its missing list: a chunk sized to the
  // MTU has room for a few missing ids only (the client's
  // reserve_missing_ids). [owner lcore]
  bool MissingListFits(const aggregator::Job& job, const aggregator::Slot& slot);
  // Chunk `chunk.seq` of `job` has no slot here (Job::NoSlot::kUpAsMissing):
  // it goes on as its slot's timeout with nobody in would send it, a partial
  // (first data at the root) of the op's identity, flagged CONFLICT, that
  // lists every member, and a bypass entry is written per member listed
  // (as CollectMissing writes them), so that their data follows as late
  // data (MatchBypass, ForwardLate). `chunk`: the header of a contribution
  // (or a child's partial) to it. False when nothing went (no mbuf, or the
  // list does not fit; counted): the caller refuses the contribution.
  // `empty`: when `chunk` is a child switch's own up-as-missing partial
  // (CONFLICT: the op's identity, every id of its share listed), that
  // packet; the child is then listed as the ids its partial lists, not
  // itself, and gets no entry: its partial holds nothing, and sent on as a
  // late partial it would be the only record of those ids, which nothing
  // resends if it is lost. `*flattened` says whether that was done (the
  // caller then drops the child's partial instead of sending it on).
  bool SendUpAsMissing(const aggregator::Job& job, const aggregator::AggHeader& chunk,
                       const aggregator::AggPacket* empty = nullptr, int empty_member = -1,
                       bool* flattened = nullptr);
  // A member's QUERY about chunk `query.seq` found nothing of the chunk
  // here, at a switch below the root: the chunk may have completed, its
  // slot given way once its partial went up, and the result been lost on
  // the way to this member. The parent keeps a complete chunk until every
  // member below has acknowledged it, so a QUERY goes up in this switch's
  // name (queries_up); the parent's answer comes down as any result does,
  // and reaches every member. Nothing goes before the run is labelled, and
  // a question does not fix the label (up_unlabelled): only data does.
  void AskAbove(const aggregator::Job& job, const aggregator::AggHeader& query);
  // Turns a contribution (or partial) into a LATE datagram flagged BYPASS and
  // sends it towards the TAN. Consumes `m`; a drop is charged to `in_port`
  // (here and below: kOwnFrame for one the switch made). `label`, when not
  // 0, is the run label it carries instead of the job's (a root's late of a
  // new run, under that run's id). `name_content`: a child switch's partial
  // goes as a late partial naming the ids it holds (ListContent), whatever
  // the job lists for a late child; `only`, when not empty, the ids it
  // names (ListContent), and dropped (duplicates) when they cannot be named.
  void ForwardLate(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset,
                   uint16_t in_port, uint32_t label = 0, bool name_content = false,
                   std::span<const uint16_t> only = {});
  // A contribution for the job's parameter node (docs/parameter-node.md),
  // `add_flags` added to its flags (AGGREGATE_AT_PS, CONFLICT): on towards
  // the parameter node unreduced, through the parent switch, or from the root
  // to its remote TAN; dropped (no_parameter_node) at a root without one.
  // Consumes `m`.
  void ForwardToPs(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset,
                   uint16_t in_port, uint16_t add_flags);
  // An ACK from a member of a non-root job: when it moves the members'
  // smallest watermark, an ACK with that watermark goes upstream (written
  // over `m`); the members' repeats of their last ACK pass the same
  // watermark on again, at most once per kAckRelayGapTicks. Consumes `m`.
  void RelayAck(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset, uint16_t in_port);
  // Ticks of the members' clock (half a millisecond to one) between two
  // relays of one watermark: under the clients' shortest retransmission
  // timeout (5 ms), the interval of their ACK repeats, so that each round
  // of repeats is relayed.
  static constexpr uint32_t kAckRelayGapTicks = 4;
  // A RESULT (or EXCEPTION_RETRANSMIT) from upstream or the TAN: cached in
  // local slot `local_slot` when it holds the chunk (an exception as an
  // overflowed result), replicated to every member with this switch's slot
  // hint for them (Job::MoveHint). At the root of a job in verify mode, a
  // RESULT that is neither VERIFIED, INCOMPLETE nor OVERFLOW is dropped
  // (unverified_results). Consumes `m`.
  void ResultFromAbove(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt,
                       uint32_t header_offset, uint16_t in_port, uint32_t local_slot);
  // Whether late data of member `member` (node `node_id`) for chunk `seq`
  // matches a bypass entry (which stays until its TTL).
  bool MatchBypass(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id);
  // Whether chunk `seq` of `job` went up from here lacking members that
  // bypass entries record, with no entry for member `member` (node
  // `node_id`): the partial counted it. A slot that gives way after its
  // partial went up leaves such a mark (FinishSlot) with its entries; a
  // question or resend of a member it counted, which finds no slot, waits
  // for the parent's answer rather than go up again as late data, which
  // the TAN would merge before the partial and then drop the partial as
  // overlapping it. For a short while after the partial went up (50 ms),
  // or until the parent says it lacks the partial (ForgetCounted).
  // [owner lcore]
  bool CountedUp(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id);
  // The parent lacks chunk `seq`'s partial from here: its members' data
  // goes up again (CountedUp no longer says otherwise). [owner lcore]
  void ForgetCounted(const aggregator::Job& job, uint32_t seq);
  // Whether bypass entries are live (MatchBypass may match).
  bool bypass_live() const { return s_.bypass != nullptr && s_.bypass->live() != 0; }
  // Removes a bounded number of expired bypass entries.
  void SweepBypass();
  // Replicates the results this switch's own TAN sent down.
  void DrainTanResults();
  bool tan_results_waiting() const {
    return s_.tan_down != nullptr && rte_ring_count(s_.tan_down) != 0;
  }
  // A bounded share of a bypass dump (Dataplane::DumpBypass).
  void ContinueBypassDump(BypassDumpExchange& d);

 private:
  // MatchBypass without counting the match.
  bool HasEntry(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id);
  // `m` (first data when `first_data`, else late data) to the root's own
  // TAN through its input ring; false when it was dropped and counted: no
  // ring (late_no_tan), or the ring full, or three quarters full for late
  // data (tan_busy).
  bool ToOwnTan(rte_mbuf* m, uint16_t in_port, bool first_data);
  // A FINAL chunk complete at the root: on to the job's main server.
  void DeliverFinal(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot);
  // The same from the TAN's result for it, no slot here holding the chunk.
  void DeliverFinal(const aggregator::Job& job, uint32_t local, const aggregator::AggPacket& result);
  // Sends a partial (non-root) or first data (root) with `missing` node ids,
  // or (`opcode` kVerify, root) a complete result to be checked. Returns
  // whether `carrier` was consumed; `*sent`, when given, whether the
  // datagram went up, in `carrier` or another mbuf.
  bool SendPartial(const aggregator::Job& job, const aggregator::Slot& slot,
                   aggregator::Opcode opcode, const uint16_t* missing, uint32_t n_missing,
                   rte_mbuf* carrier, uint32_t header_offset, bool* sent = nullptr);
  // At the root, an ORDERED chunk whose slot holds one worker's data alone
  // (its result is that data, bit for bit): first data flagged CONFLICT
  // (nobody's data) that lists the worker missing too, then the worker's
  // data as its late. The TAN then reduces every member's data in node
  // order, as a slot reduces in member order, and a chunk whose slot went
  // on with one member comes out in the same bytes as one that completed
  // in a slot (a member's resend after a restart takes a slot alone, while
  // the others hold the result the slot before gave them). False, nothing
  // sent, when the chunk is not such a chunk or the list has no room.
  bool SendAlone(const aggregator::Job& job, const aggregator::Slot& slot,
                 const uint16_t* missing, uint32_t n_missing);
  // The header of `opcode` about the slot's chunk that goes up: its fields
  // (Answers::ChunkFields), and the flags its sum carries (OVERFLOW,
  // RECOVERED, ORDERED), FINAL when `final`.
  static aggregator::AggFields UpFields(const aggregator::Job& job, const aggregator::Slot& slot,
                                        aggregator::Opcode opcode, bool final);
  // What SendUp did with its datagram.
  enum class Up : uint8_t {
    kSent,     // sent, in a fresh mbuf
    kCarried,  // sent, in the carrier
    kTooLong,  // not sent: longer than the MTU carries (counted)
    kNoMbuf,   // not sent: no mbuf (counted)
    // Not sent: the job has no run label yet, so nothing of it goes up (a
    // member has not sent in this generation; counted). Resent as a lost
    // partial is.
    kUnlabelled,
  };
  // Completes `f` (the job key, this switch's node id and slot watermark,
  // an in-band job's task info), writes it with `missing` and the payload
  // (null: the identity of f.op) into `carrier` when it has room, else a
  // fresh mbuf, and sends it to the chunk's parent, or from the root to the
  // TAN.
  Up SendUp(const aggregator::Job& job, aggregator::AggFields f, const uint16_t* missing,
            uint32_t n_missing, const uint8_t* payload, uint32_t payload_len, rte_mbuf* carrier,
            uint32_t header_offset);
  // `m` (a LATE, from its aggregation header on) is a child switch's late
  // partial and the job lists the ids such a child covers as missing
  // (bypass.subswitch: nodes): rewrites its list to name the ids its payload
  // holds, flagged CONTENT (docs/stragglers.md); so too, whatever the job
  // lists, when `always`. Leaves it as it is when the child lacks ids it does
  // not cover, or the mbuf has no room. `only`, when not empty: the ids to
  // name, whatever the job knows of the child's covers: what the payload
  // holds, or a part of it (the caller's to choose: naming fewer ids than a
  // payload holds is sound only where a member's data reduced twice gives
  // the same bytes).
  // True when it named them.
  bool ListContent(rte_mbuf* m, const aggregator::Job& job, bool always = false,
                   std::span<const uint16_t> only = {});
  // Whether the job has its run label; else drops `m` (counted up_unlabelled).
  bool Labelled(rte_mbuf* m, const aggregator::Job& job, uint16_t in_port);
  // Cuts `m` to its datagram, from the aggregation header at `header_offset`
  // to where the header says it ends (whatever padding followed), with
  // `add_flags` added and the job's run label as its incarnation; returns
  // the header.
  aggregator::AggHeader* TrimToDatagram(rte_mbuf* m, const aggregator::Job& job,
                                        uint32_t header_offset, uint16_t add_flags) const;
  // Whether the switch started less than its restart grace ago: no job's
  // run label is fixed before every member has sent then (Job::UpLabel).
  // Two loads and a compare; never again once the grace has passed.
  bool Settling() const { return clock_.tsc - s_.started_tsc < s_.settle_cycles; }
  // Sends `m` (from its aggregation header on) to the job's `hop`
  // (Job::kTanHop or a ParentHop). Consumes `m`.
  void SendToHop(rte_mbuf* m, const aggregator::Job& job, uint32_t hop, uint16_t in_port);
  // The missing list of chunk `seq` at this switch: every member that its
  // slot did not count (every member when `slot` is null; a late child
  // switch as itself or as the nodes it covers), then the ids the
  // children's partials named. With `entries`, writes a bypass entry per
  // missing non-excluded member, and tells in `*unrecorded` (when not
  // null) whether one could not be written (the table was full). Returns
  // the count, or UINT32_MAX when more than `cap` ids.
  // `entry_ttl`: how long the entries live, in TSC cycles (0: the table's).
  // `*excluded` (when not null): whether it listed an excluded member, which
  // gets no entry.
  uint32_t CollectMissing(const aggregator::Job& job, uint32_t seq, const aggregator::Slot* slot,
                          bool entries, uint16_t* out, uint32_t cap, bool* unrecorded = nullptr,
                          uint64_t entry_ttl = 0, bool* excluded = nullptr);
  // The slot index of chunk `seq` of `job` in this worker's table.
  uint32_t LocalSlot(const aggregator::Job& job, uint32_t seq) const {
    return s_.regions.Of(job.in_band(), job.placement(), seq) / s_.n_workers;
  }
  // Where this worker keeps chunk `seq` of `job` for a result of its own
  // TAN: the spare slot `spare` the control thread leased the chunk (kNone:
  // none), or the one this worker's relocations name, when this worker's
  // and holding the chunk; else its placed slot (a remote parent's result
  // goes to a spare slot as AggregationStage::RedirectResult sends it on).
  // O(1).
  uint32_t TanResultSlot(const aggregator::Job& job, uint32_t seq, uint16_t spare) const;

  const Setup s_;
  rte_mempool* const pool_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  Answers& answers_;
  const LcoreClock& clock_;
};

}  // namespace aggswitch::dataplane
