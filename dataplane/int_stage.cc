#include "dataplane/int_stage.h"

#include <rte_cycles.h>
#include <rte_mbuf_dyn.h>

#include <algorithm>
#include <cstring>

#include "aggregator/wire.h"
#include "dataplane/net_headers.h"
#include "dataplane/packet.h"
#include "telemetry/int_frame.h"

namespace aggswitch::dataplane {
namespace {

constexpr uint32_t kUdpHdrLen = 8;

uint16_t InstructionBits(config::IntInstructions set) {
  switch (set) {
    case config::IntInstructions::kLatency:
      return telemetry::instr::kLatencySet;
    case config::IntInstructions::kBandwidth:
      return telemetry::instr::kBandwidthSet;
    case config::IntInstructions::kBoth:
      return telemetry::instr::kBothSets;
  }
  return telemetry::instr::kLatencySet;
}

uint32_t Mask(uint8_t length) { return length == 0 ? 0 : ~uint32_t{0} << (32 - length); }

uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// The IPv4 header of a whole, unfragmented UDP datagram at `l3` of a frame
// of `len` bytes, and its UDP header; false for anything else.
bool LocateUdp(const uint8_t* data, uint32_t len, uint32_t l3, const uint8_t** ip,
               const uint8_t** udp) {
  if (len < l3 + sizeof(Ipv4Hdr)) return false;
  const uint8_t* p = data + l3;
  const uint32_t ihl = (p[0] & 0x0Fu) * 4u;
  if ((p[0] >> 4) != 4 || ihl < 20 || p[9] != kIpProtoUdp) return false;
  if ((Get16(p + 6) & 0x3FFF) != 0) return false;  // a fragment
  if (len < l3 + ihl + kUdpHdrLen) return false;
  *ip = p;
  *udp = p + ihl;
  return true;
}

// The datagram's fixed IPv4 header and UDP header as its sender wrote them,
// for a report: `int_bytes` of INT it carries now taken off both lengths
// (the IPv4 header checksum following), and `port` as the destination. The
// UDP checksum is the one on the link. IPv4 options are left out.
void CopyOriginalHeaders(const uint8_t* ip, size_t int_bytes, uint16_t port, uint8_t* out) {
  std::memcpy(out, ip, 20);
  std::memcpy(out + 20, ip + (ip[0] & 0x0Fu) * 4u, 8);
  const auto put16 = [out](size_t at, uint16_t v) {
    out[at] = static_cast<uint8_t>(v >> 8);
    out[at + 1] = static_cast<uint8_t>(v);
  };
  out[0] = 0x45;
  const uint16_t total = Get16(out + 2);
  const auto original_total = static_cast<uint16_t>(total - int_bytes - ((ip[0] & 0x0Fu) * 4u - 20));
  put16(2, original_total);
  uint16_t checksum = telemetry::ChecksumAfter(Get16(out + 10), Get16(ip), Get16(out));
  put16(10, telemetry::ChecksumAfter(checksum, total, original_total));
  put16(24, static_cast<uint16_t>(Get16(out + 24) - int_bytes));
  put16(22, port);
}

}  // namespace

std::unique_ptr<const WatchList> WatchList::Build(const std::vector<config::WatchEntry>& entries,
                                                  uint16_t agg_udp_port) {
  auto list = std::make_unique<WatchList>();
  list->agg_udp_port_ = agg_udp_port;
  for (const config::WatchEntry& e : entries) {
    Rule r;
    if (e.src) {
      r.src_mask = Mask(e.src->length);
      r.src = e.src->ip.addr & r.src_mask;
    }
    if (e.dst) {
      r.dst_mask = Mask(e.dst->length);
      r.dst = e.dst->ip.addr & r.dst_mask;
    }
    r.match_job = e.job.has_value();
    r.job = e.job.value_or(0);
    r.vlan = e.vlan;
    r.port = e.port;
    r.instructions = InstructionBits(e.instructions);
    list->rules_.push_back(r);
    const uint32_t sample = std::max<uint32_t>(1, e.sample);
    list->base_ = list->base_ == 0 ? sample : std::min(list->base_, sample);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    // 1 in `every` picked frames, picked at 1 in base: 1 in sample in all.
    list->rules_[i].every = std::max<uint32_t>(1, std::max<uint32_t>(1, entries[i].sample) / list->base_);
  }
  return list;
}

uint32_t WatchList::Match(const uint8_t* ip, const uint8_t* l4, const uint8_t* end,
                          uint16_t vlan) const {
  const uint32_t src = Get32(ip + 12);
  const uint32_t dst = Get32(ip + 16);
  const uint16_t sport = Get16(l4);
  const uint16_t dport = Get16(l4 + 2);
  for (uint32_t i = 0; i < rules_.size(); ++i) {
    const Rule& r = rules_[i];
    if ((src & r.src_mask) != r.src || (dst & r.dst_mask) != r.dst) continue;
    if (r.vlan != 0 && r.vlan != vlan) continue;
    if (r.port != 0 && r.port != sport && r.port != dport) continue;
    if (r.match_job) {
      // A datagram of the aggregation protocol, to or from its port, naming the job.
      if (sport != agg_udp_port_ && dport != agg_udp_port_) continue;
      const uint8_t* job_at = l4 + kUdpHdrLen + offsetof(aggregator::AggHeader, job_id);
      if (job_at + 4 > end || Get32(job_at) != r.job) continue;
    }
    return i;
  }
  return kNoMatch;
}

common::Status IntMark::Register() {
  static const rte_mbuf_dynfield field = {"aggswitch_int_mark", sizeof(IntMark),
                                          alignof(IntMark), 0};
  static const rte_mbuf_dynflag bit = {"aggswitch_int_marked", 0};
  const int at = rte_mbuf_dynfield_register(&field);
  if (at < 0) return common::Internal("cannot register the INT mbuf field");
  const int b = rte_mbuf_dynflag_register(&bit);
  if (b < 0) return common::Internal("cannot register the INT mbuf flag");
  offset = at;
  flag = uint64_t{1} << b;
  return common::Status::Ok();
}

IntStage::IntStage(const IntSettings& settings, uint16_t worker_index, LcoreStats& stats,
                   rte_ring* records, const common::Clock& clock)
    : settings_(settings),
      clock_(clock),
      worker_index_(worker_index),
      stats_(stats),
      records_(records),
      rng_(0x9e3779b97f4a7c15ULL * (worker_index + 1)) {}

uint32_t IntStage::NextCountdown(uint32_t base) {
  if (base <= 1) return 1;
  // xorshift64: uniform in [1, 2 * base - 1], mean `base`.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return 1 + static_cast<uint32_t>(rng_ % (2 * uint64_t{base} - 1));
}

void IntStage::Pick(rte_mbuf* m, const uint8_t* data, uint32_t len, uint32_t l3, bool ipv4,
                    uint16_t vlan) {
  const WatchList* watch = settings_.watch.load(std::memory_order_acquire);
  if (watch == nullptr || watch->base() == 0) {
    countdown_ = 4096;  // nothing to watch: look again later (a list may be published)
    return;
  }
  countdown_ = NextCountdown(watch->base());
  if (counted_for_ != watch) {
    counted_for_ = watch;
    for (uint32_t i = 0; i < watch->size(); ++i) rule_countdown_[i] = watch->rule(i).every;
  }
  const uint8_t* ip;
  const uint8_t* udp;
  if (!ipv4 || !LocateUdp(data, len, l3, &ip, &udp)) return;
  const uint32_t i = watch->Match(ip, udp, data + len, vlan);
  if (i == WatchList::kNoMatch) return;
  if (--rule_countdown_[i] != 0) return;
  rule_countdown_[i] = watch->rule(i).every;
  stats_.lcore.int_.watched.Add(1);
  Mark(m, watch->rule(i).instructions, false);
}

bool IntStage::OnFabric(rte_mbuf* m, const uint8_t* data, uint32_t len, uint32_t l3) {
  const uint8_t* ip;
  const uint8_t* udp;
  if (!LocateUdp(data, len, l3, &ip, &udp) || Get16(udp + 2) != settings_.int_port) return true;
  telemetry::IntView view;
  const size_t ip_len = Get16(ip + 2);
  if (ip_len > len - l3 ||
      telemetry::ViewInt(const_cast<uint8_t*>(ip), ip_len, settings_.int_port, &view) !=
          telemetry::FrameError::kNone) {
    return false;
  }
  stats_.lcore.int_.transit.Add(1);
  const uint32_t dst = Get32(ip + 16);
  if (settings_.aggregation && view.shim->original_port.host() == settings_.agg_udp_port &&
      (settings_.agg_address == 0 || dst == settings_.agg_address)) {
    EndHere(m, const_cast<uint8_t*>(ip), ip_len);
    return true;
  }
  Mark(m, view.md->instructions.host(), true);
  return true;
}

void IntStage::EndHere(rte_mbuf* m, uint8_t* ip, size_t ip_len) {
  telemetry::HopTaken taken;
  const size_t before = ip_len;
  const bool counted = telemetry::TakeHop(ip, ip_len, &taken) == telemetry::FrameError::kNone;
  if (telemetry::StripInt(ip, &ip_len) == telemetry::FrameError::kNone) {
    rte_pktmbuf_trim(m, static_cast<uint16_t>(before - ip_len));
    stats_.lcore.int_.stripped.Add(1);
  }
  if (!counted) {
    stats_.lcore.int_.hops_exhausted.Add(1);
    return;
  }
  IntHopRecord r{};
  r.latency_cycles = clock_.Cycles() - rx_tsc_;
  r.source_node = taken.source_node;
  r.path_seq = taken.path_seq;
  r.hop_index = taken.hop_index;
  r.instructions = taken.instructions;
  r.in_port = in_port_;
  r.out_port = kIntLocalPort;
  r.last_hop = 1;
  CopyOriginalHeaders(ip, 0, taken.original_port, r.inner);
  Queue(r);
}

void IntStage::Queue(const IntHopRecord& r) {
  if (n_pending_ == std::size(pending_)) FlushRecords();
  pending_[n_pending_++] = r;
}

void IntStage::Mark(rte_mbuf* m, uint16_t instructions, bool transit) {
  m->ol_flags |= IntMark::flag;
  IntMark* mark = IntMark::Of(m);
  mark->rx_tsc = rx_tsc_;
  mark->in_port = in_port_;
  mark->instructions = instructions;
  mark->transit = transit ? 1 : 0;
  marked_ = true;
}

int64_t IntStage::OnTx(uint16_t port, rte_mbuf* const* frames, uint16_t n) {
  uint64_t now = 0;
  int64_t grew = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (!IntMark::Marked(frames[i])) continue;
    if (now == 0) now = clock_.Cycles();
    const uint32_t before = frames[i]->pkt_len;
    OneOnTx(port, frames[i], i, now);
    grew += int64_t{frames[i]->pkt_len} - before;
  }
  return grew;
}

