// agg-worker: one rank of an allreduce job through aggswitch, over the client
// library and kernel UDP sockets. Start one per rank, each with its --rank:
//
//   agg-worker --rank 0 --world 4 --job 7 --key 0x5eed --switch 10.0.10.253
//              --size 4M --dtype float32 --op sum --iterations 20 --verify
//
// Each iteration allreduces a vector generated from --seed (every rank can
// compute every rank's vector, so --verify checks the result exactly; see
// verify.h) or read from --input FILE ("{rank}" in the path is replaced by the
// rank; --verify then reads every rank's file). With --verify-sgd LR the
// results are checked as a parameter server's parameters instead (the job's
// TAN runs agg-ps --sgd; SgdCheck in verify.h). It prints the latency per
// allreduce (median, p99) and the algorithm bandwidth, and draws a progress
// bar on stderr when that is a terminal and the run takes a while.
//
// Exit codes: 0 every allreduce completed (and matched, when verified); 1 a
// result did not match; 2 a bad command line or input; 3 an allreduce failed
// (refused by the switch, a member gone, the switch unreachable: the message
// says which).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/fixed_point.h"
#include "common/job_key.h"
#include "tools/agg-worker/run_summary.h"
#include "tools/agg-worker/vectors.h"
#include "tools/agg-ps/server.h"
#include "tools/agg-worker/verify.h"

