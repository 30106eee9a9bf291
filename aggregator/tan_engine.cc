#include "aggregator/tan_engine.h"

#include <algorithm>
#include <iterator>

#include "aggregator/reduce.h"

namespace aggswitch::aggregator {

namespace {

// A missing list holds at most this many ids (the header's missing_count is 8 bits).
constexpr size_t kMaxMissingIds = 255;
// UDP payload of a 1500-byte MTU: an INCOMPLETE result may always grow to this.
constexpr uint32_t kPlainMtuPayload = 1500 - 20 - 8;

bool IsLateData(const AggPacket& pkt) {
  if (pkt.opcode == Opcode::kLate) return true;
  return pkt.opcode == Opcode::kContribution && (pkt.header->flags.host() & flags::kBypass) != 0;
}

}  // namespace

TanEngine::TanEngine(const TanOptions& options) : options_(options) {}

void TanEngine::SetCovers(uint32_t job_id, uint16_t switch_node, std::vector<uint16_t> ids) {
  const std::pair<uint32_t, uint16_t> key{job_id, switch_node};
  if (ids.empty()) {
    covers_.erase(key);
    return;
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  covers_[key] = std::move(ids);
}

TanEngine::Run TanEngine::AdmitRun(uint32_t job_id, uint32_t incarnation) {
  if (incarnation == 0) return Run::kCurrent;
  auto it = runs_.find(job_id);
  if (it == runs_.end()) {
    // Bounded like the chunks: beyond that, jobs go unwatched (label 0's rule).
    if (runs_.size() >= 2 * options_.max_pending) return Run::kCurrent;
    it = runs_.emplace(job_id, Runs{}).first;
  }
  Runs& r = it->second;
  if (r.current == incarnation) return Run::kCurrent;
  if (r.ended == incarnation) {
    ++counters_.run_ended;
    return Run::kEnded;
  }
  const bool renewed = r.current != 0;
  if (renewed) {
    r.ended = r.current;
    ++counters_.new_runs;
    std::vector<ChunkId> gone;
    for (const auto& [id, c] : chunks_) {
      if (id.job_id == job_id) gone.push_back(id);
    }
    for (const ChunkId& id : gone) Erase(id);
  }
  r.current = incarnation;
  return renewed ? Run::kNew : Run::kCurrent;
}

void TanEngine::OnDatagram(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                           std::vector<TanOutput>* out) {
  if (AdmitRun(pkt.header->job_id.host(), pkt.header->incarnation.host()) == Run::kEnded) return;
  if (pkt.opcode == Opcode::kPartial) {
    OnFirstData(pkt, from, now_ns, out);
  } else if (IsLateData(pkt)) {
    OnLate(pkt, now_ns, out);
  } else if (pkt.opcode == Opcode::kQuery) {
    OnQuery(pkt, from, out);
  } else {
    ++counters_.ignored;
  }
}

void TanEngine::OnQuery(const AggPacket& pkt, const TanPeer& from, std::vector<TanOutput>* out) {
  ++counters_.queries;
  const AggHeader& h = *pkt.header;
  const auto it = chunks_.find(ChunkId{h.job_id.host(), h.seq.host()});
  // Open: its result comes when it is done. Another key: nobody's to have.
  if (it == chunks_.end() || it->second.phase != Phase::kDone ||
      h.job_key.host() != it->second.fields.job_key) {
    return;
  }
  out->push_back(TanOutput{from, it->second.result});
}

void TanEngine::OnFirstData(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                            std::vector<TanOutput>* out) {
  ++counters_.first_data;
  const AggHeader& h = *pkt.header;
  const ChunkId id{h.job_id.host(), h.seq.host()};
  const uint64_t key = h.job_key.host();
  auto it = chunks_.find(id);
  if (it != chunks_.end() && it->second.phase != Phase::kAwaitingFirst) {
    const Chunk& c = it->second;
    if (key != c.fields.job_key) {
      ++counters_.key_mismatch;
      return;
    }
    // The same chunk again (the root reused its slot, or retransmitted): the
    // answer, once there is one, is always the same datagram.
    ++counters_.repeat_first;
    if (c.phase == Phase::kDone) {
      out->push_back(TanOutput{from, c.result});
    } else if (h.missing_count == 0) {
      Complete(id, it->second, pkt, now_ns, out);
    } else {
      Refine(id, it->second, pkt, now_ns, out);
    }
    return;
  }
  if (pkt.payload_len > options_.max_payload) {
    ++counters_.malformed;
    return;
  }
  if (it == chunks_.end()) {
    if (pending_ >= options_.max_pending) {
      ++counters_.refused_full;
      return;
    }
    it = chunks_.emplace(id, Chunk{}).first;
    ++pending_;
  } else {
    Unschedule(id, it->second);
  }
  Chunk& c = it->second;
  std::vector<Late> early;
  early.swap(c.early);
  held_lates_ -= early.size();

  c.phase = Phase::kOpen;
  AggFields& f = c.fields;
  f = AggFields{};
  f.opcode = Opcode::kResult;
  f.node_id = options_.node_id;
  f.job_id = id.job_id;
  f.seq = id.seq;
  f.job_key = key;
  f.elem_count = h.elem_count.host();
  f.dtype = pkt.dtype;
  f.op = pkt.op;
  f.scale = h.scale;
  f.aux = h.aux.host();  // the chunk's element offset
  f.incarnation = h.incarnation.host();
  const uint16_t in_flags = h.flags.host();
  c.ordered = (in_flags & flags::kOrdered) != 0;
  c.final = (in_flags & flags::kFinal) != 0;
  c.overflow = (in_flags & flags::kOverflow) != 0;
  c.recovered = (in_flags & (flags::kRecovered | flags::kRetransmission)) != 0;
  c.batch = c.ordered || options_.trigger == TanTrigger::kBatch;
  c.reply_to = from;
  c.first_len = static_cast<uint32_t>(sizeof(AggHeader)) + 2u * h.missing_count + pkt.payload_len;
  for (uint32_t i = 0; i < h.missing_count; ++i) c.outstanding.insert(pkt.MissingNode(i));
  c.first_missing = c.outstanding;
  c.acc.assign(size_t{f.elem_count} * AccumulatorElementSize(f.dtype), 0);
  LoadFirst(f.dtype, pkt.payload, f.elem_count, c.acc.data());
  c.acc_empty = (in_flags & flags::kConflict) != 0;
  Schedule(id, c, now_ns + options_.give_up_ns);

  // Late data that came first goes through the same rules, the lates that
  // hold the most members' data first (in arrival order among equals): a
  // child switch's late partial and the same members' own data sent around
  // it may both be here, and merged first, the members' data would leave
  // the partial's other members out (the partial would count them twice).
  std::vector<size_t> held_ids(early.size());
  for (size_t i = 0; i < early.size(); ++i) held_ids[i] = Content(id.job_id, early[i]).size();
  std::vector<size_t> order(early.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return held_ids[a] > held_ids[b]; });
  for (const size_t i : order) {
    Late& late = early[i];
    if (c.phase == Phase::kDone) {
      ++counters_.duplicate_late;  // the chunk completed without it
      continue;
    }
    Offer(id, c, std::move(late), now_ns, out);
  }
  if (c.phase == Phase::kOpen && c.outstanding.empty()) Finish(id, c, now_ns, out);
}

bool TanEngine::SameShape(const Chunk& c, const AggPacket& pkt) {
  const AggFields& f = c.fields;
  return pkt.dtype == f.dtype && pkt.op == f.op && pkt.header->scale == f.scale &&
         pkt.header->elem_count.host() == f.elem_count &&
         pkt.payload_len == f.elem_count * static_cast<uint32_t>(ElementSize(f.dtype));
}

void TanEngine::Complete(const ChunkId& id, Chunk& c, const AggPacket& pkt, uint64_t now_ns,
                         std::vector<TanOutput>* out) {
  const AggHeader& h = *pkt.header;
  AggFields& f = c.fields;
  if (!SameShape(c, pkt)) {
    ++counters_.malformed;
    return;
  }
  // The root reduced the chunk again and nothing is missing from it now
  // (each child's partial reached it, where the lates that would have made
  // up for them did not all reach here): it is the whole chunk, and what
  // was merged here already is in it.
  ++counters_.complete_again;
  Release(c.held);
  Release(c.parked);
  c.outstanding.clear();
  c.merged.clear();
  c.empty_shares.clear();
  c.overflow = (h.flags.host() & flags::kOverflow) != 0;
  std::fill(c.acc.begin(), c.acc.end(), 0);
  LoadFirst(f.dtype, pkt.payload, f.elem_count, c.acc.data());
  c.acc_empty = (h.flags.host() & flags::kConflict) != 0;
  Finish(id, c, now_ns, out);
}

void TanEngine::Refine(const ChunkId& id, Chunk& c, const AggPacket& pkt, uint64_t now_ns,
                       std::vector<TanOutput>* out) {
  const AggHeader& h = *pkt.header;
  AggFields& f = c.fields;
  if (!SameShape(c, pkt)) return;  // a repeat that changes nothing
  std::set<uint16_t> missing;
  for (uint32_t i = 0; i < h.missing_count; ++i) missing.insert(pkt.MissingNode(i));
  // The root reduced the chunk again (a child's partial that came after its
  // entries had gone took a slot there anew, and that child's late partial
  // never comes): the payload holds every id but `missing` and what the
  // switches among them cover. It takes the first data's place when it
  // holds what the one in use lacked and is still awaited (not an id a
  // late's own missing list made outstanding: that may lie below one it
  // lacks), and lacks only what can come here: ids awaited, merged (their
  // senders have no result and send them again) or sent by a parked late.
  const std::set<uint16_t> lacks = Lacks(f.job_id, missing);
  bool gains = false;
  for (const uint16_t n : c.outstanding) {
    gains = gains || (c.first_missing.count(n) != 0 && lacks.count(n) == 0);
  }
  if (!gains || (c.own_node >= 0 && lacks.count(static_cast<uint16_t>(c.own_node)) != 0)) return;
  for (const uint16_t n : missing) {
    const bool parked = std::any_of(c.parked.begin(), c.parked.end(),
                                    [&](const Late& p) { return p.node == n; });
    if (c.outstanding.count(n) == 0 && c.merged.count(n) == 0 && !parked) return;
  }
  // The lates kept here go through the rules again, against what it lacks.
  std::vector<Late> again;
  again.swap(c.held);
  again.insert(again.end(), std::make_move_iterator(c.parked.begin()),
               std::make_move_iterator(c.parked.end()));
  c.parked.clear();
  held_lates_ -= again.size();
  c.first_missing = missing;
  c.outstanding = std::move(missing);
  c.merged.clear();
  c.empty_shares.clear();
  c.overflow = (h.flags.host() & flags::kOverflow) != 0;
  std::fill(c.acc.begin(), c.acc.end(), 0);
  LoadFirst(f.dtype, pkt.payload, f.elem_count, c.acc.data());
  c.acc_empty = (h.flags.host() & flags::kConflict) != 0;
  for (Late& late : again) {
    if (c.phase == Phase::kDone) {
      ++counters_.duplicate_late;  // the chunk completed without it
      continue;
    }
    Offer(id, c, std::move(late), now_ns, out);
  }
}

void TanEngine::OnLate(const AggPacket& pkt, uint64_t now_ns, std::vector<TanOutput>* out) {
  ++counters_.late;
  const AggHeader& h = *pkt.header;
  const ChunkId id{h.job_id.host(), h.seq.host()};
  if (pkt.payload_len > options_.max_payload) {
    ++counters_.malformed;
    return;
  }
  auto it = chunks_.find(id);
  if (it != chunks_.end() && it->second.phase == Phase::kDone) {
    if (h.job_key.host() != it->second.fields.job_key) {
      ++counters_.key_mismatch;
    } else {
      // Its sender lacks the result (it was lost on its way down, or the
      // data went around the sender's slot): the result goes again, where
      // it went, and down the tree to every member.
      ++counters_.late_after_done;
      out->push_back(TanOutput{it->second.reply_to, it->second.result});
    }
    return;
  }

  Late late = CopyLate(pkt, now_ns);
  if (it != chunks_.end() && it->second.phase == Phase::kOpen) {
    Offer(id, it->second, std::move(late), now_ns, out);
    return;
  }
  // Before its first data: held until it comes. One per (node, key): a
  // retransmission is a duplicate, a forged key does not shadow the real one.
  if (it != chunks_.end()) {
    for (const Late& e : it->second.early) {
      if (e.node == late.node && e.key == late.key) {
        ++counters_.duplicate_late;
        return;
      }
    }
  }
  if (held_lates_ >= options_.max_held_lates ||
      (it == chunks_.end() && pending_ >= options_.max_pending)) {
    ++counters_.refused_full;
    return;
  }
  if (it == chunks_.end()) {
    it = chunks_.emplace(id, Chunk{}).first;
    ++pending_;
    Schedule(id, it->second, now_ns + options_.give_up_ns);
  }
  it->second.early.push_back(std::move(late));
  ++held_lates_;
}

TanEngine::Late TanEngine::CopyLate(const AggPacket& pkt, uint64_t now_ns) {
  const AggHeader& h = *pkt.header;
  Late late;
  late.node = h.node_id.host();
  late.flags = h.flags.host();
  late.key = h.job_key.host();
  late.dtype = pkt.dtype;
  late.op = pkt.op;
  late.scale = h.scale;
  late.elem_count = h.elem_count.host();
  late.arrival_ns = now_ns;
  late.missing.reserve(h.missing_count);
  for (uint32_t i = 0; i < h.missing_count; ++i) late.missing.push_back(pkt.MissingNode(i));
  late.payload.assign(pkt.payload, pkt.payload + pkt.payload_len);
  return late;
}

TanEngine::ChunkPhase TanEngine::PhaseOf(uint32_t job_id, uint32_t seq) const {
  const auto it = chunks_.find(ChunkId{job_id, seq});
  if (it == chunks_.end()) return ChunkPhase::kNone;
  switch (it->second.phase) {
    case Phase::kAwaitingFirst: return ChunkPhase::kAwaitingFirst;
    case Phase::kOpen: return ChunkPhase::kOpen;
    case Phase::kDone: break;
  }
  return ChunkPhase::kDone;
}

const std::vector<uint8_t>* TanEngine::ResultOf(uint32_t job_id, uint32_t seq) const {
  const auto it = chunks_.find(ChunkId{job_id, seq});
  if (it == chunks_.end() || it->second.phase != Phase::kDone) return nullptr;
  return &it->second.result;
}

void TanEngine::SetOwnWorker(const TanPeer& worker) {
  own_worker_ = worker;
}

bool TanEngine::OfferOwn(const AggPacket& pkt, uint64_t now_ns, std::vector<TanOutput>* out) {
  if (pkt.opcode != Opcode::kContribution || pkt.payload_len > options_.max_payload) return false;
  const AggHeader& h = *pkt.header;
  const ChunkId id{h.job_id.host(), h.seq.host()};
  const auto it = chunks_.find(id);
  if (it == chunks_.end() || it->second.phase == Phase::kAwaitingFirst ||
      it->second.fields.job_key != h.job_key.host()) {
    return false;
  }
  Chunk& c = it->second;
  const uint16_t node = h.node_id.host();
  if (c.own_node == node) {
    ++counters_.own_repeats;
    if (c.phase == Phase::kDone && own_worker_.ip != 0) out->push_back(ForOwnWorker(c, c.result));
    return true;
  }
  if (c.phase != Phase::kOpen || c.outstanding.count(node) == 0) return false;
  ++counters_.own_data;
  c.own_node = node;
  c.own_incarnation = h.incarnation.host();
  Offer(id, c, CopyLate(pkt, now_ns), now_ns, out);
  return true;
}

void TanEngine::Offer(const ChunkId& id, Chunk& c, Late&& late, uint64_t now_ns,
                      std::vector<TanOutput>* out) {
  Resolution r = Resolve(c, std::move(late));
  // New outstanding ids may be what a parked late was waiting for. Each pass
  // that makes progress resolves at least one id, so this ends.
  while (r == Resolution::kMergedNewIds && !c.parked.empty()) {
    std::vector<Late> parked;
    parked.swap(c.parked);
    held_lates_ -= parked.size();
    r = Resolution::kDropped;
    for (Late& p : parked) {
      const Resolution pr = Resolve(c, std::move(p));
      if (pr == Resolution::kMergedNewIds) r = pr;
    }
  }
  while (r != Resolution::kDropped && !c.outstanding.empty() && !c.parked.empty() &&
         ResolveByMembers(c)) {
  }
  if (c.outstanding.empty()) Finish(id, c, now_ns, out);
}

std::vector<uint16_t> TanEngine::Content(uint32_t job_id, const Late& late) const {
  // Whose data the payload holds: the sender, and what a covering switch
  // covers less what it missed itself.
  // A switch the late partial misses took the ids it covers with it, when
  // the TAN knows them: they come with that switch's own late partial.
  // With CONTENT the list says what the payload holds.
  std::vector<uint16_t> content{late.node};
  if ((late.flags & flags::kContent) != 0) {
    for (const uint16_t n : late.missing) {
      if (n != late.node) content.push_back(n);
    }
  } else if (const auto cov = covers_.find({job_id, late.node}); cov != covers_.end()) {
    std::vector<uint16_t> lacks = late.missing;
    for (const uint16_t m : late.missing) {
      if (const auto below = covers_.find({job_id, m}); below != covers_.end()) {
        lacks.insert(lacks.end(), below->second.begin(), below->second.end());
      } else if (std::find(cov->second.begin(), cov->second.end(), m) == cov->second.end()) {
        // A switch below the sender whose ids the TAN does not know: any of
        // the sender's ids may have gone with it. The payload is then the
        // sender's alone, as without covers: the missing switch's own late
        // partial lists what it lacks in turn.
        return content;
      }
    }
    std::sort(lacks.begin(), lacks.end());
    for (const uint16_t n : cov->second) {
      if (n != late.node && !std::binary_search(lacks.begin(), lacks.end(), n)) {
        content.push_back(n);
      }
    }
  }
  return content;
}

std::set<uint16_t> TanEngine::Lacks(uint32_t job_id, const std::set<uint16_t>& outstanding) const {
  std::set<uint16_t> lacks = outstanding;
  std::vector<uint16_t> todo(outstanding.begin(), outstanding.end());
  while (!todo.empty()) {  // each id is taken once: ends
    const uint16_t id = todo.back();
    todo.pop_back();
    const auto cov = covers_.find({job_id, id});
    if (cov == covers_.end()) continue;
    for (const uint16_t n : cov->second) {
      if (lacks.insert(n).second) todo.push_back(n);
    }
  }
  return lacks;
}

bool TanEngine::InChunkAlready(const Chunk& c, uint16_t sender, uint16_t n,
                               const std::set<uint16_t>& lacks) const {
  const uint32_t job_id = c.fields.job_id;
  const auto cov = covers_.find({job_id, sender});
  if (cov == covers_.end() || lacks.count(n) != 0) return false;
  const auto known_rank = [&](uint16_t id) {
    for (auto it = covers_.lower_bound({job_id, 0});
         it != covers_.end() && it->first.first == job_id; ++it) {
      if (std::binary_search(it->second.begin(), it->second.end(), id)) return true;
    }
    return false;
  };
  for (const uint16_t id : lacks) {
    if (covers_.count({job_id, id}) == 0 && !known_rank(id)) return false;
  }
  if (std::binary_search(cov->second.begin(), cov->second.end(), n)) return true;
  // A switch below the sender: in the chunk when none of its ranks is lacked.
  const auto below = covers_.find({job_id, n});
  if (below == covers_.end()) return false;
  for (const uint16_t r : below->second) {
    if (lacks.count(r) != 0 || !std::binary_search(cov->second.begin(), cov->second.end(), r)) {
      return false;
    }
  }
  return true;
}

TanEngine::Resolution TanEngine::Resolve(Chunk& c, Late&& late) {
  const AggFields& f = c.fields;
  if (late.key != f.job_key) {
    ++counters_.key_mismatch;
    return Resolution::kDropped;
  }
  if (late.dtype != f.dtype || late.op != f.op || late.scale != f.scale ||
      late.elem_count != f.elem_count) {
    ++counters_.malformed;
    return Resolution::kDropped;
  }
  std::sort(late.missing.begin(), late.missing.end());
  const auto share = c.empty_shares.find(late.node);
  const bool rest_of_share = share != c.empty_shares.end() &&
                             (late.flags & (flags::kConflict | flags::kContent)) == 0 &&
                             std::includes(share->second.begin(), share->second.end(),
                                           late.missing.begin(), late.missing.end());
  std::vector<uint16_t> content;
  if (rest_of_share) {
    // Its sender sent the chunk before as holding nobody's data (CONFLICT),
    // its whole share listed, and then reduced it in a slot after all: this
    // payload holds that share less what it lists, never the sender's id a
    // second time (the first one held nothing of it).
    std::set_difference(share->second.begin(), share->second.end(), late.missing.begin(),
                        late.missing.end(), std::back_inserter(content));
  } else {
    content = Content(f.job_id, late);
  }
  // Where data reduced twice gives the same bytes (min, max, and, or), a
  // late that holds ids merged already besides an awaited one is merged all
  // the same: a switch's slot that took its members' resends after their
  // first sends went around it as lates holds both (seed 1440886).
  const bool twice_same = SameTwice(f.op);
  // A switch's id, where the late names what the switch's payload holds
  // (CONTENT, or the switch's covers known here), stands for no data of its
  // own: merged with the switch's earlier late partial, it does not make
  // this one a duplicate, which holds the rest of its share (seed 1442316:
  // a leaf's slot sent up the ranks its prediction excluded before, after a
  // partial that lacked them).
  const bool sender_names_share = (late.flags & flags::kContent) != 0 ||
                                  covers_.count({f.job_id, late.node}) != 0;
  bool resolves = false;
  bool repeats = false;
  for (const uint16_t n : content) {
    if (c.merged.count(n) != 0 && !(n == late.node && sender_names_share)) {
      if (!twice_same) {
        ++counters_.duplicate_late;  // merging it would count n twice
        return Resolution::kDropped;
      }
      repeats = true;
    }
    resolves = resolves || c.outstanding.count(n) != 0;
  }
  // Its sender merged already, what the switch lacked then is awaited, and
  // a late of it that resolves none of that holds nothing new.
  const bool sender_again = sender_names_share && c.merged.count(late.node) != 0;
  if (!resolves && (repeats || sender_again)) {
    ++counters_.duplicate_late;  // nothing in it is awaited that came already
    return Resolution::kDropped;
  }
  if (!resolves && rest_of_share) {
    ++counters_.duplicate_late;  // every id it holds came already, or is awaited no more
    return Resolution::kDropped;
  }
  if (!resolves) {
    // One parked late per sender and missing list: a resend adds nothing.
    const bool again = std::any_of(c.parked.begin(), c.parked.end(), [&](const Late& p) {
      return p.node == late.node && p.flags == late.flags && p.missing == late.missing;
    });
    if (again || held_lates_ >= options_.max_held_lates) {
      ++counters_.duplicate_late;
      return Resolution::kDropped;
    }
    c.parked.push_back(std::move(late));
    ++held_lates_;
    return Resolution::kParked;
  }
  // What the chunk still lacks: its outstanding ids, and what the switches
  // among them cover, as far as the TAN knows. A late whose payload holds
  // another id besides its sender overlaps what the first data (or an
  // earlier late) holds already: merged, it would count that id twice.
  const std::set<uint16_t> lacks = Lacks(f.job_id, c.outstanding);
  for (const uint16_t n : content) {
    if (n != late.node && lacks.count(n) == 0 && !twice_same) {
      ++counters_.duplicate_late;
      return Resolution::kDropped;
    }
  }
  if (c.batch && held_lates_ >= options_.max_held_lates) {
    ++counters_.refused_full;
    return Resolution::kDropped;
  }

  for (const uint16_t n : content) {
    c.outstanding.erase(n);
    c.merged.insert(n);
  }
  if ((late.flags & flags::kConflict) != 0 && content.size() == 1 && content[0] == late.node) {
    c.empty_shares[late.node] = late.missing;  // sorted above
  }
  bool new_ids = false;
  // With CONTENT the list says what the payload holds, and it lacks nothing.
  if ((late.flags & flags::kContent) == 0) {
    for (const uint16_t n : late.missing) {
      if (c.merged.count(n) != 0 || InChunkAlready(c, late.node, n, lacks)) continue;
      if (c.outstanding.insert(n).second) new_ids = true;
    }
  }
  Fold(c, std::move(late));
  return new_ids ? Resolution::kMergedNewIds : Resolution::kMerged;
}

void TanEngine::Fold(Chunk& c, Late&& late) {
  ++counters_.merged;
  c.overflow = c.overflow || (late.flags & flags::kOverflow) != 0;
  c.recovered = c.recovered || (late.flags & (flags::kRecovered | flags::kRetransmission)) != 0;
  if (c.batch) {
    c.held.push_back(std::move(late));
    ++held_lates_;
  } else {
    const bool saturated = Reduce(c, late.payload.data());
    c.overflow = c.overflow || saturated;
  }
}

bool TanEngine::Reduce(Chunk& c, const uint8_t* payload) {
  const AggFields& f = c.fields;
  if (c.acc_empty) {
    // Nobody's data yet: this one is loaded as a slot loads its first
    // contribution (its bits kept), not reduced into the identity.
    c.acc_empty = false;
    LoadFirst(f.dtype, payload, f.elem_count, c.acc.data());
    return false;
  }
  return Accumulate(f.dtype, f.op, c.acc.data(), payload, f.elem_count);
}

bool TanEngine::Subtree(const Chunk& c, uint16_t node, const std::vector<uint16_t>& ranks,
                        const std::multimap<uint16_t, size_t>& by_node, int depth,
                        SubtreeChoice* choice) const {
  // Data of a switch's rank merged already: the late that names it missing
  // lacks it, as it must.
  if (c.merged.count(node) != 0) {
    if (!std::binary_search(ranks.begin(), ranks.end(), node)) return false;
    choice->merged_refs.insert(node);
    return true;
  }
  // No tree is deeper, no cycles; and a bounded search, whatever lates a
  // sender with the key parks here.
  if (depth > 8 || choice->nodes.count(node) != 0 || subtree_budget_ == 0) return false;
  --subtree_budget_;
  // A late from the node: whatever it lacks must be accounted for in turn.
  // Those that lack the most first: a rank merged already must be one they
  // lack.
  std::vector<size_t> from;
  for (auto [it, last] = by_node.equal_range(node); it != last; ++it) from.push_back(it->second);
  std::stable_sort(from.begin(), from.end(), [&](size_t a, size_t b) {
    return c.parked[a].missing.size() > c.parked[b].missing.size();
  });
  for (const size_t i : from) {
    const Late& late = c.parked[i];
    SubtreeChoice tried = *choice;
    tried.nodes.insert(node);
    tried.lates.push_back(i);
    bool whole = true;
    if ((late.flags & flags::kContent) != 0) {
      // It names what it holds: ranks of the switch, each not merged. The
      // rest of the node's ranks, when the TAN knows them, must be
      // accounted for on their own; when it does not, nothing says what
      // the rest is.
      for (const uint16_t n : late.missing) {
        whole = whole && std::binary_search(ranks.begin(), ranks.end(), n) &&
                c.merged.count(n) == 0 && tried.nodes.insert(n).second;
      }
      const auto cov = covers_.find({c.fields.job_id, node});
      whole = whole && cov != covers_.end();
      if (whole) {
        for (const uint16_t r : cov->second) {
          if (std::find(late.missing.begin(), late.missing.end(), r) != late.missing.end()) continue;
          whole = whole && r != node && Subtree(c, r, ranks, by_node, depth + 1, &tried);
        }
      }
    } else {
      for (const uint16_t m : late.missing) {
        whole = whole && m != node && Subtree(c, m, ranks, by_node, depth + 1, &tried);
      }
    }
    if (whole) {
      *choice = std::move(tried);
      return true;
    }
  }
  // No usable late from it: a switch whose ranks are known is whole when
  // each of them is.
  const auto cov = covers_.find({c.fields.job_id, node});
  if (cov == covers_.end()) return false;
  SubtreeChoice tried = *choice;
  tried.nodes.insert(node);
  for (const uint16_t r : cov->second) {
    if (r == node || !Subtree(c, r, ranks, by_node, depth + 1, &tried)) return false;
  }
  *choice = std::move(tried);
  return true;
}

bool TanEngine::ResolveByMembers(Chunk& c) {
  const uint32_t job_id = c.fields.job_id;
  std::multimap<uint16_t, size_t> by_node;
  for (size_t i = 0; i < c.parked.size(); ++i) by_node.emplace(c.parked[i].node, i);
  for (auto it = covers_.lower_bound({job_id, 0}); it != covers_.end() && it->first.first == job_id;
       ++it) {
    const uint16_t sw = it->first.second;
    const std::vector<uint16_t>& ranks = it->second;
    if (c.merged.count(sw) != 0) continue;
    // Awaited here: the switch itself (its whole share), or its ranks (a
    // root that lists the ids a child covers), some of them merged already.
    const bool awaited = c.outstanding.count(sw) != 0;
    bool any_outstanding = false;
    bool accounted = true;
    for (const uint16_t r : ranks) {
      const bool out = c.outstanding.count(r) != 0;
      any_outstanding = any_outstanding || out;
      accounted = accounted && (out || c.merged.count(r) != 0 || awaited);
    }
    if (!(awaited || any_outstanding) || !accounted) continue;
    SubtreeChoice choice;
    subtree_budget_ = kSubtreeBudget;
    if (!Subtree(c, sw, ranks, by_node, 0, &choice)) continue;
    // Every rank merged already must be one the chosen lates lack (named
    // missing by one of them): else they would count it twice.
    bool twice = false;
    for (const uint16_t r : ranks) {
      twice = twice || (c.merged.count(r) != 0 && choice.merged_refs.count(r) == 0);
    }
    if (twice) continue;
    // The switch's whole share is here, each part once: merge it.
    ++counters_.by_members;
    std::set<uint16_t> done(choice.nodes.begin(), choice.nodes.end());
    for (const uint16_t r : ranks) {
      if (c.merged.count(r) == 0) done.insert(r);
    }
    done.insert(sw);
    for (const uint16_t n : done) {
      c.outstanding.erase(n);
      c.merged.insert(n);
    }
    std::vector<size_t> chosen = choice.lates;
    std::sort(chosen.begin(), chosen.end());
    std::vector<Late> parked;
    parked.swap(c.parked);
    held_lates_ -= parked.size();
    size_t next = 0;
    for (size_t i = 0; i < parked.size(); ++i) {
      if (next < chosen.size() && chosen[next] == i) {
        ++next;
        Fold(c, std::move(parked[i]));
      } else {
        c.parked.push_back(std::move(parked[i]));
        ++held_lates_;
      }
    }
    return true;  // the outstanding ids changed
  }
  return false;
}

void TanEngine::Finish(const ChunkId& id, Chunk& c, uint64_t now_ns, std::vector<TanOutput>* out) {
  AggFields& f = c.fields;
  if (c.batch) {
    std::vector<const Late*> order;
    order.reserve(c.held.size());
    for (const Late& l : c.held) order.push_back(&l);
    if (c.ordered) {
      std::stable_sort(order.begin(), order.end(),
                       [](const Late* a, const Late* b) { return a->node < b->node; });
    }
    for (const Late* l : order) {
      const bool saturated = Reduce(c, l->payload.data());
      c.overflow = c.overflow || saturated;
    }
  }
  const uint32_t payload_len = f.elem_count * static_cast<uint32_t>(ElementSize(f.dtype));
  std::vector<uint8_t> payload(payload_len);
  StoreResult(f.dtype, c.acc.data(), f.elem_count, payload.data());

  f.flags = static_cast<uint16_t>((c.overflow ? flags::kOverflow : 0) |
                                  (c.recovered ? flags::kRecovered : 0) |
                                  (c.ordered ? flags::kOrdered : 0) |
                                  (c.final ? flags::kFinal : 0));
  const bool gave_up = !c.outstanding.empty();
  const bool refused = !gave_up && options_.on_complete && !options_.on_complete(f, payload);
  const bool incomplete = gave_up || refused;
  if (incomplete) f.flags = static_cast<uint16_t>(f.flags | flags::kIncomplete);
  if (!incomplete && !c.overflow && options_.verified_results) {
    f.flags = static_cast<uint16_t>(f.flags | flags::kVerified);
  }
  // The outstanding ids, sorted (std::set), as many as the header and the
  // first data's path allow.
  const uint32_t budget = std::max(c.first_len, kPlainMtuPayload);
  const uint32_t fixed = static_cast<uint32_t>(sizeof(AggHeader)) + payload_len;
  const size_t fit = budget > fixed ? (budget - fixed) / 2 : 0;
  const size_t listed = std::min({c.outstanding.size(), kMaxMissingIds, fit});
  std::vector<uint16_t> missing(c.outstanding.begin(),
                                std::next(c.outstanding.begin(), static_cast<ptrdiff_t>(listed)));
  std::vector<uint8_t> datagram(sizeof(AggHeader) + 2 * listed + payload_len);
  const uint32_t n =
      BuildAggregation(f, missing.data(), static_cast<uint8_t>(listed), payload.data(), payload_len,
                       datagram.data(), static_cast<uint32_t>(datagram.size()));
  datagram.resize(n);  // n == size: the lengths are ours
  if (gave_up) {
    ++counters_.gave_up;
  } else if (refused) {
    ++counters_.completion_refused;
  } else {
    ++counters_.completed;
  }
  out->push_back(TanOutput{c.reply_to, datagram});
  // The own worker's switch never saw its data, so cannot answer it.
  if (c.own_node >= 0 && own_worker_.ip != 0) out->push_back(ForOwnWorker(c, datagram));

  // Keep only the result.
  Unschedule(id, c);
  counters_.duplicate_late += c.parked.size();
  Release(c.held);
  Release(c.parked);
  std::vector<uint8_t>().swap(c.acc);
  c.outstanding.clear();
  c.merged.clear();
  c.empty_shares.clear();
  c.result = std::move(datagram);
  c.phase = Phase::kDone;
  --pending_;
  while (!done_deadlines_.empty() && done_deadlines_.size() >= options_.max_pending) {
    Erase(done_deadlines_.begin()->second);  // the oldest result
  }
  Schedule(id, c, now_ns + options_.give_up_ns);
}

void TanEngine::Expire(uint64_t now_ns, std::vector<TanOutput>* out) {
  while (!pending_deadlines_.empty() && pending_deadlines_.begin()->first < now_ns) {
    const ChunkId id = pending_deadlines_.begin()->second;
    Chunk& c = chunks_.find(id)->second;
    if (c.phase == Phase::kOpen) {
      Finish(id, c, now_ns, out);  // INCOMPLETE
      continue;
    }
    // Awaiting its first data: drop the lates held too long.
    Unschedule(id, c);
    const auto stale = [&](const Late& l) { return l.arrival_ns + options_.give_up_ns < now_ns; };
    const size_t before = c.early.size();
    c.early.erase(std::remove_if(c.early.begin(), c.early.end(), stale), c.early.end());
    counters_.orphan_late += before - c.early.size();
    held_lates_ -= before - c.early.size();
    if (c.early.empty()) {
      chunks_.erase(id);
      --pending_;
      continue;
    }
    uint64_t oldest = c.early.front().arrival_ns;
    for (const Late& l : c.early) oldest = std::min(oldest, l.arrival_ns);
    Schedule(id, c, oldest + options_.give_up_ns);
  }
  while (!done_deadlines_.empty() && done_deadlines_.begin()->first < now_ns) {
    Erase(done_deadlines_.begin()->second);
  }
}

void TanEngine::Schedule(const ChunkId& id, Chunk& c, uint64_t deadline_ns) {
  c.deadline_ns = deadline_ns;
  (c.phase == Phase::kDone ? done_deadlines_ : pending_deadlines_).insert({deadline_ns, id});
}

void TanEngine::Unschedule(const ChunkId& id, const Chunk& c) {
  (c.phase == Phase::kDone ? done_deadlines_ : pending_deadlines_).erase({c.deadline_ns, id});
}

void TanEngine::Release(std::vector<Late>& lates) {
  held_lates_ -= lates.size();
  std::vector<Late>().swap(lates);
}

TanOutput TanEngine::ForOwnWorker(const Chunk& c, const std::vector<uint8_t>& result) const {
  TanOutput o{own_worker_, result};
  // The worker's own run, not the root switch's label.
  reinterpret_cast<AggHeader*>(o.datagram.data())->incarnation = be32_t::FromHost(c.own_incarnation);
  return o;
}

void TanEngine::Erase(const ChunkId& id) {
  const auto it = chunks_.find(id);
  if (it == chunks_.end()) return;
  Chunk& c = it->second;
  Unschedule(id, c);
  if (c.phase != Phase::kDone) {
    --pending_;
    Release(c.early);
    Release(c.held);
    Release(c.parked);
  }
  chunks_.erase(it);
}

}  // namespace aggswitch::aggregator
