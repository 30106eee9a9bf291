#include "tests/sim/rank.h"

#include <algorithm>
#include <utility>

#include "aggregator/wire.h"
#include "client/internal/engine.h"

namespace aggswitch::sim {

RankProcess::RankProcess(World& world, Host& host, client::ClientOptions options,
                         std::vector<OpSpec> ops, DataFor data_for, uint64_t start_ns)
    : world_(world),
      host_(host),
      options_(std::move(options)),
      ops_(std::move(ops)),
      data_for_(std::move(data_for)),
      outcomes_(ops_.size()),
      fiber_([this] { Body(); }) {
  world_.At(start_ns, [this] {
    if (!fiber_.started()) fiber_.Resume();
  });
}

RankProcess::~RankProcess() {
  // A fiber still waiting is unwound before its stack goes; nothing is
  // scheduled for it any more.
  dying_ = true;
  if (fiber_.started() && !fiber_.done()) {
    Kill();
    while (!fiber_.done()) fiber_.Resume();
  }
}

void RankProcess::WakeSoon() {
  if (wake_pending_ || dying_) return;
  wake_pending_ = true;
  world_.At(world_.now(), [this] {
    wake_pending_ = false;
    if (fiber_.started() && !fiber_.done() && transport_ != nullptr && transport_->waiting()) {
      fiber_.Resume();
    }
  });
}

void RankProcess::Record(const uint8_t* data, size_t len) {
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(data, static_cast<uint32_t>(len), &pkt) != aggregator::WireError::kOk ||
      pkt.opcode != aggregator::Opcode::kContribution) {
    return;
  }
  const aggregator::AggFields f = aggregator::ReadAggFields(*pkt.header);
  if ((f.flags & aggregator::flags::kAggregateAtPs) != 0) return;
  SentContribution c{static_cast<uint8_t>(f.dtype), static_cast<uint8_t>(f.op), f.scale,
                     std::vector<uint8_t>(pkt.payload, pkt.payload + pkt.payload_len)};
  std::vector<SentContribution>& versions = sent_[f.seq];
  if (std::find(versions.begin(), versions.end(), c) == versions.end()) versions.push_back(std::move(c));
}

void RankProcess::Kill() {
  if (killed_) return;
  killed_ = true;
  if (transport_ != nullptr) transport_->Kill();  // wakes the fiber, which unwinds
}

void RankProcess::Body() {
  if (killed_) return;
  auto transport = std::make_unique<SimTransport>(
      world_, host_, options_.bind_port, client::internal::Engine::SendBuffers(options_),
      options_.mtu, [this] { WakeSoon(); });
  transport_ = transport.get();
  transport_->SetTap([this](const uint8_t* data, size_t len) { Record(data, len); });
  auto created = client::internal::Engine::Create(options_, std::move(transport), "sim",
                                                  world_.clock());
  if (!created.ok()) {
    setup_error_ = created.status().ToString();
    transport_ = nullptr;
    return;
  }
  std::unique_ptr<client::internal::Engine> engine = std::move(created).value();
  for (uint32_t k = 0; k < ops_.size() && !killed_; ++k) {
    const OpSpec& spec = ops_[k];
    if (!transport_->SleepUntil(world_.now() + spec.think_ns).ok()) break;
    OpOutcome& out = outcomes_[k];
    out.data = data_for_(k);
    out.ran = true;
    out.start_ns = world_.now();
    // Until Run returns: an allreduce the scenario's end cuts short failed,
    // and its buffer, reduced in part, is no result to judge.
    out.code = common::StatusCode::kUnavailable;
    out.message = "still running when the scenario ended";
    client::internal::Request request;
    request.dtype = spec.dtype;
    request.op = spec.op;
    request.data = out.data.data();
    request.count = spec.count;
    request.addr_low = k;  // the client's default: the allreduce's index
    request.final = spec.final;
    out.first_seq = engine->next_seq();
    const common::Status status = engine->Run(request);
    out.next_seq = engine->next_seq();
    out.end_ns = world_.now();
    out.code = status.code();
    out.message = status.message();
    if (killed_) {
      out.ran = false;  // it died in the middle: nothing came back
      out.died = true;
      break;
    }
    // As client::Client: after a failure the ranks may disagree about
    // sequence numbers, and every later allreduce fails at once; an int32
    // sum that overflowed fails only itself.
    if (!status.ok() && status.code() != common::StatusCode::kOutOfRange) break;
  }
  // The last allreduce's ACK repeats, sent while the process idles.
  while (!killed_) {
    const auto due = engine->NextAckRepeat();
    if (due == client::internal::Engine::Clock::time_point::max()) break;
    const auto due_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(due.time_since_epoch()).count());
    if (!transport_->SleepUntil(due_ns).ok()) break;
    engine->RepeatAck(world_.clock().Now());
  }
  engine.reset();
  transport_ = nullptr;
}

}  // namespace aggswitch::sim
