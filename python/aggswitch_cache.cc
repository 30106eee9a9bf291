// The Python binding of the data cache's loader (cache/loader.h): the
// extension module aggswitch._cache, which python/aggswitch/cache.py wraps
// into Loader and the PyTorch datasets.
//
//   l = _cache.Loader("loader.yaml")
//   b = l.next()                     # b.data: a memoryview, overwritten by the next call
//   raw = l.read(17)                 # one item as bytes
//
// Errors: a failed status raises aggswitch.Error's subclass for its code
// (python/aggswitch/errors.py), with the C++ message.
//
// Thread safety: one Loader per thread or process (it owns a UCX worker);
// the GIL is released while a request or a read runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/cache_config.h"
#include "cache/loader.h"
#include "python/raise_status.h"

namespace py = pybind11;

namespace aggswitch::cache {
namespace {

using python::Raise;

Component ComponentOf(const std::string& name) {
  if (name == "cpu") return Component::kCpu;
  if (name == "gpu") return Component::kGpu;
  Raise(common::InvalidArgument("component: cpu or gpu expected, got \"" + name + "\""));
}

// A request's bytes as Python sees them: the memoryview next() returns
// exports this, and holds it, so the mapping stays while the view lives,
// even past a larger request or the Loader itself.
struct BatchBytes {
  std::shared_ptr<const uint8_t> storage;
  const uint8_t* data = nullptr;
  uint64_t length = 0;
};

class PyLoader {
 public:
  explicit PyLoader(const std::string& config_path) {
    auto cfg = LoadLoaderConfig(config_path);
    if (!cfg.ok()) Raise(cfg.status());
    common::Result<std::unique_ptr<Loader>> opened = common::Internal("not opened");
    {
      py::gil_scoped_release release;
      opened = Loader::Open(*cfg, config_path);
    }
    if (!opened.ok()) Raise(opened.status());
    loader_ = std::move(opened).value();
  }

  // (memoryview of the batch, [(name, offset, length, source)], sequence)
  py::tuple Next() {
    common::Result<const Loader::Batch*> batch = common::Internal("no request");
    {
      py::gil_scoped_release release;
      batch = loader_->Next();
    }
    if (!batch.ok()) Raise(batch.status());
    const Loader::Batch& b = **batch;
    py::list items;
    for (const Loader::Item& it : b.items) {
      items.append(py::make_tuple(it.name, it.offset, it.length, SourceName(it.source)));
    }
    py::object bytes = py::cast(BatchBytes{b.storage, b.data, b.length});
    return py::make_tuple(py::memoryview(bytes), items, b.sequence);
  }

  size_t Skip() {
    common::Result<size_t> skipped = common::Internal("no request");
    {
      py::gil_scoped_release release;
      skipped = loader_->Skip();
    }
    if (!skipped.ok()) Raise(skipped.status());
    return *skipped;
  }

  py::bytes Read(size_t index) {
    if (index >= loader_->size()) Raise(common::OutOfRange("index " + std::to_string(index) +
                                                          " of a dataset of " + std::to_string(loader_->size())));
    std::string out(loader_->length(index), '\0');
    common::Status s;
    {
      py::gil_scoped_release release;
      s = loader_->ReadItem(index, reinterpret_cast<uint8_t*>(out.data()));
    }
    if (!s.ok()) Raise(s);
    return py::bytes(out);
  }

  void ReadInto(size_t index, py::buffer buffer) {
    py::buffer_info info = buffer.request(true);
    if (index >= loader_->size()) Raise(common::OutOfRange("index " + std::to_string(index) +
                                                          " of a dataset of " + std::to_string(loader_->size())));
    const uint64_t need = loader_->length(index);
    if (static_cast<uint64_t>(info.size * info.itemsize) < need) {
      Raise(common::InvalidArgument("buffer: " + std::to_string(need) + " bytes expected, got " +
                                    std::to_string(info.size * info.itemsize)));
    }
    common::Status s;
    {
      py::gil_scoped_release release;
      s = loader_->ReadItem(index, static_cast<uint8_t*>(info.ptr));
    }
    if (!s.ok()) Raise(s);
  }

