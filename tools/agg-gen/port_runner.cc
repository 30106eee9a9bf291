#include "tools/agg-gen/port_runner.h"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>

#include "dataplane/unmap_guard.h"

namespace aggswitch::tools {

using dataplane::UnmapGuard;

namespace {

// In flight at most jobs * workers * window contributions and as many answers;
// the pool holds that with room for the RX/TX rings and lcore caches.
constexpr uint32_t kMinMbufs = 16383;
constexpr uint32_t kMbufCache = 256;
constexpr uint16_t kRingSize = 1024;
constexpr double kFinalAckSeconds = 0.1;  // to get the final ACKs into the TX queue
constexpr double kDrainSeconds = 0.02;    // then receiving, so the peer can take them

std::string ErrorText(int rc) {
  return rte_strerror(rc < 0 ? -rc : rc);
}

}  // namespace

PortRunner::PortRunner(const GenConfig& cfg, uint16_t port_id)
    : cfg_(cfg), port_id_(port_id), frames_(cfg_), engine_(cfg_, frames_, rte_get_tsc_hz()) {}

common::Result<std::unique_ptr<PortRunner>> PortRunner::Create(const GenConfig& cfg,
                                                               uint16_t port_id,
                                                               double link_timeout_s) {
  if (!rte_eth_dev_is_valid_port(port_id)) {
    return common::InvalidArgument("no DPDK port " + std::to_string(port_id) + " (" +
                                   std::to_string(rte_eth_dev_count_avail()) +
                                   " probed): give the EAL a --vdev or an allowed device");
  }
  std::unique_ptr<PortRunner> r(new PortRunner(cfg, port_id));
  RETURN_IF_ERROR(r->StartPort(link_timeout_s));
  return r;
}

common::Status PortRunner::StartPort(double link_timeout_s) {
  rte_eth_dev_info info;
  int rc = rte_eth_dev_info_get(port_id_, &info);
  if (rc != 0) {
    return common::Unavailable("port " + std::to_string(port_id_) + ": " + ErrorText(rc));
  }
  description_ = "port " + std::to_string(port_id_) + " (" + info.driver_name + ")";
  const int socket = rte_eth_dev_socket_id(port_id_);

  const uint64_t in_flight = 2ull * cfg_.jobs * cfg_.workers * cfg_.window;
  const uint32_t mbufs = static_cast<uint32_t>(
      std::max<uint64_t>(kMinMbufs, in_flight + 4ull * kRingSize + 2 * kMbufCache));
  pool_.reset(rte_pktmbuf_pool_create("agg_gen_pool", mbufs, kMbufCache, 0,
                                      RTE_MBUF_DEFAULT_BUF_SIZE,
                                      socket < 0 ? SOCKET_ID_ANY : socket));
  if (!pool_) {
    return common::ResourceExhausted("mempool of " + std::to_string(mbufs) +
                                     " mbufs: " + ErrorText(rte_errno));
  }

  rte_eth_conf conf{};
  rc = rte_eth_dev_configure(port_id_, 1, 1, &conf);
  if (rc != 0) return common::Unavailable(description_ + ": configure: " + ErrorText(rc));
  port_configured_ = true;
  uint16_t rxd = kRingSize, txd = kRingSize;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd);
  if (rc != 0) return common::Unavailable(description_ + ": descriptors: " + ErrorText(rc));
  rc = rte_eth_rx_queue_setup(port_id_, 0, rxd, socket, nullptr, pool_.get());
  if (rc != 0) return common::Unavailable(description_ + ": RX queue: " + ErrorText(rc));
  rc = rte_eth_tx_queue_setup(port_id_, 0, txd, socket, nullptr);
  if (rc != 0) return common::Unavailable(description_ + ": TX queue: " + ErrorText(rc));
  rc = rte_eth_dev_start(port_id_);
  if (rc != 0) return common::Unavailable(description_ + ": start: " + ErrorText(rc));
  port_started_ = true;
  // Results are addressed to the emulated workers' MACs. Ports without the
  // notion (memif, ring, null) answer -ENOTSUP, which is fine.
  rc = rte_eth_promiscuous_enable(port_id_);
  if (rc != 0 && rc != -ENOTSUP) {
    return common::Unavailable(description_ + ": promiscuous mode: " + ErrorText(rc));
  }

