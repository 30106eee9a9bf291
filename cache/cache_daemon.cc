#include "cache/cache_daemon.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <optional>
#include <random>

#include "cache/crc32c.h"
#include "cache/handshake.h"
#include "common/log.h"

namespace aggswitch::cache {

common::Result<std::unique_ptr<CacheDaemon>> CacheDaemon::Start(const DaemonConfig& config) {
  std::unique_ptr<CacheDaemon> d(new CacheDaemon(config));
  const std::string region_path = config.region_dir + "/aggswitch-cache." + config.node;
  ASSIGN_OR_RETURN(d->region_, Region::Create(region_path, config.memory, config.hugepages));
  ASSIGN_OR_RETURN(d->ucx_, UcxWorker::Create({config.ucx_tls, config.ucx_net_devices}));
  ASSIGN_OR_RETURN(d->region_reg_, d->ucx_->Map(d->region_->base(), d->region_->size()));
  ASSIGN_OR_RETURN(d->packed_key_, d->region_reg_->PackedKey());
  std::random_device rd;
  d->rkey_id_ = (rd() & 0x7fffffff) | 1;

  for (auto [id, cb] : {std::pair{kAmHello, &CacheDaemon::OnHello},
                        std::pair{kAmFill, &CacheDaemon::OnFill}}) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = id;
    hp.cb = cb;
    hp.arg = d.get();
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    const ucs_status_t s = ucp_worker_set_am_recv_handler(d->ucx_->worker(), &hp);
    if (s != UCS_OK) return common::Internal(std::string("ucp_worker_set_am_recv_handler: ") + ucs_status_string(s));
  }

  const auto listen = common::Ipv4Endpoint::Parse(config.listen);
  if (!listen || listen->port == 0) {
    return common::InvalidArgument("cache.listen: expected a.b.c.d:port, got \"" + config.listen + "\"");
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(listen->port);
  sa.sin_addr.s_addr = htonl(listen->ip.addr);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof(sa);
  lp.conn_handler.cb = &CacheDaemon::OnConnection;
  lp.conn_handler.arg = d.get();
  const ucs_status_t s = ucp_listener_create(d->ucx_->worker(), &lp, &d->listener_);
  if (s != UCS_OK) {
    return common::Unavailable("cache.listen " + config.listen + ": " + ucs_status_string(s));
  }

  ASSIGN_OR_RETURN(d->store_, ExternalStore::Open(config.store));
  ASSIGN_OR_RETURN(d->records_, OpenRecords(config.records, config.prefix));
  ASSIGN_OR_RETURN(std::vector<ExternalStore::Entry> all, d->store_->List());
  for (const ExternalStore::Entry& e : all) {
    if (d->placement_.Rank(e.name, config.node) == Placement::npos) continue;
    d->mine_index_.emplace(e.name, d->mine_.size());
    d->mine_.push_back(e);
    d->fill_target_items_.fetch_add(1, std::memory_order_relaxed);
    d->fill_target_bytes_.fetch_add(e.length, std::memory_order_relaxed);
  }
  // The item list goes into the records, so that loaders need not ask the store.
  RETURN_IF_ERROR(d->records_->PutManifest(config.dataset, ExternalStore::FormatManifest(all)));
  RETURN_IF_ERROR(d->Announce());
  AGG_LOG(kInfo,
          "cache node %s: %" PRIu64 " MiB region %s, UCX listener %s (UCX_TLS=%s), %zu of %zu "
          "items of dataset %s from %s are this node's; records in %s",
          config.node.c_str(), d->region_->size() >> 20, region_path.c_str(), config.listen.c_str(),
          config.ucx_tls.c_str(), d->mine_.size(), all.size(), config.dataset.c_str(),
          d->store_->Describe().c_str(), d->records_->Describe().c_str());
  return d;
}

common::Status CacheDaemon::Announce() {
  NodeRecord n;
  n.node = config_.node;
  n.ucx_listen = config_.listen;
  n.region_path = region_->path();
  n.region_base = reinterpret_cast<uint64_t>(region_->base());
  n.region_size = region_->size();
  n.rkey_id = rkey_id_;
  n.pid = static_cast<uint64_t>(::getpid());
  n.members = config_.nodes;
  return records_->PutNode(n, static_cast<int>(config_.lease_ttl_s));
}

CacheDaemon::~CacheDaemon() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (fill_thread_.joinable()) fill_thread_.join();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (ucx_) {
    for (ucp_ep_h ep : endpoints_) ucx_->Close(ep, true);
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
  }
  region_reg_.reset();
}

