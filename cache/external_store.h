// The external store the data cache fills from, and that loaders fall back
// to: a directory (local, NFS, any mounted filesystem) or an HTTP(S) URL
// prefix, read through libcurl.
//
// A dataset is the list of objects named in "<root>/MANIFEST", one
// "<name> <bytes>" per line ('#' starts a comment). A directory without a
// MANIFEST lists its regular files instead, recursively, in name order.
// Names are relative paths without "..".
//
// Each read reports the object's version: for a file its mtime in
// nanoseconds, for HTTP a hash of its ETag (or Last-Modified, or, when the
// server sends neither, of its bytes). The records carry the version a
// daemon filled, and a refill of another version replaces the record; the
// cache does not watch the store, so an object changed there is served as
// cached until its daemons fill again (docs/cache.md).
//
//   ASSIGN_OR_RETURN(auto store, ExternalStore::Open("http://10.0.9.1:8000/imagenet"));
//   ASSIGN_OR_RETURN(auto objects, store->List());
//   ASSIGN_OR_RETURN(ExternalStore::Object o, store->Read(objects[0].name, buf, cap));
//
// Thread safety: List and Read may be called from several threads at once
// (each read has its own connection state). Requests and bytes are counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace aggswitch::cache {

class ExternalStore {
 public:
  struct Entry {
    std::string name;
    uint64_t length = 0;
  };
  struct Object {
    uint64_t length = 0;
    uint64_t version = 0;
  };

  // "/path", "file:/path", "http://host[:port]/prefix" or "https://...".
  static common::Result<std::unique_ptr<ExternalStore>> Open(const std::string& url);
  virtual ~ExternalStore() = default;

  virtual common::Result<std::vector<Entry>> List() = 0;
  // Reads the whole of `name` into `dest` (capacity bytes). OutOfRange when it
  // is larger; NotFound when the store has no such object.
  virtual common::Result<Object> Read(const std::string& name, void* dest, uint64_t capacity) = 0;
  virtual std::string Describe() const = 0;

  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

  static constexpr size_t kMaxNameLength = 4096;
  // Whether `name` is a safe relative object name (no "..", no leading '/',
  // at most kMaxNameLength bytes).
  static bool ValidName(const std::string& name);
  // MANIFEST text for `entries`.
  static std::string FormatManifest(const std::vector<Entry>& entries);
  // Parses MANIFEST text; the error names the line.
  static common::Result<std::vector<Entry>> ParseManifest(const std::string& text);

 protected:
  void Count(uint64_t bytes) {
    requests_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace aggswitch::cache
