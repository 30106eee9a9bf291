// The worker client library: allreduce through aggswitch over kernel UDP.
//
// A training or HPC process creates one Client per job and rank, and every
// rank issues the same allreduces in the same order. Each allreduce sends the
// rank's vector to the switch once, in chunks, and receives the reduced vector
// once, written over the input (in place).
//
//   ClientOptions opt;
//   opt.switches = {{*common::Ipv4Addr::Parse("10.0.10.253")}};
//   opt.job_id = 7;
//   opt.job_key = 0x5eed;
//   opt.rank = rank;
//   opt.world = 4;
//   ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(opt));
//   RETURN_IF_ERROR(client->AllReduce(std::span<float>(grad), aggregator::ReduceOp::kSum));
//
//   Pending p = client->Start(std::span<int32_t>(counts), aggregator::ReduceOp::kMax);
//   ...                                       // compute; do not touch `counts`
//   RETURN_IF_ERROR(p.Wait());
//
// Element types: float (float32), Float16, BFloat16, int32_t and bool, with
// the operations docs/protocol.md allows (sum/min/max for numbers, and/or for
// int32_t and bool).
//
// On the wire (docs/protocol.md): chunk k of an allreduce is one CONTRIBUTION
// datagram with the next sequence number of this client (chunking.h); at most
// `window` chunks are unanswered at a time. A chunk still unanswered when three
// chunks sent after it are answered (fast retransmit, once per chunk), or for
// its retransmission timeout (from the measured round trips to its switch, as
// TCP's: RFC 6298), is asked after with a QUERY, a header: the switch answers
// with the chunk's retained result, with a NOTICE "held" while the chunk waits
// for other members (the chunk asks again two round trips later, then at
// doubling intervals up to its timeout while it stays held, only to recover a
// result lost once the slot completes), or with a NOTICE "missing", upon which
// the chunk is resent with the RETRANSMISSION flag (and, at the ack watermark,
// asked after again once three later chunks are answered after that resend).
// The switch also says "missing" unasked when a later chunk of this rank
// arrives while an earlier one's slot still lacks it. A question (or a resend)
// left unanswered for two round trips is asked again; two questions in a row
// left unanswered make the chunk go again. Each timeout of a chunk grows by
// `backoff` up to `max_retransmit_timeout` until the next new result. Every
// contribution carries the ack watermark (every result below it has arrived),
// and an ACK datagram after the last result of each allreduce lets the switch
// free the job's slots (repeated twice, a retransmission timeout apart, while
// no next allreduce starts: slots it leaves held may be another job's). Results
// carry no job key: they are matched by job, sequence number and sender (the
// switch this rank sends to, or local_tan); duplicate results are ignored.
//
// float32 sums travel as int32 fixed point by default (fixed_point.h says how
// the scale is chosen): one extra one-element exchange per allreduce, and
// results that are exact, bit-identical on every rank and independent of
// arrival order. A result flagged OVERFLOW (a saturated int32 sum, possible
// only with a headroom below the default), or an EXCEPTION_RETRANSMIT (the
// parameter node found the sum saturated), is not used: once every chunk has
// its result, the overflowed chunks are redone, in increasing chunk order and
// with new sequence numbers, as float32: with the ORDERED flag through the
// switch, or marked AGGREGATE_AT_PS for the parameter node
// (resend_to_parameter_node). Every rank receives the same answers, so every
// rank redoes the same chunks under the same sequence numbers.
//
// An int32 sum that overflows is never returned as if it were right: the
// switch clamps it to INT32_MAX or INT32_MIN (the protocol's saturation,
// flagged OVERFLOW), and the allreduce fails with kOutOfRange, naming the
// first such chunk and its elements, once every chunk has its result (the
// buffer then holds the clamped values there). stats().saturated_chunks
// counts such chunks, and the switch's aggswitch_aggregation_saturated_sums_total
// the contributions that saturated. A sum of exactly INT32_MAX or INT32_MIN
// is no overflow.
//
// Errors are values. An allreduce fails with:
//   kInvalidArgument     a bad argument (nothing was sent);
//   kFailedPrecondition  the switch refused the job (the NACK's reason is in
//                        the message: unknown job, key mismatch, malformed,
//                        type mismatch, task info conflict), a result is not
//                        the reduction of what this rank sent (see Restarting
//                        a job), or the client cannot go on (below);
//   kResourceExhausted   the switch's job table is full;
//   kUnavailable         no result arrived for `progress_timeout` (a member of
//                        the job stopped, or the switch is unreachable), the
//                        allreduce exceeded `deadline`, or a socket error;
//   kIncomplete          a result lacks members' data: the switch, or the
//                        job's TAN, gave up on them (docs/stragglers.md);
//   kOutOfRange          an int32 sum overflowed (above); the client goes on.
// NACKs that mean "not now" are retried rather than reported: the chunk is
// retransmitted on its timer until the switch takes it or progress_timeout
// passes (the stall message then names the last one); after a "slot quota"
// or "hold quota" refusal it goes again within 2 ms, without backing off. They are "unknown job"
// at a rank that is not its node's control unit in TaskInfoMode::kControlUnit
// (the control unit's announcement may not have reached the switch yet), "rate limited" (in-band
// registrations over the switch's rate), "slot quota" and "hold quota" (the
// job is as far ahead of its slowest rank as the switch lets it be),
// "member bound" (the switch still has this rank bound to the address of its
// previous process; docs/security.md), and "store full" (the root has no room
// yet to deliver a FINAL chunk's result to the job's main server, or the
// job's share of the parameter store is full until copies are released).
// After a failed allreduce the ranks may disagree about sequence numbers, so
// every later allreduce of that client fails at once with
// kFailedPrecondition; create a new client with a new job id.
//
// Restarting a job: the switch keeps a job and the results of its recent
// chunks until the job is removed. A new run of the same job id against the
// same switch must start past the sequence numbers of the previous one
// (first_seq), or use another job id; otherwise it may be handed the earlier
// run's results for the same sequence numbers.
//
// Restarts of the switch: a switch process that dies and comes back (a
// restart, systemd's or an operator's) has lost its slots. Each rank keeps
// the datagrams of its chunks in flight and of as many answered ones, so an
// allreduce rides it out within `progress_timeout`: unanswered chunks are
// asked after and resent to the new process, which knows the job again from
// its config, its state file (jobs added through the API) or the task info
// in the chunks (in-band jobs). A chunk whose result reached only some ranks
// before the switch died is asked again by the new switch of the ranks that
// have it (NOTICE missing about an answered chunk), and they resend what they
// kept (stats().answered_resends). A rank that has finished its last
// allreduce and closed its client can no longer be asked.
//
// Thread safety: Create [any]. AllReduce, Start and stats [any]; the order in
// which Start (or AllReduce) calls are made is the order of the collective,
// which must be the same on every rank, so calls from several threads must be
// ordered by the caller. The destructor [any]: it cancels the running
// allreduce and fails the queued ones with kFailedPrecondition.
// Pending::Wait and WaitFor [any]. One I/O thread per client does all the
// network work; the caller's buffer belongs to it from Start until the
// Pending is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/types.h"
#include "aggregator/wire.h"
#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::client {

