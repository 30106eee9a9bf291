// libaggswitch_mpi.so: MPI_Allreduce and MPI_Iallreduce through aggswitch,
// for MPI programs written for plain MPI. Preloaded (LD_PRELOAD) or linked
// before libmpi, it defines the MPI_* functions below and calls the MPI
// library through its profiling interface (PMPI_*). docs/mpi.md is the
// user's side; the environment is read by mpi_env.h.
//
//   mpirun -np 4 -x LD_PRELOAD=libaggswitch_mpi.so -x AGGSWITCH_SWITCH=10.0.10.253 ./app
//
// What goes through the switch: MPI_Allreduce and MPI_Iallreduce of
// MPI_FLOAT, MPI_INT or MPI_C_BOOL with MPI_SUM, MPI_MIN, MPI_MAX, MPI_LAND
// or MPI_LOR (those the aggregation protocol defines: aggregator::IsValid),
// count > 0, on an intracommunicator of 2..kMaxWorld ranks, MPI_IN_PLACE or
// not (a separate send buffer is copied into the receive buffer, which is
// then reduced in place). Everything else, and everything while
// AGGSWITCH_SWITCH is unset, goes to PMPI_* unchanged. MPI_LAND and MPI_LOR
// are logical (the result is 0 or 1) where the switch's and/or of int32 are
// bitwise, so their operands are first made 0 or 1, where the two agree.
//
// A job per communicator. The first allreduce of a communicator that goes
// through the switch sets it up, collectively (Setup): rank 0 draws a job
// id and key (getrandom) and broadcasts them with PMPI_Bcast; every rank
// creates a client (in-band task info, rank = comm rank, world = comm size)
// and runs a one-element probe allreduce through the switch with a short
// timeout; then PMPI_Allreduce(MPI_MIN) over "the first rank that failed"
// decides for all: the switch, or, when any rank failed, MPI's own allreduce
// for that communicator from then on (AGGSWITCH_FALLBACK=1, one warning line
// from the communicator's rank 0, at most one per process) or an error
// through the communicator's error handler (AGGSWITCH_FALLBACK=0) on this
// and every later allreduce of it. Deciding alone would let ranks take
// different paths and hang. A later allreduce that fails through the switch
// is an error too (MPI_ERR_OTHER through the error handler): some ranks may
// have its result already, so it is not redone another way. The state lives
// in an attribute of the communicator (a keyval with a delete callback), so
// MPI_Comm_free tears its client down, and MPI_Comm_dup gets a job of its
// own (the copy callback copies nothing). MPI_Finalize tears every client
// down before PMPI_Finalize.
//
// MPI_Iallreduce returns a generalized request (MPI_Grequest_start) that a
// completion thread of the communicator completes (MPI_Grequest_complete)
// when the client's allreduce finishes, so MPI_Wait, MPI_Test, MPI_Waitall
// and the rest complete it like any request, and so does mpi4py. Why this
// way, under Open MPI 4.1:
//   - It is the standard's way, and Open MPI 4.1 has no MPIX_Grequest_start
//     (MPICH's extension whose poll function MPI_Wait/MPI_Test would call on
//     the waiting thread): its mpi-ext.h offers affinity, cuda and pcollreq
//     only.
//   - Completing from another thread is safe only at MPI_THREAD_MULTIPLE:
//     below it Open MPI updates the request's reference count and the
//     waiter's sync counter without atomics (opal_using_threads() is false),
//     and a completion racing MPI_Wait could lose an update. So while
//     AGGSWITCH_SWITCH is set, MPI_Init and MPI_Init_thread ask PMPI for
//     MPI_THREAD_MULTIPLE (provided says what MPI gave), and MPI_Iallreduce
//     goes through the switch only when PMPI_Query_thread says
//     MPI_THREAD_MULTIPLE; otherwise it falls through to PMPI_Iallreduce.
//   - Completing on the application's thread instead would mean wrapping
//     every wait and test function (Wait, Test, Waitall, Testany, Waitsome,
//     Request_get_status, ...) and still could not make progress inside
//     PMPI_Waitall on a mix of requests.
//   - One completion thread per communicator, not per process: allreduces of
//     one communicator finish in the order they start, those of different
//     communicators do not, and one thread waiting on communicator A could
//     hold back B's completion that another rank waits for before it joins A.
// A failed MPI_Iallreduce reports MPI_ERR_OTHER in the request's status and
// from the wait or test call (Open MPI invokes MPI_COMM_WORLD's error
// handler for errors of generalized requests).
//
// Thread safety: every MPI_* function here may be called from any thread
// the MPI library allows. Process-wide state (the environment, the keyval,
// the list of live states) is behind a mutex or a once-initialized static;
// a communicator's state is used only inside that communicator's
// collectives, which MPI requires the application to issue one at a time and
// in the same order on every rank; its completion thread shares only a
// mutex-guarded queue with them.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/mpi/mpi_env.h"

