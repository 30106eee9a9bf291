// agg-gen's settings: what the emulated workers send, to whom, and when the
// run ends. main.cc fills a GenConfig from the command line; Validate() is the
// one place that checks it, so the engine, the frame builder and the pcap
// writer can trust every field.
//
//   GenConfig cfg;
//   cfg.workers = 8;
//   cfg.jobs = 2;
//   RETURN_IF_ERROR(ValidateGenConfig(cfg));
//
// Emulated worker w (0-based) is member w of every job. It sends from MAC
// src_mac + w, IPv4 src_ip + w and UDP port src_port + w, so results, which
// the switch addresses to the member, can be told apart by destination port.
//
// Thread safety: plain values and pure functions; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "aggregator/types.h"
#include "aggregator/wire.h"
#include "common/net_addr.h"
#include "common/siphash.h"
#include "common/status.h"

namespace aggswitch::tools {

// What comes back for a contribution.
enum class Expect : uint8_t {
  kResults,  // an aggregation switch: one RESULT per member, payload checked
  kEcho,     // a reflector (testpmd io, port-topology loop): the contribution itself
};

inline constexpr uint16_t kMaxGenWorkers = 256;  // the protocol's largest fan-in at one switch
inline constexpr uint32_t kMaxGenWindow = 1024;
// A contribution must fit a 1500-byte MTU: 1500 - 20 (IPv4) - 8 (UDP) - 48
// (header) = 1424 bytes, 356 int32 or float32 elements (docs/protocol.md).
inline constexpr uint16_t kMaxGenElems = 356;

struct GenConfig {
  // The traffic.
  uint16_t workers = 4;
  uint16_t jobs = 1;
  uint32_t job_base = 1;  // job ids job_base .. job_base + jobs - 1
  uint64_t key = 0x5eed0000000000a1ULL;
  // The run every datagram belongs to (docs/protocol.md, "Runs"), and every
  // result must answer; agg-gen draws one at random per process, so that a
  // second run of the same jobs is a new run at the switch.
  uint32_t incarnation = 1;
  uint16_t elems = 256;
  aggregator::DType dtype = aggregator::DType::kInt32;   // int32 or float32
  aggregator::ReduceOp op = aggregator::ReduceOp::kSum;  // sum, min or max
  bool task_info = false;  // TASK_INFO flag, expected = workers, node_count = 1
  Expect expect = Expect::kResults;

  // The closed loop.
  uint32_t window = 32;        // chunks in flight per worker and job
  uint32_t timeout_ms = 50;    // retransmit a chunk whose answer is this late
  uint32_t give_up_ms = 3000;  // end the run as failed when no chunk completes for this long
  // The slots of the switch's region the jobs' chunks use (collision check):
  // aggregation.slots minus aggregation.spare_slots, and minus
  // aggregation.in_band.slots with in-band registration on
  // (aggregator/slot_placement.h).
  uint32_t slots = 4096;
  // The switch's aggregation.slot_secret: with it, the check also knows
  // where each job starts; without it, only how much the jobs take.
  std::optional<common::SipKey> slot_secret;

  // When the run ends: whichever comes first; neither set = at SIGINT/SIGTERM.
  double duration_s = 0;  // 0: no time limit
  uint32_t chunks = 0;    // chunks per worker and job; 0: no limit

  // Addresses.
  common::MacAddr switch_mac = *common::MacAddr::Parse("02:a9:9c:00:00:01");
  common::Ipv4Addr switch_ip = *common::Ipv4Addr::Parse("10.0.10.253");
  uint16_t switch_port = aggregator::kAggUdpPort;
  common::MacAddr src_mac = *common::MacAddr::Parse("02:a9:9c:01:00:00");  // worker 0
  common::Ipv4Addr src_ip = *common::Ipv4Addr::Parse("10.0.10.10");        // worker 0
  uint16_t src_port = 40000;                                               // worker 0
};

// Every range and cross-field check, including the slot check: a job's chunks
// occupy at most 2 * window consecutive slots of the switch (window in flight,
// up to window more held until every member's ack passes them), so the jobs
// together must take at most half of `slots`, and, with the slot secret, no
// two jobs may start within 2 * window slots of each other
// (aggregator/slot_placement.h). [any]
common::Status ValidateGenConfig(const GenConfig& cfg);

// Emulated worker w's addresses. [any]
common::MacAddr WorkerMac(const GenConfig& cfg, uint16_t worker);
uint32_t WorkerIp(const GenConfig& cfg, uint16_t worker);  // host order
uint16_t WorkerPort(const GenConfig& cfg, uint16_t worker);

// Bytes of one element on the wire (4 for both supported types). [any]
inline uint32_t ElemBytes(const GenConfig& cfg) {
  return static_cast<uint32_t>(aggregator::ElementSize(cfg.dtype));
}

// Bits of gradient per contribution, for Gbit/s figures. [any]
inline double GradientBits(const GenConfig& cfg) {
  return 8.0 * cfg.elems * ElemBytes(cfg);
}

}  // namespace aggswitch::tools
