// The job table: job id -> Job (the switch's view of one allreduce group).
//
// A job is known to the switch in three ways (SPEC §3, seed 001): declared in
// the YAML (aggregation.jobs), added through the control API (aggctl jobs
// add), or registered in-band from the task info of a contribution or a
// TASK_INFO packet. Whatever the origin, a job enters through one admission
// function on the control side (control/job_control.h, AdmitJob) and Add;
// the control thread is the only writer of the table; worker lcores look
// jobs up without locks.
//
// Layout: a power-of-two open-addressing array of std::atomic<Job*>, linear
// probing, load (live jobs) at most 1/2. Removal leaves a tombstone that a
// later Add may reuse; when tombstones and live jobs together pass 3/4 of the
// array, the control thread builds a fresh array and publishes it, so a probe
// stays short. A lookup is a handful of acquire loads, never allocates, never
// retries, and is bounded by the array size.
//
// Reclamation: a removed Job (and a replaced array) is freed only after every
// registered reader has passed a quiescent point since the removal: DPDK's
// RCU QSBR (rte_rcu_qsbr.h). The table owns its QSBR variable, allocated with
// aligned_alloc, so the table also works without EAL (unit tests). A worker
// lcore registers once, goes online before its first lookup, and reports a
// quiescent state once per poll loop, when it holds no Job pointer:
//
//   // control thread, at start-up
//   ASSIGN_OR_RETURN(auto jobs, JobTable::Create(cfg.max_jobs, cfg.max_fan_in));
//   ASSIGN_OR_RETURN(uint32_t reader, jobs->RegisterReader());   // one per worker
//   // worker lcore
//   jobs.ReaderOnline(reader);
//   while (!quit) {
//     if (const Job* job = jobs.Find(job_id); job != nullptr && job->key() == key) { ... }
//     jobs.Quiescent(reader);                 // no Job* kept past this line
//   }
//   jobs.ReaderOffline(reader);
//   // control thread, every loop
//   jobs->Reclaim();
//
// A Job's index (0..max_jobs-1) is stable while the job exists and is reused
// only after the removed job has been reclaimed, so per-lcore counter arrays
// indexed by it never mix two jobs' counts.
//
// Per-member state (learned addresses, ack watermark) lives in the Job and is
// written by whichever worker lcore sees the member's packets, with relaxed
// atomics that store only when a value changes.
//
// Thread safety: every method says [control] (the control thread, the table's
// only writer), [reader] (a registered reader thread: a worker lcore, or a test
// thread that follows the protocol above) or [any].
#pragma once

#include <rte_rcu_qsbr.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string_view>
#include <span>
#include <utility>
#include <vector>

#include "aggregator/slot_placement.h"
#include "aggregator/wire.h"
#include "common/siphash.h"
#include "common/status.h"

namespace aggswitch::aggregator {

// Limits of the configuration (config/config.h checks the same ranges).
inline constexpr uint16_t kMaxJobFanIn = 1024;  // members of one job at this switch
inline constexpr uint32_t kMaxJobTableJobs = 65536;
// Readers a table can register: at least config::kMaxWorkers, plus room for tests.
inline constexpr uint32_t kMaxJobReaders = 128;
// Not a node id (node ids are 0..65534).
inline constexpr uint16_t kNoNode = 0xFFFF;
// Parent switches a job may choose among (JobSpec::upstreams).
inline constexpr uint32_t kMaxUpstreams = 16;

// A next hop of the job tree: a parent switch's or the TAN's aggregation
// address (docs/stragglers.md). Its MAC, port and VLAN are resolved by the
// control thread (ARP) and published in the Job.
struct JobPeer {
  uint32_t ip = 0;  // host order; 0: none
  uint16_t udp_port = 0;
  uint16_t node = 0;  // our node id at the parent switch (upstreams only)
  uint16_t vlan = 0;  // VLAN to resolve it on; 0: the aggregation address's

  friend bool operator==(const JobPeer&, const JobPeer&) = default;
};

// What the control side knows about a job when it creates it.
struct JobSpec {
  enum class Origin : uint8_t { kConfig, kApi, kInBand };
  // Where the root sends a result that still misses members.
  enum class Tan : uint8_t { kNone, kRemote, kSelf };

  uint32_t id = 0;       // 1..2^32-1 (0 is not a job)
  uint64_t key = 0;      // per-job secret; packets with another key are dropped
  uint16_t members = 0;  // expected members at this switch, 1..max_fan_in
  uint16_t nodes = 1;    // switches taking part; 1 = this switch is the root
  bool ordered = false;  // reduce floats in member order
  Origin origin = Origin::kConfig;

  // --- The tree (docs/stragglers.md); defaults give the flat job. ---
  // Node id of each member, by member index; empty: member i is node i.
  // Unique, at most 65534 each.
  std::vector<uint16_t> member_nodes;
  // Per member index: the node ids a child switch covers (variant 2 bypass
  // entries), or only its own where they are not known (an in-band job's
  // leaves at its root); empty for workers. Empty vector: no child switches.
  std::vector<std::vector<uint16_t>> covers;
  // The parent switches; empty: this switch is the job's root. A config or
  // API job has one (aggregation.jobs[].upstream). An in-band job of several
  // nodes has the switch's aggregation.upstreams, and chunk `seq` goes to
  // the one its addr_low picks, upstreams[addr_low mod size]: every member's
  // addr_low is the same (a member's that is not is refused), so every leaf
  // of the job sends that chunk's partial to the same parent. 1..kMaxUpstreams
  // entries, all with the same `node`.
  std::vector<JobPeer> upstreams;
  Tan tan = Tan::kNone;            // root jobs: where first data goes
  JobPeer tan_peer;                // Tan::kRemote
  uint64_t timeout_cycles = 0;     // slot threshold (TSC); 0: no timers
  bool batch = false;              // hold contributions, reduce at completion or expiry
  bool bypass_covered_nodes = false;  // a late child switch: entries for the nodes it covers
  // A worker member (node id) that also runs the job's TAN: when it is late
  // the switch lists it but writes no bypass entry (it keeps its own data;
  // docs/stragglers.md, "The TAN is late"). kNoNode: none.
  uint16_t tan_member = kNoNode;
  // Root jobs: the TAN is the job's parameter server. Every chunk goes to it
  // as first data, complete or not, and the members receive what it answers
  // (updated parameters; docs/stragglers.md, "Parameter-server jobs").
  bool parameter_server = false;
  // Verify mode (root jobs with a remote TAN, the job's parameter node;
  // docs/parameter-node.md): a complete chunk goes to the parameter node as
  // VERIFY, its slot held until the answer, and the members receive only
  // what the parameter node returns (RESULT with VERIFIED, or
  // EXCEPTION_RETRANSMIT).
  bool verify = false;
  // The job's main server (aggregation.jobs[].main_server): a DISTRIBUTE
  // from this IPv4 address (host order; 0: none) and UDP port (0: any) is
  // replicated to every member.
  uint32_t main_server_ip = 0;
  uint16_t main_server_port = 0;
  // What the switch does with the members' contributions
  // (aggregation.jobs[].mode; docs/protocol.md, "Store").
  enum class Mode : uint8_t { kAggregate, kStore, kBoth };
  Mode mode = Mode::kAggregate;

