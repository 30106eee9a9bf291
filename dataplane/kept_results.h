// The results a root without a TAN let go before every member had them.
//
// A root keeps a complete result until every member has acknowledged it,
// except when two jobs hold each other's oldest chunks back at a root
// without spare slots: one result then gives way to the other job's oldest
// chunk (docs/aggregation.md, "Release"). A job with a TAN leaves it there
// (TreeStage::LeaveResult); a job without one had no other copy, and a
// member whose result was lost on the way found the chunk gone: its resend
// began the chunk anew, waiting for members that had all moved past it. So
// the worker keeps such a result here, a RESULT's header fields and its
// payload, in a fixed ring of entries: the newest `capacity` ones, under
// the run label the job had. A member's datagram or question about a chunk
// no slot holds is answered from here, under the same label only (a new
// run of the job never gets an old run's sum).
//
//   KeptResults kept(16, max_payload);          // [control], allocates
//   kept.Keep(key, label, fields, payload, n);  // [owner lcore]
//   if (const KeptResults::Entry* e = kept.Find(key, label)) answer with e
//
// Thread safety: constructed by the control side before the worker starts;
// every other method [owner lcore]. No allocation after construction; Find
// is O(capacity).
#pragma once

#include <cstdint>
#include <memory>

#include "aggregator/relocation_map.h"
#include "aggregator/wire.h"

namespace aggswitch::dataplane {

class KeptResults {
 public:
  struct Entry {
    aggregator::ChunkKey key;
    uint32_t label = 0;            // the job's run label when it was kept
    aggregator::AggFields fields;  // a RESULT's, without the key
    const uint8_t* payload = nullptr;
    uint32_t len = 0;
    bool used = false;
  };

  // Room for `capacity` results of at most `max_payload` bytes each.
  KeptResults(uint32_t capacity, uint32_t max_payload);

  // Keeps a result, in place of an older copy of the same chunk, else of
  // the oldest entry. False (nothing kept) when the payload is larger than
  // max_payload or there is no room at all.
  bool Keep(const aggregator::ChunkKey& key, uint32_t label, const aggregator::AggFields& fields,
            const uint8_t* payload, uint32_t len);
  // The result of chunk `key` kept under run `label`, or null.
  const Entry* Find(const aggregator::ChunkKey& key, uint32_t label) const;
  bool empty() const { return used_ == 0; }
  uint32_t size() const { return used_; }
  uint32_t capacity() const { return capacity_; }

 private:
  uint32_t capacity_;
  uint32_t max_payload_;
  uint32_t next_ = 0;  // the entry the next new chunk takes
  uint32_t used_ = 0;
  std::unique_ptr<Entry[]> entries_;
  std::unique_ptr<uint8_t[]> payloads_;  // capacity_ x max_payload_
};

}  // namespace aggswitch::dataplane
