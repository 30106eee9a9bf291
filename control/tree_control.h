// The control thread's part of the job trees (docs/stragglers.md).
//
// TreeControl, polled by the control loop (JobSpecFromConfig and ChooseTan,
// in job_control.h, build the jobs' trees):
//     - resolves every job's next hops (the upstream switch, a remote TAN)
//       with ARP, flooded through worker 0, and publishes them in the job
//       (Job::SetHop), where the workers read them;
//     - feeds each job's StragglerPredictor from the workers' arrival-offset
//       samples, and answers straggler requests (predict, apply: exclude the
//       predicted members from the job's participation, clear);
//     - runs this switch's own TAN (`tan: {strategy: self}`): the workers
//       pass first data and late data up a ring, the TanEngine merges them,
//       and its results go back down to the worker that owns the chunk's
//       slot, which replicates them to the members.
//
//   TreeControl tree(*dp, *table, TreeControl::Options{...});
//   while (running) { tree.Poll(std::chrono::steady_clock::now()); ... }
//
// A job's next hops follow its TAN: a choice changed at runtime
// (Job::SetTan, by JobControl) is resolved at the next scan of the jobs,
// every 200 ms, or at once after ScanSoon(); a job switched to "self" gives
// the own TAN its child switches' covers, as a config job does.
//
// Thread safety: everything here is [control] (the API and /metrics reach it
// through JobControl::RunOnControl).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/job_table.h"
#include "aggregator/tan_engine.h"
#include "common/net_addr.h"
#include "common/status.h"
#include "config/config.h"
#include "control/api.h"
#include "control/straggler_predictor.h"

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

class TreeControl {
 public:
  struct Options {
    uint32_t own_ip = 0;    // the aggregation address: ARP's sender address
    uint16_t own_vlan = 0;  // its VLAN; 0: every VLAN
    std::vector<uint16_t> vlans;  // the VLANs the ports carry (ARP when no VLAN is known)
    common::MacAddr switch_mac;
    uint16_t udp_port = aggregator::kAggUdpPort;  // the aggregation port (a main server's default)
    aggregator::TanOptions tan;  // this switch's own TAN
    // An unresolved hop's ARP request goes again after 100 ms, doubling up
    // to this; a resolved one's is refreshed every arp_refresh.
    std::chrono::milliseconds arp_retry{1000};
    std::chrono::milliseconds arp_refresh{60000};
  };
  // One resolved (or pending) next hop, for the API.
  struct HopInfo {
    uint32_t ip = 0;
    bool resolved = false;
    common::MacAddr mac;
    uint16_t port_index = 0;
    uint16_t vlan = 0;
    uint64_t arp_requests = 0;
  };

  TreeControl(dataplane::Dataplane& dp, aggregator::JobTable& table, Options options);
  ~TreeControl();

  // Drains ARP replies and TAN input, publishes resolutions, sends due ARP
  // requests, runs the own TAN's give-up timer. Never blocks.
  void Poll(std::chrono::steady_clock::time_point now);

  std::vector<HopInfo> Hops() const;
  // Predicts job `job_id`'s stragglers at this switch; with `apply`, excludes
  // them (every other member is included again; never every member: the
  // least late of them stays in); with `clear`, includes everyone. An
  // excluded member keeps its figure while it is out (StragglerPredictor's
  // held members), so that later predictions go on naming it. NotFound for
  // an unknown job; FailedPrecondition for `apply` at the root of a job
  // without a TAN (its excluded members' data would have nowhere to go).
  common::Result<StragglerReport> Stragglers(uint32_t job_id, const StragglerRequest& request);
  // Makes the next Poll scan every job's next hops (a job was added, or its
  // TAN changed) instead of waiting for the periodic scan.
  void ScanSoon() { next_scan_ = {}; }
  // The own TAN's counters, and the chunks it holds open.
  const aggregator::TanCounters& tan_counters() const { return tan_.counters(); }
  size_t tan_pending() const { return tan_.pending(); }
  uint64_t arp_requests() const { return arp_requests_; }

 private:
  struct Neighbor {
    bool resolved = false;
    uint64_t mac48 = 0;
    uint16_t port_index = 0;
    uint16_t vlan = 0;
    std::chrono::steady_clock::time_point resolved_at{};
    std::chrono::steady_clock::time_point requested_at{};
    uint64_t requests = 0;
    uint32_t unanswered = 0;  // requests since the last answer, less the first
  };
  // The first wait for an answer, doubled with each unanswered request
  // (128 times it at most) up to Options::arp_retry.
  static constexpr std::chrono::milliseconds kFirstArpRetry{10};
  // How often the jobs' next hops are looked at with every one resolved;
  // sooner while a request waits for its answer.
  static constexpr std::chrono::milliseconds kScanInterval{200};
  void Resolve(const aggregator::Job& job, uint32_t hop, uint32_t ip, uint16_t udp_port,
               uint16_t vlan, std::chrono::steady_clock::time_point now);
  void SendArpRequest(uint32_t ip, uint16_t vlan);

  dataplane::Dataplane& dp_;
  aggregator::JobTable& table_;
  Options options_;
  aggregator::TanEngine tan_;
  std::map<uint32_t, Neighbor> neighbors_;  // by IPv4 address (host order)
  std::map<uint32_t, uint32_t> covers_set_;  // job id -> generation whose covers the TAN knows
  struct Prediction {
    uint32_t generation = 0;
    StragglerPredictor predictor{kPredictionHistory};
  };
  static constexpr size_t kPredictionHistory = 256;  // sampled operations kept per job
  std::map<uint32_t, Prediction> predictions_;       // by job id
  std::chrono::steady_clock::time_point next_scan_{};
  // The earliest time an unanswered request is due again, found by a scan.
  std::chrono::steady_clock::time_point retry_due_{};
  uint64_t arp_requests_ = 0;
  std::vector<aggregator::TanOutput> out_;
};

}  // namespace aggswitch::control
