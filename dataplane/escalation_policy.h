// The control thread's answer to a collision (docs/aggregation.md,
// "Collisions" and "Moves"). A contribution whose slot held another chunk
// came up from the worker that owns that slot (Escalation); in this order:
//
//   1. its job has moved and the chunk lies at or after the cut: it goes
//      back through its home slot, which sends it to the moved partition
//      (kMoved);
//   2. it collided at its home slot and its job can move: the job has a slot
//      quota smaller than its region, has not moved yet, and a stretch of
//      quota slots of the region meets no other job's chunks (a partition,
//      a moved partition, the window in flight of a hash-placed job) nor its
//      own home window. The job moves there, from the chunk on (or from its
//      members' ack watermark, when that is earlier, but always after every
//      chunk of it refused before), and the contribution goes with it
//      (kMoved, with `moved_now`: every worker learns of the move first). A
//      job that found no room tries again kRetryMove later;
//   3. a spare slot: the one its chunk holds, or a new lease (SpareSlots)
//      (kPlace); not for a chunk an earlier contribution of which went on
//      without a slot: the rest follow it, a chunk never splits;
//   4. refused (kRefuse): the worker does what the job does with a chunk
//      that has no slot (Job::WhenNoSlot): sends it to the parameter node
//      marked CONFLICT, sends the chunk up as missing, or answers NACK
//      slot_busy (the member retries, and may find room then).
//
// A move is safe whatever the cut: the worker that owns a chunk's home slot
// sends the chunk on only while that slot does not hold it, and it applies
// the move (Relocation::kMove) in the order of its relocation ring, after
// every earlier answer; so each chunk's contributions still meet in one
// slot.
//
//   EscalationPolicy policy(jobs, regions, std::chrono::milliseconds(1000));
//   const EscalationPolicy::Answer a = policy.Decide(escalation, now);
//   if (a.moved_now) tell every worker (Relocation::kMove);
//   if (a.ended) tell a.ended->placed_slot's owner to forget a.ended->key;
//   answer the escalating worker with a.kind (and a.hint);
//
// Thread safety: the control thread only, but stats() [any].
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

#include "aggregator/job_table.h"
#include "aggregator/slot_placement.h"
#include "aggregator/spare_slots.h"
#include "dataplane/port_stats.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

class EscalationPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a job that found no room to move waits before it looks again.
  static constexpr std::chrono::milliseconds kRetryMove{50};

  struct Answer {
    Relocation::Kind kind = Relocation::Kind::kRefuse;  // kMoved, kPlace or kRefuse
    uint16_t hint = aggregator::SpareSlots::kNone;      // kPlace: the spare slot
    // A spare slot's lease that ended to make room for this one.
    std::optional<aggregator::SpareSlots::Lease> ended;
    // The job moved now: every worker must hear of it (Relocation::kMove)
    // before this answer.
    bool moved_now = false;
  };

  // `jobs` and `regions` outlive the policy; a lease older than
  // `stale_slot` is over (aggregation.stale_slot_ms).
  EscalationPolicy(const aggregator::JobTable& jobs, const aggregator::SlotRegions& regions,
                   std::chrono::milliseconds stale_slot);

  Answer Decide(const Escalation& e, Clock::time_point now);

  // [any]
  EscalationStats stats() const;
  // The spare slot leased to chunk `key` (its hint), or SpareSlots::kNone:
  // where the chunk aggregates, if its slot still holds it. [control]
  uint16_t SpareOf(const aggregator::ChunkKey& key) const {
    return spare_ ? spare_->Find(key) : aggregator::SpareSlots::kNone;
  }
  // Spare slots whose lease is not over at `now` (LeaseOver): what chunks
  // still need, where stats().leased also counts leases nobody asked to
  // end yet. [control]
  uint32_t LiveLeases(Clock::time_point now) const {
    return spare_ ? spare_->Live([&](const aggregator::SpareSlots::Lease& l) { return LeaseOver(l, now); })
                  : 0;
  }

 private:
  // Whether a spare slot's lease is over: its chunk's job is gone, or every
  // member has its result, or it is older than twice stale_slot_ (the rules
  // by which the spare slot's worker lets the chunk go: stale_slot_ from its
  // first contribution while it aggregates, and from its result once
  // complete).
  bool LeaseOver(const aggregator::SpareSlots::Lease& lease, Clock::time_point now) const;
  // Moves `job` for chunk `seq` when it can (see above).
  bool TryMove(const aggregator::Job& job, uint32_t seq, Clock::time_point now);

  const aggregator::JobTable& jobs_;
  const aggregator::SlotRegions regions_;
  const std::chrono::milliseconds stale_slot_;
  std::unique_ptr<aggregator::SpareSlots> spare_;  // null without spare slots
  // Where the search for the next moved partition starts, per region (in
  // band or not): after the last one.
  uint32_t cursor_[2] = {0, 0};
  // Jobs that have not moved and found no room or had a chunk refused, by
  // job id: their generation, when they last found no room, and the latest
  // chunk refused (serial order), which a later move's cut comes after.
  struct NoRoom {
    uint32_t generation = 0;
    Clock::time_point when;
    std::optional<uint32_t> refused;
  };
  std::unordered_map<uint32_t, NoRoom> no_room_;
  // Chunks refused in a job that sends them on without a slot (to its
  // parameter node, or up as missing), since when: their later
  // contributions go the same way (until the rules of a spare slot's lease
  // say they are over).
  static constexpr size_t kMaxWentOn = 4096;
  std::unordered_map<aggregator::ChunkKey, Clock::time_point, aggregator::SpareSlots::KeyHash>
      went_on_;
  bool WentOn(const aggregator::ChunkKey& key, Clock::time_point now) const;
  void RememberWentOn(const aggregator::ChunkKey& key, Clock::time_point now);
  // The entry of `job` (a fresh one for a new generation).
  NoRoom& NoRoomOf(const aggregator::Job& job);
  std::atomic<uint32_t> leased_{0};
  std::atomic<uint64_t> granted_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> moves_{0};
};

}  // namespace aggswitch::dataplane
