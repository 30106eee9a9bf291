#include "dataplane/worker.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_memcpy.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>

#include "aggregator/wire.h"
#include "dataplane/unmap_guard.h"

namespace aggswitch::dataplane {
namespace {

constexpr uint64_t kMulticastBit = uint64_t{1} << 40;  // I/G bit of a MAC as Mac48()
constexpr uint64_t kBroadcast48 = 0xffffffffffffULL;
// NACKs answer refused datagrams; a flood of bad datagrams must not turn the
// switch into a flood of NACKs. Per lcore: bursts of 64, 100 000 per second.
constexpr uint64_t kNackBurst = 64;
constexpr double kNacksPerSecond = 100000;

}  // namespace

Worker::Worker(const WorkerSetup& setup, const ForwardingPlan& plan, MacTable& macs,
               rte_ring* learn_ring, rte_mempool* pool, LcoreStats& stats,
               const std::atomic<bool>& quit)
    : setup_(setup),
      plan_(plan),
      macs_(macs),
      learn_ring_(learn_ring),
      pool_(pool),
      stats_(stats),
      quit_(quit) {
  const double hz = static_cast<double>(rte_get_tsc_hz());
  nack_token_cycles_ = static_cast<uint64_t>(hz / kNacksPerSecond);
  nack_tokens_ = kNackBurst;
  for (size_t i = 0; i + 1 < kSlotLatencyBuckets; ++i) {
    latency_bounds_[i] = static_cast<uint64_t>(kSlotLatencyBoundsSeconds[i] * hz);
  }
  for (size_t p = 0; p < config::kMaxPorts; ++p) {
    const config::FaultConfig* f = setup.faults[p];
    if (f == nullptr) continue;
    // One random stream per lcore, port and direction.
    const uint64_t stream = (uint64_t{setup.lcore} << 16 | p) << 1;
    if (f->direction != config::FaultDirection::kTx) {
      rx_faults_[p] = std::make_unique<FaultInjector>(*f, stream);
    }
    if (f->direction != config::FaultDirection::kRx) {
      tx_faults_[p] = std::make_unique<FaultInjector>(*f, stream | 1);
      tx_fault_ports_ |= uint64_t{1} << p;
    }
  }
  std::fill(std::begin(setup_.faults), std::end(setup_.faults), nullptr);  // the config may go away
}

int Worker::LaunchEntry(void* arg) {
  static_cast<Worker*>(arg)->Run();
  return 0;
}

void Worker::Run() {
  UnmapGuard::Online(setup_.lcore);
  last_tsc_ = rte_rdtsc();
  while (!quit_.load(std::memory_order_relaxed)) {
    PollOnce();
    UnmapGuard::Quiescent(setup_.lcore);  // no pointer into port memory is held here
  }
  UnmapGuard::Offline(setup_.lcore);
  if (reader_online_) {
    setup_.agg.jobs->ReaderOffline(setup_.agg.reader_id);
    reader_online_ = false;
  }
}

void Worker::PollOnce() {
  if (last_tsc_ == 0) last_tsc_ = rte_rdtsc();
  if (setup_.agg.jobs != nullptr) {
    if (!reader_online_) {
      setup_.agg.jobs->ReaderOnline(setup_.agg.reader_id);
      reader_online_ = true;
    }
    if (setup_.agg.n_workers > 1) DrainHandoffs();
    if (setup_.agg.reinject != nullptr) DrainReinjects();
  }
  uint64_t busy = 0, idle = 0, busy_packets = 0;
  for (uint16_t i = 0; i < setup_.n_rx; ++i) {
    const WorkerSetup::Rx& rx = setup_.rx[i];
    rte_mbuf* pkts[kBurstSize];
    FaultInjector* faults = rx_faults_[rx.port_index].get();
    // Half a burst from a faulty port leaves room for its duplicates and held frames.
    uint16_t n = rte_eth_rx_burst(setup_.port_ids[rx.port_index], rx.queue, pkts,
                                  faults == nullptr ? kBurstSize : kBurstSize / 2);
    if (faults != nullptr) {
      n = faults->Apply(pkts, n, kBurstSize, pool_, stats_.ports[rx.port_index]);
    }
    if (n > 0) {
      ProcessBurst(rx.port_index, pkts, n, static_cast<uint32_t>(last_tsc_ >> setup_.tick_shift));
      FlushTx();
      FlushLearn();
    }
    // One TSC read per poll; the previous read starts this poll's interval.
    const uint64_t now = rte_rdtsc();
    if (n > 0) {
      busy += now - last_tsc_;
      busy_packets += n;
    } else {
      idle += now - last_tsc_;
    }
    last_tsc_ = now;
  }
  // Frames a TX injector held back go out even when nothing else does.
  for (uint64_t ports = tx_fault_ports_; ports != 0; ports &= ports - 1) {
    const auto p = static_cast<uint16_t>(__builtin_ctzll(ports));
    if (tx_faults_[p]->holding()) FlushPort(p);
  }
  // No Job pointer is held past this point. Reporting it every 16th pass is
  // plenty for a grace period (microseconds) and keeps the shared QSBR
  // counter line out of most passes.
  if (reader_online_ && (++polls_since_quiescent_ & 15) == 0) {
    setup_.agg.jobs->Quiescent(setup_.agg.reader_id);
    SlotDumpExchange* dump = setup_.agg.dump;
    if (dump != nullptr &&
        (dump->serving != 0 || dump->requested.load(std::memory_order_acquire) !=
                                   dump->done.load(std::memory_order_relaxed))) {
      ContinueSlotDump();
    }
  }
  LcoreCounters& c = stats_.lcore;
  if (busy) {
    c.busy_cycles.Add(busy);
    c.busy_packets.Add(busy_packets);
  }
  if (idle) c.idle_cycles.Add(idle);
  c.polls.Add(1);
}

void Worker::ProcessBurst(uint16_t in_port, rte_mbuf** pkts, uint16_t n, uint32_t now_tick) {
  PortCounters& in = stats_.ports[in_port];
  uint64_t src[kBurstSize], dst[kBurstSize];
  Meta meta[kBurstSize];
  rte_mbuf* kept[kBurstSize];
  uint16_t k = 0;
  uint64_t rx_bytes = 0;
  rte_mbuf* agg_pkts[kBurstSize];
  Meta agg_meta[kBurstSize];
  uint16_t n_agg = 0;

  // Stage 1: parse and classify into a VLAN.
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 3 < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 3], void*));
    rte_mbuf* m = pkts[i];
    rx_bytes += m->pkt_len;
    const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
    L2Info l2;
    switch (ParseL2(data, rte_pktmbuf_data_len(m), &l2)) {
      case ParseStatus::kOk: break;
      case ParseStatus::kRunt: Drop(in_port, DropReason::kRunt, m); continue;
      case ParseStatus::kBadVlan: Drop(in_port, DropReason::kBadVlan, m); continue;
    }
    const uint16_t vlan = plan_.IngressVlan(in_port, l2.has_tag, l2.vid);
    if (vlan == 0) {
      Drop(in_port, DropReason::kVlanNotAllowed, m);
      continue;
    }
    if (setup_.agg.jobs != nullptr && l2.ether_type == kEtherTypeIpv4 &&
        IsAggregation(data, rte_pktmbuf_data_len(m), l2.l3_offset)) {
      // Set aside; handled after the L2 frames of the burst.
      agg_meta[n_agg] = Meta{vlan, l2.has_tag, static_cast<uint8_t>(l2.l3_offset)};
      agg_pkts[n_agg++] = m;
      continue;
    }
    const uint64_t src48 = SrcMac48(data);
    if (src48 & kMulticastBit) {
      Drop(in_port, DropReason::kSrcMulticast, m);
      continue;
    }
    src[k] = MacKey(vlan, src48);
    dst[k] = MacKey(vlan, DstMac48(data));
    meta[k] = Meta{vlan, l2.has_tag, static_cast<uint8_t>(l2.l3_offset)};
    kept[k++] = m;
  }
  in.rx_packets.Add(n);
  in.rx_bytes.Add(rx_bytes);
  for (uint16_t a = 0; a < n_agg; ++a) {
    HandleAggregation(agg_pkts[a], in_port, agg_meta[a].vlan, agg_meta[a].l3_offset, AggSource::kRx);
  }
  if (k == 0) return;

  // Stage 2: one bulk lookup of every source and destination. Frames of one
  // conversation tend to arrive back to back, so a frame with the same
  // (source, destination) as the one before it reuses that lookup, as VPP's
  // L2 nodes reuse their previous key: run[j] is the lookup frame j uses.
  uint64_t keys[2 * kBurstSize];  // run sources in [0, runs), run destinations in [runs, 2 * runs)
  uint16_t run[kBurstSize];
  uint16_t runs = 0;
  for (uint16_t j = 0; j < k; ++j) {
    if (j > 0 && src[j] == src[j - 1] && dst[j] == dst[j - 1]) {
      run[j] = run[j - 1];
      continue;
    }
    run[j] = runs;
    keys[runs] = src[j];
    keys[kBurstSize + runs] = dst[j];
    ++runs;
  }
  std::memmove(&keys[runs], &keys[kBurstSize], runs * sizeof(uint64_t));
  MacTable::Hit hits[2 * kBurstSize];
  macs_.LookupBulk(keys, 2 * runs, hits);

  // Stage 3: learn (once per run), answer, forward.
  for (uint16_t j = 0; j < k; ++j) {
    const uint16_t r = run[j];
    if (j == 0 || r != run[j - 1]) {
      const MacTable::Hit& src_hit = hits[r];
      if (src_hit.port == in_port) {
        macs_.Touch(src_hit.slot, now_tick);
      } else {
        RequestLearn(src[j], in_port, now_tick);
      }
    }
    rte_mbuf* m = kept[j];
    const uint64_t dst48 = MacKeyMac(dst[j]);
    if (dst48 & kMulticastBit) {
      HandleLocal(in_port, m, meta[j], dst48 == kBroadcast48);
    } else if (dst48 == plan_.switch_mac48()) {
      HandleLocal(in_port, m, meta[j], false);
    } else {
      const uint16_t out = hits[runs + r].port;
      if (out == kNoPort) {
        Flood(in_port, m, meta[j]);
      } else if (out == in_port) {
        Drop(in_port, DropReason::kHairpin, m);
      } else {
        Forward(in_port, m, meta[j], out);
      }
    }
  }
}

