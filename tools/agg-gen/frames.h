// agg-gen's frames: contributions and ACKs of every emulated worker, written
// from per-worker templates, and the classification of what comes back.
//
// A contribution is Ethernet | IPv4 (DF) | UDP (checksum 0) | aggregation
// header | payload, from worker w's MAC, IPv4 address and UDP port to the
// switch's. Everything before the payload is fixed for a (job, worker) but
// seq, ack_watermark and the RETRANSMISSION flag (IPv4 id 0, so the checksum
// is fixed too): it is built once per pair with dataplane::WriteUdpHeaders and
// aggregator::WriteAggHeader (the one builder), and a send copies those 90
// bytes, stores the three fields and writes the payload with ChunkValues::Fill.
// (Calling WriteAggHeader per send cost 7% of agg-gen's cycles in its memif
// echo loop.)
//
//   FrameFactory frames(cfg);
//   frames.WriteContribution(job, worker, seq, ack, /*retransmission=*/false, buf);
//   Reply r = frames.Classify(rx_data, rx_len);
//   if (r.kind == ReplyKind::kResult) ... r.worker, r.pkt.header->seq ...
//
// Thread safety: immutable after construction; any thread. The Write and
// Classify functions are hot-path safe: no allocation, no syscalls.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "aggregator/wire.h"
#include "tools/agg-gen/chunk_values.h"
#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

inline constexpr uint32_t kUdpHeadersLen = 42;  // Ethernet 14 + IPv4 20 + UDP 8, untagged
inline constexpr uint32_t kContributionHeadLen = kUdpHeadersLen + sizeof(aggregator::AggHeader);

// What a received frame is, as far as agg-gen is concerned.
enum class ReplyKind : uint8_t {
  kResult,        // a RESULT addressed to worker `worker` (MAC, IPv4, port) from the switch
  kEcho,          // a CONTRIBUTION of worker `worker` coming back (a reflecting peer)
  kNack,          // a NACK to worker `worker`
  kMisaddressed,  // aggregation traffic to a worker port with another MAC or IPv4
                  // address, or not from the switch's address and port
  kMalformed,     // UDP to (or, reflected, from) a worker port that is not a valid
                  // aggregation datagram
  kOther,         // anything else, including broken IPv4/UDP headers (they name
                  // no worker one could trust)
};

struct Reply {
  ReplyKind kind = ReplyKind::kOther;
  uint16_t worker = 0;
  aggregator::AggPacket pkt;  // parsed datagram; header == nullptr when it did not parse
};

class FrameFactory {
 public:
  // `cfg` must have passed ValidateGenConfig. [control]
  explicit FrameFactory(const GenConfig& cfg);

  // Frame lengths in bytes (no FCS).
  uint32_t contribution_len() const { return contribution_len_; }
  uint32_t ack_len() const { return ack_len_; }

  // Writes worker's contribution to chunk seq of job index `job` (0-based; the
  // id is job_base + job) into `out`, which has room for contribution_len().
  // `ack` is the worker's ack watermark for that job. [any]
  void WriteContribution(uint32_t job, uint16_t worker, uint32_t seq, uint32_t ack,
                         bool retransmission, uint8_t* out) const;

  // Writes worker's ACK (opcode 8, no payload) for job index `job` into `out`,
  // which has room for ack_len(). [any]
  void WriteAck(uint32_t job, uint16_t worker, uint32_t ack, uint8_t* out) const;

  // Classifies a received frame (`len` bytes at `frame`). [any]
  Reply Classify(const uint8_t* frame, uint32_t len) const;

  const ChunkValues& values() const { return values_; }

 private:
  using UdpHeaders = std::array<uint8_t, kUdpHeadersLen>;
  using ContributionHead = std::array<uint8_t, kContributionHeadLen>;

  aggregator::AggFields Fields(aggregator::Opcode opcode, uint32_t job, uint16_t worker,
                               uint32_t seq, uint32_t ack) const;
  // Whether (ip, port) is worker w's address, and that worker's MAC is `mac`.
  bool IsWorker(uint16_t w, const uint8_t* mac, uint32_t ip) const;

  GenConfig cfg_;
  ChunkValues values_;
  uint32_t contribution_len_;
  uint32_t ack_len_;
  std::vector<common::MacAddr> worker_mac_;          // per worker
  std::vector<ContributionHead> contribution_head_;  // [job * workers + worker]
  std::vector<UdpHeaders> ack_hdr_;                  // per worker
};

}  // namespace aggswitch::tools
