#include "dataplane/aggregation_stage.h"

#include <rte_cycles.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <optional>

#include "aggregator/reduce.h"
#include "dataplane/mac_table.h"

namespace aggswitch::dataplane {
namespace {

// What SlotReleasable needs to know: the jobs, and the members' clock.
struct ReleaseContext {
  const aggregator::JobTable* jobs;
  uint32_t now;         // LcoreClock::SeenNow()
  uint32_t gone_ticks;  // AggregationSetup::rebind_ticks
  // The chunk that wants the slot, at a root without spare slots: it may
  // take a complete slot of another job that holds it back while that job
  // is held back by it (SlotReleasable); else null.
  const aggregator::Job* taker = nullptr;
  uint32_t taker_seq = 0;
  // Where a complete result that gives way to the taker goes first
  // (TreeStage::LeaveResult): the slot the taker wants, in `slots`.
  TreeStage* tree = nullptr;
  const aggregator::SlotTable* slots = nullptr;
  uint32_t local = 0;
};

// Whether `taker`'s chunk `seq` is its job's oldest at this switch: the one
// its current members' watermark waits on. O(members); only on a collision.
bool IsOldest(const aggregator::Job& taker, uint32_t seq, uint32_t now, uint32_t gone_ticks) {
  const std::optional<uint32_t> watermark = taker.SlotWatermark(now, gone_ticks);
  return watermark && *watermark == seq;
}

// A slot whose job registration is gone may give way at once; a complete one
// also once every member acknowledged its result, or at once below the root,
// or at a root to another job's oldest chunk that it and that job hold back
// in turn.
bool SlotReleasable(void* ctx, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                    bool complete) {
  const auto& r = *static_cast<const ReleaseContext*>(ctx);
  const aggregator::Job* job = r.jobs->Find(job_id);
  if (job == nullptr || job->generation() != job_generation) return true;
  if (!complete) {
    // An aggregating chunk every current member has moved past is one its
    // job no longer needs (its members say so; only their own job would
    // suffer from a lie): it must not keep a slot from anybody else. So a
    // job holds aggregating slots only within its quota (Job::SeqAllowed).
    const std::optional<uint32_t> watermark = job->SlotWatermark(r.now, r.gone_ticks);
    return watermark && aggregator::SeqBefore(seq, *watermark);
  }
  // Below the root a complete slot holds a result that came down from
  // above, and the root keeps it until every member below has acknowledged
  // it (their watermarks, relayed; its TAN, a finished chunk's for its
  // give-up time): a member whose copy was lost gets it from there, each
  // switch on the way that has nothing of the chunk asking its parent
  // (TreeStage::AskAbove). Kept here too, it would hold the
  // slot until its job's slowest member moves on, which may wait on a
  // chunk of another job that needs this slot, at this switch or at
  // another: two jobs would hold each other's oldest chunks back.
  if (!job->is_root()) return true;
  // At the root a result stays until every member, gone or not, has it: a
  // member presumed gone may yet retransmit.
  const std::optional<uint32_t> min_ack = job->MinAck();
  if (min_ack && aggregator::SeqBefore(seq, *min_ack) &&
      job->LearnedMembers() == job->members()) {
    return true;
  }
  // Except when two jobs hold each other's oldest chunk back, at a root
  // with no spare slot to lease either of them (the caller sets `taker`
  // only then): the taker's chunk is its job's oldest, and this job's oldest
  // found its home slot held by a result of the taker's job
  // (Job::NoteOldestBlocked). Each job's results past its watermark wait
  // for that watermark, so neither would move before its slots went stale,
  // and after that again, as often as their windows meet in the region.
  // Every member was sent this result, but a member whose copy was lost
  // would find nothing here: the copy is left with the TAN first, which
  // keeps it for its give-up time (seed 1514051), or, for a job without a
  // TAN, kept on this lcore and answered from there (seed 1740234).
  if (r.taker == nullptr || r.taker == job ||
      !IsOldest(*r.taker, r.taker_seq, r.now, r.gone_ticks)) {
    return false;
  }
  const std::optional<uint32_t> oldest = job->SlotWatermark(r.now, r.gone_ticks);
  if (!oldest || !job->OldestBlockedBy(*oldest, r.taker->id())) return false;
  if (const aggregator::Slot* slot = r.slots->Holding(r.local, job_id, job_generation, seq)) {
    r.tree->LeaveResult(*job, *slot);
  }
  return true;
}

using aggregator::SameInAnyOrder;

}  // namespace

AggregationStage::AggregationStage(const AggregationSetup& setup, WorkerChannels& channels,
                                   LcoreStats& stats, TxBuffers& tx, Answers& answers,
                                   TreeStage& tree, const LcoreClock& clock)
    : s_(setup),
      channels_(channels), stats_(stats), tx_(tx), answers_(answers), tree_(tree), clock_(clock),
      slots_(setup.slots, setup.regions, setup.n_workers, setup.index,
             setup.jobs != nullptr ? setup.jobs->max_jobs() : 0),
      store_(setup.store, setup.finals, stats, tx, answers),
      notices_(slots_, setup.jobs, answers, tree, stats, clock, setup.n_workers),
      above_(slots_, notices_, tree, stats, clock, setup.rebind_ticks),
      timers_(slots_, setup.jobs, setup.holds, tree, channels, stats, clock),
      queries_(slots_, notices_, tree, answers, tx, stats, clock),
      bound_(slots_, timers_, above_, tree, answers, tx, stats, clock) {
}

void AggregationStage::Process(uint16_t in_port, const AggVector& v) {
  AggFrame items[kBurstSize];
  uint16_t n = 0;
  for (uint16_t i = 0; i < v.n; ++i) {
    if (Check(v.m[i], in_port, v.meta[i], Source::kRx, &items[n])) ++n;
  }
  if (n != 0) Dispatch(items, n);
}


bool AggregationStage::Check(rte_mbuf* m, uint16_t in_port, const FrameMeta& meta, Source source,
                             AggFrame* out, uint16_t spare, Via via) {
  using aggregator::NackReason;
  using aggregator::Opcode;
  AggregationCounters& c = stats_.lcore.agg;
  const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
  UdpInfo udp;
  aggregator::AggPacket& pkt = out->pkt;
  MalformedReason why = MalformedReason::kBadIpv4Udp;
  if (!ParseAggregationFrame(data, rte_pktmbuf_data_len(m), meta.l3_offset, &udp, &pkt, &why)) {
    stats_.lcore.malformed[static_cast<size_t>(why)].Add(1);
    tx_.Drop(in_port, DropReason::kAggMalformed, m);
    return false;
  }
  const Opcode opcode = pkt.opcode;
  switch (opcode) {
    case Opcode::kContribution:
    case Opcode::kPartial:
    case Opcode::kLate:
    case Opcode::kResult:
    case Opcode::kExceptionRetransmit:
    case Opcode::kAck:
    case Opcode::kTaskInfo:
    case Opcode::kQuery:
    case Opcode::kDistribute:
    case Opcode::kFetch:
      break;
    case Opcode::kNack:
    case Opcode::kNotice:
      // Its parent's (or TAN's) word on a partial this switch sent up,
      // checked below as a result from above.
      if (FromAboveNode::AboutPartialSentUp(opcode, pkt.header->aux.host())) break;
      [[fallthrough]];
    default:
      c.unsupported.Add(1);
      tx_.Drop(in_port, DropReason::kAggUnsupported, m);
      return false;
  }
  const aggregator::AggHeader& h = *pkt.header;
  const auto header_offset =
      static_cast<uint32_t>(reinterpret_cast<const uint8_t*>(pkt.header) - data);
  // Where answers go. A hand-off was checked where it arrived; its answers
  // (slot outcomes only) use the member's bound address instead. A datagram
  // made for the sender (a NOTICE) carries the sender's incarnation back, or
  // the sender would take it for another run's.
  const aggregator::MemberAddr sender{Mac48(data + 6), static_cast<uint8_t>(in_port), meta.vlan,
                                      udp.src_ip, udp.src_port, h.incarnation.host()};
  // A result or an exception from above: the parent switch's, or the TAN's;
  // or its refusal for now of a partial, or its notice that it lacks one.
  const bool from_above = opcode == Opcode::kResult || opcode == Opcode::kExceptionRetransmit ||
                          opcode == Opcode::kNack || opcode == Opcode::kNotice;
  const aggregator::Job* job = s_.jobs->Find(h.job_id.host());
  if (job == nullptr) {
    if (opcode == Opcode::kLate || from_above) {
      c.unknown_jobs.Add(1);  // from a switch or a TAN: nobody to tell
      tx_.Drop(in_port, DropReason::kAggUnknownJob, m);
      return false;
    }
    HandleUnknownJob(m, pkt, sender, in_port, meta, source);
    return false;
  }
  // On to the slot: `*out` filled.
  const auto take = [&](uint32_t slot, Where where, bool claim, int member, bool main_server) {
    out->m = m;
    out->job = job;
    out->header_offset = header_offset;
    out->slot = slot;
    out->where = where;
    out->claim = claim;
    out->member = member;
    out->main_server = main_server;
    out->meta = meta;
    out->in_port = in_port;
    return true;
  };
  const bool from_member = opcode != Opcode::kLate && !from_above;
  // Data for the parameter node: it never takes a slot (docs/parameter-node.md).
  const bool at_ps =
      opcode == Opcode::kContribution && (h.flags.host() & aggregator::flags::kAggregateAtPs) != 0;
  const int member = from_member ? job->LocalIndex(h.node_id.host()) : -1;
  // The job's main server FETCHes kept contributions and ACKs final results
  // (an ACK flagged FINAL: a member's ACKs never are).
  const bool main_server =
      (opcode == Opcode::kFetch ||
       (opcode == Opcode::kAck && (h.flags.host() & aggregator::flags::kFinal) != 0)) &&
      job->FromMainServer(udp.src_ip, udp.src_port);
  JobCounters& jc = s_.job_counters[job->index()];
  if (source != Source::kHandoff) {
    if (from_above) {
      // Only the chunk's parent switch (the one its addr_low picked), or at
      // the root the job's TAN, sends results here: from the address, MAC and
      // port its hop was resolved to. Results carry no key
      // (Answers::ChunkFields); where they come from is what counts, as for
      // a member's binding (any member of the uplink group the hop was
      // learned on: the path down may differ from the path up).
      aggregator::MemberAddr hop;
      const bool from_hop =
          job->GetHop(job->is_root() ? aggregator::Job::kTanHop
                                     : job->ParentHop(h.addr_low.host()),
                      &hop) &&
          udp.src_ip == hop.ip && udp.src_port == hop.udp_port && sender.mac48 == hop.mac48 &&
          answers_.plan().groups().LearnPort(in_port) ==
              answers_.plan().groups().LearnPort(hop.port_index);
      // And for this run: what comes down carries the label this switch
      // sent up (0 before it had one), never an ended run's.
      const uint32_t run = h.incarnation.host();
      if (!from_hop || (run != 0 && run != job->label())) {
        c.results_refused.Add(1);
        tx_.Drop(in_port, DropReason::kAggResultRefused, m);
        return false;
      }
    } else if (job->key() != h.job_key.host()) {
      c.key_failures.Add(1);
      jc.key_failures.Add(1);
      answers_.Nack(m, h, NackReason::kKeyMismatch, sender);
      return false;
    }
    if (opcode == Opcode::kDistribute) {
      bound_.Distribute(m, *job, pkt, header_offset, sender, in_port);
      return false;
    }
    if (main_server && !bound_.MainServerBound(*job, sender)) {
      answers_.Nack(m, h, NackReason::kNotMainServer, sender);
      return false;
    }
    if ((opcode == Opcode::kLate || (at_ps && member < 0)) &&
        job->EndedAnywhere(h.incarnation.host())) {
      // Sent on by a child switch under the label of a run that has ended here.
      c.run_ended.Add(1);
      tx_.Drop(in_port, DropReason::kAggRunEnded, m);
      return false;
    }
    if (opcode == Opcode::kLate) {
      // Late data from below: forwarded unreduced (docs/stragglers.md). It
      // carries the run label of the child switch that sent it: a new one
      // is that child's new run, taken up here as from its partial, and the
      // late goes on only in the run it belongs to (its member's resend
      // brings it again); else the TAN would take it for the old run's.
      const bool run_id = (h.flags.host() & aggregator::flags::kRunId) != 0;
      bool new_run = false;
      if (!from_above && h.incarnation.host() != 0 &&
          !BindLateSender(*job, udp, sender, h.incarnation.host(), run_id, h.node_id.host(),
                          &new_run)) {
        // At the root, a late under a run id that starts a new run here goes
        // on to the TAN under that id: it is the label the root's first data
        // of the new run carries (a run id is the same at every switch), and
        // the TAN holds it until that first data comes. Dropped, it would
        // not come again: the child switch forwarded it once, and the
        // member's resend may be reduced into the child's slot anew (its
        // forwarded slot gone by then), whose partial the parent takes for a
        // repeat of the first.
        if (new_run && run_id && job->is_root() &&
            job->tan() != aggregator::JobSpec::Tan::kNone) {
          tree_.ForwardLate(m, *job, header_offset, in_port, h.incarnation.host());
          return false;
        }
        tx_.Drop(in_port, DropReason::kAggRejected, m);
        return false;
      }
      // A rank's data from a child switch goes on from the owner of its
      // chunk's home slot, which may hold it already (TreeBoundNode::Late);
      // handed here, it is not handed on again should the placement have
      // changed meanwhile.
      if (job->CoveringChild(h.node_id.host()) >= 0) {
        const uint32_t home = s_.regions.Of(job->in_band(), job->placement(), h.seq.host());
        if (source != Source::kHandoff || slots_.Owns(home)) {
          return take(home, Where::kHome, false, -1, false);
        }
      }
      tree_.ForwardLate(m, *job, header_offset, in_port);
      return false;
    }
    if (at_ps && member < 0 && job->has_child_switches()) {
      // A member's data for the parameter node, from a child switch: on
      // towards it unreduced (docs/parameter-node.md).
      tree_.ForwardToPs(m, *job, header_offset, in_port, 0);
      return false;
    }
    if (!from_above && !main_server) {
      const bool task_info =
          opcode == Opcode::kTaskInfo || (h.flags.host() & aggregator::flags::kTaskInfo);
      if (member < 0) {
        // With task info: a rank outside this switch's block of a job of
        // several nodes (InBandJobConfig), so the ranks disagree on where
        // they are.
        (task_info ? c.task_info_conflicts : c.rejected).Add(1);
        answers_.Nack(m, h, task_info ? NackReason::kTaskInfoConflict : NackReason::kMalformed,
                      sender);
        return false;
      }
      if (task_info &&
          (h.expected.host() != job->members() || h.node_count.host() != job->nodes())) {
        c.task_info_conflicts.Add(1);
        answers_.Nack(m, h, NackReason::kTaskInfoConflict, sender);
        return false;
      }
      // The receiving lcore binds the member to where it sends from (or
      // checks it against its binding), then records how far it got.
      const auto index = static_cast<uint16_t>(member);
      switch (job->BindMember(index, sender, h.incarnation.host(), clock_.SeenNow(),
                              s_.rebind_ticks,
                              (h.flags.host() & aggregator::flags::kRunId) != 0)) {
        case aggregator::Job::Bind::kKnown:
        case aggregator::Job::Bind::kBound:
          break;
        case aggregator::Job::Bind::kRebound:
          c.member_rebinds.Add(1);
          break;
        case aggregator::Job::Bind::kRefused:
          c.member_refused.Add(1);
          jc.member_refused.Add(1);
          answers_.Nack(m, h, NackReason::kMemberBound, sender);
          return false;
        case aggregator::Job::Bind::kNewRun:
          // The control thread makes the job a new generation for the new
          // run; the member's resend finds it.
          job->RequestNewRun(index, h.incarnation.host());
          c.new_run.Add(1);
          answers_.Nack(m, h, NackReason::kNewRun, sender);
          return false;
        case aggregator::Job::Bind::kRunEnded:
          c.run_ended.Add(1);
          answers_.Nack(m, h, NackReason::kRunEnded, sender);
          return false;
      }
      (void)job->UpdateAck(index, h.ack_watermark.host());
      if (opcode == Opcode::kAck) {
        c.acks.Add(1);
        if (!job->is_root()) {
          tree_.RelayAck(m, *job, header_offset, in_port);
        } else {
          TxBuffers::Consumed(m);  // its watermark is recorded
        }
        return false;
      }
      if (opcode == Opcode::kTaskInfo) {
        // Accepted (registered now, or known already): echoed so that the
        // control unit can stop retransmitting it.
        c.task_infos.Add(1);
        answers_.Answer(m, h, Opcode::kTaskInfo, NackReason{0}, sender);
        return false;
      }
      if (at_ps && job->is_root() && job->tan() != aggregator::JobSpec::Tan::kRemote) {
        c.no_parameter_node.Add(1);
        answers_.Nack(m, h, NackReason::kNoParameterNode, sender);
        return false;
      }
      // A predicted straggler's data is never reduced here: it goes to the
      // TAN, and the member is told to flag it (or to stop flagging it). A
      // QUERY carries no data: it is answered where its chunk's slot is.
      // Data for the parameter node goes there whoever sends it.
      const bool flagged = (h.flags.host() & aggregator::flags::kBypass) != 0;
      const bool excluded = job->Excluded(index);
      // A FETCH, and a contribution to a job that only stores, take no slot.
      const bool slotless = opcode == Opcode::kFetch || !job->aggregates();
      if (opcode != Opcode::kQuery && !at_ps && !slotless && flagged != excluded) {
        answers_.SendNotice(*job, h.node_id.host(), h.seq.host(),
                            excluded ? aggregator::NoticeKind::kSelfFlag
                                     : aggregator::NoticeKind::kStopFlag,
                            sender);
      }
      // Flagged by a member this switch no longer excludes (the prediction
      // changed since it was told): the slot waits for it, and counts it.
      if (opcode != Opcode::kQuery && !at_ps && !slotless && excluded) {
        c.late_self_flagged.Add(1);
        tree_.ForwardLate(m, *job, header_offset, in_port);
        return false;
      }
      // A chunk too far ahead of the job's slowest member would take more
      // slots than the job may hold: refused until the watermark moves. The
      // members the chunk at the sender's own watermark lacks are prompted,
      // as on a refusal slot_busy: the refused chunks wait for them.
      if (opcode != Opcode::kQuery && !at_ps && !slotless &&
          !job->SeqAllowed(h.seq.host(), clock_.SeenNow(), s_.rebind_ticks)) {
        c.slot_quota_refused.Add(1);
        jc.quota_refused.Add(1);
        notices_.NoticeQuotaHolder(*job, h.ack_watermark.host());
        answers_.Nack(m, h, NackReason::kSlotQuota, sender);
        return false;
      }
    }
  }
  // Where the chunk is: its home slot; the spare slot or the moved
  // partition the switch sent it on to (a hand-off); or where the member's
  // slot hint says.
  const uint32_t seq = h.seq.host();
  uint32_t slot = s_.regions.Of(job->in_band(), job->placement(), seq);
  Where where = Where::kHome;
  bool claim = false;
  const uint16_t hint = h.slot_hint.host();
  if (via == Via::kSwitch) {
    claim = true;
    if (spare != aggregator::RelocationMap::kNone) {
      slot = s_.regions.Spare(spare);
      where = Where::kSpare;
    } else if (job->move()) {
      slot = slots_.Moved(*job, seq);
      where = Where::kMoved;
    } else {
      // Sent to a moved partition the job no longer has: it was removed and
      // added again in between.
      c.unknown_jobs.Add(1);
      tx_.Drop(in_port, DropReason::kAggUnknownJob, m);
      return false;
    }
  } else if (main_server && opcode == Opcode::kAck) {
    // The ACK of a final result echoes the slot that completed it (`aux`),
    // whose owner keeps the delivery.
    const uint32_t completed = h.aux.host();
    if (completed >= s_.regions.total()) {
      c.rejected.Add(1);
      tx_.Drop(in_port, DropReason::kAggRejected, m);
      return false;
    }
    slot = completed;
  } else if (via == Via::kPlacement &&
             (opcode == Opcode::kQuery || (opcode == Opcode::kContribution && !job->stores()))) {
    // A contribution to a job that stores goes to its home slot's owner,
    // which keeps it (and sends it on where the chunk went).
    if (hint < s_.regions.spare.size) {
      slot = s_.regions.Spare(hint);
      where = Where::kSpare;
    } else if (hint == aggregator::kMovedSlotHint && job->MovedFrom(seq)) {
      slot = slots_.Moved(*job, seq);
      where = Where::kMoved;
    }
  }
  if (source == Source::kHandoff) {
    // Checked where it arrived; only the job may have changed meanwhile.
    if (from_member && member < 0 && !main_server) {
      c.rejected.Add(1);
      tx_.Drop(in_port, DropReason::kAggRejected, m);
      return false;
    }
    if (!slots_.Owns(slot)) {  // placed elsewhere since: never handed on twice
      c.unknown_jobs.Add(1);
      tx_.Drop(in_port, DropReason::kAggUnknownJob, m);
      return false;
    }
  }
  return take(slot, where, claim, member, main_server);
}

void AggregationStage::HandleUnknownJob(rte_mbuf* m, const aggregator::AggPacket& pkt,
                                        const aggregator::MemberAddr& sender, uint16_t in_port,
                                        const FrameMeta& meta, Source source) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  if (source == Source::kHandoff) {
    // Removed between the two lcores; the sender retransmits and is told then.
    c.unknown_jobs.Add(1);
    tx_.Drop(in_port, DropReason::kAggUnknownJob, m);
    return;
  }
  if (pkt.opcode == aggregator::Opcode::kQuery) {
    // Nothing of the job here: the member's contribution (which would have
    // registered an in-band job) is missing. Its resend says the rest.
    c.queries.Add(1);
    answers_.NoticeInPlace(m, h, aggregator::NoticeKind::kMissing, 0, sender,
                           Answers::To::kUnverified);
    return;
  }
  const bool task_info = pkt.opcode == aggregator::Opcode::kTaskInfo ||
                         (h.flags.host() & aggregator::flags::kTaskInfo);
  // A reinjected datagram whose job is gone again is not sent up a second
  // time: one trip per datagram keeps the path bounded.
  if (task_info && channels_.upcall != nullptr && source == Source::kRx) {
    FrameRef up{m, in_port, meta.vlan, meta.l3_offset, Via::kPlacement, 0};
    if (rte_ring_sp_enqueue_elem(channels_.upcall.get(), &up, sizeof(up)) == 0) {
      c.registration_upcalls.Add(1);
    } else {
      // More registrations than the control thread takes: "not now", like
      // a registration over its rate.
      c.registration_ring_full.Add(1);
      answers_.Nack(m, h, aggregator::NackReason::kRateLimited, sender);
    }
    return;
  }
  c.unknown_jobs.Add(1);
  answers_.Nack(m, h, aggregator::NackReason::kUnknownJob, sender);
}