  void SetRequest(uint64_t amount, const std::string& component) {
    const common::Status s = loader_->SetRequest(amount, ComponentOf(component));
    if (!s.ok()) Raise(s);
  }

  py::dict Stats() const {
    const Loader::Stats s = loader_->stats();
    py::dict d;
    d["requests"] = s.requests;
    d["items"] = s.items;
    d["bytes"] = s.bytes;
    d["local"] = s.local;
    d["owner"] = s.owner;
    d["replica"] = s.replica;
    d["store"] = s.store;
    d["misses"] = s.misses;
    d["stale"] = s.stale;
    d["holder_failures"] = s.holder_failures;
    d["crc_failures"] = s.crc_failures;
    d["fills_requested"] = s.fills_requested;
    d["config_reloads"] = s.config_reloads;
    d["record_errors"] = s.record_errors;
    d["malformed_records"] = s.malformed_records;
    d["forged"] = s.forged;
    d["store_requests"] = loader_->store_requests();
    return d;
  }

  Loader& loader() { return *loader_; }

 private:
  std::unique_ptr<Loader> loader_;
};

}  // namespace
}  // namespace aggswitch::cache

PYBIND11_MODULE(_cache, m) {
  using aggswitch::cache::BatchBytes;
  using aggswitch::cache::PyLoader;
  m.doc() = "The aggswitch data cache's loader (cache/loader.h); see aggswitch.cache.";
  py::class_<BatchBytes>(m, "_BatchBytes", py::buffer_protocol())
      .def_buffer([](BatchBytes& b) {
        return py::buffer_info(const_cast<uint8_t*>(b.data), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<ssize_t>(b.length)}, {ssize_t{1}}, /*readonly=*/true);
      });
  m.def(
      "list_items",
      [](const std::string& config_path) {
        auto cfg = aggswitch::cache::LoadLoaderConfig(config_path);
        if (!cfg.ok()) aggswitch::cache::Raise(cfg.status());
        aggswitch::common::Result<std::vector<aggswitch::cache::ExternalStore::Entry>> items =
            aggswitch::common::Internal("not listed");
        {
          py::gil_scoped_release release;
          items = aggswitch::cache::Loader::ListItems(*cfg);
        }
        if (!items.ok()) aggswitch::cache::Raise(items.status());
        std::vector<std::pair<std::string, uint64_t>> out;
        for (const auto& e : *items) out.emplace_back(e.name, e.length);
        return out;
      },
      py::arg("config"),
      "The dataset's [(name, length)] in request order, without opening UCX (safe before a fork).");
  py::class_<PyLoader>(m, "Loader", "A loader over the data cache; see aggswitch.cache.Loader.")
      .def(py::init<const std::string&>(), py::arg("config"))
      .def("next", &PyLoader::Next,
           "The next request: (memoryview, [(name, offset, length, source)], sequence); the "
           "next request overwrites the memoryview's bytes.")
      .def("skip", &PyLoader::Skip, "Passes over the next request unread; the number of its items.")
      .def("read", &PyLoader::Read, py::arg("index"), "Item `index` as bytes.")
      .def("read_into", &PyLoader::ReadInto, py::arg("index"), py::arg("buffer"),
           "Item `index` into a writable buffer of at least its length.")
      .def("set_request", &PyLoader::SetRequest, py::arg("amount"), py::arg("component"),
           "Bytes per request and the destination component (cpu or gpu) of the next requests.")
      .def("seek", [](PyLoader& l, size_t index) { l.loader().Seek(index); }, py::arg("index"))
      .def("__len__", [](PyLoader& l) { return l.loader().size(); })
      .def("name", [](PyLoader& l, size_t i) { return l.loader().name(i); }, py::arg("index"))
      .def("length", [](PyLoader& l, size_t i) { return l.loader().length(i); }, py::arg("index"))
      .def_property_readonly("amount", [](PyLoader& l) { return l.loader().amount(); })
      .def_property_readonly("component",
                             [](PyLoader& l) { return aggswitch::cache::ComponentName(l.loader().component()); })
      .def_property_readonly("transports", [](PyLoader& l) { return l.loader().transports(); })
      .def("stats", &PyLoader::Stats, "Counters: items by source, misses, stale records, ...");
}
