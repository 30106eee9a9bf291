// The client's protocol engine: runs one allreduce at a time over its
// transport (transport.h: kernel UDP or AF_XDP), as a sequence of transfers
// (client.h describes the behaviour).
//
// A transfer is a run of chunks with consecutive sequence numbers, sent
// through a SendWindow and answered by results. An allreduce is one transfer,
// or for fixed-point float32 sums up to three: the exponent exchange (one
// int32 max), the fixed-point data, and the float32 redo of overflowed chunks.
// Before the control unit's first allreduce on a switch in
// TaskInfoMode::kControlUnit, a one-datagram transfer announces the job; it
// takes no sequence number from the client's sequence. The control unit of
// a node is the first rank of the node's block (rank 0 with one node): each
// node's switch learns the job from its own.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(options));
//   Status s = engine->Run({.dtype = DType::kFloat32, .op = ReduceOp::kSum,
//                           .data = grad.data(), .count = grad.size(), .addr_low = 0});
//
// After an allreduce the engine ACKs its last result to the switch, and
// repeats the ACK kAckRepeats times, one retransmission timeout apart, while
// no next allreduce has started (whose datagrams carry the watermark): a lost
// ACK would otherwise hold the job's last slots, which another job's chunks
// may need, until the switch's stale_slot_ms. The I/O thread sends the
// repeats while it is idle (NextAckRepeat, RepeatAck), and those left at once
// when the client is destroyed (FlushAckRepeats).
//
// Every datagram is built in place in one of the transport's send buffers:
// one per window entry (a retransmission sends the same buffer again), and
// one for ACKs.
//
// Thread safety: Run, NextAckRepeat and RepeatAck are [I/O thread] (the one
// thread that owns the engine). Stop, Stats, local_port and
// transport_description are [any].
#pragma once

#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "aggregator/wire.h"
#include "client/chunking.h"
#include "client/client.h"
#include "client/internal/retransmit_timer.h"
#include "client/internal/send_window.h"
#include "client/internal/transport.h"
#include "common/clock.h"
#include "common/status.h"

namespace aggswitch::client::internal {

// Elements per chunk of `dtype` under `options`.
inline uint32_t ChunkElementsFor(const ClientOptions& options, aggregator::DType dtype) {
  const uint32_t fits = ElementsPerChunk(dtype, options.mtu, options.reserve_missing_ids);
  return options.max_chunk_elements == 0 ? fits : std::min(fits, options.max_chunk_elements);
}

// One allreduce: `count` elements of `dtype` at `data`, reduced in place.
struct Request {
  aggregator::DType dtype = aggregator::DType::kFloat32;
  aggregator::ReduceOp op = aggregator::ReduceOp::kSum;
  void* data = nullptr;
  size_t count = 0;
  uint32_t addr_low = 0;
  // The job's final result (docs/protocol.md, "Final delivery"): its data
  // chunks, and the float32 redo of any that overflowed, go FLAGGED final,
  // and the root also delivers them to the job's main server. The scale
  // exchange and the control unit's announcement do not.
  bool final = false;
};

class Engine {
 public:
  using Clock = std::chrono::steady_clock;

  // Opens the transport and allocates every buffer. `options` must be valid
  // (ValidateClientOptions). [any]
  static common::Result<std::unique_ptr<Engine>> Create(const ClientOptions& options);
  // The same over a transport the caller opened, with SendBuffers(options)
  // send buffers, on `clock` (which must outlive the engine): the fabric
  // simulator's (tests/sim), on simulated time. [any]
  static common::Result<std::unique_ptr<Engine>> Create(const ClientOptions& options,
                                                        std::unique_ptr<Transport> transport,
                                                        std::string description,
                                                        const common::Clock& clock);
  // The send buffers an engine with `options` builds its datagrams in.
  static uint32_t SendBuffers(const ClientOptions& options);

  // Runs one allreduce to the end: its result is in request.data, or the
  // status says why not. count > 0 and (dtype, op) valid. [I/O thread]
  common::Status Run(const Request& request);

  // Makes the running (or next) Run return kFailedPrecondition. [any]
  void Stop();

  // When the last allreduce's ACK is due again; time_point::max() when no
  // repeat is left. [I/O thread]
  Clock::time_point NextAckRepeat() const {
    return ack_repeats_left_ == 0 ? Clock::time_point::max() : ack_due_;
  }
  // Sends the ACK again if it is due at `now`. [I/O thread]
  void RepeatAck(Clock::time_point now);
  // Sends the repeats left at once (the client is being destroyed). [I/O thread]
  void FlushAckRepeats();

