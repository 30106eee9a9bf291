#include "cache/loader.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "cache/crc32c.h"
#include "cache/handshake.h"
#include "common/log.h"

namespace aggswitch::cache {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDownFor = std::chrono::seconds(5);
constexpr size_t kMaxHelloReply = 64 * 1024;

int64_t MtimeOf(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

const char* SourceName(Loader::Source s) {
  switch (s) {
    case Loader::Source::kLocal: return "local";
    case Loader::Source::kOwner: return "owner";
    case Loader::Source::kReplica: return "replica";
    case Loader::Source::kStore: return "store";
  }
  return "?";
}

// One item's read: its candidates (holders, then the store) tried in turn.
struct Loader::Task {
  size_t index = 0;
  uint8_t* dest = nullptr;
  ucp_mem_h memh = nullptr;
  std::optional<ItemRecord> rec;
  size_t next = 0;           // the next holder to try
  bool re_resolved = false;  // the record was read again once already
  bool done = false;
  Source source = Source::kOwner;
  // A remote read in flight.
  int stage = 0;  // 0 none, 1 the bytes, 2 the header after them
  std::string node;
  ucs_status_ptr_t request = nullptr;
  Clock::time_point deadline{};
  size_t slot = 0;  // header slot
};

// The item list: as the daemons published it; else the store's; else the records'.
common::Result<std::vector<ExternalStore::Entry>> Loader::Entries(const LoaderConfig& cfg, Records& records,
                                                                  ExternalStore* store,
                                                                  const std::vector<ItemRecord>& recs) {
  std::vector<ExternalStore::Entry> entries;
  ASSIGN_OR_RETURN(std::string manifest, records.Manifest(cfg.dataset));
  if (!manifest.empty()) {
    ASSIGN_OR_RETURN(entries, ExternalStore::ParseManifest(manifest));
  } else if (store != nullptr) {
    ASSIGN_OR_RETURN(entries, store->List());
  } else {
    for (const ItemRecord& r : recs) entries.push_back({r.item, r.length});
    std::sort(entries.begin(), entries.end(),
              [](const ExternalStore::Entry& a, const ExternalStore::Entry& b) { return a.name < b.name; });
  }
  if (entries.empty()) {
    return common::NotFound("dataset " + cfg.dataset + " has no items (" +
                            (store != nullptr ? store->Describe() + ", " : std::string()) + records.Describe() + ")");
  }
  return entries;
}

common::Result<std::vector<ExternalStore::Entry>> Loader::ListItems(const LoaderConfig& cfg) {
  ASSIGN_OR_RETURN(std::unique_ptr<Records> records, OpenRecords(cfg.records, cfg.prefix));
  std::unique_ptr<ExternalStore> store;
  if (!cfg.store.empty()) {
    ASSIGN_OR_RETURN(store, ExternalStore::Open(cfg.store));
  }
  ASSIGN_OR_RETURN(std::vector<ItemRecord> recs, records->List(cfg.dataset));
  return Entries(cfg, *records, store.get(), recs);
}

common::Result<std::unique_ptr<Loader>> Loader::Open(const LoaderConfig& cfg,
                                                     const std::string& config_path) {
  std::unique_ptr<Loader> l(new Loader(cfg, config_path));
  l->config_mtime_ = MtimeOf(config_path);
  RETURN_IF_ERROR(l->Init());
  return l;
}

common::Status Loader::Init() {
  ASSIGN_OR_RETURN(ucx_, UcxWorker::Create({cfg_.ucx_tls, cfg_.ucx_net_devices}));
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = kAmHelloReply;
  hp.cb = &Loader::OnHelloReply;
  hp.arg = this;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  if (ucp_worker_set_am_recv_handler(ucx_->worker(), &hp) != UCS_OK) {
    return common::Internal("ucp_worker_set_am_recv_handler failed");
  }
  ASSIGN_OR_RETURN(records_, OpenRecords(cfg_.records, cfg_.prefix));
  if (!cfg_.store.empty()) {
    ASSIGN_OR_RETURN(store_, ExternalStore::Open(cfg_.store));
  }
  ASSIGN_OR_RETURN(std::vector<ItemRecord> recs, records_->List(cfg_.dataset));
  ASSIGN_OR_RETURN(entries_, Entries(cfg_, *records_, store_.get(), recs));
  for (ItemRecord& r : recs) known_[r.item] = std::move(r);
  NodeInfo("", true);
  const size_t header_bytes = sizeof(ItemHeader) * cfg_.window;
  headers_ = static_cast<ItemHeader*>(std::aligned_alloc(64, header_bytes));
  if (headers_ == nullptr) return common::ResourceExhausted("no memory for the loader's headers");
  ASSIGN_OR_RETURN(headers_reg_, ucx_->Map(headers_, header_bytes));
  return common::Status::Ok();
}

Loader::~Loader() {
  // Endpoints first: closing one settles its reads, which use its key.
  for (auto& [node, c] : conns_) {
    if (c.ep != nullptr) ucx_->Close(c.ep, true);
    if (c.rkey != nullptr) ucp_rkey_destroy(c.rkey);
  }
  buffer_reg_.reset();  // the mapping itself goes with the last batch that holds it
  headers_reg_.reset();
  std::free(headers_);
}

Loader::Stats Loader::stats() const {
  Stats s = stats_;
  s.malformed_records = records_ ? records_->malformed() : 0;
  return s;
}

std::string Loader::transports() const {
  std::string out;
  for (const auto& [node, c] : conns_) {
    if (c.transport.empty() || out.find(c.transport) != std::string::npos) continue;
    out += (out.empty() ? "" : ",") + c.transport;
  }
  return out;
}

const NodeRecord* Loader::NodeInfo(const std::string& node, bool refresh) {
  if (refresh) {
    auto nodes = records_->Nodes();
    if (!nodes.ok()) {
      // Reads go on with the nodes as last read; a node that is not known
      // counts as down.
      ++stats_.record_errors;
      AGG_LOG(kWarning, "cache loader: cannot read the node records: %s", nodes.status().message().c_str());
    } else {
      nodes_.clear();
      for (NodeRecord& n : *nodes) {
        if (!placement_ && !n.members.empty()) {
          placement_ = std::make_unique<Placement>(n.members, n.members.size());
        }
        nodes_[n.node] = std::move(n);
      }
    }
  }
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

void Loader::OnEpError(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) {
  auto* l = static_cast<Loader*>(arg);
  for (auto& [node, c] : l->conns_) {
    if (c.ep == ep) c.failed = true;
  }
}

ucs_status_t Loader::OnHelloReply(void* arg, const void* /*header*/, size_t /*header_length*/,
                                  void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* l = static_cast<Loader*>(arg);
  // A reply is a header and a packed key: a few hundred bytes, always sent
  // eagerly. A rendezvous descriptor in place of the bytes, or anything
  // larger, is not a daemon's reply: answered as no reply at all.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0 || length > kMaxHelloReply) return UCS_OK;
  l->hello_reply_.assign(static_cast<const char*>(data), length);
  l->hello_answered_ = true;
  return UCS_OK;
}

void Loader::MarkDown(const std::string& node) {
  auto it = conns_.find(node);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  // Closing the endpoint fails its reads in flight; only then may their key go.
  if (c.ep != nullptr) ucx_->Close(c.ep, true);
  if (c.rkey != nullptr) ucp_rkey_destroy(c.rkey);
  c = Conn{};
  c.failed = true;
  c.down_until = Clock::now() + kDownFor;
  ++stats_.holder_failures;
}

Loader::Conn* Loader::Connection(const std::string& node) {
  auto it = conns_.find(node);
  if (it != conns_.end()) {
    Conn& c = it->second;
    if (c.ep != nullptr && !c.failed) return &c;
    if (c.ep != nullptr && c.failed) MarkDown(node);
    if (Clock::now() < c.down_until) return nullptr;
  }
  const NodeRecord* info = NodeInfo(node, false);
  if (info == nullptr) info = NodeInfo(node, true);
  if (info == nullptr) {  // not announced (its lease lapsed): down
    Conn& down = conns_[node];
    down = Conn{};
    down.failed = true;
    down.down_until = Clock::now() + kDownFor;
    ++stats_.holder_failures;
    return nullptr;
  }
  Conn& c = conns_[node];
  c = Conn{};
  auto ep = ucx_->Connect(info->ucx_listen, &Loader::OnEpError, this);
  if (!ep.ok()) {
    MarkDown(node);
    return nullptr;
  }
  c.ep = *ep;
  const std::string hello = BuildHello(cfg_.job);
  hello_answered_ = false;
  // Sending the hello and its answer share one owner_timeout_ms.
  const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.owner_timeout_ms);
  const ucs_status_t sent =
      ucx_->WaitFor(ucx_->SendAm(c.ep, kAmHello, hello.data(), hello.size(), true),
                    static_cast<int>(cfg_.owner_timeout_ms));
  while (sent == UCS_OK && !hello_answered_ && !c.failed && Clock::now() < deadline) {
    if (ucx_->Progress() == 0) ucx_->Wait(1);
  }
  if (!hello_answered_) {
    AGG_LOG(kWarning, "cache loader: node %s at %s did not answer the hello", node.c_str(),
            info->ucx_listen.c_str());
    MarkDown(node);
    return nullptr;
  }
  const common::Result<ParsedHelloReply> parsed = ParseHelloReply(hello_reply_.data(), hello_reply_.size());
  if (!parsed.ok()) {
    ++stats_.forged;
    AGG_LOG(kWarning, "cache loader: node %s at %s: %s", node.c_str(), info->ucx_listen.c_str(),
            parsed.status().message().c_str());
    MarkDown(node);
    return nullptr;
  }
  const HelloReply& reply = parsed->reply;
  const std::string& tail = parsed->tail;
  if (reply.status != HelloReply::kAccepted) {
    AGG_LOG(kWarning, "cache loader: node %s refused: %s", node.c_str(), tail.c_str());
    MarkDown(node);
    return nullptr;
  }
  if (ucp_ep_rkey_unpack(c.ep, tail.data(), &c.rkey) != UCS_OK) {
    MarkDown(node);
    return nullptr;
  }
  c.rkey_id = reply.rkey_id;
  c.region_base = reply.region_base;
  c.region_size = reply.region_size;
  c.transport = UcxWorker::Transports(c.ep);
  AGG_LOG(kInfo, "cache loader: connected to %s at %s over %s", node.c_str(), info->ucx_listen.c_str(),
          c.transport.c_str());
  return &c;
}

bool Loader::Verify(const ItemRecord& rec, const uint8_t* data) {
  if (!cfg_.verify || Crc32c(data, rec.length) == rec.crc32c) return true;
  ++stats_.crc_failures;
  return false;
}

Loader::LocalCopy Loader::CopyLocal(const ItemRecord& rec, const Holder& h, uint8_t* dest) {
  const NodeRecord* info = NodeInfo(h.node, false);
  if (info == nullptr) return LocalCopy::kUnavailable;        // the daemon is not announced
  if (info->rkey_id != h.rkey_id) return LocalCopy::kStale;   // an earlier run's record
  if (!local_ || local_base_ != info->region_base) {
    auto view = RegionView::Open(info->region_path);
    if (!view.ok()) {
      AGG_LOG(kWarning, "cache loader: the local path is closed: %s", view.status().message().c_str());
      return LocalCopy::kUnavailable;
    }
    local_ = std::move(view).value();
    local_base_ = info->region_base;
  }
  // The record's address and length must lie inside the region, header included.
  if (!HolderInRegion(h.addr, rec.length, local_base_, local_->size())) return LocalCopy::kForged;
  const uint64_t off = h.addr - local_base_;
  std::memcpy(dest, local_->base() + off, rec.length);
  const auto* header = reinterpret_cast<const ItemHeader*>(local_->base() + off - sizeof(ItemHeader));
  std::atomic_thread_fence(std::memory_order_acquire);
  return HeaderConfirms(*header, ItemHash(rec.item), rec.version, rec.length) && Verify(rec, dest)
             ? LocalCopy::kCopied
             : LocalCopy::kStale;
}

common::Status Loader::ReadFromStore(const std::string& item, uint64_t length, uint8_t* dest) {
  if (!store_) return common::Unavailable("item " + item + " is not in the cache and the loader has no store");
  ASSIGN_OR_RETURN(ExternalStore::Object o, store_->Read(item, dest, length));
  if (o.length != length) {
    return common::Unavailable("item " + item + ": the store has " + std::to_string(o.length) +
                               " bytes, its list says " + std::to_string(length));
  }
  return common::Status::Ok();
}

void Loader::AskFill(const std::string& item) {
  if (!placement_) return;
  const std::vector<std::string> holders = placement_->Holders(item);
  if (holders.empty()) return;
  Conn* c = Connection(holders[0]);
  if (c == nullptr) return;
  ucs_status_ptr_t r = ucx_->SendAm(c->ep, kAmFill, item.data(), item.size(), false);
  if (ucx_->WaitFor(r, static_cast<int>(cfg_.owner_timeout_ms)) == UCS_OK) ++stats_.fills_requested;
}

common::Status Loader::LoadInto(const std::vector<size_t>& indices, uint8_t* dest, ucp_mem_h memh,
                                std::vector<Item>* items) {
  std::vector<Task> tasks(indices.size());
  uint64_t offset = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    Task& t = tasks[i];
    t.index = indices[i];
    t.dest = dest + offset;
    t.memh = memh;
    const ExternalStore::Entry& e = entries_[t.index];
    items->push_back(Item{e.name, offset, e.length, Source::kOwner});
    offset += e.length;
    auto known = known_.find(e.name);
    if (known != known_.end() && known->second.length == e.length) t.rec = known->second;
  }
  std::vector<bool> slot_busy(cfg_.window, false);
  size_t started = 0, finished = 0, active = 0;

  // Moves `t` on to its next candidate; true when it is finished (or failed).
  auto advance = [&](Task& t) -> common::Status {
    const ExternalStore::Entry& e = entries_[t.index];
    for (;;) {
      // A copy on this node first, whatever its rank: no network at all.
      if (t.rec && t.next == 0 && !cfg_.node.empty()) {
        for (const Holder& h : t.rec->holders) {
          if (h.node != cfg_.node) continue;
          switch (CopyLocal(*t.rec, h, t.dest)) {
            case LocalCopy::kCopied:
              t.done = true;
              t.source = Source::kLocal;
              return common::Status::Ok();
            case LocalCopy::kStale: ++stats_.stale; break;
            case LocalCopy::kForged: ++stats_.forged; break;
            case LocalCopy::kUnavailable: ++stats_.holder_failures; break;
          }
        }
      }
      if (t.rec && t.next < t.rec->holders.size()) {
        const Holder& h = t.rec->holders[t.next];
        const Source source = t.next == 0 ? Source::kOwner : Source::kReplica;
        ++t.next;
        if (!cfg_.node.empty() && h.node == cfg_.node) continue;  // tried above
        // The placement ring holds every node of the cache (replicas = all).
        if (placement_ && placement_->Rank(t.rec->item, h.node) == Placement::npos) {
          ++stats_.forged;  // no node of this cache: nobody to read from
          continue;
        }
        Conn* c = Connection(h.node);
        if (c == nullptr) continue;
        if (c->rkey_id != h.rkey_id) {  // the record is from an earlier run of that daemon
          ++stats_.stale;
          continue;
        }
        // The read must lie inside the region that daemon announced, header
        // included: a record may be written by anybody who can write the
        // records, and UCX over TCP does not check a get against the
        // registration.
        if (!HolderInRegion(h.addr, t.rec->length, c->region_base, c->region_size)) {
          ++stats_.forged;
          continue;
        }
        size_t slot = 0;
        while (slot_busy[slot]) ++slot;
        slot_busy[slot] = true;
        t.slot = slot;
        t.node = h.node;
        t.source = source;
        t.stage = 1;
        t.deadline = Clock::now() + std::chrono::milliseconds(cfg_.owner_timeout_ms);
        t.request = ucx_->Get(c->ep, t.dest, t.rec->length, t.memh, h.addr, c->rkey);
        ++active;
        return common::Status::Ok();
      }
      // Holders exhausted (or none): read the record again once, then the store.
      if (!t.re_resolved) {
        t.re_resolved = true;
        auto fresh = records_->Get(cfg_.dataset, e.name);
        if (fresh.ok() && fresh->has_value() && (*fresh)->length == e.length) {
          const bool changed = !t.rec || (*fresh)->holders != t.rec->holders ||
                               (*fresh)->version != t.rec->version;
          known_[e.name] = **fresh;
          if (changed) {
            t.rec = **fresh;
            t.next = 0;
            NodeInfo("", true);
            continue;
          }
        } else if (fresh.ok() && !fresh->has_value()) {
          known_.erase(e.name);
        }
      }
      if (!t.rec || t.rec->holders.empty()) ++stats_.misses;
      if (cfg_.miss == MissPolicy::kFail) {
        return common::NotFound("item " + e.name + " is not readable from the cache (miss: fail)");
      }
      RETURN_IF_ERROR(ReadFromStore(e.name, e.length, t.dest));
      t.done = true;
      t.source = Source::kStore;
      AskFill(e.name);
      return common::Status::Ok();
    }
  };

  auto finish_stage = [&](Task& t, ucs_status_t s) -> common::Status {
    if (s == UCS_OK && t.stage == 1) {
      auto it = conns_.find(t.node);
      if (it != conns_.end() && it->second.ep != nullptr && !it->second.failed) {
        t.stage = 2;
        t.request = ucx_->Get(it->second.ep, &headers_[t.slot], sizeof(ItemHeader), headers_reg_->memh(),
                              t.rec->holders[t.next - 1].addr - sizeof(ItemHeader), it->second.rkey);
        return common::Status::Ok();
      }
      s = UCS_ERR_CONNECTION_RESET;
    }
    slot_busy[t.slot] = false;
    --active;
    t.stage = 0;
    t.request = nullptr;
    if (s == UCS_OK) {
      if (HeaderConfirms(headers_[t.slot], ItemHash(t.rec->item), t.rec->version, t.rec->length) &&
          Verify(*t.rec, t.dest)) {
        t.done = true;
        return common::Status::Ok();
      }
      ++stats_.stale;
    } else if (conns_.count(t.node) != 0 && conns_[t.node].ep != nullptr) {
      MarkDown(t.node);
    }
    return advance(t);
  };

  common::Status failure;
  while (finished < tasks.size() && failure.ok()) {
    while (started < tasks.size() && active < cfg_.window && failure.ok()) {
      Task& t = tasks[started++];
      failure = advance(t);
    }
    ucx_->Progress();
    bool moved = false;
    finished = 0;
    for (Task& t : tasks) {
      if (t.done) {
        ++finished;
        continue;
      }
      if (t.stage == 0 || !failure.ok()) continue;
      const ucs_status_t s = UcxWorker::Poll(t.request);
      if (s == UCS_INPROGRESS) {
        if (Clock::now() >= t.deadline) {
          AGG_LOG(kWarning, "cache loader: %s did not answer within %u ms; reading elsewhere",
                  t.node.c_str(), cfg_.owner_timeout_ms);
          MarkDown(t.node);  // its reads in flight complete with an error
          moved = true;
        }
        continue;
      }
      moved = true;
      failure = finish_stage(t, s);
      if (t.done) ++finished;
    }
    if (!moved && active > 0) ucx_->Wait(1);
  }
  if (!failure.ok()) {
    // Reads still in flight write into the buffer: settle them before it is reused.
    for (Task& t : tasks) {
      if (t.stage != 0) ucx_->WaitFor(t.request, static_cast<int>(cfg_.owner_timeout_ms));
    }
    return failure;
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    (*items)[i].source = tasks[i].source;
    switch (tasks[i].source) {
      case Source::kLocal: ++stats_.local; break;
      case Source::kOwner: ++stats_.owner; break;
      case Source::kReplica: ++stats_.replica; break;
      case Source::kStore: ++stats_.store; break;
    }
  }
  return common::Status::Ok();
}

void Loader::ReloadConfig() {
  if (config_path_.empty()) return;
  const int64_t mtime = MtimeOf(config_path_);
  if (mtime == config_mtime_) return;
  config_mtime_ = mtime;
  auto fresh = LoadLoaderConfig(config_path_);
  if (!fresh.ok()) {
    AGG_LOG(kWarning, "cache loader: keeping the request as it was: %s", fresh.status().message().c_str());
    return;
  }
  cfg_.amount = fresh->amount;
  cfg_.component = fresh->component;
  ++stats_.config_reloads;
  AGG_LOG(kInfo, "cache loader: %s changed: requests are now %llu bytes into %s", config_path_.c_str(),
          static_cast<unsigned long long>(cfg_.amount), ComponentName(cfg_.component));
}

common::Status Loader::SetRequest(uint64_t amount, Component component) {
  if (amount == 0) return common::InvalidArgument("request.amount: expected more than 0 bytes");
  cfg_.amount = amount;
  cfg_.component = component;
  return common::Status::Ok();
}

common::Status Loader::Reserve(uint64_t bytes) {
  if (bytes <= capacity_) return common::Status::Ok();
  // The old buffer stays mapped while a batch handed out still holds it.
  buffer_reg_.reset();
  buffer_.reset();
  capacity_ = 0;
  const uint64_t size = (bytes + (2 << 20) - 1) & ~uint64_t{(2 << 20) - 1};
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return common::ResourceExhausted("no memory for a " + std::to_string(size) + "-byte request");
  ::madvise(p, size, MADV_HUGEPAGE);
  buffer_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [size](uint8_t* m) { ::munmap(m, size); });
  capacity_ = size;
  ASSIGN_OR_RETURN(buffer_reg_, ucx_->Map(buffer_.get(), capacity_));
  return common::Status::Ok();
}

