#include "tools/agg-gen/frames.h"

#include <cstring>

#include "dataplane/net_headers.h"
#include "dataplane/packet.h"

namespace aggswitch::tools {

using aggregator::AggHeader;
using aggregator::Opcode;

FrameFactory::FrameFactory(const GenConfig& cfg)
    : cfg_(cfg),
      values_(cfg),
      contribution_len_(kContributionHeadLen + values_.payload_bytes()),
      ack_len_(kUdpHeadersLen + sizeof(AggHeader)),
      worker_mac_(cfg.workers),
      contribution_head_(size_t{cfg.jobs} * cfg.workers),
      ack_hdr_(cfg.workers) {
  for (uint16_t w = 0; w < cfg.workers; ++w) {
    const common::MacAddr mac = WorkerMac(cfg, w);
    worker_mac_[w] = mac;
    const auto write = [&](uint8_t* out, uint32_t udp_payload_len) {
      dataplane::WriteUdpHeaders(out, cfg.switch_mac.bytes.data(), mac.bytes.data(), 0,
                                 WorkerIp(cfg, w), cfg.switch_ip.addr, WorkerPort(cfg, w),
                                 cfg.switch_port, 0, udp_payload_len);
    };
    write(ack_hdr_[w].data(), ack_len_ - kUdpHeadersLen);
    for (uint32_t j = 0; j < cfg.jobs; ++j) {
      ContributionHead& head = contribution_head_[j * cfg.workers + w];
      write(head.data(), contribution_len_ - kUdpHeadersLen);
      aggregator::AggFields f = Fields(Opcode::kContribution, j, w, 0, 0);
      f.elem_count = cfg.elems;
      aggregator::WriteAggHeader(f, 0, reinterpret_cast<AggHeader*>(head.data() + kUdpHeadersLen));
    }
  }
}

aggregator::AggFields FrameFactory::Fields(Opcode opcode, uint32_t job, uint16_t worker,
                                           uint32_t seq, uint32_t ack) const {
  aggregator::AggFields f;
  f.opcode = opcode;
  f.node_id = worker;
  f.job_id = cfg_.job_base + job;
  f.seq = seq;
  f.job_key = cfg_.key;
  f.ack_watermark = ack;
  f.incarnation = cfg_.incarnation;
  f.dtype = cfg_.dtype;
  f.op = cfg_.op;
  if (cfg_.task_info) {
    f.flags = aggregator::flags::kTaskInfo;
    f.expected = cfg_.workers;
    f.node_count = 1;
  }
  return f;
}

void FrameFactory::WriteContribution(uint32_t job, uint16_t worker, uint32_t seq, uint32_t ack,
                                     bool retransmission, uint8_t* out) const {
  std::memcpy(out, contribution_head_[job * cfg_.workers + worker].data(), kContributionHeadLen);
  auto* h = reinterpret_cast<AggHeader*>(out + kUdpHeadersLen);
  h->seq = common::be32_t::FromHost(seq);
  h->ack_watermark = common::be32_t::FromHost(ack);
  if (retransmission) {
    h->flags = common::be16_t::FromHost(h->flags.host() | aggregator::flags::kRetransmission);
  }
  values_.Fill(worker, seq, out + kContributionHeadLen);
}

void FrameFactory::WriteAck(uint32_t job, uint16_t worker, uint32_t ack, uint8_t* out) const {
  std::memcpy(out, ack_hdr_[worker].data(), kUdpHeadersLen);
  const aggregator::AggFields f = Fields(Opcode::kAck, job, worker, 0, ack);
  aggregator::WriteAggHeader(f, 0, reinterpret_cast<AggHeader*>(out + kUdpHeadersLen));
}

bool FrameFactory::IsWorker(uint16_t w, const uint8_t* mac, uint32_t ip) const {
  return ip == WorkerIp(cfg_, w) && std::memcmp(mac, worker_mac_[w].bytes.data(), 6) == 0;
}

Reply FrameFactory::Classify(const uint8_t* frame, uint32_t len) const {
  Reply r;
  dataplane::L2Info l2;
  if (dataplane::ParseL2(frame, len, &l2) != dataplane::ParseStatus::kOk ||
      l2.ether_type != dataplane::kEtherTypeIpv4) {
    return r;
  }
  dataplane::UdpInfo udp;
  // A broken IPv4 or UDP header cannot be attributed to a worker: other.
  if (dataplane::ParseIpv4Udp(frame, len, l2.l3_offset, &udp) != dataplane::UdpParse::kOk) return r;

  const auto* eth = reinterpret_cast<const dataplane::EtherHdr*>(frame);
  const uint32_t first = cfg_.src_port;
  const bool to_worker = udp.dst_port >= first && udp.dst_port < first + cfg_.workers;
  const bool from_worker = udp.dst_port == cfg_.switch_port && udp.src_port >= first &&
                           udp.src_port < first + cfg_.workers;
  if (!to_worker && !from_worker) return r;
  r.worker = static_cast<uint16_t>((to_worker ? udp.dst_port : udp.src_port) - first);
  if (aggregator::ParseAggregation(frame + udp.payload_offset, udp.payload_len, &r.pkt) !=
      aggregator::WireError::kOk) {
    r.kind = ReplyKind::kMalformed;
    r.pkt = aggregator::AggPacket{};  // nothing of it may be read
    return r;
  }
  if (to_worker) {
    // From the switch to the worker: every address must be right.
    if (!IsWorker(r.worker, eth->dst, udp.dst_ip) || udp.src_ip != cfg_.switch_ip.addr ||
        udp.src_port != cfg_.switch_port) {
      r.kind = ReplyKind::kMisaddressed;
    } else if (r.pkt.opcode == Opcode::kResult) {
      r.kind = ReplyKind::kResult;
    } else if (r.pkt.opcode == Opcode::kNack) {
      r.kind = ReplyKind::kNack;
    }
    return r;
  }
  // A worker's own datagram, reflected unchanged.
  if (r.pkt.opcode == Opcode::kContribution) {
    r.kind = IsWorker(r.worker, eth->src, udp.src_ip) && r.pkt.header->node_id.host() == r.worker
                 ? ReplyKind::kEcho
                 : ReplyKind::kMisaddressed;
  }
  return r;
}

}  // namespace aggswitch::tools
