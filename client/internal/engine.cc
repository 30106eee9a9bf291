#include "client/internal/engine.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>

#include "client/fixed_point.h"
#include "client/internal/udp_socket.h"
#include "client/internal/xdp_socket.h"

namespace aggswitch::client::internal {

using aggregator::AggFields;
using aggregator::AggHeader;
using aggregator::DType;
using aggregator::NackReason;
using aggregator::Opcode;
using aggregator::ReduceOp;
namespace flags = aggregator::flags;

namespace {

// What a NACK's reason means to a worker, and what to do about it.
struct NackText {
  const char* name;
  const char* hint;
};

NackText DescribeNack(uint32_t reason) {
  switch (static_cast<NackReason>(reason)) {
    case NackReason::kUnknownJob:
      return {"unknown job",
              "declare the job in the switch's config, or send task info (in band or from a "
              "control unit) to a switch with in_band_registration on"};
    case NackReason::kKeyMismatch:
      return {"key mismatch", "the switch knows the job with another key"};
    case NackReason::kMalformed:
      return {"malformed",
              "the rank is not below the job's member count at the switch, a chunk is larger "
              "than the switch's MTU, or the task info is out of range"};
    case NackReason::kJobTableFull:
      return {"job table full", "the switch holds aggregation.max_jobs jobs"};
    case NackReason::kTypeMismatch:
      return {"type mismatch",
              "another rank sent this chunk with another dtype, op, scale or length: every rank "
              "must call the same allreduces in the same order"};
    case NackReason::kTaskInfoConflict:
      return {"task info conflict",
              "the switch knows the job with another member count or node count, or (several "
              "nodes) with a block of ranks that does not hold this one: every rank must pass "
              "the same world and node_count, and node i must hold ranks i*world/node_count "
              "and up"};
    case NackReason::kRateLimited:
      return {"registration rate limited",
              "the switch takes in-band registrations from this host (or in all) at a bounded "
              "rate (aggregation.in_band.per_source, .total); declare the job in its config or "
              "API to skip them"};
    case NackReason::kInBandFull:
      return {"in-band jobs full",
              "the switch holds aggregation.in_band.max_jobs in-band jobs; they expire when idle, "
              "or declare the job in its config or API"};
    case NackReason::kSlotQuota:
      return {"slot quota",
              "the chunk lies further ahead of the job's slowest member than the job's slot quota "
              "(aggregation.slots_per_job, in_band.slots_per_job): a member is behind, or "
              "--window is larger than the quota"};
    case NackReason::kHoldQuota:
      return {"hold quota",
              "the job, or the switch, holds as many ordered contributions as it may "
              "(aggregation.hold, in_band.held_per_job): a member is behind"};
    case NackReason::kMemberBound:
      return {"member bound elsewhere",
              "the switch has this rank bound to another address (another process sends as "
              "this rank, or this one restarted): it rebinds after "
              "aggregation.member_rebind_ms of silence from the old one, or through the API"};
    case NackReason::kNoUpstream:
      return {"no upstream",
              "the task info says more than one node takes part, and this switch has no "
              "upper-tier switch to send its partial sum to: run the job with node_count 1, list "
              "the upper switches in its aggregation.upstreams, or declare the job on the "
              "switches with an upstream (aggregation.jobs[].upstream)"};
    case NackReason::kSlotBusy:
      return {"slot busy",
              "the chunk's slot holds another job's chunk and every spare slot is leased "
              "(aggregation.spare_slots): too many jobs share too few slots"};
    case NackReason::kNoParameterNode:
      return {"no parameter node",
              "data marked for aggregation at the parameter node reached the root switch of a "
              "job without one: give the job a remote TAN (aggregation.jobs[].tan, an agg-ps) "
              "or do not mark its data"};
    case NackReason::kMembersUnbound:
      return {"members unbound",
              "a DISTRIBUTE reached a job one of whose members has not sent from its address "
              "yet; send again once every member has"};
    case NackReason::kNotMainServer:
      return {"not the main server",
              "a DISTRIBUTE came from another address than the job's main_server, or the job "
              "has none"};
    case NackReason::kStoreFull:
      return {"store full",
              "the job's share of the switch's parameter store (aggregation.store.per_job), or the "
              "store, is full; nothing of the contribution was kept or reduced: FETCH with RELEASE "
              "frees kept copies"};
    case NackReason::kNotStored:
      return {"not stored",
              "a FETCH asked for a contribution the switch does not keep: never stored, released, "
              "or the job is not in store or both mode"};
    case NackReason::kNewRun:
      return {"new run",
              "the switch was starting a new run of the job for this process, and still is"};
    case NackReason::kRunEnded:
      return {"run ended",
              "a process of a newer run of this job (the same job id, started again) took the "
              "job at the switch, and this process belongs to the run that ended: stop it, or "
              "restart every rank of the job together"};
    case NackReason::kResultLost:
      return {"result lost",
              "the switch restarted after sending this chunk's result to other ranks only, and a "
              "float sum in arrival order cannot be reduced again to the bytes they hold: run the "
              "allreduce again, or use ordered floats or fixed point, which the switch reduces "
              "again bit for bit"};
    case NackReason::kAddrLowMismatch:
      return {"addr_low mismatch",
              "the members of a chunk carry different addr_low values (the low bits of their "
              "buffers' addresses, which choose the switch): every rank must pass the same "
              "addr_low to the same allreduce"};
  }
  return {"unknown reason", "a NACK reason this client does not know"};
}

// A new process is a new run: its incarnation is random, and never 0 (none).
uint32_t DrawIncarnation() {
  std::random_device device;
  uint32_t incarnation = 0;
  while (incarnation == 0) incarnation = device();
  return incarnation;
}

// The ranks at each node's switch: the task info's `expected`.
uint16_t RanksPerNode(const ClientOptions& o) {
  return static_cast<uint16_t>(o.world / o.node_count);
}

bool IsFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

}  // namespace

uint32_t Engine::SendBuffers(const ClientOptions& options) {
  // Two send buffers per window entry (the chunks in flight, and as many
  // answered ones kept for a switch that restarts), one for ACKs, and
  // kQueryBuffers for QUERYs.
  return KeptBuffers(options.window) + 1 + kQueryBuffers;
}

common::Result<std::unique_ptr<Engine>> Engine::Create(const ClientOptions& options,
                                                       std::unique_ptr<Transport> transport,
                                                       std::string description,
                                                       const common::Clock& clock) {
  return std::unique_ptr<Engine>(
      new Engine(options, std::move(transport), std::move(description), clock));
}

common::Result<std::unique_ptr<Engine>> Engine::Create(const ClientOptions& options) {
  const uint32_t send_buffers = SendBuffers(options);
  std::unique_ptr<Transport> transport;
  std::string description = "udp";
  if (options.transport == TransportKind::kAfXdp) {
    XdpSocket::Options o;
    o.interface = options.interface;
    o.queue = options.queue;
    o.bind_ip = options.bind_ip;
    o.bind_port = options.bind_port;
    o.mtu = options.mtu;
    o.send_buffers = send_buffers;
    for (const SwitchAddress& s : options.switches) o.destinations.push_back(s.ip);
    ASSIGN_OR_RETURN(std::unique_ptr<XdpSocket> socket, XdpSocket::Open(o));
    description = socket->description();
    transport = std::move(socket);
  } else {
    UdpSocket::Options o;
    o.bind_ip = options.bind_ip;
    o.bind_port = options.bind_port;
    o.mtu = options.mtu;
    o.send_buffers = send_buffers;
    ASSIGN_OR_RETURN(std::unique_ptr<UdpSocket> socket, UdpSocket::Open(o));
    if (socket->segmentation_offload()) description = "udp, segmentation offload";
    transport = std::move(socket);
  }
  return Create(options, std::move(transport), std::move(description), common::SteadyClock());
}

Engine::Engine(const ClientOptions& options, std::unique_ptr<Transport> transport,
               std::string transport_description, const common::Clock& clock)
    : options_(options),
      clock_(clock),
      headroom_(options.headroom.value_or(DefaultHeadroom(options.world))),
      transport_(std::move(transport)),
      transport_description_(std::move(transport_description)),
      next_seq_(options.first_seq),
      incarnation_(options.run_id != 0        ? options.run_id
                   : options.incarnation != 0 ? options.incarnation
                                              : DrawIncarnation()),
      run_flag_(options.run_id != 0 ? flags::kRunId : 0) {
  if (options.local_tan) {
    local_tan_.sin_family = AF_INET;
    local_tan_.sin_addr.s_addr = htonl(options.local_tan->ip.addr);
    local_tan_.sin_port = htons(options.local_tan->port);
  }
  RetransmitTimer::Params timer;
  timer.initial = options.retransmit_timeout;
  timer.min = std::min<Clock::duration>(options.min_retransmit_timeout, options.retransmit_timeout);
  timer.max = options.max_retransmit_timeout;
  for (const SwitchAddress& s : options.switches) {
    Lane lane;
    lane.timer = RetransmitTimer(timer);
    lane.addr.sin_family = AF_INET;
    lane.addr.sin_addr.s_addr = htonl(s.ip.addr);
    lane.addr.sin_port = htons(s.port);
    lane.name = s.ip.ToString() + ":" + std::to_string(s.port);
    lanes_.push_back(std::move(lane));
  }
  window_params_.window = options.window;
  window_params_.query = true;
  window_params_.max_timeout = options.max_retransmit_timeout;
  window_params_.backoff = options.backoff;
  send_mask_ = KeptBuffers(options.window) - 1;
}

void Engine::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  transport_->Wake();
}

