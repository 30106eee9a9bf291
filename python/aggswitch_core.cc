// The Python binding of the worker client library (client/client.h): the
// extension module aggswitch._core, which python/aggswitch/__init__.py wraps
// and re-exports. One Client per job and rank, its options as keywords;
// allreduces in place on any writable C-contiguous buffer.
//
//   c = _core.Client(["10.0.10.253"], job=7, key=0x5eed, rank=0, world=4)
//   c.allreduce(array, "sum")              # the buffer's format gives the dtype
//   h = c.allreduce_async(array, "max"); h.wait()
//   c.allreduce_ptr(tensor.data_ptr(), tensor.numel(), "bfloat16", "sum", tensor)
//
// Errors: a failed status raises aggswitch.Error's subclass for its code
// (python/aggswitch/errors.py: InvalidArgumentError is also a ValueError,
// OutOfRangeError an OverflowError), with the C++ message.
//
// Thread safety: the GIL is released while an allreduce runs and while a
// handle waits; the client's own rules hold (client.h: the order of the
// allreduce calls is the order of the collective).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "client/client.h"
#include "python/raise_status.h"

namespace py = pybind11;

namespace aggswitch::client {
namespace {

using python::Check;
using python::Raise;

aggregator::ReduceOp OpOf(const std::string& name) {
  const std::optional<aggregator::ReduceOp> op = aggregator::ReduceOpFromName(name);
  if (!op) Raise(common::InvalidArgument("op: sum, min, max, and or or expected, got \"" + name + "\""));
  return *op;
}

aggregator::DType DTypeOf(const std::string& name) {
  const std::optional<aggregator::DType> dtype = aggregator::DTypeFromName(name);
  if (!dtype) {
    Raise(common::InvalidArgument(
        "dtype: float32, float16, bfloat16, int32 or bool expected, got \"" + name + "\""));
  }
  return *dtype;
}

// The element type of a buffer (its struct format and item size), and
// whether it is C-contiguous; bfloat16 has no format and comes by name.
aggregator::DType BufferDType(const py::buffer_info& info) {
  std::string format = info.format;
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format.erase(0, 1);
  }
  const auto size = info.itemsize;
  if (format == "f" && size == 4) return aggregator::DType::kFloat32;
  if (format == "e" && size == 2) return aggregator::DType::kFloat16;
  if ((format == "i" || format == "l") && size == 4) return aggregator::DType::kInt32;
  if (format == "?" && size == 1) return aggregator::DType::kBool;
  Raise(common::InvalidArgument("buffer: float32, float16, int32 or bool elements expected, got "
                                "format \"" + info.format + "\" of " + std::to_string(size) +
                                " bytes"));
}

void CheckContiguous(const py::buffer_info& info) {
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect) {
      Raise(common::InvalidArgument("buffer: C-contiguous elements expected"));
    }
    expect *= info.shape[d];
  }
}

// An allreduce started on a buffer: the buffer is kept alive (and its
// export held) until the allreduce is done.
class Handle {
 public:
  Handle(Pending pending, py::object owner, std::unique_ptr<py::buffer_info> view)
      : pending_(std::move(pending)), owner_(std::move(owner)), view_(std::move(view)) {}
  Handle(Handle&&) = default;
  // The client writes into the buffer until the allreduce is done: a handle
  // dropped before then waits for it, so the memory outlives the writes.
  ~Handle() {
    if (!pending_.valid()) return;
    py::gil_scoped_release release;
    (void)pending_.Wait();
  }

  // Blocks (without the GIL) until done, or `timeout` seconds; raises on
  // failure, returns the buffer (or the owner of the memory).
  py::object Wait(std::optional<double> timeout) {
    bool finished = true;
    common::Status status;
    {
      py::gil_scoped_release release;
      if (timeout) {
        finished = pending_.WaitFor(std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::duration<double>(*timeout)));
      }
      if (finished) status = pending_.Wait();
    }
    if (!finished) {
      PyErr_SetString(PyExc_TimeoutError, "the allreduce is still running");
      throw py::error_already_set();
    }
    Check(status);
    return owner_;
  }
  bool Done() const {
    py::gil_scoped_release release;
    return pending_.WaitFor(std::chrono::nanoseconds(0));
  }

 private:
  Pending pending_;
  py::object owner_;
  std::unique_ptr<py::buffer_info> view_;
};

class PyClient {
 public:
  explicit PyClient(const ClientOptions& options) {
    common::Result<std::unique_ptr<Client>> created = [&] {
      py::gil_scoped_release release;
      return Client::Create(options);
    }();
    if (!created.ok()) Raise(created.status());
    client_ = std::move(created).value();
  }

