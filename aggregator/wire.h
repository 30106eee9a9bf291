// The aggregation protocol's wire format (docs/protocol.md): the packed
// header, its one parser and its one builder, shared by the switch, the client
// library and the tools.
//
//   AggPacket pkt;
//   WireError err = ParseAggregation(udp_payload, udp_len, &pkt);
//   if (err != WireError::kOk) count(err);           // never trust the packet further
//   uint32_t seq = pkt.header->seq.host();
//
//   AggFields f{.opcode = Opcode::kContribution, .job_id = 7, .seq = 42, ...};
//   uint32_t n = BuildAggregation(f, missing, payload, payload_len, buf, buf_size);
//
// Thread safety: pure functions on the caller's buffers; any thread, including
// worker lcores (no allocation, no exceptions, bounded work).
#pragma once

#include <cstddef>
#include <cstdint>

#include "aggregator/types.h"
#include "common/big_endian.h"

namespace aggswitch::aggregator {

using common::be16_t;
using common::be32_t;
using common::be64_t;

inline constexpr uint16_t kAggMagic = 0xA65C;
inline constexpr uint8_t kAggVersion = 2;
inline constexpr uint16_t kAggUdpPort = 47000;
inline constexpr uint16_t kNoSlotHint = 0xFFFF;
// A slot hint that names no spare slot but the job's moved partition
// (docs/aggregation.md, "Moves"): results of a moved job's chunks carry it,
// and its members put it in their later chunks.
inline constexpr uint16_t kMovedSlotHint = 0xFFFE;
// The node id a root puts on what it sends its TAN (its first data and its
// QUERY); the TAN's RESULT carries it back.
inline constexpr uint16_t kRootNodeId = 0xFFFE;

enum class Opcode : uint8_t {
  kContribution = 1,
  kPartial = 2,
  kResult = 3,
  kLate = 4,
  kVerify = 5,
  kExceptionRetransmit = 6,
  kTaskInfo = 7,
  kAck = 8,
  kNack = 9,
  kNotice = 10,
  // A member asks after a chunk it sent (header only): the switch answers
  // with the cached result, a NOTICE held, or a NOTICE missing.
  kQuery = 11,
  // The job's main server sends a datagram (parameters, a model shard) to
  // the job: the switch replicates it to every member, as it does a result,
  // and answers the main server ACK, or NACK when a member has no address
  // yet (docs/protocol.md, "Distribution").
  kDistribute = 12,
  // A member (or the job's main server) asks the switch for the
  // contribution member `aux` (a node id) sent to chunk `seq` of a job in
  // store or both mode; the switch answers FETCH with its payload, or NACK
  // not_stored. With RELEASE the stored copy is freed once sent
  // (docs/protocol.md, "Store").
  kFetch = 13,
};
inline constexpr uint8_t kMaxOpcode = 13;

// Bits of the header's flags field.
namespace flags {
inline constexpr uint16_t kAggregateAtPs = 1 << 0;
inline constexpr uint16_t kRetransmission = 1 << 1;
inline constexpr uint16_t kConflict = 1 << 2;
inline constexpr uint16_t kVerified = 1 << 3;
inline constexpr uint16_t kBypass = 1 << 4;
inline constexpr uint16_t kOverflow = 1 << 5;
inline constexpr uint16_t kIncomplete = 1 << 6;
inline constexpr uint16_t kTaskInfo = 1 << 7;
inline constexpr uint16_t kOrdered = 1 << 8;
// With TASK_INFO: the job runs in verify mode (docs/parameter-node.md).
inline constexpr uint16_t kVerifyMode = 1 << 9;
// On a FETCH: free the stored copy once it is sent.
inline constexpr uint16_t kRelease = 1 << 10;
// On a contribution: the chunk is the job's final result, which the root
// also delivers to the job's main server until it ACKs (docs/protocol.md,
// "Final delivery"). Partials carry it up; the delivery carries it too. On
// an ACK or a FETCH: the job's main server sent it, to the switch it is
// addressed to (no other switch's port trigger takes it on the way).
inline constexpr uint16_t kFinal = 1 << 11;
// On a LATE: its list names the node ids whose data the payload holds, not
// the ids it lacks. A switch sends a child switch's late partial on so when
// it listed the ids that child covers as missing (bypass.subswitch: nodes),
// since the TAN above may not know what the child covers.
inline constexpr uint16_t kContent = 1 << 12;
// On a member's datagram: its incarnation is the run's id, the same at every
// rank of the run (ClientOptions::run_id), so a switch tells a new run from
// the last one even by a rank that never sent in the last one.
inline constexpr uint16_t kRunId = 1 << 13;
// On a RESULT (and a partial on its way up): some member's data came to the
// chunk in a retransmission (its first send, or the answer, was lost or
// refused), so the round trip includes a loss's recovery. A member takes no
// round-trip sample from it: its timeout would grow with the others'
// losses, each waited out at the timeout of the member that lost it.
inline constexpr uint16_t kRecovered = 1 << 14;
}  // namespace flags

// Reason codes carried in `aux` by a NACK (docs/protocol.md).
enum class NackReason : uint32_t {
  kUnknownJob = 1,
  kKeyMismatch = 2,
  kMalformed = 3,
  kJobTableFull = 4,
  kTypeMismatch = 5,
  kTaskInfoConflict = 6,
  // The rest say "not now": the sender retransmits and may well succeed.
  kRateLimited = 7,   // in-band registration over its per-source or switch-wide rate
  kInBandFull = 8,    // the job table's in-band share is full
  kSlotQuota = 9,     // the chunk lies too far ahead of the job's slowest member
  kHoldQuota = 10,    // the job (or the switch) holds as many ordered contributions as it may
  kMemberBound = 11,  // the node id is bound to another address (docs/security.md)
  // Ends the operation again: the task info says more than one node takes
  // part and this switch has no upstream to send its partial to.
  kNoUpstream = 12,
  // The members of a chunk disagree on addr_low (the low bits of their
  // buffers' addresses, which choose the switch): a misconfiguration.
  kAddrLowMismatch = 13,
  // "Not now": the chunk's slot holds another chunk and no spare slot is
  // free to move it to (docs/aggregation.md, "Collisions").
  kSlotBusy = 14,
  // A contribution with AGGREGATE_AT_PS for a job whose root has no
  // parameter node (a remote TAN) to aggregate it (docs/parameter-node.md).
  kNoParameterNode = 15,
  // "Not now": a DISTRIBUTE reached a job one of whose members has not sent
  // from its address yet, so the switch cannot reach every member.
  kMembersUnbound = 16,
  // A DISTRIBUTE from another address than the job's main server, or for a
  // job without one.
  kNotMainServer = 17,
  // "Not now": a contribution to a job in store or both mode found the
  // job's share of the store, or this switch's, full. Nothing of it was
  // kept or reduced. Released copies make room.
  kStoreFull = 18,
  // A FETCH for a contribution the switch does not hold: never stored,
  // released, or the job is not in store or both mode.
  kNotStored = 19,
  // "Not now": the datagram's incarnation is new to a member of a job
  // that a run with another incarnation holds. The switch starts a new run
  // of the job (docs/protocol.md, "Runs"); the sender's resend finds it.
  kNewRun = 20,
  // The datagram belongs to a run of the job that has ended: a member of a
  // newer run (another incarnation) took the job since. Never retried.
  kRunEnded = 21,
  // A chunk's result reached some members before the switch restarted (or
  // the job was added again), and the switch that must compute it again
  // cannot give the others the same bytes: a float sum in arrival order
  // comes out of another order with other rounding, and so does an ordered
  // one that its own TAN would reduce in node order. The member that asks
  // after it is told so rather than sent a result other members do not
  // hold. Never retried.
  kResultLost = 22,
};

// What a NOTICE (switch -> worker) tells, in `aux` (docs/stragglers.md).
enum class NoticeKind : uint32_t {
  kSelfFlag = 1,   // you are a predicted straggler: set BYPASS on this job's data
  kStopFlag = 2,   // you take part again: stop setting BYPASS
  // Your contribution to `seq` is counted and the chunk waits for
  // `expected` more members: the answer to a
  // retransmission that reached the switch before the chunk was complete.
  // The result comes when the others' contributions do; resending will not
  // make it come sooner.
  kHeld = 3,
  // The answer to a QUERY for `seq` when the switch holds no contribution of
  // the sender to that chunk (lost on the way, or the job unknown): send it.
  kMissing = 4,
  // Chunk `seq` was moved off its slot, which another chunk holds, to spare
  // slot `slot_hint`: the member's later datagrams about `seq` carry that
  // hint and go there straight. Without a hint (kNoSlotHint): the hint the
  // member's datagram carried names a spare slot that does not hold `seq`.
  kRelocated = 5,
  // To a child switch only: chunk `seq`'s result reached members below it
  // before the root restarted, and the root, which lacks the child's data
  // and may compute the chunk again (the same bytes from the same data),
  // asks for it. The child keeps no data of a chunk that went up: it asks
  // its own members past the chunk, a child switch so again, and a worker
  // with NOTICE missing, which it answers with the contribution it kept.
  kForgotten = 6,
};

struct [[gnu::packed]] AggHeader {
  be16_t magic;
  uint8_t version;
  uint8_t opcode;
  be16_t flags;
  be16_t node_id;
  be32_t job_id;
  be32_t seq;
  be64_t job_key;
  be32_t ack_watermark;
  be32_t addr_low;
  be16_t expected;
  be16_t node_count;
  be16_t slot_hint;
  be16_t elem_count;
  uint8_t dtype;
  uint8_t op;
  int8_t scale;
  uint8_t missing_count;
  be32_t aux;
  // Which run of the job the datagram belongs to (docs/protocol.md, "Runs"):
  // a client draws its own at random when it starts, and every datagram it
  // sends carries it; a switch's datagrams to a member carry the member's,
  // and what it sends up the tree carries its run label. 0: none.
  be32_t incarnation;
};
static_assert(sizeof(AggHeader) == 52, "docs/protocol.md: the header is 52 bytes");

// A parsed datagram: pointers into the caller's buffer, valid as long as it is.
struct AggPacket {
  const AggHeader* header = nullptr;
  const uint8_t* missing = nullptr;  // missing_count big-endian node ids
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;  // elem_count * ElementSize(dtype)
  Opcode opcode = Opcode::kContribution;
  DType dtype = DType::kInt32;
  ReduceOp op = ReduceOp::kSum;

