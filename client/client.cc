#include "client/client.h"

#include <charconv>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include "client/chunking.h"
#include "client/fixed_point.h"
#include "client/internal/engine.h"

namespace aggswitch::client {

namespace internal {

// One allreduce between Start and its end: the request for the I/O thread,
// and the outcome its Pending waits for.
struct Operation {
  Request request;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  common::Status status;

  void Finish(common::Status s) {
    {
      std::lock_guard lock(mu);
      status = std::move(s);
      done = true;
    }
    done_cv.notify_all();
  }
};

}  // namespace internal

namespace {

// Allreduces larger than this many chunks are refused: a transfer's sequence
// numbers must stay within half the 32-bit space for serial-number order.
inline constexpr uint64_t kMaxChunksPerAllReduce = uint64_t{1} << 30;

std::shared_ptr<internal::Operation> Finished(common::Status s) {
  auto op = std::make_shared<internal::Operation>();
  op->Finish(std::move(s));
  return op;
}

}  // namespace

common::Result<SwitchAddress> ParseSwitchAddress(std::string_view text) {
  SwitchAddress s;
  const size_t colon = text.find(':');
  const auto ip = common::Ipv4Addr::Parse(text.substr(0, colon));
  bool ok = ip.has_value();
  if (ok) s.ip = *ip;
  if (ok && colon != std::string_view::npos) {
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    const auto [next, ec] = std::from_chars(first, last, s.port);
    ok = first != last && ec == std::errc() && next == last && s.port != 0;
  }
  if (!ok) return common::InvalidArgument("expected a.b.c.d[:port], got \"" + std::string(text) + "\"");
  return s;
}

common::Status ValidateClientOptions(const ClientOptions& o) {
  using common::InvalidArgument;
  if (o.run_id != 0 && o.incarnation != 0 && o.run_id != o.incarnation) {
    return InvalidArgument("run_id and incarnation: a run id is every rank's incarnation; give one of them");
  }
  if (o.switches.empty() || o.switches.size() > kMaxSwitches) {
    return InvalidArgument("switches: 1.." + std::to_string(kMaxSwitches) + " expected, got " +
                           std::to_string(o.switches.size()));
  }
  for (size_t i = 0; i < o.switches.size(); ++i) {
    if (o.switches[i].ip.addr == 0 || o.switches[i].port == 0) {
      return InvalidArgument("switches[" + std::to_string(i) +
                             "]: an address and a port other than 0 expected");
    }
  }
  if (o.job_id == 0) return InvalidArgument("job_id: 1..4294967295 expected, got 0");
  if (o.world == 0 || o.world > kMaxWorld) {
    return InvalidArgument("world: 1.." + std::to_string(kMaxWorld) + " expected, got " +
                           std::to_string(o.world));
  }
  if (o.rank >= o.world) {
    return InvalidArgument("rank: 0.." + std::to_string(o.world - 1) + " expected (world " +
                           std::to_string(o.world) + "), got " + std::to_string(o.rank));
  }
  if (o.node_count == 0 || o.world % o.node_count != 0) {
    return InvalidArgument("node_count: a divisor of world (" + std::to_string(o.world) +
                           ") expected, got " + std::to_string(o.node_count) +
                           ": every node holds world / node_count ranks");
  }
  if (o.headroom && (*o.headroom < 0 || *o.headroom > kMaxHeadroom)) {
    return InvalidArgument("headroom: 0.." + std::to_string(kMaxHeadroom) + " bits expected, got " +
                           std::to_string(*o.headroom));
  }
  if (o.window == 0 || o.window > kMaxWindow) {
    return InvalidArgument("window: 1.." + std::to_string(kMaxWindow) + " chunks expected, got " +
                           std::to_string(o.window));
  }
  if (o.mtu < kMinMtu || o.mtu > kMaxMtu) {
    return InvalidArgument("mtu: " + std::to_string(kMinMtu) + ".." + std::to_string(kMaxMtu) +
                           " expected, got " + std::to_string(o.mtu));
  }
  if (o.transport == TransportKind::kAfXdp) {
    if (o.interface.empty()) {
      return InvalidArgument("interface: the af_xdp transport needs the interface that reaches "
                             "the switch");
    }
    if (o.mtu > kMaxAfXdpMtu) {
      return InvalidArgument("mtu: at most " + std::to_string(kMaxAfXdpMtu) +
                             " with the af_xdp transport (a 4 KiB frame), got " +
                             std::to_string(o.mtu));
    }
    if (o.local_tan) {
      return InvalidArgument("local_tan: a TAN in this process answers through the kernel's "
                             "loopback, which AF_XDP does not see: use the udp transport");
    }
  }
  if (o.verify && o.task_info == TaskInfoMode::kNone) {
    return InvalidArgument(
        "verify: verify mode is asked for in task info (in_band or control_unit); a job "
        "declared in the switch's config sets it there (aggregation.jobs[].verify)");
  }
  if (o.reserve_missing_ids > 255) {
    return InvalidArgument("reserve_missing_ids: 0..255 expected, got " +
                           std::to_string(o.reserve_missing_ids));
  }
  if (ElementsPerChunk(aggregator::DType::kBool, o.mtu, o.reserve_missing_ids) == 0) {
    return InvalidArgument("reserve_missing_ids: " + std::to_string(o.reserve_missing_ids) +
                           " ids leave no room for data in an MTU of " + std::to_string(o.mtu));
  }
  if (o.retransmit_timeout.count() <= 0) {
    return InvalidArgument("retransmit_timeout: more than 0 expected");
  }
  if (o.min_retransmit_timeout.count() <= 0) {
    return InvalidArgument("min_retransmit_timeout: more than 0 expected");
  }
  if (o.max_retransmit_timeout < o.retransmit_timeout) {
    return InvalidArgument("max_retransmit_timeout: at least retransmit_timeout expected");
  }
  if (!(o.backoff >= 1.0 && o.backoff <= 16.0)) {
    return InvalidArgument("backoff: 1..16 expected, got " + std::to_string(o.backoff));
  }
  if (o.progress_timeout.count() <= 0) {
    return InvalidArgument("progress_timeout: more than 0 expected");
  }
  if (o.deadline.count() < 0) return InvalidArgument("deadline: 0 (none) or more expected");
  return common::Status::Ok();
}

common::Status Pending::Wait() const {
  std::unique_lock lock(op_->mu);
  op_->done_cv.wait(lock, [this] { return op_->done; });
  return op_->status;
}

bool Pending::WaitFor(std::chrono::nanoseconds timeout) const {
  std::unique_lock lock(op_->mu);
  return op_->done_cv.wait_for(lock, timeout, [this] { return op_->done; });
}

struct Client::Impl {
  ClientOptions options;
  std::unique_ptr<internal::Engine> engine;
  std::mutex mu;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<internal::Operation>> queue;  // guarded by mu
  bool stopping = false;                                   // guarded by mu
  uint32_t calls = 0;                                      // guarded by mu
  std::thread io;

