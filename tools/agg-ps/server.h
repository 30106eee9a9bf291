// agg-ps's server: the parameter node on one UDP socket: its timeout
// aggregation node (TAN) role (docs/stragglers.md, "The timeout aggregation
// node"), the aggregation of contributions no switch reduced
// (aggregator/ps_engine.h, docs/parameter-node.md), and for --sgd jobs its
// parameter-server role: the TAN's completion hook
// runs an SgdModel (tools/agg-ps/sgd.h), so those jobs' RESULTs carry the
// updated parameters instead of the gradient sum.
//
// A single-threaded poll loop: it receives datagrams in batches (recvmmsg),
// parses them (aggregator/wire.h), feeds them to an aggregator::PsEngine,
// calls its Expire about every 10 ms, and sends what the engine returns to
// where the engine says (the first data's source). With a stats path it
// writes the counters as one JSON object, and with a metrics path in
// Prometheus's text format, atomically (a temporary file renamed over the
// old one), every 500 ms and when the loop ends.
//
//   ASSIGN_OR_RETURN(auto server, PsServer::Open(options));    // binds the socket
//   std::atomic<bool> stop{false};                              // set by a signal handler
//   RETURN_IF_ERROR(server->Run(stop));                         // until stop
//
// The option parsers here are the command line's (tools/agg-ps/main.cc);
// their errors name the option and what it expects.
//
// The same server also runs inside a worker whose process is the job's TAN
// (agg-worker --tan-listen): that worker's client offers its own
// contributions through OfferOwn (case 2 of "the TAN is late").
//
// Thread safety: Open and the parsers [any]. Run [one thread]; `stop` may be
// set from anywhere, a signal handler included. OfferOwn, SetOwnWorker,
// StatsJson and WriteStats [any]: a mutex orders them with the loop (the
// SgdModel runs under it too). engine(), sgd() and socket_counters() [any
// while Run is not running].
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aggregator/ps_engine.h"
#include "common/net_addr.h"
#include "common/status.h"
#include "tools/agg-ps/sgd.h"

namespace aggswitch::tools {

// --listen ADDR:PORT.
struct ListenAddress {
  common::Ipv4Addr ip;
  uint16_t port = aggregator::kAggUdpPort;
};

// --covers JOB:SWITCH=IDS: switch node SWITCH of job JOB covers node ids IDS.
struct CoverSpec {
  uint32_t job_id = 0;
  uint16_t switch_node = 0;
  std::vector<uint16_t> ids;
};

// "a.b.c.d:port" (port 0: an ephemeral one).
common::Result<ListenAddress> ParseListen(std::string_view text);
// "0-3,7,9-10": node ids and inclusive ranges, comma-separated; sorted, without repeats.
common::Result<std::vector<uint16_t>> ParseIdList(std::string_view text);
// "JOB:SWITCH=IDS", e.g. "7:100=0-3,7".
common::Result<CoverSpec> ParseCovers(std::string_view text);

// --job JOB:KEY[:WORLD]: a job the parameter node knows before its first
// datagram. Every datagram of the job must carry KEY (a shared secret, as
// the switches check it); with WORLD, the job's data sent to the parameter
// node itself (AGGREGATE_AT_PS, which says in `expected` how many ranks the
// allreduce has) must say WORLD.
struct PsJob {
  uint32_t id = 0;
  uint64_t key = 0;
  uint16_t world = 0;  // 0: not checked
};

// "JOB:KEY[:WORLD]", KEY decimal or 0x-hex, e.g. "7:0x5eed:4".
common::Result<PsJob> ParseJob(std::string_view text);

// The --job list as HandleDatagram checks it, with --listed-jobs-only: the
// datagrams of any other job are dropped.
struct PsJobPolicy {
  std::unordered_map<uint32_t, PsJob> jobs;
  bool listed_only = false;

