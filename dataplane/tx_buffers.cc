#include "dataplane/tx_buffers.h"

#include <rte_ethdev.h>

#include <algorithm>

namespace aggswitch::dataplane {

TxBuffers::TxBuffers(const uint16_t (&port_ids)[config::kMaxPorts], uint16_t tx_queue,
                     rte_mempool* pool, LcoreStats& stats,
                     const config::FaultConfig* const (&faults)[config::kMaxPorts], unsigned lcore,
                     uint64_t linear_ports, const common::Clock& clock)
    : tx_queue_(tx_queue), pool_(pool), stats_(stats), linear_ports_(linear_ports), clock_(clock) {
  std::copy(std::begin(port_ids), std::end(port_ids), port_ids_);
  for (uint16_t p = 0; p < config::kMaxPorts; ++p) {
    const config::FaultConfig* f = faults[p];
    if (f == nullptr || f->direction == config::FaultDirection::kRx) continue;
    faults_[p] = std::make_unique<FaultInjector>(*f, FaultStream(lcore, p, true), clock.CyclesPerSecond());
    fault_ports_ |= uint64_t{1} << p;
  }
}

void TxBuffers::Release() {
  for (uint64_t ports = fault_ports_; ports != 0; ports &= ports - 1) {
    const auto p = static_cast<uint16_t>(__builtin_ctzll(ports));
    if (faults_[p]->holding()) FlushPort(p);
  }
}

bool TxBuffers::holding() const {
  for (uint64_t ports = fault_ports_; ports != 0; ports &= ports - 1) {
    if (faults_[__builtin_ctzll(ports)]->holding()) return true;
  }
  return false;
}

void TxBuffers::FlushPort(uint16_t p) {
  dirty_ &= ~(uint64_t{1} << p);
  rte_mbuf** frames = frames_[p];
  uint16_t count = count_[p];
  uint64_t bytes = bytes_[p];
  rte_mbuf* faulty[FaultInjector::kMaxOut];
  if (FaultInjector* faults = faults_[p].get(); faults != nullptr) {
    std::copy(frames, frames + count, faulty);
    frames = faulty;
    count = faults->Apply(frames, count, FaultInjector::kMaxOut, pool_, stats_.ports[p], clock_.Cycles());
    bytes = 0;
    for (uint16_t i = 0; i < count; ++i) bytes += frames[i]->pkt_len;
  }
  if (int_ != nullptr && int_->marked_any()) bytes += int_->OnTx(p, frames, count);
  const uint16_t sent = rte_eth_tx_burst(port_ids_[p], tx_queue_, frames, count);
  if (sent < count) {
    for (uint16_t i = sent; i < count; ++i) bytes -= frames[i]->pkt_len;
    rte_pktmbuf_free_bulk(frames + sent, count - sent);
    stats_.ports[p].drops[static_cast<size_t>(DropReason::kTxFull)].Add(count - sent);
  }
  stats_.ports[p].tx_packets.Add(sent);
  stats_.ports[p].tx_bytes.Add(bytes);
  count_[p] = 0;
  bytes_[p] = 0;
}

}  // namespace aggswitch::dataplane