ClientStats Engine::Stats() const {
  const auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  ClientStats s;
  s.allreduces = get(counters_.allreduces);
  s.chunks = get(counters_.chunks);
  s.retransmissions = get(counters_.retransmissions);
  s.results = get(counters_.results);
  s.duplicate_results = get(counters_.duplicate_results);
  const TransportStats transport = transport_->stats();
  s.stray_datagrams = get(counters_.stray_datagrams) + transport.malformed;
  s.transient_nacks = get(counters_.transient_nacks);
  s.scale_exchanges = get(counters_.scale_exchanges);
  s.float_fallbacks = get(counters_.float_fallbacks);
  s.overflow_redos = get(counters_.overflow_redos);
  s.saturated_chunks = get(counters_.saturated_chunks);
  s.notices = get(counters_.notices);
  s.kept_local = get(counters_.kept_local);
  s.receive_drops = transport.rx_dropped;
  s.held_notices = get(counters_.held_notices);
  s.queries = get(counters_.queries);
  s.missing_notices = get(counters_.missing_notices);
  s.answered_resends = get(counters_.answered_resends);
  s.relocated_notices = get(counters_.relocated_notices);
  s.round_trip_us = get(counters_.round_trip_us);
  s.retransmit_timeout_us = get(counters_.retransmit_timeout_us);
  return s;
}