std::vector<size_t> Loader::NextRequest(uint64_t* total) {
  std::vector<size_t> indices;
  *total = 0;
  for (size_t n = 0; n < entries_.size(); ++n) {
    const uint64_t len = entries_[cursor_].length;
    if (!indices.empty() && *total + len > cfg_.amount) break;
    indices.push_back(cursor_);
    *total += len;
    cursor_ = (cursor_ + 1) % entries_.size();
    if (cursor_ == 0) break;  // a request ends with the epoch
  }
  return indices;
}

common::Result<size_t> Loader::Skip() {
  ReloadConfig();
  uint64_t total = 0;
  return NextRequest(&total).size();
}

common::Result<const Loader::Batch*> Loader::Next() {
  ReloadConfig();
  if (cfg_.component == Component::kGpu) {
    return common::FailedPrecondition(
        std::string("request.component gpu is unsupported on this host: ") +
        (ucx_->SupportsCuda() ? "UCX has CUDA here, but this build of aggswitch cannot allocate GPU memory"
                              : "UCX has no CUDA support here (ucx_info -d lists no cuda transport)") +
        "; GPU destinations need UCX built with CUDA, a GPUDirect RDMA NIC and a CUDA build of the "
        "loader, which this version does not offer (docs/cache.md)");
  }
  uint64_t total = 0;
  const std::vector<size_t> indices = NextRequest(&total);
  RETURN_IF_ERROR(Reserve(std::max<uint64_t>(total, 1)));
  batch_.items.clear();
  RETURN_IF_ERROR(LoadInto(indices, buffer_.get(), buffer_reg_->memh(), &batch_.items));
  batch_.data = buffer_.get();
  batch_.storage = buffer_;
  batch_.length = total;
  batch_.component = cfg_.component;
  batch_.sequence = ++stats_.requests;
  stats_.items += indices.size();
  stats_.bytes += total;
  return &batch_;
}

common::Status Loader::ReadItem(size_t index, uint8_t* dest) {
  if (index >= entries_.size()) {
    return common::OutOfRange("item " + std::to_string(index) + " of a dataset of " +
                              std::to_string(entries_.size()));
  }
  // The destination is registered for the read (the NIC writes into it);
  // mapping it costs far less than the read itself.
  ASSIGN_OR_RETURN(std::unique_ptr<UcxMemory> reg, ucx_->Map(dest, std::max<uint64_t>(entries_[index].length, 1)));
  std::vector<Item> items;
  RETURN_IF_ERROR(LoadInto({index}, dest, reg->memh(), &items));
  ++stats_.items;
  stats_.bytes += entries_[index].length;
  return common::Status::Ok();
}

}  // namespace aggswitch::cache
