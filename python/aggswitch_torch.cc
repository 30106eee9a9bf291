// The "aggswitch" torch.distributed backend: the extension module
// aggswitch._torch, built against Debian's libtorch-dev, which
// python/aggswitch/torch.py registers with dist.Backend.register_backend.
//
// A ProcessGroup whose all_reduce goes through the switch when it can: one
// CPU tensor of float32, float16, bfloat16, int32 or bool, and SUM, MIN or
// MAX (BAND and BOR as well on bool). Every other call (broadcast, barrier,
// allgather, reduce_scatter, send/recv, and an all_reduce of anything else)
// goes to the Gloo process group it was given, created by torch.py under the
// same store, so a script that runs on Gloo runs unchanged.
//
// Thread safety: the process group's calls come from any Python or autograd
// thread; each allreduce is started under a mutex (the collective's order is
// the order of the starts, as every backend requires). One completion thread
// per process group waits for the allreduces in that order and completes
// their Work and Future (torch runs the future's callbacks, DDP's among them,
// on it).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "aggregator/types.h"
#include "client/client.h"

namespace py = pybind11;

namespace aggswitch::client {
namespace {

std::optional<aggregator::DType> DTypeOf(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return aggregator::DType::kFloat32;
    case at::kHalf: return aggregator::DType::kFloat16;
    case at::kBFloat16: return aggregator::DType::kBFloat16;
    case at::kInt: return aggregator::DType::kInt32;
    case at::kBool: return aggregator::DType::kBool;
    default: return std::nullopt;
  }
}

// torch's op on the switch; nullopt for the ops it does not reduce (the Gloo
// group does them). On bool, BAND/BOR are the logical and/or, and so are
// MIN/MAX.
std::optional<aggregator::ReduceOp> OpOf(const c10d::ReduceOp& op, aggregator::DType dtype) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return aggregator::ReduceOp::kSum;
    case c10d::ReduceOp::MIN:
      return dtype == aggregator::DType::kBool ? aggregator::ReduceOp::kAnd
                                               : aggregator::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return dtype == aggregator::DType::kBool ? aggregator::ReduceOp::kOr
                                               : aggregator::ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      if (dtype == aggregator::DType::kBool) return aggregator::ReduceOp::kAnd;
      return std::nullopt;
    case c10d::ReduceOp::BOR:
      if (dtype == aggregator::DType::kBool) return aggregator::ReduceOp::kOr;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// One allreduce through the switch, as torch sees it: done when its future
// is.
class SwitchWork final : public c10d::Work {
 public:
  SwitchWork(int rank, std::vector<at::Tensor> tensors)
      : c10d::Work(rank, c10d::OpType::ALLREDUCE),
        tensors_(std::move(tensors)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->exception_ptr(); }
  std::vector<at::Tensor> result() override { return tensors_; }
  // The client's progress timeout bounds every allreduce, so the wait ends
  // (with an error when the switch stopped answering) without one of its own.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  void Finish(const common::Status& status) {
    if (status.ok()) {
      future_->markCompleted(c10::IValue(tensors_));
    } else {
      future_->setError(std::make_exception_ptr(std::runtime_error(
          "aggswitch allreduce failed: " + std::string(common::StatusCodeName(status.code())) +
          ": " + status.message())));
    }
  }

 private:
  std::vector<at::Tensor> tensors_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupAggswitch final : public c10d::ProcessGroup {
 public:
  ProcessGroupAggswitch(int rank, int size, std::unique_ptr<Client> client,
                        c10::intrusive_ptr<c10d::ProcessGroup> gloo)
      : c10d::ProcessGroup(rank, size), client_(std::move(client)), gloo_(std::move(gloo)) {
    completer_ = std::thread([this] { Complete(); });
  }
  ~ProcessGroupAggswitch() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    completer_.join();  // finishes every allreduce started
  }

