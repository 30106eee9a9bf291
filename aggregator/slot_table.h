// Aggregation slots: the per-lcore state machine that turns contributions of
// one (job, seq) into one result.
//
// Slot placement (slot_placement.h) spreads chunks over the slot space; slot
// i belongs to worker `i % n_workers` and is slot `i / n_workers` of that
// worker's SlotTable. Only the owner touches a slot, so a slot needs no lock: a
// contribution that arrives on another lcore is handed to the owner over a ring
// (the dataplane does that). Memory is allocated once, when the table is built.
//
// A slot goes Free -> Aggregating (first contribution) -> Complete (the
// needed number of distinct members contributed). In a job tree
// (docs/stragglers.md) a slot whose result went upstream as a partial, or
// whose timer expired, is Forwarded: free for any other chunk at once, but
// until one takes it, it still tells a counted member's retransmission from
// a late member's data. A complete slot keeps its
// result, so a member that retransmits gets it again, until the caller says
// every member has moved past the chunk (its ack watermark); only then may a
// different (job, seq) take the slot. Until then a new chunk that hashes onto it
// is a collision.
//
//   SlotTable slots(SlotTableConfig{.slots = 1024, .max_fan_in = 256, .max_payload = 1424});
//   SlotUpdate u = slots.Contribute(local_index, c, now_tsc, release_check);
//   if (u.outcome == SlotOutcome::kCompleted) send u.slot->result() to every member;
//
// Thread safety: a SlotTable is owned by one worker lcore; every method is
// [owner lcore] except the constructor [control]. The read-only accessors on
// Slot may also be used by the owner only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "aggregator/timer_wheel.h"
#include "common/huge_region.h"
#include "aggregator/types.h"

