#include "dataplane/tree_stage.h"

#include <algorithm>
#include <cstring>

#include "aggregator/reduce.h"

namespace aggswitch::dataplane {
namespace {

// The largest UDP payload a 1500-byte MTU carries.
constexpr uint32_t kMaxUdpPayload = 1500 - 20 - 8;
// A missing list holds at most 255 ids (missing_count is one byte).
constexpr uint32_t kMaxMissingIds = 255;
// The longest first data a root hands its own TAN. It goes through a ring
// to the control thread, never over a link, so its missing list (every id
// the children's partials listed, at most 255) need not share a 1500-byte
// MTU with a payload that one datagram did carry (seed 706110: 53 ids
// beside 333 float32 elements).
constexpr uint32_t kMaxOwnTanFirstData = kMaxUdpPayload + 2 * kMaxMissingIds;

// The longest datagram this switch sends up for `job`.
uint32_t UpLimit(const aggregator::Job& job) {
  return job.is_root() && job.tan() == aggregator::JobSpec::Tan::kSelf ? kMaxOwnTanFirstData
                                                                       : kMaxUdpPayload;
}

// An own TAN's INCOMPLETE result lists the ids still outstanding, as many as
// its first data carried; it goes down over links, so `m` (a datagram from
// the aggregation header on) keeps as many as a 1500-byte MTU holds beside
// the payload. Whether `m` changed (`pkt` then stale).
bool FitMissingListToMtu(rte_mbuf* m, const aggregator::AggPacket& pkt) {
  auto* h = rte_pktmbuf_mtod(m, aggregator::AggHeader*);
  const uint32_t fixed = static_cast<uint32_t>(sizeof(aggregator::AggHeader)) + pkt.payload_len;
  const uint32_t len = fixed + 2u * h->missing_count;
  if (len <= kMaxUdpPayload || h->missing_count == 0) return false;
  const uint32_t keep =
      fixed >= kMaxUdpPayload ? 0 : std::min<uint32_t>(h->missing_count, (kMaxUdpPayload - fixed) / 2);
  uint8_t* at = reinterpret_cast<uint8_t*>(h) + sizeof(aggregator::AggHeader) + 2 * keep;
  std::memmove(at, pkt.payload, pkt.payload_len);
  h->missing_count = static_cast<uint8_t>(keep);
  const uint32_t out = fixed + 2 * keep;
  m->data_len = static_cast<uint16_t>(out);
  m->pkt_len = out;
  return true;
}
// How long the bypass entries of a chunk that went up as missing live.
constexpr uint64_t kUpAsMissingEntryMs = 50;
// Expired bypass entries swept per sweep.
constexpr uint32_t kBypassSweepBudget = 32;
// The node of a chunk's bypass entry that says its partial went up from
// here, counting every member without an entry of its own (CountedUp):
// 65535, no member's id (config::kMaxNodeId).
constexpr uint16_t kCountedMark = aggregator::kNoNode;
// How long that entry lives: long enough for the parent to place the
// partial in a spare slot (a control step) and send it on at its slot's
// timer, so that the TAN merges it before any member's data sent up again.
// Past it, a member the partial counted sends its data up again, as it did
// before the mark: a repeat the TAN drops, should the partial be there.
constexpr uint64_t kCountedMarkMs = 50;

}  // namespace

bool TreeStage::MatchBypass(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id) {
  const bool matched = HasEntry(job, seq, member, node_id);
  if (matched) stats_.lcore.agg.bypass_matched.Add(1);
  return matched;
}

bool TreeStage::HasEntry(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id) {
  aggregator::BypassTable& bypass = *s_.bypass;
  aggregator::BypassKey key{job.id(), job.generation(), seq, node_id};
  // The entries stay until they expire: a straggler whose late datagram
  // is lost on its way resends it, and the resend goes the same way (the
  // TAN drops what it has already).
  bool matched = bypass.Match(key, clock_.tsc, /*keep=*/true);
  // A late child switch under variant 2 left entries for the nodes it covers.
  if (member >= 0 && job.IsSwitch(static_cast<uint16_t>(member)) && job.bypass_covered_nodes()) {
    for (const uint16_t covered : job.Covers(static_cast<uint16_t>(member))) {
      key.node = covered;
      matched |= bypass.Match(key, clock_.tsc, /*keep=*/true);
    }
  }
  return matched;
}

bool TreeStage::CountedUp(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id) {
  if (!bypass_live() || member < 0 || node_id == job.tan_member()) return false;
  const aggregator::BypassKey mark{job.id(), job.generation(), seq, kCountedMark};
  return s_.bypass->Match(mark, clock_.tsc, /*keep=*/true) && !HasEntry(job, seq, member, node_id);
}

void TreeStage::ForgetCounted(const aggregator::Job& job, uint32_t seq) {
  if (!bypass_live()) return;
  (void)s_.bypass->Match({job.id(), job.generation(), seq, kCountedMark}, clock_.tsc);
}

void TreeStage::SweepBypass() {
  if (!bypass_live()) return;
  const uint32_t swept = s_.bypass->Sweep(clock_.tsc, kBypassSweepBudget);
  if (swept != 0) stats_.lcore.agg.bypass_expired.Add(swept);
}

void TreeStage::ContinueBypassDump(BypassDumpExchange& d) {
  d.Begin();
  d.cursor = s_.bypass->Dump(
      d.cursor, BypassDumpEntry::kScanPerPass, clock_.tsc,
      [&](const aggregator::BypassKey& key, uint64_t expiry) {
        if (key.node != kCountedMark) (void)d.Add({key, expiry});  // members' entries only
      });
  if (d.cursor == 0) d.Finish(clock_.tsc);
}

uint32_t TreeStage::CollectMissing(const aggregator::Job& job, uint32_t seq,
                                   const aggregator::Slot* slot, bool entries, uint16_t* out,
                                   uint32_t cap, bool* unrecorded, uint64_t entry_ttl,
                                   bool* excluded) {
  AggregationCounters& c = stats_.lcore.agg;
  uint32_t n = 0;
  bool overflow = false;
  auto add = [&](uint16_t node, bool entry) {
    if (n == cap) {
      overflow = true;
      return;
    }
    out[n++] = node;
    if (!entry || s_.bypass == nullptr) return;
    switch (s_.bypass->Insert({job.id(), job.generation(), seq, node}, clock_.tsc, entry_ttl)) {
      case aggregator::BypassInsert::kCreated: c.bypass_created.Add(1); break;
      case aggregator::BypassInsert::kRefreshed: break;
      case aggregator::BypassInsert::kFull:
        c.bypass_full.Add(1);
        if (unrecorded != nullptr) *unrecorded = true;
        break;
    }
  };
  const uint16_t members = slot != nullptr ? slot->expected() : job.members();
  if (slot == nullptr || slot->count() != slot->expected()) {
    for (uint16_t i = 0; i < members; ++i) {
      if (slot != nullptr && slot->HasContributed(i)) continue;
      // An excluded member flags its own data, and a member that runs the
      // TAN keeps its own: listed, no entry needed.
      const bool out_now = job.Excluded(i);
      if (out_now && excluded != nullptr) *excluded = true;
      const bool entry = entries && !out_now && job.NodeId(i) != job.tan_member();
      if (job.IsSwitch(i) && job.bypass_covered_nodes()) {
        for (const uint16_t covered : job.Covers(i)) add(covered, entry);
      } else {
        add(job.NodeId(i), entry);
      }
    }
  }
  if (slot == nullptr) return overflow ? UINT32_MAX : n;
  for (uint16_t i = 0; i < slot->inherited_count(); ++i) add(slot->inherited(i), false);
  return overflow || slot->inherited_overflow() ? UINT32_MAX : n;
}

bool TreeStage::FinishSlot(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot,
                           bool expired, rte_mbuf* carrier, uint32_t header_offset) {
  // The common case, a flat root with every member in, skips the scan. A
  // parameter-server job's chunks all go to its TAN, complete or not. A
  // complete chunk of a job in verify mode, or one whose sum saturated in a
  // job with a parameter node, goes there to be checked (VERIFY), its slot
  // held until the answer (docs/parameter-node.md).
  const bool root = job.is_root();
  const bool answer_here = root && !job.parameter_server();
  const bool verify = answer_here && (job.verify() || slot.overflow()) &&
                      job.tan() == aggregator::JobSpec::Tan::kRemote;
  const bool all_in = slot.count() == slot.expected() && slot.inherited_count() == 0 &&
                      !slot.inherited_overflow();
  if (answer_here && !verify && all_in) {
    if (slot.final()) DeliverFinal(job, local, slot);
    return answers_.SendResult(job, slot, -1, carrier, header_offset);
  }
  // Bypass entries for every member listed that does not flag its own data
  // (CollectMissing leaves the excluded out): after a timeout, and after a
  // slot completed at the count it needed when it took its chunk, while a
  // member it went on without has been included again since (the
  // prediction changed). That member's data is not flagged; once the
  // forwarded slot goes to another chunk, only its entry knows the data is
  // late (seed 700556). With the participation unchanged since the claim,
  // a slot that did not expire lacks only excluded members: no entry.
  uint16_t missing[kMaxMissingIds];
  bool unrecorded = false;
  bool excluded = false;
  const uint32_t n = all_in ? 0
                            : CollectMissing(job, slot.seq(), &slot, /*entries=*/true, missing,
                                             kMaxMissingIds, &unrecorded, 0, &excluded);
  bool consumed = false;
  bool hold = false;
  bool went_up = false;
  if (n == UINT32_MAX) {
    stats_.lcore.agg.missing_list_overflow.Add(1);
    answers_.SendIncomplete(job, slot, nullptr, 0);
  } else if (n == 0 && verify) {
    stats_.lcore.agg.verify_sent.Add(1);
    consumed = SendPartial(job, slot, aggregator::Opcode::kVerify, nullptr, 0, carrier,
                           header_offset);
    hold = true;
  } else if (n == 0 && answer_here) {
    if (slot.final()) DeliverFinal(job, local, slot);
    return answers_.SendResult(job, slot, -1, carrier, header_offset);
  } else {
    consumed = SendPartial(job, slot, aggregator::Opcode::kPartial, missing, n, carrier,
                           header_offset, &went_up);
  }
  s_.slots->MarkForwarded(local, clock_.tsc, hold);
  // Once the slot gives way, the entries say whom the partial lacked,
  // and a mark that it went up says whom it counted: the others,
  // for kCountedMarkMs (CountedUp). (Members a switch restart left the
  // slot, listed without entries, would read as counted: no mark.)
  if (went_up && !unrecorded && !excluded && n != 0 && slot.inherited_count() == 0 &&
      !slot.inherited_overflow() && s_.bypass != nullptr) {
    const uint64_t ttl = std::min<uint64_t>(s_.bypass->ttl_cycles(),
                                            clock_.hz() / 1000 * kCountedMarkMs);
    switch (s_.bypass->Insert({job.id(), job.generation(), slot.seq(), kCountedMark}, clock_.tsc,
                              ttl)) {
      case aggregator::BypassInsert::kCreated:  // no member's entry: not bypass_created
      case aggregator::BypassInsert::kRefreshed: break;
      case aggregator::BypassInsert::kFull:
        stats_.lcore.agg.bypass_full.Add(1);
        unrecorded = true;
        break;
    }
  }
  // The slot is the only record of the members whose entries the full table
  // refused (or whom its refused mark counted): it keeps the chunk, so that
  // their late data is known as late.
  // So it is of the excluded members it lacks, who get no entry: should the
  // prediction include one again before its data went around, its resend,
  // unflagged, would otherwise claim the slot anew, and that slot's partial
  // be a repeat the parent drops (seeds 665239, 1108950).
  if (unrecorded || (excluded && n != UINT32_MAX)) {
    stats_.lcore.agg.slots_kept.Add(1);
    s_.slots->KeepForwarded(local);
  }
  return consumed;
}

bool TreeStage::MissingListFits(const aggregator::Job& job, const aggregator::Slot& slot) {
  uint16_t missing[kMaxMissingIds];
  const uint32_t n =
      CollectMissing(job, slot.seq(), &slot, false, missing, kMaxMissingIds, nullptr);
  return n != UINT32_MAX &&
         sizeof(aggregator::AggHeader) + 2 * n + slot.result_len() <= UpLimit(job);
}

void TreeStage::DeliverFinal(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot) {
  if (s_.finals == nullptr) {
    stats_.lcore.agg.final_refused.Add(1);
    return;
  }
  s_.finals->Begin(job, slot, local * s_.n_workers + s_.index);
}

void TreeStage::DeliverFinal(const aggregator::Job& job, uint32_t local,
                             const aggregator::AggPacket& result) {
  if (s_.finals == nullptr) {
    stats_.lcore.agg.final_refused.Add(1);
    return;
  }
  // The chunk's fields as ChunkFields gives a slot's: no key, nothing of
  // the sender's own.
  const aggregator::AggFields from = aggregator::ReadAggFields(*result.header);
  aggregator::AggFields chunk;
  chunk.job_id = job.id();
  chunk.seq = from.seq;
  chunk.elem_count = from.elem_count;
  chunk.dtype = from.dtype;
  chunk.op = from.op;
  chunk.scale = from.scale;
  chunk.addr_low = from.addr_low;
  s_.finals->Begin(job, chunk, result.payload, result.payload_len,
                   (from.flags & aggregator::flags::kOverflow) != 0,
                   local * s_.n_workers + s_.index);
}

bool TreeStage::SendPartial(const aggregator::Job& job, const aggregator::Slot& slot,
                            aggregator::Opcode opcode, const uint16_t* missing,
                            uint32_t n_missing, rte_mbuf* carrier, uint32_t header_offset,
                            bool* sent) {
  // (A parameter-server job's TAN is remote: the config and JobControl::Tan
  // refuse `self` for it.)
  if (job.is_root() && job.tan() == aggregator::JobSpec::Tan::kNone) {
    // Nobody can complete this chunk: the members learn it now.
    answers_.SendIncomplete(job, slot, missing, n_missing);
    return false;
  }
  if (opcode == aggregator::Opcode::kPartial && job.is_root() &&
      SendAlone(job, slot, missing, n_missing)) {
    return false;
  }
  aggregator::AggFields f = UpFields(job, slot, opcode, slot.final());
  if (opcode == aggregator::Opcode::kVerify) {
    // What the parameter node checks for omission: how many members the
    // root has (its workers and child switches), and how many this result
    // counts.
    f.expected = job.members();
    f.node_count = slot.count();
  }
  switch (SendUp(job, f, missing, n_missing, slot.result(), slot.result_len(), carrier,
                 header_offset)) {
    case Up::kCarried:
      if (sent != nullptr) *sent = true;
      return true;
    case Up::kSent:
      if (sent != nullptr) *sent = true;
      return false;
    case Up::kNoMbuf:
    case Up::kUnlabelled: return false;
    case Up::kTooLong: break;
  }
  answers_.SendIncomplete(job, slot, nullptr, 0);
  return false;
}

bool TreeStage::SendUpAsMissing(const aggregator::Job& job, const aggregator::AggHeader& chunk,
                                const aggregator::AggPacket* empty, int empty_member,
                                bool* flattened) {
  if (flattened != nullptr) *flattened = false;
  uint16_t missing[kMaxMissingIds];
  const uint32_t seq = chunk.seq.host();
  // The entries first: they are what sends the members' data on as late
  // data behind the partial. Without all of them, nothing goes (a member
  // whose data found no entry would start the chunk here again, and its
  // partial would be a repeat the parent drops).
  bool unrecorded = false;
  // Nothing here resends this partial if it is lost on the way (or refused
  // for now: a parent starting a new run): its entries live a short while,
  // and a member's resend after them goes up as missing again (a repeat the
  // TAN takes as such), where a slot would have sent the partial again.
  const uint64_t ttl = std::min<uint64_t>(s_.bypass != nullptr ? s_.bypass->ttl_cycles() : 0,
                                          clock_.hz() / 1000 * kUpAsMissingEntryMs);
  const uint32_t n =
      CollectMissing(job, seq, nullptr, true, missing, kMaxMissingIds, &unrecorded, ttl);
  const auto forget = [&] {
    const uint32_t written = n == UINT32_MAX ? kMaxMissingIds : n;
    for (uint32_t i = 0; i < written; ++i) {
      (void)s_.bypass->Match({job.id(), job.generation(), seq, missing[i]}, clock_.tsc);
    }
  };
  if (n == UINT32_MAX || unrecorded) {
    if (n == UINT32_MAX) stats_.lcore.agg.missing_list_overflow.Add(1);
    forget();
    return false;
  }
  uint32_t listed = n;
  bool in_its_place = false;
  if (empty != nullptr && empty_member >= 0 && !job.bypass_covered_nodes() &&
      job.IsSwitch(static_cast<uint16_t>(empty_member))) {
    // A child's up-as-missing partial holds nothing: list what it lists in
    // its place (as a slot here would inherit them), and no entry for it.
    const uint16_t child = job.NodeId(static_cast<uint16_t>(empty_member));
    const uint32_t k = empty->header->missing_count;
    uint16_t* at = std::find(missing, missing + n, child);
    if (at != missing + n && k != 0 && n - 1 + k <= kMaxMissingIds) {
      if (s_.bypass != nullptr) {
        (void)s_.bypass->Match({job.id(), job.generation(), seq, child}, clock_.tsc);
      }
      std::copy(at + 1, missing + n, at);
      listed = n - 1;
      for (uint32_t i = 0; i < k; ++i) missing[listed++] = empty->MissingNode(i);
      in_its_place = true;
    }
  }
  const auto dtype = static_cast<aggregator::DType>(chunk.dtype);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kPartial;
  // What the chunk's members marked it: ORDERED, and FINAL (the TAN returns
  // it with the result, which the root then delivers).
  f.flags = static_cast<uint16_t>(
      aggregator::flags::kConflict |
      (chunk.flags.host() & (aggregator::flags::kOrdered | aggregator::flags::kFinal)));
  f.job_id = job.id();
  f.seq = seq;
  f.elem_count = chunk.elem_count.host();
  f.dtype = dtype;
  f.op = static_cast<aggregator::ReduceOp>(chunk.op);
  f.scale = chunk.scale;
  f.aux = chunk.aux.host();
  f.addr_low = chunk.addr_low.host();
  if (SendUp(job, f, missing, listed, nullptr,
             f.elem_count * static_cast<uint32_t>(aggregator::ElementSize(dtype)), nullptr,
             0) != Up::kSent) {
    // Without the partial, the members' data must not go on as late data.
    forget();
    return false;
  }
  if (flattened != nullptr) *flattened = in_its_place;
  return true;
}

bool TreeStage::SendAlone(const aggregator::Job& job, const aggregator::Slot& slot,
                          const uint16_t* missing, uint32_t n_missing) {
  if (!slot.ordered() || slot.count() != 1 || slot.overflow() || slot.inherited_count() != 0 ||
      slot.inherited_overflow() || n_missing >= kMaxMissingIds) {
    return false;
  }
  uint16_t alone = 0;
  while (alone < slot.expected() && !slot.HasContributed(alone)) ++alone;
  if (alone == slot.expected() || job.IsSwitch(alone)) return false;
  // The TAN adds in node order, a slot in member order: the same only where
  // the node ids ascend with the members.
  for (uint16_t i = 1; i < job.members(); ++i) {
    if (job.NodeId(i) <= job.NodeId(static_cast<uint16_t>(i - 1))) return false;
  }
  uint16_t listed[kMaxMissingIds];
  std::copy(missing, missing + n_missing, listed);
  listed[n_missing] = job.NodeId(alone);
  const uint16_t marks = static_cast<uint16_t>(
      aggregator::flags::kOrdered | (slot.final() ? aggregator::flags::kFinal : 0));
  aggregator::AggFields f = Answers::ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kPartial;
  f.flags = static_cast<uint16_t>(aggregator::flags::kConflict | marks);
  switch (SendUp(job, f, listed, n_missing + 1, nullptr, slot.result_len(), nullptr, 0)) {
    case Up::kSent:
    case Up::kCarried:
      break;
    case Up::kTooLong:
      return false;  // the member's own id did not fit: first data as before
    case Up::kNoMbuf:
    case Up::kUnlabelled:
      return true;  // counted; the slot's resend tries again
  }
  f.opcode = aggregator::Opcode::kLate;
  f.flags = static_cast<uint16_t>(aggregator::flags::kBypass | marks);
  f.node_id = job.NodeId(alone);
  if (SendUp(job, f, nullptr, 0, slot.result(), slot.result_len(), nullptr, 0) == Up::kSent) {
    stats_.lcore.agg.late_forwarded.Add(1);
  }
  return true;
}

aggregator::AggFields TreeStage::UpFields(const aggregator::Job& job, const aggregator::Slot& slot,
                                         aggregator::Opcode opcode, bool final) {
  aggregator::AggFields f = Answers::ChunkFields(job, slot);
  f.opcode = opcode;
  f.flags = static_cast<uint16_t>((slot.overflow() ? aggregator::flags::kOverflow : 0) |
                                  (slot.recovered() ? aggregator::flags::kRecovered : 0) |
                                  (slot.ordered() ? aggregator::flags::kOrdered : 0) |
                                  (final ? aggregator::flags::kFinal : 0));
  return f;
}

void TreeStage::LeaveResult(const aggregator::Job& job, const aggregator::Slot& slot) {
  if (!job.is_root() || slot.state() != aggregator::Slot::State::kComplete || slot.came_down()) {
    return;
  }
  if (job.tan() == aggregator::JobSpec::Tan::kNone) {
    if (s_.kept != nullptr &&
        s_.kept->Keep({job.id(), job.generation(), slot.seq()}, job.label(),
                      Answers::ResultFields(job, slot), slot.result(), slot.result_len())) {
      stats_.lcore.agg.results_kept.Add(1);
    }
    return;
  }
  // Not FINAL: the main server had its copy from the slot.
  const aggregator::AggFields f = UpFields(job, slot, aggregator::Opcode::kPartial, false);
  if (SendUp(job, f, nullptr, 0, slot.result(), slot.result_len(), nullptr, 0) == Up::kSent) {
    stats_.lcore.agg.results_left_with_tan.Add(1);
  }
}

bool TreeStage::SendKept(const aggregator::Job& job, uint32_t seq, const aggregator::MemberAddr& to) {
  if (!HasKept()) return false;
  const KeptResults::Entry* e = s_.kept->Find({job.id(), job.generation(), seq}, job.label());
  if (e == nullptr) return false;
  aggregator::AggFields f = e->fields;
  f.incarnation = to.incarnation;  // its own run, as Answers::Replicate writes it
  if (!answers_.SendData(f, e->payload, e->len, to)) return false;
  stats_.lcore.agg.kept_results_sent.Add(1);
  return true;
}

TreeStage::Up TreeStage::SendUp(const aggregator::Job& job, aggregator::AggFields f,
                                const uint16_t* missing, uint32_t n_missing,
                                const uint8_t* payload, uint32_t payload_len, rte_mbuf* carrier,
                                uint32_t header_offset) {
  AggregationCounters& c = stats_.lcore.agg;
  const uint32_t label = job.UpLabel(Settling());
  if (label == 0) {
    // The parent (or the TAN) knows this switch's run by its label; without
    // one it could take this run's chunk for another's (docs/protocol.md,
    // "Runs"). A member's first datagram gives it one (every member's,
    // within the switch's restart grace).
    c.up_unlabelled.Add(1);
    return Up::kUnlabelled;
  }
  const bool root = job.is_root();
  const uint32_t len = sizeof(aggregator::AggHeader) + 2 * n_missing + payload_len;
  if (len > UpLimit(job)) {
    c.missing_list_overflow.Add(1);
    return Up::kTooLong;
  }
  rte_mbuf* m = nullptr;
  if (carrier != nullptr && RTE_MBUF_DIRECT(carrier) && carrier->nb_segs == 1 &&
      rte_mbuf_refcnt_read(carrier) == 1 &&
      header_offset + len <= static_cast<uint32_t>(rte_pktmbuf_data_len(carrier)) +
                                 rte_pktmbuf_tailroom(carrier)) {
    m = carrier;
    rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  } else {
    m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr || rte_pktmbuf_tailroom(m) < len) {
      c.result_no_mbuf.Add(1);
      if (m != nullptr) rte_pktmbuf_free(m);
      return Up::kNoMbuf;
    }
  }
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  f.job_key = job.key();  // the parent switch, or the TAN, checks it
  f.incarnation = label;  // and binds this switch's run by it
  if (job.run_labelled()) f.flags = static_cast<uint16_t>(f.flags | aggregator::flags::kRunId);
  if (job.announces_upstream()) {
    // The parent knows the job from this: its members are the job's nodes,
    // and it is the root.
    f.flags |= aggregator::flags::kTaskInfo;
    if (job.verify()) f.flags |= aggregator::flags::kVerifyMode;
    f.expected = job.nodes();
    f.node_count = 1;
  }
  // (A late the root makes of a member's data keeps that member's id.)
  if (f.opcode != aggregator::Opcode::kLate) {
    f.node_id = root ? aggregator::kRootNodeId : job.upstream_node();
  }
  // The parent frees its complete slots, and admits chunks under the slot
  // quota, by its members' watermarks: ours is our slot watermark, the
  // smallest of our current members' (a member presumed gone keeps only our
  // own copy of the results it lacks).
  f.ack_watermark = job.SlotWatermark(clock_.SeenNow(), s_.rebind_ticks).value_or(0);
  uint8_t* buf = rte_pktmbuf_mtod(m, uint8_t*);
  (void)aggregator::BuildAggregation(f, missing, static_cast<uint8_t>(n_missing), payload,
                                     payload_len, buf, len);
  if (payload == nullptr) {
    aggregator::StoreIdentity(f.dtype, f.op, f.elem_count, buf + len - payload_len);
  }
  const Up sent = m == carrier ? Up::kCarried : Up::kSent;
  if (!root) {
    if (f.opcode != aggregator::Opcode::kQuery) c.partials_sent.Add(1);  // queries_up counts those
    SendToHop(m, job, job.ParentHop(f.addr_low), kOwnFrame);
    return sent;
  }
  if (f.opcode == aggregator::Opcode::kPartial) c.first_data_sent.Add(1);
  if (job.tan() == aggregator::JobSpec::Tan::kSelf) {
    (void)ToOwnTan(m, kOwnFrame, true);
  } else {
    SendToHop(m, job, aggregator::Job::kTanHop, kOwnFrame);
  }
  return sent;
}

