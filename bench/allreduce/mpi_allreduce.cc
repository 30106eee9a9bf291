// mpi_allreduce: a float32 sum MPI_Allreduce on every rank of MPI_COMM_WORLD:
// the Open MPI baseline of bench/allreduce.sh. Over TCP on one host:
//
//   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4
//          --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
//          mpi_allreduce --size 64M --iterations 5 --json /tmp/mpi.{rank}.json
//
// (pml ob1: without it Open MPI may pick UCX, which ignores the btl list.)
// Iteration 0 allreduces the seeded vectors (allreduce_common.h) and checks the
// result bit for bit on every rank; then --iterations timed allreduces, each
// after refilling the buffer and an MPI_Barrier. The algorithm is whatever
// Open MPI's coll framework picks for the size (tuned's decision rules).
// Exit codes as agg-worker's (allreduce_common.h).
// The C API only: without these, mpi.h also pulls in the deprecated C++
// bindings, which warn under -Wextra.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "bench/allreduce/allreduce_common.h"

namespace aggswitch::bench {
namespace {

// MPI's errors become return codes instead of aborting the job, so that a
// failure reaches the summary.
std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string("MPI: ") + std::string(text, static_cast<size_t>(len));
}

void RunRank(const RunOptions& o, Summary& s) {
  const double start = MPI_Wtime();
  const size_t n = o.bytes / sizeof(float);
  std::vector<float> pristine(n);
  FillRank(o.seed, s.rank, pristine);
  std::vector<float> buf = pristine;
  const int count = static_cast<int>(n);
  if (int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      rc != MPI_SUCCESS) {
    s.error = MpiError(rc);
    return;
  }
  s.setup_seconds = MPI_Wtime() - start;
  const VerifyReport v = Verify(o.seed, s.world, buf);
  s.verified = true;
  s.mismatches = v.mismatches;
  if (v.mismatches > 0) {
    s.error = std::to_string(v.mismatches) + " elements differ from the local sum; " + v.first;
    return;
  }
  for (uint32_t it = 0; it < o.iterations; ++it) {
    std::copy(pristine.begin(), pristine.end(), buf.begin());
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      s.error = MpiError(rc);
      return;
    }
    s.seconds.push_back(MPI_Wtime() - t0);
  }
}

int Main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Summary s;
  s.method = "mpi";
  MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &s.world);
  RunOptions o;
  o.rank = s.rank;
  o.world = s.world;
  if (const std::string e = ParseArgs(argc, argv, /*gloo=*/false, o); !e.empty()) {
    if (s.rank == 0) {
      if (e == "help") {
        std::printf(
            "usage: mpirun ... mpi_allreduce [--size BYTES(K|M|G)] [--iterations N] [--seed S]\n"
            "                                [--json PATH-with-{rank}]\n");
      } else {
        std::fprintf(stderr, "mpi_allreduce: %s (see --help)\n", e.c_str());
      }
    }
    MPI_Finalize();
    return e == "help" ? 0 : kExitUsage;
  }
  if (s.world > kMaxWorld || o.bytes / sizeof(float) > static_cast<uint64_t>(INT32_MAX)) {
    if (s.rank == 0)
      std::fprintf(stderr, "mpi_allreduce: at most %d ranks and 2^31-1 elements\n", kMaxWorld);
    MPI_Finalize();
    return kExitUsage;
  }
  s.bytes = o.bytes;
  RunRank(o, s);
  const bool written = Report(o, s);
  MPI_Finalize();
  if (s.mismatches > 0) return kExitMismatch;
  return s.error.empty() && written ? 0 : kExitFailed;
}

}  // namespace
}  // namespace aggswitch::bench

int main(int argc, char** argv) {
  return aggswitch::bench::Main(argc, argv);
}
