// Records in etcd, through its v3 JSON gateway (POST /v3/kv/range, /v3/kv/txn,
// /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive) over libcurl.
// Keys and values are base64 in the gateway's JSON, revisions decimal strings.
//
// AddHolder and RemoveHolder are read-modify-write loops: read the key and
// its mod_revision, merge, and write in a transaction that compares the
// revision (a create compares create_revision 0). A lost race reads again,
// at most kCasAttempts times.
//
// Several endpoints may be given ("h1:2379,h2:2379"): a call that cannot
// reach one tries the next, and stays with the one that answered.
//
// Thread safety: calls are serialised by a mutex; any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/records.h"

typedef void CURL;

namespace aggswitch::cache {

class EtcdRecords final : public Records {
 public:
  static constexpr int kCasAttempts = 32;
  static constexpr long kTimeoutMs = 3000;

  // `endpoints`: "host:port[,host:port...]". Checks that etcd answers.
  static common::Result<std::unique_ptr<Records>> Open(const std::string& endpoints,
                                                       const std::string& prefix);
  ~EtcdRecords() override;

  common::Status PutManifest(const std::string& dataset, const std::string& manifest) override;
  common::Result<std::string> Manifest(const std::string& dataset) override;
  common::Result<std::optional<ItemRecord>> Get(const std::string& dataset,
                                                const std::string& item) override;
  common::Result<std::vector<ItemRecord>> List(const std::string& dataset) override;
  common::Status AddHolder(const std::string& dataset, const ItemRecord& fresh, const Holder& holder,
                           const std::function<size_t(const std::string&)>& rank) override;
  common::Status RemoveHolder(const std::string& dataset, const std::string& item,
                              const std::string& node) override;
  common::Status PutNode(const NodeRecord& node, int ttl_s) override;
  common::Status KeepAlive() override;
  common::Status DropNode(const std::string& node) override;
  common::Result<std::vector<NodeRecord>> Nodes() override;
  std::string Describe() const override;

 private:
  struct Kv {
    std::string key, value;
    int64_t mod_revision = 0;
  };
  EtcdRecords(std::vector<std::string> endpoints, std::string prefix);
  // POSTs `body` to `path` on the current endpoint (then the others); the
  // reply's JSON text.
  common::Result<std::string> Post(const std::string& path, const std::string& body);
  common::Result<std::vector<Kv>> Range(const std::string& key, bool prefix);
  // Writes `value` at `key` (or deletes it when value is empty) if its
  // mod_revision is still `revision` (0: if it does not exist). Whether it did.
  common::Result<bool> CompareAndPut(const std::string& key, int64_t revision,
                                     const std::string& value, int64_t lease);
  std::string ItemKey(const std::string& dataset, const std::string& item) const;

  std::mutex mu_;
  CURL* curl_ = nullptr;
  std::vector<std::string> endpoints_;
  size_t current_ = 0;
  std::string prefix_;
  int64_t lease_ = 0;
};

}  // namespace aggswitch::cache
