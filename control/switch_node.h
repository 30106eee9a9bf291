// One switch assembled from its configuration: the job table and its config
// jobs, the control side of the jobs (JobControl, in-band admission, the API
// jobs of aggregation.state_file), the dataplane, the job trees
// (TreeControl), the INT exporter and the control loop. The daemon
// (tools/aggswitch) adds the HTTP server, DPDK telemetry and systemd on top
// and launches the workers; the fabric simulator (tests/sim) builds several
// of these in one process on one simulated clock and polls them instead.
// Either way the switch is put together here, once.
//
//   ASSIGN_OR_RETURN(auto node, SwitchNode::Create(cfg, {.config_path = path}));
//   RETURN_IF_ERROR(node->dataplane().Start());      // the daemon
//   node->loop().Run();                                // until SIGINT/SIGTERM
//
//   auto node = SwitchNode::Create(cfg, {.clock = &sim_clock});   // the simulator
//   node->dataplane().PollWorkerOnce(0);  node->loop().Step(sim_clock.Now());
//
// EAL must be up. The jobs of the state file are restored before the
// dataplane exists, as before the workers start.
//
// Thread safety: Create, the accessors and the destructor [control].
#pragma once

#include <memory>
#include <string>

#include "aggregator/job_table.h"
#include "common/clock.h"
#include "common/status.h"
#include "config/config.h"
#include "control/control_loop.h"
#include "control/in_band_admission.h"
#include "control/int_exporter.h"
#include "control/job_control.h"
#include "control/tree_control.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {

class SwitchNode {
 public:
  struct Options {
    // The config file reload re-reads; empty: the embedded default.
    std::string config_path;
    // The switch's clock (must outlive the node); null: the TSC.
    const common::Clock* clock = nullptr;
  };

  // Everything but the workers' launch. An error names the part that failed
  // ("aggregation: ...", "dataplane: ...", "telemetry: ..."). [control]
  static common::Result<std::unique_ptr<SwitchNode>> Create(const config::Config& config,
                                                          Options options);
  // Stops the workers when they run, then takes the parts down in the
  // reverse order of their making. [control]
  ~SwitchNode();
  SwitchNode(const SwitchNode&) = delete;
  SwitchNode& operator=(const SwitchNode&) = delete;

  const config::Config& config() const { return config_; }
  const common::Clock& clock() const { return *clock_; }
  aggregator::JobTable& table() { return *table_; }
  JobControl& jobs() { return *jobs_; }
  InBandAdmission& admission() { return *admission_; }
  dataplane::Dataplane& dataplane() { return *dataplane_; }
  const dataplane::Dataplane& dataplane() const { return *dataplane_; }
  // Null without aggregation (no job trees, no own TAN).
  TreeControl* tree() { return tree_.get(); }
  ControlLoop& loop() { return *loop_; }

 private:
  explicit SwitchNode(const config::Config& config, const common::Clock& clock)
      : config_(config), clock_(&clock) {}

  const config::Config config_;
  const common::Clock* clock_;
  // Declared in the order they are made, and so taken down in reverse: the
  // job table outlives everything that reads it.
  std::unique_ptr<aggregator::JobTable> table_;
  std::unique_ptr<JobControl> jobs_;
  std::unique_ptr<InBandAdmission> admission_;
  std::unique_ptr<dataplane::Dataplane> dataplane_;
  std::unique_ptr<TreeControl> tree_;
  std::unique_ptr<IntExporter> int_exporter_;
  std::unique_ptr<ControlLoop> loop_;
};

}  // namespace aggswitch::control