common::Status Engine::Run(const Request& r) {
  op_deadline_ =
      options_.deadline.count() > 0 ? clock_.Now() + options_.deadline : Clock::time_point::max();
  addr_low_ = r.addr_low;
  ack_repeats_left_ = 0;  // this allreduce's datagrams carry the watermark
  Lane& lane = lanes_[SwitchIndex(r.addr_low, lanes_.size())];
  if (options_.task_info == TaskInfoMode::kControlUnit && ControlUnit() && !lane.announced) {
    Phase announce;
    announce.kind = Phase::Kind::kAnnounce;
    RETURN_IF_ERROR(Transfer(lane, announce));
    lane.announced = true;
  }
  const uint32_t per_chunk = ChunkElementsFor(options_, r.dtype);
  saturated_ = 0;
  if (r.dtype == DType::kFloat32 && r.op == ReduceOp::kSum &&
      options_.float_mode == FloatMode::kFixedPoint) {
    RETURN_IF_ERROR(RunFixedPointSum(lane, r, per_chunk));
  } else {
    Phase p;
    p.dtype = r.dtype;
    p.op = r.op;
    const bool ordered =
        IsFloat(r.dtype) && r.op == ReduceOp::kSum && options_.float_mode != FloatMode::kFloat;
    p.flags = static_cast<uint16_t>((ordered ? flags::kOrdered : 0) | (r.final ? flags::kFinal : 0));
    p.data = static_cast<uint8_t*>(r.data);
    p.count = r.count;
    p.per_chunk = per_chunk;
    p.chunks = static_cast<uint32_t>(ChunkCount(r.count, per_chunk));
    RETURN_IF_ERROR(Transfer(lane, p));
  }
  SendAck(lane);
  Bump(counters_.allreduces);
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  counters_.round_trip_us.store(duration_cast<microseconds>(lane.timer.srtt()).count(),
                                std::memory_order_relaxed);
  counters_.retransmit_timeout_us.store(duration_cast<microseconds>(lane.timer.timeout()).count(),
                                        std::memory_order_relaxed);
  if (saturated_ != 0) {
    // Every rank got the same flags: the allreduce is complete everywhere,
    // and the sums it returns are wrong where they saturated.
    const size_t first = size_t{first_saturated_chunk_} * per_chunk;
    return common::OutOfRange(
        "the int32 sum overflowed in " + std::to_string(saturated_) + " of " +
        std::to_string(ChunkCount(r.count, per_chunk)) + " chunks (the first: chunk seq " +
        std::to_string(first_saturated_seq_) + " of job " + std::to_string(options_.job_id) +
        ", elements " + std::to_string(first) + ".." +
        std::to_string(std::min(first + per_chunk, r.count) - 1) +
        "): the switch clamps an int32 sum beyond its range to INT32_MAX or INT32_MIN, so "
        "those elements hold clamped values, not the sum; reduce smaller integers, or floats");
  }
  return common::Status::Ok();
}

common::Status Engine::RunFixedPointSum(Lane& lane, const Request& r, uint32_t per_chunk) {
  auto* floats = static_cast<float*>(r.data);
  // The exponent exchange: one int32 element, reduced with max.
  exponent_ = MaxExponent({floats, r.count});
  Phase exchange;
  exchange.dtype = DType::kInt32;
  exchange.op = ReduceOp::kMax;
  exchange.data = reinterpret_cast<uint8_t*>(&exponent_);
  exchange.count = 1;
  RETURN_IF_ERROR(Transfer(lane, exchange));
  Bump(counters_.scale_exchanges);

  Phase data;
  data.op = ReduceOp::kSum;
  const uint16_t final_flag = r.final ? flags::kFinal : 0;
  data.data = static_cast<uint8_t*>(r.data);
  data.count = r.count;
  data.per_chunk = per_chunk;
  data.chunks = static_cast<uint32_t>(ChunkCount(r.count, per_chunk));
  const std::optional<int8_t> scale = FixedPointScale(exponent_, headroom_);
  if (!scale) {  // NaN or Inf somewhere: no fixed point holds it
    Bump(counters_.float_fallbacks);
    data.dtype = DType::kFloat32;
    data.flags = static_cast<uint16_t>(flags::kOrdered | final_flag);
    return Transfer(lane, data);
  }
  data.kind = Phase::Kind::kFixedPoint;
  data.dtype = DType::kInt32;
  data.scale = *scale;
  data.flags = final_flag;
  redo_.clear();
  RETURN_IF_ERROR(Transfer(lane, data));
  if (redo_.empty()) return common::Status::Ok();

  // Every rank received the same OVERFLOW flags, so every rank redoes the
  // same chunks, in the same (increasing) order, under the same sequence
  // numbers, whatever order its results arrived in.
  std::sort(redo_.begin(), redo_.end());
  Bump(counters_.overflow_redos, redo_.size());
  Phase redo = data;
  redo.kind = Phase::Kind::kCopy;
  redo.dtype = DType::kFloat32;
  redo.scale = 0;
  // The parameter node reduces direct data in rank order: as exact a
  // float32 sum as an ordered one through the switch.
  redo.flags = static_cast<uint16_t>(
      (options_.resend_to_parameter_node ? flags::kAggregateAtPs : flags::kOrdered) | final_flag);
  redo.chunk_map = redo_.data();
  redo.chunks = static_cast<uint32_t>(redo_.size());
  return Transfer(lane, redo);
}

uint32_t Engine::ChunkLength(const Phase& phase, uint32_t m) {
  return static_cast<uint32_t>(
      std::min<size_t>(phase.per_chunk, phase.count - ChunkStart(phase, m)));
}