void TreeStage::AskAbove(const aggregator::Job& job, const aggregator::AggHeader& query) {
  // A query is no reason to fix the run label before every member has sent
  // (as a partial or late data must): fixed from some members only, after
  // this switch restarted, it would differ from the run's, and the parent,
  // taking it for a new run, would have the chunk reduced anew (a parameter
  // server would apply its step twice). The member asks again on its timer.
  if (job.label() == 0) {
    stats_.lcore.agg.up_unlabelled.Add(1);
    return;
  }
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kQuery;
  f.job_id = job.id();
  f.seq = query.seq.host();
  // The member's addr_low picks the parent, as it picked the one its
  // chunk's partial went to.
  f.addr_low = query.addr_low.host();
  f.slot_hint = aggregator::kNoSlotHint;  // the parent finds where it keeps the chunk
  if (SendUp(job, f, nullptr, 0, nullptr, 0, nullptr, 0) == Up::kSent) {
    stats_.lcore.agg.queries_up.Add(1);
  }
}

void TreeStage::RelayAck(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset,
                         uint16_t in_port) {
  // The parent frees this job's complete slots by our watermark, the
  // smallest of our current members' (SendPartial); partials carry it, and
  // the last chunks of a job, which no partial follows, learn it from here.
  const uint32_t now = clock_.SeenNow();
  const std::optional<uint32_t> min_ack = job.SlotWatermark(now, s_.rebind_ticks);
  if (!min_ack || job.label() == 0 || job.LearnedMembers() != job.members() ||
      !job.TakeRelayedAck(*min_ack, now, kAckRelayGapTicks)) {
    TxBuffers::Consumed(m);  // the ACK was read
    return;
  }
  // To the parent of the allreduce it ends: the member's addr_low picks it,
  // as it picked the parent of that allreduce's chunks.
  const uint32_t addr_low =
      reinterpret_cast<const aggregator::AggHeader*>(rte_pktmbuf_mtod(m, uint8_t*) + header_offset)
          ->addr_low.host();
  const uint32_t hop = job.ParentHop(addr_low);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kAck;
  f.node_id = job.upstream_node();
  f.job_id = job.id();
  f.job_key = job.key();
  f.seq = *min_ack;
  f.ack_watermark = *min_ack;
  f.addr_low = addr_low;
  f.incarnation = job.label();
  f.flags = job.run_labelled() ? aggregator::flags::kRunId : 0;
  // The ACK it answers is the same size: the relay is written over it.
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = sizeof(aggregator::AggHeader);
  m->pkt_len = sizeof(aggregator::AggHeader);
  aggregator::WriteAggHeader(f, 0, rte_pktmbuf_mtod(m, aggregator::AggHeader*));
  stats_.lcore.agg.acks_relayed.Add(1);
  SendToHop(m, job, hop, in_port);
}