  Handle Start(const py::buffer& buffer, const std::string& op) {
    auto view = std::make_unique<py::buffer_info>(buffer.request(/*writable=*/true));
    const aggregator::DType dtype = BufferDType(*view);
    CheckContiguous(*view);
    void* const data = view->ptr;
    const auto count = static_cast<size_t>(view->size);
    return Launch(dtype, data, count, OpOf(op), buffer, std::move(view));
  }
  Handle StartPtr(uintptr_t address, size_t count, const std::string& dtype,
                  const std::string& op, py::object owner) {
    return Launch(DTypeOf(dtype), reinterpret_cast<void*>(address), count, OpOf(op),
                  std::move(owner), nullptr);
  }
  void Close() {
    py::gil_scoped_release release;
    client_.reset();
  }
  Client& get() {
    if (!client_) Raise(common::FailedPrecondition("the client is closed"));
    return *client_;
  }

 private:
  Handle Launch(aggregator::DType dtype, void* data, size_t count, aggregator::ReduceOp op,
                py::object owner, std::unique_ptr<py::buffer_info> view) {
    if (!aggregator::IsValid(dtype, op)) {
      Raise(common::InvalidArgument(
          "op " + std::string(aggregator::ReduceOpName(op)) + " is not defined for " +
          std::string(aggregator::DTypeName(dtype)) +
          " (sum/min/max: numbers; and/or: int32 and bool)"));
    }
    Client& c = get();
    Pending pending = c.StartRaw(dtype, data, count, op);
    return Handle(std::move(pending), std::move(owner), std::move(view));
  }

  std::unique_ptr<Client> client_;
};

ClientOptions MakeOptions(const std::vector<std::string>& switches, uint32_t job, uint64_t key,
                          uint16_t rank, uint16_t world, TransportKind transport,
                          const std::string& interface, uint32_t queue, TaskInfoMode task_info,
                          uint16_t node_count, FloatMode float_mode, std::optional<int> headroom,
                          uint32_t window, uint32_t mtu, uint32_t max_chunk_elements,
                          uint32_t reserve_missing_ids, double retransmit_timeout,
                          double progress_timeout, double deadline,
                          bool resend_to_parameter_node, bool verify, uint32_t first_seq,
                          const std::string& bind) {
  ClientOptions o;
  for (const std::string& s : switches) {
    common::Result<SwitchAddress> address = ParseSwitchAddress(s);
    if (!address.ok()) Raise(common::InvalidArgument("switches: " + address.status().message()));
    o.switches.push_back(*address);
  }
  if (!bind.empty()) {
    common::Result<SwitchAddress> local = ParseSwitchAddress(bind);
    if (!local.ok()) Raise(common::InvalidArgument("bind: " + local.status().message()));
    o.bind_ip = local->ip;
    o.bind_port = bind.find(':') == std::string::npos ? 0 : local->port;
  }
  o.job_id = job;
  o.job_key = key;
  o.rank = rank;
  o.world = world;
  o.transport = transport;
  o.interface = interface;
  o.queue = queue;
  o.task_info = task_info;
  o.node_count = node_count;
  o.float_mode = float_mode;
  o.headroom = headroom;
  o.window = window;
  o.mtu = mtu;
  o.max_chunk_elements = max_chunk_elements;
  o.reserve_missing_ids = reserve_missing_ids;
  const auto us = [](double seconds) {
    return std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  };
  o.retransmit_timeout = us(retransmit_timeout);
  o.progress_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(us(progress_timeout));
  o.deadline = std::chrono::duration_cast<std::chrono::milliseconds>(us(deadline));
  o.resend_to_parameter_node = resend_to_parameter_node;
  o.verify = verify;
  o.first_seq = first_seq;
  Check(ValidateClientOptions(o));
  return o;
}

py::dict StatsDict(const ClientStats& s) {
  py::dict d;
  d["allreduces"] = s.allreduces;
  d["chunks"] = s.chunks;
  d["retransmissions"] = s.retransmissions;
  d["results"] = s.results;
  d["duplicate_results"] = s.duplicate_results;
  d["stray_datagrams"] = s.stray_datagrams;
  d["transient_nacks"] = s.transient_nacks;
  d["scale_exchanges"] = s.scale_exchanges;
  d["float_fallbacks"] = s.float_fallbacks;
  d["overflow_redos"] = s.overflow_redos;
  d["saturated_chunks"] = s.saturated_chunks;
  d["notices"] = s.notices;
  d["kept_local"] = s.kept_local;
  d["receive_drops"] = s.receive_drops;
  d["held_notices"] = s.held_notices;
  d["queries"] = s.queries;
  d["missing_notices"] = s.missing_notices;
  d["answered_resends"] = s.answered_resends;
  d["relocated_notices"] = s.relocated_notices;
  d["round_trip_us"] = s.round_trip_us;
  d["retransmit_timeout_us"] = s.retransmit_timeout_us;
  return d;
}

}  // namespace
}  // namespace aggswitch::client