common::Status Engine::Transfer(Lane& lane, const Phase& phase) {
  SendWindow::Params params = window_params_;
  params.query = phase.kind != Phase::Kind::kAnnounce;  // its echo is its answer
  window_.Reset(next_seq_, phase.chunks, params);
  window_.SetProbe(lane.timer.probe());
  if (phase.kind != Phase::Kind::kAnnounce) next_seq_ += phase.chunks;
  out_first_ = 0;
  out_n_ = 0;
  held_known_ = false;
  last_progress_ = clock_.Now();
  for (;;) {
    // Take in everything waiting first: results make room in the window.
    for (;;) {
      ASSIGN_OR_RETURN(const std::span<const InDatagram> in, transport_->Receive());
      for (const InDatagram& d : in) {
        RETURN_IF_ERROR(OnDatagram(lane, phase, d.from, d.data, d.length));
      }
      if (in.size() < Transport::kBatch) break;
    }
    if (window_.Done()) return common::Status::Ok();
    if (stop_.load(std::memory_order_relaxed)) {
      return common::FailedPrecondition("the client was destroyed during the allreduce");
    }
    const Clock::time_point now = clock_.Now();
    const Clock::time_point stalled = last_progress_ + options_.progress_timeout;
    if (now >= stalled) return common::Unavailable(StallMessage(lane, phase));
    // A held chunk's questions back off up to a second, and so may the wait
    // after a refused chunk's resend that went unanswered: it is asked once
    // more before the rank gives up, in time for the answer.
    window_.AskBy(stalled - lane.timer.probe());
    if (now >= op_deadline_) {
      return common::Unavailable("the allreduce exceeded its deadline of " +
                                 std::to_string(options_.deadline.count()) + " ms (switch " +
                                 lane.name + ", job " + std::to_string(options_.job_id) + ", " +
                                 std::to_string(window_.acked()) + " of " +
                                 std::to_string(window_.chunks()) + " chunks answered)");
    }
    if (out_n_ == 0) PlanSends(lane, phase, now);
    if (out_n_ > 0) {
      ASSIGN_OR_RETURN(const uint32_t taken, transport_->Send(out_ + out_first_, out_n_));
      out_first_ += taken;
      out_n_ -= taken;
      if (out_n_ == 0) continue;  // all sent: there may be more to send at once
    }
    // The window is full and nothing is due, the transport's queue is full,
    // or the next chunk's buffer is still being sent.
    const Clock::time_point wake = std::min({window_.NextDue(), stalled, op_deadline_});
    RETURN_IF_ERROR(transport_->Wait(wake, out_n_ > 0));
  }
}

void Engine::PlanSends(Lane& lane, const Phase& phase, Clock::time_point now) {
  const uint32_t ack = window_.ack_watermark();
  // Answered chunks the switch asked for again go first: members wait on them.
  uint32_t kept = 0;
  for (uint32_t i = 0; i < answered_asked_n_; ++i) {
    const uint32_t seq = answered_asked_[i];
    uint8_t* buf = transport_->send_buffer(seq & send_mask_);
    auto* h = reinterpret_cast<AggHeader*>(buf);
    // Still that chunk's datagram (no later one took its buffer since the
    // notice), and no earlier send of it is still being read.
    if (h->seq.host() != seq || !transport_->SendBufferFree(seq & send_mask_)) continue;
    h->ack_watermark = common::be32_t::FromHost(ack);
    h->flags = common::be16_t::FromHost(h->flags.host() | flags::kRetransmission);
    out_[kept++] = OutDatagram{&lane.addr, buf,
                               DatagramBytes(static_cast<DType>(h->dtype), h->elem_count.host())};
    Bump(counters_.answered_resends);
  }
  answered_asked_n_ = 0;
  const uint32_t due = window_.TakeDue(now, due_, Transport::kBatch - kept);
  uint32_t n = kept + due;
  for (uint32_t d = 0; d < due; ++d) {
    const uint32_t i = kept + d;
    uint8_t* buf = WindowBuffer(due_[d].chunk);
    auto* h = reinterpret_cast<AggHeader*>(buf);
    h->ack_watermark = common::be32_t::FromHost(ack);
    uint8_t* query = due_[d].query ? QueryBuffer() : nullptr;
    if (query != nullptr) {
      // The chunk's header without its data, as a QUERY.
      std::memcpy(query, buf, sizeof(AggHeader));
      auto* q = reinterpret_cast<AggHeader*>(query);
      q->opcode = static_cast<uint8_t>(Opcode::kQuery);
      q->elem_count = common::be16_t::FromHost(0);
      q->missing_count = 0;
      out_[i] = OutDatagram{&lane.addr, query, sizeof(AggHeader)};
      Bump(counters_.queries);
      continue;
    }
    uint16_t resend_flags = h->flags.host() | flags::kRetransmission;
    if (options_.resend_to_parameter_node && !due_[d].refused &&
        h->opcode == static_cast<uint8_t>(Opcode::kContribution)) {
      // For the parameter node: how many ranks the whole allreduce has, in
      // place of the task info (the switch knows the job by now; if it does
      // not, its NACK unknown job puts the task info back: OnNack). Not a
      // control unit's TASK_INFO: that is no data, and must keep saying
      // what the job is. Nor data the switch refused for now (a quota, a
      // busy slot, a new run): nothing of it was lost, and it goes where it
      // went.
      resend_flags = static_cast<uint16_t>((resend_flags | flags::kAggregateAtPs) &
                                           ~flags::kTaskInfo);
      h->expected = common::be16_t::FromHost(options_.world);
      h->node_count = common::be16_t::FromHost(0);
    }
    h->flags = common::be16_t::FromHost(resend_flags);
    out_[i] = OutDatagram{&lane.addr, buf, DatagramBytes(phase.dtype, h->elem_count.host())};
    Bump(counters_.retransmissions);
  }
  while (n < Transport::kBatch && window_.CanSend() &&
         transport_->SendBufferFree(window_.Seq(window_.sent()) & send_mask_)) {
    const uint32_t k = window_.MarkSent(now, lane.timer.timeout());
    uint8_t* buf = WindowBuffer(k);
    out_[n++] = OutDatagram{&lane.addr, buf, BuildDatagram(phase, k, buf)};
    reinterpret_cast<AggHeader*>(buf)->slot_hint = common::be16_t::FromHost(lane.move_hint);
    if (phase.kind != Phase::Kind::kAnnounce) Bump(counters_.chunks);
  }
  if (options_.offer_to_local_tan && phase.kind != Phase::Kind::kAnnounce) {
    // The TAN in this process takes the data it is waiting for; the rest,
    // and every QUERY, goes out.
    uint32_t kept = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const auto opcode = static_cast<Opcode>(reinterpret_cast<const AggHeader*>(out_[i].data)->opcode);
      if (opcode == Opcode::kContribution &&
          options_.offer_to_local_tan(out_[i].data, out_[i].length)) {
        Bump(counters_.kept_local);
      } else {
        out_[kept++] = out_[i];
      }
    }
    n = kept;
  }
  out_first_ = 0;
  out_n_ = n;
}