namespace aggswitch::aggregator {

struct SlotTableConfig {
  uint32_t slots = 1024;     // slots in this table (this worker's share)
  uint16_t max_fan_in = 256;  // distinct members one slot can count
  uint32_t max_payload = 1424;  // payload bytes per chunk (what a 1500-byte MTU holds)
  // Timer wheel bucket width, 2^timer_tick_shift TSC cycles, and bucket
  // count (a power of two). Deadlines come with each contribution
  // (Contribution::timeout_cycles).
  uint32_t timer_tick_shift = 18;
  uint32_t timer_buckets = 1024;
  // Ids from children's missing lists one slot can carry on (the rest make
  // the slot's missing list overflow, Slot::inherited_overflow()).
  uint16_t max_inherited = 64;
  // A slot whose first contribution is older than this (TSC cycles) gives
  // way to another chunk, whatever its state; 0: never.
  uint64_t stale_cycles = 0;
  // A forwarded slot answers its members' retransmissions and queries by
  // resending its partial, at most once per this many TSC cycles since the
  // partial last went up (members ask in rounds, all at about the same
  // time), the gap doubling with each resend up to kMaxResendBackoff times
  // (an answer from above may take longer than one gap: a parameter node
  // checking the chunk); the other repeats are duplicates. 0: every repeat
  // resends.
  uint64_t resend_gap_cycles = 0;
};

// One contribution, parsed and checked against its job by the caller.
struct Contribution {
  uint32_t job_id = 0;
  // Which registration of the job (Job::generation): a job removed and
  // registered again under the same id never meets its old chunks.
  uint32_t job_generation = 0;
  uint32_t seq = 0;
  uint16_t node = 0;        // member index, < expected
  uint16_t expected = 0;    // members the job has at this switch
  // Members the slot waits for: expected minus the excluded ones (predicted
  // stragglers); 0 means expected.
  uint16_t needed = 0;
  // A child switch's partial: the node ids its missing list names
  // (big-endian pairs, as on the wire), carried on by this slot.
  const uint8_t* missing = nullptr;
  uint8_t missing_count = 0;
  // That partial holds nobody's data (flags::kConflict: the chunk found no
  // slot at the child and went up as missing): what it lists is the child's
  // whole share, which the slot remembers as such (Slot::InheritedShare).
  bool holds_nobody = false;
  // The first contribution arms the slot's timer: deadline = now + this; 0: none.
  uint64_t timeout_cycles = 0;
  // The members asked for member order (flags::kOrdered): every
  // contribution to the slot must say the same, and the slot's partial
  // says it on.
  bool ordered = false;
  // Keep the contributions until all are in and reduce them in member
  // order: the job's batch trigger, or `ordered` (the switch's own choice
  // need not match the other switches').
  bool hold = false;
  // The member marked the chunk final (flags::kFinal): the slot carries
  // the mark to its partial, and at the root to the job's main server.
  bool final = false;
  // The datagram says a sum saturated on its way here (flags::kOverflow: a
  // child switch's partial): the slot's result carries it on, as if it had
  // saturated here.
  bool overflow = false;
  // A retransmission, or a partial that says its chunk had one
  // (flags::kRecovered): the slot's result says so on.
  bool recovered = false;
  DType dtype = DType::kInt32;
  ReduceOp op = ReduceOp::kSum;
  int8_t scale = 0;
  uint16_t elem_count = 0;
  // The chunk's first element within its allreduce (`aux`; docs/protocol.md):
  // the first contribution's is carried on in the partial and the result.
  uint32_t elem_offset = 0;
  // The low bits of the sender's buffer address (docs/protocol.md): every
  // member of a chunk must carry the chunk's first contribution's.
  uint32_t addr_low = 0;
  const uint8_t* payload = nullptr;  // elem_count elements of dtype
  // Ordered jobs only: the buffer holding `payload`, kept alive by the caller
  // until the slot completes and hands it back (SlotUpdate::released).
  void* handle = nullptr;
};

enum class SlotOutcome : uint8_t {
  kAccumulated,         // counted, more members to come
  kHeld,                // holding slot (Contribution::hold): counted, `handle` now belongs to the slot
  kCompleted,           // this contribution completed the slot: send the result to every member
  kDuplicate,           // this member was already counted; drop it
  kWaiting,             // this member was already counted and the slot still waits for others
  kDuplicateCompleted,  // already complete: send the cached result to this member only
  kCollision,           // another chunk holds the slot and is still needed; drop it
  kMismatch,            // type, op, scale, length or ordering differ from the slot's first contribution
  kAddrLowMismatch,     // addr_low differs from the slot's first contribution's
  kForwardedAgain,      // the slot's partial went upstream and this member was counted: resend it
                        // (a repeat within the resend gap is kDuplicate: SlotTableConfig)
  kLateForwarded,       // the slot's partial went upstream without this member: its data is late
  kBadMember,           // node >= expected, or expected > max_fan_in
  kTooLarge,            // the payload exceeds max_payload
};

class Slot {
 public:
  // kForwarded: the partial went upstream (or the first data to the TAN);
  // the slot gives way to any other chunk at once but, until then, still
  // knows who was counted.
  enum class State : uint8_t { kFree, kAggregating, kComplete, kForwarded };