bool AggregationStage::BindLateSender(const aggregator::Job& job, const UdpInfo& udp,
                                      const aggregator::MemberAddr& sender, uint32_t label, bool run_id,
                                      uint16_t node, bool* new_run) {
  AggregationCounters& c = stats_.lcore.agg;
  if (new_run != nullptr) *new_run = false;
  // The member bound to where it came from (bounded by the job's members);
  // else the one child switch below which `node` is, not bound yet.
  int from = -1;
  int below = -1;
  for (uint16_t i = 0; i < job.members() && from < 0; ++i) {
    aggregator::MemberAddr bound;
    if (job.GetMember(i, &bound)) {
      if (bound.ip == udp.src_ip && bound.udp_port == udp.src_port) from = i;
      continue;
    }
    if (!job.IsSwitch(i)) continue;
    const std::span<const uint16_t> covers = job.Covers(i);
    if (job.NodeId(i) == node || std::find(covers.begin(), covers.end(), node) != covers.end()) {
      below = below < 0 ? i : job.members();  // two children name it: neither
    }
  }
  if (from < 0 && below >= 0 && below < job.members()) from = below;
  if (from >= 0) {
    const auto i = static_cast<uint16_t>(from);
    switch (job.BindMember(i, sender, label, clock_.SeenNow(), s_.rebind_ticks, run_id)) {
      case aggregator::Job::Bind::kKnown:
      case aggregator::Job::Bind::kBound:
      case aggregator::Job::Bind::kRebound:
        return true;
      case aggregator::Job::Bind::kRefused:
        c.member_refused.Add(1);
        return false;
      case aggregator::Job::Bind::kNewRun:
        job.RequestNewRun(i, label);
        c.new_run.Add(1);
        if (new_run != nullptr) *new_run = true;
        return false;
      case aggregator::Job::Bind::kRunEnded:
        c.run_ended.Add(1);
        return false;
    }
  }
  return true;  // from no member bound yet: the TAN's run rule holds
}