uint32_t Engine::BuildDatagram(const Phase& phase, uint32_t k, uint8_t* buf) const {
  AggFields f;
  f.node_id = options_.rank;
  f.job_id = options_.job_id;
  f.seq = window_.Seq(k);
  f.job_key = options_.job_key;
  f.ack_watermark = window_.ack_watermark();
  f.addr_low = addr_low_;
  f.incarnation = incarnation_;
  auto* header = reinterpret_cast<AggHeader*>(buf);
  if (phase.kind == Phase::Kind::kAnnounce) {
    f.opcode = Opcode::kTaskInfo;
    f.flags = flags::kTaskInfo | (options_.verify ? flags::kVerifyMode : 0) | run_flag_;
    f.expected = RanksPerNode(options_);
    f.node_count = options_.node_count;
    aggregator::WriteAggHeader(f, 0, header);
    return sizeof(AggHeader);
  }
  // Data for the parameter node says how many ranks the allreduce has in
  // place of the task info.
  const bool at_ps = (phase.flags & flags::kAggregateAtPs) != 0;
  const bool in_band = options_.task_info == TaskInfoMode::kInBand && !at_ps;
  f.opcode = Opcode::kContribution;
  f.flags = phase.flags | (in_band ? flags::kTaskInfo : 0) |
            (in_band && options_.verify ? flags::kVerifyMode : 0) |
            (self_flag_ && !at_ps ? flags::kBypass : 0) | run_flag_;
  if (at_ps) {
    f.expected = options_.world;
  } else if (in_band) {
    f.expected = RanksPerNode(options_);
    f.node_count = options_.node_count;
  }
  const uint32_t m = phase.chunk_map != nullptr ? phase.chunk_map[k] : k;
  const uint32_t n = ChunkLength(phase, m);
  f.elem_count = static_cast<uint16_t>(n);
  f.dtype = phase.dtype;
  f.op = phase.op;
  f.scale = phase.scale;
  f.aux = static_cast<uint32_t>(ChunkStart(phase, m));  // docs/protocol.md: the chunk's offset
  aggregator::WriteAggHeader(f, 0, header);
  uint8_t* payload = buf + sizeof(AggHeader);
  if (phase.kind == Phase::Kind::kFixedPoint) {
    const float* in = reinterpret_cast<const float*>(phase.data) + ChunkStart(phase, m);
    EncodeFixed({in, n}, phase.scale, payload);
  } else {
    const size_t size = aggregator::ElementSize(phase.dtype);
    std::memcpy(payload, phase.data + ChunkStart(phase, m) * size, n * size);
  }
  return DatagramBytes(phase.dtype, n);
}

common::Status Engine::OnDatagram(Lane& lane, const Phase& phase, const sockaddr_in& from,
                                  const uint8_t* data, uint32_t len) {
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(data, len, &pkt) != aggregator::WireError::kOk) {
    Bump(counters_.stray_datagrams);
    return common::Status::Ok();
  }
  const AggHeader& h = *pkt.header;
  // Answers carry no job key (a copy that reaches somebody else gives it
  // away to nobody): what makes one this rank's is who sent it, the switch
  // it sends to (which drops frames forged with its addresses), or this
  // process's own TAN.
  const bool from_switch = from.sin_addr.s_addr == lane.addr.sin_addr.s_addr &&
                           from.sin_port == lane.addr.sin_port;
  const bool from_own_tan = local_tan_.sin_port != 0 &&
                            from.sin_addr.s_addr == local_tan_.sin_addr.s_addr &&
                            from.sin_port == local_tan_.sin_port;
  // And each answers this process's run: whatever the switch sends a
  // member carries the member's incarnation (docs/protocol.md, "Runs").
  if (h.job_id.host() == options_.job_id && (from_switch || from_own_tan) &&
      h.incarnation.host() == incarnation_) {
    switch (pkt.opcode) {
      case Opcode::kResult:
      case Opcode::kExceptionRetransmit:  // a saturated sum, flagged OVERFLOW: redone
        if (phase.kind != Phase::Kind::kAnnounce) return OnResult(lane, phase, pkt);
        break;
      case Opcode::kTaskInfo: {
        uint32_t k;
        Clock::duration rtt;
        const Clock::time_point now = clock_.Now();
        if (phase.kind == Phase::Kind::kAnnounce && h.node_id.host() == options_.rank &&
            window_.Complete(h.seq.host(), now, &k, &rtt) == SendWindow::Match::kNew) {
          lane.timer.OnResult(rtt);
          last_progress_ = now;
          return common::Status::Ok();
        }
        break;
      }
      case Opcode::kNack:
        if (h.node_id.host() == options_.rank) return OnNack(lane, phase, h);
        break;
      case Opcode::kNotice:
        if (h.node_id.host() == options_.rank) {
          OnNotice(h);
          return common::Status::Ok();
        }
        break;
      default:
        break;
    }
  }
  Bump(counters_.stray_datagrams);
  return common::Status::Ok();
}

