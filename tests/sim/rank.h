// One process of one rank: the client library's engine
// (client/internal/engine.h), on a fiber and a SimTransport, running the
// rank's allreduces one after the other, as a training script's loop would
// through client::Client. What each allreduce returned is kept for the
// oracle. A killed process stops at once: its socket closes, its waits
// fail, and the engine unwinds.
//
//   RankProcess p(world, host, options, ops, data_for_op, start_ns);
//   ...   world.Run(...)
//   p.Kill();                          // a crash
//   for (const OpOutcome& o : p.outcomes()) ...
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "client/client.h"
#include "common/status.h"
#include "tests/sim/fiber.h"
#include "tests/sim/host.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

// One allreduce of a rank's program.
struct OpSpec {
  aggregator::DType dtype = aggregator::DType::kInt32;
  aggregator::ReduceOp op = aggregator::ReduceOp::kSum;
  uint32_t count = 1;
  uint64_t think_ns = 0;  // computation before it starts
  bool final = false;     // the run's final result, delivered to the main server too
};

// What an allreduce returned.
struct OpOutcome {
  bool ran = false;
  // Its process died in the middle of it (ran is false then): what it sent
  // may have been reduced, and answered, though nothing came back to it.
  bool died = false;
  common::StatusCode code = common::StatusCode::kOk;
  std::string message;
  std::vector<uint8_t> data;  // the buffer afterwards (the result when ok)
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  // The sequence numbers it took: from first_seq to next_seq (data chunks
  // first, in order, then any redo).
  uint32_t first_seq = 0;
  uint32_t next_seq = 0;
};

// A contribution as it went on the wire: what a switch that keeps it
// (store and both mode) must give back to a FETCH.
struct SentContribution {
  uint8_t dtype = 0;
  uint8_t op = 0;
  int8_t scale = 0;
  std::vector<uint8_t> payload;
  friend bool operator==(const SentContribution&, const SentContribution&) = default;
};

// One process of one rank, as the runner and the oracle see it: what each
// of its operations returned, what it sent, and a crash.
class Process {
 public:
  // The input of operation k: count * size(dtype) bytes.
  using DataFor = std::function<std::vector<uint8_t>(uint32_t op)>;

  virtual ~Process() = default;
  // A crash: the process is gone from now on.
  virtual void Kill() = 0;
  // Its program ran to the end (or it was killed and unwound).
  virtual bool done() const = 0;
  virtual const std::vector<OpOutcome>& outcomes() const = 0;
  // Every distinct contribution it sent, by sequence number (none marked
  // for the parameter node: switches do not keep those).
  virtual const std::map<uint32_t, std::vector<SentContribution>>& sent() const = 0;
  // Why it could not start (then nothing ran).
  virtual const std::string& setup_error() const = 0;
};

class RankProcess final : public Process {
 public:

  RankProcess(World& world, Host& host, client::ClientOptions options, std::vector<OpSpec> ops,
              DataFor data_for, uint64_t start_ns);
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  void Kill() override;
  bool killed() const { return killed_; }
  bool done() const override { return fiber_.done(); }
  const std::vector<OpOutcome>& outcomes() const override { return outcomes_; }
  const client::ClientOptions& options() const { return options_; }
  const std::map<uint32_t, std::vector<SentContribution>>& sent() const override { return sent_; }
  // Why the engine could not be created (then nothing ran).
  const std::string& setup_error() const override { return setup_error_; }

 private:
  void Body();
  void WakeSoon();
  void Record(const uint8_t* data, size_t len);

  World& world_;
  Host& host_;
  const client::ClientOptions options_;
  const std::vector<OpSpec> ops_;
  const DataFor data_for_;
  std::vector<OpOutcome> outcomes_;
  std::map<uint32_t, std::vector<SentContribution>> sent_;
  SimTransport* transport_ = nullptr;  // owned by the engine while the body runs
  Fiber fiber_;
  bool killed_ = false;
  bool wake_pending_ = false;
  bool dying_ = false;
  std::string setup_error_;
};

}  // namespace aggswitch::sim