void AggregationStage::Dispatch(AggFrame* items, uint16_t n) {
  if (s_.n_workers == 1) {
    Reduce(items, n);
    return;
  }
  AggregationCounters& c = stats_.lcore.agg;
  // This worker's own move to the front; the others wait for their owners.
  FrameRef away[kBurstSize];
  uint16_t owner[kBurstSize];
  uint16_t n_away = 0, n_own = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const auto o = static_cast<uint16_t>(items[i].slot % s_.n_workers);
    if (o == s_.index) {
      items[n_own++] = items[i];
      continue;
    }
    away[n_away] = HandOff(items[i]);
    owner[n_away++] = o;
  }
  // One enqueue per owner.
  bool sent[kBurstSize] = {};
  for (uint16_t i = 0; i < n_away; ++i) {
    if (sent[i]) continue;
    FrameRef batch[kBurstSize];
    uint16_t nb = 0;
    for (uint16_t j = i; j < n_away; ++j) {
      if (sent[j] || owner[j] != owner[i]) continue;
      sent[j] = true;
      batch[nb++] = away[j];
    }
    const unsigned queued = rte_ring_mp_enqueue_burst_elem(s_.handoff[owner[i]], batch,
                                                           sizeof(FrameRef), nb, nullptr);
    c.handoffs.Add(queued);
    if (queued == nb) continue;
    c.handoff_full.Add(nb - queued);
    for (uint16_t k = static_cast<uint16_t>(queued); k < nb; ++k) {
      tx_.Drop(batch[k].in_port, DropReason::kAggHandoffFull, batch[k].m);
    }
  }
  if (n_own != 0) Reduce(items, n_own);
}