void CacheDaemon::OnConnection(ucp_conn_request_h request, void* arg) {
  auto* d = static_cast<CacheDaemon*>(arg);
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  bool allowed = false;
  std::string who = "?";
  if (ucp_conn_request_query(request, &attr) == UCS_OK && attr.client_address.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&attr.client_address);
    const common::Ipv4Addr ip{ntohl(sin->sin_addr.s_addr)};
    who = ip.ToString();
    for (const common::Ipv4Prefix& p : d->config_.allow_nodes) {
      const uint32_t mask = p.length == 0 ? 0 : ~uint32_t{0} << (32 - p.length);
      if ((ip.addr & mask) == (p.ip.addr & mask)) allowed = true;
    }
  }
  if (!allowed) {
    d->refused_address_.fetch_add(1, std::memory_order_relaxed);
    AGG_LOG(kWarning, "cache: refused a connection from %s (not in cache.allow.nodes)", who.c_str());
    ucp_listener_reject(d->listener_, request);
    return;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.conn_request = request;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &CacheDaemon::OnPeerError;
  ep.err_handler.arg = d;
  ucp_ep_h handle = nullptr;
  if (ucp_ep_create(d->ucx_->worker(), &ep, &handle) != UCS_OK) {
    d->peer_failures_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  d->endpoints_.insert(handle);
  d->connections_.fetch_add(1, std::memory_order_relaxed);
  AGG_LOG(kInfo, "cache: connection from %s over %s", who.c_str(), UcxWorker::Transports(handle).c_str());
}

void CacheDaemon::OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t /*status*/) {
  auto* d = static_cast<CacheDaemon*>(arg);
  d->failed_.push_back(ep);
}