void Worker::HandleLocal(uint16_t in_port, rte_mbuf* m, const Meta& meta, bool broadcast) {
  auto* data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t len = rte_pktmbuf_data_len(m);
  const be16_t ether_type = *reinterpret_cast<const be16_t*>(data + meta.l3_offset - 2);
  const bool multicast = (data[0] & 0x01) != 0;
  LocalVerdict verdict = LocalVerdict::kNotLocal;
  if (multicast) {
    // Broadcast ARP may ask for us; all other group traffic is plain L2.
    if (broadcast && ether_type == kEtherTypeArp) {
      verdict = HandleArp(data, len, meta.l3_offset, meta.vlan, plan_, false);
    }
  } else if (ether_type == kEtherTypeArp) {
    verdict = HandleArp(data, len, meta.l3_offset, meta.vlan, plan_, true);
  } else if (ether_type == kEtherTypeIpv4) {
    verdict = HandleIpv4ToSwitch(data, len, meta.l3_offset, meta.vlan, plan_);
  } else {
    verdict = LocalVerdict::kUnhandled;
  }
  switch (verdict) {
    case LocalVerdict::kNotLocal:
      Flood(in_port, m, meta);
      return;
    case LocalVerdict::kReplied:
      if (ether_type == kEtherTypeArp) {
        stats_.lcore.arp_replies.Add(1);
      } else {
        stats_.lcore.icmp_replies.Add(1);
      }
      // The reply leaves where the request came in, tagged as it came.
      Enqueue(in_port, m);
      return;
    case LocalVerdict::kMalformed:
      Drop(in_port, DropReason::kToSwitchMalformed, m);
      return;
    case LocalVerdict::kUnhandled:
      Drop(in_port, DropReason::kToSwitchUnhandled, m);
      return;
  }
}