  // The sequence number the next chunk goes under: an allreduce's chunks
  // take the numbers from here on, in order. [I/O thread]
  uint32_t next_seq() const { return next_seq_; }

  ClientStats Stats() const;                                         // [any]
  uint16_t local_port() const { return transport_->local_port(); }  // [any]
  const std::string& transport_description() const { return transport_description_; }

 private:
  // One switch: its address, and the round trips measured to it.
  struct Lane {
    sockaddr_in addr{};
    std::string name;  // "10.0.10.253:47000"
    bool announced = false;
    RetransmitTimer timer;
    // The slot hint this rank's new chunks carry: kMovedSlotHint once a
    // result said that the switch moved the job to a partition of its own
    // (docs/aggregation.md, "Moves"), so that they go there straight.
    uint16_t move_hint = aggregator::kNoSlotHint;
  };

  // How the chunks of one transfer are encoded and their results used.
  struct Phase {
    enum class Kind : uint8_t {
      kAnnounce,    // one TASK_INFO datagram, answered by its echo
      kCopy,        // elements go out and come back as they are
      kFixedPoint,  // floats go out as int32 fixed point
    };
    Kind kind = Kind::kCopy;
    aggregator::DType dtype = aggregator::DType::kInt32;  // on the wire
    aggregator::ReduceOp op = aggregator::ReduceOp::kSum;
    int8_t scale = 0;
    uint16_t flags = 0;
    uint8_t* data = nullptr;  // the caller's elements (kFixedPoint: floats)
    size_t count = 0;         // elements at data
    uint32_t per_chunk = 1;   // elements per chunk (the last may hold fewer)
    // Redo transfers: chunk k carries data chunk chunk_map[k]; else chunk k.
    const uint32_t* chunk_map = nullptr;
    uint32_t chunks = 1;
  };

  // Monotonic counters: the I/O thread writes, anyone reads (relaxed).
  struct Counters {
    std::atomic<uint64_t> allreduces{0}, chunks{0}, retransmissions{0}, results{0},
        duplicate_results{0}, stray_datagrams{0}, transient_nacks{0}, scale_exchanges{0},
        float_fallbacks{0}, overflow_redos{0}, saturated_chunks{0}, notices{0}, kept_local{0},
        held_notices{0}, queries{0}, missing_notices{0}, answered_resends{0}, relocated_notices{0}, round_trip_us{0},
        retransmit_timeout_us{0};
  };
  // The single writer's increment: a plain load and store, no locked instruction.
  static void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  Engine(const ClientOptions& options, std::unique_ptr<Transport> transport,
         std::string transport_description, const common::Clock& clock);
  // Whether this rank announces the job to its node's switch
  // (TaskInfoMode::kControlUnit): the first rank of its node's block.
  bool ControlUnit() const { return options_.rank % (options_.world / options_.node_count) == 0; }
  // Set by a NOTICE from the switch: this rank is a predicted straggler and
  // flags its contributions BYPASS (docs/stragglers.md). [I/O thread]
  bool self_flag_ = false;

  common::Status RunFixedPointSum(Lane& lane, const Request& r, uint32_t per_chunk);
  common::Status Transfer(Lane& lane, const Phase& phase);
  // Queues due retransmissions, then new chunks, into out_.
  void PlanSends(Lane& lane, const Phase& phase, Clock::time_point now);
  // Writes chunk k's datagram into its window buffer; returns its length.
  uint32_t BuildDatagram(const Phase& phase, uint32_t k, uint8_t* buf) const;
  common::Status OnDatagram(Lane& lane, const Phase& phase, const sockaddr_in& from,
                            const uint8_t* data, uint32_t len);
  common::Status OnResult(Lane& lane, const Phase& phase, const aggregator::AggPacket& pkt);
  common::Status OnNack(const Lane& lane, const Phase& phase, const aggregator::AggHeader& h);
  // Chunk `seq`, outstanding, went to its switch without the task info of an
  // in-band job (a resend for the parameter node): puts the task info back
  // into its datagram, as BuildDatagram wrote it. False when there is none
  // to put back.
  bool RestoreTaskInfo(const Phase& phase, uint32_t seq);
  void OnNotice(const aggregator::AggHeader& h);
  // ACKs the last allreduce to `lane`'s switch and schedules the repeats.
  void SendAck(Lane& lane);
  void WriteAndSendAck(const Lane& lane);
  static constexpr uint32_t kAckRepeats = 2;
  // How soon a chunk refused for a slot or hold quota goes again.
  static constexpr std::chrono::microseconds kQuotaRetry{2000};