ucs_status_t CacheDaemon::OnHello(void* arg, const void* /*header*/, size_t /*header_length*/,
                                  void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* d = static_cast<CacheDaemon*>(arg);
  // One reply in flight per connection: a hello sent again before the
  // reply to the last one went out is dropped, counted as a bad hello, so that
  // a loader that floods hellos and reads no replies holds one reply here,
  // not one per hello.
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 ||
      std::any_of(d->replies_.begin(), d->replies_.end(),
                  [ep = param->reply_ep](const Reply& r) { return r.ep == ep; })) {
    d->bad_hellos_.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  HelloReply reply;
  std::string tail;
  const common::Result<std::string> hello = ParseHello(data, length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
  if (!hello.ok()) {
    d->bad_hellos_.fetch_add(1, std::memory_order_relaxed);
    reply.status = HelloReply::kBadRequest;
    tail = hello.status().message();
  } else {
    const std::string& job = *hello;
    const auto& jobs = d->config_.allow_jobs;
    if (!jobs.empty() && std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
      d->refused_job_.fetch_add(1, std::memory_order_relaxed);
      AGG_LOG(kWarning, "cache: refused job \"%s\" (not in cache.allow.jobs)", job.c_str());
      reply.status = HelloReply::kRefused;
      tail = "job \"" + job + "\" may not read this cache (cache.allow.jobs)";
    } else {
      d->hellos_.fetch_add(1, std::memory_order_relaxed);
      reply.status = HelloReply::kAccepted;
      reply.rkey_id = d->rkey_id_;
      reply.region_base = reinterpret_cast<uint64_t>(d->region_->base());
      reply.region_size = d->region_->size();
      tail = d->packed_key_;
    }
  }
  d->replies_.push_back(
      Reply{param->reply_ep, BuildHelloReply(reply, tail), reply.status != HelloReply::kAccepted});
  return UCS_OK;
}

ucs_status_t CacheDaemon::OnFill(void* arg, const void* /*header*/, size_t /*header_length*/,
                                 void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* d = static_cast<CacheDaemon*>(arg);
  // An item name, sent eagerly, of an item the store lists for this node
  // (mine_index_, fixed before Run): anything else is ignored, so that a
  // flood of requests asks neither the store nor the records anything.
  // An item already queued is not queued again: the queue holds at most
  // this node's share of the dataset, once.
  const std::optional<std::string> item =
      ParseFill(data, length, (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
  if (!item || d->mine_index_.count(*item) == 0) {
    d->fill_requests_ignored_.fetch_add(1, std::memory_order_relaxed);
    return UCS_OK;
  }
  {
    std::lock_guard lock(d->mu_);
    if (!d->queued_.insert(*item).second) {
      d->fill_requests_ignored_.fetch_add(1, std::memory_order_relaxed);
      return UCS_OK;
    }
    d->fill_queue_.push_back(*item);
  }
  d->fill_requests_.fetch_add(1, std::memory_order_relaxed);
  d->cv_.notify_all();
  return UCS_OK;
}

void CacheDaemon::SendReplies() {
  std::vector<ucp_ep_h> close;
  for (auto it = replies_.begin(); it != replies_.end();) {
    if (it->request == nullptr) {
      it->request = ucx_->SendAm(it->ep, kAmHelloReply, it->bytes.data(), it->bytes.size(), false);
    }
    const ucs_status_t s = UcxWorker::Poll(it->request);
    if (s == UCS_INPROGRESS) {
      ++it;
      continue;
    }
    if (it->close_after) close.push_back(it->ep);
    it = replies_.erase(it);
  }
  for (ucp_ep_h ep : close) {
    closing_.emplace_back(ep, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  }
}

bool CacheDaemon::FillOne(const ExternalStore::Entry& entry) {
  std::vector<EvictedItem> evicted;
  auto reserved = region_->Reserve(entry.name, entry.length, &evicted);
  for (const EvictedItem& e : evicted) {
    published_.erase(e.item);
    if (!records_->RemoveHolder(config_.dataset, e.item, config_.node).ok()) {
      record_errors_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!reserved.ok()) {
    AGG_LOG(kWarning, "cache: %s", reserved.status().message().c_str());
    fill_errors_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const Region::Reservation& r = *reserved;
  auto object = store_->Read(entry.name, r.data, r.length);
  if (!object.ok() || object->length != entry.length) {
    AGG_LOG(kWarning, "cache: cannot fill %s: %s", entry.name.c_str(),
            object.ok() ? ("the store has " + std::to_string(object->length) + " bytes, its list says " +
                           std::to_string(entry.length)).c_str()
                        : object.status().message().c_str());
    region_->Abandon(r);
    fill_errors_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint32_t crc = Crc32c(r.data, r.length);
  region_->Commit(r, object->version, crc);
  ItemRecord rec{entry.name, entry.length, object->version, crc, {}};
  const Holder me{config_.node, reinterpret_cast<uint64_t>(r.data), rkey_id_};
  const std::string item = entry.name;
  auto rank = [this, &item](const std::string& node) { return placement_.Rank(item, node); };
  if (!records_->AddHolder(config_.dataset, rec, me, rank).ok()) {
    record_errors_.fetch_add(1, std::memory_order_relaxed);
    region_->Evict(entry.name);
    return false;
  }
  published_.insert(entry.name);
  filled_items_.fetch_add(1, std::memory_order_relaxed);
  filled_bytes_.fetch_add(entry.length, std::memory_order_relaxed);
  return true;
}

void CacheDaemon::FillThread() {
  const auto started = std::chrono::steady_clock::now();
  for (const ExternalStore::Entry& e : mine_) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    FillOne(e);
  }
  initial_fill_done_.store(true, std::memory_order_release);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  AGG_LOG(kInfo, "cache: filled %" PRIu64 " of %zu items (%" PRIu64 " MiB) in %.1f s, %" PRIu64 " errors",
          filled_items_.load(), mine_.size(), filled_bytes_.load() >> 20, secs, fill_errors_.load());
  for (;;) {
    std::string item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !fill_queue_.empty(); });
      if (stopping_) return;
      item = std::move(fill_queue_.front());
      fill_queue_.pop_front();
      queued_.erase(item);
    }
    if (region_->Find(item) >= 0 && published_.count(item) != 0) {
      // Cached here; the request says a loader found no record: see if it is there.
      auto rec = records_->Get(config_.dataset, item);
      const bool listed = rec.ok() && rec->has_value() &&
                          std::any_of((*rec)->holders.begin(), (*rec)->holders.end(),
                                      [this](const Holder& h) { return h.node == config_.node; });
      if (listed) continue;
    }
    // The store's own list gives the length (OnFill queued listed items only).
    FillOne(mine_[mine_index_.at(item)]);
  }
}

void CacheDaemon::DrawProgress(bool final_line) const {
  const uint64_t total = fill_target_bytes_.load();
  const uint64_t done = filled_bytes_.load();
  const double frac = total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
  const int width = 40;
  const int full = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(full), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\rfill %s [%s] %5.1f%%  %" PRIu64 "/%" PRIu64 " items  %" PRIu64 "/%" PRIu64 " MiB%s",
               config_.node.c_str(), bar.c_str(), frac * 100.0, filled_items_.load(),
               fill_target_items_.load(), done >> 20, total >> 20, final_line ? "\n" : "");
  std::fflush(stderr);
}

void CacheDaemon::LeaseThread() {
  const auto renew_every = std::chrono::milliseconds(config_.lease_ttl_s * 1000 / 3);
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, renew_every, [this] { return stopping_; })) {
    lock.unlock();
    if (!records_->KeepAlive().ok()) {
      // The lease lapsed (etcd was away): announce the node again.
      record_errors_.fetch_add(1, std::memory_order_relaxed);
      if (!Announce().ok()) AGG_LOG(kWarning, "cache: cannot renew the node record");
    }
    lock.lock();
  }
}