  // InvalidArgument naming --job when a job is listed twice.
  static common::Result<PsJobPolicy> Make(const std::vector<PsJob>& jobs, bool listed_only);
};

struct PsServerOptions {
  ListenAddress listen;
  aggregator::TanOptions tan;
  std::vector<CoverSpec> covers;
  // --sgd JOB=LR: parameter-server jobs. When there are any, their SgdModel
  // is the engine's completion hook (it replaces tan.on_complete).
  std::vector<SgdJob> sgd;
  std::vector<PsJob> jobs;     // --job
  bool listed_jobs_only = false;  // --listed-jobs-only
  uint64_t sgd_max_elems = SgdModel::kDefaultMaxElems;  // --sgd-max-elems, per job
  std::string stats_path;                               // empty: no stats file
  // --metrics: the same counters in Prometheus's text format, for
  // node_exporter's textfile collector (a FILE.prom in its directory);
  // empty: none.
  std::string metrics_path;
  std::chrono::milliseconds expire_period{10};
  std::chrono::milliseconds stats_period{500};
};

// The socket's side of the counts; the engine's are aggregator::TanCounters.
struct PsSocketCounters {
  uint64_t rx_datagrams = 0;
  uint64_t parse_errors = 0;  // ParseAggregation refused the datagram
  uint64_t tx_datagrams = 0;
  uint64_t tx_errors = 0;     // the kernel refused one (no route, too long, ...)
  uint64_t tx_dropped = 0;    // the send buffer stayed full
  uint64_t stats_errors = 0;  // the stats file could not be written
  // Dropped by the --job list: another key than the job's, another world
  // than the job's in data for the parameter node, a job not listed (with
  // --listed-jobs-only).
  uint64_t job_key_refused = 0;
  uint64_t job_world_refused = 0;
  uint64_t job_unlisted_refused = 0;
};

// What the loop does with each datagram it receives: counts it (rx_datagrams),
// parses it (one that does not parse is counted in parse_errors and dropped),
// checks it against `jobs` when given (PsJob; a refusal is counted and the
// datagram dropped) and feeds it to `engine` as sent from `from` at `now_ns`
// (steady clock), appending what to send to `out`. Run calls it for every
// datagram of a batch; tests/fuzz/tan_fuzz.cc calls it without a socket, on
// a simulated clock. [one thread: the caller guards `engine` and `counters`]
void HandleDatagram(const uint8_t* data, uint32_t length, const aggregator::TanPeer& from,
                    uint64_t now_ns, aggregator::PsEngine& engine, PsSocketCounters& counters,
                    std::vector<aggregator::TanOutput>* out, const PsJobPolicy* jobs = nullptr);

class PsServer {
 public:
  // Opens and binds the socket (the error names --listen), sets up the engine
  // and the --sgd jobs (an error names --sgd or --sgd-max-elems).
  static common::Result<std::unique_ptr<PsServer>> Open(const PsServerOptions& options);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // The bound port (the ephemeral one when --listen said port 0).
  uint16_t port() const { return port_; }

  // Serves until `stop` is true (it is looked at at least every
  // expire_period), then writes the stats once more. An error only when the
  // socket fails.
  common::Status Run(const std::atomic<bool>& stop);

  // The contribution `datagram` of the worker this process also runs, about
  // to be sent (TanEngine::OfferOwn): true when the engine took it as that
  // worker's late data (what that finished is sent); then the caller must
  // not send it. False for anything else, a datagram that does not parse
  // included.
  bool OfferOwn(const uint8_t* datagram, uint32_t length);
  // Where that worker receives its results (TanEngine::SetOwnWorker).
  void SetOwnWorker(const aggregator::TanPeer& worker);

  // The counters as one JSON object, and that object written to the stats
  // path (and MetricsText to the metrics path) through a rename (a failure
  // is also counted in stats_errors).
  std::string StatsJson() const;
  common::Status WriteStats();
  // The counters in Prometheus's text format: aggps_<name>_total for the
  // counters, aggps_<name> for the gauges, each with its help.
  std::string MetricsText() const;

  const aggregator::PsEngine& engine() const { return engine_; }
  const SgdModel& sgd() const { return sgd_; }
  const PsSocketCounters& socket_counters() const { return counters_; }

 private:
  PsServer(const PsServerOptions& options, SgdModel sgd, int fd, uint16_t port);
  // options.tan with the SgdModel as its completion hook, when there are --sgd jobs.
  aggregator::PsOptions EngineOptions(const PsServerOptions& options);
  // Receives one batch and feeds it to the engine; how many came.
  common::Result<uint32_t> ReceiveBatch(std::vector<aggregator::TanOutput>* out);
  void Send(const std::vector<aggregator::TanOutput>& out);
  // One counter or gauge: the stats file's key, Prometheus's name without
  // its prefix and suffix; one table for both.
  struct Stat {
    const char* name;
    uint64_t value;
    bool gauge;
    const char* help;
  };
  // StatsJson, MetricsText and WriteStats with mu_ held.
  std::vector<Stat> StatsLocked() const;
  std::string StatsJsonLocked() const;
  std::string MetricsTextLocked() const;
  common::Status WriteStatsLocked();
  common::Status WriteFileLocked(const char* option, const std::string& path,
                                 const std::string& content);

  PsServerOptions options_;
  // Guards everything below but the receive buffers (the loop's alone).
  mutable std::mutex mu_;
  int fd_ = -1;
  uint16_t port_ = 0;
  SgdModel sgd_;  // before engine_: its hook points here
  aggregator::PsEngine engine_;
  PsSocketCounters counters_;
  PsJobPolicy jobs_;
  std::vector<uint8_t> buffers_;  // kBatch receive buffers of kBufferBytes
  struct Batch;
  std::unique_ptr<Batch> batch_;
  // Send and stats-file warnings: at most one a second.
  bool MayWarn();
  std::chrono::steady_clock::time_point last_warning_{};
  uint64_t suppressed_warnings_ = 0;
};

}  // namespace aggswitch::tools
