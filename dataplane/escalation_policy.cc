#include "dataplane/escalation_policy.h"

#include <vector>

#include "common/log.h"
#include "config/config.h"

namespace aggswitch::dataplane {

static_assert(aggregator::SlotRegions::kMaxSpareSlots == config::kMaxSpareSlots,
              "the config's bound on spare slots is the slot hint's");
static_assert(aggregator::SlotRegions::kMaxSpareSlots == aggregator::kMovedSlotHint,
              "spare slot hints stop below the moved partition's");

EscalationPolicy::EscalationPolicy(const aggregator::JobTable& jobs,
                                   const aggregator::SlotRegions& regions,
                                   std::chrono::milliseconds stale_slot)
    : jobs_(jobs), regions_(regions), stale_slot_(stale_slot) {
  if (regions_.spare.size != 0)
    spare_ = std::make_unique<aggregator::SpareSlots>(regions_.spare.size);
}

EscalationStats EscalationPolicy::stats() const {
  return {regions_.spare.size, leased_.load(std::memory_order_relaxed),
          granted_.load(std::memory_order_relaxed), refused_.load(std::memory_order_relaxed),
          moves_.load(std::memory_order_relaxed)};
}

bool EscalationPolicy::LeaseOver(const aggregator::SpareSlots::Lease& lease,
                                 Clock::time_point now) const {
  const aggregator::Job* job = jobs_.Find(lease.key.job_id);
  if (job == nullptr || job->generation() != lease.key.job_generation) return true;
  const std::optional<uint32_t> min_ack = job->MinAck();
  if (min_ack && aggregator::SeqBefore(lease.key.seq, *min_ack) &&
      job->LearnedMembers() == job->members()) {
    return true;
  }
  // The slot's worker lets an aggregating chunk go when its first
  // contribution is stale_slot old, and a complete one when its result is:
  // a chunk completed just before it went stale keeps the slot for as long
  // again. Only then is the lease surely over by age; ended sooner, the
  // chunk's retransmissions would lose their way to its result.
  return now - lease.since >= 2 * stale_slot_;
}

EscalationPolicy::Answer EscalationPolicy::Decide(const Escalation& e, Clock::time_point now) {
  Answer a;
  const aggregator::Job* job = jobs_.Find(e.job_id);
  const bool current = job != nullptr && job->generation() == e.job_generation;
  if (current) {
    a.moved_now = TryMove(*job, e.seq, now);
    // Collided at its home slot before that worker applied the move, or
    // now: back through the home slot. In the moved partition itself: a
    // spare slot, as any collision.
    if (job->MovedFrom(e.seq) &&
        e.placed_slot == regions_.Of(job->in_band(), job->placement(), e.seq)) {
      a.kind = Relocation::Kind::kMoved;
      return a;
    }
  }
  const aggregator::ChunkKey key{e.job_id, e.job_generation, e.seq};
  // A chunk whose first contribution went on without a slot (to the
  // parameter node, or up as missing) goes that way whole: a spare slot
  // freed since would split it.
  const bool goes_on = current && e.goes_on;
  if (spare_ && !(goes_on && WentOn(key, now))) {
    // A root keeps a job's complete chunks until its members' ack
    // watermark passes them, and a chunk that finds no slot may find no way
    // on either (no bypass entry, no TAN): a chunk behind the one its
    // slowest member here waits for leaves the last free spare slot to a
    // job's oldest chunk (spare_slots.h).
    const std::optional<uint32_t> min_ack = current ? job->MinAck() : std::optional<uint32_t>{};
    const bool behind = min_ack && aggregator::SeqBefore(*min_ack, e.seq);
    // The only spare slot is kept so only from a chunk that, refused, has
    // no way on: it waits for a slot here, and with it its job's watermark
    // and every complete chunk of the job. A chunk that goes on without a
    // slot (to the parameter node, or up as missing) may take it.
    const bool oldest = !behind || (goes_on && spare_->count() < 2);
    const aggregator::SpareSlots::Grant g = spare_->Acquire(
        key, e.placed_slot, now,
        [&](const aggregator::SpareSlots::Lease& l) { return LeaseOver(l, now); }, oldest);
    leased_.store(spare_->leased(), std::memory_order_relaxed);
    granted_.store(spare_->granted(), std::memory_order_relaxed);
    if (g.hint != aggregator::SpareSlots::kNone) {
      a.kind = Relocation::Kind::kPlace;
      a.hint = g.hint;
      a.ended = g.ended;
      return a;
    }
  }
  a.kind = Relocation::Kind::kRefuse;
  refused_.fetch_add(1, std::memory_order_relaxed);
  if (!goes_on) return a;  // retried by its members: it may go anywhere then
  RememberWentOn(key, now);
  // Should the job move later, its cut comes after this chunk, so that the
  // chunk's other members follow it (to the parameter node, or up) rather
  // than meet in the moved partition.
  if (job->MayMove(regions_.For(job->in_band()).size)) {
    NoRoom& r = NoRoomOf(*job);
    if (!r.refused || aggregator::SeqBefore(*r.refused, e.seq)) r.refused = e.seq;
  }
  return a;
}

bool EscalationPolicy::WentOn(const aggregator::ChunkKey& key, Clock::time_point now) const {
  const auto it = went_on_.find(key);
  return it != went_on_.end() &&
         !LeaseOver(aggregator::SpareSlots::Lease{key, 0, it->second}, now);
}

void EscalationPolicy::RememberWentOn(const aggregator::ChunkKey& key, Clock::time_point now) {
  // Bounded: once it holds kMaxWentOn chunks, those whose job is gone,
  // done with them or stale are forgotten, then the oldest.
  if (went_on_.size() >= kMaxWentOn && !went_on_.contains(key)) {
    std::erase_if(went_on_, [&](const auto& kv) {
      return LeaseOver(aggregator::SpareSlots::Lease{kv.first, 0, kv.second}, now);
    });
    if (went_on_.size() >= kMaxWentOn) {
      auto oldest = went_on_.begin();
      for (auto it = went_on_.begin(); it != went_on_.end(); ++it) {
        if (it->second < oldest->second) oldest = it;
      }
      went_on_.erase(oldest);
    }
  }
  went_on_.emplace(key, now);  // the first time counts
}

EscalationPolicy::NoRoom& EscalationPolicy::NoRoomOf(const aggregator::Job& job) {
  // Bound the memory of jobs long gone: drop the entries of jobs no longer
  // in the table once there are more entries than jobs.
  if (no_room_.size() > 2 * jobs_.size() + 16) {
    std::erase_if(no_room_, [&](const auto& kv) {
      const aggregator::Job* j = jobs_.Find(kv.first);
      return j == nullptr || j->generation() != kv.second.generation;
    });
  }
  NoRoom& r = no_room_[job.id()];
  if (r.generation != job.generation()) r = NoRoom{job.generation(), Clock::time_point{}, {}};
  return r;
}

bool EscalationPolicy::TryMove(const aggregator::Job& job, uint32_t seq, Clock::time_point now) {
  const bool in_band = job.in_band();
  const aggregator::SlotRegion& region = regions_.For(in_band);
  // Once only, and not when a partition of its own would be all of it.
  if (!job.MayMove(region.size)) return false;
  const uint32_t span = job.slot_quota();
  if (const auto it = no_room_.find(job.id()); it != no_room_.end() &&
                                               it->second.generation == job.generation() &&
                                               now - it->second.when < kRetryMove) {
    return false;
  }
  // What the region's jobs hold, or will soon: every partition and moved
  // partition, each hash-placed job's window from its ack watermark on, and
  // a moved job's home window until its watermark has passed the cut by a
  // quota. This job's own home window counts: its chunks before the cut
  // stay there.
  std::vector<aggregator::Partition> live;
  jobs_.ForEach([&](const aggregator::Job& other) {
    if (other.in_band() != in_band) return;
    const uint32_t quota =
        other.slot_quota() == 0 ? region.size : std::min(other.slot_quota(), region.size);
    const std::optional<uint32_t> min_ack = other.MinAck();
    const std::optional<aggregator::Job::Move> move = other.move();
    if (move) {
      live.push_back({move->base, quota});
      if (min_ack && !aggregator::SeqBefore(*min_ack, move->cut + quota)) return;  // home drained
    }
    const aggregator::JobPlacement& p = other.placement();
    if (p.partitioned()) {
      live.push_back({p.offset, p.span});
    } else if (min_ack) {
      live.push_back({region.Of(p.offset, *min_ack) - region.first, quota});
    } else if (&other == &job) {
      live.push_back({region.Of(p.offset, seq) - region.first, quota});
    }
    // A hash-placed job that has acknowledged nothing yet: nobody knows
    // where its window is (it starts wherever its first sequence number
    // falls); if the partition meets it, that job collides and moves too.
  });
  uint32_t& cursor = cursor_[in_band ? 1 : 0];
  const std::optional<uint32_t> base = aggregator::FreeBase(region.size, span, cursor, live);
  if (!base) {
    NoRoomOf(job).when = now;
    return false;
  }
  // From the chunk on, or from the earliest chunk a member still waits for:
  // the chunks in between that have taken no slot yet go too.
  uint32_t cut = seq;
  if (const std::optional<uint32_t> min_ack = job.MinAck();
      min_ack && aggregator::SeqBefore(*min_ack, seq) && seq - *min_ack <= span) {
    cut = *min_ack;
  }
  // After every chunk refused meanwhile: their members meet where the
  // first went (the parameter node, up as missing, or a retry).
  if (const auto it = no_room_.find(job.id()); it != no_room_.end() &&
                                               it->second.generation == job.generation() &&
                                               it->second.refused &&
                                               !aggregator::SeqBefore(*it->second.refused, cut)) {
    cut = *it->second.refused + 1;
  }
  if (!job.SetMove({cut, *base})) return false;
  no_room_.erase(job.id());
  cursor = (*base + span) % region.size;
  moves_.fetch_add(1, std::memory_order_relaxed);
  AGG_LOG(kInfo,
          "job %u moved: its chunks from %u on to slots %u..%u of its region (%u slots), "
          "after a collision of chunk %u",
          job.id(), cut, *base, (*base + span - 1) % region.size, region.size, seq);
  return true;
}

}  // namespace aggswitch::dataplane
