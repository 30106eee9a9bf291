#include "dataplane/l2_stage.h"

#include <cstring>

#include "dataplane/packet.h"

namespace aggswitch::dataplane {
namespace {

constexpr uint64_t kMulticastBit = uint64_t{1} << 40;  // I/G bit of a MAC as Mac48()
constexpr uint64_t kBroadcast48 = 0xffffffffffffULL;

}  // namespace

void L2Stage::Process(uint16_t in_port, const L2Vector& v, uint32_t now_tick) {
  const uint16_t k = v.n;
  if (k == 0) return;
  // One bulk lookup of every source and destination. Frames of one
  // conversation tend to arrive back to back, so a frame with the same
  // (source, destination) as the one before it reuses that lookup, as VPP's
  // L2 nodes reuse their previous key: run[j] is the lookup frame j uses.
  uint64_t keys[2 * kBurstSize];  // run sources in [0, runs), run destinations in [runs, 2 * runs)
  uint16_t run[kBurstSize];
  uint16_t runs = 0;
  for (uint16_t j = 0; j < k; ++j) {
    if (j > 0 && v.src[j] == v.src[j - 1] && v.dst[j] == v.dst[j - 1]) {
      run[j] = run[j - 1];
      continue;
    }
    run[j] = runs;
    keys[runs] = v.src[j];
    keys[kBurstSize + runs] = v.dst[j];
    ++runs;
  }
  std::memmove(&keys[runs], &keys[kBurstSize], runs * sizeof(uint64_t));
  MacTable::Hit hits[2 * kBurstSize];
  macs_.LookupBulk(keys, 2 * runs, hits);

  // Learn (once per run), answer, forward. A member of an uplink group
  // learns, and hairpins, as its group.
  const UplinkGroups& groups = plan_.groups();
  const uint16_t learn_port = groups.LearnPort(in_port);
  for (uint16_t j = 0; j < k; ++j) {
    const uint16_t r = run[j];
    if (j == 0 || r != run[j - 1]) {
      const MacTable::Hit& src_hit = hits[r];
      if (src_hit.port == learn_port) {
        macs_.Touch(src_hit.slot, now_tick);
      } else {
        RequestLearn(v.src[j], learn_port, now_tick);
      }
    }
    rte_mbuf* m = v.m[j];
    const FrameMeta& meta = v.meta[j];
    const uint64_t dst48 = MacKeyMac(v.dst[j]);
    if (dst48 & kMulticastBit) {
      if (!own_.Handle(in_port, m, meta, dst48 == kBroadcast48)) Flood(in_port, m, meta);
    } else if (dst48 == plan_.switch_mac48()) {
      if (!own_.Handle(in_port, m, meta, false)) Flood(in_port, m, meta);
    } else {
      uint16_t out = hits[runs + r].port;
      if (out == kNoPort) {
        Flood(in_port, m, meta);
      } else if (out == learn_port) {
        tx_.Drop(in_port, DropReason::kHairpin, m);
      } else {
        if (groups.InGroup(out)) {
          const UplinkGroups::Member member =
              groups.Pick(out, FrameFlow(m, meta.l3_offset, v.src[j], v.dst[j]));
          out = member.port;
          PortCounters& c = stats_.ports[out];
          (member.decided ? c.uplink_decided_packets : c.uplink_hashed_packets).Add(1);
        }
        Forward(in_port, m, meta, out);
      }
    }
  }
}

void L2Stage::Forward(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta, uint16_t out_port) {
  if (!FitTag(m, meta, out_port)) {
    tx_.Drop(in_port, DropReason::kNoHeadroom, m);
    return;
  }
  tx_.Enqueue(out_port, m);
}

void L2Stage::Flood(uint16_t in_port, rte_mbuf* m, const FrameMeta& meta) {
  // Never back into the group the frame came from, and through one member
  // of each other group.
  const UplinkGroups& groups = plan_.groups();
  uint64_t mask = plan_.FloodMask(meta.vlan) & ~(groups.SameGroup(in_port) | groups.NonFlooding());
  if (mask == 0) {
    tx_.Drop(in_port, DropReason::kNoEgress, m);
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
      tx_.CountDrop(in_port, DropReason::kNoMbuf);
      continue;
    }
    Forward(in_port, copy, meta, out);
  }
  Forward(in_port, m, meta, static_cast<uint16_t>(__builtin_ctzll(mask)));
}

bool L2Stage::FitTag(rte_mbuf* m, const FrameMeta& meta, uint16_t out_port) {
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

void L2Stage::FloodFromSwitch(rte_mbuf* m, uint16_t vlan) {
  stats_.lcore.agg.control_tx.Add(1);
  uint64_t mask = plan_.FloodMask(vlan) & ~plan_.groups().NonFlooding();
  if (mask == 0) {
    rte_pktmbuf_free(m);  // nowhere to go: the control thread's own frame, no port's drop
    return;
  }
  const FrameMeta meta{vlan, false, kEtherHdrLen};
  while (mask & (mask - 1)) {
    const auto out = static_cast<uint16_t>(__builtin_ctzll(mask));
    mask &= mask - 1;
    rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
    if (copy == nullptr) continue;
    if (FitTag(copy, meta, out)) {
      tx_.Enqueue(out, copy);
    } else {
      rte_pktmbuf_free(copy);
    }
  }
  const auto out = static_cast<uint16_t>(__builtin_ctzll(mask));
  if (FitTag(m, meta, out)) {
    tx_.Enqueue(out, m);
  } else {
    rte_pktmbuf_free(m);
  }
}

void L2Stage::RequestLearn(uint64_t key, uint16_t port, uint32_t now_tick) {
  RecentLearn& recent = recent_learn_[(key * 0x9e3779b97f4a7c15ULL) >> 56];
  if (recent.key == key && recent.port == port && recent.tick == now_tick) return;
  recent = RecentLearn{key, now_tick, port};
  learn_[n_learn_++] = LearnRequest{key, port, {0, 0, 0}};
}

void L2Stage::FlushLearn() {
  if (n_learn_ == 0) return;
  const unsigned queued =
      rte_ring_sp_enqueue_burst_elem(learn_ring_, learn_, sizeof(LearnRequest), n_learn_, nullptr);
  stats_.lcore.learn_requests.Add(queued);
  if (queued < n_learn_) stats_.lcore.learn_ring_full.Add(n_learn_ - queued);
  n_learn_ = 0;
}

}  // namespace aggswitch::dataplane
