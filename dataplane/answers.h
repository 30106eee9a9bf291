// What the switch sends to a job's members and hops: results replicated to
// every member, INCOMPLETE results, NACKs and NOTICEs (rate limited per
// lcore), and any datagram to an address it resolved (SendTo).
//
// A result is written once: into the contribution that completed the slot
// when that frame can hold it, else into a fresh mbuf. Each member's copy is
// its own header mbuf chained to that one payload, shared by reference count
// (as DPDK's ipv4_multicast example does): no clone, no second copy.
// Nothing a member gets carries the job key (ChunkFields).
//
//   Answers answers({plan, pool, stats, tx}, {result_src_ip, udp_port}, clock);
//   answers.SendResult(job, slot, -1, carrier, header_offset);   // to every member
//   answers.Nack(m, header, NackReason::kSlotQuota, sender);
//
// Thread safety: one per worker, used by that worker's thread only.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cstdint>

#include "aggregator/job_table.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"
#include "dataplane/counters.h"
#include "dataplane/forwarding_plan.h"
#include "dataplane/lcore_clock.h"
#include "dataplane/agg_frame.h"
#include "dataplane/tx_buffers.h"

namespace aggswitch::dataplane {

class Answers {
 public:
  struct Source {
    uint32_t ip = 0;  // host order: what results, NACKs and partials come from
    uint16_t udp_port = 0;
  };

  Answers(const ForwardingPlan& plan, rte_mempool* pool, LcoreStats& stats, TxBuffers& tx,
          Source source, const LcoreClock& clock);

  const ForwardingPlan& plan() const { return plan_; }

  // Sends the slot's result to every member (node < 0) or to member `node`.
  // `carrier`, when not null, is a contribution to this slot (its aggregation
  // header at `header_offset`) that the caller is done with; the result is
  // written into it when it can be, and then it is consumed: returns whether.
  bool SendResult(const aggregator::Job& job, const aggregator::Slot& slot, int node,
                  rte_mbuf* carrier, uint32_t header_offset);
  // Replicates `payload` (a UDP payload: aggregation header onwards) to
  // members [first, last) and returns how many copies went out (a member
  // without an address gets none). Consumes the caller's reference to
  // `payload`.
  uint32_t Replicate(const aggregator::Job& job, rte_mbuf* payload, uint16_t first, uint16_t last,
                 uint16_t ip_id);
  // Sends an INCOMPLETE result naming `missing` to every member.
  void SendIncomplete(const aggregator::Job& job, const aggregator::Slot& slot,
                      const uint16_t* missing, uint32_t n_missing);
  // Turns `m` into an answer to its sender, in place (header only, no
  // payload), and queues it: a NACK with `reason`, or the echo of an
  // accepted TASK_INFO. NACKs are rate limited. Consumes `m`.
  void Answer(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::Opcode opcode,
              aggregator::NackReason reason, const aggregator::MemberAddr& to);
  // Sends `f` (header only) to `to` in a buffer of its own: the ACK of a
  // DISTRIBUTE, whose datagram went on to the members. False when the pool
  // is empty (counted as result_no_mbuf).
  bool Acknowledge(const aggregator::AggFields& f, const aggregator::MemberAddr& to);
  // Sends `f` with `len` payload bytes (f.elem_count elements of f.dtype) to
  // `to` in a buffer of its own: a FETCH's answer, a final result. False when
  // the pool is empty (result_no_mbuf) or it does not fit an mbuf.
  bool SendData(const aggregator::AggFields& f, const uint8_t* payload, uint32_t len,
                const aggregator::MemberAddr& to);
  void Nack(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::NackReason reason,
            const aggregator::MemberAddr& to) {
    Answer(m, request, aggregator::Opcode::kNack, reason, to);
  }
  // NACK `reason` to the member whose datagram `f` is, at its bound
  // address; without one (no member, or not bound here) dropped on its
  // ingress port as `otherwise`. Consumes `f.m`.
  void NackMember(const AggFrame& f, aggregator::NackReason reason, DropReason otherwise);
  // NACK slot_busy to the member, counted slot_busy (dropped as
  // agg_collision when it has no address here). Consumes `f.m`.
  void NackSlotBusy(const AggFrame& f) {
    stats_.lcore.agg.slot_busy.Add(1);
    NackMember(f, aggregator::NackReason::kSlotBusy, DropReason::kAggCollision);
  }
  // Who a NOTICE goes to. A member bound to its job (key checked, address
  // bound) gets at most one NOTICE per datagram it sent, no larger, at the
  // address it is bound to: no rate limit, since losses come in bursts and
  // each unanswered question costs the member a timeout. Anyone else (a
  // QUERY for a job the switch does not hold) is rate limited like NACKs.
  enum class To : uint8_t { kBoundMember, kUnverified };
  // Turns `m`, a member's retransmission or QUERY, into a NOTICE about the
  // chunk to `to`, in place: kHeld (its slot waits for `awaited` more
  // members, sent in `expected`) or kMissing (the switch holds no
  // contribution of the member's to it). Consumes `m`.
  void NoticeInPlace(rte_mbuf* m, const aggregator::AggHeader& request,
                     aggregator::NoticeKind kind, uint32_t awaited,
                     const aggregator::MemberAddr& to, To who);
  // Sends member `node_id`, bound at `to`, a NOTICE of `kind` about chunk
  // `seq` of `job`, in a fresh mbuf (To::kBoundMember: no rate limit): start
  // or stop flagging its data (counted in notices_sent), or, unasked, that
  // the switch lacks its contribution to `seq` (kMissing; the caller counts
  // why), or that `seq` moved to spare slot `slot_hint` (kRelocated;
  // hints_issued). Returns whether it went out (an mbuf was at hand).
  bool SendNotice(const aggregator::Job& job, uint16_t node_id, uint32_t seq,
                  aggregator::NoticeKind kind, const aggregator::MemberAddr& to,
                  uint16_t slot_hint = aggregator::kNoSlotHint);
  // Puts Ethernet, 802.1Q (as `to`'s port wants) and IPv4/UDP headers in
  // front of `m`'s data, a UDP payload, and queues it for `to` (a drop
  // on `to`'s port when there is no headroom). Consumes `m`.
  void SendTo(rte_mbuf* m, const aggregator::MemberAddr& to, uint16_t ip_id);

