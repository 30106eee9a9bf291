// The data cache's loader: what a training process links (or imports from
// Python) to read its dataset out of the cluster's memory.
//
// A request asks for an amount of data into a destination component (cpu or
// gpu), as the loader config's `request` section says. Next() serves one:
// the next whole items of the dataset (at least one, and as many more as fit
// the amount), back to back in a buffer registered for RDMA, each read by a
// one-sided get straight from a holder's region into it. A request ends at
// the end of the dataset; the next starts the next epoch from its first item.
//
// For each item, in this order:
//   1. a holder on this node (`node` in the config): copied from the
//      daemon's region mapped read-only (the local path, no network);
//   2. the owner, then the replicas: one-sided reads over UCX, then the
//      item's header is read back (region.h's seqlock) and the CRC-32C
//      checked, so a torn or evicted copy is never handed out;
//   3. on a miss (no record), a stale record (the header or the region's key
//      disagrees: re-resolved once from the records) or holders that are
//      all down: the external store, with `miss: read_through` (and the
//      owner is asked to fill the item), or an error with `miss: fail`.
// A holder that fails or does not answer within owner_timeout_ms is
// skipped for the rest of the request and for 5 s after; its reads fall
// back as above. A connection's hello and a read each get owner_timeout_ms,
// so an owner going down costs a request about owner_timeout_ms, twice that
// when it goes down between a hello and a read.
//
// Every destination is registered with UCX before the reads into it: the
// request buffer once (and again when a request outgrows it), a ReadItem
// destination for that read.
//
// Changing the config file changes the next request (amount and component
// are re-read when the file's mtime moves); SetRequest does the same from
// code.
//
//   ASSIGN_OR_RETURN(auto loader, Loader::Open(cfg, "loader.yaml"));
//   ASSIGN_OR_RETURN(const Loader::Batch* b, loader->Next());
//   use(b->data, b->length);   // overwritten by the next call
//
// The gpu component needs a GPU allocator this build does not have (and UCX
// built with CUDA); a request for it fails with FailedPrecondition
// ("unsupported on this host").
//
// Thread safety: every method on the thread that opened the Loader (it owns
// a UCX worker); open one Loader per thread or process. ListItems: any
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
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

class Loader {
 public:
  enum class Source : uint8_t { kLocal, kOwner, kReplica, kStore };
  struct Item {
    std::string name;
    uint64_t offset = 0;  // in the batch
    uint64_t length = 0;
    Source source = Source::kOwner;
  };
  struct Batch {
    const uint8_t* data = nullptr;
    uint64_t length = 0;
    // Keeps `data`'s memory mapped while held, even past the Loader or a
    // larger request (the next request still overwrites the bytes).
    std::shared_ptr<const uint8_t> storage;
    std::vector<Item> items;
    Component component = Component::kCpu;
    uint64_t sequence = 0;  // requests served so far, this one included
  };
  struct Stats {
    uint64_t requests = 0, items = 0, bytes = 0;
    uint64_t local = 0, owner = 0, replica = 0, store = 0;  // items by where they came from
    uint64_t misses = 0;        // no record
    uint64_t stale = 0;         // a record that no longer described the bytes
    uint64_t holder_failures = 0;  // a holder down, refused or too slow
    uint64_t crc_failures = 0;
    uint64_t fills_requested = 0;
    uint64_t config_reloads = 0;
    uint64_t record_errors = 0;     // the records unreachable (reads went on from what was known)
    uint64_t malformed_records = 0; // records skipped because they did not parse
    // A holder refused: its address outside the region its daemon announced
    // (header included), a node that is no node of the cache, or a daemon's
    // reply that did not parse.
    uint64_t forged = 0;
  };

  // The dataset's items (name and length), in request order, as Open finds
  // them: from the records, else from the store. Opens no UCX worker, so a
  // process that is about to fork (a DataLoader) can call it.
  static common::Result<std::vector<ExternalStore::Entry>> ListItems(const LoaderConfig& cfg);