  State state() const { return state_; }
  uint32_t job_id() const { return job_id_; }
  uint32_t job_generation() const { return job_generation_; }
  uint32_t seq() const { return seq_; }
  uint16_t count() const { return count_; }
  uint16_t expected() const { return expected_; }
  uint16_t needed() const { return needed_; }
  // Node ids inherited from children's missing lists.
  uint16_t inherited_count() const { return inherited_count_; }
  uint16_t inherited(uint16_t i) const { return inherited_[i]; }
  // Whether inherited id i came in member `member`'s partial that held
  // nobody's data: one of the ids of that child's whole share, which a
  // later partial of the same child may hold (a child that covers only
  // itself, as an in-band leaf does at its root, names no ranks otherwise).
  bool InheritedShare(uint16_t i, uint16_t member) const {
    return inherited_from_[i] == (member | kWholeShare);
  }
  bool inherited_overflow() const { return inherited_overflow_; }
  bool ordered() const { return ordered_; }
  // It keeps its contributions and reduces them at completion (Contribution::hold).
  bool holds() const { return hold_; }
  DType dtype() const { return dtype_; }
  ReduceOp op() const { return op_; }
  int8_t scale() const { return scale_; }
  uint16_t elem_count() const { return elem_count_; }
  uint32_t elem_offset() const { return elem_offset_; }
  // The addr_low of its first contribution: every counted one carries the same.
  uint32_t addr_low() const { return addr_low_; }
  bool overflow() const { return overflow_; }
  // A counted contribution was a retransmission (Contribution::recovered),
  // or the result that came down says one was (flags::kRecovered).
  bool recovered() const { return recovered_; }
  // A counted contribution carried flags::kFinal.
  bool final() const { return final_; }
  // kComplete with a result that came down from upstream or the TAN
  // (CacheResult), not one this slot reduced: whoever made it keeps it.
  bool came_down() const { return came_down_; }
  // kForwarded to be checked by the parameter node (MarkForwarded with
  // hold): the slot does not give way until the answer comes.
  bool verifying() const { return verifying_; }
  // kForwarded, but it lacks members whose bypass entries could not be
  // written (the table was full): only the slot records them, so it gives
  // way only as an aggregating slot would (KeepForwarded).
  bool kept() const { return kept_; }
  uint64_t first_tsc() const { return first_tsc_; }
  // When the slot times out (TSC); 0: never.
  uint64_t deadline_tsc() const { return deadline_tsc_; }
  // Complete slots: the result payload, elem_count elements of dtype, wire format.
  const uint8_t* result() const { return result_view_; }
  uint32_t result_len() const { return elem_count_ * static_cast<uint32_t>(ElementSize(dtype_)); }
  bool HasContributed(uint16_t node) const {
    return (bitmap_[node >> 6] >> (node & 63)) & 1;
  }
  // When member `node`'s contribution arrived, in TSC cycles after the
  // first one (2^kOffsetShift-cycle units, saturating); valid when it
  // contributed. Straggler prediction reads it.
  static constexpr uint32_t kOffsetShift = 6;
  uint32_t arrival_offset(uint16_t node) const { return offsets_[node]; }

