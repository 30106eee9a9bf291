#include "cache/records.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "cache/etcd_records.h"
#include "cache/file_records.h"

namespace aggswitch::cache {

using nlohmann::json;

std::string ToJson(const ItemRecord& r) {
  json holders = json::array();
  for (const Holder& h : r.holders) {
    holders.push_back({{"node", h.node}, {"addr", h.addr}, {"rkey", h.rkey_id}});
  }
  // owner and replicas are holders[0] and the rest, spelt out for readers of etcdctl.
  return json{{"item", r.item},
              {"length", r.length},
              {"version", r.version},
              {"crc32c", r.crc32c},
              {"owner", r.holders.empty() ? "" : r.holders[0].node},
              {"holders", holders}}
      .dump();
}

std::string ToJson(const NodeRecord& r) {
  return json{{"node", r.node},           {"ucx_listen", r.ucx_listen},
              {"region_path", r.region_path}, {"region_base", r.region_base},
              {"region_size", r.region_size}, {"rkey", r.rkey_id},
              {"pid", r.pid}, {"members", r.members}}
      .dump();
}

common::Result<ItemRecord> ParseItemRecord(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return common::InvalidArgument("an item record that is not a JSON object");
  ItemRecord r;
  try {
    r.item = j.at("item").get<std::string>();
    r.length = j.at("length").get<uint64_t>();
    r.version = j.at("version").get<uint64_t>();
    r.crc32c = j.at("crc32c").get<uint32_t>();
    for (const json& h : j.at("holders")) {
      r.holders.push_back(Holder{h.at("node").get<std::string>(), h.at("addr").get<uint64_t>(),
                                 h.at("rkey").get<uint32_t>()});
    }
  } catch (const json::exception& e) {
    return common::InvalidArgument(std::string("a malformed item record: ") + e.what());
  }
  return r;
}

common::Result<NodeRecord> ParseNodeRecord(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return common::InvalidArgument("a node record that is not a JSON object");
  NodeRecord r;
  try {
    r.node = j.at("node").get<std::string>();
    r.ucx_listen = j.at("ucx_listen").get<std::string>();
    r.region_path = j.at("region_path").get<std::string>();
    r.region_base = j.at("region_base").get<uint64_t>();
    r.region_size = j.at("region_size").get<uint64_t>();
    r.rkey_id = j.at("rkey").get<uint32_t>();
    r.pid = j.value("pid", uint64_t{0});
    r.members = j.value("members", std::vector<std::string>{});
  } catch (const json::exception& e) {
    return common::InvalidArgument(std::string("a malformed node record: ") + e.what());
  }
  return r;
}

ItemRecord MergeHolder(std::optional<ItemRecord> current, const ItemRecord& fresh,
                       const Holder& holder, const std::function<size_t(const std::string&)>& rank) {
  ItemRecord r = fresh;
  r.holders.clear();
  if (current && current->version == fresh.version && current->length == fresh.length &&
      current->crc32c == fresh.crc32c) {
    for (const Holder& h : current->holders) {
      if (h.node != holder.node) r.holders.push_back(h);
    }
  }
  r.holders.push_back(holder);
  std::stable_sort(r.holders.begin(), r.holders.end(),
                   [&rank](const Holder& a, const Holder& b) { return rank(a.node) < rank(b.node); });
  return r;
}

std::vector<std::string> ManifestPieces(const std::string& manifest) {
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start < manifest.size()) {
    size_t end = std::min(manifest.size(), start + Records::kManifestPiece);
    if (end < manifest.size()) {
      const size_t nl = manifest.rfind('\n', end - 1);
      if (nl != std::string::npos && nl >= start) end = nl + 1;
    }
    pieces.push_back(manifest.substr(start, end - start));
    start = end;
  }
  return pieces;
}

std::optional<ItemRecord> WithoutHolder(ItemRecord current, const std::string& node) {
  std::erase_if(current.holders, [&node](const Holder& h) { return h.node == node; });
  if (current.holders.empty()) return std::nullopt;
  return current;
}

common::Result<std::unique_ptr<Records>> OpenRecords(const std::string& url,
                                                     const std::string& prefix) {
  if (url.rfind("etcd://", 0) == 0) return EtcdRecords::Open(url.substr(7), prefix);
  if (url.rfind("file:", 0) == 0) return FileRecords::Open(url.substr(5));
  return common::InvalidArgument("records " + url +
                                 ": expected etcd://host:port[,host:port...] or file:/path");
}

}  // namespace aggswitch::cache