  // --- What one job may hold of the switch (docs/security.md) ---
  // --- Where its chunks live in its slot region (slot_placement.h) ---
  // How the placement was chosen: the switch's policy, or the job's hint.
  enum class Placed : uint8_t { kHash, kRoundRobin, kRandom, kHint };
  Placed placed = Placed::kHash;
  // The job's partition of its region (every choice but kHash); nullopt:
  // hash placement under the table's secret.
  std::optional<Partition> partition;

  // Chunks the job may keep ahead of its slowest member's ack watermark, so
  // slots it may hold at once: a chunk further ahead is refused
  // (NackReason::kSlotQuota) until the watermark moves. 0: no bound.
  uint32_t slot_quota = 0;
  // Contributions of ordered chunks it may hold at once, over every worker:
  // its hold window, the chunks after its slowest member's watermark whose
  // contributions may be held, is hold_quota / (members - 1) chunks
  // (NackReason::kHoldQuota beyond; Job::HoldAllowed). 0: no bound but the
  // hold pool's.
  uint32_t hold_quota = 0;
  // Store buffers (aggregation.store) the job may hold at once, over every
  // worker: its contributions kept in store or both mode (NackReason::
  // kStoreFull beyond). 0: no bound but the store's.
  uint32_t store_quota = 0;
};

// "config", "api", "in-band". [any]
std::string_view OriginName(JobSpec::Origin origin);
// "hash", "round_robin", "random", "hint". [any]
std::string_view PlacedName(JobSpec::Placed placed);
// "aggregate", "store", "both". [any]
std::string_view ModeName(JobSpec::Mode mode);

// A member's learned return path.
struct MemberAddr {
  uint64_t mac48 = 0;      // source MAC of its packets, first byte most significant
  uint8_t port_index = 0;  // ingress port (index in the config's port list)
  uint16_t vlan = 0;       // VLAN it arrived on (0: none)
  uint32_t ip = 0;         // source IPv4 address, host order
  uint16_t udp_port = 0;   // source UDP port, host order
  // The incarnation it is bound with (its run; docs/protocol.md, "Runs"):
  // what the switch's datagrams to it carry. 0: none yet. Read by
  // GetMember only.
  uint32_t incarnation = 0;
};

// One job at this switch. Built and destroyed by the JobTable only; readers
// get const pointers that stay valid until their next quiescent point.
class alignas(64) Job {
 public:
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  // --- Identity, fixed for the job's life [any] ---
  uint32_t id() const { return id_; }
  uint64_t key() const { return key_; }
  uint16_t members() const { return members_; }  // expected members at this switch
  uint16_t nodes() const { return nodes_; }
  bool ordered() const { return ordered_; }
  JobSpec::Origin origin() const { return origin_; }
  // Stable 0..max_jobs-1 while the job exists; per-lcore arrays index by it.
  uint16_t index() const { return index_; }
  // Distinct for every job this table has held (1, 2, ...): a job removed
  // and added again, even at the same index, is a new generation.
  uint32_t generation() const { return generation_; }
  bool in_band() const { return origin_ == JobSpec::Origin::kInBand; }
  // Where its chunks land in its slot region (slot_placement.h), and how
  // that was chosen.
  const JobPlacement& placement() const { return placement_; }
  JobSpec::Placed placed() const { return placed_; }
  uint32_t slot_offset() const { return placement_.offset; }
  uint32_t slot_quota() const { return slot_quota_; }

  // --- A move, set at most once by the control thread [any] ---
  //
  // A job whose chunk collided may be moved into a partition of its own in
  // its region: slot_quota() slots from a base the control thread found
  // free, for its chunks from `cut` on that have not taken a slot at home
  // (placement()) yet. The worker that owns a chunk's home slot decides
  // which of them go (docs/aggregation.md, "Moves").
  struct Move {
    uint32_t cut = 0;
    uint32_t base = 0;  // in the region
  };
  // nullopt before the job moved.
  std::optional<Move> move() const {
    const uint64_t m = move_.load(std::memory_order_acquire);
    if ((m & kMoveValid) == 0) return std::nullopt;
    return Move{static_cast<uint32_t>(m), static_cast<uint32_t>((m & ~kMoveValid) >> 32)};
  }
  // Whether chunk `seq` lies at or after the cut of the job's move (false
  // before it moved).
  bool MovedFrom(uint32_t seq) const {
    const uint64_t m = move_.load(std::memory_order_acquire);
    return (m & kMoveValid) != 0 && !SeqBefore(seq, static_cast<uint32_t>(m));
  }
  // The moved partition. Only once move() has a value.
  JobPlacement moved_placement() const {
    const uint64_t m = move_.load(std::memory_order_acquire);
    return JobPlacement{static_cast<uint32_t>((m & ~kMoveValid) >> 32), slot_quota_, quota_magic_};
  }
  // The slot hint the results of chunk `seq` carry to the members: the
  // moved partition's (kMovedSlotHint) for a chunk at or after the cut,
  // else none.
  uint16_t MoveHint(uint32_t seq) const { return MovedFrom(seq) ? kMovedSlotHint : kNoSlotHint; }
  // Whether the job may still move in its region of `region_size` slots: it
  // has not moved yet, and its slot quota (the partition's length) is short
  // of the region.
  bool MayMove(uint32_t region_size) const {
    return slot_quota_ != 0 && slot_quota_ < region_size && !move();
  }
  // Moves the job: false (and nothing changes) when it moved already or has
  // no slot quota, or `base` lies beyond 2^31. [control]
  bool SetMove(const Move& m) const;
  uint32_t hold_quota() const { return hold_quota_; }

  // --- Per-member state [any] ---
  //
  // Member state is the runtime part of a job and is written through the
  // const Job* that Find() returns, so these methods are const; a job's
  // identity above never changes.