 private:
  friend class SlotTable;
  State state_ = State::kFree;
  bool ordered_ = false;
  bool hold_ = false;
  bool overflow_ = false;
  bool recovered_ = false;
  bool final_ = false;
  bool came_down_ = false;
  bool verifying_ = false;
  bool kept_ = false;
  // Its partial was refused above for now (RefusedAbove) and its timer is
  // armed to send it again (RetryRefused).
  bool retry_ = false;
  // kForwarded: the refused partial's retries since a member last sent to the
  // slot or asked after it (RetryRefused; at most kMaxRefusedRetries).
  uint8_t retries_ = 0;
  // The chunk this slot last gave up stale while it still aggregated (swept,
  // or taken over by another chunk), and the members it had counted: kept
  // apart from the slot's own chunk, so that another chunk using the slot in
  // between does not forget it (SlotTable::GivenUpTo).
  bool gone_ = false;
  uint32_t gone_job_id_ = 0;
  uint32_t gone_generation_ = 0;
  uint32_t gone_seq_ = 0;
  uint64_t gone_tsc_ = 0;            // when it was given up
  uint64_t* gone_bitmap_ = nullptr;  // max_fan_in bits: the members it had counted
  DType dtype_ = DType::kInt32;
  ReduceOp op_ = ReduceOp::kSum;
  int8_t scale_ = 0;
  uint32_t job_generation_ = 0;
  uint16_t expected_ = 0;
  uint16_t needed_ = 0;
  uint16_t count_ = 0;
  uint16_t inherited_count_ = 0;
  bool inherited_overflow_ = false;
  uint16_t* inherited_ = nullptr;   // max_inherited node ids
  // Per inherited id: the member index whose partial listed it, with
  // kWholeShare set when that partial held nobody's data.
  static constexpr uint16_t kWholeShare = 0x8000;
  uint16_t* inherited_from_ = nullptr;
  uint32_t* offsets_ = nullptr;     // max_fan_in arrival offsets
  uint16_t elem_count_ = 0;
  uint32_t elem_offset_ = 0;
  uint32_t addr_low_ = 0;
  uint32_t job_id_ = 0;
  uint32_t seq_ = 0;
  uint64_t first_tsc_ = 0;
  uint64_t deadline_tsc_ = 0;
  // kForwarded: when the partial last went up; kComplete: when the result
  // was made or came down (its age, for stale_cycles).
  uint64_t resent_tsc_ = 0;
  uint8_t resends_ = 0;             // kForwarded: resends so far (the gap's backoff)
  // kAggregating: when its absent members were last told (TellAbsent; its
  // first contribution's time until then), and how often (the backoff).
  uint64_t told_tsc_ = 0;
  uint8_t tolds_ = 0;
  uint64_t* bitmap_ = nullptr;      // max_fan_in bits
  uint8_t* acc_ = nullptr;          // 2 x max_payload: 16-bit floats accumulate as float32
  uint8_t* result_ = nullptr;       // max_payload
  // What result() shows: acc_ for the types that accumulate in their wire
  // format (no copy at completion), else result_.
  const uint8_t* result_view_ = nullptr;
  const uint8_t** held_payload_ = nullptr;  // ordered: per member
  void** held_handle_ = nullptr;            // ordered: per member
};

// What a contribution did. `released` lists the handles an ordered slot gives
// back at completion (the caller frees them); it points into the table and is
// valid until the next call.
struct SlotUpdate {
  SlotOutcome outcome = SlotOutcome::kBadMember;
  Slot* slot = nullptr;
  void* const* released = nullptr;
  uint16_t n_released = 0;
  // The handles an evicted ordered slot still held (its chunk is given up):
  // the caller frees them.
  void* const* evicted = nullptr;
  uint16_t n_evicted = 0;
  bool stale = false;      // this contribution took over a stale slot
  bool saturated = false;  // an int32 sum saturated in this step
};

// Whether the slot of (job_id, job_generation, seq) may be freed for another
// chunk. A complete slot: when every member's ack watermark is past seq, or
// that registration of the job no longer exists. An aggregating one
// (complete = false): only when the job registration no longer exists.
using ReleaseCheck = bool (*)(void* ctx, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                              bool complete);

class SlotTable {
 public:
  // Allocates every slot's bitmap, accumulator, result and hold arrays. [control]
  explicit SlotTable(const SlotTableConfig& config);
  ~SlotTable();
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  // Counts and reduces one contribution into slot `local_index`. A member
  // of a chunk the slot gave up stale (SweepStale, or taken over by another
  // chunk) finds it busy (kCollision) for stale_cycles after that, whichever
  // chunk holds the slot meanwhile, unless the member the chunk lacked
  // claimed it again first. [owner lcore]
  SlotUpdate Contribute(uint32_t local_index, const Contribution& c, uint64_t now_tsc,
                        ReleaseCheck can_release, void* release_ctx);
  // Frees a complete slot whose result is no longer needed. [owner lcore]
  void Release(uint32_t local_index);
  // Whether `c` would complete slot `local_index`: the slot aggregates c's
  // chunk and waits for c's member last. An ordered slot reduces such a
  // contribution at once, so it need not be kept past the call. [owner lcore]
  bool CompletesWith(uint32_t local_index, const Contribution& c) const {
    const Slot& s = slots_[local_index];
    return s.state_ == Slot::State::kAggregating && s.job_id_ == c.job_id &&
           s.job_generation_ == c.job_generation && s.seq_ == c.seq && c.node < s.expected_ &&
           !s.HasContributed(c.node) && s.count_ + 1u == s.needed_;
  }

  // --- Timers and the tree (docs/stragglers.md) [owner lcore] ---