void Worker::Forward(uint16_t in_port, rte_mbuf* m, const Meta& meta, uint16_t out_port) {
  if (!FitTag(m, meta, out_port)) {
    Drop(in_port, DropReason::kNoHeadroom, m);
    return;
  }
  Enqueue(out_port, m);
}

void Worker::Flood(uint16_t in_port, rte_mbuf* m, const Meta& meta) {
  uint64_t mask = plan_.FloodMask(meta.vlan) & ~(uint64_t{1} << in_port);
  if (mask == 0) {
    Drop(in_port, DropReason::kNoEgress, m);
    return;
  }
  stats_.ports[in_port].flooded_packets.Add(1);
  // Copies go to every port but the last, which takes the original. Copies are
  // taken before the original's tag is touched.
  while (mask & (mask - 1)) {
    const uint16_t out = static_cast<uint16_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
    if (copy == nullptr) {
      stats_.ports[in_port].drops[static_cast<size_t>(DropReason::kNoMbuf)].Add(1);
      continue;
    }
    Forward(in_port, copy, meta, out);
  }
  Forward(in_port, m, meta, static_cast<uint16_t>(__builtin_ctzll(mask)));
}

bool Worker::FitTag(rte_mbuf* m, const Meta& meta, uint16_t out_port) {
  const bool want = plan_.EgressTagged(out_port, meta.vlan);
  if (meta.has_tag && want) {
    // Keep PCP/DEI; a priority tag (VID 0) gets the frame's VLAN.
    auto* tag = reinterpret_cast<VlanTag*>(rte_pktmbuf_mtod(m, uint8_t*) + 12);
    const uint16_t tci = tag->tci.host();
    if ((tci & kVlanIdMask) != meta.vlan) {
      tag->tci = be16_t::FromHost(static_cast<uint16_t>((tci & ~kVlanIdMask) | meta.vlan));
    }
    return true;
  }
  if (meta.has_tag && !want) {
    auto* data = rte_pktmbuf_mtod(m, uint8_t*);
    std::memmove(data + kVlanHdrLen, data, 12);
    rte_pktmbuf_adj(m, kVlanHdrLen);
    return true;
  }
  if (!meta.has_tag && want) {
    auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, kVlanHdrLen));
    if (data == nullptr) return false;
    std::memmove(data, data + kVlanHdrLen, 12);
    auto* tag = reinterpret_cast<VlanTag*>(data + 12);
    tag->tpid = kEtherTypeVlan;
    tag->tci = be16_t::FromHost(meta.vlan);
  }
  return true;
}

