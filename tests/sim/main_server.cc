#include "tests/sim/main_server.h"

#include <utility>

#include "aggregator/wire.h"
#include "tests/sim/world.h"

namespace aggswitch::sim {

MainServer::MainServer(World& world, Host& host, uint16_t port, std::map<uint32_t, uint64_t> keys)
    : world_(world), host_(host), port_(port), keys_(std::move(keys)) {
  host_.Bind(port_, [this](const uint8_t* data, size_t len, uint32_t ip, uint16_t p) {
    OnDatagram(data, len, ip, p);
  });
}

MainServer::~MainServer() { host_.Unbind(port_); }

void MainServer::OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port) {
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(data, static_cast<uint32_t>(len), &pkt) != aggregator::WireError::kOk) {
    ++strays_;
    return;
  }
  // A NACK flagged FINAL tells of a final chunk the root holds back for
  // want of room (its delivery comes once the members' resend finds some):
  // no FETCH's answer, whose NACKs carry no flags.
  const bool held_back = pkt.opcode == aggregator::Opcode::kNack &&
                         (pkt.header->flags.host() & aggregator::flags::kFinal) != 0;
  if (pkt.opcode == aggregator::Opcode::kFetch ||
      (pkt.opcode == aggregator::Opcode::kNack && !held_back)) {
    OnFetchAnswer(pkt);
    return;
  }
  if (pkt.opcode != aggregator::Opcode::kResult) {
    ++strays_;
    return;
  }
  const aggregator::AggFields f = aggregator::ReadAggFields(*pkt.header);
  const auto key = keys_.find(f.job_id);
  if (key == keys_.end() || (f.flags & aggregator::flags::kFinal) == 0) {
    ++strays_;
    return;
  }
  deliveries_.push_back(Delivery{f.job_id, f.seq, f.flags, f.incarnation, world_.now(),
                                 std::vector<uint8_t>(pkt.payload, pkt.payload + pkt.payload_len)});
  aggregator::AggFields ack;
  ack.opcode = aggregator::Opcode::kAck;
  ack.flags = aggregator::flags::kFinal;
  ack.job_id = f.job_id;
  ack.seq = f.seq;
  ack.job_key = key->second;
  ack.aux = f.aux;
  ack.incarnation = f.incarnation;
  uint8_t buf[sizeof(aggregator::AggHeader)];
  const uint32_t n = aggregator::BuildAggregation(ack, nullptr, 0, nullptr, 0, buf, sizeof(buf));
  if (n != 0) (void)host_.Send(port_, src_ip, src_port, buf, n);
}

void MainServer::Fetch(std::vector<FetchRequest> requests, FetchDone done) {
  Batch b;
  b.requests = std::move(requests);
  b.done = std::move(done);
  batches_.push_back(std::move(b));
  if (batches_.size() == 1) SendFetch();
}

void MainServer::SendFetch() {
  while (!batches_.empty() && batches_.front().next == batches_.front().requests.size()) {
    Batch done = std::move(batches_.front());
    batches_.pop_front();
    done.done(std::move(done.got));
  }
  if (batches_.empty()) return;
  Batch& b = batches_.front();
  const FetchRequest& r = b.requests[b.next];
  if (b.tries == kFetchTries) {  // never answered: on to the next
    if (!b.releasing) {
      Fetched f;
      f.request = r;
      b.got.push_back(std::move(f));
    }
    NextFetch();
    return;
  }
  ++b.tries;
  const auto key = keys_.find(r.job_id);
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kFetch;
  // FINAL: for the switch it is addressed to, not one on the way.
  f.flags = static_cast<uint16_t>(aggregator::flags::kFinal | (b.releasing ? aggregator::flags::kRelease : 0));
  f.node_id = r.node;
  f.job_id = r.job_id;
  f.seq = r.seq;
  f.job_key = key == keys_.end() ? 0 : key->second;
  f.aux = r.node;
  uint8_t buf[sizeof(aggregator::AggHeader)];
  const uint32_t n = aggregator::BuildAggregation(f, nullptr, 0, nullptr, 0, buf, sizeof(buf));
  if (n != 0) (void)host_.Send(port_, r.switch_ip, port_, buf, n);
  const uint64_t token = b.token = ++fetch_tokens_;
  world_.At(world_.now() + kFetchRetryNs, [this, token] {
    if (!batches_.empty() && batches_.front().token == token) SendFetch();
  });
}

void MainServer::NextFetch() {
  Batch& b = batches_.front();
  if (b.releasing) {
    b.releasing = false;
    ++b.next;
  } else {
    b.releasing = true;
  }
  b.tries = 0;
  b.token = 0;
  SendFetch();
}

void MainServer::OnFetchAnswer(const aggregator::AggPacket& pkt) {
  const aggregator::AggFields f = aggregator::ReadAggFields(*pkt.header);
  if (batches_.empty() || batches_.front().tries == 0) {
    ++strays_;
    return;
  }
  Batch& b = batches_.front();
  const FetchRequest& r = b.requests[b.next];
  // The answer to the FETCH in progress: its job, chunk and member (a FETCH
  // names it in aux, a NACK echoes the request's node id).
  // A RELEASE's answer says RELEASE: an earlier answer's duplicate does not.
  const bool fetched = pkt.opcode == aggregator::Opcode::kFetch && f.aux == r.node &&
                       ((f.flags & aggregator::flags::kRelease) != 0) == b.releasing;
  const bool refused = pkt.opcode == aggregator::Opcode::kNack && f.node_id == r.node;
  if (f.job_id != r.job_id || f.seq != r.seq || (!fetched && !refused)) {
    ++strays_;
    return;
  }
  if (b.releasing) {
    b.got.back().released = true;
  } else {
    Fetched got;
    got.request = r;
    got.answered = true;
    got.found = fetched;
    got.nack = fetched ? 0 : f.aux;
    if (fetched) {
      got.copy = SentContribution{static_cast<uint8_t>(f.dtype), static_cast<uint8_t>(f.op), f.scale,
                                  std::vector<uint8_t>(pkt.payload, pkt.payload + pkt.payload_len)};
    }
    b.got.push_back(std::move(got));
  }
  NextFetch();
}

}  // namespace aggswitch::sim