  // Members are bound to the address they first send from (docs/security.md):
  // the ingress port, VLAN, MAC, IP address and UDP port of the first
  // datagram that claims the node id binds it, for the life of this job
  // generation. A datagram that claims it from any other address is refused,
  // until the bound address has been silent for `rebind_ticks` (then it
  // rebinds; 0: never) or the control side unbinds the member.
  //
  // Members are bound to an incarnation too (docs/protocol.md, "Runs"): the
  // first nonzero one a member's datagrams carry in this generation. Another
  // one is a new run of the job: the control thread makes the job a new
  // generation (JobTable::Renew), whose members bind afresh, and the old
  // generation's incarnations are the new one's ended ones. Only from the
  // host the member is bound to, or once its address has been silent for
  // `rebind_ticks` (MayRenew): from elsewhere it is refused as any other
  // datagram from another address is. Incarnation 0 (a child switch before
  // its run label) binds nothing and is never new.
  enum class Bind : uint8_t {
    kKnown,     // from the bound address
    kBound,     // the member's first datagram: bound now
    kRebound,   // the bound address was silent long enough: bound to this one now
    kRefused,   // the member is bound to another address
    kNewRun,    // another incarnation holds the member: a new run (RequestNewRun)
    kRunEnded,  // the member's incarnation in the run this generation replaced
  };
  // Binds member `index` (< members()) to `from` and `incarnation` or
  // checks it against its binding, and records `now` (ticks, the caller's
  // clock) as its last datagram. A known member costs three loads. [any]
  //
  // `run_id`: the incarnation is the run's id, shared by its ranks (the
  // kRunId flag): the first one binds the generation, and another one from
  // any member is a new run (or an ended one), whether that member sent
  // before or not.
  Bind BindMember(uint16_t index, const MemberAddr& from, uint32_t incarnation, uint32_t now,
                  uint32_t rebind_ticks, bool run_id = false) const {
    Member& m = member_[index];
    if (run_id && incarnation != 0) {
      uint32_t shared = run_id_.load(std::memory_order_relaxed);
      if (shared != incarnation) {
        if (EndedAnywhere(incarnation)) return Bind::kRunEnded;
        if (shared != 0) return MayRenew(index, from, now, rebind_ticks) ? Bind::kNewRun : Bind::kRefused;
        if (!run_id_.compare_exchange_strong(shared, incarnation, std::memory_order_relaxed) &&
            shared != incarnation) {
          return MayRenew(index, from, now, rebind_ticks) ? Bind::kNewRun : Bind::kRefused;
        }
      }
    }
    const uint64_t run = m.run.load(std::memory_order_relaxed);
    bool bind_run = false;
    if (run != (kValid | uint64_t{incarnation} << 32)) {
      if (incarnation != 0 && Ended(index, incarnation)) return Bind::kRunEnded;
      if ((run & kValid) == 0) {
        // The member's first datagram in this generation. Once another
        // member has started a new run, a first incarnation is the new
        // run's too: bound here, it would be one of the ended run's in the
        // next generation, and the member refused for good.
        if (incarnation != 0 && new_run_.load(std::memory_order_relaxed) != 0) return Bind::kNewRun;
        bind_run = true;
      } else if (incarnation != 0) {
        if ((run >> 32) != 0) {
          return MayRenew(index, from, now, rebind_ticks) ? Bind::kNewRun : Bind::kRefused;
        }
        bind_run = true;  // its first incarnation: it had sent none
      }
      // Else none from a member bound with one: no identity, nothing changes.
    }
    const Bind bound = BindAddress(index, from, now, rebind_ticks);
    if (bind_run && bound != Bind::kRefused && !BindRun(index, run, incarnation)) {
      return Bind::kNewRun;
    }
    return bound;
  }
  // Forgets member `index`'s binding and watermark: its next datagram binds
  // it and sets its watermark afresh. Its incarnation stays: the same
  // process may send from elsewhere, another one is a new run. [control]
  void UnbindMember(uint16_t index) const {
    if (index >= members_) return;
    member_[index].l2.store(0, std::memory_order_relaxed);
    member_[index].l3.store(0, std::memory_order_relaxed);
    member_[index].ack.store(0, std::memory_order_relaxed);
  }

  // --- Runs (docs/protocol.md, "Runs") [any] ---

  // The incarnation member `index` is bound with; 0 before it is. [any]
  uint32_t MemberIncarnation(uint16_t index) const {
    const uint64_t run = member_[index].run.load(std::memory_order_relaxed);
    return (run & kValid) != 0 ? static_cast<uint32_t>(run >> 32) : 0;
  }
  // Whether `incarnation` (nonzero) was a member's in the run this
  // generation replaced: data of an ended run, never to be counted. [any]
  bool Ended(uint16_t index, uint32_t incarnation) const {
    return ended_ != nullptr && ended_[index] == incarnation;
  }
  // Whether `incarnation` (nonzero) was any member's in the replaced run:
  // what a child switch forwards (late data) under its old run label.
  // O(log members). [any]
  bool EndedAnywhere(uint32_t incarnation) const {
    return incarnation != 0 && ended_sorted_ != nullptr &&
           std::binary_search(ended_sorted_.get(), ended_sorted_.get() + members_, incarnation);
  }
  // The job's run label at this switch: what its partials, late data and
  // relayed ACKs carry to the parent, which binds this switch by it as a
  // member by its incarnation. The run's id when its members send one (the
  // kRunId flag): then the label says which run it is at every switch of
  // the tree, and the parent tells a new run by it even from a child switch
  // that sent nothing in the last one (those go up flagged kRunId, see
  // run_labelled()). Else a hash of every member's incarnation, set once
  // every member has sent in this generation (so the same run gives the
  // same label after this switch restarts, and a new run another); 0
  // before, unless UpLabel fixed one. [any]
  uint32_t label() const {
    const uint32_t id = run_id_.load(std::memory_order_relaxed);
    return id != 0 ? id : label_.load(std::memory_order_relaxed);
  }
  // Whether the label is the run's id (what goes up is flagged kRunId). [any]
  bool run_labelled() const { return run_id_.load(std::memory_order_relaxed) != 0; }
  // The label to send up with now: label(), or, when something must go up
  // before every member has sent (a member late from the run's start, or
  // one that never comes), a hash of the incarnations of those that have,
  // fixed from then on for this generation (a new run still gets another:
  // its members are new processes). 0 while no member has sent: nothing
  // goes up then (TreeStage). A parameter-server job's switches fix none
  // early: 0 until every member has sent (a label of some members, after a
  // restart, is a new run to its TAN, which would apply a chunk's step
  // again). Nor does any job's while `settling` (the switch started less
  // than its restart grace ago, TreeStage::Settling): back from a restart,
  // its members' resends come within that, and with every member in, the
  // label is the one the run had before the restart, where a label of some
  // members would be a new run to the parent. [any]
  uint32_t UpLabel(bool settling = false) const;
  // A worker met a new incarnation for member `index`: asks the control
  // thread for a new generation (JobTable::TakeNewRuns). [any]
  void RequestNewRun(uint16_t index, uint32_t incarnation) const;
  // The request: (member index << 32 | incarnation), nullopt when none. [any]
  std::optional<uint64_t> NewRunRequest() const {
    const uint64_t r = new_run_.load(std::memory_order_relaxed);
    if (r == 0) return std::nullopt;
    return r & ~kNewRunValid;
  }
  // This switch's parent (or, at the root, its TAN) ended the run this
  // switch sends up as `label` (NACK run_ended about it): a newer run of the
  // job holds the tree above, which will take nothing of this one again.
  // Asks the control thread for a new generation as a new run does
  // (JobTable::TakeNewRuns), so the run ends here too: its members'
  // incarnations become the ended ones, and the ranks are told (NACK
  // run_ended) instead of waiting on chunks nobody above answers; their
  // successors bind afresh and go up under a new label. Only about the
  // job's label now (nonzero): a NACK about an earlier one is stale.
  // Returns whether this call made the request (once per generation). [any]
  bool EndRunAbove(uint32_t label) const;
  // The label EndRunAbove ended, nullopt when none. [any]
  std::optional<uint32_t> RunEndedAbove() const {
    const uint32_t l = ended_above_.load(std::memory_order_relaxed);
    if (l == 0) return std::nullopt;
    return l;
  }
  // When member `index` last sent (BindMember's clock); nullopt before it
  // was bound. [any]
  std::optional<uint32_t> LastSeen(uint16_t index) const {
    if (index >= members_ || (member_[index].l2.load(std::memory_order_relaxed) & kValid) == 0) {
      return std::nullopt;
    }
    return seen_[index].load(std::memory_order_relaxed);
  }

