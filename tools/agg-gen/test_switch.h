// Tests only: an in-memory stand-in for aggswitch's aggregation path, so the
// engine's closed loop runs without DPDK. It takes agg-gen's contribution
// frames, reduces each (job, seq) with the reference kernels once `members`
// workers contributed, and returns one RESULT frame per member, addressed as
// the switch addresses them (dataplane::WriteUdpHeaders, aggregator::
// BuildAggregation); a retransmission for a complete chunk gets the result
// again, to its sender only. Every frame it is given is parsed with the dataplane's
// and the wire format's parsers, and a frame that fails them fails the test.
//
//   TestSwitch sw(cfg);
//   std::vector<Frame> results = sw.Receive(frame_bytes);
//
// Thread safety: none; one test thread.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "aggregator/reduce.h"
#include "aggregator/wire.h"
#include "dataplane/net_headers.h"
#include "dataplane/packet.h"
#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

using Frame = std::vector<uint8_t>;

class TestSwitch {
 public:
  explicit TestSwitch(const GenConfig& cfg) : cfg_(cfg), members_(cfg.workers) {}

  // Reduces over this many members instead of cfg.workers (a job declared
  // with fewer members than the generator emulates).
  void set_members(uint16_t members) { members_ = members; }

  // A contribution in, the results it completes out (none, or one per member).
  std::vector<Frame> Receive(const Frame& frame) {
    std::vector<Frame> out;
    dataplane::L2Info l2;
    dataplane::UdpInfo udp;
    aggregator::AggPacket pkt;
    const auto len = static_cast<uint32_t>(frame.size());
    EXPECT_EQ(dataplane::ParseL2(frame.data(), len, &l2), dataplane::ParseStatus::kOk);
    EXPECT_EQ(dataplane::ParseIpv4Udp(frame.data(), len, l2.l3_offset, &udp),
              dataplane::UdpParse::kOk);
    EXPECT_EQ(
        aggregator::ParseAggregation(frame.data() + udp.payload_offset, udp.payload_len, &pkt),
        aggregator::WireError::kOk);
    if (pkt.header == nullptr) return out;
    const aggregator::AggHeader& h = *pkt.header;
    ++received_;
    if (pkt.opcode == aggregator::Opcode::kAck) {
      acks_[{h.job_id.host(), h.node_id.host()}] = h.ack_watermark.host();
      return out;
    }
    EXPECT_EQ(pkt.opcode, aggregator::Opcode::kContribution);
    const uint16_t node = h.node_id.host();
    if (node >= members_) return out;  // as the switch: counted and dropped
    Chunk& c = chunks_[{h.job_id.host(), h.seq.host()}];
    aggregator::AggFields f = aggregator::ReadAggFields(h);
    f.opcode = aggregator::Opcode::kResult;
    f.flags = 0;
    f.node_id = 0;
    f.ack_watermark = 0;
    f.job_key = 0;  // as aggswitch: results carry no key
    if (!c.seen.insert(node).second) {
      // A retransmission: a complete chunk answers it from its result.
      if (c.done) out.push_back(Result(f, c.result, node));
      return out;
    }
    if (c.seen.size() == 1) {
      c.acc.resize(pkt.payload_len);
      aggregator::reference::LoadFirst(pkt.dtype, pkt.payload, h.elem_count.host(), c.acc.data());
    } else {
      (void)aggregator::reference::Accumulate(pkt.dtype, pkt.op, c.acc.data(), pkt.payload,
                                              h.elem_count.host());
    }
    if (c.seen.size() < members_) return out;
    c.done = true;
    c.result.resize(pkt.payload_len);
    aggregator::reference::StoreResult(pkt.dtype, c.acc.data(), h.elem_count.host(),
                                       c.result.data());
    for (uint16_t m = 0; m < members_; ++m) out.push_back(Result(f, c.result, m));
    return out;
  }

  // The RESULT frame for member m, addressed as aggswitch addresses it.
  Frame Result(const aggregator::AggFields& f, const Frame& payload, uint16_t m) const {
    Frame frame(dataplane::kEtherHdrLen + 20 + 8 + sizeof(aggregator::AggHeader) + payload.size());
    const uint32_t n = aggregator::BuildAggregation(
        f, nullptr, 0, payload.data(), static_cast<uint32_t>(payload.size()), frame.data() + 42,
        static_cast<uint32_t>(frame.size() - 42));
    EXPECT_EQ(n, frame.size() - 42);
    dataplane::WriteUdpHeaders(frame.data(), WorkerMac(cfg_, m).bytes.data(),
                               cfg_.switch_mac.bytes.data(), 0, cfg_.switch_ip.addr,
                               WorkerIp(cfg_, m), cfg_.switch_port, WorkerPort(cfg_, m), 0, n);
    return frame;
  }

  uint64_t received() const { return received_; }
  // The last ACK watermark of (job id, node), or -1.
  int64_t ack(uint32_t job_id, uint16_t node) const {
    const auto it = acks_.find({job_id, node});
    return it == acks_.end() ? -1 : it->second;
  }

 private:
  struct Chunk {
    std::set<uint16_t> seen;
    Frame acc;
    Frame result;
    bool done = false;
  };
  GenConfig cfg_;
  uint16_t members_;
  uint64_t received_ = 0;
  std::map<std::pair<uint32_t, uint32_t>, Chunk> chunks_;
  std::map<std::pair<uint32_t, uint16_t>, uint32_t> acks_;
};

}  // namespace aggswitch::tools
