// Where the data cache keeps an item: consistent hashing over the cache's
// nodes, with a replication factor.
//
// Each node owns kPointsPerNode points on a 64-bit ring (SipHash of
// "node#i"). An item hashes to a point; its holders are the first
// `replicas` distinct nodes met walking the ring clockwise from there. The
// first is the item's owner, the others its replicas, in that order. Adding
// or removing one node of N moves about 1/N of the items, and only those that
// the node gains or loses.
//
//   Placement ring({"n1", "n2", "n3"}, /*replicas=*/2);
//   std::vector<std::string> holders = ring.Holders("train/000123.bin");   // {"n2", "n3"}
//   size_t rank = ring.Rank("train/000123.bin", "n3");                      // 1; npos if none
//
// Every daemon and loader computes the same answer from the same node list,
// so no one has to ask where an item should be.
//
// Thread safety: immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aggswitch::cache {

class Placement {
 public:
  static constexpr int kPointsPerNode = 128;

  // `nodes` are distinct names; `replicas` is capped at the node count.
  Placement(std::vector<std::string> nodes, size_t replicas);

  // The nodes that hold `item`, owner first; min(replicas, nodes) of them.
  std::vector<std::string> Holders(std::string_view item) const;
  // `node`'s place among the item's holders, or npos when it holds none.
  size_t Rank(std::string_view item, std::string_view node) const;

  const std::vector<std::string>& nodes() const { return nodes_; }
  size_t replicas() const { return replicas_; }

  static constexpr size_t npos = static_cast<size_t>(-1);

 private:
  std::vector<std::string> nodes_;
  size_t replicas_;
  std::vector<std::pair<uint64_t, uint32_t>> ring_;  // (point, node index), sorted
};

// The 64-bit hash the cache keys items by (ring points, region headers).
uint64_t ItemHash(std::string_view item);

}  // namespace aggswitch::cache
