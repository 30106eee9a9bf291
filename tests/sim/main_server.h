// A job's main server in the simulated world (docs/protocol.md, "Final
// delivery"): a process on a host that takes the FINAL results a root switch
// delivers to it, keeps every one it received, and answers each with the
// ACK flagged FINAL the protocol asks for (the job's key, the chunk's seq,
// the delivery's aux), as a training job's parameter server would. For
// jobs in both mode it also reads back what the switches kept (FETCH): one
// request at a time, resent until answered, then again with RELEASE to free
// the copy. The oracle judges what it received.
//
//   MainServer ms(world, host, 47000, {{1000, key}});
//   ... world.Run(...)
//   for (const MainServer::Delivery& d : ms.deliveries()) ...
//   ms.Fetch({{1000, switch_ip, seq, node}}, [](std::vector<MainServer::Fetched> got) { ... });
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "aggregator/wire.h"
#include "tests/sim/host.h"
#include "tests/sim/rank.h"

namespace aggswitch::sim {

class MainServer {
 public:
  struct Delivery {
    uint32_t job_id = 0;
    uint32_t seq = 0;
    uint16_t flags = 0;
    uint32_t run = 0;            // its incarnation: the label of the run it ends
    uint64_t at_ns = 0;          // when it arrived
    std::vector<uint8_t> bytes;  // the chunk's elements
  };

  // A contribution to read back: member `node`'s to chunk `seq` of job
  // `job_id`, kept by the switch at `switch_ip`.
  struct FetchRequest {
    uint32_t job_id = 0;
    uint32_t switch_ip = 0;
    uint32_t seq = 0;
    uint16_t node = 0;
  };
  // What the switch answered: the copy, or a NACK's reason; neither when it
  // never answered (`answered` false).
  struct Fetched {
    FetchRequest request;
    bool answered = false;
    bool found = false;
    uint32_t nack = 0;
    SentContribution copy;
    // The RELEASE that followed was answered (with the copy or not_stored).
    bool released = false;
  };
  using FetchDone = std::function<void(std::vector<Fetched>)>;

  // Serves the jobs in `keys` (job id -> key) on `port` of `host`.
  MainServer(World& world, Host& host, uint16_t port, std::map<uint32_t, uint64_t> keys);
  ~MainServer();
  MainServer(const MainServer&) = delete;
  MainServer& operator=(const MainServer&) = delete;

  // Every FINAL result that arrived, in arrival order (a resend is one more).
  const std::vector<Delivery>& deliveries() const { return deliveries_; }
  // Datagrams that were no FINAL result of a job it serves, nor the answer
  // to a FETCH in progress (counted, not kept): a final chunk held back
  // (NACK store_full flagged FINAL) among them.
  uint64_t strays() const { return strays_; }

  // Reads back every contribution of `requests`, one after the other, then
  // calls `done` with the answers in order. Batches queue behind each other.
  void Fetch(std::vector<FetchRequest> requests, FetchDone done);
  // No FETCH waits or is queued.
  bool fetch_idle() const { return batches_.empty(); }

  // A FETCH unanswered is sent again this often, at most kFetchTries times.
  static constexpr uint64_t kFetchRetryNs = 5'000'000;
  static constexpr uint32_t kFetchTries = 40;

 private:
  struct Batch {
    std::vector<FetchRequest> requests;
    FetchDone done;
    std::vector<Fetched> got;
    size_t next = 0;       // the request in progress
    bool releasing = false;
    uint32_t tries = 0;
    uint64_t token = 0;    // the retry timer that still counts
  };
  void OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port);
  void OnFetchAnswer(const aggregator::AggPacket& pkt);
  // Sends the FETCH in progress (again), or moves on once it is done.
  void SendFetch();
  void NextFetch();

  World& world_;
  Host& host_;
  const uint16_t port_;
  const std::map<uint32_t, uint64_t> keys_;
  std::vector<Delivery> deliveries_;
  std::deque<Batch> batches_;
  uint64_t fetch_tokens_ = 0;
  uint64_t strays_ = 0;
};

}  // namespace aggswitch::sim