  const std::string getBackendName() const override { return "aggswitch"; }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    if (tensors.size() != 1 || !tensors[0].device().is_cpu()) return gloo_->allreduce(tensors, opts);
    const std::optional<aggregator::DType> dtype = DTypeOf(tensors[0].scalar_type());
    if (!dtype) return gloo_->allreduce(tensors, opts);
    const std::optional<aggregator::ReduceOp> op = OpOf(opts.reduceOp, *dtype);
    if (!op || !aggregator::IsValid(*dtype, *op)) return gloo_->allreduce(tensors, opts);

    // The switch works in place on contiguous memory: a strided tensor goes
    // through a contiguous copy, written back when the result is in.
    Job job;
    job.output = tensors[0];
    job.buffer = tensors[0].is_contiguous() ? tensors[0] : tensors[0].contiguous();
    job.work = c10::make_intrusive<SwitchWork>(getRank(), tensors);
    c10::intrusive_ptr<c10d::Work> work = job.work;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job.pending = client_->StartRaw(*dtype, job.buffer.data_ptr(),
                                      static_cast<size_t>(job.buffer.numel()), *op);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
    return work;
  }

  // Everything else is Gloo's.
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    return gloo_->broadcast(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return gloo_->allreduce_coalesced(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    return gloo_->reduce(tensors, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return gloo_->_allgather_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override {
    return gloo_->allgather_coalesced(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    return gloo_->gather(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    return gloo_->scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    return gloo_->reduce_scatter(outputs, inputs, opts);
  }
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    return gloo_->_reduce_scatter_base(output, input, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall_base(output, input, output_splits, input_splits, opts);
  }
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    return gloo_->alltoall(outputs, inputs, opts);
  }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return gloo_->getSequenceNumberForGroup(); }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override {
    return gloo_->send(tensors, dst, tag);
  }
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override {
    return gloo_->recv(tensors, src, tag);
  }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    return gloo_->recvAnysource(tensors, tag);
  }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return gloo_->barrier(opts);
  }

  ClientStats stats() const { return client_->stats(); }

 private:
  struct Job {
    Pending pending;
    at::Tensor buffer;  // what the switch reduces
    at::Tensor output;  // the caller's tensor
    c10::intrusive_ptr<SwitchWork> work;
  };

  // The completion thread: the allreduces finish in the order they started.
  void Complete() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      const common::Status status = job.pending.Wait();
      if (status.ok() && !job.buffer.is_same(job.output)) job.output.copy_(job.buffer);
      job.work->Finish(status);
    }
  }

  std::unique_ptr<Client> client_;
  c10::intrusive_ptr<c10d::ProcessGroup> gloo_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread completer_;
};

}  // namespace
}  // namespace aggswitch::client

PYBIND11_MODULE(_torch, m) {
  using namespace aggswitch::client;
  m.doc() = "The aggswitch torch.distributed backend; use aggswitch.torch.";
  // Returned as torch's own ProcessGroup class: Python calls reach the
  // overrides through its virtual functions.
  m.def(
      "new_process_group",
      [](int rank, int size, const ClientOptions& options,
         const c10::intrusive_ptr<c10d::ProcessGroup>& gloo) -> c10::intrusive_ptr<c10d::ProcessGroup> {
        aggswitch::common::Result<std::unique_ptr<Client>> client = [&] {
          py::gil_scoped_release release;
          return Client::Create(options);
        }();
        if (!client.ok()) {
          py::object error = py::module_::import("aggswitch.errors")
                                 .attr("from_status")(
                                     aggswitch::common::StatusCodeName(client.status().code()),
                                     client.status().message());
          PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
          throw py::error_already_set();
        }
        return c10::make_intrusive<ProcessGroupAggswitch>(rank, size, std::move(client).value(),
                                                          gloo);
      },
      py::arg("rank"), py::arg("size"), py::arg("options"), py::arg("gloo"),
      "A process group of `size` ranks whose all_reduce goes through the switch (options: "
      "aggswitch._core.Options) and whose other calls go to `gloo`.");
}
