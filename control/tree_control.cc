#include "control/tree_control.h"

#include <algorithm>
#include <cstring>

#include "aggregator/wire.h"
#include "dataplane/dataplane.h"
#include "dataplane/net_headers.h"

namespace aggswitch::control {

using aggregator::Job;
using aggregator::JobSpec;
using Clock = std::chrono::steady_clock;

TreeControl::TreeControl(dataplane::Dataplane& dp, aggregator::JobTable& table, Options options)
    : dp_(dp), table_(table), options_(std::move(options)), tan_(options_.tan) {}

TreeControl::~TreeControl() = default;

void TreeControl::SendArpRequest(uint32_t ip, uint16_t vlan) {
  uint8_t frame[sizeof(dataplane::EtherHdr) + sizeof(dataplane::ArpHdr)] = {};
  auto* eth = reinterpret_cast<dataplane::EtherHdr*>(frame);
  std::memset(eth->dst, 0xff, 6);
  std::memcpy(eth->src, options_.switch_mac.bytes.data(), 6);
  eth->ether_type = dataplane::kEtherTypeArp;
  auto* arp = reinterpret_cast<dataplane::ArpHdr*>(frame + sizeof(dataplane::EtherHdr));
  arp->htype = dataplane::kArpHtypeEthernet;
  arp->ptype = dataplane::kEtherTypeIpv4;
  arp->hlen = 6;
  arp->plen = 4;
  arp->oper = dataplane::kArpOpRequest;
  std::memcpy(arp->sha, options_.switch_mac.bytes.data(), 6);
  arp->spa = common::be32_t::FromHost(options_.own_ip);
  arp->tpa = common::be32_t::FromHost(ip);
  if (vlan != 0) {
    if (dp_.SendFromSwitch(frame, sizeof(frame), vlan)) ++arp_requests_;
    return;
  }
  for (const uint16_t v : options_.vlans) {
    if (dp_.SendFromSwitch(frame, sizeof(frame), v)) ++arp_requests_;
  }
}

void TreeControl::Resolve(const Job& job, uint32_t hop, uint32_t ip, uint16_t udp_port,
                          uint16_t vlan, Clock::time_point now) {
  Neighbor& n = neighbors_[ip];
  if (n.resolved) {
    aggregator::MemberAddr want{n.mac48, static_cast<uint8_t>(n.port_index), n.vlan, ip, udp_port};
    aggregator::MemberAddr have;
    const bool known = hop == job.main_server_hop() ? job.GetMainServer(&have) : job.GetHop(hop, &have);
    if (!known || have.mac48 != want.mac48 || have.port_index != want.port_index ||
        have.vlan != want.vlan || have.ip != ip || have.udp_port != udp_port) {
      job.SetHop(hop, want);
    }
  }
  // An unanswered request goes again soon, then less often (10 ms,
  // doubling, up to arp_retry), and the scan comes back for it then: until
  // a hop is resolved, what goes there is dropped (unresolved_next_hop), and
  // a lost first request or a neighbour that was not up yet must cost
  // milliseconds, not a scan interval.
  const auto retry = [&] {
    return std::min<std::chrono::milliseconds>(
        options_.arp_retry, kFirstArpRetry * (1u << std::min<uint32_t>(n.unanswered, 7)));
  };
  const auto due = n.resolved ? options_.arp_refresh : retry();
  if (now - n.requested_at >= due) {
    if (!n.resolved && n.requests != 0) ++n.unanswered;
    n.requested_at = now;
    ++n.requests;
    SendArpRequest(ip, vlan != 0 ? vlan : options_.own_vlan);
  }
  if (!n.resolved && n.requested_at + retry() < retry_due_) retry_due_ = n.requested_at + retry();
}

void TreeControl::Poll(Clock::time_point now) {
  bool learned = false;
  dp_.ProcessNeighborReports([&](const dataplane::NeighborReport& r) {
    const auto it = neighbors_.find(r.ip);
    if (it == neighbors_.end()) return;  // an answer nobody asked for
    Neighbor& n = it->second;
    learned |= !n.resolved || n.mac48 != r.mac48 || n.port_index != r.port_index || n.vlan != r.vlan;
    n.resolved = true;
    n.unanswered = 0;
    n.mac48 = r.mac48;
    n.port_index = r.port_index;
    n.vlan = r.vlan;
    n.resolved_at = now;
  });
  if (learned || now >= next_scan_) {
    next_scan_ = now + kScanInterval;
    retry_due_ = next_scan_;
    table_.ForEach([&](const Job& job) {
      if (job.main_server_ip() != 0 && job.is_root()) {
        // The root delivers final results there (docs/protocol.md, "Final
        // delivery"); without a port, to the aggregation port.
        Resolve(job, job.main_server_hop(), job.main_server_ip(),
                job.main_server_port() != 0 ? job.main_server_port() : options_.udp_port, 0, now);
      }
      if (!job.is_root()) {
        for (uint32_t hop = 1; hop < job.hop_count(); ++hop) {
          const aggregator::JobPeer up = job.HopPeer(hop);
          Resolve(job, hop, up.ip, up.udp_port, up.vlan, now);
        }
      } else if (job.tan() == JobSpec::Tan::kRemote) {
        const aggregator::JobPeer tan = job.tan_peer();
        Resolve(job, Job::kTanHop, tan.ip, tan.udp_port, 0, now);
      } else if (job.tan() == JobSpec::Tan::kSelf) {
        // The own TAN learns what each child switch covers (variant 2), once per job.
        auto [it, fresh] = covers_set_.try_emplace(job.id(), job.generation());
        if (fresh || it->second != job.generation()) {
          it->second = job.generation();
          for (uint16_t i = 0; i < job.members(); ++i) {
            if (!job.IsSwitch(i)) continue;
            const auto covers = job.Covers(i);
            tan_.SetCovers(job.id(), job.NodeId(i), std::vector<uint16_t>(covers.begin(), covers.end()));
          }
        }
      }
    });
    next_scan_ = retry_due_;
  }
  // Arrival offsets for straggler prediction, in seconds, by node id.
  const double seconds_per_unit =
      static_cast<double>(uint64_t{1} << aggregator::Slot::kOffsetShift) /
      static_cast<double>(dp_.tsc_hz());
  std::vector<MemberOffset> offsets;
  std::vector<uint32_t> held;
  dp_.ProcessOffsetSamples([&](const dataplane::OffsetSample& sample) {
    const Job* job = table_.Find(sample.job_id);
    if (job == nullptr || job->generation() != sample.job_generation) return;
    Prediction& p = predictions_[sample.job_id];
    if (p.generation != sample.job_generation) p = Prediction{sample.job_generation, StragglerPredictor(kPredictionHistory)};
    offsets.clear();
    held.clear();
    for (uint16_t i = 0; i < sample.members && i < job->members(); ++i) {
      if (sample.offsets[i] == dataplane::kOffsetMissing) {
        // Excluded: its data went around the slot, so nothing was sampled;
        // it keeps its figure.
        if (job->Excluded(i)) held.push_back(job->NodeId(i));
        continue;
      }
      offsets.push_back({job->NodeId(i), sample.offsets[i] * seconds_per_unit});
    }
    p.predictor.Record(offsets, held);
  });
  // This switch's own TAN.
  const uint64_t now_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count());
  out_.clear();
  const aggregator::TanPeer self{options_.own_ip, 0};
  dp_.ProcessTanInput([&](const uint8_t* datagram, uint32_t len) {
    aggregator::AggPacket pkt;
    if (aggregator::ParseAggregation(datagram, len, &pkt) != aggregator::WireError::kOk) return;
    tan_.OnDatagram(pkt, self, now_ns, &out_);
  });
  tan_.Expire(now_ns, &out_);
  for (const aggregator::TanOutput& o : out_) {
    (void)dp_.SendTanResult(o.datagram.data(), static_cast<uint32_t>(o.datagram.size()));
  }
}