  // Data chunk m of a phase: its first element and element count.
  static size_t ChunkStart(const Phase& phase, uint32_t m) { return size_t{m} * phase.per_chunk; }
  static uint32_t ChunkLength(const Phase& phase, uint32_t m);
  // Send buffers for contributions: twice the window, so that a window of
  // answered chunks keeps its datagrams after the window has moved past
  // them. The buffer of chunk k (of the running transfer) is the one of its
  // sequence number.
  static uint32_t KeptBuffers(uint32_t window) { return 2 * std::bit_ceil(window); }
  uint8_t* WindowBuffer(uint32_t k) { return transport_->send_buffer(window_.Seq(k) & send_mask_); }
  // Whether chunk `seq` was answered and its buffer still holds its
  // contribution, which a restarted switch may ask for again (OnNotice).
  bool KeptAnswered(uint32_t seq);
  // The send buffer after the window's: ACKs.
  uint8_t* AckBuffer() { return transport_->send_buffer(send_mask_ + 1); }
  // The next of the kQueryBuffers after the ACK's, when its last QUERY has
  // left (AF_XDP zero-copy); else null (the chunk's data goes instead).
  uint8_t* QueryBuffer() {
    const uint32_t i = send_mask_ + 2 + next_query_buffer_;
    if (!transport_->SendBufferFree(i)) return nullptr;
    next_query_buffer_ = (next_query_buffer_ + 1) % kQueryBuffers;
    return transport_->send_buffer(i);
  }
  static constexpr uint32_t kQueryBuffers = Transport::kBatch;
  std::string StallMessage(const Lane& lane, const Phase& phase) const;

  const ClientOptions options_;
  const common::Clock& clock_;
  const int headroom_;
  std::unique_ptr<Transport> transport_;
  const std::string transport_description_;
  std::vector<Lane> lanes_;
  sockaddr_in local_tan_{};  // ClientOptions::local_tan; port 0: none
  uint32_t last_transient_nack_ = 0;  // the reason of the last "not now" NACK (StallMessage)
  // The last NOTICE held (StallMessage): its chunk and the members its slot awaited.
  uint32_t held_seq_ = 0;
  uint32_t held_missing_ = 0;
  bool held_known_ = false;
  SendWindow window_;
  SendWindow::Params window_params_;
  uint32_t send_mask_ = 0;  // window buffer of sequence number s: s & send_mask_
  // Answered chunks a NOTICE missing asked for again, to resend.
  uint32_t answered_asked_[Transport::kBatch];
  uint32_t answered_asked_n_ = 0;
  OutDatagram out_[Transport::kBatch];
  uint32_t out_first_ = 0;  // out_[out_first_, out_first_ + out_n_) still to send
  uint32_t out_n_ = 0;
  SendWindow::Due due_[Transport::kBatch];
  uint32_t next_query_buffer_ = 0;
  uint32_t next_seq_;
  uint32_t addr_low_ = 0;
  // This process's run (ClientOptions::incarnation, or drawn): every datagram
  // carries it, and only answers with it are taken.
  const uint32_t incarnation_;
  const uint16_t run_flag_;  // flags::kRunId with ClientOptions::run_id, else 0
  // The last allreduce's ACK: repeats left, when the next is due, and where.
  uint32_t ack_repeats_left_ = 0;
  Clock::time_point ack_due_;
  const Lane* ack_lane_ = nullptr;
  int32_t exponent_ = 0;        // the fixed-point exponent exchange's element
  std::vector<uint32_t> redo_;  // data chunks whose fixed-point result overflowed
  // Chunks of the running int32 sum that came back saturated, and the first.
  uint32_t saturated_ = 0;
  uint32_t first_saturated_seq_ = 0;
  uint32_t first_saturated_chunk_ = 0;
  Clock::time_point last_progress_;
  Clock::time_point op_deadline_;
  std::atomic<bool> stop_{false};
  Counters counters_;
};

}  // namespace aggswitch::client::internal
