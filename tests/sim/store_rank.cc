#include "tests/sim/store_rank.h"

#include <algorithm>
#include <utility>

#include "aggregator/wire.h"
#include "client/internal/engine.h"

namespace aggswitch::sim {

namespace {

constexpr uint64_t kTickNs = 5'000'000;

// NACK reasons that end the operation (docs/protocol.md, "NACK reasons");
// the others mean "not now", and the chunk is sent again on its timer.
bool Ends(uint32_t reason) {
  switch (reason) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 12: case 13: case 15: case 17: case 19: case 21:
      return true;
    default:
      return false;
  }
}

}  // namespace

StoreRank::StoreRank(World& world, Host& host, Options options, std::vector<OpSpec> ops,
                     DataFor data_for, uint64_t start_ns)
    : world_(world),
      host_(host),
      options_(std::move(options)),
      ops_(std::move(ops)),
      data_for_(std::move(data_for)),
      outcomes_(ops_.size()) {
  port_ = host_.Bind(0, [this](const uint8_t* data, size_t len, uint32_t, uint16_t) { OnDatagram(data, len); });
  if (port_ == 0) {
    setup_error_ = "no free UDP port";
    done_ = true;
    return;
  }
  const uint64_t life = life_;
  world_.At(start_ns + (ops_.empty() ? 0 : ops_[0].think_ns), [this, life] {
    if (life == life_) Begin(0);
  });
}

StoreRank::~StoreRank() {
  if (port_ != 0) host_.Unbind(port_);
}

void StoreRank::Kill() {
  if (done_) return;
  if (in_progress_) {
    outcomes_[op_].ran = false;  // it died in the middle: nothing came back
    outcomes_[op_].died = true;
  }
  done_ = true;
  ++life_;
  host_.Unbind(port_);
  port_ = 0;
}

void StoreRank::Begin(uint32_t op) {
  if (op >= ops_.size()) {
    done_ = true;
    return;
  }
  op_ = op;
  in_progress_ = true;
  const OpSpec& spec = ops_[op];
  OpOutcome& out = outcomes_[op];
  out.ran = true;
  out.start_ns = world_.now();
  // Until Finish: an operation the scenario's end cuts short failed.
  out.code = common::StatusCode::kUnavailable;
  out.message = "still running when the scenario ended";
  data_ = data_for_(op);
  out.data = data_;
  client::ClientOptions sizing;
  sizing.max_chunk_elements = options_.max_chunk_elements;
  const uint32_t per_chunk = client::internal::ChunkElementsFor(sizing, spec.dtype);
  chunks_.clear();
  for (uint32_t first = 0; first < spec.count; first += per_chunk) {
    chunks_.push_back(Chunk{first, std::min(per_chunk, spec.count - first)});
  }
  base_seq_ = next_seq_;
  next_seq_ = base_seq_ + static_cast<uint32_t>(chunks_.size());
  out.first_seq = base_seq_;
  out.next_seq = next_seq_;
  acked_ = 0;
  progress_ns_ = world_.now();
  SendDue();
  const uint64_t life = life_;
  world_.At(world_.now() + kTickNs, [this, life] { Tick(life); });
}

void StoreRank::SendDue() {
  // The oldest chunks not ACKed, `window` of them, each at most every kResendNs.
  uint32_t in_window = 0;
  for (uint32_t c = 0; c < chunks_.size() && in_window < options_.window; ++c) {
    if (chunks_[c].acked) continue;
    ++in_window;
    if (chunks_[c].sent_ns == 0 || world_.now() - chunks_[c].sent_ns >= kResendNs) Send(c);
  }
}