// Starts fetching every line of a datagram's payload.
static inline void PrefetchPayload(const aggregator::AggPacket& pkt) {
  const uint8_t* p = pkt.payload;
  for (uint32_t off = 0; off < pkt.payload_len; off += RTE_CACHE_LINE_SIZE) rte_prefetch0(p + off);
}

void AggregationStage::Reduce(AggFrame* items, uint16_t n) {
  // Every slot of the vector is looked up, and what a contribution touches
  // in it fetched, before the first reduce; each payload is fetched while
  // the one before it is reduced. agg_path_bench: 275 -> 230 cycles per
  // 256-element contribution at 8 members.
  for (uint16_t i = 0; i < n; ++i) {
    if (i == 0 || items[i].slot != items[i - 1].slot) {
      s_.slots->Prefetch(slots_.Local(items[i].slot), items[i].pkt.payload_len);
    }
  }
  if (n > 0) PrefetchPayload(items[0].pkt);
  for (uint16_t i = 0; i < n; ++i) {
    const AggFrame& it = items[i];
    if (i + 1 < n) PrefetchPayload(items[i + 1].pkt);
    AtSlot(it);
  }
}

void AggregationStage::AtSlot(const AggFrame& it) {
  const aggregator::Opcode opcode = it.pkt.opcode;
  if (opcode == aggregator::Opcode::kLate) {  // a rank's, from a child switch
    bound_.Late(it);
    return;
  }
  if (opcode == aggregator::Opcode::kFetch) {
    store_.Fetch(it);
    return;
  }
  if (it.main_server) {  // an ACK of a final result
    store_.FinalAck(it);
    return;
  }
  if (opcode == aggregator::Opcode::kContribution && it.job->stores() && it.where == Where::kHome &&
      it.member >= 0 && !IsForPs(it.pkt) && !store_.Keep(it)) {
    return;
  }
  if (opcode == aggregator::Opcode::kNack &&
      it.pkt.header->aux.host() == static_cast<uint32_t>(aggregator::NackReason::kRunEnded)) {
    above_.RunEnded(it);  // about the job's run, not a slot's chunk
  } else if (opcode == aggregator::Opcode::kNack) {
    if (!RedirectResult(it)) above_.Refused(it);
  } else if (opcode == aggregator::Opcode::kNotice) {
    if (!RedirectResult(it)) above_.Missing(it);
  } else if (opcode != aggregator::Opcode::kResult &&
             opcode != aggregator::Opcode::kExceptionRetransmit) {
    Contribute(it);
  } else if (!RedirectResult(it)) {
    tree_.ResultFromAbove(it.m, *it.job, it.pkt, it.header_offset, it.in_port, slots_.Local(it.slot));
  }
}