aggregator::AggHeader* TreeStage::TrimToDatagram(rte_mbuf* m, const aggregator::Job& job,
                                                 uint32_t header_offset, uint16_t add_flags) const {
  auto* h = reinterpret_cast<aggregator::AggHeader*>(rte_pktmbuf_mtod(m, uint8_t*) + header_offset);
  // On up under this switch's run label, as its partials go: the parent
  // and the TAN know this switch's run, not its members'. Flagged kRunId
  // when that is the run's id; not the member's flag else.
  const uint16_t run_id = job.run_labelled() ? aggregator::flags::kRunId : 0;
  h->flags = common::be16_t::FromHost(
      static_cast<uint16_t>((h->flags.host() & ~aggregator::flags::kRunId) | add_flags | run_id));
  h->incarnation = common::be32_t::FromHost(job.UpLabel(Settling()));
  const uint32_t len = sizeof(aggregator::AggHeader) + 2u * h->missing_count +
                       h->elem_count.host() * static_cast<uint32_t>(aggregator::ElementSize(
                                                  static_cast<aggregator::DType>(h->dtype)));
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  return h;
}

void TreeStage::ForwardToPs(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset,
                            uint16_t in_port, uint16_t add_flags) {
  AggregationCounters& c = stats_.lcore.agg;
  if (!Labelled(m, job, in_port)) return;
  const aggregator::AggHeader* h = TrimToDatagram(m, job, header_offset, add_flags);
  if (!job.is_root()) {
    c.at_ps_forwarded.Add(1);
    SendToHop(m, job, job.ParentHop(h->addr_low.host()), in_port);
    return;
  }
  if (job.tan() == aggregator::JobSpec::Tan::kRemote) {
    c.at_ps_forwarded.Add(1);
    SendToHop(m, job, aggregator::Job::kTanHop, in_port);
    return;
  }
  c.no_parameter_node.Add(1);
  tx_.Drop(in_port, DropReason::kAggNoTan, m);
}