common::Result<StragglerReport> TreeControl::Stragglers(uint32_t job_id,
                                                       const StragglerRequest& request) {
  const Job* job = table_.Find(job_id);
  if (job == nullptr) return common::NotFound("job " + std::to_string(job_id) + " does not exist");
  StragglerReport report;
  report.job = job_id;
  const auto it = predictions_.find(job_id);
  const StragglerPredictor* predictor =
      it != predictions_.end() && it->second.generation == job->generation() ? &it->second.predictor
                                                                             : nullptr;
  report.operations = predictor != nullptr ? predictor->operations() : 0;
  if (!request.clear && predictor != nullptr) {
    const std::vector<MemberOffset> predicted =
        request.top ? predictor->TopK(*request.top, request.operations)
                    : predictor->Over(*request.over_s, request.operations);
    for (const MemberOffset& m : predicted) {
      report.predicted.push_back({static_cast<uint16_t>(m.node), m.offset_s});
    }
  }
  if (request.apply && !request.clear && job->is_root() &&
      job->tan() == aggregator::JobSpec::Tan::kNone) {
    return common::FailedPrecondition(
        "job " + std::to_string(job_id) +
        " has no TAN here: the data of the members it excluded would have nowhere to go "
        "(give the job a tan at its root; a switch below a root without one cannot place them either)");
  }
  if (request.apply || request.clear) {
    // The participation bitmap: the predicted members out, everyone else in;
    // never every member, or no slot would ever take a chunk and nothing
    // would reach the TAN as first data: the least late of them stays in.
    // At most max_excluded of them, the latest first: a partial lists them
    // beside a full chunk, in the room its members' clients leave for ids
    // (seed 1394933: 44 excluded of 59, a partial of 338 int32 that could
    // not carry them, every chunk INCOMPLETE).
    std::vector<bool> exclude(job->members(), false);
    size_t excluded = 0;
    int least_late = -1;
    for (const StragglerReport::Member& m : report.predicted) {
      if (excluded == request.max_excluded) break;
      const int index = job->LocalIndex(m.node);
      if (index < 0 || exclude[static_cast<size_t>(index)]) continue;
      exclude[static_cast<size_t>(index)] = true;
      ++excluded;
      least_late = index;  // predictions come largest first
    }
    if (excluded == job->members() && least_late >= 0) {
      exclude[static_cast<size_t>(least_late)] = false;
    }
    for (uint16_t i = 0; i < job->members(); ++i) (void)job->SetExcluded(i, exclude[i]);
  }
  for (uint16_t i = 0; i < job->members(); ++i) {
    if (job->Excluded(i)) report.excluded.push_back(job->NodeId(i));
  }
  return report;
}

std::vector<TreeControl::HopInfo> TreeControl::Hops() const {
  std::vector<HopInfo> hops;
  for (const auto& [ip, n] : neighbors_) {
    HopInfo h;
    h.ip = ip;
    h.resolved = n.resolved;
    h.mac = common::MacAddr::FromU64(n.mac48);
    h.port_index = n.port_index;
    h.vlan = n.vlan;
    h.arp_requests = n.requests;
    hops.push_back(h);
  }
  return hops;
}

}  // namespace aggswitch::control