void AggregationStage::Contribute(const AggFrame& it) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::Job& job = *it.job;
  const aggregator::AggPacket& pkt = it.pkt;
  const aggregator::AggHeader& h = *pkt.header;
  rte_mbuf* m = it.m;
  const uint32_t seq = h.seq.host();
  const bool at_ps = IsForPs(pkt);
  // At the root, data for the parameter node whose chunk no slot here holds
  // goes there as its member sent it (TreeBoundNode::ToParameterNode), entry or not: the
  // parameter node hands it to the TAN when the chunk's first data came, and
  // else reduces it with the other members' resends. As late data it would
  // wait for first data nobody sends again (the partial was lost, and its
  // forwarded slot went to another chunk), while the members the partial
  // counted send theirs there directly: neither completes.
  const bool direct_to_ps =
      at_ps && job.is_root() &&
      s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(), seq) == nullptr;
  // Late data that a timeout left a bypass entry for: flagged and on to the
  // TAN. Unless the chunk's result came down meanwhile: the usual path
  // answers the member with it (the entry stays for its TTL). Before any
  // spare slot the chunk was given: a chunk that went up as missing here
  // while its first contributions waited for the control thread's answer
  // goes that way whole (in a spare slot they would be counted twice: there
  // and as late data).
  if (pkt.opcode != aggregator::Opcode::kQuery && tree_.bypass_live() && !direct_to_ps &&
      !CompleteHere(it, seq) &&
      tree_.MatchBypass(job, seq, it.member, h.node_id.host())) {
    above_.UpAsMissingIfLacked(it);
    c.late_flagged.Add(1);
    tree_.ForwardLate(m, job, it.header_offset, it.in_port);
    return;
  }
  if (Redirect(it)) return;
  if (pkt.opcode == aggregator::Opcode::kQuery) {
    notices_.NoticeGap(job, seq, h.ack_watermark.host(), /*first=*/false,
              static_cast<uint16_t>(it.member));
    queries_.Answer(it);
    return;
  }
  if (queries_.AnsweredFromKept(it)) return;
  if (at_ps && bound_.ToParameterNode(it)) return;
  if (pkt.opcode == aggregator::Opcode::kContribution && !at_ps) {
    notices_.NoticeGap(job, seq, h.ack_watermark.host(),
              (h.flags.host() & aggregator::flags::kRetransmission) == 0,
              static_cast<uint16_t>(it.member));
  }
  // A resend of data a partial that went up from here counted, with no
  // slot holding the chunk: the parent is asked, as for the member's
  // question (QueryNode::Answer).
  if (!at_ps && pkt.opcode == aggregator::Opcode::kContribution && tree_.bypass_live() &&
      tree_.CountedUp(job, seq, it.member, h.node_id.host()) &&
      s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(), seq) == nullptr) {
    aggregator::MemberAddr addr;
    if (job.GetMember(static_cast<uint16_t>(it.member), &addr)) {
      queries_.HeldWithoutSlot(it, addr);
      return;
    }
  }
  // A chunk that went up as missing from here, whose bypass entries are
  // gone: its member's data goes up as missing again (a repeat the parent
  // takes as such) and on as late data, as while its slot was taken, rather
  // than claim the slot now free (WentUpAsMissing).
  if (!at_ps && it.member >= 0 && job.GoesOnWithoutSlot(pkt.opcode) &&
      job.WhenNoSlot() == aggregator::Job::NoSlot::kUpAsMissing && above_.WentUpAsMissing(job, seq) &&
      s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(), seq) == nullptr &&
      above_.UpAsMissing(it)) {
    return;
  }
  aggregator::Contribution contribution;
  contribution.job_id = job.id();
  contribution.job_generation = job.generation();
  contribution.seq = seq;
  contribution.node = static_cast<uint16_t>(it.member);
  contribution.expected = job.members();
  contribution.needed = static_cast<uint16_t>(job.members() - job.excluded_count());
  contribution.ordered = (h.flags.host() & aggregator::flags::kOrdered) != 0;
  contribution.hold = job.batch();
  contribution.final = (h.flags.host() & aggregator::flags::kFinal) != 0;
  contribution.overflow = (h.flags.host() & aggregator::flags::kOverflow) != 0;
  contribution.recovered =
      (h.flags.host() & (aggregator::flags::kRetransmission | aggregator::flags::kRecovered)) != 0;
  contribution.dtype = pkt.dtype;
  contribution.op = pkt.op;
  contribution.scale = h.scale;
  contribution.elem_count = h.elem_count.host();
  contribution.elem_offset = h.aux.host();
  contribution.addr_low = h.addr_low.host();
  contribution.payload = pkt.payload;
  contribution.timeout_cycles = job.timeout_cycles();
  if (pkt.opcode == aggregator::Opcode::kPartial) {
    c.partials_received.Add(1);
    contribution.missing = pkt.missing;
    contribution.missing_count = h.missing_count;
    contribution.holds_nobody = (h.flags.host() & aggregator::flags::kConflict) != 0;
  }
  JobCounters& jc = s_.job_counters[job.index()];
  const uint32_t local = slots_.Local(it.slot);
  // The root keeps a copy of a FINAL chunk's result until the main server
  // ACKs it. A contribution that would complete one while no copy can be
  // kept waits ("not now"), rather than complete a result nobody delivers.
  if (contribution.final && job.is_root() && job.main_server_ip() != 0 &&
      !job.parameter_server() && !job.verify() && s_.finals != nullptr &&
      !s_.finals->HasRoom(job) &&
      (contribution.needed <= 1 || s_.slots->CompletesWith(local, contribution))) {
    c.final_deferred.Add(1);
    s_.finals->TellRefused(job, seq);
    answers_.NackMember(it, aggregator::NackReason::kStoreFull, DropReason::kAggRejected);
    return;
  }
  // An ordered slot keeps its contributions until all are in: a copy in a
  // hold buffer, never the mbuf, which RX needs back (hold_buffers.h). The
  // one that completes the slot is reduced at once, from the mbuf.
  contribution.handle = nullptr;
  void* held = nullptr;
  if ((contribution.hold || contribution.ordered) && !s_.slots->CompletesWith(local, contribution)) {
    HoldBuffers::Refusal why = HoldBuffers::Refusal::kNone;
    if (job.HoldAllowed(seq, clock_.SeenNow(), s_.rebind_ticks)) {
      held = s_.holds->Take(job, pkt.payload, pkt.payload_len, &why);
    }
    if (held == nullptr) {
      c.hold_refused.Add(1);
      jc.quota_refused.Add(1);
      answers_.NackMember(it, aggregator::NackReason::kHoldQuota, DropReason::kAggRejected);
      return;
    }
    contribution.payload = HoldBuffers::Data(held);
    contribution.handle = held;
  }
  ReleaseContext release{s_.jobs, clock_.SeenNow(), s_.rebind_ticks};
  if (job.is_root() && s_.regions.spare.size == 0) {
    release.taker = &job;
    release.taker_seq = seq;
    release.tree = &tree_;
    release.slots = s_.slots;
    release.local = local;
  }
  const aggregator::SlotUpdate u =
      s_.slots->Contribute(local, contribution, clock_.tsc, SlotReleasable, &release);
  if (u.stale) c.stale_slots.Add(1);
  if (release.taker != nullptr) {
    // What SlotReleasable asks of the other job: whether this job's oldest
    // chunk waits on one of its results.
    if (u.outcome == aggregator::SlotOutcome::kCollision) {
      if (u.slot->state() == aggregator::Slot::State::kComplete &&
          IsOldest(job, seq, release.now, release.gone_ticks)) {
        job.NoteOldestBlocked(seq, u.slot->job_id());
      }
    } else {
      job.ClearOldestBlocked(seq);
    }
  }
  for (uint16_t i = 0; i < u.n_evicted; ++i) s_.holds->Give(u.evicted[i]);
  // Held now, or handed back among `released` at completion; else unused.
  if (held != nullptr && u.outcome != aggregator::SlotOutcome::kHeld &&
      u.outcome != aggregator::SlotOutcome::kCompleted) {
    s_.holds->Give(held);
  }
  aggregator::NackReason refused{0};
  if ((u.outcome == aggregator::SlotOutcome::kHeld ||
       u.outcome == aggregator::SlotOutcome::kAccumulated) &&
      s_.regions.IsSpare(it.slot)) {
    // The member learns where its chunk went: its later datagrams about it
    // come here straight, not by way of the control thread or the map.
    const auto moved_to = static_cast<uint16_t>(it.slot - s_.regions.spare.first);
    aggregator::MemberAddr addr;
    if (h.slot_hint.host() != moved_to && job.GetMember(contribution.node, &addr)) {
      answers_.SendNotice(job, h.node_id.host(), seq, aggregator::NoticeKind::kRelocated, addr,
                          moved_to);
    }
  }
  switch (u.outcome) {
    case aggregator::SlotOutcome::kHeld:
    case aggregator::SlotOutcome::kAccumulated:
      c.contributions.Add(1);
      c.reduced_bytes.Add(pkt.payload_len);
      jc.contributions.Add(1);
      jc.reduced_bytes.Add(pkt.payload_len);
      TxBuffers::Consumed(m);
      return;
    case aggregator::SlotOutcome::kCompleted:
      c.contributions.Add(1);
      c.reduced_bytes.Add(pkt.payload_len);
      c.completions.Add(1);
      if (u.slot->overflow()) c.saturated_sums.Add(1);
      jc.contributions.Add(1);
      jc.reduced_bytes.Add(pkt.payload_len);
      jc.completions.Add(1);
      timers_.SampleOffsets(job, *u.slot, false);
      {
        // The slot is done with this contribution: it carries the result.
        const bool carried = tree_.FinishSlot(job, local, *u.slot, false, m, it.header_offset);
        timers_.RecordCompletion(*u.slot);
        // An ordered slot returns every held contribution, this one included.
        for (uint16_t i = 0; i < u.n_released; ++i) s_.holds->Give(u.released[i]);
        if (!carried) TxBuffers::Consumed(m);
      }
      return;
    case aggregator::SlotOutcome::kDuplicateCompleted:
      c.duplicate_results.Add(1);
      jc.duplicates.Add(1);
      if (!answers_.SendResult(job, *u.slot, contribution.node, m, it.header_offset)) {
        TxBuffers::Consumed(m);  // answered from a fresh mbuf, or counted as result_no_mbuf
      }
      return;
    case aggregator::SlotOutcome::kForwardedAgain:
      if (ForwardedAsLate(it, *u.slot, /*resend=*/true)) return;
      // A member that was counted retransmits: the partial (or first data)
      // may have been lost on the way up. The parent answers a repeat with
      // its cached result.
      c.partials_resent.Add(1);
      jc.duplicates.Add(1);
      notices_.AskBelowIfForgotten(job, *u.slot, pkt.opcode);
      if (!tree_.FinishSlot(job, local, *u.slot, false, m, it.header_offset)) {
        TxBuffers::Consumed(m);
      }
      return;
    case aggregator::SlotOutcome::kLateForwarded:
      if (u.slot->state() == aggregator::Slot::State::kComplete) {
        // The final result came down while this member's data went around
        // the slot (as late data, or to the parameter node): it needs the
        // result, not another trip for its data.
        c.duplicate_results.Add(1);
        jc.duplicates.Add(1);
        if (!answers_.SendResult(job, *u.slot, contribution.node, m, it.header_offset)) {
          TxBuffers::Consumed(m);
        }
        return;
      }
      c.late_no_entry.Add(1);
      tree_.ForwardLate(m, job, it.header_offset, it.in_port);
      return;
    case aggregator::SlotOutcome::kDuplicate:
      if (ForwardedAsLate(it, *u.slot, /*resend=*/false)) return;
      c.duplicates.Add(1);
      jc.duplicates.Add(1);
      tx_.Drop(it.in_port, DropReason::kAggDuplicate, m);
      return;
    case aggregator::SlotOutcome::kWaiting: {
      if (ForwardedAsLate(it, *u.slot, /*resend=*/false)) return;
      // The member resent a chunk this slot has counted: its data arrived,
      // and the result waits for the others. Telling it so stops it resending
      // on a timer that cannot help.
      c.duplicates.Add(1);
      jc.duplicates.Add(1);
      if (pkt.opcode == aggregator::Opcode::kPartial) notices_.AskAboveIfDone(job, *u.slot, h);
      notices_.AskBelowIfForgotten(job, *u.slot, pkt.opcode);
      aggregator::MemberAddr addr;
      if (job.GetMember(contribution.node, &addr)) {
        answers_.NoticeInPlace(m, h, aggregator::NoticeKind::kHeld,
                               u.slot->needed() - u.slot->count(), addr, Answers::To::kBoundMember);
      } else {
        tx_.Drop(it.in_port, DropReason::kAggDuplicate, m);
      }
      notices_.NoticeAbsentAt(local, c.asked_notices);
      return;
    }
    case aggregator::SlotOutcome::kCollision:
      c.collisions.Add(1);
      jc.collisions.Add(1);
      if (s_.regions.IsSpare(it.slot)) {
        // The spare slot leased to this chunk still holds the chunk it was
        // leased to before: no second move.
        RefuseSlotBusy(it);
      } else {
        Escalate(it);
      }
      return;
    case aggregator::SlotOutcome::kMismatch:
      c.rejected.Add(1);
      refused = aggregator::NackReason::kTypeMismatch;
      break;
    case aggregator::SlotOutcome::kAddrLowMismatch:
      c.addr_low_mismatches.Add(1);
      refused = aggregator::NackReason::kAddrLowMismatch;
      break;
    case aggregator::SlotOutcome::kBadMember:
    case aggregator::SlotOutcome::kTooLarge:
      c.rejected.Add(1);
      refused = aggregator::NackReason::kMalformed;
      break;
  }
  answers_.NackMember(it, refused, DropReason::kAggRejected);
}