bool TreeStage::Labelled(rte_mbuf* m, const aggregator::Job& job, uint16_t in_port) {
  if (job.UpLabel(Settling()) != 0) return true;
  // As SendUp: nothing goes up before the run label.
  stats_.lcore.agg.up_unlabelled.Add(1);
  tx_.Drop(in_port, DropReason::kAggUnlabelled, m);
  return false;
}

bool TreeStage::ListContent(rte_mbuf* m, const aggregator::Job& job, bool always,
                            std::span<const uint16_t> only) {
  auto* h = rte_pktmbuf_mtod(m, aggregator::AggHeader*);
  const int index = job.LocalIndex(h->node_id.host());
  if ((!job.bypass_covered_nodes() && !always) || index < 0 || !job.IsSwitch(static_cast<uint16_t>(index)) ||
      (h->flags.host() & aggregator::flags::kContent) != 0) {
    return false;
  }
  uint16_t content[kMaxMissingIds];
  uint32_t n = 0;
  const uint32_t lacks = h->missing_count;
  const uint8_t* list = rte_pktmbuf_mtod_offset(m, const uint8_t*, sizeof(aggregator::AggHeader));
  if (!only.empty()) {
    // The caller knows what the payload holds (or what of it matters above).
    if (only.size() > kMaxMissingIds) return false;
    for (const uint16_t id : only) content[n++] = id;
  } else {
    const std::span<const uint16_t> covers = job.Covers(static_cast<uint16_t>(index));
    // A child that covers only itself (an in-band job's leaf at its root:
    // the ranks below it are not named here) has no content to name but its
    // own id, which the sender's id says already: the list stays.
    if (covers.size() == 1 && covers[0] == h->node_id.host()) return false;
    auto lacked = [&](uint16_t id) {
      for (uint32_t i = 0; i < lacks; ++i) {
        if (static_cast<uint16_t>(list[2 * i] << 8 | list[2 * i + 1]) == id) return true;
      }
      return false;
    };
    // What the child lacks must be ids it covers (ranks): a switch below it
    // that it missed took ranks this switch cannot name. Then the list stays.
    for (uint32_t i = 0; i < lacks; ++i) {
      const auto id = static_cast<uint16_t>(list[2 * i] << 8 | list[2 * i + 1]);
      if (std::find(covers.begin(), covers.end(), id) == covers.end()) return false;
    }
    for (const uint16_t id : covers) {
      if (lacked(id)) continue;
      if (n == kMaxMissingIds) return false;
      content[n++] = id;
    }
  }
  const uint32_t payload_len = rte_pktmbuf_data_len(m) - sizeof(aggregator::AggHeader) - 2 * lacks;
  if (n > lacks) {
    const uint32_t more = 2 * (n - lacks);
    if (rte_pktmbuf_append(m, static_cast<uint16_t>(more)) == nullptr) return false;  // no room: as it was
  } else {
    rte_pktmbuf_trim(m, static_cast<uint16_t>(2 * (lacks - n)));
  }
  uint8_t* out = rte_pktmbuf_mtod_offset(m, uint8_t*, sizeof(aggregator::AggHeader));
  std::memmove(out + 2 * n, out + 2 * lacks, payload_len);
  for (uint32_t i = 0; i < n; ++i) {
    out[2 * i] = static_cast<uint8_t>(content[i] >> 8);
    out[2 * i + 1] = static_cast<uint8_t>(content[i]);
  }
  h = rte_pktmbuf_mtod(m, aggregator::AggHeader*);
  h->missing_count = static_cast<uint8_t>(n);
  h->flags = common::be16_t::FromHost(static_cast<uint16_t>(h->flags.host() | aggregator::flags::kContent));
  stats_.lcore.agg.late_content_listed.Add(1);
  return true;
}