#define AGG_MPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace aggswitch::client::mpi {
namespace {

using aggregator::DType;
using aggregator::ReduceOp;

static_assert(sizeof(int) == 4 && sizeof(float) == 4, "MPI_INT and MPI_FLOAT are 32-bit here");
static_assert(sizeof(bool) == 1, "MPI_C_BOOL is one byte, as the protocol's bool");

// One line to stderr, written at once so that ranks' lines do not mix.
void Say(const std::string& text) {
  const std::string line = "aggswitch-mpi: " + text + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string Seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms.count()) / 1000);
  return text;
}

// --- The environment, read once -------------------------------------------

struct Environment {
  // AGGSWITCH_SWITCH is set and not empty: allreduces try the switch.
  bool enabled = false;
  std::optional<ShimOptions> options;  // when every variable is valid
  std::string error;                   // else the first bad one's line
  bool fallback = true;                // FallbackRule
  std::string switches;                // AGGSWITCH_SWITCH as given
};

const Environment& Env() {
  static const Environment env = [] {
    const EnvLookup lookup = [](const char* name) { return std::getenv(name); };
    Environment e;
    const char* switches = std::getenv(kSwitchVar);
    e.enabled = switches != nullptr && *switches != '\0';
    if (e.enabled) e.switches = switches;
    common::Result<ShimOptions> options = ParseShimEnv(lookup);
    if (options.ok()) {
      e.options = std::move(*options);
    } else {
      e.error = options.status().message();
    }
    e.fallback = FallbackRule(lookup);
    return e;
  }();
  return env;
}

// --- What goes through the switch --------------------------------------------

struct Reduction {
  DType dtype;
  ReduceOp op;
  size_t element_size;
  // MPI_LAND or MPI_LOR: operands are made 0 or 1 before the switch's
  // (bitwise, for int32) and/or.
  bool logical;
};

std::optional<Reduction> SwitchReduction(MPI_Datatype type, MPI_Op op) {
  Reduction r{};
  if (type == MPI_FLOAT) {
    r.dtype = DType::kFloat32;
  } else if (type == MPI_INT) {
    r.dtype = DType::kInt32;
  } else if (type == MPI_C_BOOL) {
    r.dtype = DType::kBool;
  } else {
    return std::nullopt;
  }
  if (op == MPI_SUM) {
    r.op = ReduceOp::kSum;
  } else if (op == MPI_MIN) {
    r.op = ReduceOp::kMin;
  } else if (op == MPI_MAX) {
    r.op = ReduceOp::kMax;
  } else if (op == MPI_LAND) {
    r.op = ReduceOp::kAnd;
    r.logical = true;
  } else if (op == MPI_LOR) {
    r.op = ReduceOp::kOr;
    r.logical = true;
  } else {
    return std::nullopt;
  }
  if (!aggregator::IsValid(r.dtype, r.op)) return std::nullopt;
  r.element_size = aggregator::ElementSize(r.dtype);
  return r;
}