bool AggregationStage::Redirect(const AggFrame& it) {
  const aggregator::Job& job = *it.job;
  if (it.where == Where::kHome && NothingSentOn(job)) {
    return false;  // a switch without collisions stops here
  }
  const aggregator::AggHeader& h = *it.pkt.header;
  const uint32_t seq = h.seq.host();
  if (s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(), seq) != nullptr) {
    return false;
  }
  AggregationCounters& c = stats_.lcore.agg;
  if (it.where == Where::kSpare) {
    if (it.claim) return false;  // sent here by the switch: it may take the slot
    if (IsForPs(it.pkt)) return false;  // it takes no slot: on to the parameter node
    // A hint from an earlier run of the switch, or made up: the member sends
    // to the chunk's home slot again.
    c.hint_refused.Add(1);
    aggregator::MemberAddr addr;
    if (it.member >= 0 && job.GetMember(static_cast<uint16_t>(it.member), &addr)) {
      answers_.SendNotice(job, h.node_id.host(), seq, aggregator::NoticeKind::kRelocated, addr,
                          aggregator::kNoSlotHint);
    }
    tx_.Drop(it.in_port, DropReason::kAggHintRefused, it.m);
    return true;
  }
  if (SentOn(it, seq)) return true;
  if (it.where == Where::kMoved && !it.claim) {
    // The member's hint: its chunk is not here (yet, or at all). The home
    // slot's owner decides where it is.
    c.move_bounced.Add(1);
    SendOn(it, s_.regions.Of(job.in_band(), job.placement(), seq), Where::kHome, false);
    return true;
  }
  return false;  // sent here by the switch, or home: it may take the slot
}

bool AggregationStage::RedirectResult(const AggFrame& it) {
  if (it.where != Where::kHome || NothingSentOn(*it.job)) return false;  // kept here
  const aggregator::Job& job = *it.job;
  const uint32_t seq = it.pkt.header->seq.host();
  if (s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(), seq) != nullptr) {
    return false;
  }
  return SentOn(it, seq);
}

bool AggregationStage::SentOn(const AggFrame& it, uint32_t seq) {
  const aggregator::Job& job = *it.job;
  AggregationCounters& c = stats_.lcore.agg;
  // A chunk that collided here (at its home slot, or in the moved
  // partition) went on to a spare slot.
  const uint16_t hint = s_.relocations == nullptr || s_.relocations->empty()
                            ? aggregator::RelocationMap::kNone
                            : s_.relocations->Find({job.id(), job.generation(), seq});
  if (hint != aggregator::RelocationMap::kNone) {
    c.relocated.Add(1);
    SendOn(it, s_.regions.Spare(hint), Where::kSpare, true);
    return true;
  }
  if (it.where == Where::kHome && slots_.MoveApplied(job) && job.MovedFrom(seq)) {
    c.moved.Add(1);
    SendOn(it, slots_.Moved(job, seq), Where::kMoved, true);
    return true;
  }
  return false;
}