  // The learned address of `node`; false when none was learned yet (or node
  // is out of range). The L2 and L3 halves are read separately: while a member
  // moves, one read may pair its old MAC with its new IP.
  bool GetMember(uint16_t node, MemberAddr* out) const {
    if (node >= members_) return false;
    return Read(member_[node], out);
  }

  // Moves member `node`'s ack watermark forward to `watermark` (RFC 1982
  // serial order on 32 bits): the first watermark is taken as is, a later one
  // only when it comes after the current one. Racing writers of one member
  // converge on the latest value (compare-and-swap). Returns whether the
  // watermark moved; a repeat costs one load. A member that may have held
  // the cached slot watermark (see SeqAllowed) marks it stale.
  bool UpdateAck(uint16_t node, uint32_t watermark) const {
    if (node >= members_) return false;
    uint64_t old = 0;
    if (!AdvanceWatermark(member_[node].ack, watermark, &old)) return false;
    if ((old & kAckValid) == 0) first_ack_[node].store(watermark, std::memory_order_relaxed);
    const uint64_t cached = min_ack_cache_.load(std::memory_order_relaxed);
    if ((old & kAckValid) == 0 || (cached & kAckValid) == 0 ||
        !SeqBefore(static_cast<uint32_t>(cached), static_cast<uint32_t>(old))) {
      if (!min_ack_stale_.load(std::memory_order_relaxed)) {
        min_ack_stale_.store(true, std::memory_order_release);
      }
    }
    return true;
  }

  // Member `node`'s watermark; nullopt before its first one.
  std::optional<uint32_t> GetAck(uint16_t node) const {
    if (node >= members_) return std::nullopt;
    const uint64_t ack = member_[node].ack.load(std::memory_order_relaxed);
    if ((ack & kAckValid) == 0) return std::nullopt;
    return static_cast<uint32_t>(ack);
  }
  // The watermark member `node` first carried since it was bound here
  // (since this switch started, or since it sent from a new address):
  // every chunk before it had its result before this switch knew the
  // member, from a switch process that may have held it alone. nullopt
  // before its first watermark.
  std::optional<uint32_t> FirstAck(uint16_t node) const {
    if (!GetAck(node)) return std::nullopt;
    return first_ack_[node].load(std::memory_order_relaxed);
  }

  // The earliest watermark (serial order) among the members that have sent
  // one; nullopt when none has. Every chunk before it has been acknowledged by
  // each of those members. O(members); for the release check, not per packet.
  std::optional<uint32_t> MinAck() const;

  // The watermark that holds the job's slots: the earliest among its
  // current members, those bound and heard from within `gone_ticks` of `now`
  // (0: every bound member is current). A member silent longer is presumed
  // gone, as BindMember presumes when it lets another address take its node
  // id, and an unbound member is gone: the watermark a previous process of a
  // rank left behind holds no chunk of the next run back. MinAck() when no
  // member is current. O(members); for the quota's refresh and the release
  // check, not per packet. [any]
  std::optional<uint32_t> SlotWatermark(uint32_t now, uint32_t gone_ticks) const;

  // Whether chunk `seq` may take a slot under the job's slot quota: it lies
  // before the job's slot watermark (late data, retransmissions), or fewer
  // than slot_quota() chunks after it. The watermark is cached and refreshed
  // (O(members)) when a chunk seems to lie beyond the quota: once per tick of
  // `now` (members come and go with the clock), and again within the tick
  // whenever a member that may have held it moved its watermark on (a job
  // may get more than a quota of results a tick; refusing it until the next
  // tick would stall it for a retransmission timeout). A member ahead of the
  // slowest costs no refresh. `now` and `gone_ticks` as SlotWatermark. [any]
  bool SeqAllowed(uint32_t seq, uint32_t now, uint32_t gone_ticks) const {
    if (slot_quota_ == 0) return true;
    return InWindow(seq, now, gone_ticks, slot_quota_, /*before_is_in=*/true);
  }
  // Whether an ordered slot may hold a contribution to chunk `seq`: the
  // chunk lies in the job's hold window, the hold_window() chunks from its
  // slot watermark on. So the job holds at most hold_quota() contributions,
  // and its oldest chunk can always complete. A chunk before the watermark
  // is one every current member has the result of: nothing to hold. Clock
  // and cache as SeqAllowed. [any]
  bool HoldAllowed(uint32_t seq, uint32_t now, uint32_t gone_ticks) const {
    if (hold_quota_ == 0) return true;
    return InWindow(seq, now, gone_ticks, hold_window_, /*before_is_in=*/false);
  }
  uint32_t hold_window() const { return hold_window_; }

  // Members with a learned address. O(members).
  uint16_t LearnedMembers() const;

  // --- Its oldest chunk held back at the root [any] ---
  //
  // The job's oldest chunk `seq` (its slot watermark) found its home slot at
  // this root held by a complete chunk of job `holder`, whose result waits
  // for that job's watermark. Kept until a contribution to `seq` takes a
  // slot (ClearOldestBlocked), or another chunk is noted. A hint for the
  // release check: two jobs each held back by the other's result
  // (aggregation_stage.cc, SlotReleasable). One relaxed store when it
  // changes.
  void NoteOldestBlocked(uint32_t seq, uint32_t holder) const {
    const uint64_t v = kBlockedValid | uint64_t{holder} << 32 | seq;
    if (oldest_blocked_.load(std::memory_order_relaxed) != v) {
      oldest_blocked_.store(v, std::memory_order_relaxed);
    }
  }
  // A contribution to chunk `seq` took a slot: when it was the chunk noted,
  // nothing holds it back any more. One relaxed load otherwise.
  void ClearOldestBlocked(uint32_t seq) const {
    const uint64_t v = oldest_blocked_.load(std::memory_order_relaxed);
    if ((v & kBlockedValid) != 0 && static_cast<uint32_t>(v) == seq) {
      oldest_blocked_.store(0, std::memory_order_relaxed);
    }
  }
  // Whether chunk `seq` is noted as held back by a result of job `holder`.
  bool OldestBlockedBy(uint32_t seq, uint32_t holder) const {
    return oldest_blocked_.load(std::memory_order_relaxed) ==
           (kBlockedValid | uint64_t{holder} << 32 | seq);
  }

  // --- The tree, fixed for the job's life [any] ---