void Worker::Enqueue(uint16_t out_port, rte_mbuf* m) {
  if (__builtin_expect(tx_count_[out_port] == kBurstSize, 0)) FlushPort(out_port);
  tx_[out_port][tx_count_[out_port]++] = m;
  tx_bytes_[out_port] += m->pkt_len;
  tx_dirty_ |= uint64_t{1} << out_port;
}

void Worker::FlushTx() {
  while (tx_dirty_) {
    const uint16_t p = static_cast<uint16_t>(__builtin_ctzll(tx_dirty_));
    FlushPort(p);
  }
}

void Worker::FlushPort(uint16_t p) {
  tx_dirty_ &= ~(uint64_t{1} << p);
  rte_mbuf** frames = tx_[p];
  uint16_t count = tx_count_[p];
  uint64_t bytes = tx_bytes_[p];
  rte_mbuf* faulty[FaultInjector::kMaxOut];
  if (FaultInjector* faults = tx_faults_[p].get(); faults != nullptr) {
    std::copy(frames, frames + count, faulty);
    frames = faulty;
    count = faults->Apply(frames, count, FaultInjector::kMaxOut, pool_, stats_.ports[p]);
    bytes = 0;
    for (uint16_t i = 0; i < count; ++i) bytes += frames[i]->pkt_len;
  }
  const uint16_t sent = rte_eth_tx_burst(setup_.port_ids[p], setup_.tx_queue, frames, count);
  if (sent < count) {
    for (uint16_t i = sent; i < count; ++i) {
      bytes -= frames[i]->pkt_len;
      rte_pktmbuf_free(frames[i]);
    }
    stats_.ports[p].drops[static_cast<size_t>(DropReason::kTxFull)].Add(count - sent);
  }
  stats_.ports[p].tx_packets.Add(sent);
  stats_.ports[p].tx_bytes.Add(bytes);
  tx_count_[p] = 0;
  tx_bytes_[p] = 0;
}

bool Worker::IsAggregation(const uint8_t* data, uint32_t len, uint32_t l3_offset) const {
  // Only the fixed IPv4 fields and the UDP destination port; ParseIpv4Udp
  // checks the rest on the aggregation path alone.
  if (len < l3_offset + sizeof(Ipv4Hdr) + sizeof(UdpHdr)) return false;
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(data + l3_offset);
  if (ip->protocol != kIpProtoUdp) return false;
  if (setup_.agg.address != 0 && ip->dst.host() == setup_.agg.address) return true;
  const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
  if (len < l3_offset + ihl + sizeof(UdpHdr)) return false;
  const auto* udp = reinterpret_cast<const UdpHdr*>(data + l3_offset + ihl);
  return udp->dst_port.host() == setup_.agg.udp_port;
}

void Worker::DrainHandoffs() {
  rte_ring* ring = setup_.agg.handoff[setup_.agg.index];
  if (ring == nullptr) return;
  rte_mbuf* pkts[kBurstSize];
  const unsigned n = rte_ring_sc_dequeue_burst(ring, reinterpret_cast<void**>(pkts), kBurstSize, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    L2Info l2;
    const auto* data = rte_pktmbuf_mtod(pkts[i], const uint8_t*);
    // The receiving lcore parsed this frame already; only the offset is needed.
    if (ParseL2(data, rte_pktmbuf_data_len(pkts[i]), &l2) != ParseStatus::kOk) {
      rte_pktmbuf_free(pkts[i]);
      continue;
    }
    HandleAggregation(pkts[i], 0, 0, l2.l3_offset, AggSource::kHandoff);
  }
  if (n) FlushTx();
}

void Worker::DrainReinjects() {
  Upcall back[kBurstSize];
  const unsigned n = rte_ring_sc_dequeue_burst_elem(setup_.agg.reinject, back, sizeof(Upcall),
                                                    kBurstSize, nullptr);
  if (n == 0) return;
  stats_.lcore.agg.reinjected.Add(n);
  for (unsigned i = 0; i < n; ++i) {
    const Upcall& u = back[i];
    if (u.verdict == 0) {
      HandleAggregation(u.m, u.in_port, u.vlan, u.l3_offset, AggSource::kReinject);
      continue;
    }
    // Refused: the datagram passed every check on the way up, so it parses.
    const auto* data = rte_pktmbuf_mtod(u.m, const uint8_t*);
    UdpInfo udp;
    aggregator::AggPacket pkt;
    if (!ParseAggregationFrame(data, rte_pktmbuf_data_len(u.m), u.l3_offset, &udp, &pkt)) {
      rte_pktmbuf_free(u.m);
      continue;
    }
    const aggregator::MemberAddr sender{Mac48(data + 6), static_cast<uint8_t>(u.in_port), u.vlan,
                                        udp.src_ip, udp.src_port};
    Nack(u.m, *pkt.header, static_cast<aggregator::NackReason>(u.verdict), sender);
  }
  FlushTx();
}

