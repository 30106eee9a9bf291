#include "tools/agg-gen/engine.h"

#include <algorithm>
#include <cstring>

namespace aggswitch::tools {

namespace {

struct ErrorText {
  const char* label;
  const char* help;
};
constexpr ErrorText kErrorText[] = {
#define AGG_GEN_ERROR_TEXT(name, label, help) {label, help},
    AGG_GEN_ERRORS(AGG_GEN_ERROR_TEXT)
#undef AGG_GEN_ERROR_TEXT
};
static_assert(std::size(kErrorText) == kNumGenErrors);

}  // namespace

const char* GenErrorLabel(GenError e) {
  return kErrorText[static_cast<size_t>(e)].label;
}
const char* GenErrorHelp(GenError e) {
  return kErrorText[static_cast<size_t>(e)].help;
}

GenEngine::GenEngine(const GenConfig& cfg, const FrameFactory& frames, uint64_t tsc_hz)
    : frames_(frames),
      expect_(cfg.expect),
      workers_(cfg.workers),
      jobs_(cfg.jobs),
      job_base_(cfg.job_base),
      window_(cfg.window),
      chunk_limit_(cfg.chunks),
      key_(cfg.key),
      incarnation_(cfg.incarnation),
      elems_(cfg.elems),
      dtype_(cfg.dtype),
      op_(cfg.op),
      timeout_tsc_(std::max<uint64_t>(1, tsc_hz / 1000 * cfg.timeout_ms)),
      scan_interval_tsc_(std::max<uint64_t>(1, timeout_tsc_ / 4)),
      pairs_(size_t{cfg.jobs} * cfg.workers),
      final_ack_(pairs_.size(), FinalAck::kNotYet) {
  for (ChunkWindow& w : pairs_) w.Init(cfg.window);
  acks_due_.reserve(pairs_.size());
}

void GenEngine::StopSending() {
  if (!sending_) return;
  sending_ = false;
  for (uint32_t p = 0; p < pairs_.size(); ++p) MaybeFinish(p);
}

void GenEngine::MaybeFinish(uint32_t p) {
  const ChunkWindow& w = pairs_[p];
  const bool nothing_more = !sending_ || (chunk_limit_ != 0 && w.next() == chunk_limit_);
  if (final_ack_[p] != FinalAck::kNotYet || w.ack() != w.next() || !nothing_more) return;
  final_ack_[p] = FinalAck::kDue;
  acks_due_.push_back(p);  // at most once per pair: within the reserved capacity
}

void GenEngine::Start(uint64_t now) {
  last_progress_tsc_ = now;
  next_scan_tsc_ = now + scan_interval_tsc_;
}

bool GenEngine::CanSend(const ChunkWindow& w) const {
  return sending_ && w.next() - floor_ < window_ && (chunk_limit_ == 0 || w.next() < chunk_limit_);
}

bool GenEngine::Done() const {
  // Nothing unanswered means every ack equals its next.
  return unanswered_ == 0 && (!sending_ || (chunk_limit_ != 0 && pairs_at_limit_ == pairs_.size()));
}

void GenEngine::UpdateFloor(uint64_t now) {
  floor_dirty_ = false;
  uint32_t lowest = pairs_[0].ack();
  for (const ChunkWindow& w : pairs_) {
    if (aggregator::SeqBefore(w.ack(), lowest)) lowest = w.ack();
  }
  if (lowest != floor_) {
    floor_ = lowest;
    last_progress_tsc_ = now;
  }
}

uint32_t GenEngine::PlanRetransmits(uint64_t now, SendOp* ops, uint32_t max) {
  uint32_t n = 0;
  for (uint32_t p = 0; p < pairs_.size(); ++p) {
    ChunkWindow& w = pairs_[p];
    for (uint32_t seq = w.ack(); seq != w.next(); ++seq) {
      if (!w.Expired(seq, now, timeout_tsc_)) continue;
      if (n == max) return n;  // the rest at the next call: next_scan_tsc_ stays due
      ops[n++] = SendOp{p / workers_, static_cast<uint16_t>(p % workers_), true, seq, w.ack()};
      w.MarkResent(seq, now);
    }
  }
  next_scan_tsc_ = now + scan_interval_tsc_;
  return n;
}

uint32_t GenEngine::PlanSends(uint64_t now, SendOp* ops, uint32_t max) {
  if (floor_dirty_) UpdateFloor(now);
  uint32_t n_acks = 0;
  for (; n_acks < max && acks_due_head_ < acks_due_.size(); ++n_acks) {
    const uint32_t p = acks_due_[acks_due_head_++];
    final_ack_[p] = FinalAck::kPlanned;
    const ChunkWindow& w = pairs_[p];
    ops[n_acks] = SendOp{p / workers_, static_cast<uint16_t>(p % workers_), false, w.next() - 1,
                         w.ack(), true};
  }
  ops += n_acks;
  max -= n_acks;
  uint32_t n = 0;
  if (now >= next_scan_tsc_) n = PlanRetransmits(now, ops, max);
  counters_.retransmits += n;
  const uint32_t n_pairs = static_cast<uint32_t>(pairs_.size());
  for (uint32_t idle = 0; n < max && idle < n_pairs;) {
    const uint32_t p = rr_;
    rr_ = rr_ + 1 == n_pairs ? 0 : rr_ + 1;
    ChunkWindow& w = pairs_[p];
    if (!CanSend(w)) {
      ++idle;
      continue;
    }
    idle = 0;
    ops[n++] = SendOp{p / workers_, static_cast<uint16_t>(p % workers_), false, w.next(), w.ack()};
    w.MarkSent(now);
    ++unanswered_;
    if (w.next() == chunk_limit_) ++pairs_at_limit_;
  }
  counters_.sent += n;
  return n_acks + n;
}

void GenEngine::OnFrame(const uint8_t* frame, uint32_t len) {
  const Reply r = frames_.Classify(frame, len);
  switch (r.kind) {
    case ReplyKind::kResult:
    case ReplyKind::kEcho:
      if ((r.kind == ReplyKind::kResult) == (expect_ == Expect::kResults)) {
        OnAnswer(r);
      } else {
        ++counters_.other;
      }
      return;
    case ReplyKind::kNack:
      ++counters_.nacks;
      return;
    case ReplyKind::kMisaddressed:
      Fail(GenError::kAddress, r, "address", -1, 0, 0);
      return;
    case ReplyKind::kMalformed:
      Fail(GenError::kMalformed, r, "datagram", -1, 0, 0);
      return;
    case ReplyKind::kOther:
      ++counters_.other;
      return;
  }
}

void GenEngine::OnAnswer(const Reply& r) {
  const aggregator::AggHeader& h = *r.pkt.header;
  const uint32_t job = h.job_id.host() - job_base_;
  if (job >= jobs_) {
    Fail(GenError::kStray, r, "job_id", -1, h.job_id.host(), job_base_);
    return;
  }
  const uint32_t seq = h.seq.host();
  const uint32_t p = job * workers_ + r.worker;
  switch (pairs_[p].Complete(seq)) {
    case ChunkWindow::kNew:
      ++counters_.completed;
      --unanswered_;
      floor_dirty_ = true;
      MaybeFinish(p);
      break;
    case ChunkWindow::kDuplicate:
      ++counters_.duplicates;
      break;
    case ChunkWindow::kNeverSent:
      Fail(GenError::kStray, r, "seq", -1, seq, pairs_[p].next());
      return;
  }
  ++counters_.answers;
  if (expect_ == Expect::kEcho) return;

  // A result must describe what was sent (without the job key: the switch
  // never sends it to members)...
  struct Check {
    const char* field;
    uint64_t got;
    uint64_t want;
  };
  const uint16_t bad_flags = aggregator::flags::kIncomplete | aggregator::flags::kOverflow;
  const Check checks[] = {
      {"job_key", h.job_key.host(), 0},
      {"incarnation", h.incarnation.host(), incarnation_},
      {"elem_count", h.elem_count.host(), elems_},
      {"dtype", h.dtype, static_cast<uint64_t>(dtype_)},
      {"op", h.op, static_cast<uint64_t>(op_)},
      {"scale", static_cast<uint8_t>(h.scale), 0},
      {"missing_count", h.missing_count, 0},
      {"flags", uint64_t{h.flags.host()} & bad_flags, 0},
  };
  for (const Check& c : checks) {
    if (c.got != c.want) {
      Fail(GenError::kHeader, r, c.field, -1, c.got, c.want);
      return;
    }
  }
  // ...and carry the reduction of every worker's contribution.
  const ChunkValues& values = frames_.values();
  const int32_t i = values.FirstMismatch(seq, r.pkt.payload);
  if (i >= 0) {
    uint32_t got;
    std::memcpy(&got, r.pkt.payload + 4 * i, 4);
    Fail(GenError::kPayload, r, "element", i, got,
         values.ExpectedBits(seq, static_cast<uint32_t>(i)));
  }
}

void GenEngine::Fail(GenError e, const Reply& r, const char* field, int64_t index, uint64_t got,
                     uint64_t want) {
  ++counters_.errors[static_cast<size_t>(e)];
  if (n_details_ == kMaxErrorDetails) return;
  ErrorDetail& d = details_[n_details_++];
  d.error = e;
  d.worker = r.worker;
  if (r.pkt.header != nullptr) {
    d.job_id = r.pkt.header->job_id.host();
    d.seq = r.pkt.header->seq.host();
  }
  d.field = field;
  d.index = index;
  d.got = got;
  d.want = want;
}

}  // namespace aggswitch::tools