common::Status CacheDaemon::Run(const std::atomic<bool>& stop, bool progress) {
  fill_thread_ = std::thread([this] { FillThread(); });
  lease_thread_ = std::thread([this] { LeaseThread(); });
  auto next_draw = std::chrono::steady_clock::now();
  bool drew_final = false;
  while (!stop.load(std::memory_order_relaxed)) {
    ucx_->Progress();
    SendReplies();
    std::vector<ucp_ep_h> failed;
    failed.swap(failed_);
    for (ucp_ep_h ep : failed) {
      if (endpoints_.erase(ep) > 0) {
        peer_failures_.fetch_add(1, std::memory_order_relaxed);
        std::erase_if(replies_, [ep](const Reply& r) { return r.ep == ep && r.request == nullptr; });
        ucx_->Close(ep, true);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    for (auto it = closing_.begin(); it != closing_.end();) {
      if (endpoints_.count(it->first) == 0) {  // closed already (the loader went)
        it = closing_.erase(it);
      } else if (now >= it->second) {
        const ucp_ep_h ep = it->first;
        it = closing_.erase(it);
        endpoints_.erase(ep);
        ucx_->Close(ep, true);
        break;  // Close drove UCX: start the walk again next round
      } else {
        ++it;
      }
    }
    if (progress && !drew_final && now >= next_draw) {
      next_draw = now + std::chrono::milliseconds(200);
      drew_final = initial_fill_done_.load();
      DrawProgress(drew_final);
    }
    if (replies_.empty()) ucx_->Wait(50);
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  fill_thread_.join();
  lease_thread_.join();
  Withdraw();
  return common::Status::Ok();
}

void CacheDaemon::Withdraw() {
  // Loaders would find the region gone; take this node out of the records first.
  // Bounded: with the records unreachable, the first failure ends it (loaders
  // find the node gone and its lease lapses).
  size_t removed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (const std::string& item : published_) {
    const common::Status s = records_->RemoveHolder(config_.dataset, item, config_.node);
    if (!s.ok()) {
      AGG_LOG(kWarning, "cache node %s: stopped withdrawing from the records: %s", config_.node.c_str(),
              s.message().c_str());
      break;
    }
    ++removed;
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  const size_t held = published_.size();
  published_.clear();
  if (removed == held) {
    if (const common::Status s = records_->DropNode(config_.node); !s.ok()) {
      AGG_LOG(kWarning, "cache node %s: the node record stays until its lease lapses: %s",
              config_.node.c_str(), s.message().c_str());
    }
  }
  AGG_LOG(kInfo, "cache node %s: withdrawn from %zu of %zu item records", config_.node.c_str(), removed,
          held);
}

CacheDaemon::Stats CacheDaemon::stats() const {
  Stats s;
  s.fill_target_items = fill_target_items_.load();
  s.fill_target_bytes = fill_target_bytes_.load();
  s.filled_items = filled_items_.load();
  s.filled_bytes = filled_bytes_.load();
  s.fill_errors = fill_errors_.load();
  s.fill_requests = fill_requests_.load();
  s.fill_requests_ignored = fill_requests_ignored_.load();
  s.record_errors = record_errors_.load();
  s.connections = connections_.load();
  s.refused_address = refused_address_.load();
  s.refused_job = refused_job_.load();
  s.bad_hellos = bad_hellos_.load();
  s.hellos = hellos_.load();
  s.peer_failures = peer_failures_.load();
  s.unknown_messages = ucx_->unknown_messages();
  s.initial_fill_done = initial_fill_done_.load();
  const Region::Stats r = region_->stats();
  s.region_bytes = r.size;
  s.region_used_bytes = r.used;
  s.items = r.items;
  s.evictions = r.evictions;
  s.store_requests = store_->requests();
  s.store_bytes = store_->bytes();
  return s;
}

}  // namespace aggswitch::cache
