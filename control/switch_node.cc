#include "control/switch_node.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common/log.h"
#include "common/siphash.h"
#include "control/stats_snapshot.h"
#include "dataplane/eal.h"

namespace aggswitch::control {

namespace {

// Every VLAN a port carries: where the switch looks for a next hop whose
// VLAN nobody named.
std::vector<uint16_t> CarriedVlans(const config::Config& cfg) {
  std::vector<uint16_t> vlans;
  for (const config::PortConfig& port : cfg.ports) {
    if (port.mode == config::VlanMode::kAccess) {
      vlans.push_back(port.access_vlan);
    } else {
      vlans.insert(vlans.end(), port.trunk_vlans.begin(), port.trunk_vlans.end());
      if (port.native_vlan) vlans.push_back(*port.native_vlan);
    }
  }
  std::sort(vlans.begin(), vlans.end());
  vlans.erase(std::unique(vlans.begin(), vlans.end()), vlans.end());
  return vlans;
}

TreeControl::Options TreeOptions(const config::Config& cfg) {
  TreeControl::Options o;
  if (cfg.aggregation.address) {
    o.own_ip = cfg.aggregation.address->prefix.ip.addr;
    o.own_vlan = cfg.aggregation.address->vlan;
  }
  o.vlans = CarriedVlans(cfg);
  o.switch_mac = cfg.switch_.mac;
  o.udp_port = cfg.aggregation.udp_port;
  o.tan.give_up_ns = uint64_t{cfg.aggregation.give_up_ms} * 1'000'000;
  o.tan.trigger = cfg.aggregation.trigger == config::AggTrigger::kBatch
                      ? aggregator::TanTrigger::kBatch
                      : aggregator::TanTrigger::kIncremental;
  return o;
}

}  // namespace

common::Result<std::unique_ptr<SwitchNode>> SwitchNode::Create(const config::Config& cfg,
                                                                Options options) {
  const common::Clock& clock = options.clock != nullptr ? *options.clock : dataplane::TscClock();
  std::unique_ptr<SwitchNode> node(new SwitchNode(cfg, clock));
  const uint64_t hz = clock.CyclesPerSecond();

  auto table = aggregator::JobTable::Create(cfg.aggregation.max_jobs, cfg.aggregation.max_fan_in);
  if (!table.ok()) return common::InvalidArgument("aggregation: " + table.status().message());
  node->table_ = std::move(table).value();
  // The slot placement's secret: the config's (labs, benchmarks, the
  // simulator), else a fresh one, so that nobody outside can tell where a
  // job's chunks land.
  const std::optional<common::SipKey> secret = cfg.aggregation.slot_secret.empty()
                                                   ? common::SipKey::Random()
                                                   : common::SipKey::Parse(cfg.aggregation.slot_secret);
  if (!secret) {
    return common::Internal("aggregation: cannot draw a random slot secret from the kernel");
  }
  node->table_->SetSlotSecret(*secret);
  if (common::Status s = AddConfigJobs(*node->table_, cfg.aggregation, hz); !s.ok()) {
    return common::InvalidArgument("aggregation: " + s.message());
  }
  JobControl::Options job_options;
  job_options.in_band_registration = cfg.aggregation.in_band_registration;
  for (const config::PortConfig& port : cfg.ports) job_options.port_names.push_back(port.name);
  // API jobs take the config's defaults and rules (and are built like config jobs).
  job_options.config = cfg;
  job_options.tsc_hz = hz;
  node->jobs_ = std::make_unique<JobControl>(*node->table_, std::move(job_options));
  node->admission_ =
      std::make_unique<InBandAdmission>(*node->table_, InBandAdmission::OptionsFrom(cfg.aggregation));
  node->jobs_->SetInBandAdmission(node->admission_.get());
  // The API jobs of the last run (aggregation.state_file), before the workers start.
  if (auto restored = node->jobs_->RestoreSavedJobs(); !restored.ok()) {
    // A broken file is moved aside: the switch starts without those jobs and says so.
    AGG_LOG(kError, "%s", restored.status().message().c_str());
  }

  auto dp = dataplane::Dataplane::Create(cfg, cfg.aggregation.enabled ? node->table_.get() : nullptr,
                                         &clock);
  if (!dp.ok()) return common::Status(dp.status().code(), "dataplane: " + dp.status().message());
  node->dataplane_ = std::move(dp).value();
  dataplane::Dataplane& d = *node->dataplane_;
  if (d.aggregation_enabled()) {
    // Job snapshots (API, /metrics) carry each job's counters, read on the
    // control thread with the job list (see job_control.h); the dataplane
    // outlives every List() (the destructor clears these first).
    node->jobs_->SetCounterReader([&d](uint16_t index) { return CollectJobCounters(d, index); });
    node->jobs_->SetStoreReader(
        [&d](uint16_t index, uint32_t generation) { return d.JobStoreBuffers(index, generation); });
    // The job trees: next hops by ARP, straggler prediction, this switch's own TAN.
    node->tree_ = std::make_unique<TreeControl>(d, *node->table_, TreeOptions(cfg));
    // A job added, or a TAN changed, through the API: resolve its next hops now.
    node->jobs_->SetChangeHook([t = node->tree_.get()] { t->ScanSoon(); });
  }
  // In-band jobs expire on the clock their members' datagrams are stamped with.
  node->admission_->SetClock([&d] { return d.SeenTick(); }, d.MillisecondsToTicks(1000));
  // In-band telemetry: the hop records become reports to the collector.
  if (d.int_settings() != nullptr && cfg.telemetry.collector) {
    auto created = IntExporter::Create(d, cfg.telemetry);
    if (!created.ok()) return common::Status(created.status().code(), "telemetry: " + created.status().message());
    node->int_exporter_ = std::move(created).value();
  }
  node->loop_ = std::make_unique<ControlLoop>(d, cfg, options.config_path, node->jobs_.get(),
                                              node->tree_.get(), node->admission_.get(),
                                              node->int_exporter_.get());
  return node;
}

SwitchNode::~SwitchNode() {
  loop_.reset();
  int_exporter_.reset();
  if (jobs_ != nullptr) {
    // They reach the dataplane and the tree, which go first.
    jobs_->SetCounterReader(nullptr);
    jobs_->SetStoreReader(nullptr);
    jobs_->SetChangeHook(nullptr);
  }
  if (dataplane_ != nullptr) dataplane_->Stop();
  tree_.reset();
  dataplane_.reset();
  jobs_.reset();
  admission_.reset();
  table_.reset();
}

}  // namespace aggswitch::control