bool Engine::KeptAnswered(uint32_t seq) {
  // Sent before every chunk still to come (those of the running transfer
  // and the ones it has yet to send) and not outstanding: answered.
  if (!aggregator::SeqBefore(seq, window_.Seq(window_.sent()))) return false;
  const uint32_t k = seq - window_.base();
  if (k < window_.sent() && !window_.Answered(k)) return false;
  const auto* h = reinterpret_cast<const AggHeader*>(transport_->send_buffer(seq & send_mask_));
  return h->seq.host() == seq && h->job_id.host() == options_.job_id &&
         h->node_id.host() == options_.rank &&
         static_cast<Opcode>(h->opcode) == Opcode::kContribution;
}

void Engine::OnNotice(const AggHeader& h) {
  const Clock::time_point now = clock_.Now();
  switch (static_cast<aggregator::NoticeKind>(h.aux.host())) {
    case aggregator::NoticeKind::kHeld:
      // The switch has this chunk and waits for other members: resending it
      // cannot make the result come sooner.
      if (window_.Held(h.seq.host(), now)) {
        Bump(counters_.held_notices);
        held_known_ = true;
        held_seq_ = h.seq.host();
        held_missing_ = h.expected.host();
        return;
      }
      break;
    case aggregator::NoticeKind::kMissing:
      // The answer to a query, or the switch saw a later chunk of this rank
      // first: the contribution was lost on its way.
      if (window_.Missing(h.seq.host(), now)) {
        Bump(counters_.missing_notices);
        return;
      }
      // About a chunk whose result arrived here: the switch restarted
      // after sending that result to some members only, and the others
      // wait for this rank's data. Its datagram is kept (KeptBuffers) and
      // goes again with the next sends, when the buffer still holds it.
      if (KeptAnswered(h.seq.host())) {
        if (answered_asked_n_ < Transport::kBatch) answered_asked_[answered_asked_n_++] = h.seq.host();
        Bump(counters_.missing_notices);
        return;
      }
      break;
    case aggregator::NoticeKind::kRelocated: {
      // The chunk's slot held another chunk, and the switch moved it to a
      // spare slot: its resends and queries, built from its buffer, carry
      // the hint and go there straight. No hint: the one it carried names a
      // slot that does not hold it (the switch restarted); the data goes
      // again, to its own slot.
      const uint32_t k = h.seq.host() - window_.base();
      if (k >= window_.acked() && k < window_.sent()) {
        reinterpret_cast<AggHeader*>(WindowBuffer(k))->slot_hint = h.slot_hint;
        if (h.slot_hint.host() == aggregator::kNoSlotHint) (void)window_.Missing(h.seq.host(), now);
        Bump(counters_.relocated_notices);
        return;
      }
      // An answered chunk's kept datagram, which a restarted switch asked
      // for (kMissing) and which went carrying the hint of the process
      // before: refused there, it goes again to its own slot, or it would
      // carry the stale hint at every request and never be counted.
      if (KeptAnswered(h.seq.host())) {
        reinterpret_cast<AggHeader*>(transport_->send_buffer(h.seq.host() & send_mask_))
            ->slot_hint = h.slot_hint;
        if (h.slot_hint.host() == aggregator::kNoSlotHint &&
            answered_asked_n_ < Transport::kBatch) {
          answered_asked_[answered_asked_n_++] = h.seq.host();
        }
        Bump(counters_.relocated_notices);
        return;
      }
      break;
    }
    case aggregator::NoticeKind::kSelfFlag:
    case aggregator::NoticeKind::kStopFlag:
      // A predicted straggler flags its data, so that no switch waits for it.
      self_flag_ = h.aux.host() == static_cast<uint32_t>(aggregator::NoticeKind::kSelfFlag);
      Bump(counters_.notices);
      return;
    case aggregator::NoticeKind::kForgotten:
      break;  // a switch's, never a worker's
  }
  // About a chunk of this transfer whose result came meanwhile: late, not stray.
  if (h.seq.host() - window_.base() < window_.sent()) return;
  Bump(counters_.stray_datagrams);
}

