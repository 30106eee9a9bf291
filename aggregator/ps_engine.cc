#include "aggregator/ps_engine.h"

#include <algorithm>

#include "aggregator/reduce.h"

namespace aggswitch::aggregator {

namespace {

bool IsDirect(const AggPacket& pkt) {
  return pkt.opcode == Opcode::kContribution &&
         (pkt.header->flags.host() & (flags::kAggregateAtPs | flags::kConflict)) != 0;
}

uint32_t DatagramLength(const AggPacket& pkt) {
  return static_cast<uint32_t>(sizeof(AggHeader)) + 2u * pkt.header->missing_count +
         pkt.payload_len;
}

}  // namespace

namespace {

TanOptions AsParameterNode(TanOptions tan) {
  tan.verified_results = true;
  return tan;
}

}  // namespace

PsEngine::PsEngine(const PsOptions& options)
    : options_(options), tan_(AsParameterNode(options.tan)) {}

void PsEngine::OnDatagram(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                          std::vector<TanOutput>* out) {
  // The TAN's run rule (tan_engine.h) holds for every datagram here: a new
  // run forgets the job's chunks and answers here too.
  const uint32_t job_id = pkt.header->job_id.host();
  switch (tan_.AdmitRun(job_id, pkt.header->incarnation.host())) {
    case TanEngine::Run::kEnded:
      return;
    case TanEngine::Run::kNew:
      ForgetJob(job_id);
      break;
    case TanEngine::Run::kCurrent:
      break;
  }
  if (IsDirect(pkt)) {
    OnDirect(pkt, from, now_ns, out);
    return;
  }
  if (pkt.opcode == Opcode::kVerify) {
    OnVerify(pkt, from, now_ns, out);
    return;
  }
  if (pkt.opcode == Opcode::kQuery || pkt.opcode == Opcode::kPartial) {
    // A root asks after a chunk it no longer holds, or sends first data for
    // one answered here from direct data (a member's resend found a slot at
    // the root after its chunk had none): the answer given here goes again
    // (with the key, the answer carries it). The chunk is not reduced a
    // second time: a --sgd job's step would be applied twice.
    const auto done = done_.find(ChunkId{job_id, pkt.header->seq.host()});
    if (done != done_.end() &&
        reinterpret_cast<const AggHeader*>(done->second.result.data())->job_key.host() ==
            pkt.header->job_key.host()) {
      ++(pkt.opcode == Opcode::kQuery ? counters_.queries : counters_.first_again);
      out->push_back(TanOutput{from, done->second.result});
      return;
    }
  }
  tan_.OnDatagram(pkt, from, now_ns, out);
  if (pkt.opcode == Opcode::kPartial) {
    HandOver(ChunkId{pkt.header->job_id.host(), pkt.header->seq.host()}, now_ns, out);
  }
}

void PsEngine::OnDirect(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                        std::vector<TanOutput>* out) {
  const AggHeader& h = *pkt.header;
  ++counters_.direct;
  if ((h.flags.host() & flags::kConflict) != 0) ++counters_.conflicts;
  const ChunkId id{h.job_id.host(), h.seq.host()};
  const uint16_t node = h.node_id.host();
  const uint16_t expected = h.expected.host();
  if (pkt.payload_len > options_.tan.max_payload || expected == 0 || h.missing_count != 0) {
    ++counters_.malformed;
    return;
  }
  const std::vector<uint8_t> datagram(reinterpret_cast<const uint8_t*>(pkt.header),
                                      reinterpret_cast<const uint8_t*>(pkt.header) +
                                          DatagramLength(pkt));
  switch (tan_.PhaseOf(id.job_id, id.seq)) {
    case TanEngine::ChunkPhase::kOpen:
      ToTan(datagram, from, now_ns, out);
      return;
    case TanEngine::ChunkPhase::kDone:
      ++counters_.results_again;
      out->push_back(TanOutput{from, *tan_.ResultOf(id.job_id, id.seq)});
      return;
    case TanEngine::ChunkPhase::kNone:
    case TanEngine::ChunkPhase::kAwaitingFirst:
      break;
  }
  if (const auto done = done_.find(id); done != done_.end()) {
    ++counters_.results_again;
    out->push_back(TanOutput{from, done->second.result});
    return;
  }
  auto it = chunks_.find(id);
  if (it == chunks_.end()) {
    if (chunks_.size() >= options_.tan.max_pending || kept_ >= options_.tan.max_held_lates) {
      ++counters_.refused_full;
      return;
    }
    Chunk c;
    c.fields = ReadAggFields(h);
    c.reply_to = from;
    c.deadline_ns = now_ns + options_.tan.give_up_ns;
    it = chunks_.emplace(id, std::move(c)).first;
    deadlines_.insert({it->second.deadline_ns, id});
  }
  Chunk& c = it->second;
  const AggFields& f = c.fields;
  if (h.job_key.host() != f.job_key) {
    ++counters_.key_mismatch;
    return;
  }
  if (pkt.dtype != f.dtype || pkt.op != f.op || h.scale != f.scale ||
      h.elem_count.host() != f.elem_count || expected != f.expected) {
    ++counters_.malformed;
    return;
  }
  if (c.kept.count(node) != 0) {
    ++counters_.duplicates;
    return;
  }
  if (kept_ >= options_.tan.max_held_lates) {
    ++counters_.refused_full;
    return;
  }
  c.kept.emplace(node, datagram);
  ++kept_;
  if (c.kept.size() >= f.expected) Finish(id, c, true, now_ns, out);
}

void PsEngine::OnVerify(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                        std::vector<TanOutput>* out) {
  const AggHeader& h = *pkt.header;
  ++counters_.verify;
  const ChunkId id{h.job_id.host(), h.seq.host()};
  if (const auto done = done_.find(id); done != done_.end()) {
    ++counters_.results_again;  // the answer was lost on the way down
    out->push_back(TanOutput{from, done->second.result});
    return;
  }
  if (pkt.payload_len > options_.tan.max_payload || h.expected.host() == 0) {
    ++counters_.malformed;
    return;
  }
  std::vector<uint8_t> datagram(reinterpret_cast<const uint8_t*>(pkt.header),
                                reinterpret_cast<const uint8_t*>(pkt.header) + DatagramLength(pkt));
  auto* d = reinterpret_cast<AggHeader*>(datagram.data());
  if (h.missing_count != 0 || h.node_count.host() != h.expected.host()) {
    // Omission: silence; the members' timers bring their data, marked for
    // this node. With the list of who is missing, that data completes the
    // chunk at the TAN, as first data's late data.
    ++counters_.verify_omissions;
    if (h.missing_count == 0) return;
    ++counters_.verify_to_tan;
    d->opcode = static_cast<uint8_t>(Opcode::kPartial);
    AggPacket first;
    if (ParseAggregation(datagram.data(), static_cast<uint32_t>(datagram.size()), &first) !=
        WireError::kOk) {
      return;  // cannot happen: it parsed as a VERIFY
    }
    tan_.OnDatagram(first, from, now_ns, out);
    HandOver(id, now_ns, out);
    return;
  }
  const bool overflow = (h.flags.host() & flags::kOverflow) != 0;
  // The answer: the same reduction, from this node, with the key as the
  // TAN's results carry it (the root strips it before the members get it).
  d->opcode = static_cast<uint8_t>(overflow ? Opcode::kExceptionRetransmit : Opcode::kResult);
  // FINAL goes back with it: the root delivers the chunk to the job's main
  // server from the answer (docs/protocol.md, "Final delivery").
  d->flags = be16_t::FromHost(static_cast<uint16_t>((overflow ? flags::kOverflow : flags::kVerified) |
                                                    (h.flags.host() & flags::kFinal)));
  d->node_id = be16_t::FromHost(options_.tan.node_id);
  d->expected = be16_t::FromHost(0);
  d->node_count = be16_t::FromHost(0);
  d->ack_watermark = be32_t{};
  d->slot_hint = be16_t::FromHost(kNoSlotHint);
  ++(overflow ? counters_.verify_overflows : counters_.verified);
  out->push_back(TanOutput{from, datagram});
  Keep(id, std::move(datagram), now_ns);
}

void PsEngine::ToTan(const std::vector<uint8_t>& datagram, const TanPeer& from, uint64_t now_ns,
                     std::vector<TanOutput>* out) {
  // The TAN's late data: a LATE from the contribution's node, its data alone.
  std::vector<uint8_t> late = datagram;
  auto* h = reinterpret_cast<AggHeader*>(late.data());
  h->opcode = static_cast<uint8_t>(Opcode::kLate);
  h->flags = be16_t::FromHost(static_cast<uint16_t>(
      (h->flags.host() & ~(flags::kAggregateAtPs | flags::kConflict)) | flags::kBypass));
  AggPacket pkt;
  if (ParseAggregation(late.data(), static_cast<uint32_t>(late.size()), &pkt) != WireError::kOk) {
    ++counters_.malformed;  // cannot happen: it parsed as a contribution
    return;
  }
  ++counters_.to_tan;
  tan_.OnDatagram(pkt, from, now_ns, out);
}

void PsEngine::HandOver(const ChunkId& id, uint64_t now_ns, std::vector<TanOutput>* out) {
  const auto it = chunks_.find(id);
  if (it == chunks_.end()) return;
  const TanEngine::ChunkPhase phase = tan_.PhaseOf(id.job_id, id.seq);
  if (phase != TanEngine::ChunkPhase::kOpen && phase != TanEngine::ChunkPhase::kDone) return;
  // Node order: the same merges whatever order the contributions came in.
  const TanPeer from = it->second.reply_to;
  std::map<uint16_t, std::vector<uint8_t>> kept;
  kept.swap(it->second.kept);
  kept_ -= kept.size();
  Forget(it);
  for (const auto& [node, datagram] : kept) ToTan(datagram, from, now_ns, out);
}

void PsEngine::Finish(const ChunkId& id, Chunk& c, bool complete, uint64_t now_ns,
                      std::vector<TanOutput>* out) {
  AggFields f = c.fields;
  const uint32_t payload_len = f.elem_count * static_cast<uint32_t>(ElementSize(f.dtype));
  std::vector<uint8_t> acc(size_t{f.elem_count} * AccumulatorElementSize(f.dtype));
  bool overflow = false;
  bool first = true;
  for (const auto& [node, datagram] : c.kept) {
    AggPacket pkt;  // parsed when it came
    (void)ParseAggregation(datagram.data(), static_cast<uint32_t>(datagram.size()), &pkt);
    overflow = overflow || (pkt.header->flags.host() & flags::kOverflow) != 0;
    if (first) {
      LoadFirst(f.dtype, pkt.payload, f.elem_count, acc.data());
      first = false;
    } else {
      overflow = Accumulate(f.dtype, f.op, acc.data(), pkt.payload, f.elem_count) || overflow;
    }
  }
  std::vector<uint8_t> payload(payload_len);
  StoreResult(f.dtype, acc.data(), f.elem_count, payload.data());

  f.opcode = Opcode::kResult;
  f.node_id = options_.tan.node_id;
  // (FINAL as the members marked the chunk: the root delivers the result.)
  f.flags = static_cast<uint16_t>((overflow ? flags::kOverflow : 0) | (c.fields.flags & flags::kFinal));
  // A complete chunk goes through the TAN's completion hook as the TAN's
  // own do (agg-ps --sgd: the parameters in place of the gradient's sum),
  // or a parameter-server job's chunk that found no slot at its root would
  // give its members the sum.
  const bool refused = complete && options_.tan.on_complete && !options_.tan.on_complete(f, payload);
  // VERIFIED: every member counted, no sum saturated.
  f.flags = static_cast<uint16_t>(f.flags | (!complete || refused ? flags::kIncomplete : 0) |
                                  (complete && !refused && !overflow ? flags::kVerified : 0));
  f.expected = 0;
  f.node_count = 0;
  f.ack_watermark = 0;
  f.slot_hint = kNoSlotHint;
  std::vector<uint8_t> result(sizeof(AggHeader) + payload_len);
  const uint32_t n = BuildAggregation(f, nullptr, 0, payload.data(), payload_len, result.data(),
                                      static_cast<uint32_t>(result.size()));
  result.resize(n);  // n == size: the lengths are ours
  (refused ? counters_.refused : complete ? counters_.reduced : counters_.gave_up) += 1;
  out->push_back(TanOutput{c.reply_to, result});

  Forget(chunks_.find(id));
  Keep(id, std::move(result), now_ns);
}

void PsEngine::Keep(const ChunkId& id, std::vector<uint8_t> answer, uint64_t now_ns) {
  if (const auto old = done_.find(id); old != done_.end()) {
    done_deadlines_.erase({old->second.deadline_ns, id});
    done_.erase(old);
  }
  while (!done_deadlines_.empty() && done_.size() >= options_.tan.max_pending) {
    done_.erase(done_deadlines_.begin()->second);  // the oldest answer
    done_deadlines_.erase(done_deadlines_.begin());
  }
  const uint64_t deadline = now_ns + options_.tan.give_up_ns;
  done_[id] = Done{std::move(answer), deadline};
  done_deadlines_.insert({deadline, id});
}

void PsEngine::Forget(std::map<ChunkId, Chunk>::iterator it) {
  kept_ -= it->second.kept.size();
  deadlines_.erase({it->second.deadline_ns, it->first});
  chunks_.erase(it);
}

void PsEngine::ForgetJob(uint32_t job_id) {
  const ChunkId first{job_id, 0};
  for (auto it = chunks_.lower_bound(first); it != chunks_.end() && it->first.job_id == job_id;) {
    Forget(it++);
  }
  for (auto it = done_.lower_bound(first); it != done_.end() && it->first.job_id == job_id;) {
    done_deadlines_.erase({it->second.deadline_ns, it->first});
    it = done_.erase(it);
  }
}

void PsEngine::Expire(uint64_t now_ns, std::vector<TanOutput>* out) {
  tan_.Expire(now_ns, out);
  while (!deadlines_.empty() && deadlines_.begin()->first < now_ns) {
    const ChunkId id = deadlines_.begin()->second;
    Finish(id, chunks_.find(id)->second, false, now_ns, out);
  }
  while (!done_deadlines_.empty() && done_deadlines_.begin()->first < now_ns) {
    done_.erase(done_deadlines_.begin()->second);
    done_deadlines_.erase(done_deadlines_.begin());
  }
}

}  // namespace aggswitch::aggregator