  const uint64_t deadline =
      rte_get_timer_cycles() + static_cast<uint64_t>(link_timeout_s * rte_get_timer_hz());
  for (;;) {
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(port_id_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP) break;
    if (rte_get_timer_cycles() >= deadline) {
      return common::Unavailable(description_ + ": no link after " +
                                 std::to_string(link_timeout_s) +
                                 " s (memif: is the server up, on the same socket?)");
    }
    rte_delay_us_sleep(10000);
  }
  return common::Status::Ok();
}

PortRunner::~PortRunner() {
  if (port_started_) (void)rte_eth_dev_stop(port_id_);
  if (port_configured_) (void)rte_eth_dev_close(port_id_);
  // Unsent frames and the stash go back before the pool does.
  rte_pktmbuf_free_bulk(tx_, tx_n_);
  rte_pktmbuf_free_bulk(stash_, stash_n_);
}

int PortRunner::LcoreEntry(void* arg) {
  static_cast<PortRunner*>(arg)->Run();
  return 0;
}

Progress PortRunner::ReadProgress() const {
  Progress p;
  p.tsc = pub_tsc_.load(std::memory_order_acquire);
  p.sent = pub_sent_.load(std::memory_order_relaxed);
  p.retransmits = pub_retransmits_.load(std::memory_order_relaxed);
  p.completed = pub_completed_.load(std::memory_order_relaxed);
  p.errors = pub_errors_.load(std::memory_order_relaxed);
  return p;
}

void PortRunner::Publish(uint64_t now) {
  const GenCounters& c = engine_.counters();
  pub_sent_.store(c.sent, std::memory_order_relaxed);
  pub_retransmits_.store(c.retransmits, std::memory_order_relaxed);
  pub_completed_.store(c.completed, std::memory_order_relaxed);
  pub_errors_.store(c.Errors(), std::memory_order_relaxed);
  pub_tsc_.store(now, std::memory_order_release);
}

void PortRunner::Receive() {
  // Every loop passes here between bursts, holding no pointer into the port.
  UnmapGuard::Quiescent(lcore_);
  rte_mbuf* rx[kBurst];
  const uint16_t n = rte_eth_rx_burst(port_id_, 0, rx, kBurst);
  for (uint16_t i = 0; i < n; ++i) {
    if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(rx[i + 1], void*));
    // The pool's buffers hold a whole 1514-byte frame, so answers are one segment.
    engine_.OnFrame(rte_pktmbuf_mtod(rx[i], const uint8_t*), rte_pktmbuf_data_len(rx[i]));
  }
  rte_pktmbuf_free_bulk(rx, n);
}

void PortRunner::Flush() {
  if (tx_n_ == 0) return;
  // Which are ACKs (the only frames of their length), read before the driver
  // may free the frames it takes.
  static_assert(kBurst < 64);
  uint64_t acks = 0;
  for (uint16_t i = 0; i < tx_n_; ++i) {
    if (rte_pktmbuf_data_len(tx_[i]) == frames_.ack_len()) acks |= uint64_t{1} << i;
  }
  const uint16_t sent = rte_eth_tx_burst(port_id_, 0, tx_, tx_n_);
  port_stats_.acks_sent +=
      static_cast<uint64_t>(__builtin_popcountll(acks & ((uint64_t{1} << sent) - 1)));
  if (sent < tx_n_) {
    // Kept, in order, for the next pass.
    std::memmove(tx_, tx_ + sent, (tx_n_ - sent) * sizeof(tx_[0]));
    ++port_stats_.tx_full;
  }
  tx_n_ = static_cast<uint16_t>(tx_n_ - sent);
}