// Copies a separate send buffer into the receive buffer and makes logical
// operands 0 or 1 there: the buffer the client reduces in place.
void PrepareBuffer(const void* sendbuf, void* recvbuf, int count, const Reduction& r) {
  const size_t n = static_cast<size_t>(count);
  if (sendbuf != MPI_IN_PLACE && sendbuf != recvbuf) std::memcpy(recvbuf, sendbuf, n * r.element_size);
  if (!r.logical) return;
  if (r.dtype == DType::kInt32) {
    int32_t* p = static_cast<int32_t*>(recvbuf);
    for (size_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  } else {
    uint8_t* p = static_cast<uint8_t*>(recvbuf);
    for (size_t i = 0; i < n; ++i) p[i] = p[i] != 0;
  }
}

// --- MPI_Iallreduce's generalized requests -------------------------------------

// The extra state of one generalized request: what its allreduce ended with.
// Written by the completion thread before MPI_Grequest_complete, read by
// the query callback after; freed by MPI through the free callback.
struct GreqState {
  std::atomic<int> error{MPI_SUCCESS};
};

int QueryGreq(void* extra, MPI_Status* status) {
  const int error = static_cast<GreqState*>(extra)->error.load(std::memory_order_acquire);
  // A collective's status is empty but for its error.
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_ANY_SOURCE;
  status->MPI_TAG = MPI_ANY_TAG;
  status->MPI_ERROR = error;
  return error;
}

int FreeGreq(void* extra) {
  delete static_cast<GreqState*>(extra);
  return MPI_SUCCESS;
}

// An allreduce in flight cannot be cancelled: it runs to its end, and
// MPI_Test_cancelled says false.
int CancelGreq(void*, int) { return MPI_SUCCESS; }

// Completes a communicator's generalized requests, in the order their
// allreduces started (the order they finish), on its own thread.
// Thread safety: Add [the communicator's collectives]; the destructor [any],
// once every queued allreduce has finished or its client is gone.
class Completer {
 public:
  static std::unique_ptr<Completer> Start(std::string label, std::string* why) {
    std::unique_ptr<Completer> c(new Completer(std::move(label)));
    try {
      c->thread_ = std::thread([raw = c.get()] { raw->Run(); });
    } catch (const std::system_error& e) {
      *why = std::string("cannot start the completion thread: ") + e.what();
      return nullptr;
    }
    return c;
  }

  ~Completer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void Add(Pending pending, GreqState* state, MPI_Request request) {
    {
      std::lock_guard lock(mu_);
      items_.push_back({std::move(pending), state, request});
    }
    cv_.notify_one();
  }

 private:
  struct Item {
    Pending pending;
    GreqState* state = nullptr;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  explicit Completer(std::string label) : label_(std::move(label)) {}

  // Until stopped and drained: waits for the oldest allreduce and completes
  // its request. After MPI_Grequest_complete the state is MPI's.
  void Run() {
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !items_.empty(); });
        if (items_.empty()) return;
        item = std::move(items_.front());
        items_.pop_front();
      }
      const common::Status s = item.pending.Wait();
      if (!s.ok()) {
        Say(label_ + ": MPI_Iallreduce through the switch failed: " + s.ToString());
        item.state->error.store(MPI_ERR_OTHER, std::memory_order_release);
      }
      PMPI_Grequest_complete(item.request);
    }
  }

  const std::string label_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  std::thread thread_;
};

// --- A communicator's state ----------------------------------------------------

// How a communicator's eligible allreduces go, decided once by Setup.
enum class Path { kSwitch, kMpi, kFailed };

struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  Path path = Path::kMpi;
  std::string label;                     // "rank R of N (job J)", for messages
  std::unique_ptr<Completer> completer;  // kSwitch, from its first MPI_Iallreduce
  std::unique_ptr<Client> client;        // kSwitch

  // The client goes first: its queued and running allreduces fail, so the
  // completion thread completes their requests and drains.
  ~CommState() {
    client.reset();
    completer.reset();
  }
};

int DeleteState(MPI_Comm comm, int keyval, void* attribute, void* extra);

// The keyval and the live states, for MPI_Finalize.
// Thread safety: every member [any].
class Registry {
 public:
  static Registry& Get() {
    static Registry registry;
    return registry;
  }

