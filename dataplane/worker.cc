#include "dataplane/worker.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_memcpy.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstddef>
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
    if ((setup_.agg.tan_down != nullptr && rte_ring_count(setup_.agg.tan_down) != 0) ||
        (setup_.agg.control_tx != nullptr && rte_ring_count(setup_.agg.control_tx) != 0)) {
      DrainControl();
    }
    if (setup_.agg.slots->armed_timers() != 0 ||
        (setup_.agg.bypass != nullptr && setup_.agg.bypass->live() != 0)) {
      RunTimers();
    }
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
    if (setup_.agg.dump != nullptr && setup_.agg.dump->Pending()) ContinueSlotDump();
    if (setup_.agg.bypass_dump != nullptr && setup_.agg.bypass_dump->Pending()) ContinueBypassDump();
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
    const uint64_t src48 = SrcMac48(data);
    if (src48 & kMulticastBit) {
      Drop(in_port, DropReason::kSrcMulticast, m);
      continue;
    }
    // Nothing but the switch sends from its own MAC (or, below, its
    // aggregation address): a host that does impersonates it, e.g. forging
    // results to a job's members.
    if (src48 == plan_.switch_mac48()) {
      Drop(in_port, DropReason::kSrcSpoofed, m);
      continue;
    }
    if (setup_.agg.jobs != nullptr && l2.ether_type == kEtherTypeIpv4) {
      const Ipv4Class cls = ClassifyIpv4(data, rte_pktmbuf_data_len(m), l2.l3_offset);
      if (cls == Ipv4Class::kSpoofed) {
        Drop(in_port, DropReason::kSrcSpoofed, m);
        continue;
      }
      if (cls == Ipv4Class::kAggregation) {
        // Set aside; handled after the L2 frames of the burst.
        agg_meta[n_agg] = Meta{vlan, l2.has_tag, static_cast<uint8_t>(l2.l3_offset)};
        agg_pkts[n_agg++] = m;
        continue;
      }
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
    if (verdict == LocalVerdict::kUnhandled && setup_.agg.neighbors != nullptr &&
        ReportNeighbor(in_port, data, len, meta)) {
      rte_pktmbuf_free(m);
      return;
    }
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

bool Worker::ReportNeighbor(uint16_t in_port, const uint8_t* data, uint32_t len, const Meta& meta) {
  if (len < meta.l3_offset + sizeof(ArpHdr)) return false;
  const auto* arp = reinterpret_cast<const ArpHdr*>(data + meta.l3_offset);
  if (arp->oper != kArpOpReply) return false;
  NeighborReport report{Mac48(arp->sha), arp->spa.host(), in_port, meta.vlan};
  if (rte_ring_sp_enqueue_elem(setup_.agg.neighbors, &report, sizeof(report)) == 0) {
    stats_.lcore.agg.neighbor_reports.Add(1);
  }
  return true;
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

Worker::Ipv4Class Worker::ClassifyIpv4(const uint8_t* data, uint32_t len, uint32_t l3_offset) const {
  // Only the fixed IPv4 fields and the UDP destination port; ParseIpv4Udp
  // checks the rest on the aggregation path alone.
  if (len < l3_offset + sizeof(Ipv4Hdr)) return Ipv4Class::kOther;
  const auto* ip = reinterpret_cast<const Ipv4Hdr*>(data + l3_offset);
  const uint32_t src = ip->src.host();
  if (src != 0 && (src == setup_.agg.address || src == setup_.agg.result_src_ip)) {
    return Ipv4Class::kSpoofed;
  }
  if (len < l3_offset + sizeof(Ipv4Hdr) + sizeof(UdpHdr)) return Ipv4Class::kOther;
  if (ip->protocol != kIpProtoUdp) return Ipv4Class::kOther;
  if (setup_.agg.address != 0 && ip->dst.host() == setup_.agg.address) return Ipv4Class::kAggregation;
  const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
  if (len < l3_offset + ihl + sizeof(UdpHdr)) return Ipv4Class::kOther;
  const auto* udp = reinterpret_cast<const UdpHdr*>(data + l3_offset + ihl);
  if (udp->dst_port.host() != setup_.agg.udp_port) return Ipv4Class::kOther;
  if (setup_.agg.address == 0) return Ipv4Class::kAggregation;
  // With an aggregation address, the port trigger takes what workers send to
  // a peer or a parameter node; what a switch or a TAN sends to another
  // switch's address (a TAN below a leaf answering the root) crosses this
  // one at L2 (docs/protocol.md).
  const uint32_t opcode_at = l3_offset + ihl + sizeof(UdpHdr) + offsetof(aggregator::AggHeader, opcode);
  if (len <= opcode_at) return Ipv4Class::kAggregation;  // too short for a header: the parser counts it
  const auto opcode = static_cast<aggregator::Opcode>(data[opcode_at]);
  const bool to_another_switch =
      opcode == aggregator::Opcode::kResult || opcode == aggregator::Opcode::kPartial ||
      opcode == aggregator::Opcode::kLate || opcode == aggregator::Opcode::kNotice ||
      opcode == aggregator::Opcode::kNack;
  return to_another_switch ? Ipv4Class::kOther : Ipv4Class::kAggregation;
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
  d.Begin();
  const aggregator::SlotTable& slots = *setup_.agg.slots;
  const uint32_t end = std::min(slots.size(), d.cursor + SlotDumpEntry::kScanPerPass);
  for (uint32_t i = d.cursor; i < end; ++i) {
    const aggregator::Slot& slot = slots.slot(i);
    if (slot.state() != aggregator::Slot::State::kFree) (void)d.Add(SlotDumpEntry::Of(i, slot));
  }
  d.cursor = end;
  if (end == slots.size()) d.Finish(rte_rdtsc());
}

void Worker::ContinueBypassDump() {
  BypassDumpExchange& d = *setup_.agg.bypass_dump;
  d.Begin();
  d.cursor = setup_.agg.bypass->Dump(
      d.cursor, BypassDumpEntry::kScanPerPass, last_tsc_,
      [&](const aggregator::BypassKey& key, uint64_t expiry) { (void)d.Add({key, expiry}); });
  if (d.cursor == 0) d.Finish(last_tsc_);
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
  switch (opcode) {
    case Opcode::kContribution:
    case Opcode::kPartial:
    case Opcode::kLate:
    case Opcode::kResult:
    case Opcode::kAck:
    case Opcode::kTaskInfo:
      break;
    default:
      c.unsupported.Add(1);
      rte_pktmbuf_free(m);
      return;
  }
  const aggregator::AggHeader& h = *pkt.header;
  const auto header_offset =
      static_cast<uint32_t>(reinterpret_cast<const uint8_t*>(pkt.header) - data);
  // Where answers go. A hand-off was checked where it arrived; its answers
  // (slot outcomes only) use the member's learned address instead.
  const aggregator::MemberAddr sender{Mac48(data + 6), static_cast<uint8_t>(in_port), vlan,
                                      udp.src_ip, udp.src_port};
  const aggregator::Job* job = setup_.agg.jobs->Find(h.job_id.host());
  if (job == nullptr) {
    if (opcode == Opcode::kLate || opcode == Opcode::kResult) {
      c.unknown_jobs.Add(1);  // from a switch or a TAN: nobody to tell
      rte_pktmbuf_free(m);
      return;
    }
    HandleUnknownJob(m, pkt, sender, in_port, vlan, l3_offset, source);
    return;
  }
  const bool from_member = opcode != Opcode::kLate && opcode != Opcode::kResult;
  const int member = from_member ? job->LocalIndex(h.node_id.host()) : -1;
  if (source != AggSource::kHandoff) {
    if (opcode == Opcode::kResult) {
      // Only the job's upstream switch, or at the root its TAN, sends results
      // here: from the address, MAC and port its hop was resolved to. Results
      // carry no key (ChunkFields); where they come from is what counts, as
      // for a member's binding.
      aggregator::MemberAddr hop;
      const bool from_hop =
          job->GetHop(job->is_root() ? aggregator::Job::Hop::kTan : aggregator::Job::Hop::kUpstream,
                      &hop) &&
          udp.src_ip == hop.ip && udp.src_port == hop.udp_port && sender.mac48 == hop.mac48 &&
          in_port == hop.port_index;
      if (!from_hop) {
        c.results_refused.Add(1);
        rte_pktmbuf_free(m);
        return;
      }
    } else if (job->key() != h.job_key.host()) {
      c.key_failures.Add(1);
      setup_.agg.job_counters[job->index()].key_failures.Add(1);
      Nack(m, h, NackReason::kKeyMismatch, sender);
      return;
    }
    if (opcode == Opcode::kLate) {
      // Late data from below: forwarded unreduced (docs/stragglers.md).
      ForwardLate(m, *job, header_offset);
      return;
    }
    if (opcode != Opcode::kResult) {
      if (member < 0) {
        c.rejected.Add(1);
        Nack(m, h, NackReason::kMalformed, sender);
        return;
      }
      const bool task_info =
          opcode == Opcode::kTaskInfo || (h.flags.host() & aggregator::flags::kTaskInfo);
      if (task_info &&
          (h.expected.host() != job->members() || h.node_count.host() != job->nodes())) {
        c.task_info_conflicts.Add(1);
        Nack(m, h, NackReason::kTaskInfoConflict, sender);
        return;
      }
      // The receiving lcore binds the member to where it sends from (or
      // checks it against its binding), then records how far it got.
      const auto index = static_cast<uint16_t>(member);
      switch (job->BindMember(index, sender, SeenNow(), setup_.agg.rebind_ticks)) {
        case aggregator::Job::Bind::kKnown:
        case aggregator::Job::Bind::kBound:
          break;
        case aggregator::Job::Bind::kRebound:
          c.member_rebinds.Add(1);
          break;
        case aggregator::Job::Bind::kRefused:
          c.member_refused.Add(1);
          setup_.agg.job_counters[job->index()].member_refused.Add(1);
          Nack(m, h, NackReason::kMemberBound, sender);
          return;
      }
      (void)job->UpdateAck(index, h.ack_watermark.host());
      if (opcode == Opcode::kAck) {
        c.acks.Add(1);
        if (!job->is_root()) RelayAck(m, *job, header_offset);
        else rte_pktmbuf_free(m);
        return;
      }
      if (opcode == Opcode::kTaskInfo) {
        // Accepted (registered now, or known already): echoed so that the
        // control unit can stop retransmitting it.
        c.task_infos.Add(1);
        Answer(m, h, Opcode::kTaskInfo, NackReason{0}, sender);
        return;
      }
      // A predicted straggler's data is never reduced here: it goes to the
      // TAN, and the member is told to flag it (or to stop flagging it).
      const bool flagged = (h.flags.host() & aggregator::flags::kBypass) != 0;
      const bool excluded = job->Excluded(index);
      if (flagged || excluded) {
        c.late_self_flagged.Add(1);
        if (flagged != excluded) {
          SendNotice(*job, h,
                     excluded ? aggregator::NoticeKind::kSelfFlag : aggregator::NoticeKind::kStopFlag,
                     sender);
        }
        ForwardLate(m, *job, header_offset);
        return;
      }
      // A chunk too far ahead of the job's slowest member would take more
      // slots than the job may hold: refused until the watermark moves.
      if (!job->SeqAllowed(h.seq.host(), SeenNow(), setup_.agg.rebind_ticks)) {
        c.slot_quota_refused.Add(1);
        setup_.agg.job_counters[job->index()].quota_refused.Add(1);
        Nack(m, h, NackReason::kSlotQuota, sender);
        return;
      }
    }
  }
  const uint32_t index = setup_.agg.regions.Of(job->in_band(), job->slot_offset(), h.seq.host());
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
  if (opcode == Opcode::kResult) {
    ResultFromAbove(m, *job, pkt, header_offset);
    return;
  }
  if (member < 0) {  // a hand-off whose job was replaced in between
    c.rejected.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  Contribute(m, *job, pkt, member);
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
      // More registrations than the control thread takes: "not now", like
      // a registration over its rate.
      c.registration_ring_full.Add(1);
      Nack(m, h, aggregator::NackReason::kRateLimited, sender);
    }
    return;
  }
  c.unknown_jobs.Add(1);
  Nack(m, h, aggregator::NackReason::kUnknownJob, sender);
}

void Worker::Answer(rte_mbuf* m, const aggregator::AggHeader& request, aggregator::Opcode opcode,
                    aggregator::NackReason reason, const aggregator::MemberAddr& to) {
  AggregationCounters& c = stats_.lcore.agg;
  if (opcode == aggregator::Opcode::kNack && !AnswerAllowed()) {
    c.nacks_suppressed.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  // The request's header is read before the frame is overwritten. Answers
  // carry no key (ChunkFields).
  aggregator::AggFields f = aggregator::ReadAggFields(request);
  f.job_key = 0;
  f.opcode = opcode;
  f.aux = static_cast<uint32_t>(reason);
  f.elem_count = 0;
  if (opcode == aggregator::Opcode::kNack) f.flags = 0;
  if (SendHeaderOnly(m, f, to) && opcode == aggregator::Opcode::kNack) c.nacks_sent.Add(1);
}

bool Worker::SendHeaderOnly(rte_mbuf* m, const aggregator::AggFields& f,
                            const aggregator::MemberAddr& to) {
  const bool tagged = plan_.EgressTagged(to.port_index, to.vlan);
  const uint32_t hdr_len = tagged ? 46 : 42;
  const uint32_t len = hdr_len + sizeof(aggregator::AggHeader);
  if (m->nb_segs != 1 || len > static_cast<uint32_t>(rte_pktmbuf_data_len(m)) + rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return false;
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
  Enqueue(to.port_index, m);
  return true;
}

namespace {

// What SlotReleasable needs to know: the jobs, and the members' clock.
struct ReleaseContext {
  const aggregator::JobTable* jobs;
  uint32_t now;         // Worker::SeenNow()
  uint32_t gone_ticks;  // WorkerSetup::agg.rebind_ticks
};

// A slot whose job registration is gone may give way at once; a complete one
// also once every member acknowledged its result.
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
  // A result stays until every member, gone or not, has it: a member
  // presumed gone may yet retransmit.
  const std::optional<uint32_t> min_ack = job->MinAck();
  return min_ack && aggregator::SeqBefore(seq, *min_ack) &&
         job->LearnedMembers() == job->members();
}

}  // namespace

void Worker::Contribute(rte_mbuf* m, const aggregator::Job& job, const aggregator::AggPacket& pkt,
                        int member) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  const uint32_t seq = h.seq.host();
  const auto header_offset = static_cast<uint32_t>(reinterpret_cast<const uint8_t*>(pkt.header) -
                                                   rte_pktmbuf_mtod(m, const uint8_t*));
  // Late data that a timeout left a bypass entry for: flagged and on to the TAN.
  if (setup_.agg.bypass != nullptr && setup_.agg.bypass->live() != 0 &&
      MatchBypass(job, seq, member, h.node_id.host())) {
    c.late_flagged.Add(1);
    ForwardLate(m, job, header_offset);
    return;
  }
  aggregator::Contribution contribution;
  contribution.job_id = job.id();
  contribution.job_generation = job.generation();
  contribution.seq = seq;
  contribution.node = static_cast<uint16_t>(member);
  contribution.expected = job.members();
  contribution.needed = static_cast<uint16_t>(job.members() - job.excluded_count());
  contribution.ordered = job.batch() || (h.flags.host() & aggregator::flags::kOrdered);
  contribution.dtype = pkt.dtype;
  contribution.op = pkt.op;
  contribution.scale = h.scale;
  contribution.elem_count = h.elem_count.host();
  contribution.elem_offset = h.aux.host();
  contribution.payload = pkt.payload;
  contribution.timeout_cycles = job.timeout_cycles();
  if (pkt.opcode == aggregator::Opcode::kPartial) {
    c.partials_received.Add(1);
    contribution.missing = pkt.missing;
    contribution.missing_count = h.missing_count;
  }
  JobCounters& jc = setup_.agg.job_counters[job.index()];
  const uint32_t local =
      setup_.agg.regions.Of(job.in_band(), job.slot_offset(), seq) / setup_.agg.n_workers;
  // An ordered slot keeps its contributions until all are in: a copy in a
  // hold buffer, never the mbuf, which RX needs back (hold_buffers.h). The
  // one that completes the slot is reduced at once, from the mbuf.
  contribution.handle = nullptr;
  void* held = nullptr;
  if (contribution.ordered && !setup_.agg.slots->CompletesWith(local, contribution)) {
    HoldBuffers::Refusal why = HoldBuffers::Refusal::kNone;
    if (job.HoldAllowed(seq, SeenNow(), setup_.agg.rebind_ticks)) {
      held = setup_.agg.holds->Take(job, pkt.payload, pkt.payload_len, &why);
    }
    if (held == nullptr) {
      c.hold_refused.Add(1);
      jc.quota_refused.Add(1);
      aggregator::MemberAddr addr;
      if (job.GetMember(contribution.node, &addr)) {
        Nack(m, h, aggregator::NackReason::kHoldQuota, addr);
      } else {
        rte_pktmbuf_free(m);
      }
      return;
    }
    contribution.payload = HoldBuffers::Data(held);
    contribution.handle = held;
  }
  ReleaseContext release{setup_.agg.jobs, SeenNow(), setup_.agg.rebind_ticks};
  const aggregator::SlotUpdate u =
      setup_.agg.slots->Contribute(local, contribution, last_tsc_, SlotReleasable, &release);
  if (u.stale) c.stale_slots.Add(1);
  for (uint16_t i = 0; i < u.n_evicted; ++i) setup_.agg.holds->Give(u.evicted[i]);
  // Held now, or handed back among `released` at completion; else unused.
  if (held != nullptr && u.outcome != aggregator::SlotOutcome::kHeld &&
      u.outcome != aggregator::SlotOutcome::kCompleted) {
    setup_.agg.holds->Give(held);
  }
  bool keep_mbuf = false;
  aggregator::NackReason refused{0};
  switch (u.outcome) {
    case aggregator::SlotOutcome::kHeld:
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
      SampleOffsets(job, *u.slot, false);
      // The slot is done with this contribution: it carries the result.
      keep_mbuf = FinishSlot(job, local, *u.slot, false, m, header_offset);
      RecordCompletion(*u.slot);
      // An ordered slot returns every held contribution, this one included.
      for (uint16_t i = 0; i < u.n_released; ++i) setup_.agg.holds->Give(u.released[i]);
      break;
    case aggregator::SlotOutcome::kDuplicateCompleted:
      c.duplicate_results.Add(1);
      jc.duplicates.Add(1);
      keep_mbuf = SendResult(job, *u.slot, contribution.node, m, header_offset);
      break;
    case aggregator::SlotOutcome::kForwardedAgain:
      // A member that was counted retransmits: the partial (or first data)
      // may have been lost on the way up. The parent answers a repeat with
      // its cached result.
      c.partials_resent.Add(1);
      jc.duplicates.Add(1);
      keep_mbuf = FinishSlot(job, local, *u.slot, false, m, header_offset);
      break;
    case aggregator::SlotOutcome::kLateForwarded:
      c.late_no_entry.Add(1);
      ForwardLate(m, job, header_offset);
      keep_mbuf = true;
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
  aggregator::MemberAddr addr;
  if (refused != aggregator::NackReason{0} && job.GetMember(contribution.node, &addr)) {
    Nack(m, h, refused, addr);
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

aggregator::AggFields Worker::ChunkFields(const aggregator::Job& job, const aggregator::Slot& slot) {
  aggregator::AggFields f;
  f.job_id = job.id();
  f.seq = slot.seq();
  // No job key: what goes to members carries none, so that a result that
  // reaches somebody else (a diverted or flooded copy) gives the key away
  // to nobody. What goes to another switch or the TAN adds it.
  f.elem_count = slot.elem_count();
  f.dtype = slot.dtype();
  f.op = slot.op();
  f.scale = slot.scale();
  f.aux = slot.elem_offset();
  return f;
}

void Worker::WriteResultPayload(const aggregator::Job& job, const aggregator::Slot& slot,
                                uint8_t* buf) const {
  aggregator::AggFields f = ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kResult;
  f.flags = slot.overflow() ? aggregator::flags::kOverflow : 0;
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
  const uint16_t first = node < 0 ? 0 : static_cast<uint16_t>(node);
  const uint16_t last = node < 0 ? job.members() : static_cast<uint16_t>(node + 1);
  rte_mbuf* payload = ResultPayload(job, slot, carrier, header_offset);
  if (payload == nullptr) {
    stats_.lcore.agg.result_no_mbuf.Add(last - first);
    return false;
  }
  Replicate(job, payload, first, last, static_cast<uint16_t>(slot.seq()));
  return payload == carrier;
}

void Worker::Replicate(const aggregator::Job& job, rte_mbuf* payload, uint16_t first, uint16_t last,
                       uint16_t ip_id) {
  AggregationCounters& c = stats_.lcore.agg;
  // Each member's copy is its own header mbuf chained to the one payload,
  // which the copies share by reference count (as DPDK's ipv4_multicast
  // example does): no clone, no second copy of the result.
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
}

// ---------------------------------------------------------------------------
// The tree: partials, late data, results from above (docs/stragglers.md)

namespace {

// The largest UDP payload a 1500-byte MTU carries.
constexpr uint32_t kMaxUdpPayload = 1500 - 20 - 8;
// A missing list holds at most 255 ids (missing_count is one byte).
constexpr uint32_t kMaxMissingIds = 255;
// The node id a root uses in its first data to the TAN.
constexpr uint16_t kRootNodeId = 0xFFFE;
// Timer expiries handled per poll; the rest wait for the next poll.
constexpr uint32_t kExpiriesPerPoll = 64;
// Expired bypass entries swept per sweep.
constexpr uint32_t kBypassSweepBudget = 32;

}  // namespace

bool Worker::MatchBypass(const aggregator::Job& job, uint32_t seq, int member, uint16_t node_id) {
  aggregator::BypassTable& bypass = *setup_.agg.bypass;
  aggregator::BypassKey key{job.id(), job.generation(), seq, node_id};
  bool matched = bypass.Match(key, last_tsc_);
  // A late child switch under variant 2 left entries for the nodes it covers.
  if (member >= 0 && job.IsSwitch(static_cast<uint16_t>(member)) && job.bypass_covered_nodes()) {
    for (const uint16_t covered : job.Covers(static_cast<uint16_t>(member))) {
      key.node = covered;
      matched |= bypass.Match(key, last_tsc_);
    }
  }
  if (matched) stats_.lcore.agg.bypass_matched.Add(1);
  return matched;
}

void Worker::SampleOffsets(const aggregator::Job& job, const aggregator::Slot& slot, bool expired) {
  if (setup_.agg.samples_full == nullptr || (slot.seq() & (kOffsetSampleEvery - 1)) != 0) return;
  void* free_sample = nullptr;
  if (rte_ring_sc_dequeue(setup_.agg.samples_free, &free_sample) != 0) return;
  auto* sample = static_cast<OffsetSample*>(free_sample);
  sample->job_id = job.id();
  sample->job_generation = job.generation();
  sample->seq = slot.seq();
  sample->members = slot.expected();
  const uint64_t waited = (last_tsc_ - slot.first_tsc()) >> aggregator::Slot::kOffsetShift;
  const uint32_t at_expiry = waited > UINT32_MAX ? UINT32_MAX - 1 : static_cast<uint32_t>(waited);
  for (uint16_t i = 0; i < slot.expected(); ++i) {
    if (slot.HasContributed(i)) {
      sample->offsets[i] = slot.arrival_offset(i);
    } else {
      sample->offsets[i] = expired && !job.Excluded(i) ? at_expiry : kOffsetMissing;
    }
  }
  // The ring holds more than the pool has samples: this cannot fail.
  (void)rte_ring_sp_enqueue(setup_.agg.samples_full, sample);
}

uint32_t Worker::CollectMissing(const aggregator::Job& job, const aggregator::Slot& slot,
                                bool entries, uint16_t* out, uint32_t cap) {
  AggregationCounters& c = stats_.lcore.agg;
  uint32_t n = 0;
  bool overflow = false;
  auto add = [&](uint16_t node, bool entry) {
    if (n == cap) {
      overflow = true;
      return;
    }
    out[n++] = node;
    if (!entry || setup_.agg.bypass == nullptr) return;
    switch (setup_.agg.bypass->Insert({job.id(), job.generation(), slot.seq(), node}, last_tsc_)) {
      case aggregator::BypassInsert::kCreated: c.bypass_created.Add(1); break;
      case aggregator::BypassInsert::kRefreshed: break;
      case aggregator::BypassInsert::kFull: c.bypass_full.Add(1); break;
    }
  };
  if (slot.count() != slot.expected()) {
    for (uint16_t i = 0; i < slot.expected(); ++i) {
      if (slot.HasContributed(i)) continue;
      // An excluded member flags its own data, and a member that runs the
      // TAN keeps its own: listed, no entry needed.
      const bool entry = entries && !job.Excluded(i) && job.NodeId(i) != job.tan_member();
      if (job.IsSwitch(i) && job.bypass_covered_nodes()) {
        for (const uint16_t covered : job.Covers(i)) add(covered, entry);
      } else {
        add(job.NodeId(i), entry);
      }
    }
  }
  for (uint16_t i = 0; i < slot.inherited_count(); ++i) add(slot.inherited(i), false);
  return overflow || slot.inherited_overflow() ? UINT32_MAX : n;
}

bool Worker::FinishSlot(const aggregator::Job& job, uint32_t local, const aggregator::Slot& slot,
                        bool expired, rte_mbuf* carrier, uint32_t header_offset) {
  // The common case, a flat root with every member in, skips the scan. A
  // parameter-server job's chunks all go to its TAN, complete or not.
  const bool answer_here = job.is_root() && !job.parameter_server();
  if (answer_here && slot.count() == slot.expected() && slot.inherited_count() == 0 &&
      !slot.inherited_overflow()) {
    return SendResult(job, slot, -1, carrier, header_offset);
  }
  uint16_t missing[kMaxMissingIds];
  const uint32_t n = CollectMissing(job, slot, expired, missing, kMaxMissingIds);
  bool consumed = false;
  if (n == UINT32_MAX) {
    stats_.lcore.agg.missing_list_overflow.Add(1);
    SendIncomplete(job, slot, nullptr, 0);
  } else if (n == 0 && answer_here) {
    return SendResult(job, slot, -1, carrier, header_offset);
  } else {
    consumed = SendPartial(job, slot, missing, n, carrier, header_offset);
  }
  setup_.agg.slots->MarkForwarded(local);
  return consumed;
}

bool Worker::SendPartial(const aggregator::Job& job, const aggregator::Slot& slot,
                         const uint16_t* missing, uint32_t n_missing, rte_mbuf* carrier,
                         uint32_t header_offset) {
  AggregationCounters& c = stats_.lcore.agg;
  const bool root = job.is_root();
  // (A parameter-server job's TAN is remote: the config and JobControl::Tan
  // refuse `self` for it.)
  if (root && job.tan() == aggregator::JobSpec::Tan::kNone) {
    // Nobody can complete this chunk: the members learn it now.
    SendIncomplete(job, slot, missing, n_missing);
    return false;
  }
  const uint32_t len = sizeof(aggregator::AggHeader) + 2 * n_missing + slot.result_len();
  if (len > kMaxUdpPayload) {
    c.missing_list_overflow.Add(1);
    SendIncomplete(job, slot, nullptr, 0);
    return false;
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
      return false;
    }
  }
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  aggregator::AggFields f = ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kPartial;
  f.job_key = job.key();  // the parent switch, or the TAN, checks it
  f.flags = static_cast<uint16_t>((slot.overflow() ? aggregator::flags::kOverflow : 0) |
                                  (slot.ordered() ? aggregator::flags::kOrdered : 0));
  f.node_id = root ? kRootNodeId : job.upstream().node;
  // The parent frees its complete slots, and admits chunks under the slot
  // quota, by its members' watermarks: ours is our slot watermark, the
  // smallest of our current members' (a member presumed gone keeps only our
  // own copy of the results it lacks).
  f.ack_watermark = job.SlotWatermark(SeenNow(), setup_.agg.rebind_ticks).value_or(0);
  (void)aggregator::BuildAggregation(f, missing, static_cast<uint8_t>(n_missing), slot.result(),
                                     slot.result_len(), rte_pktmbuf_mtod(m, uint8_t*), len);
  if (!root) {
    c.partials_sent.Add(1);
    SendToHop(m, job, aggregator::Job::Hop::kUpstream, 0);
  } else {
    c.first_data_sent.Add(1);
    if (job.tan() == aggregator::JobSpec::Tan::kSelf) {
      if (setup_.agg.tan_up == nullptr || rte_ring_sp_enqueue(setup_.agg.tan_up, m) != 0) {
        c.late_no_tan.Add(1);
        rte_pktmbuf_free(m);
      }
    } else {
      SendToHop(m, job, aggregator::Job::Hop::kTan, 0);
    }
  }
  return m == carrier;
}

void Worker::RelayAck(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset) {
  // The parent frees this job's complete slots by our watermark, the
  // smallest of our current members' (SendPartial); partials carry it, and
  // the last chunks of a job, which no partial follows, learn it from here.
  const std::optional<uint32_t> min_ack = job.SlotWatermark(SeenNow(), setup_.agg.rebind_ticks);
  if (!min_ack || job.LearnedMembers() != job.members() || !job.TakeRelayedAck(*min_ack)) {
    rte_pktmbuf_free(m);
    return;
  }
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kAck;
  f.node_id = job.upstream().node;
  f.job_id = job.id();
  f.job_key = job.key();
  f.seq = *min_ack;
  f.ack_watermark = *min_ack;
  // The ACK it answers is the same size: the relay is written over it.
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = sizeof(aggregator::AggHeader);
  m->pkt_len = sizeof(aggregator::AggHeader);
  aggregator::WriteAggHeader(f, 0, rte_pktmbuf_mtod(m, aggregator::AggHeader*));
  stats_.lcore.agg.acks_relayed.Add(1);
  SendToHop(m, job, aggregator::Job::Hop::kUpstream, 0);
}

void Worker::ForwardLate(rte_mbuf* m, const aggregator::Job& job, uint32_t header_offset) {
  AggregationCounters& c = stats_.lcore.agg;
  auto* h = reinterpret_cast<aggregator::AggHeader*>(rte_pktmbuf_mtod(m, uint8_t*) + header_offset);
  h->opcode = static_cast<uint8_t>(aggregator::Opcode::kLate);
  h->flags = common::be16_t::FromHost(h->flags.host() | aggregator::flags::kBypass);
  // The datagram ends where its header says, whatever padding followed it.
  const uint32_t len = sizeof(aggregator::AggHeader) + 2u * h->missing_count +
                       h->elem_count.host() * static_cast<uint32_t>(aggregator::ElementSize(
                                                  static_cast<aggregator::DType>(h->dtype)));
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  if (!job.is_root()) {
    c.late_forwarded.Add(1);
    SendToHop(m, job, aggregator::Job::Hop::kUpstream, 0);
    return;
  }
  switch (job.tan()) {
    case aggregator::JobSpec::Tan::kRemote:
      c.late_forwarded.Add(1);
      SendToHop(m, job, aggregator::Job::Hop::kTan, 0);
      return;
    case aggregator::JobSpec::Tan::kSelf:
      if (setup_.agg.tan_up != nullptr && rte_ring_sp_enqueue(setup_.agg.tan_up, m) == 0) {
        c.late_forwarded.Add(1);
        return;
      }
      break;
    case aggregator::JobSpec::Tan::kNone:
      break;
  }
  c.late_no_tan.Add(1);
  rte_pktmbuf_free(m);
}

void Worker::SendToHop(rte_mbuf* m, const aggregator::Job& job, aggregator::Job::Hop hop,
                       uint32_t header_offset) {
  aggregator::MemberAddr to;
  if (!job.GetHop(hop, &to)) {
    stats_.lcore.agg.unresolved_next_hop.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  if (header_offset != 0) rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  const uint32_t udp_len = rte_pktmbuf_data_len(m);
  const bool tagged = plan_.EgressTagged(to.port_index, to.vlan);
  auto* out = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, tagged ? 46 : 42));
  if (out == nullptr) {
    Drop(to.port_index, DropReason::kNoHeadroom, m);
    return;
  }
  uint8_t dst[6];
  for (int b = 0; b < 6; ++b) dst[b] = static_cast<uint8_t>(to.mac48 >> (40 - 8 * b));
  const auto* h = reinterpret_cast<const aggregator::AggHeader*>(out + (tagged ? 46 : 42));
  WriteUdpHeaders(out, dst, plan_.switch_mac().bytes.data(), tagged ? to.vlan : 0,
                  setup_.agg.result_src_ip, to.ip, setup_.agg.udp_port, to.udp_port,
                  static_cast<uint16_t>(h->seq.host()), udp_len);
  Enqueue(to.port_index, m);
}

void Worker::ResultFromAbove(rte_mbuf* m, const aggregator::Job& job,
                             const aggregator::AggPacket& pkt, uint32_t header_offset) {
  AggregationCounters& c = stats_.lcore.agg;
  const aggregator::AggHeader& h = *pkt.header;
  if (m->nb_segs != 1) {
    c.malformed.Add(1);
    rte_pktmbuf_free(m);
    return;
  }
  c.results_down.Add(1);
  const uint32_t seq = h.seq.host();
  const uint16_t flags = h.flags.host();
  if ((flags & aggregator::flags::kIncomplete) != 0) {
    c.incomplete_results.Add(1);
  } else {
    // Kept for members that retransmit, while the slot still holds the chunk.
    const uint32_t local =
        setup_.agg.regions.Of(job.in_band(), job.slot_offset(), seq) / setup_.agg.n_workers;
    (void)setup_.agg.slots->CacheResult(local, job.id(), job.generation(), seq, pkt.payload,
                                        pkt.payload_len, (flags & aggregator::flags::kOverflow) != 0);
  }
  const uint32_t len = sizeof(aggregator::AggHeader) + 2u * h.missing_count + pkt.payload_len;
  rte_pktmbuf_adj(m, static_cast<uint16_t>(header_offset));
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = len;
  // Members get results without the job's key (ChunkFields).
  rte_pktmbuf_mtod(m, aggregator::AggHeader*)->job_key = common::be64_t{};
  Replicate(job, m, 0, job.members(), static_cast<uint16_t>(seq));
}

void Worker::SendIncomplete(const aggregator::Job& job, const aggregator::Slot& slot,
                            const uint16_t* missing, uint32_t n_missing) {
  AggregationCounters& c = stats_.lcore.agg;
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) {
    c.result_no_mbuf.Add(job.members());
    return;
  }
  // No payload: a worker must not use it. The missing list says who was missing.
  n_missing = std::min(n_missing, kMaxMissingIds);
  const uint32_t len = sizeof(aggregator::AggHeader) + 2 * n_missing;
  auto* buf = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  aggregator::AggFields f = ChunkFields(job, slot);
  f.opcode = aggregator::Opcode::kResult;
  f.flags = aggregator::flags::kIncomplete;
  f.elem_count = 0;
  (void)aggregator::BuildAggregation(f, missing, static_cast<uint8_t>(n_missing), nullptr, 0, buf,
                                     len);
  c.incomplete_results.Add(1);
  Replicate(job, m, 0, job.members(), static_cast<uint16_t>(slot.seq()));
}

bool Worker::AnswerAllowed() {
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
  if (nack_tokens_ == 0) return false;
  --nack_tokens_;
  return true;
}

void Worker::SendNotice(const aggregator::Job& job, const aggregator::AggHeader& request,
                        aggregator::NoticeKind kind, const aggregator::MemberAddr& to) {
  AggregationCounters& c = stats_.lcore.agg;
  if (!AnswerAllowed()) {
    c.nacks_suppressed.Add(1);
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (m == nullptr) return;
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kNotice;
  f.node_id = request.node_id.host();
  f.job_id = job.id();
  f.seq = request.seq.host();
  f.aux = static_cast<uint32_t>(kind);
  if (SendHeaderOnly(m, f, to)) c.notices_sent.Add(1);
}

void Worker::RunTimers() {
  AggregationCounters& c = stats_.lcore.agg;
  aggregator::SlotTable& slots = *setup_.agg.slots;
  uint32_t expired[kExpiriesPerPoll];
  const uint32_t n = slots.Expired(last_tsc_, kExpiriesPerPoll, expired);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t local = expired[i];
    aggregator::SlotUpdate u;
    if (!slots.Expire(local, &u)) continue;
    // The held contributions are reduced into the slot's result: give them back.
    for (uint16_t k = 0; k < u.n_released; ++k) setup_.agg.holds->Give(u.released[k]);
    const aggregator::Slot& slot = *u.slot;
    const aggregator::Job* job = setup_.agg.jobs->Find(slot.job_id());
    if (job == nullptr || job->generation() != slot.job_generation()) {
      slots.Release(local);
      continue;
    }
    c.timeouts.Add(1);
    SampleOffsets(*job, slot, true);
    (void)FinishSlot(*job, local, slot, true, nullptr, 0);
  }
  if (setup_.agg.bypass != nullptr && setup_.agg.bypass->live() != 0) {
    const uint32_t swept = setup_.agg.bypass->Sweep(last_tsc_, kBypassSweepBudget);
    if (swept != 0) c.bypass_expired.Add(swept);
  }
  if (n != 0) FlushTx();
}

void Worker::DrainControl() {
  if (setup_.agg.tan_down != nullptr) {
    // Results of this switch's own TAN: datagrams from the aggregation header on.
    rte_mbuf* pkts[kBurstSize];
    const unsigned n = rte_ring_sc_dequeue_burst(setup_.agg.tan_down,
                                                 reinterpret_cast<void**>(pkts), kBurstSize, nullptr);
    for (unsigned i = 0; i < n; ++i) {
      aggregator::AggPacket pkt;
      const aggregator::Job* job = nullptr;
      if (aggregator::ParseAggregation(rte_pktmbuf_mtod(pkts[i], const uint8_t*),
                                       rte_pktmbuf_data_len(pkts[i]), &pkt) == aggregator::WireError::kOk) {
        job = setup_.agg.jobs->Find(pkt.header->job_id.host());
      }
      if (job == nullptr || pkt.opcode != aggregator::Opcode::kResult) {
        rte_pktmbuf_free(pkts[i]);
        continue;
      }
      ResultFromAbove(pkts[i], *job, pkt, 0);
    }
    if (n) FlushTx();
  }
  if (setup_.agg.control_tx != nullptr) {
    Upcall frames[8];
    const unsigned n =
        rte_ring_sc_dequeue_burst_elem(setup_.agg.control_tx, frames, sizeof(Upcall), 8, nullptr);
    for (unsigned i = 0; i < n; ++i) FloodFromSwitch(frames[i].m, frames[i].vlan);
    if (n) FlushTx();
  }
}

void Worker::FloodFromSwitch(rte_mbuf* m, uint16_t vlan) {
  stats_.lcore.agg.control_tx.Add(1);
  uint64_t mask = plan_.FloodMask(vlan);
  if (mask == 0) {
    rte_pktmbuf_free(m);
    return;
  }
  const Meta meta{vlan, false, kEtherHdrLen};
  while (mask & (mask - 1)) {
    const auto out = static_cast<uint16_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
    if (copy == nullptr) continue;
    if (FitTag(copy, meta, out)) {
      Enqueue(out, copy);
    } else {
      rte_pktmbuf_free(copy);
    }
  }
  const auto out = static_cast<uint16_t>(__builtin_ctzll(mask));
  if (FitTag(m, meta, out)) {
    Enqueue(out, m);
  } else {
    rte_pktmbuf_free(m);
  }
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