namespace internal {
struct Operation;
}  // namespace internal

// A 16-bit float element, its bits as in memory; convert with aggregator/half.h.
// Trivial, like the scalar it stands for.
struct Float16 {
  uint16_t bits;
};
// A bfloat16 element, its bits as in memory; convert with aggregator/half.h.
struct BFloat16 {
  uint16_t bits;
};

// Element types and their wire dtype.
template <typename T>
struct ElementType;
template <>
struct ElementType<float> {
  static constexpr aggregator::DType kDType = aggregator::DType::kFloat32;
};
template <>
struct ElementType<Float16> {
  static constexpr aggregator::DType kDType = aggregator::DType::kFloat16;
};
template <>
struct ElementType<BFloat16> {
  static constexpr aggregator::DType kDType = aggregator::DType::kBFloat16;
};
template <>
struct ElementType<int32_t> {
  static constexpr aggregator::DType kDType = aggregator::DType::kInt32;
};
template <>
struct ElementType<bool> {
  static constexpr aggregator::DType kDType = aggregator::DType::kBool;
};

// A type the client reduces: one with an ElementType whose wire size it has.
template <typename T>
concept Element = sizeof(T) == aggregator::ElementSize(ElementType<T>::kDType);

// A switch's aggregation address and UDP port.
struct SwitchAddress {
  common::Ipv4Addr ip;
  uint16_t port = aggregator::kAggUdpPort;
};

