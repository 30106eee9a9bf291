// gloo_allreduce: one rank of a float32 sum allreduce with Gloo's ring
// algorithm over its TCP transport: the Gloo baseline of bench/allreduce.sh.
// Start one process per rank; they meet through a FileStore directory and
// connect a full mesh of TCP connections on --host (127.0.0.1: loopback):
//
//   for r in 0 1 2 3; do
//     gloo_allreduce --rank $r --world 4 --store /tmp/rdv --prefix run1
//                    --size 64M --iterations 5 --json /tmp/gloo.{rank}.json &
//   done; wait
//
// Iteration 0 allreduces the seeded vectors (allreduce_common.h) and checks the
// result bit for bit on every rank; then --iterations timed allreduces, each
// after refilling the buffer and a barrier, so a rank's time is the
// allreduce's alone. --prefix names the run in the store: reuse a directory
// only with a new prefix. Exit codes as agg-worker's (allreduce_common.h).
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

#include "bench/allreduce/allreduce_common.h"

namespace aggswitch::bench {
namespace {

using Clock = std::chrono::steady_clock;

void SumFloats(void* c, const void* a, const void* b, size_t n) {
  gloo::sum<float>(c, a, b, n);
}

void AllReduce(const std::shared_ptr<gloo::Context>& ctx, std::vector<float>& buf, uint32_t tag) {
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(buf.data(), buf.size());
  opts.setReduceFunction(&SumFloats);
  opts.setTag(tag);
  gloo::allreduce(opts);
}

void Barrier(const std::shared_ptr<gloo::Context>& ctx, uint32_t tag) {
  gloo::BarrierOptions opts(ctx);
  opts.setTag(tag);
  gloo::barrier(opts);
}

// Everything that can throw (Gloo reports failures as exceptions); the caller
// turns an exception into summary.error.
void RunRank(const RunOptions& o, Summary& s) {
  const Clock::time_point start = Clock::now();
  gloo::transport::tcp::attr attr(o.host.c_str());
  attr.ai_family = AF_INET;
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore files(o.store);
  gloo::rendezvous::PrefixStore store(o.prefix, files);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world);
  ctx->setTimeout(std::chrono::milliseconds(o.timeout_ms));
  ctx->connectFullMesh(store, device);

  const size_t n = o.bytes / sizeof(float);
  std::vector<float> pristine(n);
  FillRank(o.seed, o.rank, pristine);
  std::vector<float> buf = pristine;
  uint32_t tag = 0;
  AllReduce(ctx, buf, tag++);
  s.setup_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const VerifyReport v = Verify(o.seed, o.world, buf);
  s.verified = true;
  s.mismatches = v.mismatches;
  if (v.mismatches > 0) {
    s.error = std::to_string(v.mismatches) + " elements differ from the local sum; " + v.first;
    return;
  }
  for (uint32_t it = 0; it < o.iterations; ++it) {
    std::copy(pristine.begin(), pristine.end(), buf.begin());
    Barrier(ctx, tag++);
    const Clock::time_point t0 = Clock::now();
    AllReduce(ctx, buf, tag++);
    s.seconds.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Barrier(ctx, tag++);  // no rank closes its connections while a peer still reads
}

int Main(int argc, char** argv) {
  RunOptions o;
  if (const std::string e = ParseArgs(argc, argv, /*gloo=*/true, o); !e.empty()) {
    if (e == "help") {
      std::printf(
          "usage: gloo_allreduce --rank R --world W --store DIR [--prefix NAME] [--host ADDR]\n"
          "                      [--size BYTES(K|M|G)] [--iterations N] [--seed S]\n"
          "                      [--timeout-ms MS] [--json PATH-with-{rank}]\n");
      return 0;
    }
    std::fprintf(stderr, "gloo_allreduce: %s (see --help)\n", e.c_str());
    return kExitUsage;
  }
  Summary s;
  s.method = "gloo ring";
  s.rank = o.rank;
  s.world = o.world;
  s.bytes = o.bytes;
  try {
    RunRank(o, s);
  } catch (const std::exception& e) {
    s.error = std::string("gloo: ") + e.what();
  }
  const bool written = Report(o, s);
  if (s.mismatches > 0) return kExitMismatch;
  return s.error.empty() && written ? 0 : kExitFailed;
}

}  // namespace
}  // namespace aggswitch::bench

int main(int argc, char** argv) {
  return aggswitch::bench::Main(argc, argv);
}