common::Status Engine::OnResult(Lane& lane, const Phase& phase, const aggregator::AggPacket& pkt) {
  const AggHeader& h = *pkt.header;
  uint32_t k = 0;
  Clock::duration rtt;
  const Clock::time_point now = clock_.Now();
  switch (window_.Complete(h.seq.host(), now, &k, &rtt)) {
    case SendWindow::Match::kNew:
      break;
    case SendWindow::Match::kDuplicate:
      Bump(counters_.duplicate_results);
      return common::Status::Ok();
    case SendWindow::Match::kNotSent:
    case SendWindow::Match::kForeign:
      Bump(counters_.stray_datagrams);
      return common::Status::Ok();
  }
  Bump(counters_.results);
  // A moved job's results say so, and this rank's next chunks go to the
  // moved partition straight; a result without the hint for a chunk that
  // carried it says the switch no longer has the move (it restarted, or the
  // job was added again).
  if (h.slot_hint.host() == aggregator::kMovedSlotHint) {
    lane.move_hint = aggregator::kMovedSlotHint;
  } else if (reinterpret_cast<const AggHeader*>(WindowBuffer(k))->slot_hint.host() ==
             aggregator::kMovedSlotHint) {
    lane.move_hint = aggregator::kNoSlotHint;
  }
  // A chunk whose round trip includes another member's loss and its
  // recovery is no sample: this rank's timeout would grow to the others'.
  const bool recovered = (h.flags.host() & aggregator::flags::kRecovered) != 0;
  lane.timer.OnResult(recovered ? Clock::duration::zero() : rtt);
  window_.SetProbe(lane.timer.probe());
  last_progress_ = now;
  last_transient_nack_ = 0;
  const uint32_t m = phase.chunk_map != nullptr ? phase.chunk_map[k] : k;
  const uint32_t n = ChunkLength(phase, m);
  const uint16_t result_flags = h.flags.host();
  // Named only in an error: no string per result.
  const auto chunk = [&] {
    return "chunk seq " + std::to_string(h.seq.host()) + " of job " + std::to_string(options_.job_id);
  };
  if ((result_flags & flags::kIncomplete) != 0 || h.missing_count != 0) {
    return common::Incomplete("the switch returned " + chunk() + " without the contributions of " +
                               std::to_string(h.missing_count) + " members");
  }
  if (pkt.dtype != phase.dtype || pkt.op != phase.op || h.scale != phase.scale ||
      h.elem_count.host() != n) {
    return common::FailedPrecondition(
        "the result of " + chunk() + " is not a reduction of what this rank sent (" +
        std::to_string(h.elem_count.host()) + " " + std::string(DTypeName(pkt.dtype)) + " " +
        std::string(ReduceOpName(pkt.op)) + " scale " + std::to_string(h.scale) + ", sent " +
        std::to_string(n) + " " + std::string(DTypeName(phase.dtype)) + " " +
        std::string(ReduceOpName(phase.op)) + " scale " + std::to_string(phase.scale) +
        "): the switch holds this sequence number from an earlier run of the job (use a new "
        "job id, or a first sequence number past the earlier run's)");
  }
  const bool overflow = (result_flags & flags::kOverflow) != 0;
  if (phase.kind == Phase::Kind::kFixedPoint) {
    if (overflow) {
      redo_.push_back(m);  // the input stays in place for the redo
      return common::Status::Ok();
    }
    DecodeFixed(pkt.payload, phase.scale,
                {reinterpret_cast<float*>(phase.data) + ChunkStart(phase, m), n});
    return common::Status::Ok();
  }
  if (overflow) {
    Bump(counters_.saturated_chunks);
    if (saturated_++ == 0) {
      first_saturated_seq_ = h.seq.host();
      first_saturated_chunk_ = m;
    }
  }
  const size_t size = aggregator::ElementSize(phase.dtype);
  std::memcpy(phase.data + ChunkStart(phase, m) * size, pkt.payload, n * size);
  return common::Status::Ok();
}

bool Engine::RestoreTaskInfo(const Phase& phase, uint32_t seq) {
  // Only a contribution of an in-band job whose data is not for the
  // parameter node by itself (the float32 redo of a saturated sum) carries
  // the task info when first built.
  if (options_.task_info != TaskInfoMode::kInBand || phase.kind == Phase::Kind::kAnnounce ||
      (phase.flags & flags::kAggregateAtPs) != 0) {
    return false;
  }
  const uint32_t k = seq - window_.base();
  if (k >= window_.sent() || window_.Answered(k)) return false;
  auto* h = reinterpret_cast<AggHeader*>(WindowBuffer(k));
  const uint16_t f = h->flags.host();
  if (h->seq.host() != seq || static_cast<Opcode>(h->opcode) != Opcode::kContribution ||
      (f & flags::kTaskInfo) != 0) {
    return false;
  }
  // Undo what the resend for the parameter node changed (PlanSends).
  h->flags = common::be16_t::FromHost(
      static_cast<uint16_t>((f & ~flags::kAggregateAtPs) | flags::kTaskInfo |
                            (options_.verify ? flags::kVerifyMode : 0)));
  h->expected = common::be16_t::FromHost(RanksPerNode(options_));
  h->node_count = common::be16_t::FromHost(options_.node_count);
  return true;
}