  // The member index of node id `node`, or -1 when it is not a member here.
  // One subtraction when the ids are a contiguous range (every flat job),
  // else a binary search.
  int LocalIndex(uint16_t node) const {
    if (sorted_nodes_ == nullptr) {
      const uint32_t i = static_cast<uint16_t>(node - node_base_);
      return i < members_ ? static_cast<int>(i) : -1;
    }
    uint32_t lo = 0, hi = members_;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      const uint32_t entry = sorted_nodes_[mid];
      if ((entry >> 16) == node) return static_cast<int>(entry & 0xffff);
      if ((entry >> 16) < node) lo = mid + 1; else hi = mid;
    }
    return -1;
  }
  // The node id of member `index` (< members()).
  uint16_t NodeId(uint16_t index) const {
    return member_nodes_ == nullptr ? static_cast<uint16_t>(node_base_ + index) : member_nodes_[index];
  }
  // Whether member `index` is a child switch, and the node ids it covers.
  bool IsSwitch(uint16_t index) const { return !covers_.empty() && covers_[index].has_value(); }
  std::span<const uint16_t> Covers(uint16_t index) const {
    if (covers_.empty() || !covers_[index]) return {};
    return *covers_[index];
  }
  // The member index of the child switch that covers node `node` (not a
  // member itself), or -1 when none does. O(log covered ids). [any]
  int CoveringChild(uint16_t node) const;
  bool is_root() const { return upstreams_.empty(); }
  // Whether some member is a child switch (the job is a tree's inner node).
  bool has_child_switches() const { return !covers_.empty(); }
  // The parent switches (JobSpec::upstreams); empty at the root.
  std::span<const JobPeer> upstreams() const { return upstreams_; }
  // This switch's node id at its parents (non-root jobs).
  uint16_t upstream_node() const { return upstreams_.empty() ? 0 : upstreams_[0].node; }
  // A non-root in-band job: its parents learn it from the task info its
  // partials carry (expected = nodes(), node_count 1), as this switch learned
  // it from its members'.
  bool announces_upstream() const { return in_band() && !is_root(); }
  uint64_t timeout_cycles() const { return timeout_cycles_; }
  bool batch() const { return batch_; }
  bool bypass_covered_nodes() const { return bypass_covered_nodes_; }
  bool parameter_server() const { return parameter_server_; }
  bool verify() const { return verify_; }
  // Whether a datagram from `ip`:`port` claims to be the job's main
  // server's: its address and port (any port when it names none). [any]
  bool FromMainServer(uint32_t ip, uint16_t port) const {
    return main_server_ip_ != 0 && ip == main_server_ip_ &&
           (main_server_port_ == 0 || port == main_server_port_);
  }
  // Binds the job's main server as BindAddress binds a member: the first
  // datagram from its address and port (FromMainServer), with the job's key,
  // binds it to that datagram's ingress port, VLAN, MAC and UDP port too.
  // Any other is kRefused, however long the bound one has been silent (a
  // main server speaks at the end of a job, and is silent before): only
  // the host it is bound to (ingress port, VLAN, MAC, IP) takes it at once
  // from another UDP port (a restarted main server without a configured
  // port; kRebound), and the job's next generation binds afresh. [any]
  Bind BindMainServer(const MemberAddr& from, uint32_t now) const {
    if (!FromMainServer(from.ip, from.udp_port)) return Bind::kRefused;
    const Bind bound = BindAddress(members_, from, now, 0);
    if (bound != Bind::kRefused || !MayRenew(members_, from, now, 0)) return bound;
    return BindAddress(members_, from, now, 0, /*same_host=*/true);
  }
  uint32_t main_server_ip() const { return main_server_ip_; }
  uint16_t main_server_port() const { return main_server_port_; }
  // The main server's resolved address (the control thread resolves it as
  // it does the hops); false while unresolved or without one. [any]
  bool GetMainServer(MemberAddr* out) const {
    return main_server_ip_ != 0 && Read(hops_[main_server_hop()], out);
  }
  // The hop index SetHop() publishes the main server's resolution under. [any]
  uint32_t main_server_hop() const { return hop_count(); }
  JobSpec::Mode mode() const { return mode_; }
  // Whether its members' contributions are kept (store, both) and reduced
  // (aggregate, both).
  bool stores() const { return mode_ != JobSpec::Mode::kAggregate; }
  bool aggregates() const { return mode_ != JobSpec::Mode::kStore; }
  uint32_t store_quota() const { return store_quota_; }

  // --- The TAN choice (root jobs), changed by the control thread ---

  // [any]
  JobSpec::Tan tan() const {
    return static_cast<JobSpec::Tan>(tan_target_.load(std::memory_order_acquire) & 0xff);
  }
  // What becomes of a chunk that finds no slot here: no spare slot, and its
  // job cannot move (docs/aggregation.md, "Collisions").
  enum class NoSlot : uint8_t {
    // Refused for now (NACK slot_busy): its members retry.
    kRefuse,
    // Each member's contribution goes to the job's parameter node, marked
    // CONFLICT, which reduces the chunk: the root of a flat job with a
    // remote TAN.
    kToParameterNode,
    // As if the chunk's slot had timed out with nobody in: a partial of the
    // op's identity (first data at the root) lists every member, and their
    // data follows as late data, which the TAN folds in. At a root with a
    // TAN (its own, or one with child switches: a configured tree's, or an
    // in-band job's, whose members are its leaves), and at a non-root switch
    // with slot timers, which presume a TAN at the tree's root as every
    // timeout does.
    kUpAsMissing,
  };
  // [any]
  NoSlot WhenNoSlot() const {
    if (!is_root()) return timeout_cycles_ != 0 ? NoSlot::kUpAsMissing : NoSlot::kRefuse;
    switch (tan()) {
      case JobSpec::Tan::kRemote:
        return has_child_switches() ? NoSlot::kUpAsMissing : NoSlot::kToParameterNode;
      case JobSpec::Tan::kSelf: return NoSlot::kUpAsMissing;
      case JobSpec::Tan::kNone: break;
    }
    return NoSlot::kRefuse;
  }
  // Whether a datagram of `opcode` that finds no slot goes on without one
  // the `way` WhenNoSlot says: the parameter node takes members'
  // contributions only, so a child switch's partial there waits for a slot.
  static bool GoesOnWithoutSlot(NoSlot way, Opcode opcode) {
    switch (way) {
      case NoSlot::kToParameterNode: return opcode == Opcode::kContribution;
      case NoSlot::kUpAsMissing:
        return opcode == Opcode::kContribution || opcode == Opcode::kPartial;
      case NoSlot::kRefuse: break;
    }
    return false;
  }
  // [any]
  bool GoesOnWithoutSlot(Opcode opcode) const { return GoesOnWithoutSlot(WhenNoSlot(), opcode); }
  // The TAN's address and UDP port; ip 0 unless tan() is kRemote. [any]
  JobPeer tan_peer() const {
    const uint64_t t = tan_target_.load(std::memory_order_acquire);
    JobPeer p;
    p.ip = static_cast<uint32_t>(t >> 32);
    p.udp_port = static_cast<uint16_t>(t >> 16);
    return p;
  }
  // The member (node id) that runs the job's TAN itself; kNoNode: none. [any]
  uint16_t tan_member() const { return tan_member_.load(std::memory_order_relaxed); }
  // [control]
  void SetTanMember(uint16_t node) const { tan_member_.store(node, std::memory_order_relaxed); }
  // Publishes a new choice and forgets the resolved TAN hop. [control]
  void SetTan(JobSpec::Tan mode, const JobPeer& peer) const {
    const uint64_t ip = mode == JobSpec::Tan::kRemote ? peer.ip : 0;
    const uint64_t port = mode == JobSpec::Tan::kRemote ? peer.udp_port : 0;
    hops_[kTanHop].l2.store(0, std::memory_order_relaxed);
    tan_target_.store(ip << 32 | port << 16 | static_cast<uint64_t>(mode), std::memory_order_release);
  }