  // The I/O thread: runs the queued allreduces in order until the client is
  // destroyed, then fails what is left.
  void IoLoop() {
    common::Status broken;  // the first failure after sequence numbers were used
    for (;;) {
      std::shared_ptr<internal::Operation> op;
      {
        std::unique_lock lock(mu);
        // Idle: the last allreduce's ACK repeats go out on their timer.
        while (!queue_cv.wait_until(lock, engine->NextAckRepeat(),
                                    [this] { return stopping || !queue.empty(); })) {
          lock.unlock();
          engine->RepeatAck(std::chrono::steady_clock::now());
          lock.lock();
        }
        if (stopping) break;
        op = std::move(queue.front());
        queue.pop_front();
      }
      common::Status s;
      if (broken.ok()) {
        s = engine->Run(op->request);
        // An overflowed int32 sum completed like any other: sequence numbers
        // still agree.
        if (!s.ok() && s.code() != common::StatusCode::kOutOfRange) broken = s;
      } else {
        s = common::FailedPrecondition(
            "an earlier allreduce of this client failed (" + broken.message() +
            "), so its sequence numbers may no longer agree with the other ranks': create a new "
            "client with a new job id");
      }
      op->Finish(std::move(s));
    }
    engine->FlushAckRepeats();  // the client goes: no waiting for their timer
    std::lock_guard lock(mu);
    for (const auto& op : queue) {
      op->Finish(common::FailedPrecondition("the client was destroyed before the allreduce ran"));
    }
    queue.clear();
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

common::Result<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  RETURN_IF_ERROR(ValidateClientOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  ASSIGN_OR_RETURN(impl->engine, internal::Engine::Create(options));
  Impl* raw = impl.get();
  try {
    impl->io = std::thread([raw] { raw->IoLoop(); });
  } catch (const std::system_error& e) {
    return common::Unavailable(std::string("cannot start the client's I/O thread: ") + e.what());
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::~Client() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  impl_->engine->Stop();
  impl_->io.join();
}

Pending Client::StartRaw(aggregator::DType dtype, void* data, size_t count, aggregator::ReduceOp op,
                         std::optional<uint32_t> addr_low) {
  uint32_t call;
  {
    std::lock_guard lock(impl_->mu);
    call = impl_->calls++;
  }
  if (!aggregator::IsValid(dtype, op)) {
    return Pending(Finished(common::InvalidArgument(
        std::string(ReduceOpName(op)) + " is not defined for " + std::string(DTypeName(dtype)))));
  }
  if (count == 0) return Pending(Finished(common::Status::Ok()));
  if (ChunkCount(count, ChunkElements(dtype)) > kMaxChunksPerAllReduce) {
    return Pending(Finished(common::InvalidArgument(
        std::to_string(count) + " elements make more than " +
        std::to_string(kMaxChunksPerAllReduce) + " chunks; split the allreduce")));
  }
  auto operation = std::make_shared<internal::Operation>();
  operation->request = {dtype, op, data, count, addr_low.value_or(call)};
  {
    std::lock_guard lock(impl_->mu);
    impl_->queue.push_back(operation);
  }
  impl_->queue_cv.notify_one();
  return Pending(std::move(operation));
}

uint32_t Client::ChunkElements(aggregator::DType dtype) const {
  return internal::ChunkElementsFor(impl_->options, dtype);
}

uint16_t Client::local_port() const {
  return impl_->engine->local_port();
}

const std::string& Client::transport_description() const {
  return impl_->engine->transport_description();
}

const ClientOptions& Client::options() const {
  return impl_->options;
}

ClientStats Client::stats() const {
  return impl_->engine->Stats();
}

}  // namespace aggswitch::client
