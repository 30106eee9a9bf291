#include "cache/records.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cache/etcd_records.h"
#include "cache/file_records.h"
#include "common/log.h"

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

namespace {

// An unsigned integer field that fits `max`: a JSON number read as a double
// (1e20, -1, 2.5) is refused, not converted.
uint64_t Unsigned(const json& j, const char* key, uint64_t max = UINT64_MAX) {
  const json& v = j.at(key);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    throw std::invalid_argument(std::string("\"") + key + "\": expected an unsigned integer");
  }
  const uint64_t n = v.get<uint64_t>();
  if (n > max) throw std::invalid_argument(std::string("\"") + key + "\": too large");
  return n;
}

std::string String(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_string()) throw std::invalid_argument(std::string("\"") + key + "\": expected a string");
  return v.get<std::string>();
}

}  // namespace

common::Result<ItemRecord> ParseItemRecord(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return common::InvalidArgument("an item record that is not a JSON object");
  ItemRecord r;
  try {
    r.item = String(j, "item");
    r.length = Unsigned(j, "length");
    r.version = Unsigned(j, "version");
    r.crc32c = static_cast<uint32_t>(Unsigned(j, "crc32c", UINT32_MAX));
    const json& holders = j.at("holders");
    if (!holders.is_array()) throw std::invalid_argument("\"holders\": expected a list");
    for (const json& h : holders) {
      if (!h.is_object()) throw std::invalid_argument("\"holders\": expected objects");
      r.holders.push_back(Holder{String(h, "node"), Unsigned(h, "addr"),
                                 static_cast<uint32_t>(Unsigned(h, "rkey", UINT32_MAX))});
    }
  } catch (const std::exception& e) {
    return common::InvalidArgument(std::string("a malformed item record: ") + e.what());
  }
  return r;
}

common::Result<NodeRecord> ParseNodeRecord(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return common::InvalidArgument("a node record that is not a JSON object");
  NodeRecord r;
  try {
    r.node = String(j, "node");
    r.ucx_listen = String(j, "ucx_listen");
    r.region_path = String(j, "region_path");
    r.region_base = Unsigned(j, "region_base");
    r.region_size = Unsigned(j, "region_size");
    r.rkey_id = static_cast<uint32_t>(Unsigned(j, "rkey", UINT32_MAX));
    r.pid = j.contains("pid") ? Unsigned(j, "pid") : 0;
    if (j.contains("members")) {
      const json& members = j.at("members");
      if (!members.is_array()) throw std::invalid_argument("\"members\": expected a list");
      for (const json& m : members) {
        if (!m.is_string()) throw std::invalid_argument("\"members\": expected names");
        r.members.push_back(m.get<std::string>());
      }
    }
  } catch (const std::exception& e) {
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

void Records::CountMalformed(const std::string& key, const common::Status& why) {
  malformed_.fetch_add(1, std::memory_order_relaxed);
  AGG_LOG(kWarning, "cache records: skipped %s in %s: %s", key.c_str(), Describe().c_str(),
          why.message().c_str());
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