namespace aggswitch::tools {
namespace {

using aggregator::DType;
using aggregator::ReduceOp;
using Clock = std::chrono::steady_clock;

constexpr int kExitMismatch = 1;
constexpr int kExitUsage = 2;
constexpr int kExitFailed = 3;

// Command-line text before it is checked and converted.
struct CliText {
  std::vector<std::string> switches;
  std::string bind = "0.0.0.0";
  std::string transport = "udp";
  std::string key = "0x5eed";
  std::string size = "1M";
  std::string dtype = "float32";
  std::string op = "sum";
  std::string task_info = "inband";
  std::string float_mode = "fixed";
  double rto_ms = 20;
  double min_rto_ms = 5;
  uint32_t timeout_ms = 10000;
  uint32_t deadline_ms = 0;
  std::string tan_listen;  // empty: this process runs no TAN
  std::string tan_trigger = "incremental";
  uint64_t tan_give_up_ms = 5000;
};

struct RunConfig {
  client::ClientOptions client;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t bytes = 0;
  uint32_t iterations = 1;
  uint32_t delay_ms = 0;  // before each allreduce: a straggler
  // The number that picks the switch, and the upper switch, of every
  // allreduce; unset: the client's default, the allreduce's index.
  std::optional<uint32_t> addr_low;
  bool verify = false;
  // Check the results as a parameter server's parameters (SgdCheck) with this
  // learning rate, instead of as sums.
  std::optional<float> verify_sgd;
  uint64_t seed = 1;
  std::string input;
  std::string json_path;
  bool quiet = false;
  // The job's TAN in this process (docs/stragglers.md, "The TAN is late"),
  // when tan_enabled; with tan_keeps_own the client offers it every
  // contribution first (case 2).
  bool tan_enabled = false;
  bool tan_keeps_own = false;
  PsServerOptions tan;
};

// Fills the typed fields of `cfg` from their text and checks the whole.
common::Status ApplyText(const CliText& t, RunConfig& cfg) {
  client::ClientOptions& o = cfg.client;
  for (const std::string& s : t.switches) {
    common::Result<client::SwitchAddress> address = client::ParseSwitchAddress(s);
    if (!address.ok()) return common::InvalidArgument("--switch: " + address.status().message());
    o.switches.push_back(*address);
  }
  const auto bind = common::Ipv4Addr::Parse(t.bind);
  if (!bind) return common::InvalidArgument("--bind: expected a.b.c.d, got \"" + t.bind + "\"");
  o.bind_ip = *bind;
  o.transport = t.transport == "af_xdp" ? client::TransportKind::kAfXdp : client::TransportKind::kUdp;
  ASSIGN_OR_RETURN(o.job_key, common::ParseJobKeyOption("--key", t.key));
  if (!t.tan_listen.empty()) {
    ASSIGN_OR_RETURN(cfg.tan.listen, ParseListen(t.tan_listen));
    cfg.tan_enabled = true;
    cfg.tan.tan.give_up_ns = t.tan_give_up_ms * 1'000'000;
    cfg.tan.tan.trigger = t.tan_trigger == "batch" ? aggregator::TanTrigger::kBatch
                                                   : aggregator::TanTrigger::kIncremental;
  } else if (cfg.tan_keeps_own || !cfg.tan.stats_path.empty()) {
    return common::InvalidArgument(std::string(cfg.tan_keeps_own ? "--tan-keeps-own" : "--tan-stats") +
                                   ": needs --tan-listen (this process runs no TAN)");
  }
  ASSIGN_OR_RETURN(cfg.bytes, ParseSize(t.size));
  // (The options' checks allow only these names.)
  cfg.dtype = aggregator::DTypeFromName(t.dtype).value_or(DType::kFloat32);
  cfg.op = aggregator::ReduceOpFromName(t.op).value_or(ReduceOp::kSum);
  if (!aggregator::IsValid(cfg.dtype, cfg.op)) {
    return common::InvalidArgument("--op " + t.op + " is not defined for --dtype " + t.dtype +
                                   " (sum/min/max: numbers; and/or: int32 and bool)");
  }
  const size_t size = aggregator::ElementSize(cfg.dtype);
  if (cfg.input.empty() && (cfg.bytes == 0 || cfg.bytes % size != 0)) {
    return common::InvalidArgument("--size: " + std::to_string(cfg.bytes) +
                                   " bytes is not a positive whole number of " + t.dtype +
                                   " elements");
  }
  o.task_info = t.task_info == "none"       ? client::TaskInfoMode::kNone
                : t.task_info == "announce" ? client::TaskInfoMode::kControlUnit
                                            : client::TaskInfoMode::kInBand;
  o.float_mode = t.float_mode == "float"     ? client::FloatMode::kFloat
                 : t.float_mode == "ordered" ? client::FloatMode::kFloatOrdered
                                             : client::FloatMode::kFixedPoint;
  if (!(t.rto_ms > 0)) return common::InvalidArgument("--rto-ms: more than 0 expected");
  if (!(t.min_rto_ms > 0)) return common::InvalidArgument("--min-rto-ms: more than 0 expected");
  o.progress_timeout = std::chrono::milliseconds(t.timeout_ms);
  o.deadline = std::chrono::milliseconds(t.deadline_ms);
  o.retransmit_timeout = std::chrono::microseconds(static_cast<int64_t>(t.rto_ms * 1000));
  o.min_retransmit_timeout = std::chrono::microseconds(static_cast<int64_t>(t.min_rto_ms * 1000));
  if (o.max_retransmit_timeout < o.retransmit_timeout) {
    o.max_retransmit_timeout = o.retransmit_timeout;
  }
  if (cfg.iterations == 0) return common::InvalidArgument("--iterations: at least 1 expected");
  if (cfg.verify_sgd && (cfg.dtype != DType::kFloat32 || cfg.op != ReduceOp::kSum ||
                         o.float_mode == client::FloatMode::kFixedPoint ||
                         !std::isfinite(*cfg.verify_sgd))) {
    return common::InvalidArgument(
        "--verify-sgd: a parameter server updates float32 parameters: needs a finite learning "
        "rate, --dtype float32 --op sum and --float-mode float or ordered");
  }
  return client::ValidateClientOptions(o);
}

// A one-line bar on stderr, drawn only when stderr is a terminal and the run
// has taken more than half a second (short runs stay quiet), at most ten
// times a second.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO) == 1) {}

  void Update(double fraction, uint32_t iteration, uint32_t iterations, double bytes_done) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (now - start_ < std::chrono::milliseconds(500) ||
        now - last_ < std::chrono::milliseconds(100)) {
      return;
    }
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(kWidth, '.');
    bar.replace(0, filled, filled, '#');
    std::fprintf(stderr, "\r[%s] %3.0f%%  iteration %u/%u  %.1f MB/s ", bar.c_str(), fraction * 100,
                 iteration, iterations, bytes_done / elapsed / 1e6);
    drawn_ = true;
  }