void TreeStage::ForwardLate(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset,
                            uint16_t in_port, uint32_t label, bool name_content,
                            std::span<const uint16_t> only) {
  AggregationCounters& c = stats_.lcore.agg;
  if (label == 0 && !Labelled(m, job, in_port)) return;
  auto* h = TrimToDatagram(m, job, header_offset, aggregator::flags::kBypass);
  h->opcode = static_cast<uint8_t>(aggregator::Opcode::kLate);
  if (label != 0) {
    h->incarnation = common::be32_t::FromHost(label);
    h->flags = common::be16_t::FromHost(static_cast<uint16_t>(h->flags.host() | aggregator::flags::kRunId));
  }
  // A child switch's late partial, whose covered ids this switch listed as
  // missing: sent on naming them (the TAN may not know what it covers).
  if (!ListContent(m, job, name_content, only) && !only.empty()) {
    // Named in full, it would say it holds ids already merged above.
    stats_.lcore.agg.duplicates.Add(1);
    tx_.Drop(in_port, DropReason::kAggDuplicate, m);
    return;
  }
  h = rte_pktmbuf_mtod(m, aggregator::AggHeader*);
  if (!job.is_root()) {
    c.late_forwarded.Add(1);
    SendToHop(m, job, job.ParentHop(h->addr_low.host()), in_port);
    return;
  }
  switch (job.tan()) {
    case aggregator::JobSpec::Tan::kRemote:
      c.late_forwarded.Add(1);
      SendToHop(m, job, aggregator::Job::kTanHop, in_port);
      return;
    case aggregator::JobSpec::Tan::kSelf:
      if (ToOwnTan(m, in_port, false)) c.late_forwarded.Add(1);
      return;
    case aggregator::JobSpec::Tan::kNone:
      break;
  }
  c.late_no_tan.Add(1);
  tx_.Drop(in_port, DropReason::kAggNoTan, m);
}

