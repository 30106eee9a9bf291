// One process of one rank of a job in store mode (docs/protocol.md,
// "Store"): it sends each chunk of each operation as a CONTRIBUTION and takes
// the switch's ACK as the answer, resending what is not ACKed, as a worker
// that keeps its parameters in the switch would. The client library speaks
// aggregate and both mode only; this is the wire protocol spoken directly,
// as tests/system/agg_member.py speaks it. Nothing is reduced: an operation
// succeeds when every chunk is ACKed, and the main server reads the copies
// back (MainServer::Fetch), which the oracle checks against what it sent.
//
//   StoreRank p(world, host, options, ops, data_for, start_ns);
//   ...   world.Run(...)
//   for (const OpOutcome& o : p.outcomes()) ...
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/sim/host.h"
#include "tests/sim/rank.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

class StoreRank final : public Process {
 public:
  struct Options {
    uint32_t job_id = 0;
    uint64_t key = 0;
    uint16_t node = 0;          // its node id at the switch
    uint32_t incarnation = 0;   // its run (nonzero)
    bool run_id = false;        // the incarnation is the run's id (RUN_ID)
    uint32_t switch_ip = 0;
    uint16_t switch_port = 0;
    uint32_t window = 1;              // chunks not yet ACKed at most
    uint32_t max_chunk_elements = 0;  // as the client's (0: the MTU's)
    uint64_t progress_timeout_ns = 0; // an operation fails after this long without an ACK
  };
  // A chunk not ACKed is sent again this often.
  static constexpr uint64_t kResendNs = 20'000'000;

  StoreRank(World& world, Host& host, Options options, std::vector<OpSpec> ops, DataFor data_for,
            uint64_t start_ns);
  ~StoreRank() override;
  StoreRank(const StoreRank&) = delete;
  StoreRank& operator=(const StoreRank&) = delete;

  void Kill() override;
  bool done() const override { return done_; }
  const std::vector<OpOutcome>& outcomes() const override { return outcomes_; }
  const std::map<uint32_t, std::vector<SentContribution>>& sent() const override { return sent_; }
  const std::string& setup_error() const override { return setup_error_; }

 private:
  struct Chunk {
    uint32_t first = 0;  // element
    uint32_t count = 0;
    bool acked = false;
    uint64_t sent_ns = 0;  // 0: never sent
  };
  void Begin(uint32_t op);
  void SendDue();
  void Send(uint32_t c);
  void OnDatagram(const uint8_t* data, size_t len);
  void Tick(uint64_t life);
  void Finish(common::StatusCode code, std::string message);

  World& world_;
  Host& host_;
  const Options options_;
  const std::vector<OpSpec> ops_;
  const DataFor data_for_;
  std::vector<OpOutcome> outcomes_;
  std::map<uint32_t, std::vector<SentContribution>> sent_;
  std::string setup_error_;
  uint16_t port_ = 0;
  bool done_ = false;
  bool in_progress_ = false;  // an operation was begun and has not ended
  uint64_t life_ = 0;  // bumped when an operation ends: its ticks stop

  // The operation in progress.
  uint32_t op_ = 0;
  std::vector<uint8_t> data_;
  std::vector<Chunk> chunks_;
  uint32_t base_seq_ = 0;   // its first chunk's
  uint32_t next_seq_ = 0;   // the next operation's first
  uint32_t acked_ = 0;
  uint64_t progress_ns_ = 0;  // the last ACK (or the start)
};

}  // namespace aggswitch::sim