  // --- Next hops: where partials, late data and first data go ---
  //
  // Hop 0 is the TAN (root jobs), hops 1..upstreams().size() the parents.
  static constexpr uint32_t kTanHop = 0;
  uint32_t hop_count() const { return 1 + static_cast<uint32_t>(upstreams_.size()); }
  // The parent of the chunks whose addr_low is `addr_low` (non-root jobs). [any]
  uint32_t ParentHop(uint32_t addr_low) const {
    return 1 + addr_low % static_cast<uint32_t>(upstreams_.size());
  }
  // The hop's address: the TAN's (tan_peer()) or a parent's. [any]
  JobPeer HopPeer(uint32_t hop) const { return hop == kTanHop ? tan_peer() : upstreams_[hop - 1]; }
  // The resolved next hop; false while unresolved (or `hop` out of range). [any]
  bool GetHop(uint32_t hop, MemberAddr* out) const {
    return hop < hop_count() && Read(hops_[hop], out);
  }
  // Publishes a resolution (ARP answered); `addr.ip`/`udp_port` must be the
  // hop's, or with hop main_server_hop() the main server's. [control]
  void SetHop(uint32_t hop, const MemberAddr& addr) const;
  void ClearHop(uint32_t hop) const { hops_[hop].l2.store(0, std::memory_order_relaxed); }

  // The ack watermark this switch last passed upstream (non-root jobs): an
  // ACK that moves the members' minimum past it is relayed, so the parent
  // can free the job's last slots. The members repeat their last ACK (the
  // relay may be lost as theirs may), so the same watermark is passed on
  // again once `gap` ticks of the members' clock have gone by since it last
  // was: a few relays per round of repeats, not one per member. Returns
  // whether to relay `watermark` at tick `now`, and records it (racing
  // workers relay it once). [any]
  bool TakeRelayedAck(uint32_t watermark, uint32_t now, uint32_t gap) const;

  // --- Participation (straggler prediction): who the slots wait for ---

  // Whether member `index` is excluded (a predicted straggler). [any]
  bool Excluded(uint16_t index) const {
    return (excluded_[index >> 6].load(std::memory_order_relaxed) >> (index & 63)) & 1;
  }
  uint16_t excluded_count() const { return excluded_count_.load(std::memory_order_relaxed); }
  // Includes or excludes member `index`; returns whether it changed. [control]
  bool SetExcluded(uint16_t index, bool excluded) const;

 private:
  friend class JobTable;

  static constexpr uint64_t kValid = 1;
  static constexpr uint64_t kAckValid = uint64_t{1} << 32;
  static constexpr uint64_t kMoveValid = uint64_t{1} << 63;
  static constexpr uint64_t kNewRunValid = uint64_t{1} << 63;

  // 32 bytes, two to a cache line and never split across two.
  struct alignas(32) Member {
    std::atomic<uint64_t> l2{0};   // MAC (63..16) | ingress port index (15..8) | valid (0)
    std::atomic<uint64_t> l3{0};   // IPv4 (63..32) | UDP port (31..16) | VLAN (15..4) | valid (0)
    std::atomic<uint64_t> ack{0};  // watermark (31..0) | valid (32)
    std::atomic<uint64_t> run{0};  // incarnation (63..32) | valid (0)
  };
  static_assert(sizeof(Member) == 32, "two members per cache line");

  // `renewed` (a generation JobTable::Renew makes): the job it replaces,
  // whose TAN choice and resolved hops carry over and whose members'
  // incarnations end. `new_runs` counts requests for the control thread.
  Job(const JobSpec& spec, uint16_t index, uint32_t generation, const common::SipKey& slot_secret,
      std::atomic<uint32_t>* new_runs, const Job* renewed = nullptr);
  // The address half of BindMember. `same_host`: `from` is on the host the
  // member is bound to (MayRenew), and takes it whether silent or not.
  Bind BindAddress(uint16_t index, const MemberAddr& from, uint32_t now,
                   uint32_t rebind_ticks, bool same_host = false) const {
    Member& m = member_[index];
    const uint64_t l2 = (from.mac48 << 16) | (uint64_t{from.port_index} << 8) | kValid;
    const uint64_t l3 = (uint64_t{from.ip} << 32) | (uint64_t{from.udp_port} << 16) |
                        (uint64_t{from.vlan & 0xfffu} << 4) | kValid;
    uint64_t bound2 = m.l2.load(std::memory_order_relaxed);
    if (bound2 == l2) {
      const uint64_t bound3 = m.l3.load(std::memory_order_relaxed);
      // An invalid L3 half: another lcore is binding this very address.
      if (bound3 == l3 || (bound3 & kValid) == 0) {
        Touch(index, now);
        return Bind::kKnown;
      }
    }
    Bind result = Bind::kBound;
    if ((bound2 & kValid) != 0) {
      const uint32_t silent = Silent(index, now);
      if (!same_host && (rebind_ticks == 0 || silent < rebind_ticks)) return Bind::kRefused;
      result = Bind::kRebound;
    }
    // Of two addresses racing for the member, one wins.
    if (!m.l2.compare_exchange_strong(bound2, l2, std::memory_order_relaxed)) return Bind::kRefused;
    m.l3.store(l3, std::memory_order_relaxed);
    // A new address is a new process: its first watermark counts, not the
    // one the old address left (which may lie after it: a run restarted at
    // lower sequence numbers).
    if (result == Bind::kRebound) m.ack.store(0, std::memory_order_relaxed);
    Touch(index, now);
    return result;
  }
  // Whether `from` may start a new run for member `index`: the member is not
  // bound yet, `from` is on the host it is bound to (the same ingress port,
  // MAC, VLAN and IP address; any UDP port, which a restarted process draws
  // anew), or its bound address has been silent for `rebind_ticks` (as
  // BindAddress rebinds). Another host, while the rank is alive, is refused.
  bool MayRenew(uint16_t index, const MemberAddr& from, uint32_t now,
                uint32_t rebind_ticks) const {
    const Member& m = member_[index];
    const uint64_t bound2 = m.l2.load(std::memory_order_relaxed);
    if ((bound2 & kValid) == 0) return true;
    const uint64_t l2 = (from.mac48 << 16) | (uint64_t{from.port_index} << 8) | kValid;
    constexpr uint64_t kAllButUdpPort = ~(uint64_t{0xffff} << 16);
    const uint64_t host3 =
        (uint64_t{from.ip} << 32) | (uint64_t{from.vlan & 0xfffu} << 4) | kValid;
    if (bound2 == l2 && (m.l3.load(std::memory_order_relaxed) & kAllButUdpPort) == host3) {
      return true;
    }
    const uint32_t silent = Silent(index, now);
    return rebind_ticks != 0 && silent >= rebind_ticks;
  }
  // Moves member `index`'s run from `seen` (nothing, or a first datagram
  // without an incarnation) to `incarnation`; false when another lcore bound
  // another one first. The last member to send its first datagram sets the
  // run label.
  bool BindRun(uint16_t index, uint64_t seen, uint32_t incarnation) const;
  // A hash of the members' run words in member order (never 0).
  uint32_t HashRuns() const;
  // How long member `index` has been silent at `now`. Another lcore, whose
  // clock runs a little ahead of the caller's, may have seen it after
  // `now`: that is no silence at all, not a wrap to nearly 2^32 ticks (the
  // member would pass for gone, and the slot watermark move past a chunk
  // it lacks).
  uint32_t Silent(uint16_t index, uint32_t now) const {
    const uint32_t seen = seen_[index].load(std::memory_order_relaxed);
    return SeqBefore(now, seen) ? 0 : now - seen;
  }
  void Touch(uint16_t index, uint32_t now) const {
    if (seen_[index].load(std::memory_order_relaxed) != now) {
      seen_[index].store(now, std::memory_order_relaxed);
    }
  }
  static bool Within(uint32_t seq, uint32_t min_ack, uint32_t window, bool before_is_in) {
    return seq - min_ack < window || (before_is_in && SeqBefore(seq, min_ack));
  }
  // Whether `seq` lies within `window` chunks from the slot watermark
  // (cached; see SeqAllowed); true before any watermark.
  bool InWindow(uint32_t seq, uint32_t now, uint32_t gone_ticks, uint32_t window,
                bool before_is_in) const {
    const uint64_t cached = min_ack_cache_.load(std::memory_order_relaxed);
    if ((cached & kAckValid) != 0 &&
        Within(seq, static_cast<uint32_t>(cached), window, before_is_in)) {
      return true;
    }
    if (min_ack_refreshed_.load(std::memory_order_relaxed) == now && (cached & kAckValid) != 0 &&
        !min_ack_stale_.load(std::memory_order_relaxed)) {
      return false;
    }
    min_ack_refreshed_.store(now, std::memory_order_relaxed);
    // Cleared before the members are read: a watermark that moves during
    // the read marks the cache stale again. Acquire: the moves that marked
    // it are seen.
    if (min_ack_stale_.load(std::memory_order_relaxed)) {
      (void)min_ack_stale_.exchange(false, std::memory_order_acquire);
    }
    const std::optional<uint32_t> min = SlotWatermark(now, gone_ticks);
    if (!min) return true;  // nobody has sent a watermark yet
    min_ack_cache_.store(kAckValid | *min, std::memory_order_relaxed);
    return Within(seq, *min, window, before_is_in);
  }
  // Moves a watermark (31..0) | valid (32) forward to `watermark` in serial
  // order: the first one is taken as is, a later one only when it comes
  // after. Racing writers converge on the latest (compare-and-swap). When it
  // moves, the value it replaced goes to *old (when not null).
  static bool AdvanceWatermark(std::atomic<uint64_t>& ack, uint32_t watermark,
                               uint64_t* old = nullptr) {
    const uint64_t next = kAckValid | watermark;
    uint64_t cur = ack.load(std::memory_order_relaxed);
    while ((cur & kAckValid) == 0 || SeqBefore(static_cast<uint32_t>(cur), watermark)) {
      if (ack.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
        if (old != nullptr) *old = cur;
        return true;
      }
    }
    return false;
  }
  static bool Read(const Member& m, MemberAddr* out) {
    const uint64_t l2 = m.l2.load(std::memory_order_relaxed);
    const uint64_t l3 = m.l3.load(std::memory_order_relaxed);
    if ((l2 & kValid) == 0 || (l3 & kValid) == 0) return false;
    out->mac48 = l2 >> 16;
    out->port_index = static_cast<uint8_t>(l2 >> 8);
    out->ip = static_cast<uint32_t>(l3 >> 32);
    out->udp_port = static_cast<uint16_t>(l3 >> 16);
    out->vlan = static_cast<uint16_t>((l3 >> 4) & 0xfff);
    const uint64_t run = m.run.load(std::memory_order_relaxed);
    out->incarnation = (run & kValid) != 0 ? static_cast<uint32_t>(run >> 32) : 0;
    return true;
  }

