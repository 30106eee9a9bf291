// A real switch in the simulated world: the daemon's assembly
// (control/switch_node.h) of its generated config, on net_ring ports, on
// the world's clock. Frames a link delivers go into a port's RX ring; the
// simulator polls the switch's workers (Dataplane::PollWorkerOnce) and runs
// its control loop's step (ControlLoop::Step) every millisecond, on its own
// thread; what the workers transmit leaves through the port's link.
//
//   SimSwitch sw(world, "leaf1", ports, workers, make_yaml);
//   sw.SetLink(0, &link_to_host_segment);
//   RETURN_IF_ERROR(sw.Start());     // also after Stop(): a restart
//   sw.Stop();                       // a crash: every state is lost
//
// Thread safety: the simulator's thread only.
#pragma once

#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/switch_node.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

class SimSwitch {
 public:
  // The switch's YAML for ports whose devargs are net_ring_<ring_names[i]>.
  using MakeYaml = std::function<std::string(const std::vector<std::string>& ring_names)>;

  // `workers`: its worker lcores, each with a TX queue on every port.
  SimSwitch(World& world, std::string name, size_t ports, uint32_t workers, MakeYaml make_yaml);
  ~SimSwitch();
  SimSwitch(const SimSwitch&) = delete;
  SimSwitch& operator=(const SimSwitch&) = delete;

  // The link port `port`'s frames leave by.
  void SetLink(size_t port, Link* link) { out_[port] = link; }
  // The sink a link into port `port` delivers to.
  FrameSink* port_sink(size_t port);

  // Builds the switch (again, after Stop) and starts polling it.
  common::Status Start();
  // Takes it down: frames sent to it are lost until Start.
  void Stop();
  bool up() const { return node_ != nullptr; }

  const std::string& name() const { return name_; }
  control::SwitchNode& node() { return *node_; }
  // What the switch's links could not deliver into its RX rings.
  uint64_t rx_ring_full() const { return rx_ring_full_; }
  uint64_t frames_to_down_switch() const { return to_down_; }
  // The period of the polls between arrivals.
  static constexpr uint64_t kPollPeriodNs = 100'000;
  static constexpr uint64_t kControlPeriodNs = 1'000'000;

 private:
  class PortSink;
  void Deliver(size_t port, Frame frame);
  // Polls every worker a few times (enough for each to look at its control
  // rings), runs the control step when it is due, and moves what the
  // workers sent onto the links.
  void Step();
  void ScheduleStep(uint64_t at);
  void Transmit();
  void FreeRings();

  World& world_;
  const std::string name_;
  const MakeYaml make_yaml_;
  std::vector<std::unique_ptr<PortSink>> sinks_;
  std::vector<Link*> out_;
  std::vector<std::string> ring_names_;
  const uint32_t workers_;
  std::vector<rte_ring*> rx_;
  std::vector<std::vector<rte_ring*>> tx_;  // by port, a ring per TX queue
  std::unique_ptr<control::SwitchNode> node_;
  uint64_t generation_ = 0;      // Start() calls: stale steps of a stopped switch do nothing
  uint64_t step_at_ = UINT64_MAX;  // the next scheduled step
  uint64_t next_control_ = 0;
  uint64_t rx_ring_full_ = 0;
  uint64_t to_down_ = 0;
};

// The pool the simulator's frames enter the switches' RX rings in. [the
// simulator's thread, after EAL init]
rte_mempool* SimFramePool();

}  // namespace aggswitch::sim