  uint16_t MissingNode(uint32_t i) const {
    return static_cast<uint16_t>(missing[2 * i] << 8 | missing[2 * i + 1]);
  }
};

// Why a datagram is not a valid aggregation packet. One counter each.
#define AGG_WIRE_ERRORS(X)                                                     \
  X(kTruncated, "truncated", "shorter than the 52-byte header")               \
  X(kBadMagic, "bad_magic", "magic is not 0xA65C")                            \
  X(kBadVersion, "bad_version", "version is not 2")                           \
  X(kUnknownOpcode, "unknown_opcode", "opcode outside 1..13")                  \
  X(kUnknownDType, "unknown_dtype", "dtype outside the table")                \
  X(kUnknownOp, "unknown_op", "op outside the table")                         \
  X(kBadTypeOp, "bad_type_op", "the dtype does not allow the op")             \
  X(kCountMismatch, "count_mismatch", "missing list and payload exceed the datagram")

enum class WireError : uint8_t {
  kOk = 0,
#define AGG_WIRE_ENUM(name, label, help) name,
  AGG_WIRE_ERRORS(AGG_WIRE_ENUM)
#undef AGG_WIRE_ENUM
      kCount
};
inline constexpr size_t kNumWireErrors = static_cast<size_t>(WireError::kCount);
const char* WireErrorLabel(WireError e);

// Validates a UDP payload as an aggregation packet. Bytes past the payload
// (Ethernet padding) are ignored. [any thread]
WireError ParseAggregation(const uint8_t* data, uint32_t len, AggPacket* out);

// Every header field, in host order, for the builder.
struct AggFields {
  Opcode opcode = Opcode::kContribution;
  uint16_t flags = 0;
  uint16_t node_id = 0;
  uint32_t job_id = 0;
  uint32_t seq = 0;
  uint64_t job_key = 0;
  uint32_t ack_watermark = 0;
  uint32_t addr_low = 0;
  uint16_t expected = 0;
  uint16_t node_count = 0;
  uint16_t slot_hint = kNoSlotHint;
  uint16_t elem_count = 0;
  DType dtype = DType::kInt32;
  ReduceOp op = ReduceOp::kSum;
  int8_t scale = 0;
  uint32_t aux = 0;
  uint32_t incarnation = 0;
};

// Writes the header alone. [any thread]
void WriteAggHeader(const AggFields& f, uint8_t missing_count, AggHeader* out);

// Writes header, missing list and payload into `buf`. `payload_len` must be
// f.elem_count * ElementSize(f.dtype); a null `payload` leaves those last
// payload_len bytes for the caller to write. Returns the bytes written, or 0
// when `buf_size` is too small or the lengths disagree. [any thread]
uint32_t BuildAggregation(const AggFields& f, const uint16_t* missing, uint8_t missing_count,
                          const uint8_t* payload, uint32_t payload_len, uint8_t* buf,
                          uint32_t buf_size);

// Reads the header back into fields (the inverse of WriteAggHeader). [any thread]
AggFields ReadAggFields(const AggHeader& h);

// Sequence-number order on 32 bits (RFC 1982): whether a comes before b.
constexpr bool SeqBefore(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

}  // namespace aggswitch::aggregator
