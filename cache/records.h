// The data cache's records: where each cached item lives, and which cache
// nodes are up. Two implementations share this interface: EtcdRecords (a
// cluster, through etcd's v3 JSON gateway) and FileRecords (one node, a JSON
// file).
//
// Keys, under a prefix (default "/aggswitch/cache"):
//   <prefix>/manifests/<dataset>/<n> the dataset's item list ("<name> <bytes>"
//                                    lines, as the store's MANIFEST), in
//                                    pieces of at most kManifestPiece bytes,
//                                    so loaders need not ask the store
//   <prefix>/items/<dataset>/<item>  one ItemRecord per item (JSON)
//   <prefix>/nodes/<node>            one NodeRecord per live daemon (JSON),
//                                    on a lease: it vanishes when the daemon
//                                    stops renewing it
//
// An ItemRecord names the item's holders in placement order: holders[0] is
// the owner, the rest replicas. Each holder carries what a one-sided read
// needs: the node, the address of the item's bytes in that node's region and
// the id of the region's remote key (the key itself is handed out by the
// node's daemon, to allowed readers only). Daemons add and remove themselves
// with compare-and-swap, so concurrent fills of replicas merge.
//
//   ASSIGN_OR_RETURN(auto records, OpenRecords("etcd://10.0.0.100:2379", "/aggswitch/cache"));
//   RETURN_IF_ERROR(records->AddHolder("imagenet", rec, holder, order));
//   ASSIGN_OR_RETURN(std::optional<ItemRecord> r, records->Get("imagenet", "train/0001.jpg"));
//
// A record that is there but does not parse (written by something else, or
// by hand) is skipped by List and Nodes, logged and counted in malformed():
// one bad record costs its item a trip to the store, not the whole dataset.
//
// Thread safety: an implementation serialises its own calls; any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace aggswitch::cache {

struct Holder {
  std::string node;
  uint64_t addr = 0;     // the item's bytes in the node's region (its virtual address)
  uint32_t rkey_id = 0;  // which registration of the region; a new one on each daemon start
  friend bool operator==(const Holder&, const Holder&) = default;
};

struct ItemRecord {
  std::string item;
  uint64_t length = 0;
  uint64_t version = 0;  // of the source object (ExternalStore::Object::version)
  uint32_t crc32c = 0;
  std::vector<Holder> holders;  // owner first, then replicas
};

struct NodeRecord {
  std::string node;
  std::string ucx_listen;   // "a.b.c.d:port" of the daemon's UCX listener
  std::string region_path;  // the region's file, for loaders on the same node
  uint64_t region_base = 0; // the region's virtual address in the daemon
  uint64_t region_size = 0;
  uint32_t rkey_id = 0;
  uint64_t pid = 0;
  std::vector<std::string> members;  // the cache's nodes (the daemon's placement ring)
};

std::string ToJson(const ItemRecord& r);
std::string ToJson(const NodeRecord& r);
common::Result<ItemRecord> ParseItemRecord(const std::string& json);
common::Result<NodeRecord> ParseNodeRecord(const std::string& json);

class Records {
 public:
  static constexpr size_t kManifestPiece = 512 * 1024;  // under etcd's 1.5 MiB request limit

  virtual ~Records() = default;

  // Publishes the dataset's item list (replacing the one there).
  virtual common::Status PutManifest(const std::string& dataset, const std::string& manifest) = 0;
  // The item list as published; "" when none is.
  virtual common::Result<std::string> Manifest(const std::string& dataset) = 0;

  // The record of `item`, or nullopt when none.
  virtual common::Result<std::optional<ItemRecord>> Get(const std::string& dataset,
                                                        const std::string& item) = 0;
  // Every item record of `dataset`.
  virtual common::Result<std::vector<ItemRecord>> List(const std::string& dataset) = 0;
  // Puts `holder` into the item's record (replacing an entry of the same
  // node), creating the record from `fresh` if there is none or if its
  // version differs (the source changed: older holders are dropped). Holders
  // are kept ordered by `rank` (lower first).
  virtual common::Status AddHolder(const std::string& dataset, const ItemRecord& fresh,
                                   const Holder& holder,
                                   const std::function<size_t(const std::string&)>& rank) = 0;
  // Takes `node` out of the item's record; deletes the record when no holder is left.
  virtual common::Status RemoveHolder(const std::string& dataset, const std::string& item,
                                      const std::string& node) = 0;
  // Announces a node for ttl_s seconds; the caller renews it with KeepAlive.
  virtual common::Status PutNode(const NodeRecord& node, int ttl_s) = 0;
  virtual common::Status KeepAlive() = 0;
  // Removes this process's node record (a clean stop).
  virtual common::Status DropNode(const std::string& node) = 0;
  virtual common::Result<std::vector<NodeRecord>> Nodes() = 0;
  // "etcd http://..." or "file /path": for logs.
  virtual std::string Describe() const = 0;

  // Records skipped by List and Nodes because they did not parse. [any]
  uint64_t malformed() const { return malformed_.load(std::memory_order_relaxed); }

 protected:
  // Logs the skipped record at `key` and counts it.
  void CountMalformed(const std::string& key, const common::Status& why);

 private:
  std::atomic<uint64_t> malformed_{0};
};

// "etcd://host:port[,host:port...]" or "file:/path/records.json".
common::Result<std::unique_ptr<Records>> OpenRecords(const std::string& url,
                                                     const std::string& prefix);

// `manifest` cut into pieces of at most kManifestPiece bytes at line ends.
std::vector<std::string> ManifestPieces(const std::string& manifest);

// The merge AddHolder performs, on a record that may be absent: exposed for
// both implementations and their tests.
ItemRecord MergeHolder(std::optional<ItemRecord> current, const ItemRecord& fresh,
                       const Holder& holder, const std::function<size_t(const std::string&)>& rank);
// The record without `node`; nullopt when no holder is left.
std::optional<ItemRecord> WithoutHolder(ItemRecord current, const std::string& node);

}  // namespace aggswitch::cache