bool TreeStage::ToOwnTan(rte_mbuf* m, uint16_t in_port, bool first_data) {
  AggregationCounters& c = stats_.lcore.agg;
  if (s_.tan_up == nullptr) {
    c.late_no_tan.Add(1);
    tx_.Drop(in_port, DropReason::kAggNoTan, m);
    return false;
  }
  // The last quarter of the ring is the first data's: late data is resent
  // by its member, where a first data lost here waits for the slot's
  // backed-off resend, and every late of the chunk waits with it.
  const unsigned size = rte_ring_get_size(s_.tan_up);
  if ((!first_data && rte_ring_free_count(s_.tan_up) <= size / 4) ||
      rte_ring_sp_enqueue(s_.tan_up, m) != 0) {
    c.tan_busy.Add(1);
    tx_.Drop(in_port, DropReason::kAggTanBusy, m);
    return false;
  }
  return true;
}

void TreeStage::SendToHop(rte_mbuf* m, const aggregator::Job& job, uint32_t hop,
                          uint16_t in_port) {
  aggregator::MemberAddr to;
  if (!job.GetHop(hop, &to)) {
    stats_.lcore.agg.unresolved_next_hop.Add(1);
    tx_.Drop(in_port, DropReason::kAggUnresolvedHop, m);
    return;
  }
  const auto* h = rte_pktmbuf_mtod(m, const aggregator::AggHeader*);
  answers_.SendTo(m, to, static_cast<uint16_t>(h->seq.host()));
}