  // Up to `budget` slots whose deadline has passed, into `out`; their timers
  // are disarmed. Bounded work per call.
  uint32_t Expired(uint64_t now_tsc, uint32_t budget, uint32_t* out);
  // Reduces what an aggregating slot holds (a batch slot: its contributions
  // in member order) into its result and moves it to kForwarded. The held
  // handles come back in `released`. Returns false (nothing done) for a slot
  // that is not aggregating.
  bool Expire(uint32_t local_index, SlotUpdate* u);
  // Arms an aggregating slot's timer again in place of expiring it, as far
  // past `now_tsc` as its deadline was past its first contribution: each
  // postponement doubles the wait. Returns false (nothing done) for a slot
  // that is not aggregating or has no timer.
  bool Postpone(uint32_t local_index, uint64_t now_tsc);
  // A complete slot whose result went upstream (or to the TAN) as a partial:
  // it now gives way to any other chunk. With `hold` (its result went to the
  // parameter node as VERIFY), it gives way only as an aggregating slot
  // would (the release check says the job is done with it, or it is stale)
  // until CacheResult.
  void MarkForwarded(uint32_t local_index, uint64_t now_tsc, bool hold = false);
  // The final result of a forwarded slot came down from upstream (or the
  // TAN): kept as the slot's result (kComplete) when the slot still holds
  // chunk (job_id, job_generation, seq) and the length matches; the result
  // ages (SlotTableConfig::stale_cycles) from `now_tsc`. Returns whether.
  // An aggregating slot of the chunk takes it too: members' resends claimed
  // the chunk a slot again after its first slot went up and gave way, and
  // the result covers every member, those it counted included. It would
  // otherwise wait for members that have the result and send no more, and
  // tell one whose copy was lost "held" until its timeout. Its timer is
  // disarmed, and the contributions a holding slot kept come back in
  // `released` (and `n_released`); without `released`, a holding slot that
  // aggregates is left as it is (false). `recovered`: the result says some
  // member's data came in a retransmission (flags::kRecovered).
  bool CacheResult(uint32_t local_index, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                   const uint8_t* payload, uint32_t len, bool overflow, uint64_t now_tsc,
                   SlotUpdate* released = nullptr, bool recovered = false);
  // Forwarded slot `local_index` lacks members that nothing else records
  // (their bypass entries could not be written): it keeps its chunk, giving
  // way only as an aggregating slot would (the job is done with it, or it is
  // stale), so that their late data is still known for late (kLateForwarded)
  // and never starts the chunk again here, until the result comes down
  // (CacheResult). Nothing for a slot that is not forwarded.
  void KeepForwarded(uint32_t local_index) {
    Slot& s = slots_[local_index];
    if (s.state_ == Slot::State::kForwarded) s.kept_ = true;
  }
  // A counted member asks after forwarded slot `local_index` (a QUERY):
  // whether its partial (or VERIFY) should go on again now, as it does for
  // the member's resent data (kForwardedAgain): once the resend gap has
  // passed (SlotTableConfig::resend_gap_cycles). [owner lcore]
  bool ResendForwarded(uint32_t local_index, uint64_t now_tsc);
  // The parent refused forwarded slot `local_index`'s partial for now (a
  // NACK slot quota, slot busy, hold quota or new run): nothing was lost, so
  // the resend gap goes back to its first, counted from `now_tsc`, and the
  // next retransmission or query of a member after it sends the partial
  // again, as a client sends its data again soon after such a NACK. Backed
  // off, a chunk the parent's quota refused waited up to 32 gaps after the
  // quota had room. The slot, the partial's only copy now, keeps its chunk
  // as KeepForwarded says, until the answer comes down. Returns whether the
  // slot is forwarded and holds chunk (job_id, job_generation, seq).
  // [owner lcore]
  // `retry`: the refusal says "not now" (slot quota, slot busy, hold
  // quota): the slot's timer is armed for one resend gap, and when it fires
  // (RetryRefused) the partial goes again without waiting for a member. The
  // members were all counted and know nothing of the refusal: they ask
  // again only at their backed-off retransmission timeout, hundreds of
  // milliseconds while the job stood still (seed 1303202). The timer goes
  // kMaxRefusedRetries times after a member last sent to the slot or asked
  // after it, and no more: members that still wait have asked again by then
  // and start the retries anew, and the partial of members that stopped
  // waiting (a crashed rank's job, its ranks told why) is not sent, and its
  // bypass entries written, forever.
  bool RefusedAbove(uint32_t local_index, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                    uint64_t now_tsc, bool retry = false);
  // Slot `local_index`'s timer fired (Expired): whether it is a forwarded
  // slot whose refused partial should go again now (RefusedAbove with
  // `retry`). The resend gap counts from `now_tsc`, so that a member's
  // resend or query right after it does not send the partial once more.
  // [owner lcore]
  bool RetryRefused(uint32_t local_index, uint64_t now_tsc);
  // The parent says it lacks forwarded slot `local_index`'s partial (a
  // NOTICE missing): it was lost on the way, and no member may ask again
  // (the excluded ones' data goes around the slot). Whether it goes again
  // now: once the first resend gap has passed since it last went, so that
  // a burst of notices sends it once; its backoff is left as it is. The
  // slot, the partial's only copy, keeps its chunk as KeepForwarded says,
  // until the answer comes down. False when the slot is not forwarded or
  // holds another chunk. [owner lcore]
  bool MissedAbove(uint32_t local_index, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                   uint64_t now_tsc);
  // Another chunk was refused slot `local_index` (NACK slot_busy: the slot
  // holds this chunk and no spare slot is free): whether to tell the members
  // the slot's chunk still lacks, now, that their data is missing (NOTICE
  // missing). A member whose data, or whose resend after a refusal of its
  // own, was lost would otherwise ask again only at its backed-off timeout
  // (up to a second), and the refused chunks wait that long behind it. Yes
  // when the slot aggregates (or its partial went up and awaits the answer:
  // the members it lacked send their data on as late data) and a resend
  // gap has passed since its first contribution (the members' first sends
  // are on their way before that),
  // then after twice that gap since it last said yes, doubling up to
  // kMaxResendBackoff times (a dead member's chunk, which holds the slot
  // until it goes stale, costs a few dozen notices, not one per gap); the
  // time is noted. [owner lcore]
  bool TellAbsent(uint32_t local_index, uint64_t now_tsc);
  // The first gap between two sends of a forwarded slot's partial.
  uint64_t resend_gap_cycles() const { return config_.resend_gap_cycles; }
  // Frees the holding slots among the next `budget` (from a cursor that
  // wraps around the table) whose chunk is older than stale_cycles while
  // it still aggregates: a member died, or will never send it. Such a slot
  // would give way to the next chunk that needs it anyway; swept, it also
  // gives back the contributions it held (into `handles`, at most
  // `max_handles`; a slot whose handles would not all fit waits for the
  // next call), so that a dead chunk does not keep pool buffers that live
  // chunks wait for. Returns the handles written; `*evicted` counts the
  // slots freed. A freed slot remembers the chunk and the members it had
  // counted, as one taken over stale by another chunk does: their
  // contributions to that chunk find the slot busy (kCollision) for
  // stale_cycles, whether it is free or other chunks use it meanwhile,
  // until a member the chunk lacked claims it (GivenUpTo). The chunk waits
  // for a member that has not sent for stale_cycles; claimed again by the
  // members it had, it held the slot that long once more, and other jobs'
  // chunks that needed it waited again, as many times as those members
  // asked before their own timeout. [owner lcore]
  uint32_t SweepStale(uint64_t now_tsc, uint32_t budget, void** handles, uint32_t max_handles,
                      uint32_t* evicted);
  // The resend gap doubles this many times at most (32 gaps).
  static constexpr uint8_t kMaxResendBackoff = 5;
  // A refused partial goes again on its timer this many times at most
  // after a member last sent or asked (RefusedAbove): a second at the 5 ms
  // resend gap, a client's longest retransmission timeout.
  static constexpr uint8_t kMaxRefusedRetries = 200;
  uint32_t armed_timers() const { return timers_.size(); }