void Worker::ContinueSlotDump() {
  SlotDumpExchange& d = *setup_.agg.dump;
  if (d.serving == 0) {
    d.serving = d.requested.load(std::memory_order_acquire);
    d.served_limit = std::min(d.limit.load(std::memory_order_relaxed), d.capacity);
    d.cursor = 0;
    d.n = 0;
    d.busy = 0;
  }
  const aggregator::SlotTable& slots = *setup_.agg.slots;
  const uint32_t end = std::min(slots.size(), d.cursor + SlotDumpExchange::kScanPerPass);
  for (uint32_t i = d.cursor; i < end; ++i) {
    const aggregator::Slot& slot = slots.slot(i);
    if (slot.state() == aggregator::Slot::State::kFree) continue;
    ++d.busy;
    if (d.n == d.served_limit) continue;
    d.entries[d.n++] = SlotDumpExchange::Entry::Of(i, slot);
  }
  d.cursor = end;
  if (end < slots.size()) return;
  d.now_tsc = rte_rdtsc();
  d.done.store(d.serving, std::memory_order_release);
  d.serving = 0;
}

void Worker::HandleAggregation(rte_mbuf* m, uint16_t in_port, uint16_t vlan, uint32_t l3_offset,
                               AggSource source) {
  using aggregator::NackReason;
  using aggregator::Opcode;
  AggregationCounters& c = stats_.lcore.agg;
  const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
  UdpInfo udp;
  aggregator::AggPacket pkt;
  if (!ParseAggregationFrame(data, rte_pktmbuf_data_len(m), l3_offset, &udp, &pkt)) {
    c.malformed.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  const Opcode opcode = pkt.opcode;
  if (opcode != Opcode::kContribution && opcode != Opcode::kAck && opcode != Opcode::kTaskInfo) {
    c.unsupported.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  const aggregator::AggHeader& h = *pkt.header;
  // Where answers go. A hand-off was checked where it arrived; its answers
  // (slot outcomes only) use the member's learned address instead.
  const aggregator::MemberAddr sender{Mac48(data + 6), static_cast<uint8_t>(in_port), vlan,
                                      udp.src_ip, udp.src_port};
  const aggregator::Job* job = setup_.agg.jobs->Find(h.job_id.host());
  if (job == nullptr) {
    HandleUnknownJob(m, pkt, sender, in_port, vlan, l3_offset, source);
    return;
  }
  if (source != AggSource::kHandoff) {
    if (job->key() != h.job_key.host()) {
      c.key_failures.Add(1);
      setup_.agg.job_counters[job->index()].key_failures.Add(1);
      Nack(m, h, NackReason::kKeyMismatch, sender);
      return;
    }
    const uint16_t node = h.node_id.host();
    if (node >= job->members()) {
      c.rejected.Add(1);
      Nack(m, h, NackReason::kMalformed, sender);
      return;
    }
    const bool task_info = opcode == Opcode::kTaskInfo || (h.flags.host() & aggregator::flags::kTaskInfo);
    if (task_info && (h.expected.host() != job->members() || h.node_count.host() != job->nodes())) {
      c.task_info_conflicts.Add(1);
      Nack(m, h, NackReason::kTaskInfoConflict, sender);
      return;
    }
    // The receiving lcore learns where the member is and how far it got.
    (void)job->LearnMember(node, sender.mac48, sender.port_index, vlan, udp.src_ip, udp.src_port);
    (void)job->UpdateAck(node, h.ack_watermark.host());
    if (opcode == Opcode::kAck) {
      c.acks.Add(1);
      rte_pktmbuf_free(m);
      return;
    }
    if (opcode == Opcode::kTaskInfo) {
      // Accepted (registered now, or known already): echoed so that the
      // control unit can stop retransmitting it.
      c.task_infos.Add(1);
      Answer(m, h, Opcode::kTaskInfo, NackReason{0}, sender);
      return;
    }
  }
  const uint32_t index = aggregator::SlotIndex(job->id(), h.seq.host(), setup_.agg.total_slots);
  const uint16_t owner = static_cast<uint16_t>(index % setup_.agg.n_workers);
  if (owner != setup_.agg.index) {
    if (rte_ring_mp_enqueue(setup_.agg.handoff[owner], m) == 0) {
      c.handoffs.Add(1);
    } else {
      c.handoff_full.Add(1);
      rte_pktmbuf_free(m);
    }
    return;
  }
  Contribute(m, *job, pkt);
}

void Worker::HandleUnknownJob(rte_mbuf* m, const aggregator::AggPacket& pkt,
                              const aggregator::MemberAddr& sender, uint16_t in_port, uint16_t vlan,
                              uint32_t l3_offset, AggSource source) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  if (source == AggSource::kHandoff) {
    // Removed between the two lcores; the sender retransmits and is told then.
    c.unknown_jobs.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  const bool task_info = pkt.opcode == aggregator::Opcode::kTaskInfo ||
                         (h.flags.host() & aggregator::flags::kTaskInfo);
  // A reinjected datagram whose job is gone again is not sent up a second
  // time: one trip per datagram keeps the path bounded.
  if (task_info && setup_.agg.upcall != nullptr && source == AggSource::kRx) {
    Upcall up{m, in_port, vlan, static_cast<uint8_t>(l3_offset), 0, 0};
    if (rte_ring_sp_enqueue_elem(setup_.agg.upcall, &up, sizeof(Upcall)) == 0) {
      c.registration_upcalls.Add(1);
    } else {
      c.registration_ring_full.Add(1);
      rte_pktmbuf_free(m);
    }
    return;
  }
  c.unknown_jobs.Add(1);
  Nack(m, h, aggregator::NackReason::kUnknownJob, sender);
}

void Worker::Answer(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::Opcode opcode,
                    aggregator::NackReason reason, const aggregator::MemberAddr& to) {
  AggregationCounters& c = stats_.lcore.agg;
  if (opcode == aggregator::Opcode::kNack) {
    const uint64_t now = last_tsc_;
    if (nack_tokens_ < kNackBurst) {
      const uint64_t earned = (now - nack_refill_tsc_) / nack_token_cycles_;
      if (earned > 0) {
        nack_tokens_ = std::min<uint64_t>(kNackBurst, nack_tokens_ + earned);
        nack_refill_tsc_ = now;
      }
    } else {
      nack_refill_tsc_ = now;
    }
    if (nack_tokens_ == 0) {
      c.nacks_suppressed.Add(1);
      rte_pktmbuf_free(m);
      return;
    }
    --nack_tokens_;
  }
  // The request's header is read before the frame is overwritten.
  aggregator::AggFields f = aggregator::ReadAggFields(request);
  f.opcode = opcode;
  f.aux = static_cast<uint32_t>(reason);
  f.elem_count = 0;
  if (opcode == aggregator::Opcode::kNack) f.flags = 0;
  const bool tagged = plan_.EgressTagged(to.port_index, to.vlan);
  const uint32_t hdr_len = tagged ? 46 : 42;
  const uint32_t len = hdr_len + sizeof(aggregator::AggHeader);
  if (m->nb_segs != 1 || len > static_cast<uint32_t>(rte_pktmbuf_data_len(m)) + rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return;
  }
  auto* out = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t dst[6];
  for (int i = 0; i < 6; ++i) dst[i] = static_cast<uint8_t>(to.mac48 >> (40 - 8 * i));
  WriteUdpHeaders(out, dst, plan_.switch_mac().bytes.data(), tagged ? to.vlan : 0,
                  setup_.agg.result_src_ip, to.ip, setup_.agg.udp_port, to.udp_port,
                  static_cast<uint16_t>(f.seq), sizeof(aggregator::AggHeader));
  aggregator::WriteAggHeader(f, 0, reinterpret_cast<aggregator::AggHeader*>(out + hdr_len));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  if (opcode == aggregator::Opcode::kNack) c.nacks_sent.Add(1);
  Enqueue(to.port_index, m);
}

namespace {

// A slot whose job registration is gone may give way at once; a complete one
// also once every member acknowledged its result.
bool SlotReleasable(void* ctx, uint32_t job_id, uint32_t job_generation, uint32_t seq,
                    bool complete) {
  const auto* jobs = static_cast<const aggregator::JobTable*>(ctx);
  const aggregator::Job* job = jobs->Find(job_id);
  if (job == nullptr || job->generation() != job_generation) return true;
  if (!complete) return false;
  const std::optional<uint32_t> min_ack = job->MinAck();
  return min_ack && job->LearnedMembers() == job->members() && aggregator::SeqBefore(seq, *min_ack);
}

}  // namespace

void Worker::Contribute(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt) {
  AggregationCounters& c = stats_.lcore.agg;
  const uint32_t seq = pkt.header->seq.host();
  aggregator::Contribution contribution;
  contribution.job_id = job.id();
  contribution.job_generation = job.generation();
  contribution.seq = seq;
  contribution.node = pkt.header->node_id.host();
  contribution.expected = job.members();
  contribution.ordered = job.ordered() || (pkt.header->flags.host() & aggregator::flags::kOrdered);
  contribution.dtype = pkt.dtype;
  contribution.op = pkt.op;
  contribution.scale = pkt.header->scale;
  contribution.elem_count = pkt.header->elem_count.host();
  contribution.payload = pkt.payload;
  contribution.handle = m;
  const auto header_offset = static_cast<uint32_t>(reinterpret_cast<const uint8_t*>(pkt.header) -
                                                   rte_pktmbuf_mtod(m, const uint8_t*));
  const uint32_t local = aggregator::SlotIndex(job.id(), seq, setup_.agg.total_slots) /
                         setup_.agg.n_workers;
  const aggregator::SlotUpdate u = setup_.agg.slots->Contribute(
      local, contribution, last_tsc_, SlotReleasable, setup_.agg.jobs);
  if (u.stale) c.stale_slots.Add(1);
  for (uint16_t i = 0; i < u.n_evicted; ++i) rte_pktmbuf_free(static_cast<rte_mbuf*>(u.evicted[i]));
  JobCounters& jc = setup_.agg.job_counters[job.index()];
  bool keep_mbuf = false;
  aggregator::NackReason refused{0};
  switch (u.outcome) {
    case aggregator::SlotOutcome::kHeld:
      keep_mbuf = true;
      [[fallthrough]];
    case aggregator::SlotOutcome::kAccumulated:
      c.contributions.Add(1);
      c.reduced_bytes.Add(pkt.payload_len);
      jc.contributions.Add(1);
      jc.reduced_bytes.Add(pkt.payload_len);
      break;
    case aggregator::SlotOutcome::kCompleted:
      c.contributions.Add(1);
      c.reduced_bytes.Add(pkt.payload_len);
      c.completions.Add(1);
      jc.contributions.Add(1);
      jc.reduced_bytes.Add(pkt.payload_len);
      jc.completions.Add(1);
      // An unordered slot is done with this contribution: it carries the result.
      keep_mbuf = SendResult(job, *u.slot, -1, u.n_released == 0 ? m : nullptr, header_offset);
      RecordCompletion(*u.slot);
      // An ordered slot returns every held contribution, this one included.
      for (uint16_t i = 0; i < u.n_released; ++i) {
        auto* held = static_cast<rte_mbuf*>(u.released[i]);
        if (held == m) keep_mbuf = true;  // freed here, not below
        rte_pktmbuf_free(held);
      }
      break;
    case aggregator::SlotOutcome::kDuplicateCompleted:
      c.duplicate_results.Add(1);
      jc.duplicates.Add(1);
      keep_mbuf = SendResult(job, *u.slot, contribution.node, m, header_offset);
      break;
    case aggregator::SlotOutcome::kDuplicate:
      c.duplicates.Add(1);
      jc.duplicates.Add(1);
      break;
    case aggregator::SlotOutcome::kCollision:
      c.collisions.Add(1);
      jc.collisions.Add(1);
      break;
    case aggregator::SlotOutcome::kMismatch:
      c.rejected.Add(1);
      refused = aggregator::NackReason::kTypeMismatch;
      break;
    case aggregator::SlotOutcome::kBadMember:
    case aggregator::SlotOutcome::kTooLarge:
      c.rejected.Add(1);
      refused = aggregator::NackReason::kMalformed;
      break;
  }
  if (keep_mbuf) return;
  aggregator::MemberAddr member;
  if (refused != aggregator::NackReason{0} && job.GetMember(contribution.node, &member)) {
    Nack(m, *pkt.header, refused, member);
    return;
  }
  rte_pktmbuf_free(m);
}

void Worker::RecordCompletion(const aggregator::Slot& slot) {
  LatencyHistogram& h = stats_.lcore.slot_latency;
  const uint64_t cycles = rte_rdtsc() - slot.first_tsc();
  size_t b = 0;
  while (b < kSlotLatencyBuckets - 1 && cycles > latency_bounds_[b]) ++b;
  h.buckets[b].Add(1);
  h.sum_cycles.Add(cycles);
  h.count.Add(1);
}

void Worker::WriteResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                uint8_t* buf) const {
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kResult;
  f.flags = slot.overflow() ? aggregator::flags::kOverflow : 0;
  f.job_id = job.id();
  f.seq = slot.seq();
  f.job_key = job.key();
  f.elem_count = slot.elem_count();
  f.dtype = slot.dtype();
  f.op = slot.op();
  f.scale = slot.scale();
  aggregator::WriteAggHeader(f, 0, reinterpret_cast<aggregator::AggHeader*>(buf));
  rte_memcpy(buf + sizeof(aggregator::AggHeader), slot.result(), slot.result_len());
}

rte_mbuf* Worker::ResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                rte_mbuf* carrier, uint32_t header_offset) {
  const uint32_t len = sizeof(aggregator::AggHeader) + slot.result_len();
  // The contribution's own frame holds a header, the same number of elements
  // and maybe a missing list: room enough, already in cache.
  if (carrier != nullptr && RTE_MBUF_DIRECT(carrier) && carrier->nb_segs == 1 &&
      rte_mbuf_refcnt_read(carrier) == 1 &&
      header_offset + len <= static_cast<uint32_t>(rte_pktmbuf_data_len(carrier))) {
    auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_adj(carrier, static_cast<uint16_t>(header_offset)));
    WriteResultPayload(job, slot, buf);
    carrier->data_len = static_cast<uint16_t>(len);
    carrier->pkt_len = len;
    return carrier;
  }
  rte_mbuf* payload = rte_pktmbuf_alloc(pool_);
  if (payload == nullptr) return nullptr;
  auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(payload, static_cast<uint16_t>(len)));
  if (buf == nullptr) {
    rte_pktmbuf_free(payload);
    return nullptr;
  }
  WriteResultPayload(job, slot, buf);
  return payload;
}