  // The keyval of the state attribute, created on first use;
  // MPI_KEYVAL_INVALID when MPI refuses one (or after Finalize).
  int Keyval() {
    std::lock_guard lock(mu_);
    if (keyval_ == MPI_KEYVAL_INVALID && !finalized_) {
      if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, DeleteState, &keyval_, nullptr) !=
          MPI_SUCCESS) {
        keyval_ = MPI_KEYVAL_INVALID;
      }
    }
    return keyval_;
  }

  void Add(CommState* s) {
    std::lock_guard lock(mu_);
    states_.push_back(s);
  }

  void Remove(CommState* s) {
    std::lock_guard lock(mu_);
    std::erase(states_, s);
  }

  // MPI_Finalize: deletes every state's attribute (DeleteState tears its
  // client down), then frees the keyval. Not under the lock: DeleteState
  // takes it.
  void TearDown() {
    std::vector<CommState*> states;
    int keyval;
    {
      std::lock_guard lock(mu_);
      states = states_;
      keyval = keyval_;
      finalized_ = true;
    }
    if (keyval == MPI_KEYVAL_INVALID) return;
    for (CommState* s : states) PMPI_Comm_delete_attr(s->comm, keyval);
    std::lock_guard lock(mu_);
    // A state whose attribute MPI would not delete still goes.
    for (CommState* s : states_) delete s;
    states_.clear();
    PMPI_Comm_free_keyval(&keyval_);
    keyval_ = MPI_KEYVAL_INVALID;
  }

 private:
  std::mutex mu_;
  int keyval_ = MPI_KEYVAL_INVALID;  // guarded by mu_
  bool finalized_ = false;           // guarded by mu_
  std::vector<CommState*> states_;   // guarded by mu_
};

int DeleteState(MPI_Comm, int, void* attribute, void*) {
  auto* state = static_cast<CommState*>(attribute);
  Registry::Get().Remove(state);
  delete state;
  return MPI_SUCCESS;
}

// The fallback line (a warning, or an error naming a bad variable): at
// most one per process.
std::atomic<bool> warned{false};

// A job id (> 0) and key from getrandom; {0, 0} when it fails.
std::pair<uint32_t, uint64_t> DrawJob(std::string* why) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint8_t bytes[12];
    size_t done = 0;
    while (done < sizeof bytes) {
      const ssize_t n = ::getrandom(bytes + done, sizeof bytes - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *why = std::string("getrandom: ") + std::strerror(errno);
        return {0, 0};
      }
      done += static_cast<size_t>(n);
    }
    uint32_t job;
    uint64_t key;
    std::memcpy(&job, bytes, sizeof job);
    std::memcpy(&key, bytes + sizeof job, sizeof key);
    if (job != 0) return {job, key};
  }
  *why = "getrandom gave job id 0 eight times";
  return {0, 0};
}

// A one-element sum through the switch, bounded by `timeout`: "" when every
// rank's 1 came back as `size`, else why not. On a timeout the client is
// destroyed here, before the probe's buffer goes out of scope.
std::string Probe(std::unique_ptr<Client>& client, int size, std::chrono::milliseconds timeout) {
  int32_t probe = 1;
  Pending pending = client->Start(std::span<int32_t>(&probe, 1), ReduceOp::kSum);
  if (!pending.WaitFor(timeout)) {
    client.reset();
    return "its probe allreduce had no result within " + Seconds(timeout) + " (" +
           kProbeTimeoutVar + ")";
  }
  if (const common::Status s = pending.Wait(); !s.ok()) return "its probe allreduce failed: " + s.ToString();
  if (probe != size) {
    return "its probe allreduce gave " + std::to_string(probe) + ", not " + std::to_string(size);
  }
  return "";
}

