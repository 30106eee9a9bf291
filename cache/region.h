// The data cache's memory on one node: one region, registered for RDMA by
// the daemon, holding items back to back, each after a 64-byte header.
//
//   offset o      o+64                          o+64+round_up(length, 64)
//   [ ItemHeader | item bytes ................ | next header ...
//
// The region is a file in /dev/shm (or on hugetlbfs with `hugepages`), so
// that a loader on the same node maps it read-only and copies an item
// without the network (the local path); remote loaders read it with
// one-sided gets.
//
// Space is a FIFO log: an item goes at the head; when the head meets the
// oldest item, the oldest items are evicted until the new one fits. The
// log never holds more than `size` bytes, whatever the items' sizes, and
// evicts in fill order (documented in docs/cache.md).
//
// Readers never lock: a header is a seqlock over its bytes. The writer
// clears `state` before it writes or frees an item and sets it to kValid
// (release) after the bytes are whole. A reader copies the bytes, then
// reads the header: if it is kValid and names the same key hash, version
// and length it expected, the copy is whole; otherwise it must read again
// elsewhere (the loader counts it as a stale read).
//
//   ASSIGN_OR_RETURN(auto region, Region::Create("/dev/shm/aggswitch-cache.n1", 512 << 20, false));
//   std::vector<EvictedItem> evicted;
//   ASSIGN_OR_RETURN(Region::Reservation r, region->Reserve("a/b.bin", 4096, &evicted));
//   memcpy(r.data, bytes, 4096);
//   region->Commit(r, version, Crc32c(bytes, 4096));
//
// Thread safety: one writer thread (the daemon's fill thread) calls
// Reserve/Commit/Abandon/Evict/Find; the memory may be read by anyone at
// any time under the seqlock rule. Stats() on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace aggswitch::cache {

// The header before each item; its layout is part of the protocol (remote
// loaders read it raw, little-endian).
struct alignas(64) ItemHeader {
  static constexpr uint64_t kValid = 0x31304d4554494741ULL;  // "AGITEM01"
  std::atomic<uint64_t> state;  // kValid while the bytes are whole, else 0
  uint64_t key_hash;            // ItemHash(item name)
  uint64_t version;             // the record's version
  uint64_t length;              // bytes of item data after the header
  uint32_t crc32c;              // Crc32c of those bytes
  uint32_t reserved0;
  uint64_t reserved[3];
};
static_assert(sizeof(ItemHeader) == 64);

// Whether a header read after the bytes says they are the item expected.
bool HeaderConfirms(const ItemHeader& h, uint64_t key_hash, uint64_t version, uint64_t length);

struct EvictedItem {
  std::string item;
  uint64_t length;
};

class Region {
 public:
  struct Reservation {
    std::string item;
    uint64_t offset = 0;  // of the header
    uint64_t length = 0;
    uint8_t* data = nullptr;  // where the item's bytes go
  };
  struct Stats {
    uint64_t size = 0;
    uint64_t used = 0;  // header and padding included
    uint64_t items = 0;
    uint64_t evictions = 0;
  };

  // Creates (or replaces) the file at `path`, `size` bytes rounded up to
  // 2 MiB, and maps it read-write. `hugepages`: `path` is on hugetlbfs.
  static common::Result<std::unique_ptr<Region>> Create(const std::string& path, uint64_t size,
                                                        bool hugepages);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  // Room for `length` bytes of `item`, whose header stays cleared until
  // Commit. Items evicted to make room are appended to `evicted`, already
  // invalid. An item that is cached already is evicted first (a refill).
  // ResourceExhausted when it could never fit.
  common::Result<Reservation> Reserve(std::string_view item, uint64_t length,
                                      std::vector<EvictedItem>* evicted);
  // Publishes a reservation's bytes.
  void Commit(const Reservation& r, uint64_t version, uint32_t crc32c);
  // Gives back the newest reservation (a fill that failed).
  void Abandon(const Reservation& r);
  // Drops `item` if cached. Returns whether it was.
  bool Evict(std::string_view item);
  // The header offset of a committed item, or -1.
  int64_t Find(std::string_view item) const;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  Stats stats() const;
  const ItemHeader* HeaderAt(uint64_t offset) const {
    return reinterpret_cast<const ItemHeader*>(base_ + offset);
  }

  // Space an item of `length` bytes takes, header included.
  static uint64_t Footprint(uint64_t length) { return 64 + ((length + 63) & ~uint64_t{63}); }

 private:
  struct Entry {
    std::string item;
    uint64_t offset;
    uint64_t footprint;
    uint64_t length;
  };
  Region(std::string path, uint8_t* base, uint64_t size) : path_(std::move(path)), base_(base), size_(size) {}
  ItemHeader* Header(uint64_t offset) { return reinterpret_cast<ItemHeader*>(base_ + offset); }
  // Where `need` contiguous bytes start now, or -1.
  int64_t FreeAt(uint64_t need) const;
  void EvictOldest(std::vector<EvictedItem>* evicted);
  void Forget(const Entry& e);

  std::string path_;
  uint8_t* base_;
  uint64_t size_;
  uint64_t head_ = 0;  // where the next item goes
  std::deque<Entry> log_;  // oldest first
  std::unordered_map<std::string, uint64_t> index_;  // item -> header offset
  std::atomic<uint64_t> used_{0};
  std::atomic<uint64_t> items_{0};
  std::atomic<uint64_t> evictions_{0};
};

// A read-only mapping of another process's region (a loader's local path).
class RegionView {
 public:
  static common::Result<std::unique_ptr<RegionView>> Open(const std::string& path);
  ~RegionView();
  RegionView(const RegionView&) = delete;
  RegionView& operator=(const RegionView&) = delete;
  const uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  RegionView(const uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  const uint8_t* base_;
  uint64_t size_;
};

}  // namespace aggswitch::cache
