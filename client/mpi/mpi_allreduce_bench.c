/* mpi_allreduce_bench: MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT, MPI_SUM) on
 * MPI_COMM_WORLD, timed. A plain MPI program: bench/mpi_allreduce.sh runs it
 * with and without libaggswitch_mpi.so preloaded.
 *
 *   mpirun -np 4 mpi_allreduce_bench --size 16M [--iterations 10] [--warmup 2]
 *
 * The buffer holds small integers (exact in float32 and in any order), so
 * the first warm-up allreduce is checked against the sum every rank can
 * compute; the warm-ups also set the communicator up (with the library: its
 * job and probe). Each timed allreduce follows a refill of the buffer and an
 * MPI_Barrier; its time is the slowest rank's (MPI_Reduce of MPI_MAX, which
 * the library leaves to MPI). Rank 0 prints one line:
 *
 *   size_bytes=16777216 iterations=10 median_s=0.0412 min_s=0.0398 max_s=0.0450
 *
 * Exit codes: 0 done; 1 the checked result was wrong; 2 a bad command line;
 * 3 an MPI error. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float Value(size_t i, int rank) { return (float)((i * 7 + (size_t)rank * 3) % 61) - 30.0f; }

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int ParseSize(const char* text, size_t* bytes) {
  char* end = NULL;
  const unsigned long long n = strtoull(text, &end, 10);
  unsigned long long scale = 1;
  if (*end == 'K') scale = 1ull << 10;
  else if (*end == 'M') scale = 1ull << 20;
  else if (*end == 'G') scale = 1ull << 30;
  if (end == text || (scale > 1 && end[1] != '\0') || (scale == 1 && *end != '\0') || n == 0) return 0;
  *bytes = (size_t)(n * scale);
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t bytes = 1 << 20;
  int iterations = 10, warmup = 2;
  for (int i = 1; i < argc; ++i) {
    int ok = i + 1 < argc;
    if (ok && strcmp(argv[i], "--size") == 0) {
      ok = ParseSize(argv[++i], &bytes);
    } else if (ok && strcmp(argv[i], "--iterations") == 0) {
      iterations = atoi(argv[++i]);
      ok = iterations > 0;
    } else if (ok && strcmp(argv[i], "--warmup") == 0) {
      warmup = atoi(argv[++i]);
      ok = warmup > 0;
    } else {
      ok = 0;
    }
    if (!ok) {
      if (rank == 0) {
        fprintf(stderr, "usage: mpi_allreduce_bench [--size N[K|M|G]] [--iterations N] [--warmup N (>= 1)]\n");
      }
      MPI_Finalize();
      return 2;
    }
  }
  const size_t n = bytes / sizeof(float);
  if (n == 0 || n > 0x7fffffff) {
    if (rank == 0) fprintf(stderr, "mpi_allreduce_bench: --size: 4 B .. 8 GiB\n");
    MPI_Finalize();
    return 2;
  }
  float* pristine = malloc(n * sizeof(float));
  float* buf = malloc(n * sizeof(float));
  double* times = malloc((size_t)iterations * sizeof(double));
  for (size_t i = 0; i < n; ++i) pristine[i] = Value(i, rank);

  int status = 0;
  for (int it = 0; it < warmup + iterations && status == 0; ++it) {
    memcpy(buf, pristine, n * sizeof(float));
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0, slowest = 0;
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, text, &len);
      fprintf(stderr, "mpi_allreduce_bench: rank %d: MPI_Allreduce: %s\n", rank, text);
      status = 3;
      break;
    }
    if (it == 0) {
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += Value(i, r);
        if (buf[i] != want) {
          fprintf(stderr, "mpi_allreduce_bench: rank %d: element %zu is %g, not %g\n", rank, i, buf[i], want);
          status = 1;
          break;
        }
      }
    }
    MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (it >= warmup) times[it - warmup] = slowest;
  }
  /* Reduce and Bcast, which the library leaves to MPI: a broken switch
   * path cannot hide a failure here. */
  int worst = 0;
  MPI_Reduce(&status, &worst, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Bcast(&worst, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (worst == 0 && rank == 0) {
    qsort(times, (size_t)iterations, sizeof(double), CompareDoubles);
    const double median = iterations % 2 ? times[iterations / 2]
                                         : (times[iterations / 2 - 1] + times[iterations / 2]) / 2;
    printf("size_bytes=%zu iterations=%d median_s=%.6f min_s=%.6f max_s=%.6f\n", bytes, iterations, median,
           times[0], times[iterations - 1]);
  }
  free(pristine);
  free(buf);
  free(times);
  MPI_Finalize();
  return worst;
}
