// agg-gen on a DPDK port: the mempool, the port (one RX and one TX queue),
// and the generator lcore's loop around a GenEngine.
//
//   ASSIGN_OR_RETURN(auto runner, PortRunner::Create(cfg, port_id, link_timeout_s));
//   rte_eal_remote_launch(PortRunner::LcoreEntry, runner.get(), lcore);
//   while (!runner->finished()) { sleep; runner->ReadProgress(); }   // main thread
//   rte_eal_wait_lcore(lcore);
//   runner->engine().counters() ...                                  // after the lcore returned
//
// The loop, per pass: one RX burst (each frame to GenEngine::OnFrame, then
// freed in bulk); frames the TX queue did not take last time, else up to 32
// new or timed-out chunks written into mbufs taken from a stash refilled in
// bulk; counters published for the main thread once a millisecond. It ends
// when the engine is done, or after --give-up-ms without progress; after
// --duration or a stop request it stops sending new chunks and waits for the
// ones in flight. A worker that has finished a job sends its final ACK of it
// at once (GenEngine); at the end, the workers that have not send theirs,
// and the loop keeps receiving for 20 ms so the peer can take them. The pass never allocates (beyond the
// mempool), locks, logs or makes a syscall.
//
// Thread safety: Create, the destructor, engine(), port_stats(), stalled(),
// seconds() are [main] (the last four after the lcore returned);
// LcoreEntry/Run is the [generator lcore]; RequestStop, finished and
// ReadProgress are [any].
#pragma once

#include <rte_mempool.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "tools/agg-gen/engine.h"
#include "tools/agg-gen/frames.h"
#include "tools/agg-gen/gen_config.h"
#include "tools/agg-gen/report.h"

struct rte_mbuf;

namespace aggswitch::tools {

// A consistent-enough view of the counters while the lcore runs: published
// once a millisecond, the TSC last (release) and read first (acquire), so the
// counters are at least as new as `tsc`.
struct Progress {
  uint64_t tsc = 0;
  uint64_t sent = 0;
  uint64_t retransmits = 0;
  uint64_t completed = 0;
  uint64_t errors = 0;
};

class PortRunner {
 public:
  // Creates the mempool, configures and starts `port_id`, and waits up to
  // `link_timeout_s` for its link. [main]
  static common::Result<std::unique_ptr<PortRunner>> Create(const GenConfig& cfg, uint16_t port_id,
                                                            double link_timeout_s);
  // Stops and closes the port, frees the mempool. [main, with the lcore stopped]
  ~PortRunner();
  PortRunner(const PortRunner&) = delete;
  PortRunner& operator=(const PortRunner&) = delete;

  // rte_eal_remote_launch entry: `arg` is the PortRunner. [generator lcore]
  static int LcoreEntry(void* arg);

  // Ends sending new chunks (SIGINT, SIGTERM); the run then drains. [any]
  void RequestStop() { stop_.store(true, std::memory_order_relaxed); }
  // The lcore has left its loop and published its last counters. [any]
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  Progress ReadProgress() const;

  // "port 0 (net_memif)". [any]
  const std::string& description() const { return description_; }

  // After the lcore returned. [main]
  const GenEngine& engine() const { return engine_; }
  const PortStats& port_stats() const { return port_stats_; }
  bool stalled() const { return stalled_; }
  double seconds() const { return seconds_; }

 private:
  static constexpr uint16_t kBurst = 32;

  struct MempoolDeleter {
    void operator()(rte_mempool* mp) const { rte_mempool_free(mp); }
  };

  PortRunner(const GenConfig& cfg, uint16_t port_id);
  common::Status StartPort(double link_timeout_s);
  void Run();
  void Receive();
  void SendChunks(uint64_t now);
  void Flush();
  bool RefillStash();
  void SendFinalAcks();
  void Publish(uint64_t now);

  const GenConfig cfg_;
  const uint16_t port_id_;
  unsigned lcore_ = 0;  // the lcore that runs Run(), for the unmap guard
  std::string description_;
  std::unique_ptr<rte_mempool, MempoolDeleter> pool_;
  bool port_configured_ = false;
  bool port_started_ = false;
  FrameFactory frames_;
  GenEngine engine_;

  // Generator lcore state.
  alignas(64) rte_mbuf* tx_[kBurst];
  uint16_t tx_n_ = 0;
  rte_mbuf* stash_[kBurst];
  uint16_t stash_n_ = 0;
  SendOp ops_[kBurst];
  PortStats port_stats_;
  bool stalled_ = false;
  double seconds_ = 0;

  // Shared with the main thread.
  alignas(64) std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  alignas(64) std::atomic<uint64_t> pub_tsc_{0};
  std::atomic<uint64_t> pub_sent_{0};
  std::atomic<uint64_t> pub_retransmits_{0};
  std::atomic<uint64_t> pub_completed_{0};
  std::atomic<uint64_t> pub_errors_{0};
};

}  // namespace aggswitch::tools