void TreeStage::ResultFromAbove(rte_mbuf* m, const aggregator::Job& job,
                                const aggregator::AggPacket& pkt, uint32_t header_offset,
                                uint16_t in_port, uint32_t local_slot) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  if (m->nb_segs != 1) {
    stats_.lcore.malformed[static_cast<size_t>(MalformedReason::kSegmented)].Add(1);
    tx_.Drop(in_port, DropReason::kAggMalformed, m);
    return;
  }
  const uint32_t seq = h.seq.host();
  const uint16_t flags = h.flags.host();
  const bool exception = pkt.opcode == aggregator::Opcode::kExceptionRetransmit;
  if (!exception && job.verify() && job.is_root() &&
      (flags & (aggregator::flags::kVerified | aggregator::flags::kIncomplete |
                aggregator::flags::kOverflow)) == 0) {
    // Verify mode: members receive only what the parameter node checked.
    c.unverified_results.Add(1);
    tx_.Drop(in_port, DropReason::kAggResultRefused, m);
    return;
  }
  (exception ? c.exceptions_down : c.results_down).Add(1);
  // A FINAL chunk that went through the TAN or the parameter node: the root
  // delivers its result to the main server as it delivers one it completed
  // itself (an exception as the saturated sum it carries, flagged
  // OVERFLOW). (Parameter-server and verify jobs take every result from the
  // TAN, and deliver none: docs/protocol.md.)
  const bool final = job.is_root() && !job.parameter_server() && !job.verify() &&
                     (flags & aggregator::flags::kFinal) != 0;
  if (final && (flags & aggregator::flags::kIncomplete) == 0 && s_.finals != nullptr &&
      !s_.finals->HasRoom(job)) {
    // No room to keep the final result for the main server now (every
    // delivery waits for its ACK): the result waits too, as a contribution
    // that would complete a final chunk here does, rather than reach the
    // members and never the main server. The members' resends bring it
    // down again.
    c.final_deferred.Add(1);
    s_.finals->TellRefused(job, seq);
    tx_.Drop(in_port, DropReason::kAggResultRefused, m);
    return;
  }
  if ((flags & aggregator::flags::kIncomplete) != 0) {
    c.incomplete_results.Add(1);
    if (final) c.final_refused.Add(1);  // nothing to deliver: the members are told why
  } else {
    // Kept for members that retransmit, while the slot still holds the
    // chunk; an exception as the saturated sum it carries, which a member
    // that asks again takes the same way (docs/parameter-node.md).
    // A slot that aggregates the chunk (members' resends claimed it again
    // after its first slot went up) completes with it too.
    aggregator::SlotUpdate released;
    const bool cached =
        s_.slots->CacheResult(local_slot, job.id(), job.generation(), seq, pkt.payload,
                              pkt.payload_len,
                              exception || (flags & aggregator::flags::kOverflow) != 0,
                              clock_.tsc, s_.holds != nullptr ? &released : nullptr,
                              (flags & aggregator::flags::kRecovered) != 0);
    for (uint16_t i = 0; i < released.n_released; ++i) s_.holds->Give(released.released[i]);
    if (final) {
      const aggregator::Slot* slot = s_.slots->Holding(local_slot, job.id(), job.generation(), seq);
      if (cached) {
        DeliverFinal(job, local_slot, *slot);
      } else if (slot == nullptr || slot->state() == aggregator::Slot::State::kAggregating) {
        // The chunk found no slot here (it went up as missing), its slot
        // went to another chunk, or a member's resend claimed a slot for it
        // again after its first data went up: the result in hand is the
        // copy. (Should that slot go up too, its answer is this result
        // again: delivered twice, the same bytes.)
        DeliverFinal(job, local_slot, pkt);
      }
      // Else a repeat of a result taken already: delivered then.
    }
  }
  const uint32_t len = sizeof(aggregator::AggHeader) + 2u * h.missing_count + pkt.payload_len;
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  // Members get results without the job's key (Answers::ChunkFields), and
  // with this switch's hint, not the one from above (each switch moves its
  // own jobs).
  auto* out = rte_pktmbuf_mtod(m, aggregator::AggHeader*);
  out->job_key = common::be64_t{};
  out->slot_hint = common::be16_t::FromHost(job.MoveHint(seq));
  stats_.lcore.agg.results_sent.Add(answers_.Replicate(job, m, 0, job.members(), static_cast<uint16_t>(seq)));
}

