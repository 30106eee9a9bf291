/* allreduce_check: a plain MPI program that allreduces every way the
 * aggswitch MPI library handles, and some it passes on, and prints a digest
 * of every result. It knows nothing of aggswitch: tests/system/mpi_netns_test.sh
 * runs it without and with libaggswitch_mpi.so preloaded, and the two
 * outputs must be equal.
 *
 *   mpirun -np 4 allreduce_check            every case
 *   mpirun -np 4 allreduce_check --prod     the MPI_PROD cases only
 *   mpirun -np 4 allreduce_check --nonblocking   the MPI_Iallreduce cases only
 *
 * The cases: MPI_Allreduce of every (MPI_FLOAT, MPI_INT, MPI_C_BOOL) x
 * (MPI_SUM, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR) pair MPI defines and the
 * switch takes, each with a separate send buffer and with MPI_IN_PLACE;
 * MPI_Iallreduce completed by MPI_Wait, by an MPI_Test loop and by
 * MPI_Waitall (with an MPI_PROD one among them); MPI_COMM_WORLD split into
 * two halves that allreduce at once, each on its own; and MPI_PROD and
 * MPI_DOUBLE, which no switch reduces.
 *
 * Inputs are exact: floats are multiples of 1/64 below 16 in magnitude, so
 * every partial sum is exact in float32 (and in the switch's fixed point),
 * and products are of 1, 1.25 and 1.5; MPI's answer then does not depend on
 * the order of the reduction, and neither does the switch's. MPI_LAND and
 * MPI_LOR get ints other than 0 and 1 (MPI's logical, not bitwise, and/or).
 *
 * Rank 0 prints one line per case: its name, an FNV-1a digest of the result
 * and its first elements, and whether every rank (of the communicator) got
 * the same bytes. Errors return (MPI_ERRORS_RETURN); the first one is
 * printed and aborts the job with exit code 2. */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kCount = 5000 };

static int world_rank;
static int world_size;

static void Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fprintf(stderr, "allreduce_check: rank %d: %s: %s\n", world_rank, what, text);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