  const JobSpec spec_;  // what it was made from: its next generation's too
  const uint32_t id_;
  const uint64_t key_;
  const uint16_t members_;
  const uint16_t nodes_;
  const bool ordered_;
  const JobSpec::Origin origin_;
  const uint16_t index_;
  const uint32_t generation_;
  // By member index; one more, at members_, binds the main server.
  const std::unique_ptr<Member[]> member_;
  // When each member last sent (BindMember's clock), by member index; own
  // array, so that the members' cache lines stay two to a line.
  const std::unique_ptr<std::atomic<uint32_t>[]> seen_;
  // The first watermark each member carried since it was bound (FirstAck),
  // by member index; written once per binding (UpdateAck).
  const std::unique_ptr<std::atomic<uint32_t>[]> first_ack_;
  const JobPlacement placement_;
  const JobSpec::Placed placed_;
  const uint32_t slot_quota_;
  const uint64_t quota_magic_;  // FastModMagic(slot_quota_); 0 without a quota
  // The move: valid (63) | base (62..32) | cut (31..0); 0 before it.
  mutable std::atomic<uint64_t> move_{0};
  const uint32_t hold_quota_;
  const uint32_t hold_window_;
  // The replaced run's incarnations, by member index and sorted; null for a
  // job's first generation.
  std::unique_ptr<uint32_t[]> ended_;
  std::unique_ptr<uint32_t[]> ended_sorted_;
  mutable std::atomic<uint16_t> runs_bound_{0};  // members with an incarnation
  mutable std::atomic<uint32_t> label_{0};
  mutable std::atomic<uint32_t> run_id_{0};  // the run's id (kRunId), 0 before one came
  mutable std::atomic<uint64_t> new_run_{0};  // valid (63) | member index (47..32) | incarnation
  mutable std::atomic<uint32_t> ended_above_{0};  // the label EndRunAbove ended; 0: none
  std::atomic<uint32_t>* const new_runs_;     // the table's count of requests  // hold_quota / (members - 1) chunks, at least 1
  mutable std::atomic<uint64_t> min_ack_cache_{0};    // SlotWatermark() (31..0) | valid (32)
  // NoteOldestBlocked: kBlockedValid | holder job id (63..32) | seq (31..0); 0: none.
  static constexpr uint64_t kBlockedValid = uint64_t{1} << 63;
  mutable std::atomic<uint64_t> oldest_blocked_{0};
  mutable std::atomic<uint32_t> min_ack_refreshed_{0};  // the tick of its last refresh
  // A member at or before the cached watermark moved on since its refresh.
  // A move that races a refresh on another lcore (between its read of the
  // members and its store of the cache) may go unmarked: the next tick's
  // refresh catches it.
  mutable std::atomic<bool> min_ack_stale_{false};
  // The tree.
  uint16_t node_base_ = 0;                        // contiguous ids: node = base + index
  std::unique_ptr<uint16_t[]> member_nodes_;      // else: node id by index
  std::unique_ptr<uint32_t[]> sorted_nodes_;      // and (node << 16 | index), sorted
  std::vector<std::optional<std::vector<uint16_t>>> covers_;  // by index; empty: no switches
  // Every id the child switches cover, with the member index of the child:
  // (id << 16 | index), sorted (CoveringChild).
  std::vector<uint32_t> covered_by_;
  const std::vector<JobPeer> upstreams_;
  const uint64_t timeout_cycles_;
  const bool batch_;
  const bool bypass_covered_nodes_;
  const bool parameter_server_;
  const bool verify_;
  const uint32_t main_server_ip_;
  const uint16_t main_server_port_;
  const JobSpec::Mode mode_;
  const uint32_t store_quota_;
  // watermark (31..0) | valid (32) | tick of the last relay, 31 bits (63..33)
  mutable std::atomic<uint64_t> relayed_ack_{0};
  mutable std::atomic<uint16_t> tan_member_{kNoNode};
  mutable std::atomic<uint64_t> tan_target_{0};  // ip (63..32) | port (31..16) | JobSpec::Tan (7..0)
  const std::unique_ptr<Member[]> hops_;            // kTanHop, the parents, the main server
  std::unique_ptr<std::atomic<uint64_t>[]> excluded_;
  mutable std::atomic<uint16_t> excluded_count_{0};
};

