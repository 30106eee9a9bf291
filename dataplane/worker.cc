#include "dataplane/worker.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_prefetch.h>

#include <cstring>

namespace aggswitch::dataplane {
namespace {

constexpr uint64_t kMulticastBit = uint64_t{1} << 40;  // I/G bit of a MAC as Mac48()
constexpr uint64_t kBroadcast48 = 0xffffffffffffULL;

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
      quit_(quit) {}

int Worker::LaunchEntry(void* arg) {
  static_cast<Worker*>(arg)->Run();
  return 0;
}

void Worker::Run() {
  last_tsc_ = rte_rdtsc();
  while (!quit_.load(std::memory_order_relaxed)) PollOnce();
}

void Worker::PollOnce() {
  if (last_tsc_ == 0) last_tsc_ = rte_rdtsc();
  uint64_t busy = 0, idle = 0, busy_packets = 0;
  for (uint16_t i = 0; i < setup_.n_rx; ++i) {
    const WorkerSetup::Rx& rx = setup_.rx[i];
    rte_mbuf* pkts[kBurstSize];
    const uint16_t n = rte_eth_rx_burst(setup_.port_ids[rx.port_index], rx.queue, pkts, kBurstSize);
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
    src[k] = MacKey(vlan, src48);
    dst[k] = MacKey(vlan, DstMac48(data));
    meta[k] = Meta{vlan, l2.has_tag, static_cast<uint8_t>(l2.l3_offset)};
    kept[k++] = m;
  }
  in.rx_packets.Add(n);
  in.rx_bytes.Add(rx_bytes);
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
  tx_[out_port][tx_count_[out_port]++] = m;
  tx_bytes_[out_port] += m->pkt_len;
  tx_dirty_ |= uint64_t{1} << out_port;
}

void Worker::FlushTx() {
  while (tx_dirty_) {
    const uint16_t p = static_cast<uint16_t>(__builtin_ctzll(tx_dirty_));
    tx_dirty_ &= tx_dirty_ - 1;
    const uint16_t count = tx_count_[p];
    uint64_t bytes = tx_bytes_[p];
    const uint16_t sent = rte_eth_tx_burst(setup_.port_ids[p], setup_.tx_queue, tx_[p], count);
    if (sent < count) {
      for (uint16_t i = sent; i < count; ++i) {
        bytes -= tx_[p][i]->pkt_len;
        rte_pktmbuf_free(tx_[p][i]);
      }
      stats_.ports[p].drops[static_cast<size_t>(DropReason::kTxFull)].Add(count - sent);
    }
    stats_.ports[p].tx_packets.Add(sent);
    stats_.ports[p].tx_bytes.Add(bytes);
    tx_count_[p] = 0;
    tx_bytes_[p] = 0;
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