  const Slot& slot(uint32_t local_index) const { return slots_[local_index]; }
  // The index of `s`, a slot of this table. [any]
  uint32_t IndexOf(const Slot& s) const { return static_cast<uint32_t>(&s - &slots_[0]); }
  // Slot `local_index` when it holds chunk (job_id, job_generation, seq);
  // else null. [owner lcore]
  const Slot* Holding(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                      uint32_t seq) const {
    const Slot& s = slots_[local_index];
    const bool same = s.state_ != Slot::State::kFree && s.job_id_ == job_id &&
                      s.job_generation_ == job_generation && s.seq_ == seq;
    return same ? &s : nullptr;
  }
  // Starts fetching what a contribution of `payload_len` bytes to slot
  // `local_index` touches: the slot, its bitmap and arrival offsets, and
  // (for writing) its accumulator. Addresses only; reads nothing. [owner lcore]
  void Prefetch(uint32_t local_index, uint32_t payload_len) const {
    const auto* slot = reinterpret_cast<const char*>(&slots_[local_index]);
    __builtin_prefetch(slot, 1);
    __builtin_prefetch(slot + sizeof(Slot) - 1, 1);
    __builtin_prefetch(&bitmaps_[size_t{local_index} * bitmap_words_], 1);
    __builtin_prefetch(&offsets_arena_[size_t{local_index} * config_.max_fan_in], 1);
    const uint8_t* acc = &acc_arena_[size_t{local_index} * 2 * config_.max_payload];
    for (uint32_t off = 0; off < payload_len; off += 64) __builtin_prefetch(acc + off, 1);
  }
  uint32_t size() const { return config_.slots; }
  // Slots not Free, and of those Complete (holding a result). [any]
  uint32_t busy() const { return busy_.load(std::memory_order_relaxed); }
  uint32_t complete() const { return complete_.load(std::memory_order_relaxed); }

