// Every ring of one worker lcore, and the exchanges through which the control
// side reads its state: what the worker and the rest of the process share.
// The Dataplane creates one per worker and hands each Worker its own.
//
//   worker -> control   learn (LearnRequest), upcall (FrameRef), tan_up (mbuf*),
//                       neighbors (NeighborReport), samples_full (OffsetSample*),
//                       int_records (IntHopRecord)
//   control -> worker   reinject (FrameRef), tan_down (mbuf*), control_tx
//                       (FrameRef, worker 0 only), samples_free (OffsetSample*)
//   worker -> worker    handoff: contributions for this worker's slots (FrameRef),
//                       one producer per worker, this worker consumes
//   worker -> control   escalate: contributions whose slot holds another chunk
//                       (Escalation)
//   control -> worker   relocate: where those chunks moved, and the jobs that
//                       moved (Relocation)
//
// A ring the config does not need is null: no aggregation, no hand-off with
// one worker, no upcall/reinject without in-band registration. Every ring
// but the hand-off has one producer and one consumer.
//
// Thread safety: Create and the destructor [control, workers stopped]; each
// ring as its direction above says.
#pragma once

#include <rte_mempool.h>
#include <rte_ring.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "dataplane/worker_messages.h"

namespace aggswitch::dataplane {

struct MempoolDeleter {
  void operator()(rte_mempool* mp) const { rte_mempool_free(mp); }
};
struct RingDeleter {
  void operator()(rte_ring* r) const { rte_ring_free(r); }
};
using MempoolPtr = std::unique_ptr<rte_mempool, MempoolDeleter>;
using RingPtr = std::unique_ptr<rte_ring, RingDeleter>;

struct WorkerChannels {
  struct Options {
    std::string suffix;              // makes the ring names unique: "<instance>_<worker>"
    bool aggregation = false;        // the aggregation path's rings (escalate, relocate, ...)
    bool handoff = false;            // more than one worker aggregates
    bool in_band = false;            // upcall and reinject
    bool control_tx = false;         // worker 0
    bool telemetry = false;          // int_records
    uint32_t max_fan_in = 0;         // offsets per OffsetSample
    uint32_t slot_dump_capacity = 0;
    uint32_t bypass_dump_capacity = 0;
  };

  // Ring sizes (elements).
  static constexpr unsigned kLearnRingSize = 4096;
  // Contributions for a worker's slots wait here while it is descheduled or
  // busy: the members' windows toward its slots, and the queries and resends
  // with which they recover what looks lost meanwhile (about three datagrams
  // per chunk before the timeouts back off), fit with room to spare.
  static constexpr unsigned kHandoffRingSize = 4096;
  // In-band registrations waiting for the control thread, which drains them
  // every millisecond: a job's first datagrams from all its members fit many
  // times over.
  static constexpr unsigned kUpcallRingSize = 1024;
  // Collided contributions waiting for the control thread, which drains them
  // every millisecond, and its answers.
  static constexpr unsigned kEscalateRingSize = 1024;
  // To and from this switch's own TAN (rare: only timed-out chunks), ARP
  // replies and requests.
  static constexpr unsigned kTanRingSize = 1024;
  static constexpr unsigned kNeighborRingSize = 256;
  // Hop records of watched datagrams, drained by the control thread every
  // millisecond: 4 million a second per worker before any is lost.
  static constexpr unsigned kIntRecordRingSize = 4096;
  // Arrival-offset samples per worker, and their rings, larger than the pool
  // so that returning a sample never fails.
  static constexpr unsigned kOffsetSamples = 64;
  static constexpr unsigned kSampleRingSize = 128;

  static common::Result<std::unique_ptr<WorkerChannels>> Create(const Options& options);
  // Frees the mbufs still waiting in any ring.
  ~WorkerChannels();
  WorkerChannels(const WorkerChannels&) = delete;
  WorkerChannels& operator=(const WorkerChannels&) = delete;

  RingPtr learn;
  RingPtr handoff;
  RingPtr upcall;
  RingPtr reinject;
  RingPtr escalate;
  RingPtr relocate;
  RingPtr tan_up;
  RingPtr tan_down;
  RingPtr neighbors;
  RingPtr control_tx;
  RingPtr samples_free;
  RingPtr samples_full;
  RingPtr int_records;
  std::unique_ptr<SlotDumpExchange> slot_dump;

  // Calls f(name, ring) for each ring this worker has (a ring its options
  // left out is skipped), named as the ring's member. samples_free is left
  // out: it holds the free samples, full when idle.
  template <typename F>
  void ForEachRing(F&& f) const {
    const std::pair<const char*, const RingPtr*> rings[] = {
        {"learn", &learn},         {"handoff", &handoff},         {"upcall", &upcall},
        {"reinject", &reinject},   {"escalate", &escalate},       {"relocate", &relocate},
        {"tan_up", &tan_up},       {"tan_down", &tan_down},       {"neighbors", &neighbors},
        {"control_tx", &control_tx}, {"samples_full", &samples_full},
        {"int_records", &int_records}};
    for (const auto& [name, ring] : rings) {
      if (*ring != nullptr) f(name, ring->get());
    }
  }
  std::unique_ptr<BypassDumpExchange> bypass_dump;

 private:
  WorkerChannels() = default;
  struct SampleStorage {
    OffsetSample sample{};
    std::vector<uint32_t> offsets;
  };
  std::vector<std::unique_ptr<SampleStorage>> samples_;
};

}  // namespace aggswitch::dataplane