  void Finish() {
    if (drawn_) std::fprintf(stderr, "\r%*s\r", 80, "");
  }

 private:
  const bool enabled_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
  bool drawn_ = false;
};

template <typename T>
int RunTyped(const RunConfig& cfg, client::Client& c, const RankVectors& vectors,
             RunSummary& summary) {
  const size_t n = vectors.elements();
  const auto buffer = std::make_unique<T[]>(n);
  auto* bytes = reinterpret_cast<uint8_t*>(buffer.get());
  const uint16_t rank = cfg.client.rank;
  const uint32_t chunks_per_iteration =
      static_cast<uint32_t>((n + c.ChunkElements(cfg.dtype) - 1) / c.ChunkElements(cfg.dtype));
  VerifySpec spec;
  spec.dtype = cfg.dtype;
  spec.op = cfg.op;
  spec.float_mode = cfg.client.float_mode;
  spec.headroom = cfg.client.headroom.value_or(client::DefaultHeadroom(cfg.client.world));
  spec.world = cfg.client.world;
  spec.chunk_elements = c.ChunkElements(cfg.dtype);
  std::optional<SgdCheck> sgd;
  if (cfg.verify_sgd) sgd.emplace(*cfg.verify_sgd, n);

  ProgressBar bar(!cfg.quiet);
  std::vector<double> seconds;
  for (uint32_t it = 0; it < cfg.iterations; ++it) {
    vectors.Read(rank, it, 0, n, bytes);
    if (cfg.delay_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(cfg.delay_ms));
    const uint64_t results_before = c.stats().results;
    const Clock::time_point t0 = Clock::now();
    const client::Pending p = c.Start(std::span<T>(buffer.get(), n), cfg.op, cfg.addr_low);
    while (!p.WaitFor(std::chrono::milliseconds(100))) {
      const double part = std::min(
          1.0, static_cast<double>(c.stats().results - results_before) / chunks_per_iteration);
      bar.Update((it + part) / cfg.iterations, it + 1, cfg.iterations,
                 (it + part) * static_cast<double>(summary.bytes));
    }
    const Clock::time_point t1 = Clock::now();
    if (const common::Status s = p.Wait(); !s.ok()) {
      // An int32 sum that overflowed: with --verify, right when some sum
      // can saturate (and the client goes on); anything else ends the run.
      if (s.code() == common::StatusCode::kOutOfRange && cfg.verify && !sgd) {
        const VerifyReport r = VerifyOverflow(spec, vectors, it);
        if (r.ok()) {
          ++summary.overflows;
          ++summary.verified;
          continue;
        }
        summary.mismatches += r.mismatches;
        for (const std::string& e : r.examples) {
          if (summary.mismatch_examples.size() == kMaxMismatchExamples) break;
          summary.mismatch_examples.push_back("iteration " + std::to_string(it + 1) + ": " + e);
        }
      }
      summary.error = "allreduce " + std::to_string(it + 1) + " of " +
                      std::to_string(cfg.iterations) + " failed: " + s.ToString();
      break;
    }
    ++summary.completed;
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    bar.Update(static_cast<double>(it + 1) / cfg.iterations, it + 1, cfg.iterations,
               (it + 1.0) * static_cast<double>(summary.bytes));
    if (cfg.verify || sgd) {
      const VerifyReport r = sgd ? sgd->Check(spec, vectors, it, bytes) : Verify(spec, vectors, it, bytes);
      summary.mismatches += r.mismatches;
      if (r.ok()) ++summary.verified;
      for (const std::string& e : r.examples) {
        if (summary.mismatch_examples.size() == kMaxMismatchExamples) break;
        summary.mismatch_examples.push_back("iteration " + std::to_string(it + 1) + ": " + e);
      }
    }
  }
  bar.Finish();
  summary.latency = Summarize(std::move(seconds));
  summary.stats = c.stats();
  if (!summary.error.empty()) return kExitFailed;
  return summary.mismatches > 0 ? kExitMismatch : 0;
}