 private:
  void Claim(uint32_t local_index, Slot& s, const Contribution& c, uint64_t now_tsc);
  // Slot `s` gives up its aggregating chunk as stale: it remembers the chunk
  // and the members it had counted (Slot::gone_), in place of the chunk it
  // gave up before.
  void GiveUp(Slot& s, uint64_t now_tsc);
  // Whether `c` is from a member that the chunk slot `s` gave up last had
  // counted, within stale_cycles of giving it up: it does not claim a slot
  // for that chunk again. The chunk waits for a member that sent nothing for
  // stale_cycles, most likely dead; claimed again by the members it had, it
  // would keep the slot from other jobs' chunks a stale limit more. The
  // member it lacked claims it as any chunk's first member does. Bounded, so
  // that a job that sends the same chunk again under the same generation
  // (incarnation 0) is not refused for good.
  bool GivenUpTo(const Slot& s, const Contribution& c, uint64_t now_tsc) const {
    return s.gone_ && s.gone_job_id_ == c.job_id && s.gone_generation_ == c.job_generation &&
           s.gone_seq_ == c.seq && ((s.gone_bitmap_[c.node >> 6] >> (c.node & 63)) & 1) != 0 &&
           now_tsc - s.gone_tsc_ <= config_.stale_cycles;
  }
  // Whether forwarded slot `s` may resend its partial now (it went up a
  // resend gap ago, backed off); if so, it goes now.
  bool TakeResend(Slot& s, uint64_t now_tsc);
  // Slot `local_index` when it is forwarded and holds chunk (job_id,
  // job_generation, seq); else null.
  Slot* ForwardedChunk(uint32_t local_index, uint32_t job_id, uint32_t job_generation,
                       uint32_t seq);
  void Complete(uint32_t local_index, Slot& s, SlotUpdate& u, uint64_t now_tsc);
  // Makes the accumulator the slot's result (Slot::result).
  static void PublishResult(Slot& s);
  // Ordered/batch slots: reduces the held contributions in member order and
  // hands their handles back in `u`.
  void ReduceHeld(Slot& s, SlotUpdate& u);
  void Inherit(Slot& s, const Contribution& c);

  SlotTableConfig config_;
  uint32_t bitmap_words_;
  common::HugeRegion memory_;  // every per-slot array below but released_ and evicted_
  Slot* slots_ = nullptr;
  uint64_t* bitmaps_ = nullptr;
  uint8_t* acc_arena_ = nullptr;
  uint32_t* offsets_arena_ = nullptr;
  std::unique_ptr<void*[]> released_;  // max_fan_in handles, reused per call
  std::unique_ptr<void*[]> evicted_;   // the same, for an evicted slot's
  TimerWheel timers_;
  uint32_t sweep_cursor_ = 0;  // SweepStale
  // Single writer (the owner); relaxed loads elsewhere for metrics.
  std::atomic<uint32_t> busy_{0};
  std::atomic<uint32_t> complete_{0};
};

}  // namespace aggswitch::aggregator
