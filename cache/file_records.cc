#include "cache/file_records.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

namespace aggswitch::cache {
namespace {

using nlohmann::json;

class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the flock
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

// The file's JSON with the shape every call expects: objects for "items",
// each dataset under it, "nodes" and "manifests" (anything else in their
// place, by hand or by another program, is dropped).
json ParseOrEmpty(const std::string& text) {
  json j = text.empty() ? json::object() : json::parse(text, nullptr, false);
  if (!j.is_object()) j = json::object();
  for (const char* section : {"items", "nodes", "manifests"}) {
    if (!j.contains(section) || !j[section].is_object()) j[section] = json::object();
  }
  for (auto it = j["items"].begin(); it != j["items"].end();) {
    it = it->is_object() ? std::next(it) : j["items"].erase(it);
  }
  return j;
}

}  // namespace

common::Result<std::unique_ptr<Records>> FileRecords::Open(const std::string& path) {
  if (path.empty()) return common::InvalidArgument("file: names no path");
  std::unique_ptr<FileRecords> r(new FileRecords(path));
  RETURN_IF_ERROR(r->Update([](const std::string& text) -> common::Result<std::string> {
    return ParseOrEmpty(text).dump();
  }));
  return std::unique_ptr<Records>(std::move(r));
}

common::Result<std::string> FileRecords::Read() {
  std::ifstream in(path_);
  if (!in) return std::string();
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

common::Status FileRecords::Update(
    const std::function<common::Result<std::string>(const std::string&)>& change) {
  FileLock lock(path_ + ".lock");
  if (!lock.ok()) {
    return common::Unavailable("cannot lock " + path_ + ".lock: " + std::strerror(errno));
  }
  ASSIGN_OR_RETURN(std::string before, Read());
  common::Result<std::string> changed = std::string();
  try {
    changed = change(before);
  } catch (const json::exception& e) {  // the module's edge: nlohmann throws on misuse
    return common::Internal("records file " + path_ + ": " + e.what());
  }
  ASSIGN_OR_RETURN(std::string after, std::move(changed));
  if (after == before) return common::Status::Ok();
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << after;
    if (!out.flush()) return common::Unavailable("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return common::Unavailable("cannot rename " + tmp + ": " + std::strerror(errno));
  }
  return common::Status::Ok();
}

common::Status FileRecords::PutManifest(const std::string& dataset, const std::string& manifest) {
  return Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    j["manifests"][dataset] = manifest;
    return j.dump();
  });
}

common::Result<std::string> FileRecords::Manifest(const std::string& dataset) {
  std::string out;
  RETURN_IF_ERROR(Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    if (j.contains("manifests") && j["manifests"].contains(dataset) && j["manifests"][dataset].is_string()) {
      out = j["manifests"][dataset].get<std::string>();
    }
    return text;
  }));
  return out;
}

common::Result<std::optional<ItemRecord>> FileRecords::Get(const std::string& dataset,
                                                           const std::string& item) {
  std::optional<ItemRecord> out;
  RETURN_IF_ERROR(Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    const json& items = j["items"];
    if (items.contains(dataset) && items[dataset].contains(item)) {
      ASSIGN_OR_RETURN(ItemRecord r, ParseItemRecord(items[dataset][item].dump()));
      out = std::move(r);
    }
    return text;
  }));
  return out;
}

common::Result<std::vector<ItemRecord>> FileRecords::List(const std::string& dataset) {
  std::vector<ItemRecord> out;
  RETURN_IF_ERROR(Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    if (j["items"].contains(dataset)) {
      for (const auto& [name, rec] : j["items"][dataset].items()) {
        auto r = ParseItemRecord(rec.dump());
        if (r.ok()) {
          out.push_back(std::move(r).value());
        } else {
          CountMalformed("items/" + dataset + "/" + name, r.status());
        }
      }
    }
    return text;
  }));
  return out;
}

common::Status FileRecords::AddHolder(const std::string& dataset, const ItemRecord& fresh,
                                      const Holder& holder,
                                      const std::function<size_t(const std::string&)>& rank) {
  return Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    json& items = j["items"][dataset];
    std::optional<ItemRecord> current;
    if (items.contains(fresh.item)) {
      auto parsed = ParseItemRecord(items[fresh.item].dump());
      if (parsed.ok()) current = std::move(parsed).value();
    }
    items[fresh.item] = json::parse(ToJson(MergeHolder(current, fresh, holder, rank)));
    return j.dump();
  });
}

common::Status FileRecords::RemoveHolder(const std::string& dataset, const std::string& item,
                                         const std::string& node) {
  return Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    json& items = j["items"];
    if (!items.contains(dataset) || !items[dataset].contains(item)) return text;
    auto parsed = ParseItemRecord(items[dataset][item].dump());
    std::optional<ItemRecord> rest;
    if (parsed.ok()) rest = WithoutHolder(std::move(parsed).value(), node);
    if (rest) {
      items[dataset][item] = json::parse(ToJson(*rest));
    } else {
      items[dataset].erase(item);
    }
    return j.dump();
  });
}

common::Status FileRecords::PutNode(const NodeRecord& node, int /*ttl_s*/) {
  return Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    j["nodes"][node.node] = json::parse(ToJson(node));
    return j.dump();
  });
}

common::Status FileRecords::DropNode(const std::string& node) {
  return Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    j["nodes"].erase(node);
    return j.dump();
  });
}

common::Result<std::vector<NodeRecord>> FileRecords::Nodes() {
  std::vector<NodeRecord> out;
  RETURN_IF_ERROR(Update([&](const std::string& text) -> common::Result<std::string> {
    json j = ParseOrEmpty(text);
    for (const auto& [name, rec] : j["nodes"].items()) {
      auto r = ParseNodeRecord(rec.dump());
      if (r.ok()) {
        out.push_back(std::move(r).value());
      } else {
        CountMalformed("nodes/" + name, r.status());
      }
    }
    return text;
  }));
  return out;
}

}  // namespace aggswitch::cache