void TreeStage::DrainTanResults() {
  // Results of this switch's own TAN: datagrams from the aggregation header on.
  rte_mbuf* pkts[kBurstSize];
  const unsigned n =
      rte_ring_sc_dequeue_burst(s_.tan_down, reinterpret_cast<void**>(pkts), kBurstSize, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    aggregator::AggPacket pkt;
    const aggregator::Job* job = nullptr;
    if (aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[i], const uint8_t*),
                                     rte_pktmbuf_data_len(pkts[i]), &pkt) == aggregator::WireError::kOk) {
      job = s_.jobs->Find(pkt.header->job_id.host());
    }
    if (job == nullptr || pkt.opcode != aggregator::Opcode::kResult) {
      tx_.Drop(kOwnFrame, DropReason::kAggUnknownJob, pkts[i]);  // the job went meanwhile
      continue;
    }
    if (FitMissingListToMtu(pkts[i], pkt) &&
        aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[i], const uint8_t*),
                                     rte_pktmbuf_data_len(pkts[i]), &pkt) != aggregator::WireError::kOk) {
      tx_.Drop(kOwnFrame, DropReason::kAggMalformed, pkts[i]);  // cannot be: the lengths are ours
      continue;
    }
    // Of this run only, as a result from a remote TAN must be (Check): the
    // TAN answers under the label the chunk's data went up with, and a late
    // of the run before, answered after this switch began the job's new run,
    // would give the new run's members the old run's sum.
    const uint32_t run = pkt.header->incarnation.host();
    if (run != 0 && run != job->label()) {
      stats_.lcore.agg.results_refused.Add(1);
      tx_.Drop(kOwnFrame, DropReason::kAggResultRefused, pkts[i]);
      continue;
    }
    ResultFromAbove(pkts[i], *job, pkt, 0, kOwnFrame,
                    TanResultSlot(*job, pkt.header->seq.host(), pkt.header->slot_hint.host()));
  }
}

uint32_t TreeStage::TanResultSlot(const aggregator::Job& job, uint32_t seq, uint16_t spare) const {
  // The TAN's answer comes to the worker that owns the spare slot the
  // control thread leased the chunk, or else its placed slot
  // (Dataplane::SendTanResult). The spare slot holds the chunk, waiting
  // for it (at the root, a chunk that went to the TAN lacking members) or
  // aggregating it (members' resends claimed it again after its first data
  // went up), and completes with this result as a placed slot does: left
  // waiting, it would lack every member the result reached, a member it
  // lacks asking after the chunk would be told to send its data again
  // (seed 1655072), and one whose copy was lost, its resend counted there,
  // would be told result_lost (MemberNotices::ResultLost) while the TAN
  // still holds the result.
  if (spare != aggregator::RelocationMap::kNone) {
    const uint32_t at = s_.regions.Spare(spare);
    if (at % s_.n_workers == s_.index) return at / s_.n_workers;
  }
  const uint32_t home = LocalSlot(job, seq);
  if (s_.relocations == nullptr || s_.relocations->empty() ||
      s_.slots->Holding(home, job.id(), job.generation(), seq) != nullptr) {
    return home;
  }
  const uint16_t hint = s_.relocations->Find({job.id(), job.generation(), seq});
  if (hint == aggregator::RelocationMap::kNone) return home;
  const uint32_t at = s_.regions.Spare(hint);
  return at % s_.n_workers == s_.index ? at / s_.n_workers : home;
}

}  // namespace aggswitch::dataplane
