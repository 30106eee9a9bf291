// agg-ps in the simulated world: the parameter node's engine
// (aggregator/ps_engine.h) fed through agg-ps's own datagram handling
// (tools::HandleDatagram) from a UDP port on a simulated host, expired every
// 10 ms, its answers sent back through the host; for parameter-server jobs
// (--sgd) its SgdModel answers every complete chunk, wired as agg-ps wires
// it. It can crash (everything it held is lost, the parameters too) and come
// back, as a process would.
//
//   ParamNode ps(world, host, 47000, options, covers, {{1003, 0.01f}});
//   ps.Crash();  ...  ps.Restart();
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "aggregator/ps_engine.h"
#include "tests/sim/host.h"
#include "tools/agg-ps/server.h"
#include "tools/agg-ps/sgd.h"

namespace aggswitch::sim {

class ParamNode {
 public:
  ParamNode(World& world, Host& host, uint16_t port, aggregator::PsOptions options,
            std::vector<tools::CoverSpec> covers, std::vector<tools::SgdJob> sgd = {});
  ~ParamNode();

  void Crash();
  void Restart();
  bool up() const { return engine_ != nullptr; }
  // Null while down.
  const aggregator::PsEngine* engine() const { return engine_.get(); }
  const tools::PsSocketCounters& counters() const { return counters_; }

  static constexpr uint64_t kExpirePeriodNs = 10'000'000;

 private:
  void OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port);
  void Expire(uint64_t life);
  void SendOut();

  World& world_;
  Host& host_;
  const uint16_t port_;
  const aggregator::PsOptions options_;
  const std::vector<tools::CoverSpec> covers_;
  const std::vector<tools::SgdJob> sgd_jobs_;
  std::unique_ptr<tools::SgdModel> sgd_;  // before engine_: its hook points here
  std::unique_ptr<aggregator::PsEngine> engine_;
  tools::PsSocketCounters counters_;
  std::vector<aggregator::TanOutput> out_;
  uint64_t life_ = 0;  // Restart() calls: a dead life's timers do nothing
};

}  // namespace aggswitch::sim