int Run(const RunConfig& cfg, const CliText& text) {
  const client::ClientOptions& o = cfg.client;
  std::unique_ptr<RankVectors> vectors;
  if (!cfg.input.empty()) {
    std::vector<uint16_t> ranks = {o.rank};
    if (cfg.verify || cfg.verify_sgd) {
      ranks.clear();
      for (uint16_t r = 0; r < o.world; ++r) ranks.push_back(r);
    }
    auto files = FileVectors::Load(cfg.input, cfg.dtype, ranks);
    if (!files.ok()) {
      std::fprintf(stderr, "agg-worker: error: %s\n", files.status().message().c_str());
      return kExitUsage;
    }
    vectors = std::move(*files);
  } else {
    vectors = std::make_unique<GeneratedVectors>(cfg.dtype, cfg.op, o.world, cfg.seed,
                                                 cfg.bytes / aggregator::ElementSize(cfg.dtype));
  }
  // The job's TAN, when this process runs it: its own loop on its own socket,
  // in a thread that ends with the run.
  std::unique_ptr<PsServer> tan;
  std::atomic<bool> tan_stop{false};
  std::thread tan_thread;
  common::Status tan_status;
  client::ClientOptions with_tan = o;
  if (cfg.tan_enabled) {
    auto opened = PsServer::Open(cfg.tan);
    if (!opened.ok()) {
      std::fprintf(stderr, "agg-worker: error: --tan-listen: %s\n",
                   opened.status().message().c_str());
      return kExitUsage;
    }
    tan = std::move(*opened);
    // Its results for this rank come from its socket (127.0.0.1 when it
    // listens on every address and sends over loopback).
    const uint32_t tan_ip = cfg.tan.listen.ip.addr != 0 ? cfg.tan.listen.ip.addr : 0x7f000001;
    with_tan.local_tan = client::SwitchAddress{common::Ipv4Addr{tan_ip}, tan->port()};
    tan_thread = std::thread([&] { tan_status = tan->Run(tan_stop); });
    if (cfg.tan_keeps_own) {
      with_tan.offer_to_local_tan = [server = tan.get()](const uint8_t* d, uint32_t n) {
        return server->OfferOwn(d, n);
      };
    }
  }
  const auto stop_tan = [&] {
    if (!tan_thread.joinable()) return;
    tan_stop = true;
    tan_thread.join();
    if (!tan_status.ok()) {
      std::fprintf(stderr, "agg-worker: error: the TAN stopped: %s\n",
                   tan_status.message().c_str());
    }
  };
  auto c = client::Client::Create(with_tan);
  if (!c.ok()) {
    std::fprintf(stderr, "agg-worker: error: %s\n", c.status().ToString().c_str());
    stop_tan();
    return kExitFailed;
  }
  if (tan != nullptr) {
    // Results of chunks whose data the TAN kept come straight to the client.
    const uint32_t ip = o.bind_ip.addr != 0 ? o.bind_ip.addr : 0x7f000001;  // 127.0.0.1
    tan->SetOwnWorker({ip, (*c)->local_port()});
  }

  RunSummary summary;
  summary.rank = o.rank;
  summary.world = o.world;
  summary.job = o.job_id;
  summary.dtype = text.dtype;
  summary.op = text.op;
  summary.float_mode = text.float_mode;
  summary.transport = (*c)->transport_description();
  for (const std::string& s : text.switches) {
    summary.switches += (summary.switches.empty() ? "" : ",") + s;
  }
  summary.elements = vectors->elements();
  summary.bytes = summary.elements * aggregator::ElementSize(cfg.dtype);
  summary.iterations = cfg.iterations;
  summary.verify = cfg.verify || cfg.verify_sgd.has_value();
  int rc = 0;
  switch (cfg.dtype) {
    case DType::kInt32:
      rc = RunTyped<int32_t>(cfg, **c, *vectors, summary);
      break;
    case DType::kFloat32:
      rc = RunTyped<float>(cfg, **c, *vectors, summary);
      break;
    case DType::kFloat16:
      rc = RunTyped<client::Float16>(cfg, **c, *vectors, summary);
      break;
    case DType::kBFloat16:
      rc = RunTyped<client::BFloat16>(cfg, **c, *vectors, summary);
      break;
    case DType::kBool:
      rc = RunTyped<bool>(cfg, **c, *vectors, summary);
      break;
  }
  c->reset();  // no more offers to the TAN
  stop_tan();
  if (rc == 0 && !tan_status.ok()) rc = kExitFailed;
  PrintSummary(stdout, summary);
  if (!cfg.json_path.empty()) {
    if (const common::Status s = WriteJsonSummary(cfg.json_path, summary); !s.ok()) {
      std::fprintf(stderr, "agg-worker: error: %s\n", s.message().c_str());
      if (rc == 0) rc = kExitFailed;
    }
  }
  return rc;
}