void StoreRank::Send(uint32_t c) {
  Chunk& chunk = chunks_[c];
  const OpSpec& spec = ops_[op_];
  const size_t size = aggregator::ElementSize(spec.dtype);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kContribution;
  f.flags = static_cast<uint16_t>((options_.run_id ? aggregator::flags::kRunId : 0) |
                                  (chunk.sent_ns != 0 ? aggregator::flags::kRetransmission : 0));
  f.node_id = options_.node;
  f.job_id = options_.job_id;
  f.seq = base_seq_ + c;
  f.job_key = options_.key;
  f.ack_watermark = base_seq_;
  f.addr_low = op_;  // the client's default: the operation's index
  f.elem_count = static_cast<uint16_t>(chunk.count);
  f.dtype = spec.dtype;
  f.op = spec.op;
  f.aux = chunk.first;
  f.incarnation = options_.incarnation;
  const uint8_t* payload = data_.data() + size_t{chunk.first} * size;
  const auto payload_len = static_cast<uint32_t>(size_t{chunk.count} * size);
  std::vector<uint8_t> buf(sizeof(aggregator::AggHeader) + payload_len);
  const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, payload, payload_len, buf.data(),
                                                  static_cast<uint32_t>(buf.size()));
  chunk.sent_ns = world_.now();
  if (n == 0) return;
  SentContribution copy{static_cast<uint8_t>(spec.dtype), static_cast<uint8_t>(spec.op), 0,
                        std::vector<uint8_t>(payload, payload + payload_len)};
  std::vector<SentContribution>& versions = sent_[f.seq];
  if (std::find(versions.begin(), versions.end(), copy) == versions.end()) versions.push_back(std::move(copy));
  (void)host_.Send(port_, options_.switch_ip, options_.switch_port, buf.data(), n);
}

void StoreRank::OnDatagram(const uint8_t* data, size_t len) {
  if (done_ || chunks_.empty()) return;
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(data, static_cast<uint32_t>(len), &pkt) != aggregator::WireError::kOk) return;
  const aggregator::AggFields f = aggregator::ReadAggFields(*pkt.header);
  // Its own run's answer to a chunk of the operation in progress.
  if (f.job_id != options_.job_id || f.incarnation != options_.incarnation || f.seq - base_seq_ >= chunks_.size()) {
    return;
  }
  Chunk& chunk = chunks_[f.seq - base_seq_];
  if (pkt.opcode == aggregator::Opcode::kNack) {
    if (Ends(f.aux)) {
      Finish(common::StatusCode::kFailedPrecondition,
             "chunk seq " + std::to_string(f.seq) + " refused, NACK reason " + std::to_string(f.aux));
    }
    return;  // not now: sent again on its timer
  }
  if (pkt.opcode != aggregator::Opcode::kAck || chunk.acked) return;
  chunk.acked = true;
  ++acked_;
  progress_ns_ = world_.now();
  if (acked_ == chunks_.size()) {
    Finish(common::StatusCode::kOk, "");
    return;
  }
  SendDue();
}

void StoreRank::Tick(uint64_t life) {
  if (life != life_ || done_) return;
  if (world_.now() - progress_ns_ > options_.progress_timeout_ns) {
    Finish(common::StatusCode::kUnavailable, "no ACK for " + std::to_string(options_.progress_timeout_ns / 1'000'000) +
                                                 " ms (" + std::to_string(acked_) + " of " +
                                                 std::to_string(chunks_.size()) + " chunks ACKed)");
    return;
  }
  SendDue();
  world_.At(world_.now() + kTickNs, [this, life] { Tick(life); });
}

void StoreRank::Finish(common::StatusCode code, std::string message) {
  OpOutcome& out = outcomes_[op_];
  in_progress_ = false;
  out.end_ns = world_.now();
  out.code = code;
  out.message = std::move(message);
  chunks_.clear();
  ++life_;
  if (code != common::StatusCode::kOk) {
    done_ = true;  // as a client after a failure: the later operations would disagree
    return;
  }
  const uint32_t next = op_ + 1;
  const uint64_t life = life_;
  world_.At(world_.now() + (next < ops_.size() ? ops_[next].think_ns : 0), [this, life, next] {
    if (life == life_) Begin(next);
  });
}

}  // namespace aggswitch::sim
