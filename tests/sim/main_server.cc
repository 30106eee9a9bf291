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
  if (aggregator::ParseAggregation(data, static_cast<uint32_t>(len), &pkt) != aggregator::WireError::kOk ||
      pkt.opcode != aggregator::Opcode::kResult) {
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

}  // namespace aggswitch::sim