// Collective over `comm` (an intracommunicator of `size` ranks): decides how
// its eligible allreduces go and caches that in its attribute. Returns an
// MPI error code when MPI failed (then nothing is cached).
int Setup(MPI_Comm comm, int keyval, int rank, int size, CommState** out) {
  const Environment& env = Env();
  std::string why;  // this rank's reason not to use the switch
  uint64_t ids[2] = {0, 0};
  if (rank == 0) {
    const auto [job, key] = DrawJob(&why);
    ids[0] = job;
    ids[1] = key;
  }
  if (int rc = PMPI_Bcast(ids, 2, MPI_UINT64_T, 0, comm); rc != MPI_SUCCESS) return rc;

  auto state = std::make_unique<CommState>();
  state->comm = comm;
  state->rank = rank;
  state->size = size;
  state->label = "rank " + std::to_string(rank) + " of " + std::to_string(size) + " (job " +
                 std::to_string(ids[0]) + ")";
  if (!env.options) {
    why = env.error;
  } else if (ids[0] == 0) {
    if (why.empty()) why = "rank 0 drew no job id";
  } else {
    ClientOptions o;
    o.switches = env.options->switches;
    o.job_id = static_cast<uint32_t>(ids[0]);
    o.job_key = ids[1];
    o.rank = static_cast<uint16_t>(rank);
    o.world = static_cast<uint16_t>(size);
    o.task_info = TaskInfoMode::kInBand;  // the job registers itself at the switch
    o.progress_timeout = env.options->timeout;
    o.mtu = env.options->mtu;
    o.window = env.options->window;
    common::Result<std::unique_ptr<Client>> client = Client::Create(o);
    if (!client.ok()) {
      why = "cannot create its client: " + client.status().ToString();
    } else {
      state->client = std::move(*client);
      why = Probe(state->client, size, std::min(env.options->probe_timeout, env.options->timeout));
    }
  }

  // Every rank learns the first rank that cannot use the switch (size: none).
  int first_failed = why.empty() ? size : rank;
  if (int rc = PMPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, comm);
      rc != MPI_SUCCESS) {
    return rc;
  }
  if (first_failed == size) {
    state->path = Path::kSwitch;
  } else {
    state->client.reset();
    // Rank 0 says why, in the words of the first rank that failed; the
    // first byte says whether that was a bad variable.
    char reason[512] = {};
    if (rank == first_failed) {
      std::snprintf(reason, sizeof reason, "%c%s", env.options ? 's' : 'e', why.c_str());
    }
    if (int rc = PMPI_Bcast(reason, sizeof reason, MPI_CHAR, first_failed, comm); rc != MPI_SUCCESS) {
      return rc;
    }
    reason[sizeof reason - 1] = '\0';
    const bool bad_variable = reason[0] == 'e';
    const std::string what =
        bad_variable ? std::string(reason + 1)
                     : "rank " + std::to_string(first_failed) + " of " + std::to_string(size) +
                           " cannot allreduce through the switch " + env.switches + ": " + (reason + 1);
    if (env.fallback) {
      state->path = Path::kMpi;
      if (rank == 0 && !warned.exchange(true)) {
        Say((bad_variable ? "error: " : "warning: ") + what +
            "; this communicator's allreduces use MPI's own (" + kFallbackVar +
            "=0 makes this an error)");
      }
    } else {
      state->path = Path::kFailed;
      if (rank == 0) {
        Say("error: " + what + "; " + kFallbackVar +
            "=0, so its allreduces fail (MPI_ERR_OTHER through the communicator's error handler)");
      }
    }
  }
  if (int rc = PMPI_Comm_set_attr(comm, keyval, state.get()); rc != MPI_SUCCESS) return rc;
  *out = state.release();
  Registry::Get().Add(*out);
  return MPI_SUCCESS;
}

// MPI_ERR_OTHER through the communicator's error handler (which may abort).
int Fail(MPI_Comm comm) {
  PMPI_Comm_call_errhandler(comm, MPI_ERR_OTHER);
  return MPI_ERR_OTHER;
}

// How one call goes.
enum class Route { kMpi, kSwitch, kError };

struct Decision {
  Route route = Route::kMpi;
  CommState* state = nullptr;
  Reduction reduction{};
  int rc = MPI_SUCCESS;  // kError: what to return
};

