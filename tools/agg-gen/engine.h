// The closed loop of agg-gen's emulated workers, without any I/O: which
// chunks to send next, what a received frame means, and every check and count.
// The port runner (port_runner.h) moves the frames; tests drive it directly.
//
// Every emulated worker is member w of every job and keeps, per job, the
// chunks [ack, next) in flight. A worker may send chunk s of any job while
// s < floor + window, where floor is the lowest ack of all workers of all jobs:
// the workers move in lockstep, as the ranks of an allreduce do, and so every
// job's chunks stay within 2 * window slots of the switch (gen_config.h). A
// chunk unanswered for timeout_ms is sent again with the RETRANSMISSION flag.
//
//   GenEngine engine(cfg, frames, rte_get_tsc_hz());
//   engine.Start(rte_rdtsc());
//   for (;;) {
//     for each received frame: engine.OnFrame(data, len);
//     uint32_t n = engine.PlanSends(rte_rdtsc(), ops, 32);   // then write and send ops[0..n)
//     if (engine.Done()) break;
//   }
//
// Answers: with Expect::kResults, a RESULT to worker w (by its destination
// UDP port, with its MAC and IPv4 address) answers (job, w, seq); its header
// must match what was sent and its payload the closed-form reduction
// (chunk_values.h). With Expect::kEcho the worker's own contribution coming
// back answers it, unchecked.
//
// A worker whose chunks of a job are all answered, with nothing more to send
// (the chunk limit reached, or StopSending), sends that job an ACK at once,
// as a client does at the end of an allreduce: until the switch has it, the
// worker's last window of the job's slots stays held, and another job whose
// chunks land there cannot complete.
//
// Thread safety: one thread (the generator lcore) owns an engine; not
// thread-safe. The constructor is [control]; every other method is hot-path
// safe: no allocation, locks or syscalls.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/agg-gen/chunk_window.h"
#include "tools/agg-gen/frames.h"
#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

// Why an answer is wrong. Any of them fails the run.
#define AGG_GEN_ERRORS(X)                                                                          \
  X(kPayload, "payload", "result elements differ from the closed-form reduction")                  \
  X(kHeader, "header",                                                                             \
    "result header differs from what was sent (key, count, type, op, flags, missing list)")        \
  X(kAddress, "address",                                                                           \
    "answer to a worker port with another worker's MAC or IPv4 address, or not from the "          \
    "switch's address and port")                                                                   \
  X(kMalformed, "malformed", "datagram to a worker port that is not a valid aggregation datagram") \
  X(kStray, "stray", "answer for a job or chunk that was never sent")

enum class GenError : uint8_t {
#define AGG_GEN_ERROR_ENUM(name, label, help) name,
  AGG_GEN_ERRORS(AGG_GEN_ERROR_ENUM)
#undef AGG_GEN_ERROR_ENUM
      kCount
};
inline constexpr size_t kNumGenErrors = static_cast<size_t>(GenError::kCount);
const char* GenErrorLabel(GenError e);
const char* GenErrorHelp(GenError e);

struct GenCounters {
  uint64_t sent = 0;         // contributions sent, retransmissions included
  uint64_t retransmits = 0;  // of those, retransmissions
  uint64_t completed = 0;    // contributions answered (first answer per worker, job and chunk)
  uint64_t answers = 0;      // results (or echoes) received, duplicates included
  uint64_t duplicates = 0;   // answers for a chunk already answered
  uint64_t nacks = 0;        // NACKs received
  uint64_t other = 0;        // frames that are not answers (ARP, echoed ACKs, ...)
  uint64_t errors[kNumGenErrors] = {};

  uint64_t Errors() const {
    uint64_t n = 0;
    for (uint64_t e : errors) n += e;
    return n;
  }
};

// The first few wrong answers, in detail.
struct ErrorDetail {
  GenError error = GenError::kPayload;
  uint32_t job_id = 0;
  uint16_t worker = 0;
  uint32_t seq = 0;
  const char* field = "";  // kHeader: which field; kPayload: "element"
  int64_t index = -1;      // kPayload: element index
  uint64_t got = 0;
  uint64_t want = 0;
};
inline constexpr uint32_t kMaxErrorDetails = 8;