FrameRef AggregationStage::HandOff(const AggFrame& it) const {
  const bool to_spare = it.claim && it.where == Where::kSpare;
  const Via via = it.claim ? Via::kSwitch : it.where == Where::kHome ? Via::kHome : Via::kPlacement;
  return FrameRef{it.m, it.in_port, it.meta.vlan, it.meta.l3_offset, via,
                  to_spare ? static_cast<uint16_t>(it.slot - s_.regions.spare.first)
                           : aggregator::RelocationMap::kNone};
}

void AggregationStage::SendOn(const AggFrame& it, uint32_t slot, Where where, bool claim) {
  AggFrame next = it;
  next.slot = slot;
  next.where = where;
  next.claim = claim;
  const auto owner = static_cast<uint16_t>(slot % s_.n_workers);
  if (owner == s_.index) {
    // Here again: a claim is never sent on, and an unclaimed datagram goes
    // home at most once, so this recursion ends within two calls.
    AtSlot(next);
    return;
  }
  FrameRef ref = HandOff(next);
  if (rte_ring_mp_enqueue_elem(s_.handoff[owner], &ref, sizeof(ref)) == 0) {
    stats_.lcore.agg.handoffs.Add(1);
  } else {
    stats_.lcore.agg.handoff_full.Add(1);
    tx_.Drop(it.in_port, DropReason::kAggHandoffFull, it.m);
  }
}

void AggregationStage::Escalate(const AggFrame& it) {
  const aggregator::Job& job = *it.job;
  const aggregator::AggHeader& h = *it.pkt.header;
  // Without spare slots the control thread can only move the job: when it
  // cannot (no slot quota short of its region, or moved already, and this
  // chunk not one it sends on) the answer is known here.
  const bool may_move = job.move() ? it.where == Where::kHome && job.MovedFrom(h.seq.host())
                                   : job.MayMove(s_.regions.For(job.in_band()).size);
  if (channels_.escalate != nullptr && (s_.regions.spare.size != 0 || may_move)) {
    // The frame remembers the slot it collided at (home, or the moved
    // partition: escalations come from no other), where the answer is
    // applied.
    const Via at = it.where == Where::kMoved ? Via::kSwitch : Via::kHome;
    Escalation e{FrameRef{it.m, it.in_port, it.meta.vlan, it.meta.l3_offset, at,
                          aggregator::RelocationMap::kNone},
                 job.id(), job.generation(), h.seq.host(), it.slot,
                 job.GoesOnWithoutSlot(it.pkt.opcode)};
    if (rte_ring_sp_enqueue_elem(channels_.escalate.get(), &e, sizeof(e)) == 0) {
      stats_.lcore.agg.escalations.Add(1);
      return;
    }
  }
  RefuseSlotBusy(it);
}

void AggregationStage::RefuseSlotBusy(const AggFrame& it) {
  const aggregator::Job& job = *it.job;
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::Opcode opcode = it.pkt.opcode;
  if (slots_.Owns(it.slot) &&
      s_.slots->Holding(slots_.Local(it.slot), job.id(), job.generation(),
                        it.pkt.header->seq.host()) != nullptr) {
    // The slot took the chunk while the control thread decided (another
    // member's contribution found it free): it meets the others there.
    Contribute(it);
    return;
  }
  const aggregator::Job::NoSlot way = job.WhenNoSlot();
  if (aggregator::Job::GoesOnWithoutSlot(way, opcode)) {
    if (way == aggregator::Job::NoSlot::kToParameterNode) {
      // The parameter node aggregates the chunk instead: every member's
      // contribution that finds no slot goes there, and it knows from
      // `expected` when all are in (docs/parameter-node.md).
      auto* h = reinterpret_cast<aggregator::AggHeader*>(rte_pktmbuf_mtod(it.m, uint8_t*) +
                                                         it.header_offset);
      h->expected = common::be16_t::FromHost(job.members());
      c.conflicts_to_ps.Add(1);
      tree_.ForwardToPs(it.m, job, it.header_offset, it.in_port,
                        aggregator::flags::kConflict | aggregator::flags::kAggregateAtPs);
      return;
    }
    if (above_.UpAsMissing(it)) return;
  }
  notices_.NoticeAbsent(it);
  answers_.NackSlotBusy(it);
}



void AggregationStage::DrainRelocations() {
  if (channels_.relocate == nullptr) return;
  Relocation moves[kBurstSize];
  const unsigned n = rte_ring_sc_dequeue_burst_elem(channels_.relocate.get(), moves,
                                                    sizeof(Relocation), kBurstSize, nullptr);
  AggFrame items[kBurstSize];
  uint16_t k = 0;
  for (unsigned i = 0; i < n; ++i) {
    const Relocation& r = moves[i];
    const aggregator::ChunkKey key{r.job_id, r.job_generation, r.seq};
    if (r.kind == Relocation::Kind::kForget) {
      s_.relocations->Erase(key, r.hint);
      continue;
    }
    if (r.kind == Relocation::Kind::kMove) {
      const aggregator::Job* job = s_.jobs->Find(r.job_id);
      if (job != nullptr && job->generation() == r.job_generation && job->move()) {
        slots_.ApplyMove(*job);
      }
      continue;
    }
    const FrameMeta meta{r.frame.vlan, false, r.frame.l3_offset};
    // Checked again (the job may have changed meanwhile) at the slot it
    // collided at, which this worker owns. That slot, its chunk now in the
    // map or past its job's cut, sends it on (to the spare slot, or to the
    // moved partition), or, refused, it is answered there.
    if (!Check(r.frame.m, r.frame.in_port, meta, Source::kReinject, &items[k],
               aggregator::RelocationMap::kNone, r.frame.via)) {
      continue;
    }
    const AggFrame& it = items[k];
    const aggregator::ChunkKey now{it.job->id(), it.job->generation(), it.pkt.header->seq.host()};
    bool sent_on = false;
    if (r.kind == Relocation::Kind::kMoved) {
      sent_on = slots_.MoveApplied(*it.job) && it.job->MovedFrom(now.seq);
    } else if (r.kind == Relocation::Kind::kPlace) {
      if (s_.slots->Holding(slots_.Local(it.slot), now.job_id, now.job_generation, now.seq) !=
          nullptr) {
        // The slot took the chunk while the control thread decided (another
        // member's contribution found it free): the chunk stays there whole,
        // and the spare slot waits unused until its lease ends.
        sent_on = true;
      } else if (StaleForSpare(it)) {
        // The home slot completed the chunk and gave it up while the
        // control thread decided, and this datagram's sender has the
        // result: counted in a spare slot, the chunk would complete a
        // second time, a float sum in another order (seed 1304072).
        stats_.lcore.agg.duplicates.Add(1);
        tx_.Drop(it.in_port, DropReason::kAggDuplicate, it.m);
        continue;
      } else {
        // Cannot fail: the control thread leases at most as many spare
        // slots as the map holds.
        (void)s_.relocations->Insert(key, r.hint);
        sent_on = s_.relocations->Find(now) != aggregator::RelocationMap::kNone;
      }
    }
    if (!sent_on) {
      RefuseSlotBusy(it);
      continue;
    }
    ++k;
  }
  if (k != 0) Dispatch(items, k);
}