common::Status Engine::OnNack(const Lane& lane, const Phase& phase, const AggHeader& h) {
  const uint32_t seq = h.seq.host();
  // Only the refusal of a datagram of this transfer says something about it;
  // a late one for an earlier transfer's retransmission does not.
  if (seq - window_.base() >= window_.sent()) {
    Bump(counters_.stray_datagrams);
    return common::Status::Ok();
  }
  const uint32_t reason = h.aux.host();
  const auto why = static_cast<NackReason>(reason);
  // An in-band job the switch does not know, refused a resend that went
  // without the task info (marked AGGREGATE_AT_PS for the parameter node):
  // the datagram that would have registered the job was lost, or the switch
  // dropped the job since (it restarted, or reaped it idle). The chunk goes
  // again as it was first built, with the task info, which registers the
  // job; a refusal of that is final.
  if (why == NackReason::kUnknownJob && RestoreTaskInfo(phase, seq)) {
    Bump(counters_.transient_nacks);
    last_transient_nack_ = reason;
    window_.Refused(seq, clock_.Now() + std::min<Clock::duration>(options_.retransmit_timeout,
                                                                  kQuotaRetry));
    return common::Status::Ok();
  }
  // "Not now": the control unit's announcement has not registered the job yet, or the
  // switch refuses this chunk for the moment (a rate, a quota, a binding, a
  // busy slot, a full store: the root defers a chunk that would complete a
  // FINAL result while it has no room to deliver it to the main server).
  // The chunk goes again on its retransmission timer; if nothing moves, the
  // stall message says why.
  const bool transient =
      (why == NackReason::kUnknownJob && options_.task_info == TaskInfoMode::kControlUnit &&
       !ControlUnit()) ||
      why == NackReason::kRateLimited || why == NackReason::kSlotQuota ||
      why == NackReason::kHoldQuota || why == NackReason::kMemberBound ||
      why == NackReason::kSlotBusy || why == NackReason::kNewRun ||
      why == NackReason::kStoreFull;
  if (transient) {
    Bump(counters_.transient_nacks);
    last_transient_nack_ = reason;
    // A quota frees up as the slowest member's results come back, which
    // takes about a round trip, not a retransmission timeout: the chunk goes
    // again soon, and without backing off (nothing was lost).
    if (why == NackReason::kSlotQuota || why == NackReason::kHoldQuota ||
        why == NackReason::kSlotBusy || why == NackReason::kNewRun) {
      window_.Refused(seq, clock_.Now() + std::min<Clock::duration>(options_.retransmit_timeout,
                                                                    kQuotaRetry));
    }
    return common::Status::Ok();
  }
  const NackText text = DescribeNack(reason);
  std::string message = "switch " + lane.name + " refused job " + std::to_string(options_.job_id) +
                        " (rank " + std::to_string(options_.rank) + ", seq " + std::to_string(seq) +
                        "): " + text.name + " (NACK " + std::to_string(reason) + "): " + text.hint;
  if (why == NackReason::kJobTableFull || why == NackReason::kInBandFull) {
    return common::ResourceExhausted(std::move(message));
  }
  return common::FailedPrecondition(std::move(message));
}

void Engine::SendAck(Lane& lane) {
  WriteAndSendAck(lane);
  ack_lane_ = &lane;
  ack_repeats_left_ = kAckRepeats;
  ack_due_ = clock_.Now() + lane.timer.timeout();
}

void Engine::RepeatAck(Clock::time_point now) {
  if (ack_repeats_left_ == 0 || now < ack_due_) return;
  WriteAndSendAck(*ack_lane_);
  --ack_repeats_left_;
  ack_due_ = now + ack_lane_->timer.timeout();
}

void Engine::FlushAckRepeats() {
  for (; ack_repeats_left_ > 0; --ack_repeats_left_) WriteAndSendAck(*ack_lane_);
}

void Engine::WriteAndSendAck(const Lane& lane) {
  AggFields f;
  f.opcode = Opcode::kAck;
  f.node_id = options_.rank;
  f.job_id = options_.job_id;
  f.seq = next_seq_ - 1;  // the allreduce's last chunk: a NACK of it is stray to the next one
  f.job_key = options_.job_key;
  f.ack_watermark = next_seq_;
  f.addr_low = addr_low_;
  f.incarnation = incarnation_;
  f.flags = run_flag_;
  // A repeat waits for the last one to leave (AF_XDP zero-copy).
  if (!transport_->SendBufferFree(send_mask_ + 1)) return;
  uint8_t* buf = AckBuffer();
  aggregator::WriteAggHeader(f, 0, reinterpret_cast<AggHeader*>(buf));
  const OutDatagram ack{&lane.addr, buf, sizeof(AggHeader)};
  // Best effort, and repeated: a lost ACK only delays the release until a
  // repeat or the job's next contributions, which carry the same watermark.
  (void)transport_->Send(&ack, 1);
}

std::string Engine::StallMessage(const Lane& lane, const Phase& phase) const {
  const std::string ms = std::to_string(options_.progress_timeout.count());
  const uint32_t k = window_.acked();
  const uint32_t resends = k < window_.sent() ? window_.ResendsOf(k) : 0;
  if (phase.kind == Phase::Kind::kAnnounce) {
    return "no echo of job " + std::to_string(options_.job_id) +
           "'s task-info announcement from switch " + lane.name + " in " + ms + " ms (" +
           std::to_string(resends) +
           " retransmissions): the switch is unreachable, or its in-band registration is off";
  }
  std::string why = "the switch is unreachable, or a member of the job stopped sending";
  if (held_known_ && held_seq_ == window_.Seq(k)) {
    why = "the switch holds this rank's contribution and waits for " +
          std::to_string(held_missing_) + " more members: a member of the job stopped sending";
  } else if (last_transient_nack_ != 0) {
    const NackText text = DescribeNack(last_transient_nack_);
    why = std::string("the switch last refused a chunk: ") + text.name + " (NACK " +
          std::to_string(last_transient_nack_) + "): " + text.hint;
  }
  return "no result from switch " + lane.name + " for " + ms + " ms: job " +
         std::to_string(options_.job_id) + ", rank " + std::to_string(options_.rank) +
         ", chunk seq " + std::to_string(window_.Seq(k)) + " unanswered after " +
         std::to_string(resends) + " retransmissions (" + why + ")";
}

}  // namespace aggswitch::client::internal
