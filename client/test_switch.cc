#include "client/test_switch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "aggregator/slot_placement.h"
#include "aggregator/slot_table.h"
#include "aggregator/wire.h"

namespace aggswitch::client {

namespace {

using aggregator::AggFields;
using aggregator::AggHeader;
using aggregator::NackReason;
using aggregator::Opcode;
namespace flags = aggregator::flags;

constexpr uint32_t kMaxDatagram = 9600;

struct JobState {
  uint64_t key = 0;
  uint16_t members = 0;
  uint16_t nodes = 1;
  uint32_t generation = 0;  // as Job::generation: which registration
  std::vector<std::optional<sockaddr_in>> addrs;  // learned, per member
  std::vector<std::optional<uint32_t>> acks;      // watermarks, per member
  std::vector<uint32_t> incarnations;             // the last datagram's, per member
};

}  // namespace

struct TestSwitch::State {
  Options options;
  int fd = -1;
  aggregator::SlotTable slots;
  std::map<uint32_t, JobState> jobs;
  uint32_t generations = 0;  // jobs ever registered
  std::mt19937_64 rng;
  uint16_t result_slot_hint = aggregator::kNoSlotHint;  // Options::move_after

  explicit State(const Options& o)
      : options(o),
        slots(aggregator::SlotTableConfig{
            .slots = o.slots, .max_fan_in = 256, .max_payload = kMaxDatagram - 28 - sizeof(AggHeader)}),
        rng(o.seed) {}

  bool Chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < p; }

  // SlotTable's release check: every member acknowledged the chunk, or its job is gone.
  static bool Releasable(void* ctx, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                         bool complete) {
    const auto& jobs = *static_cast<const std::map<uint32_t, JobState>*>(ctx);
    const auto it = jobs.find(job_id);
    if (it == jobs.end() || it->second.generation != job_generation) return true;
    if (!complete) return false;
    for (const std::optional<uint32_t>& ack : it->second.acks) {
      if (!ack || !aggregator::SeqBefore(seq, *ack)) return false;
    }
    return true;
  }

  void SendTo(const sockaddr_in& to, const uint8_t* data, size_t len) {
    sendto(fd, data, len, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }

  // A header-only answer built from the request (a NACK or a task-info echo).
  void Answer(const AggHeader& request, Opcode opcode, uint32_t aux, const sockaddr_in& to) {
    AggFields f = aggregator::ReadAggFields(request);
    f.job_key = 0;  // as aggswitch: answers carry no key
    f.opcode = opcode;
    f.aux = aux;
    f.elem_count = 0;
    if (opcode == Opcode::kNack) f.flags = 0;
    uint8_t buf[sizeof(AggHeader)];
    aggregator::WriteAggHeader(f, 0, reinterpret_cast<AggHeader*>(buf));
    SendTo(to, buf, sizeof(buf));
  }

  // As aggswitch answers a retransmission or a QUERY about a chunk (kHeld:
  // its slot waits for `awaited` more members; kMissing: the chunk's
  // contribution is not here).
  void Notice(const AggHeader& request, aggregator::NoticeKind kind, uint32_t awaited,
              const sockaddr_in& to, uint16_t slot_hint = aggregator::kNoSlotHint) {
    AggFields f = aggregator::ReadAggFields(request);
    if (kind == aggregator::NoticeKind::kRelocated) f.slot_hint = slot_hint;
    f.job_key = 0;
    f.opcode = Opcode::kNotice;
    f.flags = 0;
    f.aux = static_cast<uint32_t>(kind);
    f.expected = static_cast<uint16_t>(awaited);
    f.node_count = 0;
    f.elem_count = 0;
    uint8_t buf[sizeof(AggHeader)];
    aggregator::WriteAggHeader(f, 0, reinterpret_cast<AggHeader*>(buf));
    SendTo(to, buf, sizeof(buf));
  }

  void SendResult(uint32_t job_id, const JobState& job, const aggregator::Slot& slot, int node) {
    AggFields f;
    // A saturated sum, as a parameter node answers it, or as a switch does.
    f.opcode = slot.overflow() && options.exception_retransmit ? Opcode::kExceptionRetransmit
                                                               : Opcode::kResult;
    f.flags = static_cast<uint16_t>((slot.overflow() ? flags::kOverflow : 0) |
                                    (options.flag_recovered ? flags::kRecovered : 0));
    f.job_id = job_id;
    f.seq = slot.seq();
    f.elem_count = slot.elem_count();
    f.dtype = slot.dtype();
    f.op = slot.op();
    f.scale = slot.scale();
    f.slot_hint = result_slot_hint;
    uint8_t buf[kMaxDatagram];
    const uint32_t len = aggregator::BuildAggregation(f, nullptr, 0, slot.result(),
                                                      slot.result_len(), buf, sizeof(buf));
    const uint16_t first = node < 0 ? 0 : static_cast<uint16_t>(node);
    const uint16_t last = node < 0 ? job.members : static_cast<uint16_t>(node + 1);
    for (uint16_t n = first; n < last; ++n) {
      if (!job.addrs[n] || Chance(options.drop_out)) continue;
      // Each member's copy answers its own run, as the switch's do.
      reinterpret_cast<AggHeader*>(buf)->incarnation =
          common::be32_t::FromHost(job.incarnations[n]);
      SendTo(*job.addrs[n], buf, len);
      if (Chance(options.duplicate_out)) SendTo(*job.addrs[n], buf, len);
    }
  }
};

TestSwitch::TestSwitch(const Options& options)
    : state_(std::make_unique<State>(options)), bind_ip_(options.bind_ip) {
  for (const Job& j : options.jobs) {
    JobState& s = state_->jobs[j.id];
    s.key = j.key;
    s.members = j.members;
    s.nodes = j.nodes;
    s.generation = ++state_->generations;
    s.addrs.resize(j.members);
    s.acks.resize(j.members);
    s.incarnations.resize(j.members);
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  state_->fd = fd;
  const int buffer = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(options.bind_ip.addr);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof(local)) != 0) return;
  socklen_t len = sizeof(local);
  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  port_ = ntohs(local.sin_port);
  thread_ = std::thread([this] { Loop(); });
}