bool Worker::SendResult(const aggregator::Job& job, const aggregator::Slot& slot, int node,
                        rte_mbuf* carrier, uint32_t header_offset) {
  AggregationCounters& c = stats_.lcore.agg;
  const uint16_t first = node < 0 ? 0 : static_cast<uint16_t>(node);
  const uint16_t last = node < 0 ? job.members() : static_cast<uint16_t>(node + 1);
  rte_mbuf* payload = ResultPayload(job, slot, carrier, header_offset);
  if (payload == nullptr) {
    c.result_no_mbuf.Add(last - first);
    return false;
  }
  // Each member's copy is its own header mbuf chained to the one payload,
  // which the copies share by reference count (as DPDK's ipv4_multicast
  // example does): no clone, no second copy of the result.
  const uint16_t ip_id = static_cast<uint16_t>(slot.seq());
  const uint32_t payload_len = payload->pkt_len;
  for (uint16_t batch = first; batch < last; batch += kBurstSize) {
    const uint16_t n = static_cast<uint16_t>(std::min<uint32_t>(kBurstSize, last - batch));
    rte_mbuf* hdrs[kBurstSize];
    uint16_t out_ports[kBurstSize];
    if (rte_pktmbuf_alloc_bulk(pool_, hdrs, n) != 0) {
      c.result_no_mbuf.Add(n);
      continue;
    }
    uint16_t k = 0;
    for (uint16_t i = 0; i < n; ++i) {
      aggregator::MemberAddr member;
      if (!job.GetMember(static_cast<uint16_t>(batch + i), &member)) continue;
      rte_mbuf* hdr = hdrs[k];
      const bool tagged = plan_.EgressTagged(member.port_index, member.vlan);
      const uint16_t hdr_len = tagged ? 46 : 42;
      uint8_t dst[6];
      for (int b = 0; b < 6; ++b) dst[b] = static_cast<uint8_t>(member.mac48 >> (40 - 8 * b));
      WriteUdpHeaders(rte_pktmbuf_mtod(hdr, uint8_t*), dst, plan_.switch_mac().bytes.data(),
                      tagged ? member.vlan : 0, setup_.agg.result_src_ip, member.ip,
                      setup_.agg.udp_port, member.udp_port, ip_id, payload_len);
      hdr->data_len = hdr_len;
      hdr->pkt_len = hdr_len + payload_len;
      hdr->nb_segs = 2;
      hdr->next = payload;
      out_ports[k++] = member.port_index;
    }
    // Referenced before any copy can reach a driver that frees it.
    if (k > 0) rte_mbuf_refcnt_update(payload, static_cast<int16_t>(k));
    for (uint16_t i = 0; i < k; ++i) Enqueue(out_ports[i], hdrs[i]);
    if (k < n) rte_pktmbuf_free_bulk(hdrs + k, n - k);
    c.results_sent.Add(k);
  }
  rte_pktmbuf_free(payload);  // the copies hold it from here
  return payload == carrier;
}

void Worker::RequestLearn(uint64_t key, uint16_t port, uint32_t now_tick) {
  RecentLearn& recent = recent_learn_[(key * 0x9e3779b97f4a7c15ULL) >> 56];
  if (recent.key == key && recent.port == port && recent.tick == now_tick) return;
  recent = RecentLearn{key, now_tick, port};
  learn_[n_learn_++] = LearnRequest{key, port, {0, 0, 0}};
}

void Worker::FlushLearn() {
  if (n_learn_ == 0) return;
  const unsigned queued =
      rte_ring_sp_enqueue_burst_elem(learn_ring_, learn_, sizeof(LearnRequest), n_learn_, nullptr);
  stats_.lcore.learn_requests.Add(queued);
  if (queued < n_learn_) stats_.lcore.learn_ring_full.Add(n_learn_ - queued);
  n_learn_ = 0;
}

}  // namespace aggswitch::dataplane