// Whether an allreduce goes through the switch. Everything it looks at is
// the same on every rank of a correct program (the type, op, count and
// communicator), so every rank decides alike, and the first eligible call
// sets the communicator up on every rank at once.
Decision Decide(MPI_Datatype type, MPI_Op op, int count, MPI_Comm comm) {
  Decision d;
  if (!Env().enabled || count <= 0 || comm == MPI_COMM_NULL) return d;
  const std::optional<Reduction> reduction = SwitchReduction(type, op);
  if (!reduction) return d;
  int inter = 0, size = 0, rank = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return d;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size < 2 || size > kMaxWorld) return d;
  const int keyval = Registry::Get().Keyval();
  if (keyval == MPI_KEYVAL_INVALID) return d;
  void* attribute = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, keyval, &attribute, &found) != MPI_SUCCESS) return d;
  CommState* state = static_cast<CommState*>(attribute);
  if (!found) {
    if (PMPI_Comm_rank(comm, &rank) != MPI_SUCCESS) return d;
    if (int rc = Setup(comm, keyval, rank, size, &state); rc != MPI_SUCCESS) {
      d.route = Route::kError;
      d.rc = rc;
      return d;
    }
  }
  switch (state->path) {
    case Path::kMpi: return d;
    case Path::kFailed:
      d.route = Route::kError;
      d.rc = Fail(comm);
      return d;
    case Path::kSwitch: break;
  }
  d.route = Route::kSwitch;
  d.state = state;
  d.reduction = *reduction;
  return d;
}

bool SwitchConfigured() { return Env().enabled; }

}  // namespace
}  // namespace aggswitch::client::mpi

namespace m = aggswitch::client::mpi;

// While a switch is configured, MPI runs at MPI_THREAD_MULTIPLE (see the
// top: MPI_Iallreduce's completion threads call MPI_Grequest_complete).
AGG_MPI_EXPORT int MPI_Init(int* argc, char*** argv) {
  if (!m::SwitchConfigured()) return PMPI_Init(argc, argv);
  int provided = 0;
  return PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
}

AGG_MPI_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  if (!m::SwitchConfigured()) return PMPI_Init_thread(argc, argv, required, provided);
  return PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, provided);
}

AGG_MPI_EXPORT int MPI_Finalize(void) {
  m::Registry::Get().TearDown();
  return PMPI_Finalize();
}

AGG_MPI_EXPORT int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                                 MPI_Op op, MPI_Comm comm) {
  const m::Decision d = m::Decide(datatype, op, count, comm);
  switch (d.route) {
    case m::Route::kMpi: return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    case m::Route::kError: return d.rc;
    case m::Route::kSwitch: break;
  }
  m::PrepareBuffer(sendbuf, recvbuf, count, d.reduction);
  const aggswitch::common::Status s =
      d.state->client->StartRaw(d.reduction.dtype, recvbuf, static_cast<size_t>(count), d.reduction.op).Wait();
  if (!s.ok()) {
    m::Say(d.state->label + ": MPI_Allreduce through the switch failed: " + s.ToString());
    return m::Fail(comm);
  }
  return MPI_SUCCESS;
}

AGG_MPI_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                                  MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  int level = MPI_THREAD_SINGLE;
  if (!m::SwitchConfigured() || PMPI_Query_thread(&level) != MPI_SUCCESS || level != MPI_THREAD_MULTIPLE) {
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  const m::Decision d = m::Decide(datatype, op, count, comm);
  switch (d.route) {
    case m::Route::kMpi: return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
    case m::Route::kError: return d.rc;
    case m::Route::kSwitch: break;
  }
  m::CommState& state = *d.state;
  if (!state.completer) {
    std::string why;
    state.completer = m::Completer::Start(state.label, &why);
    if (!state.completer) {
      m::Say(state.label + ": MPI_Iallreduce: " + why);
      return m::Fail(comm);
    }
  }
  auto* greq = new m::GreqState;
  MPI_Request req = MPI_REQUEST_NULL;
  if (int rc = PMPI_Grequest_start(m::QueryGreq, m::FreeGreq, m::CancelGreq, greq, &req); rc != MPI_SUCCESS) {
    delete greq;
    return rc;
  }
  m::PrepareBuffer(sendbuf, recvbuf, count, d.reduction);
  state.completer->Add(
      state.client->StartRaw(d.reduction.dtype, recvbuf, static_cast<size_t>(count), d.reduction.op), greq,
      req);
  *request = req;
  return MPI_SUCCESS;
}