PYBIND11_MODULE(_core, m) {
  using namespace aggswitch::client;
  m.doc() = "aggswitch's worker client library (client/client.h); use the aggswitch package.";

  py::enum_<TransportKind>(m, "Transport", "How datagrams travel between the client and the switch.")
      .value("UDP", TransportKind::kUdp, "kernel UDP sockets")
      .value("AF_XDP", TransportKind::kAfXdp, "an AF_XDP socket on one interface queue (root)");
  py::enum_<TaskInfoMode>(m, "TaskInfo", "How the switch learns the job.")
      .value("NONE", TaskInfoMode::kNone, "declared at the switch (config or aggctl)")
      .value("IN_BAND", TaskInfoMode::kInBand, "every contribution carries the task info")
      .value("ANNOUNCE", TaskInfoMode::kControlUnit, "rank 0 announces the job to each switch");
  py::enum_<FloatMode>(m, "FloatMode", "How float sums travel.")
      .value("FIXED_POINT", FloatMode::kFixedPoint, "int32 fixed point: exact, reproducible")
      .value("FLOAT", FloatMode::kFloat, "floats, in arrival order")
      .value("ORDERED", FloatMode::kFloatOrdered, "floats, in rank order: reproducible");

  py::class_<Handle>(m, "Handle", "An allreduce started with allreduce_async.")
      .def("wait", &Handle::Wait, py::arg("timeout") = py::none(),
           "Blocks until the allreduce is done and returns its buffer; raises aggswitch.Error "
           "when it failed.")
      .def("done", &Handle::Done, "Whether the allreduce is done (failed or not).");

  py::class_<ClientOptions>(m, "Options",
                            "A client's options (ClientOptions), checked; see aggswitch.Client.")
      .def(py::init(&MakeOptions), py::arg("switches"), py::arg("job"), py::arg("key"),
           py::arg("rank"), py::arg("world"), py::kw_only(),
           py::arg("transport") = TransportKind::kUdp, py::arg("interface") = "",
           py::arg("queue") = 0, py::arg("task_info") = TaskInfoMode::kInBand,
           py::arg("node_count") = 1, py::arg("float_mode") = FloatMode::kFixedPoint,
           py::arg("headroom") = py::none(), py::arg("window") = 128, py::arg("mtu") = 1500,
           py::arg("max_chunk_elements") = 0, py::arg("reserve_missing_ids") = aggswitch::aggregator::kDefaultReservedMissingIds,
           py::arg("retransmit_timeout") = 0.02, py::arg("progress_timeout") = 10.0,
           py::arg("deadline") = 0.0, py::arg("resend_to_parameter_node") = false,
           py::arg("verify") = false, py::arg("first_seq") = 0, py::arg("bind") = "")
      .def_property_readonly("job", [](const ClientOptions& o) { return o.job_id; })
      .def_property_readonly("rank", [](const ClientOptions& o) { return o.rank; })
      .def_property_readonly("world", [](const ClientOptions& o) { return o.world; });

  py::class_<PyClient>(m, "Client", "One rank of one job; see aggswitch.Client.")
      .def(py::init([](const ClientOptions& options) { return std::make_unique<PyClient>(options); }),
           py::arg("options"))
      .def("allreduce_async", &PyClient::Start, py::arg("buffer"), py::arg("op") = "sum")
      .def("allreduce_ptr", &PyClient::StartPtr, py::arg("address"), py::arg("count"),
           py::arg("dtype"), py::arg("op"), py::arg("owner"))
      .def("chunk_elements",
           [](PyClient& c, const std::string& dtype) {
             return c.get().ChunkElements(DTypeOf(dtype));
           })
      .def_property_readonly("local_port", [](PyClient& c) { return c.get().local_port(); })
      .def_property_readonly("transport_description",
                             [](PyClient& c) { return c.get().transport_description(); })
      .def_property_readonly("stats", [](PyClient& c) { return StatsDict(c.get().stats()); })
      .def("close", &PyClient::Close);
}