  // The header fields every datagram about the slot's chunk shares (no key).
  static aggregator::AggFields ChunkFields(const aggregator::Job& job, const aggregator::Slot& slot);
  // The header fields of the slot's RESULT to members (ChunkFields, the
  // move hint and the result's flags).
  static aggregator::AggFields ResultFields(const aggregator::Job& job, const aggregator::Slot& slot);

 private:
  // The per-lcore token bucket of NACKs and NOTICEs.
  bool AnswerAllowed();
  // The port a datagram to `to` leaves by: its port, or for an address
  // learned on an uplink group's member, the member the group picks for it
  // (a path decision for to.ip, else the flow's hash).
  uint16_t Egress(const aggregator::MemberAddr& to);
  // Writes the header-only datagram `f` to `to` over `m` and queues it;
  // false (and `m` dropped) when `m` cannot hold it.
  bool SendHeaderOnly(rte_mbuf* m, const aggregator::AggFields& f, const aggregator::MemberAddr& to);
  // The result's UDP payload (aggregation header + elements), in `carrier`
  // when it can hold it, else in a new mbuf; nullptr when the pool is empty.
  rte_mbuf* ResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                          rte_mbuf* carrier, uint32_t header_offset);
  static void WriteResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                 uint8_t* buf);

  const ForwardingPlan& plan_;
  rte_mempool* const pool_;
  LcoreStats& stats_;
  TxBuffers& tx_;
  const Source source_;
  const LcoreClock& clock_;
  // NACK rate limit: a token bucket refilled from the TSC.
  uint64_t tokens_ = 0;
  uint64_t refill_tsc_ = 0;
  uint64_t token_cycles_ = 0;  // cycles per token
};

}  // namespace aggswitch::dataplane