// One datagram to send: a chunk (write it with FrameFactory::WriteContribution)
// or, with final_ack, the worker's last ACK of the job (FrameFactory::WriteAck).
struct SendOp {
  uint32_t job = 0;  // index, 0-based
  uint16_t worker = 0;
  bool retransmission = false;
  uint32_t seq = 0;
  uint32_t ack = 0;  // the worker's ack watermark for the job
  bool final_ack = false;
};

class GenEngine {
 public:
  // `cfg` must have passed ValidateGenConfig; `frames` must outlive the
  // engine. [control]
  GenEngine(const GenConfig& cfg, const FrameFactory& frames, uint64_t tsc_hz);

  // Starts the give-up clock. [owner]
  void Start(uint64_t now);

  // Fills ops[0..n) with up to `max` datagrams to send now and marks them
  // sent: the final ACKs of workers that just finished a job first, then
  // timed-out chunks, then new ones, one per (job, worker) in turn so that
  // chunk s goes out for every worker of every job before s + 1. [owner]
  uint32_t PlanSends(uint64_t now, SendOp* ops, uint32_t max);

  // Handles one received frame. [owner]
  void OnFrame(const uint8_t* frame, uint32_t len);

  // No new chunks from now on; chunks in flight are still retransmitted until
  // answered. [owner]
  void StopSending();

  // Nothing is in flight and nothing more will be sent (the chunk limit is
  // reached, or StopSending was called). [owner]
  bool Done() const;

  // When the floor (the lowest ack) last moved, or Start. [owner]
  uint64_t last_progress_tsc() const { return last_progress_tsc_; }

  // Worker's ack watermark for job index `job`. [owner]
  uint32_t Ack(uint32_t job, uint16_t worker) const { return pair(job, worker).ack(); }

  // Whether PlanSends has handed out the worker's final ACK of the job; the
  // end of a run sends the others. [owner]
  bool FinalAckPlanned(uint32_t job, uint16_t worker) const {
    return final_ack_[job * workers_ + worker] == FinalAck::kPlanned;
  }

  // Chunks sent but never answered, summed over workers and jobs. [owner]
  uint64_t Unanswered() const { return unanswered_; }

  const GenCounters& counters() const { return counters_; }
  const ErrorDetail* details() const { return details_; }
  uint32_t n_details() const { return n_details_; }

 private:
  const ChunkWindow& pair(uint32_t job, uint16_t worker) const {
    return pairs_[job * workers_ + worker];
  }
  enum class FinalAck : uint8_t { kNotYet, kDue, kPlanned };

  bool CanSend(const ChunkWindow& w) const;
  // Queues pair p's final ACK if it has nothing in flight and nothing more to send.
  void MaybeFinish(uint32_t p);
  uint32_t PlanRetransmits(uint64_t now, SendOp* ops, uint32_t max);
  void UpdateFloor(uint64_t now);
  void OnAnswer(const Reply& r);
  void Fail(GenError e, const Reply& r, const char* field, int64_t index, uint64_t got,
            uint64_t want);

  const FrameFactory& frames_;
  const Expect expect_;
  const uint16_t workers_;
  const uint32_t jobs_;
  const uint32_t job_base_;
  const uint32_t window_;
  const uint32_t chunk_limit_;  // 0: none
  const uint64_t key_;
  const uint32_t incarnation_;  // GenConfig::incarnation: what every result must carry
  const uint16_t elems_;
  const aggregator::DType dtype_;
  const aggregator::ReduceOp op_;
  const uint64_t timeout_tsc_;
  const uint64_t scan_interval_tsc_;

  std::vector<ChunkWindow> pairs_;  // job-major: pairs_[job * workers + worker]
  std::vector<FinalAck> final_ack_;  // per pair
  std::vector<uint32_t> acks_due_;   // pairs whose final ACK is kDue, in order; each once
  uint32_t acks_due_head_ = 0;       // acks_due_[head..) are still to plan
  uint32_t rr_ = 0;                 // next pair to offer a new chunk
  uint32_t pairs_at_limit_ = 0;     // pairs that sent their last chunk (chunk_limit_)
  uint32_t floor_ = 0;
  bool floor_dirty_ = false;
  bool sending_ = true;
  uint64_t unanswered_ = 0;
  uint64_t next_scan_tsc_ = 0;
  uint64_t last_progress_tsc_ = 0;

  GenCounters counters_;
  ErrorDetail details_[kMaxErrorDetails];
  uint32_t n_details_ = 0;
};

}  // namespace aggswitch::tools