bool PortRunner::RefillStash() {
  if (stash_n_ == kBurst) return true;
  if (rte_pktmbuf_alloc_bulk(pool_.get(), stash_ + stash_n_, kBurst - stash_n_) == 0) {
    stash_n_ = kBurst;
    return true;
  }
  ++port_stats_.no_mbuf;
  return stash_n_ > 0;
}

void PortRunner::SendChunks(uint64_t now) {
  if (tx_n_ != 0 || !RefillStash()) return;  // the previous burst goes first
  const uint32_t n = engine_.PlanSends(now, ops_, stash_n_);
  for (uint32_t i = 0; i < n; ++i) {
    const SendOp& op = ops_[i];
    rte_mbuf* m = stash_[--stash_n_];
    uint8_t* out = rte_pktmbuf_mtod(m, uint8_t*);
    if (op.final_ack) {
      frames_.WriteAck(op.job, op.worker, op.ack, out);
    } else {
      frames_.WriteContribution(op.job, op.worker, op.seq, op.ack, op.retransmission, out);
    }
    const auto len = static_cast<uint16_t>(op.final_ack ? frames_.ack_len()
                                                         : frames_.contribution_len());
    m->data_len = len;
    m->pkt_len = len;
    tx_[tx_n_++] = m;
  }
  Flush();
}

void PortRunner::SendFinalAcks() {
  // What is queued goes first (it may hold final ACKs), then the final ACK of
  // every worker and job that has not sent it: all of them after a stalled or
  // interrupted run, else the workers that finished last.
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t deadline = rte_rdtsc() + static_cast<uint64_t>(kFinalAckSeconds * hz);
  const uint16_t len = static_cast<uint16_t>(frames_.ack_len());
  const uint32_t pairs = uint32_t{cfg_.jobs} * cfg_.workers;
  uint32_t pair = 0;
  while ((pair < pairs || tx_n_ != 0) && rte_rdtsc() < deadline) {
    Receive();
    if (tx_n_ == 0 && pair < pairs && RefillStash()) {
      for (; stash_n_ > 0 && pair < pairs; ++pair) {
        const uint32_t job = pair / cfg_.workers;
        const uint16_t worker = static_cast<uint16_t>(pair % cfg_.workers);
        if (engine_.FinalAckPlanned(job, worker)) continue;
        rte_mbuf* m = stash_[--stash_n_];
        frames_.WriteAck(job, worker, engine_.Ack(job, worker), rte_pktmbuf_mtod(m, uint8_t*));
        m->data_len = len;
        m->pkt_len = len;
        tx_[tx_n_++] = m;
      }
    }
    Flush();
  }
  const uint64_t drain_end = rte_rdtsc() + static_cast<uint64_t>(kDrainSeconds * hz);
  while (rte_rdtsc() < drain_end) Receive();
}

void PortRunner::Run() {
  lcore_ = rte_lcore_id();
  UnmapGuard::Online(lcore_);
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t start = rte_rdtsc();
  const uint64_t deadline =
      cfg_.duration_s > 0 ? start + static_cast<uint64_t>(cfg_.duration_s * hz) : UINT64_MAX;
  const uint64_t give_up = hz / 1000 * cfg_.give_up_ms;
  const uint64_t publish_every = hz / 1000;
  uint64_t last_publish = start;
  engine_.Start(start);
  Publish(start);
  for (;;) {
    const uint64_t now = rte_rdtsc();
    Receive();
    if (now >= deadline || stop_.load(std::memory_order_relaxed)) engine_.StopSending();
    Flush();
    SendChunks(now);
    if (now - last_publish >= publish_every) {
      Publish(now);
      last_publish = now;
    }
    if (engine_.Done()) break;
    if (now - engine_.last_progress_tsc() > give_up) {
      stalled_ = true;
      break;
    }
  }
  const uint64_t end = rte_rdtsc();
  seconds_ = static_cast<double>(end - start) / hz;
  Publish(end);
  SendFinalAcks();
  UnmapGuard::Offline(lcore_);  // the port is not polled from here on
  finished_.store(true, std::memory_order_release);
}

}  // namespace aggswitch::tools