class JobTable {
 public:
  // A table for up to `max_jobs` (1..65536) jobs of up to `max_fan_in`
  // (1..1024) members each, with room for `max_readers` registered readers.
  // InvalidArgument for a bound out of range. [control]
  static common::Result<std::unique_ptr<JobTable>> Create(uint32_t max_jobs, uint16_t max_fan_in,
                                                          uint32_t max_readers = kMaxJobReaders);
  // Frees every job. No reader may be online. [control]
  ~JobTable();
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // --- Lookup [reader] ---

  // The job with `id`, or nullptr. Lock-free, no allocation, at most one pass
  // over the array. The pointer is valid until the caller's next Quiescent().
  const Job* Find(uint32_t id) const {
    const std::atomic<Job*>* slots = slots_.load(std::memory_order_acquire);
    uint32_t i = Home(id);
    for (uint32_t n = 0; n <= mask_; ++n) {
      const Job* job = slots[i].load(std::memory_order_acquire);
      if (job == nullptr) return nullptr;
      if (job != Tombstone() && job->id_ == id) return job;
      i = (i + 1) & mask_;
    }
    return nullptr;
  }

  // --- The reader protocol ---

  // Gives a reader thread its id (0..max_readers-1). The reader starts
  // offline: it must call ReaderOnline() before its first Find().
  // ResourceExhausted when max_readers are registered. [control]
  common::Result<uint32_t> RegisterReader();
  // Start and stop reading; while offline a reader does not hold back
  // reclamation. Called by the reader thread itself. [reader]
  void ReaderOnline(uint32_t reader_id) const { rte_rcu_qsbr_thread_online(qsbr_, reader_id); }
  void ReaderOffline(uint32_t reader_id) const { rte_rcu_qsbr_thread_offline(qsbr_, reader_id); }
  // Declares that the reader holds no Job pointer: once per poll loop. One
  // load and one store. [reader]
  void Quiescent(uint32_t reader_id) const { rte_rcu_qsbr_quiescent(qsbr_, reader_id); }

  // --- Writer [control] ---

  // Adds a job. AlreadyExists for a job id in the table; ResourceExhausted
  // when max_jobs jobs exist (or are removed but not yet reclaimed);
  // InvalidArgument for id 0, members 0 or above max_fan_in, or nodes 0.
  common::Result<const Job*> Add(const JobSpec& spec);
  // Removes a job; readers may still use it until they pass a quiescent
  // point, and its index stays taken until Reclaim() frees it. NotFound when
  // absent.
  common::Status Remove(uint32_t id);
  // Replaces job `id` with a new generation of itself, for a new run
  // (Job::RequestNewRun), or for the end of its run above
  // (Job::EndRunAbove): the same spec, index and counters, its TAN choice
  // and resolved hops; members unbound, nobody excluded, no move; the old
  // generation's member incarnations end (Job::Ended). Readers may use the
  // old generation until their quiescent point; the index stays taken.
  // NotFound when absent.
  common::Result<const Job*> Renew(uint32_t id);
  // The ids of jobs whose workers asked for a new run (or met the end of
  // their run above) since the last call; O(1) when none did. [control]
  std::vector<uint32_t> TakeNewRuns();
  // Frees the removed jobs and replaced arrays that every online reader has
  // moved past, and returns their indices to the free pool. Never waits.
  // Returns the number of jobs freed.
  size_t Reclaim();
  // The secret of the slot placement (slot_placement.h): each job added from
  // now on gets its slot offset under it. Set once, before the first Add;
  // zero without. [control]
  void SetSlotSecret(const common::SipKey& secret) { slot_secret_ = secret; }

  // Called with a job's index when Reclaim() frees the job, before the index
  // can be given to a new job: the moment no reader can still count anything
  // for the old job, so per-index state (per-lcore counters) can be reset.
  void SetReclaimHook(std::function<void(uint16_t index)> hook) { reclaim_hook_ = std::move(hook); }

  // --- Inspection ---

  // Visits every job, in array order. [control]
  void ForEach(const std::function<void(const Job&)>& fn) const;
  // Jobs in the table (removed ones excluded). [any]
  size_t size() const { return size_.load(std::memory_order_relaxed); }
  uint32_t max_jobs() const { return max_jobs_; }      // [any]
  uint16_t max_fan_in() const { return max_fan_in_; }  // [any]
  // Removed jobs not yet freed. [control]
  size_t pending_reclaim() const { return retired_jobs_; }

 private:
  struct QsbrDeleter {
    void operator()(rte_rcu_qsbr* v) const;
  };
  struct SlotsDeleter {
    void operator()(std::atomic<Job*>* slots) const { delete[] slots; }
  };
  using SlotsPtr = std::unique_ptr<std::atomic<Job*>[], SlotsDeleter>;
  // Something readers may still see, freed after the grace period that began
  // when it was unlinked (`token`).
  struct Retired {
    uint64_t token;
    std::unique_ptr<Job> job;  // or
    SlotsPtr slots;
    bool renewed = false;  // the job's index passed to its next generation
  };

  JobTable(uint32_t max_jobs, uint16_t max_fan_in, uint32_t capacity, uint32_t max_readers);

  // Never a valid Job address (jobs are 64-byte aligned); marks a removed slot.
  static const Job* Tombstone() { return reinterpret_cast<const Job*>(uintptr_t{1}); }
  uint32_t Home(uint32_t id) const { return (id * 0x9e3779b1u) >> shift_; }
  SlotsPtr NewSlots() const;
  // Publishes a fresh array without tombstones; the old one is retired. [control]
  void Compact();

  const uint32_t max_jobs_;
  const uint16_t max_fan_in_;
  const uint32_t mask_;   // array size - 1
  const uint32_t shift_;  // 32 - log2(array size)
  const uint32_t max_readers_;
  std::unique_ptr<rte_rcu_qsbr, QsbrDeleter> qsbr_holder_;
  rte_rcu_qsbr* qsbr_;  // == qsbr_holder_.get(); used from const [reader] methods

  std::atomic<std::atomic<Job*>*> slots_;  // the published array
  SlotsPtr current_;                       // owns *slots_
  std::atomic<size_t> size_{0};
  uint32_t tombstones_ = 0;                 // [control]
  uint32_t generations_ = 0;                // jobs ever added [control]
  std::vector<std::unique_ptr<Job>> live_;  // by index; owns the live jobs [control]
  std::priority_queue<uint16_t, std::vector<uint16_t>, std::greater<>> free_indices_;
  std::vector<Retired> retired_;  // oldest first
  size_t retired_jobs_ = 0;
  uint32_t next_reader_ = 0;
  std::function<void(uint16_t)> reclaim_hook_;
  common::SipKey slot_secret_;
  std::atomic<uint32_t> new_runs_{0};  // Job::RequestNewRun, EndRunAbove since TakeNewRuns [any]
};

}  // namespace aggswitch::aggregator
