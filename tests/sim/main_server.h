// A job's main server in the simulated world (docs/protocol.md, "Final
// delivery"): a process on a host that takes the FINAL results a root switch
// delivers to it, keeps every one it received, and answers each with the
// ACK flagged FINAL the protocol asks for (the job's key, the chunk's seq,
// the delivery's aux), as a training job's parameter server would. The
// oracle judges what it received.
//
//   MainServer ms(world, host, 47000, {{1000, key}});
//   ... world.Run(...)
//   for (const MainServer::Delivery& d : ms.deliveries()) ...
//
// Thread safety: the simulator's thread only.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "tests/sim/host.h"

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

  // Serves the jobs in `keys` (job id -> key) on `port` of `host`.
  MainServer(World& world, Host& host, uint16_t port, std::map<uint32_t, uint64_t> keys);
  ~MainServer();
  MainServer(const MainServer&) = delete;
  MainServer& operator=(const MainServer&) = delete;

  // Every FINAL result that arrived, in arrival order (a resend is one more).
  const std::vector<Delivery>& deliveries() const { return deliveries_; }
  // Datagrams that were no FINAL result of a job it serves (counted, not kept).
  uint64_t strays() const { return strays_; }

 private:
  void OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port);

  World& world_;
  Host& host_;
  const uint16_t port_;
  const std::map<uint32_t, uint64_t> keys_;
  std::vector<Delivery> deliveries_;
  uint64_t strays_ = 0;
};

}  // namespace aggswitch::sim