TestSwitch::~TestSwitch() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (state_->fd >= 0) close(state_->fd);
}

SwitchAddress TestSwitch::address() const {
  return SwitchAddress{bind_ip_, port_};
}

std::vector<TestSwitch::FirstSend> TestSwitch::FirstSends() const {
  std::lock_guard lock(log_mu_);
  return first_sends_;
}

std::vector<uint32_t> TestSwitch::CompletedSeqs(uint32_t job) const {
  std::lock_guard lock(log_mu_);
  std::vector<uint32_t> seqs;
  for (const Completed& c : completed_log_) {
    if (c.job == job) seqs.push_back(c.seq);
  }
  return seqs;
}

std::map<uint32_t, uint32_t> TestSwitch::CompletedOffsets(uint32_t job) const {
  std::lock_guard lock(log_mu_);
  std::map<uint32_t, uint32_t> offsets;
  for (const Completed& c : completed_log_) {
    if (c.job == job) offsets[c.seq] = c.elem_offset;
  }
  return offsets;
}

void TestSwitch::Loop() {
  State& s = *state_;
  // Ordered slots keep the contributions they hold; each is its own copy.
  std::vector<std::unique_ptr<uint8_t[]>> held;
  const auto release = [&held](void* handle) {
    for (auto& h : held) {
      if (h.get() == handle) h.reset();
    }
    std::erase_if(held, [](const auto& h) { return h == nullptr; });
  };
  uint8_t buf[kMaxDatagram];
  while (!stop_) {
    pollfd pfd{s.fd, POLLIN, 0};
    if (poll(&pfd, 1, 10) <= 0) continue;
    sockaddr_in from{};
    socklen_t from_len = sizeof(from);
    const ssize_t n =
        recvfrom(s.fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n <= 0 || s.Chance(s.options.drop_in)) continue;
    aggregator::AggPacket pkt;
    if (aggregator::ParseAggregation(buf, static_cast<uint32_t>(n), &pkt) !=
        aggregator::WireError::kOk) {
      continue;
    }
    const AggHeader& h = *pkt.header;
    if (pkt.opcode == Opcode::kContribution && lost_ < static_cast<uint64_t>(s.options.lose_first)) {
      ++lost_;
      continue;
    }
    if (pkt.opcode != Opcode::kContribution && pkt.opcode != Opcode::kAck &&
        pkt.opcode != Opcode::kTaskInfo && pkt.opcode != Opcode::kQuery) {
      continue;
    }
    const uint16_t hflags = h.flags.host();
    const bool task_info = pkt.opcode == Opcode::kTaskInfo || (hflags & flags::kTaskInfo) != 0;
    const uint32_t job_id = h.job_id.host();
    auto nack = [&](NackReason r) {
      ++nacks_;
      s.Answer(h, Opcode::kNack, static_cast<uint32_t>(r), from);
    };
    auto it = s.jobs.find(job_id);
    if (it == s.jobs.end() && pkt.opcode == Opcode::kQuery) {
      ++queries_;
      s.Notice(h, aggregator::NoticeKind::kMissing, 0, from);
      continue;
    }
    if (it == s.jobs.end()) {
      if (!task_info || !s.options.in_band_registration) {
        nack(NackReason::kUnknownJob);
        continue;
      }
      if (h.expected.host() == 0 || h.expected.host() > 256 || h.node_count.host() == 0) {
        nack(NackReason::kMalformed);
        continue;
      }
      // As aggswitch without aggregation.upstreams: its sum would be partial.
      if (h.node_count.host() > 1) {
        nack(NackReason::kNoUpstream);
        continue;
      }
      JobState job;
      job.key = h.job_key.host();
      job.members = h.expected.host();
      job.nodes = h.node_count.host();
      job.generation = ++s.generations;
      job.addrs.resize(job.members);
      job.acks.resize(job.members);
      job.incarnations.resize(job.members);
      it = s.jobs.emplace(job_id, std::move(job)).first;
      ++registrations_;
    }
    JobState& job = it->second;
    const uint16_t node = h.node_id.host();
    if (job.key != h.job_key.host()) {
      nack(NackReason::kKeyMismatch);
      continue;
    }
    if (node >= job.members) {
      nack(NackReason::kMalformed);
      continue;
    }
    if (task_info && (h.expected.host() != job.members || h.node_count.host() != job.nodes)) {
      nack(NackReason::kTaskInfoConflict);
      continue;
    }
    job.addrs[node] = from;
    job.incarnations[node] = h.incarnation.host();
    saw_flags_.fetch_or(h.flags.host());
    {
      std::lock_guard<std::mutex> lock(log_mu_);
      incarnations_.insert(h.incarnation.host());
    }
    const uint32_t ack = h.ack_watermark.host();
    if (!job.acks[node] || aggregator::SeqBefore(*job.acks[node], ack)) job.acks[node] = ack;
    if (pkt.opcode == Opcode::kAck) {
      ++acks_;
      continue;
    }
    if (pkt.opcode == Opcode::kTaskInfo) {
      ++task_infos_;
      s.Answer(h, Opcode::kTaskInfo, 0, from);
      continue;
    }
    // The switch's placement, under a zero secret.
    const uint32_t index = aggregator::SlotRegion::Make(0, s.options.slots)
                               .Of(aggregator::SlotOffset(common::SipKey{}, job_id), h.seq.host());
    const uint16_t relocate_hint = s.options.relocate_hint;
    const bool hinted = relocate_hint != aggregator::kNoSlotHint &&
                        h.slot_hint.host() == relocate_hint;
    if (hinted) ++hinted_;
    if (hinted && pkt.opcode == Opcode::kContribution && !(hflags & flags::kRetransmission)) {
      ++first_sends_hinted_;
    }
    if (pkt.opcode == Opcode::kContribution && !(hflags & flags::kRetransmission)) {
      std::lock_guard lock(log_mu_);
      first_sends_.push_back({job_id, h.seq.host(), h.slot_hint.host()});
    }
    s.result_slot_hint = completed_ > s.options.move_after && completed_ <= s.options.move_until
                             ? aggregator::kMovedSlotHint
                             : aggregator::kNoSlotHint;
    if (pkt.opcode == Opcode::kQuery) {
      // As aggswitch answers a member asking after a chunk it sent.
      ++queries_;
      const aggregator::Slot* slot =
          s.slots.Holding(index, job_id, job.generation, h.seq.host());
      if (slot != nullptr && slot->HasContributed(node) &&
          slot->state() == aggregator::Slot::State::kComplete) {
        s.SendResult(job_id, job, *slot, node);
      } else if (slot != nullptr && slot->HasContributed(node) &&
                 slot->state() == aggregator::Slot::State::kAggregating) {
        ++held_notices_;
        s.Notice(h, aggregator::NoticeKind::kHeld, slot->needed() - slot->count(), from);
      } else {
        s.Notice(h, aggregator::NoticeKind::kMissing, 0, from);
      }
      continue;
    }
    if (hflags & flags::kRetransmission) ++retransmissions_;
    if (hflags & flags::kAggregateAtPs) {
      ++for_parameter_node_;
      if ((hflags & flags::kTaskInfo) || h.expected.host() != job.members) {
        ++for_parameter_node_malformed_;
      }
    }
    if (s.options.refuse_first < 0 || refused_ < static_cast<uint64_t>(s.options.refuse_first)) {
      ++refused_;
      nack(s.options.refuse_with);
      continue;
    }
    // The contribution's own copy, which an ordered slot may keep.
    auto copy = std::make_unique<uint8_t[]>(static_cast<size_t>(n));
    std::memcpy(copy.get(), buf, static_cast<size_t>(n));
    aggregator::Contribution c;
    c.job_id = job_id;
    c.job_generation = job.generation;
    c.seq = h.seq.host();
    c.node = node;
    c.expected = job.members;
    c.ordered = (hflags & flags::kOrdered) != 0;
    c.dtype = pkt.dtype;
    c.op = pkt.op;
    c.scale = h.scale;
    c.elem_count = h.elem_count.host();
    c.elem_offset = h.aux.host();
    c.addr_low = h.addr_low.host();
    c.payload = copy.get() + (pkt.payload - buf);
    c.handle = copy.get();
    const aggregator::SlotUpdate u = s.slots.Contribute(index, c, 0, State::Releasable, &s.jobs);
    const bool counted = u.outcome == aggregator::SlotOutcome::kHeld ||
                         u.outcome == aggregator::SlotOutcome::kAccumulated ||
                         u.outcome == aggregator::SlotOutcome::kCompleted;
    if (counted && (hflags & flags::kTaskInfo)) ++task_info_flags_;
    if (counted && (hflags & flags::kOrdered)) ++ordered_flags_;
    if (counted && (hflags & flags::kBypass)) ++bypass_flags_;
    if (relocate_hint != aggregator::kNoSlotHint && !hinted &&
        (u.outcome == aggregator::SlotOutcome::kAccumulated ||
         u.outcome == aggregator::SlotOutcome::kHeld)) {
      ++relocated_notices_;
      s.Notice(h, aggregator::NoticeKind::kRelocated, 0, from, relocate_hint);
    }
    if (static_cast<int>(h.node_id.host()) == s.options.notice_node && !(hflags & flags::kBypass)) {
      ++notices_;
      s.Answer(h, Opcode::kNotice, static_cast<uint32_t>(aggregator::NoticeKind::kSelfFlag), from);
    }
    switch (u.outcome) {
      case aggregator::SlotOutcome::kHeld:
        held.push_back(std::move(copy));
        ++contributions_;
        break;
      case aggregator::SlotOutcome::kAccumulated:
        ++contributions_;
        break;
      case aggregator::SlotOutcome::kCompleted: {
        ++contributions_;
        ++completed_;
        {
          std::lock_guard lock(log_mu_);
          completed_log_.push_back({job_id, c.seq, u.slot->elem_offset()});
        }
        s.SendResult(job_id, job, *u.slot, -1);
        for (uint16_t i = 0; i < u.n_released; ++i) release(u.released[i]);
        break;
      }
      case aggregator::SlotOutcome::kDuplicateCompleted:
        s.SendResult(job_id, job, *u.slot, node);
        break;
      case aggregator::SlotOutcome::kMismatch:
        nack(NackReason::kTypeMismatch);
        break;
      case aggregator::SlotOutcome::kAddrLowMismatch:
        nack(NackReason::kAddrLowMismatch);
        break;
      case aggregator::SlotOutcome::kBadMember:
      case aggregator::SlotOutcome::kTooLarge:
        nack(NackReason::kMalformed);
        break;
      case aggregator::SlotOutcome::kWaiting:
        ++held_notices_;
        s.Notice(h, aggregator::NoticeKind::kHeld, u.slot->needed() - u.slot->count(), from);
        break;
      case aggregator::SlotOutcome::kCollision:
        // As aggswitch with no spare slot free: "not now".
        nack(NackReason::kSlotBusy);
        break;
      case aggregator::SlotOutcome::kDuplicate:
        break;
      case aggregator::SlotOutcome::kForwardedAgain:
      case aggregator::SlotOutcome::kLateForwarded:
        break;  // only a switch below another forwards partials; this one is every job's root
    }
  }
}

}  // namespace aggswitch::client