void IntStage::OneOnTx(uint16_t port, rte_mbuf* m, uint32_t ahead, uint64_t now) {
  m->ol_flags &= ~IntMark::flag;
  const IntMark mark = *IntMark::Of(m);
  const bool out_fabric = ((settings_.fabric_ports >> port) & 1) != 0;
  if (m->nb_segs != 1) {
    stats_.lcore.int_.no_room.Add(1);
    return;
  }
  auto* data = rte_pktmbuf_mtod(m, uint8_t*);
  L2Info l2;
  if (ParseL2(data, m->data_len, &l2) != ParseStatus::kOk || l2.ether_type != kEtherTypeIpv4) return;
  uint8_t* ip = data + l2.l3_offset;
  size_t ip_len = Get16(ip + 2);
  if (ip_len > m->data_len - l2.l3_offset) return;

  IntHopRecord r{};
  r.latency_cycles = now - mark.rx_tsc;
  r.queue_occupancy = ahead;
  r.instructions = mark.instructions;
  r.in_port = mark.in_port;
  r.out_port = port;
  r.last_hop = out_fabric ? 0 : 1;
  if (mark.transit == 0) {
    r.source_node = settings_.node_id;
    r.path_seq = next_seq_++ * settings_.n_workers + worker_index_;
    r.hop_index = 1;
    CopyOriginalHeaders(ip, 0, Get16(ip + (ip[0] & 0x0Fu) * 4u + 2), r.inner);
    if (out_fabric) {
      const size_t room = std::min<size_t>(size_t{m->data_len} - l2.l3_offset + rte_pktmbuf_tailroom(m),
                                            settings_.ip_mtu[port]);
      if (telemetry::InsertInt(ip, &ip_len, room,
                               {settings_.int_port, mark.instructions, settings_.max_hops,
                                r.source_node, r.path_seq}) != telemetry::FrameError::kNone) {
        stats_.lcore.int_.no_room.Add(1);
        return;
      }
      // The frame ends where the datagram now does (any Ethernet padding
      // was overwritten); the datagram fits the buffer, InsertInt checked.
      const size_t frame_len = l2.l3_offset + ip_len;
      if (frame_len > m->data_len) {
        rte_pktmbuf_append(m, static_cast<uint16_t>(frame_len - m->data_len));
      } else {
        rte_pktmbuf_trim(m, static_cast<uint16_t>(m->data_len - frame_len));
      }
      // The first hop counts itself off the budget it just wrote.
      telemetry::HopTaken taken;
      (void)telemetry::TakeHop(ip, ip_len, &taken);
      stats_.lcore.int_.inserted.Add(1);
    }
  } else {
    telemetry::HopTaken taken;
    const size_t before = ip_len;
    const bool counted = telemetry::TakeHop(ip, ip_len, &taken) == telemetry::FrameError::kNone;
    // Out an edge port INT goes, spent or not: the host gets the original.
    if (!out_fabric && telemetry::StripInt(ip, &ip_len) == telemetry::FrameError::kNone) {
      rte_pktmbuf_trim(m, static_cast<uint16_t>(before - ip_len));
      stats_.lcore.int_.stripped.Add(1);
    }
    if (!counted) {
      stats_.lcore.int_.hops_exhausted.Add(1);  // flag E set (a malformed one was dropped at RX)
      return;
    }
    r.source_node = taken.source_node;
    r.path_seq = taken.path_seq;
    r.hop_index = taken.hop_index;
    r.instructions = taken.instructions;
    CopyOriginalHeaders(ip, out_fabric ? telemetry::kInsertedBytes : 0,
                        taken.original_port, r.inner);
  }
  Queue(r);
}

void IntStage::FlushRecords() {
  if (n_pending_ == 0) return;
  const unsigned queued = records_ == nullptr
                              ? 0
                              : rte_ring_sp_enqueue_burst_elem(records_, pending_, sizeof(IntHopRecord),
                                                               n_pending_, nullptr);
  stats_.lcore.int_.exported.Add(queued);
  if (queued < n_pending_) stats_.lcore.int_.records_lost.Add(n_pending_ - queued);
  n_pending_ = 0;
}

}  // namespace aggswitch::dataplane
