// Records in one JSON file, for a cache of a single node (or nodes sharing
// a filesystem): the same interface as EtcdRecords, without a server.
//
//   {"items": {"<dataset>": {"<item>": <ItemRecord>}}, "nodes": {"<node>": <NodeRecord>},
//    "manifests": {"<dataset>": "<name> <bytes>\n..."}}
//
// Every call takes an exclusive flock on "<path>.lock", reads the file,
// and for a change writes a new file and renames it over the old one, so a
// reader never sees half a file. Node records do not expire (there is no
// lease): DropNode removes one.
//
// Thread safety: calls are serialised by the lock file; any thread, any process.
#pragma once

#include <memory>
#include <string>

#include "cache/records.h"

namespace aggswitch::cache {

class FileRecords final : public Records {
 public:
  static common::Result<std::unique_ptr<Records>> Open(const std::string& path);

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
  common::Status KeepAlive() override { return common::Status::Ok(); }
  common::Status DropNode(const std::string& node) override;
  common::Result<std::vector<NodeRecord>> Nodes() override;
  std::string Describe() const override { return "file " + path_; }

 private:
  explicit FileRecords(std::string path) : path_(std::move(path)) {}
  // Runs `change` on the file's JSON text under the lock; writes back what it
  // returns when that differs. `change` gets "" for a missing file.
  common::Status Update(const std::function<common::Result<std::string>(const std::string&)>& change);
  common::Result<std::string> Read();

  std::string path_;
};

}  // namespace aggswitch::cache
