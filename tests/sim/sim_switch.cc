#include "tests/sim/sim_switch.h"

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstring>
#include <utility>

#include "config/loader.h"
#include "dataplane/worker.h"

namespace aggswitch::sim {

namespace {

uint64_t g_rings = 0;  // ring and port names are never reused in a process

}  // namespace

rte_mempool* SimFramePool() {
  static rte_mempool* pool =
      rte_pktmbuf_pool_create("sim_frames", 16383, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return pool;
}

class SimSwitch::PortSink final : public FrameSink {
 public:
  PortSink(SimSwitch& sw, size_t port) : sw_(sw), port_(port) {}
  void Receive(Frame frame) override { sw_.Deliver(port_, std::move(frame)); }

 private:
  SimSwitch& sw_;
  size_t port_;
};

SimSwitch::SimSwitch(World& world, std::string name, size_t ports, uint32_t workers,
                     MakeYaml make_yaml)
    : world_(world),
      name_(std::move(name)),
      make_yaml_(std::move(make_yaml)),
      out_(ports, nullptr),
      workers_(workers) {
  for (size_t p = 0; p < ports; ++p) sinks_.push_back(std::make_unique<PortSink>(*this, p));
}

SimSwitch::~SimSwitch() {
  Stop();
}

FrameSink* SimSwitch::port_sink(size_t port) {
  return sinks_[port].get();
}

common::Status SimSwitch::Start() {
  if (node_ != nullptr) return common::Status::Ok();
  ++generation_;
  const size_t ports = sinks_.size();
  for (size_t p = 0; p < ports; ++p) {
    const std::string name = "sim" + std::to_string(g_rings++);
    ring_names_.push_back(name);
    rte_ring* rx =
        rte_ring_create((name + "_rx").c_str(), 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (rx != nullptr) rx_.push_back(rx);
    tx_.emplace_back();
    for (uint32_t q = 0; q < workers_; ++q) {
      rte_ring* tx = rte_ring_create((name + "_tx" + std::to_string(q)).c_str(), 1024, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);
      if (tx != nullptr) tx_.back().push_back(tx);
    }
    if (rx == nullptr || tx_.back().size() != workers_) {
      FreeRings();
      return common::ResourceExhausted(name_ + ": cannot create the rings of port " +
                                       std::to_string(p));
    }
    if (rte_eth_from_rings(name.c_str(), &rx, 1, tx_.back().data(),
                           static_cast<unsigned>(workers_), SOCKET_ID_ANY) < 0) {
      FreeRings();
      return common::ResourceExhausted(name_ + ": cannot create ring port " + name);
    }
  }
  const std::string yaml = make_yaml_(ring_names_);
  config::ConfigLoad load = config::LoadConfigText(yaml, name_ + ".yaml");
  if (!load.ok()) {
    FreeRings();
    return common::InvalidArgument(name_ + ": its config does not load:\n" + load.FormatErrors() +
                                   "\n" + yaml);
  }
  auto node = control::SwitchNode::Create(load.config, {.clock = &world_.clock()});
  if (!node.ok()) {
    FreeRings();
    return common::Status(node.status().code(), name_ + ": " + node.status().message());
  }
  node_ = std::move(node).value();
  next_control_ = world_.now();
  step_at_ = UINT64_MAX;
  ScheduleStep(world_.now());
  return common::Status::Ok();
}

void SimSwitch::Stop() {
  ++generation_;
  step_at_ = UINT64_MAX;
  node_.reset();
  FreeRings();
}

void SimSwitch::FreeRings() {
  // Ports the dataplane did not take over (or a failed start's) are closed here.
  for (const std::string& name : ring_names_) {
    uint16_t port_id;
    if (rte_eth_dev_get_port_by_name(("net_ring_" + name).c_str(), &port_id) == 0) {
      (void)rte_eth_dev_close(port_id);
    }
  }
  auto drain = [](rte_ring* r) {
    void* obj;
    while (rte_ring_dequeue(r, &obj) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(obj));
    rte_ring_free(r);
  };
  for (rte_ring* r : rx_) drain(r);
  for (const std::vector<rte_ring*>& port : tx_) {
    for (rte_ring* r : port) drain(r);
  }
  rx_.clear();
  tx_.clear();
  ring_names_.clear();
}

void SimSwitch::Deliver(size_t port, Frame frame) {
  if (node_ == nullptr) {
    ++to_down_;
    return;
  }
  rte_mbuf* m = rte_pktmbuf_alloc(SimFramePool());
  char* data = m != nullptr ? rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size())) : nullptr;
  if (data == nullptr || rte_ring_enqueue(rx_[port], m) != 0) {
    if (m != nullptr) rte_pktmbuf_free(m);
    ++rx_ring_full_;
    return;
  }
  std::memcpy(data, frame.data(), frame.size());
  ScheduleStep(world_.now());
}

void SimSwitch::ScheduleStep(uint64_t at) {
  if (at >= step_at_) return;
  step_at_ = at;
  world_.At(at, [this, generation = generation_, at] {
    if (generation != generation_ || node_ == nullptr || at != step_at_) return;
    step_at_ = UINT64_MAX;
    Step();
  });
}

void SimSwitch::Step() {
  dataplane::Dataplane& dp = node_->dataplane();
  const uint64_t now = world_.now();
  const auto poll = [&] {
    for (uint32_t i = 0; i < dataplane::Worker::kControlEvery; ++i) {
      for (size_t w = 0; w < dp.worker_count(); ++w) dp.PollWorkerOnce(w);
    }
  };
  poll();
  if (now >= next_control_) {
    node_->loop().Step(world_.clock().Now());
    next_control_ = now + kControlPeriodNs;
    poll();  // what the control step handed down
  }
  Transmit();
  // Soon again while a slot's timer runs (its buckets are ~100 us), else at
  // the next control step.
  bool timers = false;
  for (size_t w = 0; w < dp.worker_count(); ++w) {
    const aggregator::SlotTable* slots = dp.worker_slots(w);
    timers |= slots != nullptr && slots->armed_timers() != 0;
  }
  ScheduleStep(timers ? now + kPollPeriodNs : next_control_);
}

void SimSwitch::Transmit() {
  for (size_t p = 0; p < tx_.size(); ++p) {
    // Each worker's queue in turn: the frames of one queue keep their order.
    for (rte_ring* ring : tx_[p]) {
      void* obj;
      while (rte_ring_dequeue(ring, &obj) == 0) {
        auto* m = static_cast<rte_mbuf*>(obj);
        Frame frame(m->pkt_len);
        const auto* d =
            static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, frame.data()));
        if (d != frame.data()) std::memcpy(frame.data(), d, m->pkt_len);
        rte_pktmbuf_free(m);
        if (out_[p] != nullptr) out_[p]->Send(frame.data(), frame.size());
      }
    }
  }
}

}  // namespace aggswitch::sim