bool AggregationStage::ForwardedAsLate(const AggFrame& it, const aggregator::Slot& slot,
                                       bool resend) {
  const aggregator::Job& job = *it.job;
  const aggregator::AggPacket& pkt = it.pkt;
  if (pkt.opcode != aggregator::Opcode::kPartial || it.member < 0 ||
      !job.IsSwitch(static_cast<uint16_t>(it.member)) || slot.inherited_overflow() ||
      (job.is_root() && job.tan() == aggregator::JobSpec::Tan::kNone)) {
    return false;
  }
  const auto child = static_cast<uint16_t>(it.member);
  const std::span<const uint16_t> covers = job.Covers(child);
  const uint8_t lacks = pkt.header->missing_count;
  auto listed = [&](uint16_t id) {
    for (uint8_t i = 0; i < lacks; ++i) {
      if (static_cast<uint16_t>(pkt.missing[2 * i] << 8 | pkt.missing[2 * i + 1]) == id) return true;
    }
    return false;
  };
  // A partial that holds nobody's data (it went up as missing) is no share.
  if ((pkt.header->flags.host() & aggregator::flags::kConflict) != 0) return false;
  uint16_t named[256];
  uint32_t held = 0;
  bool only_named = false;  // the late names exactly `named`
  if (covers.size() <= 1) {
    // A child that covers only itself (an in-band leaf at its root) names
    // no ranks here. But where the slot counted a partial of it that held
    // nobody's data, what that one listed is the child's whole share, and
    // a later partial of the child holds that share less what it lists
    // (its new slot took the members' resends: seeds 970167, 1351435).
    auto in_share = [&](uint16_t id) {
      for (uint16_t i = 0; i < slot.inherited_count(); ++i) {
        if (slot.inherited(i) == id && slot.InheritedShare(i, child)) return true;
      }
      return false;
    };
    for (uint8_t i = 0; i < lacks; ++i) {
      if (!in_share(static_cast<uint16_t>(pkt.missing[2 * i] << 8 | pkt.missing[2 * i + 1]))) return false;
    }
    for (uint16_t i = 0; i < slot.inherited_count(); ++i) {
      const uint16_t id = slot.inherited(i);
      if (!slot.InheritedShare(i, child) || listed(id)) continue;
      if (held == std::size(named)) return false;
      named[held++] = id;
    }
    only_named = true;  // nothing here knows the child's ids otherwise
  } else {
    for (uint8_t i = 0; i < lacks; ++i) {
      const auto id = static_cast<uint16_t>(pkt.missing[2 * i] << 8 | pkt.missing[2 * i + 1]);
      if (std::find(covers.begin(), covers.end(), id) == covers.end()) return false;
    }
    // What the repeat holds, each id one the slot's partial went on without;
    // or, where a member's data reduced twice gives the same bytes, some such
    // ids beside ids the counted partial held (the child's new slot took
    // resends of members counted and members lacked alike: seed 1380907).
    // The late names only the lacked ones: what it holds besides is data the
    // slot's partial carries already, which changes nothing merged again.
    const bool twice_same = aggregator::SameTwice(slot.op()) && aggregator::SameTwice(pkt.op);
    for (const uint16_t id : covers) {
      if (listed(id)) continue;
      bool lacked = false;
      for (uint16_t i = 0; i < slot.inherited_count() && !lacked; ++i) lacked = slot.inherited(i) == id;
      if (!lacked) {
        if (!twice_same) return false;
        only_named = true;
        continue;
      }
      if (held == std::size(named)) return false;
      named[held++] = id;
    }
  }
  if (held == 0) return false;
  stats_.lcore.agg.late_repeats.Add(1);
  if (resend) {
    // The child repeats because no answer reached it, and the slot's
    // partial (or first data) may be what was lost on the way up: it goes
    // again first, as for any counted member's resend. Without it the late
    // data would wait above for a partial that never comes (the TAN holds
    // lates until their first data; seed 983168).
    stats_.lcore.agg.partials_resent.Add(1);
    (void)tree_.FinishSlot(job, slots_.Local(it.slot), slot, false, nullptr, 0);
  }
  tree_.ForwardLate(it.m, job, it.header_offset, it.in_port, 0, /*name_content=*/true,
                    only_named ? std::span<const uint16_t>(named, held) : std::span<const uint16_t>());
  return true;
}

bool AggregationStage::StaleForSpare(const AggFrame& it) const {
  const aggregator::Job& job = *it.job;
  // The scope of ResultLost: where nothing asks a member past a float sum's
  // chunk for its data again, a datagram such a member sent is one it sent
  // before it had the result.
  if (!job.is_root() || job.tan() == aggregator::JobSpec::Tan::kRemote || it.member < 0) {
    return false;
  }
  if (it.pkt.opcode != aggregator::Opcode::kContribution &&
      it.pkt.opcode != aggregator::Opcode::kPartial) {
    return false;
  }
  if (SameInAnyOrder(it.pkt.dtype, it.pkt.op)) return false;
  if ((it.pkt.header->flags.host() & aggregator::flags::kOrdered) != 0) return false;
  const std::optional<uint32_t> ack = job.GetAck(static_cast<uint16_t>(it.member));
  return ack && aggregator::SeqBefore(it.pkt.header->seq.host(), *ack);
}



void AggregationStage::DrainHandoffs() {
  FrameRef refs[kBurstSize];
  const unsigned n = rte_ring_sc_dequeue_burst_elem(channels_.handoff.get(), refs, sizeof(FrameRef),
                                                    kBurstSize, nullptr);
  if (n == 0) return;  // the common case: no array to build
  AggFrame items[kBurstSize];
  uint16_t k = 0;
  for (unsigned i = 0; i < n; ++i) {
    const FrameMeta meta{refs[i].vlan, false, refs[i].l3_offset};
    if (Check(refs[i].m, refs[i].in_port, meta, Source::kHandoff, &items[k],
              refs[i].verdict_or_spare, refs[i].via)) {
      ++k;
    }
  }
  if (k != 0) Reduce(items, k);
}

void AggregationStage::DrainReinjects() {
  FrameRef back[kBurstSize];
  const unsigned n = rte_ring_sc_dequeue_burst_elem(channels_.reinject.get(), back, sizeof(FrameRef),
                                                    kBurstSize, nullptr);
  if (n == 0) return;
  stats_.lcore.agg.reinjected.Add(n);
  AggFrame items[kBurstSize];
  uint16_t k = 0;
  for (unsigned i = 0; i < n; ++i) {
    const FrameRef& u = back[i];
    const FrameMeta meta{u.vlan, false, u.l3_offset};
    if (u.verdict_or_spare == 0) {
      if (Check(u.m, u.in_port, meta, Source::kReinject, &items[k])) ++k;
      continue;
    }
    // Refused: the datagram passed every check on the way up, so it parses.
    const auto* data = rte_pktmbuf_mtod(u.m, const uint8_t*);
    UdpInfo udp;
    aggregator::AggPacket pkt;
    if (!ParseAggregationFrame(data, rte_pktmbuf_data_len(u.m), u.l3_offset, &udp, &pkt)) {
      tx_.Drop(u.in_port, DropReason::kAggMalformed, u.m);
      continue;
    }
    const aggregator::MemberAddr sender{Mac48(data + 6), static_cast<uint8_t>(u.in_port), u.vlan,
                                        udp.src_ip, udp.src_port};
    answers_.Nack(u.m, *pkt.header, static_cast<aggregator::NackReason>(u.verdict_or_spare), sender);
  }
  if (k != 0) Dispatch(items, k);
}







void AggregationStage::ContinueSlotDump(SlotDumpExchange& d) {
  d.Begin();
  const aggregator::SlotTable& slots = *s_.slots;
  const uint32_t end = std::min(slots.size(), d.cursor + SlotDumpEntry::kScanPerPass);
  for (uint32_t i = d.cursor; i < end; ++i) {
    const aggregator::Slot& slot = slots.slot(i);
    if (slot.state() != aggregator::Slot::State::kFree) (void)d.Add(SlotDumpEntry::Of(i, slot));
  }
  d.cursor = end;
  if (end == slots.size()) d.Finish(clock_.Read());
}

}  // namespace aggswitch::dataplane
