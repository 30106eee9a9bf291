// Per-lcore dataplane counters and the list of drop reasons.
//
// Each worker lcore owns one cache-aligned LcoreStats and is its only writer;
// the control side (metrics, API, telemetry) reads with relaxed atomic loads
// and sums across lcores. Nothing is shared for writing, so there is no false
// sharing and no atomic read-modify-write on the hot path.
//
// Thread safety: Counter::Add on the owning lcore only; Counter::Get anywhere.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

#include "aggregator/wire.h"
#include "config/config.h"

namespace aggswitch::dataplane {

// Every reason the dataplane drops a frame: enum name, metric label, meaning.
// Drops are charged to the ingress port, except tx_full and no_tailroom
// (egress port); a
// frame the switch made itself is charged to no port (TxBuffers::Drop).
#define AGG_DROP_REASONS(X)                                                                   \
  X(kRunt, "runt", "frame shorter than an Ethernet header")                                   \
  X(kBadVlan, "bad_vlan", "802.1Q tag truncated or VLAN id 4095")                             \
  X(kVlanNotAllowed, "vlan_not_allowed",                                                      \
    "tag on an access port, VLAN not in the trunk list, or untagged on a trunk with no native") \
  X(kSrcMulticast, "src_multicast", "source MAC is multicast or broadcast")                   \
  X(kSrcSpoofed, "src_spoofed", "source MAC or IPv4 address is the switch's own (an impersonation)") \
  X(kHairpin, "hairpin", "destination MAC was learned on the ingress port")                   \
  X(kNoEgress, "no_egress", "no other port carries the frame's VLAN")                         \
  X(kToSwitchMalformed, "to_switch_malformed", "ARP or IPv4 to the switch failed its checks") \
  X(kToSwitchUnhandled, "to_switch_unhandled", "addressed to the switch, not ARP or ping")     \
  X(kNoMbuf, "no_mbuf", "mempool empty when copying a flooded frame")                         \
  X(kNoHeadroom, "no_headroom", "no headroom to push an 802.1Q tag")                          \
  X(kTxFull, "tx_full", "egress queue full")                                                  \
  X(kNoTailroom, "no_tailroom",                                                               \
    "a chained frame does not fit one buffer, and the egress port sends only single buffers")  \
  X(kAggMalformed, "agg_malformed",                                                           \
    "aggregation datagram failed its IPv4, UDP or header checks (by reason: aggswitch_aggregation_malformed_total)") \
  X(kAggUnsupported, "agg_unsupported", "aggregation opcode this switch does not take")       \
  X(kAggUnknownJob, "agg_unknown_job",                                                        \
    "late data or a result for a job the switch does not hold, or one removed in between")    \
  X(kAggResultRefused, "agg_result_refused", "result not from the job's upstream switch or TAN, or not for this run") \
  X(kAggUnlabelled, "agg_unlabelled", "late data or data for the parameter node before its job's run label (a member has not sent yet)") \
  X(kAggRunEnded, "agg_run_ended", "late data or data for the parameter node that a child switch sent under an ended run's label") \
  X(kAggRejected, "agg_rejected", "contribution that does not fit its job, with no member address to answer") \
  X(kAggDuplicate, "agg_duplicate", "contribution from a member already counted")             \
  X(kAggCollision, "agg_collision", "contribution whose slot holds another chunk, refused with nobody to answer") \
  X(kAggHintRefused, "agg_hint_refused", "datagram whose slot hint names a spare slot that does not hold its chunk") \
  X(kAggHandoffFull, "agg_handoff_full", "the slot owner's hand-off ring was full")           \
  X(kAggNoTan, "agg_no_tan", "late data, or data for the parameter node, at a root job without a TAN") \
  X(kAggTanBusy, "agg_tan_busy", "first or late data for the root's own TAN while its input ring was full (late data: three quarters full)") \
  X(kAggUnresolvedHop, "agg_unresolved_hop", "the job's upstream or TAN address is not resolved yet") \
  X(kIntMalformed, "int_malformed",                                                           \
    "datagram to the INT port from a fabric port without valid INT headers of this domain")   \
  X(kNackLimited, "nack_limited", "datagram not answered (a NACK, or a NOTICE to an unverified sender): over the lcore's answer rate")

enum class DropReason : uint8_t {
#define AGG_DROP_ENUM(name, label, help) name,
  AGG_DROP_REASONS(AGG_DROP_ENUM)
#undef AGG_DROP_ENUM
      kCount
};
inline constexpr size_t kNumDropReasons = static_cast<size_t>(DropReason::kCount);

// The metric label and help text of each drop reason, indexed by DropReason.
struct DropReasonText {
  const char* label;
  const char* help;
};
inline constexpr DropReasonText kDropReasonText[kNumDropReasons] = {
#define AGG_DROP_TEXT(name, label, help) {label, help},
    AGG_DROP_REASONS(AGG_DROP_TEXT)
#undef AGG_DROP_TEXT
};
constexpr const char* DropReasonLabel(DropReason r) { return kDropReasonText[static_cast<size_t>(r)].label; }
constexpr const char* DropReasonHelp(DropReason r) { return kDropReasonText[static_cast<size_t>(r)].help; }

// What a port's fault injection (ports[].faults, fault_injector.h) did to a
// frame: enum name, metric label, meaning.
#define AGG_PORT_FAULTS(X)                                                           \
  X(kDrop, "drop", "frames dropped")                                                 \
  X(kDuplicate, "duplicate", "frames delivered twice")                               \
  X(kReorder, "reorder", "frames held back behind the frames of the port's next poll")        \
  X(kDelay, "delay", "frames delayed by the port's fixed delay")

enum class Fault : uint8_t {
#define AGG_FAULT_ENUM(name, label, help) name,
  AGG_PORT_FAULTS(AGG_FAULT_ENUM)
#undef AGG_FAULT_ENUM
      kCount
};
inline constexpr size_t kNumFaults = static_cast<size_t>(Fault::kCount);
inline constexpr DropReasonText kFaultText[kNumFaults] = {
#define AGG_FAULT_TEXT(name, label, help) {label, help},
    AGG_PORT_FAULTS(AGG_FAULT_TEXT)
#undef AGG_FAULT_TEXT
};

// A single-writer counter. Add() is a plain load/add/store (no lock prefix).
class Counter {
 public:
  void Add(uint64_t n) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t Get() const { return v_.load(std::memory_order_relaxed); }
  // Only while no thread can Add (see JobCounters). [control]
  void Reset() { v_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// The counters every lcore keeps per port, summed over the lcores in
// PortTotals. Each is written here once: the field, the API key and the
// metric aggswitch_port_<name>_total, with its help. X(name, help).
#define AGG_PORT_COUNTERS(X)                                                   \
  X(rx_packets, "Frames received on the port by the worker lcores.")           \
  X(rx_bytes, "Bytes received on the port by the worker lcores.")              \
  X(tx_packets, "Frames transmitted on the port.")                             \
  X(tx_bytes, "Bytes transmitted on the port.")                                \
  X(flooded_packets,                                                           \
    "Frames received on the port and flooded (broadcast, multicast or unknown unicast).") \
  X(uplink_decided_packets,                                                    \
    "Frames sent out the port, a member of an uplink group, because a path decision named it " \
    "for their destination.")                                                  \
  X(uplink_hashed_packets,                                                     \
    "Frames sent out the port, a member of an uplink group, by their flow's hash (no decision).")

// The device's own counters, read with the totals: X(name, source, help),
// where the source is a member of `eth` (rte_eth_stats) or, for a
// net_af_xdp port, of `xsk` (its sockets' XDP_STATISTICS, xsk_stats.h; zero
// for other drivers). The field is dev_<name>, the API key device.<name>, the
// metric aggswitch_port_device_<name>_total.
#define AGG_PORT_DEVICE_COUNTERS(X)                                            \
  X(missed_packets, eth.imissed,                                               \
    "Frames the device dropped because its RX ring was full (rte_eth_stats imissed).") \
  X(rx_errors, eth.ierrors, "Erroneous frames the device received (rte_eth_stats ierrors).") \
  X(tx_errors, eth.oerrors, "Frames the device failed to transmit (rte_eth_stats oerrors).") \
  X(rx_nombuf, eth.rx_nombuf, "RX mbuf allocation failures of the device (rte_eth_stats rx_nombuf).") \
  X(xsk_ring_full, xsk.rx_ring_full,                                           \
    "Frames the kernel dropped because the port's AF_XDP RX ring was full: a worker lcore "  \
    "polled the port too late (XDP_STATISTICS rx_ring_full; net_af_xdp ports, whose imissed "  \
    "leaves them out).")                                                      \
  X(xsk_fill_empty, xsk.rx_fill_ring_empty_descs,                              \
    "Times the kernel found the port's AF_XDP fill ring empty, with no buffer to receive "   \
    "into (XDP_STATISTICS rx_fill_ring_empty_descs; net_af_xdp ports).")

// What each worker lcore counts about itself: the field, the API key and the
// metric aggswitch_lcore_<name>_total. X(name, help).
#define AGG_LCORE_COUNTERS(X)                                                   \
  X(busy_cycles, "TSC cycles of polls that returned packets, including their processing.") \
  X(idle_cycles, "TSC cycles of polls that returned no packets.")               \
  X(busy_packets, "Packets received in busy polls.")                            \
  X(polls, "Passes over the lcore's RX queues.")                                \
  X(idle_sleeps, "Sleeps of eal.idle_sleep_us after polls that found no packet.") \
  X(learn_requests, "MAC learn or move requests sent to the control thread.")   \
  X(learn_ring_full,                                                            \
    "MAC learn requests lost because the learn ring was full (the frame was still forwarded).") \
  X(arp_replies, "ARP replies sent for the switch's own addresses.")           \
  X(icmp_replies, "ICMP echo replies sent for the switch's own addresses.")

// One lcore's view of one port.
struct PortCounters {
#define AGG_PORT_COUNTER_FIELD(name, help) Counter name;
  AGG_PORT_COUNTERS(AGG_PORT_COUNTER_FIELD)
#undef AGG_PORT_COUNTER_FIELD
  Counter drops[kNumDropReasons];
  Counter faults[kNumFaults];  // injected, in either direction
};

// What the aggregation path of one lcore did (docs/aggregation.md).
#define AGG_AGGREGATION_COUNTERS(X)                                                    \
  X(contributions, "contributions counted into a slot")                                \
  X(completions, "slots completed by this lcore")                                     \
  X(saturated_sums, "slots completed by this lcore whose int32 sum saturated (result flagged OVERFLOW)") \
  X(duplicates, "contributions from a member already counted")                        \
  X(duplicate_results, "duplicates answered from a completed slot's cached result")   \
  X(collisions, "contributions whose slot held another chunk: escalated to the control thread, or refused (NACK slot_busy)") \
  X(escalations, "collided contributions passed to the control thread to move their chunk to a spare slot or their job to a partition of its own") \
  X(relocated, "datagrams sent on to their chunk's spare slot by the relocation map") \
  X(moved, "datagrams sent on from their chunk's home slot to its job's moved partition") \
  X(move_bounced, "datagrams whose moved-partition hint found no chunk there, sent back to the chunk's home slot") \
  X(hints_issued, "NOTICEs relocated telling a member the spare slot of its chunk (the slot hint)") \
  X(hint_refused, "datagrams whose slot hint names a spare slot that does not hold their chunk (dropped)") \
  X(slot_busy, "contributions refused with NACK slot_busy: no spare slot free, or the escalation ring full") \
  X(conflicts_to_ps, "collided contributions with no spare slot sent to the job's parameter node marked CONFLICT") \
  X(conflicts_up, "chunks with no slot here sent up as missing: a partial of the op's identity (first data at the root) listing every member, whose data follows as late data") \
  X(stale_slots, "slots taken over after aggregation.stale_slot_ms (a member died or its ACK was lost), or swept then with the contributions they held") \
  X(rejected, "contributions whose member, type, op, scale or size did not fit")      \
  X(addr_low_mismatches, "contributions whose addr_low differs from their chunk's first (NACK addr_low_mismatch)") \
  X(key_failures, "datagrams whose job key did not match")                            \
  X(unknown_jobs, "datagrams for a job not in the job table")                         \
  X(unsupported, "datagrams with an opcode this switch does not handle yet")          \
  X(handoffs, "contributions handed to the lcore that owns their slot")               \
  X(handoff_full, "contributions dropped because the owner's hand-off ring was full") \
  X(results_sent, "result copies sent to members")                                    \
  X(result_no_mbuf, "result copies not sent: mempool empty")                          \
  X(reduced_bytes, "payload bytes reduced into slots")                                \
  X(acks, "ACK datagrams (ack watermark only) received")                              \
  X(acks_relayed, "ACKs sent upstream because the members' smallest watermark moved")  \
  X(task_infos, "TASK_INFO datagrams accepted and echoed to their sender")            \
  X(task_info_conflicts, "task info that disagrees with the job the switch knows")    \
  X(registration_upcalls, "datagrams passed to the control thread to register a job") \
  X(registration_ring_full, "registrations refused (NACK rate_limited): the control thread's ring was full") \
  X(reinjected, "datagrams handed back by the control thread after registration")     \
  X(nacks_sent, "NACKs sent to the sender of a refused datagram")                     \
  X(nacks_suppressed, "NACKs and NOTICEs not sent: over the per-lcore answer rate limit") \
  X(held_notices, "retransmissions and QUERYs answered with a NOTICE that their slot waits for other members") \
  X(queries, "QUERYs: members asking after a chunk they sent")                         \
  X(missing_notices, "QUERYs answered with a NOTICE that the switch lacks the member's contribution") \
  X(gap_notices, "NOTICEs missing sent unasked: a member's later chunk arrived while an earlier chunk's slot still lacked it") \
  X(busy_notices, "NOTICEs missing sent unasked to the members a slot's chunk lacks while the slot refused another chunk (NACK slot_busy), or while the chunk at a refused member's ack watermark held its job's slot quota (NACK slot_quota): their data, or their resend after a refusal, was most likely lost") \
  X(asked_notices, "NOTICEs missing sent unasked to the members a slot's chunk lacks while a member it counted asked after the chunk: their data was most likely lost") \
  X(resync_notices, "NOTICEs missing (forgotten, to a child switch) sent unasked to a member that has the result of a chunk whose slot lacks its data: the result came from before the switch restarted") \
  X(forgotten_released, "complete slots given way on a root's NOTICE forgotten: the members' resends go up instead of being answered with the result") \
  X(partials_received, "partials from child switches counted into a slot")             \
  X(partials_sent, "partials sent to the upstream switch")                              \
  X(partials_resent, "partials sent again because a counted member retransmitted")     \
  X(partials_refused_above, "partials the upstream switch refused for now (NACK slot_quota, slot_busy, hold_quota, new_run): resent after the first gap") \
  X(runs_ended_above, "a job's runs the upstream switch ended (NACK run_ended about this switch's run label): ended here too, the members refused NACK run_ended") \
  X(partials_missing_above, "partials the upstream switch said it lacked (NOTICE missing): sent again at once, or, their slot gone, the chunk sent up as missing with a member's next data") \
  X(queries_up, "QUERYs sent to the upstream switch for a member whose chunk had no slot here") \
  X(results_left_with_tan, "complete results a root sent its TAN as first data lacking nothing when their slot gave way before every member had acknowledged them (two jobs held each other's oldest chunks back): the TAN keeps them for a member whose copy was lost") \
  X(results_kept, "complete results a root without a TAN kept when their slot gave way before every member had acknowledged them (two jobs held each other's oldest chunks back): a member whose copy was lost gets it from there") \
  X(kept_results_sent, "results sent from those a root kept, to a member that sent or asked about a chunk no slot held") \
  X(first_data_sent, "root results that missed members, sent to the TAN as first data") \
  X(timeouts, "slots whose timer expired before every member contributed")             \
  X(timers_postponed, "slot timers armed again: the partial could not list the members the slot lacked") \
  X(late_flagged, "late contributions that matched a bypass entry and were flagged")  \
  X(late_no_entry, "late contributions without a bypass entry, recognised by their forwarded slot") \
  X(late_counted, "late data from a child switch dropped: the chunk's slot here counted it in that child's partial") \
  X(late_repeats, "child switches' repeated partials holding only ranks their counted partial lacked, sent on as late data") \
  X(late_self_flagged, "contributions their sender flagged for bypass, or from an excluded member") \
  X(late_forwarded, "late datagrams forwarded towards the TAN unreduced")              \
  X(late_no_tan, "late datagrams dropped at the root: the job has no TAN")             \
  X(tan_busy, "first data (ring full) and late data (ring three quarters full) the root's own TAN could not take yet: the slot resends the one, the member the other") \
  X(at_ps_forwarded, "contributions marked AGGREGATE_AT_PS or CONFLICT forwarded towards the parameter node unreduced") \
  X(released_to_ps, "slots given up early: a contribution marked AGGREGATE_AT_PS found its chunk partly aggregated, whose partial went on") \
  X(no_parameter_node, "contributions marked AGGREGATE_AT_PS refused or dropped: the job's root has no parameter node") \
  X(results_down, "results received from upstream or the TAN and replicated to members") \
  X(distributions, "DISTRIBUTE datagrams from a job's main server replicated to every member") \
  X(distribution_copies, "copies of DISTRIBUTE datagrams sent to members")           \
  X(distribute_refused, "DISTRIBUTE datagrams refused: not from the job's main server (NACK not_main_server), or a member without an address yet (NACK members_unbound)") \
  X(stored, "contributions kept in the store (jobs in store or both mode)")          \
  X(store_replaced, "kept contributions overwritten by the member's next contribution to the same chunk") \
  X(store_full, "contributions refused (NACK store_full): the job's share of the store, or the switch's, was full") \
  X(fetches, "FETCHes answered with a kept contribution")                           \
  X(fetch_misses, "FETCHes answered NACK not_stored: no such contribution kept")    \
  X(store_released, "kept contributions freed by a FETCH with RELEASE")              \
  X(final_deliveries, "final results the root began delivering to a job's main server") \
  X(final_resends, "final results sent to the main server again: no ACK yet")       \
  X(final_acked, "final results the main server ACKed")                             \
  X(final_given_up, "final results given up: no ACK from the main server within aggregation.store.final_timeout_ms") \
  X(final_ack_unmatched, "main server ACKs of a final result not in delivery here: ACKed before, given up, or never sent") \
  X(final_refused, "final results not delivered: no store buffer or delivery entry free, or no main server") \
  X(final_deferred, "contributions that would complete a FINAL chunk refused for now (NACK store_full), or FINAL results from above dropped to come again: no delivery entry or store buffer free for the job; its main server is told (NACK store_full)") \
  X(results_refused, "results not from the job's upstream or TAN")                     \
  X(verify_sent, "complete results sent to the parameter node to be checked (VERIFY)") \
  X(exceptions_down, "EXCEPTION_RETRANSMITs (a saturated sum, to be redone in float32) received from upstream or the parameter node and replicated to members") \
  X(unverified_results, "results of a job in verify mode dropped: from its parameter node, but neither VERIFIED nor INCOMPLETE nor OVERFLOW") \
  X(unresolved_next_hop, "datagrams dropped: the upstream or TAN address is not resolved yet") \
  X(missing_list_overflow, "partials that could not carry their missing list; members got an incomplete result") \
  X(incomplete_results, "results sent with the INCOMPLETE flag")                        \
  X(notices_sent, "NOTICEs telling a member to start or stop flagging its data")        \
  X(bypass_created, "bypass entries written for the members a slot went on without")         \
  X(bypass_matched, "bypass entries matched by late data and deleted")                  \
  X(bypass_expired, "bypass entries removed once their TTL passed (aggregation.bypass.ttl_ms, or shorter)") \
  X(bypass_full, "bypass entries not written: the table was full")                      \
  X(control_tx, "frames the control thread sent through this lcore (ARP requests)")     \
  X(neighbor_reports, "ARP replies passed to the control thread")                        \
  X(neighbor_ring_full, "ARP replies not passed up: the neighbor ring was full")          \
  X(member_rebinds, "members bound to a new address after the old one was silent for aggregation.member_rebind_ms") \
  X(member_refused, "datagrams claiming a member bound to another address, refused (NACK member_bound)") \
  X(main_server_refused, "DISTRIBUTE, FETCH or final ACK from the main server's address but not the port, VLAN or MAC it is bound to (NACK not_main_server)") \
  X(new_run, "datagrams with a new incarnation for a member of a job: a new run, started by the control thread (NACK new_run)") \
  X(run_ended, "datagrams of a job's run that a newer run replaced, refused (NACK run_ended) or dropped") \
  X(results_lost, "queries after a float sum's chunk whose result only some members hold, and that this root would reduce again in another order: refused (NACK result_lost)") \
  X(late_content_listed, "child switches' late partials sent on naming the ids they hold (CONTENT): their covered ids were listed as missing") \
  X(excluded_sent_on, "aggregating slots sent on as their timer would: every member they awaited was excluded by a straggler prediction applied since") \
  X(up_unlabelled, "partials, first data, late data and data for the parameter node not sent up yet: their job has no run label (a member has not sent in this generation)") \
  X(slot_quota_refused, "chunks refused for lying too far ahead of their job's slowest member (NACK slot_quota)") \
  X(hold_refused, "contributions an ordered slot could not hold: the job's hold quota or the hold pool was used up (NACK hold_quota)") \
  X(slots_kept, "forwarded slots that keep their chunk: they lack members that no bypass entry records (the table was full, or the member is a predicted straggler), and only the slot does") \
  X(held_without_slot, "questions and resends of chunks no slot held, answered held: a partial that went up from here counted the member, and the parent is asked after it")

enum class AggCounter : uint8_t {
#define AGG_AGG_COUNTER_ENUM(name, help) name,
  AGG_AGGREGATION_COUNTERS(AGG_AGG_COUNTER_ENUM)
#undef AGG_AGG_COUNTER_ENUM
      kCount
};
inline constexpr size_t kNumAggCounters = static_cast<size_t>(AggCounter::kCount);

struct AggCounterText {
  const char* name;
  const char* help;
};
inline constexpr AggCounterText kAggCounterText[kNumAggCounters] = {
#define AGG_AGG_COUNTER_TEXT(name, help) {#name, help},
    AGG_AGGREGATION_COUNTERS(AGG_AGG_COUNTER_TEXT)
#undef AGG_AGG_COUNTER_TEXT
};

struct AggregationCounters {
#define AGG_AGG_COUNTER_FIELD(name, help) Counter name;
  AGG_AGGREGATION_COUNTERS(AGG_AGG_COUNTER_FIELD)
#undef AGG_AGG_COUNTER_FIELD

  // Every counter's value, indexed by AggCounter. [any]
  void Read(uint64_t (&out)[kNumAggCounters]) const {
    size_t i = 0;
#define AGG_AGG_COUNTER_READ(name, help) out[i++] = name.Get();
    AGG_AGGREGATION_COUNTERS(AGG_AGG_COUNTER_READ)
#undef AGG_AGG_COUNTER_READ
  }
};

// Per job (indexed by aggregator::Job::index()), per lcore: what the
// aggregation path did for that job. The control thread zeroes a job index's
// counters when the job table reclaims the job, before the index is reused, so
// a job's counters start at 0 (JobTable::SetReclaimHook).
#define AGG_JOB_COUNTERS(X)                                                              \
  X(contributions, "contributions counted into a slot")                                 \
  X(completions, "chunks completed and sent to every member")                           \
  X(duplicates, "contributions from a member already counted, answered or dropped")    \
  X(collisions, "contributions whose slot held another chunk (escalated, or refused with NACK slot_busy)") \
  X(key_failures, "datagrams with the job's id and the wrong key")                      \
  X(reduced_bytes, "payload bytes reduced")                                              \
  X(member_refused, "datagrams claiming a member bound to another address")              \
  X(quota_refused, "contributions refused over the job's slot or hold quota")

enum class JobCounter : uint8_t {
#define AGG_JOB_COUNTER_ENUM(name, help) name,
  AGG_JOB_COUNTERS(AGG_JOB_COUNTER_ENUM)
#undef AGG_JOB_COUNTER_ENUM
      kCount
};
inline constexpr size_t kNumJobCounters = static_cast<size_t>(JobCounter::kCount);
inline constexpr AggCounterText kJobCounterText[kNumJobCounters] = {
#define AGG_JOB_COUNTER_TEXT(name, help) {#name, help},
    AGG_JOB_COUNTERS(AGG_JOB_COUNTER_TEXT)
#undef AGG_JOB_COUNTER_TEXT
};

struct alignas(64) JobCounters {
#define AGG_JOB_COUNTER_FIELD(name, help) Counter name;
  AGG_JOB_COUNTERS(AGG_JOB_COUNTER_FIELD)
#undef AGG_JOB_COUNTER_FIELD

  // Adds every counter's value to out[], indexed by JobCounter. [any]
  void AddTo(uint64_t (&out)[kNumJobCounters]) const {
    size_t i = 0;
#define AGG_JOB_COUNTER_READ(name, help) out[i++] += name.Get();
    AGG_JOB_COUNTERS(AGG_JOB_COUNTER_READ)
#undef AGG_JOB_COUNTER_READ
  }
  // Only when no lcore can write them (the job is reclaimed). [control]
  void Reset() {
#define AGG_JOB_COUNTER_RESET(name, help) name.Reset();
    AGG_JOB_COUNTERS(AGG_JOB_COUNTER_RESET)
#undef AGG_JOB_COUNTER_RESET
  }
};
static_assert(sizeof(JobCounters) == 64, "one cache line per job and lcore");

// Slot completion latency: first contribution to the result sent, as a
// Prometheus histogram. Buckets are not cumulative here (the renderer sums
// them); the last one is +Inf. Written once per completed chunk.
inline constexpr double kSlotLatencyBoundsSeconds[] = {
    1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3,
    2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1,  0.2,  0.5,  1.0};
inline constexpr size_t kSlotLatencyBuckets = std::size(kSlotLatencyBoundsSeconds) + 1;

struct LatencyHistogram {
  Counter buckets[kSlotLatencyBuckets];
  Counter sum_cycles;  // TSC cycles; the renderer divides by the TSC rate
  Counter count;
};

// Why a datagram on the aggregation path is not a valid one: its IPv4 or UDP
// header, then the aggregation header's checks (aggregator/wire.h). One
// counter each per lcore, aggswitch_aggregation_malformed_total{reason}
// summed over them. X(name, label, help).
#define AGG_MALFORMED_REASONS(X)                                                       \
  X(kNotIpv4Udp, "not_ipv4_udp", "not IPv4 carrying UDP")                              \
  X(kBadIpv4Udp, "bad_ipv4_udp", "IPv4 or UDP version, lengths or header checksum wrong") \
  X(kFragment, "fragment", "an IPv4 fragment")                                         \
  X(kSegmented, "segmented", "a result from above in more than one mbuf segment")      \
  AGG_WIRE_ERRORS(X)

enum class MalformedReason : uint8_t {
#define AGG_MALFORMED_ENUM(name, label, help) name,
  AGG_MALFORMED_REASONS(AGG_MALFORMED_ENUM)
#undef AGG_MALFORMED_ENUM
      kCount
};
inline constexpr size_t kNumMalformedReasons = static_cast<size_t>(MalformedReason::kCount);
inline constexpr AggCounterText kMalformedText[kNumMalformedReasons] = {
#define AGG_MALFORMED_TEXT(name, label, help) {label, help},
    AGG_MALFORMED_REASONS(AGG_MALFORMED_TEXT)
#undef AGG_MALFORMED_TEXT
};
// The wire parser's reasons come last, in its order.
inline constexpr MalformedReason MalformedFrom(aggregator::WireError e) {
  return static_cast<MalformedReason>(static_cast<size_t>(MalformedReason::kTruncated) +
                                      static_cast<size_t>(e) -
                                      static_cast<size_t>(aggregator::WireError::kTruncated));
}
static_assert(MalformedFrom(aggregator::WireError::kCountMismatch) == MalformedReason::kCountMismatch);

// What in-band telemetry (int_stage.h) did on one lcore: the field, the
// API key and the metric aggswitch_int_<name>_total. X(name, help).
#define AGG_INT_COUNTERS(X)                                                     \
  X(watched, "Datagrams from edge ports the watch list chose for INT (this switch their first hop).") \
  X(transit, "Datagrams with INT received from fabric ports.")                 \
  X(inserted, "Datagrams that left for a fabric port with INT headers this switch inserted.") \
  X(stripped, "Datagrams whose INT this switch removed before an edge port (the host gets the original).") \
  X(exported, "Hop records queued for a Telemetry Report to the collector.")   \
  X(no_room, "Chosen datagrams sent on without INT: the headers did not fit the egress MTU or the buffer.") \
  X(hops_exhausted, "Datagrams with INT whose hop budget was spent (flag E set, no record).")

struct IntCounters {
#define AGG_INT_COUNTER_FIELD(name, help) Counter name;
  AGG_INT_COUNTERS(AGG_INT_COUNTER_FIELD)
#undef AGG_INT_COUNTER_FIELD
  // Hop records lost, the ring to the control thread full: reports dropped
  // (aggswitch_int_reports_dropped_total{reason="ring_full"}).
  Counter records_lost;
};

// What the control thread's INT exporter (control/int_exporter.h) did.
struct IntExportCounters {
  Counter reports_sent;
  Counter send_failed;  // reports dropped: the socket refused them
};

struct LcoreCounters {
#define AGG_LCORE_COUNTER_FIELD(name, help) Counter name;
  AGG_LCORE_COUNTERS(AGG_LCORE_COUNTER_FIELD)
#undef AGG_LCORE_COUNTER_FIELD
  AggregationCounters agg;
  Counter malformed[kNumMalformedReasons];  // aggregation datagrams refused, by MalformedReason
  LatencyHistogram slot_latency;
  IntCounters int_;
};

struct alignas(64) LcoreStats {
  LcoreCounters lcore;
  alignas(64) PortCounters ports[config::kMaxPorts];
  // aggregation.max_jobs entries when aggregation is on, indexed by Job::index().
  std::unique_ptr<JobCounters[]> jobs;
};

}  // namespace aggswitch::dataplane