  // `config_path`: the file `cfg` came from, watched for changes; empty: none.
  static common::Result<std::unique_ptr<Loader>> Open(const LoaderConfig& cfg,
                                                      const std::string& config_path = "");
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Serves the next request. The batch stays as it is until the next call.
  common::Result<const Batch*> Next();
  // Passes over the next request without reading it (another process of a
  // DataLoader serves it); the number of its items.
  common::Result<size_t> Skip();
  // Reads item `index` alone (a Dataset's __getitem__) into `dest`, which
  // holds at least length(index) bytes.
  common::Status ReadItem(size_t index, uint8_t* dest);
  // The amount and component of the next requests.
  common::Status SetRequest(uint64_t amount, Component component);
  // The next request starts at item `index`.
  void Seek(size_t index) { cursor_ = entries_.empty() ? 0 : index % entries_.size(); }

  size_t size() const { return entries_.size(); }
  const std::string& name(size_t index) const { return entries_[index].name; }
  uint64_t length(size_t index) const { return entries_[index].length; }
  uint64_t amount() const { return cfg_.amount; }
  Component component() const { return cfg_.component; }
  Stats stats() const;
  // The UCX transports of the connections so far ("tcp/eth0", "rc_verbs/mlx5_0:1").
  std::string transports() const;
  // Store reads of this loader.
  uint64_t store_requests() const { return store_ ? store_->requests() : 0; }

 private:
  struct Conn {
    ucp_ep_h ep = nullptr;
    ucp_rkey_h rkey = nullptr;
    uint32_t rkey_id = 0;
    uint64_t region_base = 0;  // the region its hello reply announced
    uint64_t region_size = 0;
    bool failed = false;
    std::chrono::steady_clock::time_point down_until{};
    std::string transport;
  };
  struct Task;

  // What the local path found.
  enum class LocalCopy : uint8_t { kCopied, kStale, kForged, kUnavailable };

  explicit Loader(LoaderConfig cfg, std::string path) : cfg_(std::move(cfg)), config_path_(std::move(path)) {}
  common::Status Init();
  static common::Result<std::vector<ExternalStore::Entry>> Entries(const LoaderConfig& cfg, Records& records,
                                                                   ExternalStore* store,
                                                                   const std::vector<ItemRecord>& recs);
  void ReloadConfig();
  common::Status Reserve(uint64_t bytes);
  // The items of the next request, its bytes in `total`; moves the cursor.
  std::vector<size_t> NextRequest(uint64_t* total);
  // Loads entries `indices` to dest + offsets; fills `items`.
  common::Status LoadInto(const std::vector<size_t>& indices, uint8_t* dest, ucp_mem_h memh,
                          std::vector<Item>* items);
  // A connected, accepted connection to `node`, or null (down, refused, unknown).
  Conn* Connection(const std::string& node);
  void MarkDown(const std::string& node);
  const NodeRecord* NodeInfo(const std::string& node, bool refresh);
  LocalCopy CopyLocal(const ItemRecord& rec, const Holder& h, uint8_t* dest);
  common::Status ReadFromStore(const std::string& item, uint64_t length, uint8_t* dest);
  void AskFill(const std::string& item);
  bool Verify(const ItemRecord& rec, const uint8_t* data);

  static void OnEpError(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t OnHelloReply(void* arg, const void* header, size_t header_length, void* data,
                                   size_t length, const ucp_am_recv_param_t* param);

  LoaderConfig cfg_;
  std::string config_path_;
  int64_t config_mtime_ = 0;
  std::unique_ptr<UcxWorker> ucx_;
  std::unique_ptr<Records> records_;
  std::unique_ptr<ExternalStore> store_;
  std::vector<ExternalStore::Entry> entries_;
  std::unordered_map<std::string, ItemRecord> known_;  // records as last read
  std::map<std::string, NodeRecord> nodes_;
  std::unique_ptr<Placement> placement_;  // from the daemons' member list
  std::map<std::string, Conn> conns_;
  std::unique_ptr<RegionView> local_;
  uint64_t local_base_ = 0;
  std::string hello_reply_;
  bool hello_answered_ = false;

  std::shared_ptr<uint8_t> buffer_;  // the request buffer, shared with the batches handed out
  uint64_t capacity_ = 0;
  std::unique_ptr<UcxMemory> buffer_reg_;
  ItemHeader* headers_ = nullptr;  // one per read in flight
  std::unique_ptr<UcxMemory> headers_reg_;

  size_t cursor_ = 0;
  Batch batch_;
  Stats stats_;
};

const char* SourceName(Loader::Source s);

}  // namespace aggswitch::cache
