#include "aggregator/job_table.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "aggregator/slot_placement.h"

namespace aggswitch::aggregator {
namespace {

uint32_t NextPowerOfTwo(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

uint32_t Log2(uint32_t power_of_two) {
  uint32_t bits = 0;
  while ((uint32_t{1} << bits) < power_of_two) ++bits;
  return bits;
}

std::string JobName(uint32_t id) {
  return "job " + std::to_string(id);
}

}  // namespace

std::string_view OriginName(JobSpec::Origin origin) {
  switch (origin) {
    case JobSpec::Origin::kConfig:
      return "config";
    case JobSpec::Origin::kApi:
      return "api";
    case JobSpec::Origin::kInBand:
      return "in-band";
  }
  return "unknown";
}

std::string_view ModeName(JobSpec::Mode mode) {
  switch (mode) {
    case JobSpec::Mode::kAggregate: return "aggregate";
    case JobSpec::Mode::kStore: return "store";
    case JobSpec::Mode::kBoth: return "both";
  }
  return "aggregate";
}

std::string_view PlacedName(JobSpec::Placed placed) {
  switch (placed) {
    case JobSpec::Placed::kHash:
      return "hash";
    case JobSpec::Placed::kRoundRobin:
      return "round_robin";
    case JobSpec::Placed::kRandom:
      return "random";
    case JobSpec::Placed::kHint:
      return "hint";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Job

Job::Job(const JobSpec& spec, uint16_t index, uint32_t generation, const common::SipKey& slot_secret,
         std::atomic<uint32_t>* new_runs, const Job* renewed)
    : spec_(spec),
      id_(spec.id),
      key_(spec.key),
      members_(spec.members),
      nodes_(spec.nodes),
      ordered_(spec.ordered),
      origin_(spec.origin),
      index_(index),
      generation_(generation),
      member_(new Member[spec.members + 1u]),
      seen_(new std::atomic<uint32_t>[spec.members + 1u]),
      first_ack_(new std::atomic<uint32_t>[spec.members]),
      placement_(spec.partition
                     ? JobPlacement::Partition(spec.partition->base, spec.partition->span)
                     : JobPlacement::Hash(SlotOffset(slot_secret, spec.id))),
      placed_(spec.partition ? spec.placed : JobSpec::Placed::kHash),
      slot_quota_(spec.slot_quota),
      quota_magic_(spec.slot_quota == 0 ? 0 : FastModMagic(spec.slot_quota)),
      hold_quota_(spec.hold_quota),
      hold_window_(std::max<uint32_t>(1, spec.hold_quota / std::max<uint32_t>(1, spec.members - 1u))),
      new_runs_(new_runs),
      upstreams_(spec.upstreams),
      timeout_cycles_(spec.timeout_cycles),
      batch_(spec.batch || spec.ordered),
      bypass_covered_nodes_(spec.bypass_covered_nodes),
      parameter_server_(spec.parameter_server),
      verify_(spec.verify),
      main_server_ip_(spec.main_server_ip),
      main_server_port_(spec.main_server_port),
      mode_(spec.mode),
      store_quota_(spec.store_quota),
      // The TAN, the parents, then the main server.
      hops_(new Member[2 + spec.upstreams.size()]),
      excluded_(new std::atomic<uint64_t>[(spec.members + 63) / 64]) {
  for (uint32_t w = 0; w < (spec.members + 63u) / 64u; ++w) excluded_[w].store(0, std::memory_order_relaxed);
  for (uint32_t i = 0; i <= spec.members; ++i) seen_[i].store(0, std::memory_order_relaxed);
  for (uint16_t i = 0; i < spec.members; ++i) first_ack_[i].store(0, std::memory_order_relaxed);
  if (!spec.member_nodes.empty()) {
    // Contiguous ids (a rack's ranks) map by subtraction; anything else by search.
    bool contiguous = true;
    for (uint16_t i = 1; i < members_; ++i) {
      contiguous &= spec.member_nodes[i] == spec.member_nodes[0] + i;
    }
    node_base_ = spec.member_nodes[0];
    if (!contiguous) {
      member_nodes_.reset(new uint16_t[members_]);
      sorted_nodes_.reset(new uint32_t[members_]);
      for (uint16_t i = 0; i < members_; ++i) {
        member_nodes_[i] = spec.member_nodes[i];
        sorted_nodes_[i] = uint32_t{spec.member_nodes[i]} << 16 | i;
      }
      std::sort(sorted_nodes_.get(), sorted_nodes_.get() + members_);
    }
  }
  bool any_switch = false;
  for (const auto& c : spec.covers) any_switch |= !c.empty();
  if (any_switch) {
    covers_.resize(members_);
    for (uint16_t i = 0; i < members_ && i < spec.covers.size(); ++i) {
      if (spec.covers[i].empty()) continue;
      covers_[i] = spec.covers[i];
      for (const uint16_t id : spec.covers[i]) covered_by_.push_back(uint32_t{id} << 16 | i);
    }
    std::sort(covered_by_.begin(), covered_by_.end());
  }
  SetTan(spec.tan, spec.tan_peer);
  SetTanMember(spec.tan_member);
  if (renewed != nullptr) {
    tan_target_.store(renewed->tan_target_.load(std::memory_order_acquire), std::memory_order_relaxed);
    SetTanMember(renewed->tan_member());
    for (uint32_t hop = 0; hop < 2 + upstreams_.size(); ++hop) {
      hops_[hop].l2.store(renewed->hops_[hop].l2.load(std::memory_order_relaxed), std::memory_order_relaxed);
      hops_[hop].l3.store(renewed->hops_[hop].l3.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    // Straggler predictions applied stay: they are about the members'
    // places in the fabric, not about one run of their processes.
    for (uint16_t i = 0; i < members_; ++i) {
      if (renewed->Excluded(i)) (void)SetExcluded(i, true);
    }
    ended_.reset(new uint32_t[members_]);
    ended_sorted_.reset(new uint32_t[members_]);
    for (uint16_t i = 0; i < members_; ++i) ended_[i] = renewed->MemberIncarnation(i);
    std::copy(ended_.get(), ended_.get() + members_, ended_sorted_.get());
    std::sort(ended_sorted_.get(), ended_sorted_.get() + members_);
  }
}

bool Job::BindRun(uint16_t index, uint64_t seen, uint32_t incarnation) const {
  const uint64_t run = kValid | uint64_t{incarnation} << 32;
  uint64_t expected = seen;
  if (!member_[index].run.compare_exchange_strong(expected, run, std::memory_order_relaxed)) {
    return expected == run;
  }
  if ((seen & kValid) == 0 &&
      runs_bound_.fetch_add(1, std::memory_order_acq_rel) + 1 == members_) {
    // Every member has sent: the label is a hash of their incarnations, in
    // member order, never 0 (unless UpLabel fixed one first).
    uint32_t none = 0;
    label_.compare_exchange_strong(none, HashRuns(), std::memory_order_relaxed);
  }
  return true;
}

uint32_t Job::HashRuns() const {
  uint64_t h = 0x6a09e667f3bcc908ull ^ id_;
  for (uint16_t i = 0; i < members_; ++i) {
    h = (h ^ member_[i].run.load(std::memory_order_relaxed)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  const auto label = static_cast<uint32_t>(h ^ h >> 32);
  return label == 0 ? 1 : label;
}

uint32_t Job::UpLabel(bool settling) const {
  if (const uint32_t id = run_id_.load(std::memory_order_relaxed); id != 0) return id;
  uint32_t label = label_.load(std::memory_order_relaxed);
  if (label != 0 || runs_bound_.load(std::memory_order_acquire) == 0) return label;
  // A parameter-server job's switches wait for every member instead: its
  // root's TAN applies a chunk's step once per run, and a label of some
  // members only (this switch restarted, the others have not sent again
  // yet) is another run's to the root and its TAN, which would apply the
  // step of a chunk it answered before the restart again. Nothing goes up
  // meanwhile (up_unlabelled): the chunk is held as a lost partial is, and
  // its answer needs every member anyway.
  if (parameter_server_) return 0;
  // So does any job's switch for a while after it started (`settling`):
  // back from a restart, the run's members resend what is unanswered
  // within their retransmission timeout, and once all of them have sent,
  // the label is the one the parent knows from before the restart. A label
  // of the first of them would be a new run to the parent, ending the
  // run's other switches' labels (docs/protocol.md, "Runs"). After the
  // grace, a member still missing may never come: as below.
  if (settling) return 0;
  // Something must go up before every member has sent (one is late from the
  // run's start, or never comes): the label of the members that have, fixed
  // from now on for this generation. Members not yet in hash as nothing.
  uint32_t none = 0;
  const uint32_t fixed = HashRuns();
  return label_.compare_exchange_strong(none, fixed, std::memory_order_relaxed) ? fixed : none;
}

void Job::RequestNewRun(uint16_t index, uint32_t incarnation) const {
  uint64_t none = 0;
  if (new_run_.compare_exchange_strong(none, kNewRunValid | uint64_t{index} << 32 | incarnation,
                                       std::memory_order_relaxed) &&
      new_runs_ != nullptr) {
    new_runs_->fetch_add(1, std::memory_order_release);
  }
}

bool Job::EndRunAbove(uint32_t label) const {
  if (label == 0 || label != this->label()) return false;
  uint32_t none = 0;
  if (!ended_above_.compare_exchange_strong(none, label, std::memory_order_relaxed)) return false;
  if (new_runs_ != nullptr) new_runs_->fetch_add(1, std::memory_order_release);
  return true;
}

Job::~Job() = default;

void Job::SetHop(uint32_t hop, const MemberAddr& addr) const {
  Member& m = hops_[hop];
  m.l3.store((uint64_t{addr.ip} << 32) | (uint64_t{addr.udp_port} << 16) |
                 (uint64_t{addr.vlan & 0xfffu} << 4) | kValid,
             std::memory_order_relaxed);
  m.l2.store((addr.mac48 << 16) | (uint64_t{addr.port_index} << 8) | kValid,
             std::memory_order_relaxed);
}

bool Job::SetMove(const Move& m) const {
  if (slot_quota_ == 0 || m.base >= (uint32_t{1} << 31)) return false;
  uint64_t none = 0;
  // Release: a worker that sees the move sees nothing older than it.
  return move_.compare_exchange_strong(none, kMoveValid | uint64_t{m.base} << 32 | m.cut,
                                       std::memory_order_release, std::memory_order_relaxed);
}

bool Job::SetExcluded(uint16_t index, bool excluded) const {
  if (index >= members_ || Excluded(index) == excluded) return false;
  std::atomic<uint64_t>& word = excluded_[index >> 6];
  const uint64_t bit = uint64_t{1} << (index & 63);
  word.store(excluded ? word.load(std::memory_order_relaxed) | bit
                      : word.load(std::memory_order_relaxed) & ~bit,
             std::memory_order_relaxed);
  excluded_count_.store(static_cast<uint16_t>(excluded_count_.load(std::memory_order_relaxed) +
                                              (excluded ? 1 : -1)),
                        std::memory_order_relaxed);
  return true;
}

bool Job::TakeRelayedAck(uint32_t watermark, uint32_t now, uint32_t gap) const {
  constexpr uint64_t kTickMask = (uint64_t{1} << 31) - 1;
  const uint64_t next = kAckValid | (uint64_t{now} & kTickMask) << 33 | watermark;
  uint64_t cur = relayed_ack_.load(std::memory_order_relaxed);
  for (;;) {
    const bool news = (cur & kAckValid) == 0 || SeqBefore(static_cast<uint32_t>(cur), watermark);
    const bool again = (cur & kAckValid) != 0 && static_cast<uint32_t>(cur) == watermark &&
                       ((now - (cur >> 33)) & kTickMask) >= gap;
    if (!news && !again) return false;
    if (relayed_ack_.compare_exchange_weak(cur, next, std::memory_order_relaxed)) return true;
  }
}

std::optional<uint32_t> Job::MinAck() const {
  std::optional<uint32_t> min;
  for (uint16_t node = 0; node < members_; ++node) {
    const std::optional<uint32_t> ack = GetAck(node);
    if (ack && (!min || SeqBefore(*ack, *min))) min = ack;
  }
  return min;
}

std::optional<uint32_t> Job::SlotWatermark(uint32_t now, uint32_t gone_ticks) const {
  std::optional<uint32_t> min;
  for (uint16_t node = 0; node < members_; ++node) {
    if ((member_[node].l2.load(std::memory_order_relaxed) & kValid) == 0) continue;
    if (gone_ticks != 0 && Silent(node, now) >= gone_ticks) continue;
    const std::optional<uint32_t> ack = GetAck(node);
    if (ack && (!min || SeqBefore(*ack, *min))) min = ack;
  }
  return min ? min : MinAck();
}

int Job::CoveringChild(uint16_t node) const {
  if (covered_by_.empty() || LocalIndex(node) >= 0) return -1;
  const auto it = std::lower_bound(covered_by_.begin(), covered_by_.end(), uint32_t{node} << 16);
  if (it == covered_by_.end() || (*it >> 16) != node) return -1;
  return static_cast<int>(*it & 0xffff);
}

uint16_t Job::LearnedMembers() const {
  uint16_t n = 0;
  for (uint16_t node = 0; node < members_; ++node) {
    if (member_[node].l2.load(std::memory_order_relaxed) & kValid) ++n;
  }
  return n;
}

// ---------------------------------------------------------------------------
// JobTable

void JobTable::QsbrDeleter::operator()(rte_rcu_qsbr* v) const {
  std::free(v);
}

common::Result<std::unique_ptr<JobTable>> JobTable::Create(uint32_t max_jobs, uint16_t max_fan_in,
                                                           uint32_t max_readers) {
  if (max_jobs == 0 || max_jobs > kMaxJobTableJobs) {
    return common::InvalidArgument("job table: max_jobs must be 1.." +
                                   std::to_string(kMaxJobTableJobs) + ", got " +
                                   std::to_string(max_jobs));
  }
  if (max_fan_in == 0 || max_fan_in > kMaxJobFanIn) {
    return common::InvalidArgument("job table: max_fan_in must be 1.." +
                                   std::to_string(kMaxJobFanIn) + ", got " +
                                   std::to_string(max_fan_in));
  }
  if (max_readers == 0 || max_readers > 1024) {
    return common::InvalidArgument("job table: max_readers must be 1..1024, got " +
                                   std::to_string(max_readers));
  }
  // Live jobs fill at most half the array.
  const uint32_t capacity = NextPowerOfTwo(2 * max_jobs);
  std::unique_ptr<JobTable> table(new JobTable(max_jobs, max_fan_in, capacity, max_readers));
  if (table->qsbr_ == nullptr) {
    return common::ResourceExhausted("job table: cannot allocate the RCU QSBR variable");
  }
  return table;
}

JobTable::JobTable(uint32_t max_jobs, uint16_t max_fan_in, uint32_t capacity, uint32_t max_readers)
    : max_jobs_(max_jobs),
      max_fan_in_(max_fan_in),
      mask_(capacity - 1),
      shift_(32 - Log2(capacity)),
      max_readers_(max_readers),
      qsbr_(nullptr),
      slots_(nullptr),
      live_(max_jobs) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  const size_t size = rte_rcu_qsbr_get_memsize(max_readers);
  const size_t rounded =
      (size + RTE_CACHE_LINE_SIZE - 1) / RTE_CACHE_LINE_SIZE * RTE_CACHE_LINE_SIZE;
  auto* v = static_cast<rte_rcu_qsbr*>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, rounded));
  if (v != nullptr && rte_rcu_qsbr_init(v, max_readers) == 0) {
    qsbr_holder_.reset(v);
    qsbr_ = v;
  } else {
    std::free(v);
  }
  current_ = NewSlots();
  slots_.store(current_.get(), std::memory_order_release);
  for (uint32_t i = 0; i < max_jobs; ++i) free_indices_.push(static_cast<uint16_t>(i));
}

JobTable::~JobTable() = default;

JobTable::SlotsPtr JobTable::NewSlots() const {
  SlotsPtr slots(new std::atomic<Job*>[mask_ + 1]);
  for (uint32_t i = 0; i <= mask_; ++i) slots[i].store(nullptr, std::memory_order_relaxed);
  return slots;
}

common::Result<uint32_t> JobTable::RegisterReader() {
  if (next_reader_ >= max_readers_) {
    return common::ResourceExhausted("job table: all " + std::to_string(max_readers_) +
                                     " reader ids are taken");
  }
  const uint32_t id = next_reader_;
  if (rte_rcu_qsbr_thread_register(qsbr_, id) != 0) {
    return common::Internal("job table: rte_rcu_qsbr_thread_register(" + std::to_string(id) +
                            ") failed");
  }
  ++next_reader_;
  return id;
}

common::Result<const Job*> JobTable::Add(const JobSpec& spec) {
  if (spec.id == 0) return common::InvalidArgument("job id must be 1..4294967295, got 0");
  if (spec.members == 0 || spec.members > max_fan_in_) {
    return common::InvalidArgument(JobName(spec.id) + ": members must be 1.." +
                                   std::to_string(max_fan_in_) + " (aggregation.max_fan_in), got " +
                                   std::to_string(spec.members));
  }
  if (spec.nodes == 0) {
    return common::InvalidArgument(JobName(spec.id) + ": nodes must be at least 1, got 0");
  }
  if (spec.partition && spec.partition->span == 0) {
    return common::InvalidArgument(JobName(spec.id) + ": a slot partition needs at least one slot");
  }
  if (!spec.member_nodes.empty()) {
    if (spec.member_nodes.size() != spec.members) {
      return common::InvalidArgument(JobName(spec.id) + ": " + std::to_string(spec.members) +
                                     " members but " + std::to_string(spec.member_nodes.size()) +
                                     " node ids");
    }
    std::vector<uint16_t> sorted = spec.member_nodes;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.back() == 0xffff) {
      return common::InvalidArgument(JobName(spec.id) +
                                     ": member node ids must be unique and at most 65534");
    }
  }
  if (spec.covers.size() > spec.members) {
    return common::InvalidArgument(JobName(spec.id) + ": covers lists exceed the members");
  }
  if (spec.upstreams.size() > kMaxUpstreams) {
    return common::InvalidArgument(JobName(spec.id) + ": at most " + std::to_string(kMaxUpstreams) +
                                   " upstreams, got " + std::to_string(spec.upstreams.size()));
  }
  for (const JobPeer& up : spec.upstreams) {
    if (up.ip == 0 || up.udp_port == 0 || up.node != spec.upstreams[0].node) {
      return common::InvalidArgument(JobName(spec.id) +
                                     ": each upstream needs an address and a port, and the same node");
    }
  }
  if (spec.tan == JobSpec::Tan::kRemote && spec.tan_peer.ip == 0) {
    return common::InvalidArgument(JobName(spec.id) + ": a remote TAN needs an address");
  }

  std::atomic<Job*>* slots = current_.get();
  // One pass finds a duplicate and the first reusable slot.
  int64_t target = -1;
  uint32_t i = Home(spec.id);
  for (uint32_t n = 0; n <= mask_; ++n, i = (i + 1) & mask_) {
    Job* job = slots[i].load(std::memory_order_relaxed);
    if (job == Tombstone()) {
      if (target < 0) target = i;
      continue;
    }
    if (job == nullptr) {
      if (target < 0) target = i;
      break;
    }
    if (job->id_ == spec.id) return common::AlreadyExists(JobName(spec.id) + " already exists");
  }

  // Unreachable: live jobs fill at most half the array and tombstones at most a quarter.
  if (target < 0) return common::Internal("job table: no free slot in the array");

  if (free_indices_.empty()) Reclaim();
  if (free_indices_.empty()) {
    std::string message = "job table full: " + std::to_string(size()) + " of " +
                          std::to_string(max_jobs_) + " jobs (aggregation.max_jobs)";
    if (retired_jobs_ > 0) {
      message += ", " + std::to_string(retired_jobs_) +
                 " of them removed and waiting for the workers to move past them";
    }
    return common::ResourceExhausted(std::move(message));
  }
  const uint16_t index = free_indices_.top();
  free_indices_.pop();

  // Taking an empty slot may push tombstones plus jobs past 3/4 of the array;
  // a fresh array keeps probes short (and always leaves an empty slot).
  const bool takes_empty = slots[target].load(std::memory_order_relaxed) == nullptr;
  if (takes_empty && (size() + tombstones_ + 1) * 4 > (mask_ + 1) * uint64_t{3}) {
    Compact();
    slots = current_.get();
    target = Home(spec.id);
    while (slots[target].load(std::memory_order_relaxed) != nullptr) target = (target + 1) & mask_;
  }
  if (slots[target].load(std::memory_order_relaxed) == Tombstone()) --tombstones_;

  std::unique_ptr<Job> job(new Job(spec, index, ++generations_, slot_secret_, &new_runs_));
  Job* raw = job.get();
  live_[index] = std::move(job);
  // Release: a reader that loads the pointer sees the constructed job.
  slots[target].store(raw, std::memory_order_release);
  size_.fetch_add(1, std::memory_order_relaxed);
  return static_cast<const Job*>(raw);
}

common::Status JobTable::Remove(uint32_t id) {
  std::atomic<Job*>* slots = current_.get();
  uint32_t i = Home(id);
  for (uint32_t n = 0; n <= mask_; ++n, i = (i + 1) & mask_) {
    Job* job = slots[i].load(std::memory_order_relaxed);
    if (job == nullptr) break;
    if (job == Tombstone() || job->id_ != id) continue;
    slots[i].store(const_cast<Job*>(Tombstone()), std::memory_order_release);
    ++tombstones_;
    size_.fetch_sub(1, std::memory_order_relaxed);
    // The grace period starts after the unlink: readers that pass a quiescent
    // point from now on cannot hold the pointer.
    retired_.push_back(Retired{rte_rcu_qsbr_start(qsbr_), std::move(live_[job->index_]), nullptr});
    ++retired_jobs_;
    return common::Status::Ok();
  }
  return common::NotFound(JobName(id) + " does not exist");
}

common::Result<const Job*> JobTable::Renew(uint32_t id) {
  std::atomic<Job*>* slots = current_.get();
  uint32_t i = Home(id);
  for (uint32_t n = 0; n <= mask_; ++n, i = (i + 1) & mask_) {
    Job* old = slots[i].load(std::memory_order_relaxed);
    if (old == nullptr) break;
    if (old == Tombstone() || old->id_ != id) continue;
    std::unique_ptr<Job> job(
        new Job(old->spec_, old->index_, ++generations_, slot_secret_, &new_runs_, old));
    Job* raw = job.get();
    std::unique_ptr<Job> replaced = std::move(live_[old->index_]);
    live_[old->index_] = std::move(job);
    slots[i].store(raw, std::memory_order_release);
    retired_.push_back(Retired{rte_rcu_qsbr_start(qsbr_), std::move(replaced), nullptr, true});
    return static_cast<const Job*>(raw);
  }
  return common::NotFound(JobName(id) + " does not exist");
}

std::vector<uint32_t> JobTable::TakeNewRuns() {
  std::vector<uint32_t> ids;
  if (new_runs_.exchange(0, std::memory_order_acquire) == 0) return ids;
  for (const auto& job : live_) {
    if (job != nullptr && (job->NewRunRequest() || job->RunEndedAbove())) ids.push_back(job->id_);
  }
  return ids;
}

void JobTable::Compact() {
  SlotsPtr fresh = NewSlots();
  const std::atomic<Job*>* old = current_.get();
  for (uint32_t i = 0; i <= mask_; ++i) {
    Job* job = old[i].load(std::memory_order_relaxed);
    if (job == nullptr || job == Tombstone()) continue;
    uint32_t j = Home(job->id_);
    while (fresh[j].load(std::memory_order_relaxed) != nullptr) j = (j + 1) & mask_;
    fresh[j].store(job, std::memory_order_relaxed);
  }
  // Release: a reader that loads the new array sees its contents.
  slots_.store(fresh.get(), std::memory_order_release);
  retired_.push_back(Retired{rte_rcu_qsbr_start(qsbr_), nullptr, std::move(current_)});
  current_ = std::move(fresh);
  tombstones_ = 0;
}

size_t JobTable::Reclaim() {
  size_t freed = 0;
  size_t kept = 0;
  for (size_t i = 0; i < retired_.size(); ++i) {
    Retired& r = retired_[i];
    if (rte_rcu_qsbr_check(qsbr_, r.token, false) != 1) {
      if (kept != i) retired_[kept] = std::move(r);
      ++kept;
      continue;
    }
    if (r.job && r.renewed) {
      r.job.reset();  // its index belongs to its next generation
    } else if (r.job) {
      if (reclaim_hook_) reclaim_hook_(r.job->index_);
      free_indices_.push(r.job->index_);
      r.job.reset();
      --retired_jobs_;
      ++freed;
    }
    r.slots.reset();
  }
  retired_.resize(kept);
  return freed;
}

void JobTable::ForEach(const std::function<void(const Job&)>& fn) const {
  const std::atomic<Job*>* slots = current_.get();
  for (uint32_t i = 0; i <= mask_; ++i) {
    const Job* job = slots[i].load(std::memory_order_relaxed);
    if (job != nullptr && job != Tombstone()) fn(*job);
  }
}

}  // namespace aggswitch::aggregator