int Main(int argc, char** argv) {
  RunConfig cfg;
  CliText text;
  client::ClientOptions& o = cfg.client;
  CLI::App app{"agg-worker: one rank of an allreduce job through aggswitch (kernel UDP or AF_XDP)"};
  // The job.
  app.add_option("--rank", o.rank, "This process's rank, 0..world-1")->required();
  app.add_option("--world", o.world, "Ranks in the job, over every node")->required();
  app.add_option("--nodes", o.node_count,
                 "Nodes the ranks are spread over, world/nodes ranks behind each node's switch "
                 "(node i: ranks i*world/nodes and up); the switches send their partial sums to "
                 "an upper switch (their aggregation.upstreams)")
      ->capture_default_str();
  app.add_option("--job", o.job_id, "Job id (1..4294967295)")->required();
  app.add_option("--key", text.key, "Job key (0x... or decimal)")->capture_default_str();
  app.add_option("--switch", text.switches,
                 "Switch aggregation address a.b.c.d[:port] (port 47000 by default); repeat for "
                 "several switches: allreduce i goes to switch i mod N")
      ->required();
  app.add_option("--addr-low", cfg.addr_low,
                 "The number that picks the switch (addr_low mod switches) and, with --nodes, the "
                 "upper switch of every allreduce; the same on every rank (default: the "
                 "allreduce's index)");
  app.add_option("--bind", text.bind, "Local IPv4 address to send from")->capture_default_str();
  app.add_option("--transport", text.transport,
                 "udp: kernel UDP sockets, unprivileged; af_xdp: an AF_XDP socket on --iface, "
                 "with the client's XDP program there (root)")
      ->check(CLI::IsMember({"udp", "af_xdp"}))
      ->capture_default_str();
  app.add_option("--iface", o.interface, "af_xdp: the interface that reaches the switch");
  app.add_option("--queue", o.queue, "af_xdp: the interface's queue the answers arrive on")
      ->capture_default_str();
  app.add_option("--task-info", text.task_info,
                 "How the switch learns the job: none (configured there), inband (in every "
                 "contribution), announce (rank 0 sends TASK_INFO first)")
      ->check(CLI::IsMember({"none", "inband", "announce"}))
      ->capture_default_str();
  // The data.
  app.add_option("--size", text.size, "Bytes per vector (K, M, G: powers of 1024)")
      ->capture_default_str();
  app.add_option("--dtype", text.dtype, "Element type")
      ->check(CLI::IsMember({"int32", "float32", "float16", "bfloat16", "bool"}))
      ->capture_default_str();
  app.add_option("--op", text.op, "Reduction")
      ->check(CLI::IsMember({"sum", "min", "max", "and", "or"}))
      ->capture_default_str();
  app.add_option("--iterations", cfg.iterations, "Allreduces to run")->capture_default_str();
  app.add_option("--delay-ms", cfg.delay_ms,
                 "Wait this long before each allreduce, as a straggler does (not counted in its "
                 "latency)")
      ->capture_default_str();
  app.add_option("--reserve-missing-ids", o.reserve_missing_ids,
                 "Room kept in each chunk for a switch's missing list, in node ids (0..255; 0 for "
                 "a single switch without timers)")
      ->capture_default_str();
  app.add_option("--seed", cfg.seed, "Seed of the generated vectors (the same on every rank)")
      ->capture_default_str();
  app.add_option("--input", cfg.input,
                 "Allreduce this file's elements instead (raw little-endian; \"{rank}\" in the "
                 "path becomes the rank); overrides --size");
  CLI::Option* verify = app.add_flag("--verify", cfg.verify, "Check every result against the local reduction");
  app.add_option("--verify-sgd", cfg.verify_sgd,
                 "Check every result as the parameters of the job's parameter server (agg-ps --sgd "
                 "JOB=LR) after one step per allreduce: p -= LR * sum, from 0 (float32 sums, "
                 "--float-mode float or ordered)")
      ->option_text("LR")
      ->excludes(verify);
  // How it travels.
  app.add_option("--float-mode", text.float_mode,
                 "Float sums: fixed (float32 as int32 fixed point, exact), float (arrival "
                 "order), ordered (rank order, exact)")
      ->check(CLI::IsMember({"fixed", "float", "ordered"}))
      ->capture_default_str();
  app.add_option("--headroom", o.headroom,
                 "Fixed point: bits of headroom for the sum (default ceil(log2(world)), which "
                 "cannot overflow; less: more precision, overflowed chunks redone as float32)");
  app.add_option("--window", o.window, "Chunks in flight")->capture_default_str();
  app.add_option("--mtu", o.mtu, "Path MTU: each chunk fills one packet of this size")
      ->capture_default_str();
  app.add_option("--rto-ms", text.rto_ms,
                 "Retransmission timeout until the round trip to the switch is measured, ms "
                 "(then the smoothed round trip plus four times its variation)")
      ->capture_default_str();
  app.add_option("--min-rto-ms", text.min_rto_ms,
                 "The least retransmission timeout, ms (--rto-ms when that is less): lower "
                 "recovers losses sooner, and asks after more chunks where round trips vary")
      ->capture_default_str();
  app.add_flag("--resend-to-ps", o.resend_to_parameter_node,
               "The job's root switch has a parameter node (an agg-ps as its TAN): mark data "
               "resent after a loss for it (AGGREGATE_AT_PS), so the parameter node completes "
               "the chunk; the float32 redo of an overflowed fixed-point chunk goes there too");
  app.add_flag("--verify-mode", o.verify,
               "With --task-info in-band or control-unit: the job runs in verify mode, its "
               "parameter node checks every complete chunk before the ranks receive it");
  app.add_option("--timeout-ms", text.timeout_ms,
                 "Fail an allreduce when no result arrives for this long, ms")
      ->capture_default_str();
  app.add_option("--deadline-ms", text.deadline_ms,
                 "Fail an allreduce that takes longer, ms (0: none)")
      ->capture_default_str();
  app.add_option("--first-seq", o.first_seq, "First sequence number (the same on every rank)")
      ->capture_default_str();
  app.add_option("--run-id", o.run_id,
                 "This run's id, the same on every rank and another on the next run (a launcher's "
                 "job id and restart count): the switch then tells a new run from the last one "
                 "even by a rank that never sent in it; 0: each process draws its own incarnation")
      ->capture_default_str();
  // The job's TAN in this process.
  app.add_option("--tan-listen", text.tan_listen,
                 "Also run the job's timeout aggregation node (as agg-ps does) on this UDP "
                 "address, for as long as the run lasts")
      ->type_name("ADDR:PORT");
  app.add_option("--tan-give-up-ms", text.tan_give_up_ms,
                 "The TAN's INCOMPLETE result this long after a chunk's first data")
      ->capture_default_str();
  app.add_option("--tan-trigger", text.tan_trigger, "The TAN's trigger: incremental or batch")
      ->check(CLI::IsMember({"incremental", "batch"}))
      ->capture_default_str();
  app.add_flag("--tan-keeps-own", cfg.tan_keeps_own,
               "When this rank is late, give its data to the TAN here instead of sending it; "
               "the switch must name this rank in jobs[].tan_member");
  app.add_option("--tan-stats", cfg.tan.stats_path,
                 "Write the TAN's counters as JSON to FILE every 500 ms and at exit")
      ->type_name("FILE");
  // What it reports.
  app.add_option("--json", cfg.json_path, "Also write the summary as JSON here");
  app.add_flag("--quiet", cfg.quiet, "No progress bar");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (const common::Status s = ApplyText(text, cfg); !s.ok()) {
    std::fprintf(stderr, "agg-worker: error: %s\n", s.message().c_str());
    return kExitUsage;
  }
  return Run(cfg, text);
}

}  // namespace
}  // namespace aggswitch::tools

int main(int argc, char** argv) {
  return aggswitch::tools::Main(argc, argv);
}
