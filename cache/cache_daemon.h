// agg-cached's core: one node's share of the data cache.
//
// Start() maps the node's region (region.h) and registers it with UCX,
// opens the external store and the records, starts the UCX listener and
// announces the node (a NodeRecord on a lease). Run() then serves until
// `stop`:
//   - the serving thread (Run's caller) drives UCX: it accepts connections
//     from allowed addresses only, answers hellos from allowed jobs with
//     the region's remote key, and queues read-through fill requests; the
//     one-sided reads themselves need nothing from it but progress;
//   - the lease thread renews the node record's lease (a third of
//     lease_ttl_s) and announces the node again when it lapsed, so that a
//     slow etcd never holds up the serving thread;
//   - the fill thread fills the region from the store ahead of use: every
//     item the placement gives this node (owner or replica), in manifest
//     order, each published in the records once its bytes are whole; then
//     the items loaders asked for after a miss. An item that does not fit
//     evicts the oldest (region.h) and takes the evicted ones out of the
//     records.
// On stop, the node takes itself out of the records (items and node).
//
//   ASSIGN_OR_RETURN(auto daemon, CacheDaemon::Start(config));
//   RETURN_IF_ERROR(daemon->Run(stop_flag));
//
// Thread safety: Start, Run and the destructor on one thread; stats() on
// any thread (the HTTP server's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/cache_config.h"
#include "cache/external_store.h"
#include "cache/placement.h"
#include "cache/records.h"
#include "cache/region.h"
#include "cache/ucx_transport.h"
#include "common/status.h"

namespace aggswitch::cache {

class CacheDaemon {
 public:
  struct Stats {
    uint64_t fill_target_items = 0, fill_target_bytes = 0;  // this node's share of the dataset
    uint64_t filled_items = 0, filled_bytes = 0;
    uint64_t fill_errors = 0;
    uint64_t fill_requests = 0, fill_requests_ignored = 0;   // read-through asks
    uint64_t record_errors = 0;
    uint64_t connections = 0, refused_address = 0, refused_job = 0, bad_hellos = 0, hellos = 0;
    uint64_t peer_failures = 0;
    uint64_t unknown_messages = 0;  // active messages of no id the daemon serves, dropped
    bool initial_fill_done = false;
    uint64_t region_bytes = 0, region_used_bytes = 0, items = 0, evictions = 0;  // region.h
    uint64_t store_requests = 0, store_bytes = 0;  // the external store's reads
  };

  static common::Result<std::unique_ptr<CacheDaemon>> Start(const DaemonConfig& config);
  ~CacheDaemon();
  CacheDaemon(const CacheDaemon&) = delete;
  CacheDaemon& operator=(const CacheDaemon&) = delete;

  // Serves until `stop` becomes true. `progress`: draw a fill progress bar
  // on stderr. [serving thread]
  common::Status Run(const std::atomic<bool>& stop, bool progress);

  // The node's counters (agg-cached's /metrics renders them). [any]
  Stats stats() const;
  const DaemonConfig& config() const { return config_; }

 private:
  explicit CacheDaemon(DaemonConfig config)
      : config_(std::move(config)), placement_(config_.nodes, config_.replicas) {}

  static void OnConnection(ucp_conn_request_h request, void* arg);
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnHello(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t OnFill(void* arg, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param);

  void FillThread();
  void LeaseThread();
  // Fills one item; false when it could not.
  bool FillOne(const ExternalStore::Entry& entry);
  void DrawProgress(bool final_line) const;
  common::Status Announce();
  void Withdraw();
  void SendReplies();

  DaemonConfig config_;
  Placement placement_;
  std::unique_ptr<Region> region_;
  std::unique_ptr<UcxWorker> ucx_;
  std::unique_ptr<UcxMemory> region_reg_;
  std::string packed_key_;
  uint32_t rkey_id_ = 0;
  ucp_listener_h listener_ = nullptr;
  std::unique_ptr<ExternalStore> store_;
  std::unique_ptr<Records> records_;
  std::vector<ExternalStore::Entry> mine_;  // this node's items, in manifest order
  std::unordered_map<std::string, size_t> mine_index_;  // item -> its place in mine_

  // Serving thread only.
  std::set<ucp_ep_h> endpoints_;
  std::vector<ucp_ep_h> failed_;
  struct Reply {
    ucp_ep_h ep;
    std::string bytes;
    bool close_after;
    ucs_status_ptr_t request = nullptr;
  };
  std::deque<Reply> replies_;
  // Refused loaders' endpoints, closed after a grace period unless the
  // loader closes first (it does, on the refusal): both sides closing at
  // once is avoided.
  std::vector<std::pair<ucp_ep_h, std::chrono::steady_clock::time_point>> closing_;

  // Fill thread and lease thread <-> serving thread.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> fill_queue_;  // guarded by mu_
  std::set<std::string> queued_;        // the items in fill_queue_, guarded by mu_
  std::set<std::string> published_;  // items this node holds in the records (fill thread)
  bool stopping_ = false;
  std::thread fill_thread_;
  std::thread lease_thread_;

  mutable std::atomic<uint64_t> fill_target_items_{0}, fill_target_bytes_{0};
  mutable std::atomic<uint64_t> filled_items_{0}, filled_bytes_{0}, fill_errors_{0};
  mutable std::atomic<uint64_t> fill_requests_{0}, fill_requests_ignored_{0}, record_errors_{0};
  mutable std::atomic<uint64_t> connections_{0}, refused_address_{0}, refused_job_{0};
  mutable std::atomic<uint64_t> bad_hellos_{0}, hellos_{0}, peer_failures_{0};
  std::atomic<bool> initial_fill_done_{false};
};

}  // namespace aggswitch::cache