// How the switch learns the job (seed 001).
enum class TaskInfoMode : uint8_t {
  // It is declared in the switch's config (or added with aggctl); datagrams
  // carry no task info.
  kNone,
  // Every contribution carries the TASK_INFO flag with expected = world and
  // node_count, and the switch registers the job from the first one
  // (variant A).
  kInBand,
  // The control unit of each node, the first rank of the node's block (rank
  // 0 with one node), announces the job to its switches with a TASK_INFO
  // datagram, sent again on its timer until the switch echoes it, before its
  // first chunk there; contributions carry no task info. Other ranks'
  // chunks that arrive first are NACKed (unknown job) and retransmitted
  // (variant B).
  kControlUnit,
};

// How float sums travel. min and max of floats always travel as floats: they
// are exact and do not depend on arrival order.
enum class FloatMode : uint8_t {
  // float32 sums as int32 fixed point (fixed_point.h); float16 and bfloat16
  // sums with the ORDERED flag. Results are reproducible bit for bit.
  kFixedPoint,
  // Float sums as floats, reduced in arrival order: the last bits of a result
  // may differ from run to run.
  kFloat,
  // Float sums as floats with the ORDERED flag: reduced in rank order,
  // reproducible bit for bit.
  kFloatOrdered,
};

// How datagrams travel between the client and the switch.
enum class TransportKind : uint8_t {
  // Kernel UDP sockets: works unprivileged, on any interface and route.
  kUdp,
  // An AF_XDP socket on one interface queue, with the client's XDP program
  // on the interface: the switch's answers skip the kernel's network stack,
  // and chunks are built straight into the socket's frames. Needs root (or
  // CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF), an interface that reaches the
  // switches directly or through one gateway, and one queue per client.
  kAfXdp,
};

struct ClientOptions {
  // Where allreduces go: allreduce i goes to switches[SwitchIndex(addr_low,
  // switches.size())] (chunking.h). 1..kMaxSwitches entries.
  std::vector<SwitchAddress> switches;
  // The local address and port of the client's socket (0: any, ephemeral;
  // AF_XDP: the kernel's source address toward switches[0]).
  common::Ipv4Addr bind_ip;
  uint16_t bind_port = 0;

  TransportKind transport = TransportKind::kUdp;
  // AF_XDP: the interface that reaches the switches and its queue (the
  // switch's answers must arrive on that queue: one queue, or steered there).
  std::string interface;
  uint32_t queue = 0;

  // The job: id (> 0) and key, this process's rank (its node_id in the
  // header) and the number of ranks in all (1..kMaxWorld).
  uint32_t job_id = 0;
  uint64_t job_key = 0;
  uint16_t rank = 0;
  uint16_t world = 0;
  TaskInfoMode task_info = TaskInfoMode::kInBand;
  // The nodes the ranks are spread over, each with its own switch:
  // world / node_count ranks at each, node i holding the ranks from
  // i * world / node_count on. 1: one switch, the job's root. With more, the
  // task info says world / node_count members and node_count nodes; each
  // switch sends its partial sum to the upper-tier switch that addr_low picks
  // among its aggregation.upstreams (docs/aggregation.md, "Several nodes"),
  // and every rank gets the sum over all. A divisor of world.
  uint16_t node_count = 1;

  FloatMode float_mode = FloatMode::kFixedPoint;
  // Fixed point: bits of headroom for the sum (fixed_point.h), 0..29; unset:
  // ceil(log2(world)), which cannot overflow.
  std::optional<int> headroom;

  // Chunks unanswered at a time, 1..kMaxWindow. Chunks of one job occupy up to
  // 2 * window consecutive slots of the switch (in flight, plus results held
  // until every rank acknowledged them), so keep it below half of the
  // switch's aggregation.slots.
  uint32_t window = 128;
  // The path MTU (kMinMtu..kMaxMtu; chunking.h): a contribution fills an IPv4
  // packet of this size. AF_XDP: at most the interface's MTU and
  // kMaxAfXdpMtu (a 4 KiB frame).
  uint32_t mtu = 1500;
  // At most this many elements per chunk; 0: as many as the MTU holds.
  uint32_t max_chunk_elements = 0;
  // Room left in every chunk for a missing list of this many node ids, which
  // a switch's partial carries upstream when members time out
  // (docs/stragglers.md); 0..255. 0 suits a single switch with no timers.
  uint32_t reserve_missing_ids = aggregator::kDefaultReservedMissingIds;