static uint64_t Fnv1a(const void* data, size_t bytes) {
  const unsigned char* p = data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Prints `name`, the digest and the first elements of the result, gathered
 * to rank 0 of MPI_COMM_WORLD from the rank 0 of `comm` (the half it
 * belongs to, or the world), with whether all of `comm` agree. */
static void Report(const char* name, MPI_Comm comm, MPI_Datatype type, const void* data, size_t bytes) {
  uint64_t mine = Fnv1a(data, bytes);
  int size = 0, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  uint64_t all[64];
  Check(MPI_Gather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, comm), "MPI_Gather");
  char line[256] = {0};
  if (rank == 0) {
    int agree = 1;
    for (int i = 1; i < size; ++i) agree &= all[i] == all[0];
    char first[96] = {0};
    if (type == MPI_FLOAT) {
      const float* f = data;
      snprintf(first, sizeof first, "%g %g %g", f[0], f[1], f[2]);
    } else if (type == MPI_DOUBLE) {
      const double* f = data;
      snprintf(first, sizeof first, "%g %g %g", f[0], f[1], f[2]);
    } else if (type == MPI_INT) {
      const int* v = data;
      snprintf(first, sizeof first, "%d %d %d", v[0], v[1], v[2]);
    } else {
      const bool* b = data;
      snprintf(first, sizeof first, "%d %d %d", b[0], b[1], b[2]);
    }
    snprintf(line, sizeof line, "%-34s %016llx  [%s ...]  ranks agree: %s", name,
             (unsigned long long)all[0], first, agree ? "yes" : "NO");
  }
  /* The world's rank 0 prints every line: gather the other half's. */
  int is_root = rank == 0;
  int roots[64];
  Check(MPI_Gather(&is_root, 1, MPI_INT, roots, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  if (world_rank == 0) {
    if (is_root) printf("%s\n", line);
    for (int r = 1; r < world_size; ++r) {
      if (!roots[r]) continue;
      char other[256];
      Check(MPI_Recv(other, sizeof other, MPI_CHAR, r, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
      printf("%s\n", other);
    }
    fflush(stdout);
  } else if (is_root) {
    Check(MPI_Send(line, sizeof line, MPI_CHAR, 0, 7, MPI_COMM_WORLD), "MPI_Send");
  }
}

/* This rank's input for (type, op) at element i. */
static void Fill(MPI_Datatype type, MPI_Op op, int rank, void* out, int count) {
  for (int i = 0; i < count; ++i) {
    if (type == MPI_FLOAT) {
      float* f = out;
      if (op == MPI_PROD) {
        f[i] = 1.0f + (float)((i + rank) % 3) / 4.0f; /* 1, 1.25, 1.5 */
      } else {
        f[i] = (float)((i * 7 + rank * 13) % 2001 - 1000) / 64.0f;
      }
    } else if (type == MPI_DOUBLE) {
      ((double*)out)[i] = (double)((i * 5 + rank * 11) % 1001 - 500) / 8.0;
    } else if (type == MPI_INT) {
      int* v = out;
      if (op == MPI_LAND || op == MPI_LOR) {
        v[i] = (i + rank) % 5; /* 0..4: logical, not bitwise */
      } else if (op == MPI_PROD) {
        v[i] = (i + rank) % 4 - 1;
      } else {
        v[i] = (i * 31 + rank * 17) % 20001 - 10000;
      }
    } else {
      bool* b = out;
      b[i] = op == MPI_LAND ? (i * 3 + rank) % 7 != 0 : (i * 5 + rank) % 9 == 0;
    }
  }
}

static size_t TypeSize(MPI_Datatype type) {
  int size = 0;
  MPI_Type_size(type, &size);
  return (size_t)size;
}

/* MPI_Allreduce of (type, op) on `comm`, with a separate send buffer or in place. */
static void Blocking(const char* name, MPI_Comm comm, MPI_Datatype type, MPI_Op op, int in_place) {
  const int rank = world_rank; /* the halves' inputs differ too */
  const size_t bytes = TypeSize(type) * kCount;
  void* send = malloc(bytes);
  void* recv = malloc(bytes);
  Fill(type, op, rank, send, kCount);
  if (in_place) {
    memcpy(recv, send, bytes);
    Check(MPI_Allreduce(MPI_IN_PLACE, recv, kCount, type, op, comm), name);
  } else {
    memset(recv, 0xa5, bytes);
    Check(MPI_Allreduce(send, recv, kCount, type, op, comm), name);
    /* The send buffer is left as it was. */
    void* again = malloc(bytes);
    Fill(type, op, rank, again, kCount);
    if (memcmp(again, send, bytes) != 0) {
      fprintf(stderr, "allreduce_check: %s changed the send buffer\n", name);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
    free(again);
  }
  Report(name, comm, type, recv, bytes);
  free(send);
  free(recv);
}

struct Pair {
  const char* name;
  MPI_Datatype type;
  MPI_Op op;
};

static void EveryPair(void) {
  const struct Pair pairs[] = {
      {"float sum", MPI_FLOAT, MPI_SUM}, {"float min", MPI_FLOAT, MPI_MIN},
      {"float max", MPI_FLOAT, MPI_MAX}, {"int sum", MPI_INT, MPI_SUM},
      {"int min", MPI_INT, MPI_MIN},     {"int max", MPI_INT, MPI_MAX},
      {"int land", MPI_INT, MPI_LAND},   {"int lor", MPI_INT, MPI_LOR},
      {"bool land", MPI_C_BOOL, MPI_LAND}, {"bool lor", MPI_C_BOOL, MPI_LOR},
  };
  for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; ++p) {
    char name[64];
    snprintf(name, sizeof name, "allreduce %s", pairs[p].name);
    Blocking(name, MPI_COMM_WORLD, pairs[p].type, pairs[p].op, 0);
    snprintf(name, sizeof name, "allreduce in place %s", pairs[p].name);
    Blocking(name, MPI_COMM_WORLD, pairs[p].type, pairs[p].op, 1);
  }
}

static void Nonblocking(void) {
  const size_t fbytes = sizeof(float) * kCount, ibytes = sizeof(int) * kCount;
  float* a = malloc(fbytes);
  float* a_in = malloc(fbytes);
  int* b = malloc(ibytes);
  float* c = malloc(fbytes);
  int* d = malloc(ibytes);
  MPI_Request r[3];

  /* MPI_Wait, separate send buffer. */
  Fill(MPI_FLOAT, MPI_SUM, world_rank, a_in, kCount);
  Check(MPI_Iallreduce(a_in, a, kCount, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r[0]), "MPI_Iallreduce");
  Check(MPI_Wait(&r[0], MPI_STATUS_IGNORE), "MPI_Wait");
  Report("iallreduce+wait float sum", MPI_COMM_WORLD, MPI_FLOAT, a, fbytes);

  /* An MPI_Test loop, in place. */
  Fill(MPI_INT, MPI_MAX, world_rank, b, kCount);
  Check(MPI_Iallreduce(MPI_IN_PLACE, b, kCount, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r[0]), "MPI_Iallreduce");
  int done = 0;
  while (!done) Check(MPI_Test(&r[0], &done, MPI_STATUS_IGNORE), "MPI_Test");
  Report("iallreduce+test int max", MPI_COMM_WORLD, MPI_INT, b, ibytes);

  /* Three at once, one of them MPI_PROD (MPI's own), under MPI_Waitall. */
  Fill(MPI_FLOAT, MPI_MIN, world_rank, a, kCount);
  Fill(MPI_FLOAT, MPI_PROD, world_rank, c, kCount);
  Fill(MPI_INT, MPI_LOR, world_rank, d, kCount);
  Check(MPI_Iallreduce(MPI_IN_PLACE, a, kCount, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD, &r[0]), "MPI_Iallreduce");
  Check(MPI_Iallreduce(MPI_IN_PLACE, c, kCount, MPI_FLOAT, MPI_PROD, MPI_COMM_WORLD, &r[1]), "MPI_Iallreduce");
  Check(MPI_Iallreduce(MPI_IN_PLACE, d, kCount, MPI_INT, MPI_LOR, MPI_COMM_WORLD, &r[2]), "MPI_Iallreduce");
  MPI_Status statuses[3];
  Check(MPI_Waitall(3, r, statuses), "MPI_Waitall");
  Report("iallreduce+waitall float min", MPI_COMM_WORLD, MPI_FLOAT, a, fbytes);
  Report("iallreduce+waitall float prod", MPI_COMM_WORLD, MPI_FLOAT, c, fbytes);
  Report("iallreduce+waitall int lor", MPI_COMM_WORLD, MPI_INT, d, ibytes);
  free(a);
  free(a_in);
  free(b);
  free(c);
  free(d);
}

/* The world in two halves (ranks below size/2, and the rest), each with
 * collectives of its own. */
static void Halves(void) {
  MPI_Comm half;
  const int color = world_rank < world_size / 2 ? 0 : 1;
  Check(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &half), "MPI_Comm_split");
  char name[64];
  snprintf(name, sizeof name, "half %d: allreduce float sum", color);
  Blocking(name, half, MPI_FLOAT, MPI_SUM, 0);
  snprintf(name, sizeof name, "half %d: allreduce in place int max", color);
  Blocking(name, half, MPI_INT, MPI_MAX, 1);
  const size_t bytes = sizeof(int) * kCount;
  int* v = malloc(bytes);
  Fill(MPI_INT, MPI_SUM, world_rank, v, kCount);
  MPI_Request r;
  Check(MPI_Iallreduce(MPI_IN_PLACE, v, kCount, MPI_INT, MPI_SUM, half, &r), "MPI_Iallreduce");
  Check(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
  snprintf(name, sizeof name, "half %d: iallreduce+wait int sum", color);
  Report(name, half, MPI_INT, v, bytes);
  free(v);
  Check(MPI_Comm_free(&half), "MPI_Comm_free");
}

static void Prod(void) {
  Blocking("allreduce float prod", MPI_COMM_WORLD, MPI_FLOAT, MPI_PROD, 0);
  Blocking("allreduce in place int prod", MPI_COMM_WORLD, MPI_INT, MPI_PROD, 1);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (world_size < 2 || world_size > 64) {
    if (world_rank == 0) fprintf(stderr, "allreduce_check: 2..64 ranks\n");
    MPI_Finalize();
    return 2;
  }
  const char* only = argc > 1 ? argv[1] : "";
  if (world_rank == 0) printf("allreduce_check: %d ranks, %d elements per case\n", world_size, kCount);
  if (strcmp(only, "--nonblocking") == 0) {
    Nonblocking();
  } else if (strcmp(only, "--prod") == 0) {
    Prod();
  } else {
    EveryPair();
    Nonblocking();
    Halves();
    Blocking("allreduce double sum", MPI_COMM_WORLD, MPI_DOUBLE, MPI_SUM, 0);
    Prod();
  }
  MPI_Finalize();
  return 0;
}