  // Retransmission (RFC 6298, per switch): a chunk unanswered for the
  // smoothed round trip of its switch's chunks plus four times their
  // variation is resent. `retransmit_timeout` is the timeout before the
  // first round trip is measured; every timeout stays between the floor
  // (`min_retransmit_timeout`, or `retransmit_timeout` when smaller) and
  // `max_retransmit_timeout`. Each resend of a chunk multiplies its own
  // timeout by `backoff` (>= 1) until the next new result, which undoes it.
  // Most losses are resent on three later results, without a timeout; the
  // floor is what a loss at the head of the window costs when that cannot
  // happen. A timeout too early costs a QUERY (a header), not a resend.
  std::chrono::microseconds retransmit_timeout{20'000};
  std::chrono::microseconds min_retransmit_timeout{5'000};
  double backoff = 2.0;
  std::chrono::microseconds max_retransmit_timeout{1'000'000};
  // The job's root switch has a parameter node (its TAN is an agg-ps;
  // docs/parameter-node.md): data resent after a loss is marked
  // AGGREGATE_AT_PS (and RETRANSMISSION), so no switch reduces it. A chunk
  // the switch holds part of is then released to the parameter node, which
  // completes it from the switch's partial and the resends. A job whose root
  // has no parameter node refuses such data (NACK no_parameter_node). The
  // float32 redo of a chunk whose fixed-point sum overflowed goes there too,
  // marked AGGREGATE_AT_PS (not ORDERED): the parameter node reduces it in
  // rank order.
  bool resend_to_parameter_node = false;
  // Task info (kInBand, kControlUnit) asks for verify mode: the root sends
  // every complete chunk to the job's parameter node to be checked, and the
  // members receive only its answers (docs/parameter-node.md). The switch
  // refuses a registration without a parameter node (NACK
  // no_parameter_node). A job the switch knows already keeps its mode.
  bool verify = false;
  // An allreduce fails when no result arrives for this long.
  std::chrono::milliseconds progress_timeout{10'000};
  // An allreduce fails when it takes longer than this; 0: no limit.
  std::chrono::milliseconds deadline{0};

  // This rank's process also runs the job's TAN, and its switch lists it
  // without a bypass entry when it is late (jobs[].tan_member; case 2 of "the
  // TAN is late", docs/stragglers.md). Every contribution (first
  // transmissions and retransmissions) is offered here before it is sent;
  // when this returns true the TAN took it as this rank's late data and it is
  // not sent. Called on the client's I/O thread with the whole datagram.
  // Empty: every contribution goes to the switch.
  std::function<bool(const uint8_t* datagram, uint32_t length)> offer_to_local_tan;
  // Where that TAN sends from: its results for this rank are taken like the
  // switch's. Every other answer must come from the switch (the address and
  // port this rank sends to); anything else is a stray datagram.
  std::optional<SwitchAddress> local_tan;

  // The sequence number of the client's first chunk. Every rank must use the
  // same.
  uint32_t first_seq = 0;
  // This process's incarnation: which run of the job it is
  // (docs/protocol.md, "Runs"). Every datagram carries it and every answer
  // must; a rank that comes to the switch with a new one starts a new run of
  // the job there, and the ranks of the old run are refused from then on
  // (NACK run_ended). 0: drawn at random when the client starts, so that a
  // new process is a new run. Set it to replay a run exactly (the fabric
  // simulator does); two processes must never share one.
  uint32_t incarnation = 0;
  // The run's id, the same at every rank of this run of the job and another
  // at the next run (a launcher's: SLURM_JOB_ID with its restart count,
  // TORCHELASTIC_RUN_ID, a number rank 0 drew and broadcast). Not 0: it is
  // the incarnation of every rank, and the switch tells a new run from the
  // last one even by a rank that never sent in the last one, such as the
  // successor of a rank that died before it sent anything (with random
  // incarnations, such a rank's chunks may be completed with the last run's
  // leftovers; docs/protocol.md, "Runs"). 0: none.
  uint32_t run_id = 0;
};

// "a.b.c.d" or "a.b.c.d:port" (port 1..65535; kAggUdpPort when absent). [any]
common::Result<SwitchAddress> ParseSwitchAddress(std::string_view text);

inline constexpr size_t kMaxSwitches = 64;
inline constexpr uint16_t kMaxWorld = 1024;
inline constexpr uint32_t kMaxWindow = 2048;
inline constexpr uint32_t kMaxAfXdpMtu = 3826;

// Every range and cross-field check of the options. [any]
common::Status ValidateClientOptions(const ClientOptions& options);

// What a client did so far; monotonic counters.
struct ClientStats {
  uint64_t allreduces = 0;         // completed
  uint64_t chunks = 0;             // contributions sent (first transmissions)
  uint64_t retransmissions = 0;    // contributions and announcements sent again
  uint64_t results = 0;            // first results of chunks
  uint64_t duplicate_results = 0;  // results of chunks already answered
  uint64_t stray_datagrams = 0;    // not for a chunk in flight, not parseable, other jobs or runs
  uint64_t transient_nacks = 0;    // "not now" NACKs, retried (see Errors above)
  uint64_t scale_exchanges = 0;    // fixed-point exponent exchanges
  uint64_t float_fallbacks = 0;    // fixed-point allreduces sent as float32: NaN or Inf in the data
  uint64_t overflow_redos = 0;     // chunks redone in float32 after an OVERFLOW result
  uint64_t saturated_chunks = 0;   // int32 results that came back saturated
  uint64_t notices = 0;            // NOTICEs: start or stop flagging contributions BYPASS
  uint64_t kept_local = 0;         // contributions offer_to_local_tan took (not sent)
  // Datagrams for this client that were dropped before it read them: the
  // kernel's socket buffer was full (UDP), or the AF_XDP socket's receive
  // ring was full or its fill ring empty.
  uint64_t receive_drops = 0;
  // Retransmissions and QUERYs the switch answered with NOTICE "held": the
  // chunk had arrived and its slot waited for other members.
  uint64_t held_notices = 0;
  // QUERYs: a chunk's timeout asks the switch about it (a header) before its
  // data goes again; and the answers that the switch lacked it.
  uint64_t queries = 0;
  uint64_t missing_notices = 0;
  // Contributions sent again after their chunk's result had arrived: the
  // switch said it lacked them. It restarted after sending that result to
  // some members only, and the others cannot complete the chunk without
  // this rank's data (see Restarts of the switch above).
  uint64_t answered_resends = 0;
  // NOTICEs relocated: a chunk's slot held another chunk and the switch
  // moved it to a spare slot, whose hint its later datagrams carry.
  uint64_t relocated_notices = 0;
  // The switch of the last allreduce: its chunks' smoothed round trip (0
  // before the first measurement) and the retransmission timeout it gives.
  uint64_t round_trip_us = 0;
  uint64_t retransmit_timeout_us = 0;
};

// One allreduce started with Client::Start.
class [[nodiscard]] Pending {
 public:
  Pending() = default;

  // Whether this handle refers to an allreduce.
  bool valid() const { return op_ != nullptr; }
  // Blocks until the allreduce finished and returns its status; again on
  // every call. valid() must hold. [any]
  common::Status Wait() const;
  // Waits at most `timeout`; true when the allreduce finished. [any]
  bool WaitFor(std::chrono::nanoseconds timeout) const;

 private:
  friend class Client;
  explicit Pending(std::shared_ptr<internal::Operation> op) : op_(std::move(op)) {}
  std::shared_ptr<internal::Operation> op_;
};

class Client {
 public:
  // Validates the options, opens the socket and starts the I/O thread. [any]
  static common::Result<std::unique_ptr<Client>> Create(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Reduces `data` over every rank with `op`, in place; blocks until done.
  // addr_low: the number that picks the switch (chunking.h); unset: the index
  // of this call among the client's calls. [any]
  template <Element T>
  common::Status AllReduce(std::span<T> data, aggregator::ReduceOp op,
                           std::optional<uint32_t> addr_low = std::nullopt) {
    return Start(data, op, addr_low).Wait();
  }

  // As AllReduce, but returns once the allreduce is queued. Allreduces run
  // one after the other in the order they were started. [any]
  template <Element T>
  Pending Start(std::span<T> data, aggregator::ReduceOp op,
                std::optional<uint32_t> addr_low = std::nullopt) {
    return StartRaw(ElementType<T>::kDType, data.data(), data.size(), op, addr_low);
  }

  // As Start, for a buffer whose element type is known at run time (a
  // language binding's): `count` elements of `dtype` at `data`. [any]
  Pending StartRaw(aggregator::DType dtype, void* data, size_t count, aggregator::ReduceOp op,
                   std::optional<uint32_t> addr_low = std::nullopt);

  // Elements per chunk for `dtype` with this client's options. [any]
  uint32_t ChunkElements(aggregator::DType dtype) const;
  // The local UDP port the client sends from and receives on. [any]
  uint16_t local_port() const;
  // How datagrams travel: "udp", "udp, segmentation offload" (runs of
  // chunks go down the stack as one send: UDP GSO), or "af_xdp veth0 queue
  // 0, copy mode, native XDP". [any]
  const std::string& transport_description() const;
  const ClientOptions& options() const;
  ClientStats stats() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace aggswitch::client
