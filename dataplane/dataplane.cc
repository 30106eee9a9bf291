#include "dataplane/dataplane.h"

#include <rte_bus.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string_view>
#include <thread>

#include "aggregator/wire.h"
#include "common/log.h"
#include "dataplane/packet.h"
#include "dataplane/unmap_guard.h"
#include "dataplane/worker.h"
#include "dataplane/xsk_stats.h"

namespace aggswitch::dataplane {
namespace {

using common::Status;

// Slots one worker copies out for a dump at most (the API's limit is lower).
constexpr uint32_t kMaxSlotDump = 65536;
// Bypass entries one worker copies out per dump, at most.
constexpr uint32_t kMaxBypassDump = 65536;
// The aging scan visits the whole table about four times per aging period.
constexpr unsigned kAgingPassesPerPeriod = 4;
// Results a worker keeps at a root without a TAN when their slot gives way
// before every member has them (KeptResults): they give way in turn, oldest
// first, to newer ones.
constexpr uint32_t kKeptResults = 16;

std::atomic<unsigned> g_instance{0};

std::string DeviceName(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

std::string Errno(int err) { return rte_strerror(err < 0 ? -err : err); }

std::string VlanModeText(const config::PortConfig& pc) {
  if (pc.mode == config::VlanMode::kAccess) return "access " + std::to_string(pc.access_vlan);
  std::string text = "trunk ";
  for (size_t i = 0; i < pc.trunk_vlans.size(); ++i) {
    if (i) text += ",";
    text += std::to_string(pc.trunk_vlans[i]);
  }
  if (pc.native_vlan) text += " native " + std::to_string(*pc.native_vlan);
  return text;
}

}  // namespace

common::Result<std::unique_ptr<Dataplane>> Dataplane::Create(const config::Config& config,
                                                             aggregator::JobTable* jobs,
                                                             const common::Clock* clock) {
  std::unique_ptr<Dataplane> dp(new Dataplane());
  dp->clock_ = clock != nullptr ? clock : &TscClock();
  dp->tsc_hz_ = dp->clock_->CyclesPerSecond();
  // About one MAC-table tick per second: the largest power of two <= TSC Hz.
  dp->tick_shift_ = static_cast<uint32_t>(std::floor(std::log2(static_cast<double>(dp->tsc_hz_))));
  dp->plan_ = ForwardingPlan::Build(config);
  dp->mac_table_ = std::make_unique<MacTable>(config.mac_table.size);
  RETURN_IF_ERROR(dp->ApplyMacTableConfig(config.mac_table));
  RETURN_IF_ERROR(dp->CreateMempool(config));

  const uint16_t tx_queues = static_cast<uint16_t>(config.workers.size());
  for (const config::PortConfig& pc : config.ports) {
    RETURN_IF_ERROR(dp->OpenPort(pc, config.RxQueueCount(pc.name), tx_queues, jobs == nullptr));
  }
  RETURN_IF_ERROR(dp->CreateWorkers(config, jobs));
  return dp;
}

Dataplane::~Dataplane() {
  Stop();
  if (int_settings_ != nullptr) delete int_settings_->watch.exchange(nullptr);
  if (jobs_ != nullptr) jobs_->SetReclaimHook(nullptr);
  // The workers' rings give back the mbufs they still hold (~WorkerChannels).
  workers_.clear();
  for (Port& port : ports_) {
    if (rte_eth_dev_close(port.port_id) != 0) {
      AGG_LOG(kWarning, "port %s: close failed", port.config.name.c_str());
    }
  }
}

namespace {

constexpr uint32_t kXdpPacketHeadroom = 256;  // XDP_PACKET_HEADROOM

bool AnyAfXdpPort(const config::Config& config) {
  return std::any_of(config.ports.begin(), config.ports.end(),
                     [](const config::PortConfig& pc) { return pc.devargs.rfind("net_af_xdp", 0) == 0; });
}

// The largest mbuf data room whose mempool object fits one 4 KiB UMEM chunk.
uint32_t MaxAfXdpDataRoom() {
  uint32_t room = 4096 - sizeof(rte_mbuf);
  while (room > RTE_MBUF_DEFAULT_BUF_SIZE &&
         rte_mempool_calc_obj_size(sizeof(rte_mbuf) + room, 0, nullptr) > 4096) {
    room -= RTE_CACHE_LINE_SIZE;
  }
  return room;
}

}  // namespace

uint16_t Dataplane::MaxAfXdpMtu() {
  return static_cast<uint16_t>(MaxAfXdpDataRoom() - RTE_PKTMBUF_HEADROOM - kXdpPacketHeadroom -
                               kEtherHdrLen);
}

Status Dataplane::CreateMempool(const config::Config& config) {
  uint16_t max_mtu = 1500;
  for (const config::PortConfig& pc : config.ports) max_mtu = std::max(max_mtu, pc.mtu);
  // Room for the largest frame plus one pushed 802.1Q tag.
  const uint32_t frame = max_mtu + kEtherHdrLen + kVlanHdrLen + 4;
  uint32_t room = std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE, RTE_PKTMBUF_HEADROOM + frame);
  // net_af_xdp receives straight into the pool's mbufs, each one UMEM chunk:
  // the kernel keeps XDP_PACKET_HEADROOM of it, and a chunk (the whole
  // mempool object, as the mempool pads it) may not exceed a 4 KiB page.
  if (AnyAfXdpPort(config)) {
    room = std::max<uint32_t>(room, RTE_PKTMBUF_HEADROOM + kXdpPacketHeadroom + frame);
    room = std::min(room, MaxAfXdpDataRoom());
  }
  const auto data_room = static_cast<uint16_t>(room);
  const std::string name = "agg_mbuf_" + std::to_string(g_instance.fetch_add(1));
  pool_.reset(rte_pktmbuf_pool_create(name.c_str(), config.mempool.mbufs, config.mempool.cache, 0,
                                      data_room, static_cast<int>(rte_socket_id())));
  if (!pool_) {
    return common::ResourceExhausted("cannot create mbuf pool of " +
                                     std::to_string(config.mempool.mbufs) + " mbufs: " +
                                     Errno(rte_errno) + " (raise eal.memory_mb or lower mempool.mbufs)");
  }
  return Status::Ok();
}

Status Dataplane::OpenPort(const config::PortConfig& pc, uint16_t rx_queues, uint16_t tx_queues,
                           bool fast_free) {
  const std::string dev_name = DeviceName(pc.devargs);
  uint16_t port_id = 0;
  if (rte_eth_dev_get_port_by_name(dev_name.c_str(), &port_id) != 0) {
    const int rc = rte_dev_probe(pc.devargs.c_str());
    if (rc != 0) {
      return common::Unavailable("port " + pc.name + ": cannot probe device \"" + pc.devargs +
                                 "\": " + Errno(rc));
    }
    if (rte_eth_dev_get_port_by_name(dev_name.c_str(), &port_id) != 0) {
      return common::NotFound("port " + pc.name + ": device \"" + dev_name +
                              "\" probed but no ethdev has that name");
    }
  }
  rte_eth_dev_info info{};
  if (int rc = rte_eth_dev_info_get(port_id, &info); rc != 0) {
    return common::Internal("port " + pc.name + ": dev_info_get: " + Errno(rc));
  }
  if (std::string_view(info.driver_name) == "net_af_xdp" && pc.mtu > MaxAfXdpMtu()) {
    return common::InvalidArgument("port " + pc.name + ": mtu " + std::to_string(pc.mtu) +
                                   ": a net_af_xdp port takes at most " +
                                   std::to_string(MaxAfXdpMtu()) +
                                   " (each frame is received into one 4 KiB UMEM chunk)");
  }
  if (rx_queues > info.max_rx_queues || tx_queues > info.max_tx_queues) {
    return common::InvalidArgument(
        "port " + pc.name + " (" + info.driver_name + ") supports " +
        std::to_string(info.max_rx_queues) + " rx / " + std::to_string(info.max_tx_queues) +
        " tx queues; the config needs " + std::to_string(rx_queues) + " rx (queues polled) / " +
        std::to_string(tx_queues) + " tx (one per worker)");
  }
  rte_eth_conf conf{};
  if (rx_queues > 1) {
    conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
    conf.rx_adv_conf.rss_conf.rss_hf =
        (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP) & info.flow_type_rss_offloads;
  }
  // Without aggregation every mbuf is direct, from one pool, with refcount 1:
  // the driver may free in bulk (worth about 4 cycles per 64-byte frame on the
  // memif benchmark). Aggregation results share their payload mbuf between
  // copies by reference count, which forbids it.
  if (fast_free && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE)) {
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  }
  // Results are chained mbufs (headers, then a payload the copies share).
  // A driver that sends chains is asked to; one that cannot (net_af_xdp)
  // gets them copied flat by TxBuffers. net_ring passes mbufs through as
  // they are, chains included, without saying so.
  const bool tx_chains = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0 ||
                         std::string_view(info.driver_name) == "net_ring";
  if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
    conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  }
  if (int rc = rte_eth_dev_configure(port_id, rx_queues, tx_queues, &conf); rc != 0) {
    return common::Internal("port " + pc.name + ": configure: " + Errno(rc));
  }
  uint16_t rx_desc = pc.rx_descriptors, tx_desc = pc.tx_descriptors;
  if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &rx_desc, &tx_desc); rc != 0) {
    return common::Internal("port " + pc.name + ": adjust descriptors: " + Errno(rc));
  }
  const std::vector<XskSocket> xsk_before = ListXskSockets();
  const int socket = rte_eth_dev_socket_id(port_id);
  const unsigned queue_socket = socket < 0 ? rte_socket_id() : static_cast<unsigned>(socket);
  for (uint16_t q = 0; q < rx_queues; ++q) {
    rte_eth_rxconf rxconf = info.default_rxconf;
    if (int rc = rte_eth_rx_queue_setup(port_id, q, rx_desc, queue_socket, &rxconf, pool_.get());
        rc != 0) {
      return common::Internal("port " + pc.name + ": rx queue " + std::to_string(q) + ": " + Errno(rc));
    }
  }
  for (uint16_t q = 0; q < tx_queues; ++q) {
    rte_eth_txconf txconf = info.default_txconf;
    txconf.offloads = conf.txmode.offloads;
    if (int rc = rte_eth_tx_queue_setup(port_id, q, tx_desc, queue_socket, &txconf); rc != 0) {
      return common::Internal("port " + pc.name + ": tx queue " + std::to_string(q) + ": " + Errno(rc));
    }
  }
  if (pc.mtu != 1500) {
    // net_ring passes mbufs of any size and has no MTU to set.
    const int rc = rte_eth_dev_set_mtu(port_id, pc.mtu);
    if (rc != 0 && !(rc == -ENOTSUP && std::string_view(info.driver_name) == "net_ring")) {
      return common::InvalidArgument("port " + pc.name + ": cannot set mtu " + std::to_string(pc.mtu) +
                                     ": " + Errno(rc));
    }
  }
  // A switch must see every frame, not only those for the port's own MAC.
  if (int rc = rte_eth_promiscuous_enable(port_id); rc != 0 && rc != -ENOTSUP) {
    AGG_LOG(kWarning, "port %s: cannot enable promiscuous mode: %s", pc.name.c_str(), Errno(rc).c_str());
  }
  if (int rc = rte_eth_dev_start(port_id); rc != 0) {
    return common::Internal("port " + pc.name + ": start: " + Errno(rc));
  }
  // DPDK 22.11's af_packet PMD opens its socket for every interface and binds
  // it to its own only after setting up the ring: what other interfaces
  // carried in between sits in the ring. Those frames were never on this
  // port; switching them would learn foreign MACs here (and feed strangers'
  // jobs to the aggregation engine). Nothing has polled the port yet, so
  // everything queued now predates the switch: discard it.
  if (std::string_view(info.driver_name) == "net_af_packet") {
    uint64_t discarded = 0;
    for (uint16_t q = 0; q < rx_queues; ++q) {
      rte_mbuf* burst[32];
      for (int i = 0; i < 1024; ++i) {
        const uint16_t n = rte_eth_rx_burst(port_id, q, burst, 32);
        if (n == 0) break;
        rte_pktmbuf_free_bulk(burst, n);
        discarded += n;
      }
    }
    if (discarded > 0) {
      AGG_LOG(kInfo, "port %s: discarded %llu frames queued before start (af_packet captures "
              "every interface until it binds to its own)", pc.name.c_str(),
              static_cast<unsigned long long>(discarded));
    }
  }
  // The kernel counts what a net_af_xdp port's sockets drop (xsk_stats.h):
  // they are the AF_XDP sockets its queues' set-up opened.
  std::vector<XskSocket> xsks;
  if (std::string_view(info.driver_name) == "net_af_xdp") xsks = NewXskSockets(xsk_before, ListXskSockets());
  ports_.push_back(Port{pc, port_id, rx_queues, tx_queues, true, tx_chains, std::move(xsks)});
  AGG_LOG(kInfo, "port %s: %s (ethdev %u, %s), %u rx / %u tx queues, %s%s", pc.name.c_str(),
          pc.devargs.c_str(), port_id, info.driver_name, rx_queues, tx_queues,
          VlanModeText(pc).c_str(),
          tx_chains ? "" : "; sends single-buffer frames: results are copied flat for it");
  if (pc.faults) {
    static constexpr const char* kDirection[] = {"received", "sent", "received and sent"};
    AGG_LOG(kWarning,
            "port %s: injecting faults into frames %s: loss %g, duplicate %g, reorder %g, delay %u us "
            "(seed %llu)",
            pc.name.c_str(), kDirection[static_cast<int>(pc.faults->direction)], pc.faults->loss,
            pc.faults->duplicate, pc.faults->reorder, pc.faults->delay_us,
            static_cast<unsigned long long>(pc.faults->seed));
  }
  return Status::Ok();
}

Status Dataplane::CreateWorkers(const config::Config& config, aggregator::JobTable* jobs) {
  if (config.telemetry.enabled()) {
    RETURN_IF_ERROR(SetUpTelemetry(config));
    int_settings_->aggregation = jobs != nullptr && config.aggregation.enabled;
  }
  const unsigned instance = g_instance.fetch_add(1);
  const uint16_t n_workers = static_cast<uint16_t>(config.workers.size());
  const bool aggregation = jobs != nullptr;
  AggregationSetup agg;
  aggregator::SlotTableConfig slots;
  uint32_t bypass_entries = 0;
  uint64_t bypass_ttl = 0;
  if (aggregation) {
    agg.jobs = jobs;
    agg.n_workers = n_workers;
    agg.udp_port = config.aggregation.udp_port;
    agg.address = config.aggregation.address ? config.aggregation.address->prefix.ip.addr : 0;
    agg.result_src_ip = agg.address != 0 || config.switch_.addresses.empty()
                            ? agg.address
                            : config.switch_.addresses.front().prefix.ip.addr;
    uint16_t max_mtu = 1500;
    for (const config::PortConfig& pc : config.ports) max_mtu = std::max(max_mtu, pc.mtu);
    const uint32_t total_slots = config.aggregation.slots;
    slots.slots = (total_slots + n_workers - 1) / n_workers;
    slots.max_fan_in = config.aggregation.max_fan_in;
    slots.max_payload = max_mtu - 20u - 8u - static_cast<uint32_t>(sizeof(aggregator::AggHeader));
    slot_regions_ = aggregator::SlotRegions::Make(total_slots, config.aggregation.InBandSlots(),
                                                  config.aggregation.SpareSlots());
    escalations_ = std::make_unique<EscalationPolicy>(
        *jobs, slot_regions_, std::chrono::milliseconds(config.aggregation.stale_slot_ms));
    agg.regions = slot_regions_;
    // Member bindings and slot quotas count in ticks of about a millisecond:
    // 2^k cycles with k = floor(log2(hz / 1000)).
    agg.seen_shift = 0;
    while ((uint64_t{2} << agg.seen_shift) <= tsc_hz_ / 1000) ++agg.seen_shift;
    seen_shift_ = agg.seen_shift;
    agg.rebind_ticks = MillisecondsToTicks(config.aggregation.member_rebind_ms);
    // The restart grace (aggregation.restart_grace_ms, Job::UpLabel), from
    // now: a switch back from a restart waits that long for every member of
    // a run before it labels what it sends up with some of them.
    agg.started_tsc = clock_->Cycles();
    agg.settle_cycles = static_cast<uint64_t>(config.aggregation.restart_grace_ms * 1e-3 *
                                              static_cast<double>(tsc_hz_));
    // Final results: sent again after 10 ms, 20, 40, ... (FinalDelivery).
    agg.final_retry_cycles = tsc_hz_ / 100;
    agg.final_give_up_cycles = static_cast<uint64_t>(config.aggregation.store.final_timeout_ms * 1e-3 *
                                                     static_cast<double>(tsc_hz_));
    // The held contributions' own pool: RX never waits for them.
    const std::string hold_name = "agg_hold_" + std::to_string(instance);
    hold_pool_.reset(rte_mempool_create(hold_name.c_str(), config.aggregation.hold.buffers,
                                        HoldBuffers::ElementSize(slots.max_payload),
                                        std::min<unsigned>(256, config.aggregation.hold.buffers / 8), 0,
                                        nullptr, nullptr, nullptr, nullptr,
                                        static_cast<int>(rte_socket_id()), 0));
    if (!hold_pool_) {
      return common::ResourceExhausted("cannot create the hold pool of " +
                                       std::to_string(config.aggregation.hold.buffers) +
                                       " buffers: " + Errno(rte_errno) +
                                       " (raise eal.memory_mb or lower aggregation.hold.buffers)");
    }
    slots.stale_cycles = static_cast<uint64_t>(config.aggregation.stale_slot_ms * 1e-3 *
                                               static_cast<double>(tsc_hz_));
    // One resend of a forwarded slot's partial per round of its members'
    // retransmissions: rounds come at least the clients' first RTO apart
    // (20 ms by default), the members of one round within a few ms.
    slots.resend_gap_cycles = tsc_hz_ / 200;  // 5 ms
    // Timer buckets of about 100 us: 2^k cycles with k = floor(log2(hz / 10^4)).
    slots.timer_tick_shift = 0;
    while ((uint64_t{2} << slots.timer_tick_shift) <= tsc_hz_ / 10000) ++slots.timer_tick_shift;
    bypass_entries =
        std::max<uint32_t>(64, (config.aggregation.bypass.entries + n_workers - 1) / n_workers);
    bypass_ttl = static_cast<uint64_t>(config.aggregation.bypass.ttl_ms * 1e-3 *
                                       static_cast<double>(tsc_hz_));
    jobs_ = jobs;
    n_agg_workers_ = n_workers;
    // Per-index counters start at zero for every job that takes the index.
    jobs->SetReclaimHook([this](uint16_t index) {
      for (const WorkerParts& w : workers_) w.stats->jobs[index].Reset();
    });
  }
  // Every part of every worker first: each worker's setup names the others'
  // hand-off rings.
  workers_.resize(n_workers);
  for (uint16_t w = 0; w < n_workers; ++w) {
    WorkerParts& parts = workers_[w];
    WorkerChannels::Options options;
    options.suffix = std::to_string(instance) + "_" + std::to_string(w);
    options.aggregation = aggregation;
    options.handoff = aggregation && n_workers > 1;
    options.in_band = aggregation && config.aggregation.in_band_registration;
    options.control_tx = aggregation && w == 0;
    options.max_fan_in = config.aggregation.max_fan_in;
    options.slot_dump_capacity = std::min<uint32_t>(slots.slots, kMaxSlotDump);
    options.bypass_dump_capacity = std::min<uint32_t>(bypass_entries, kMaxBypassDump);
    options.telemetry = int_settings_ != nullptr;
    ASSIGN_OR_RETURN(parts.channels, WorkerChannels::Create(options));
    parts.stats = std::make_unique<LcoreStats>();
    if (!aggregation) continue;
    parts.stats->jobs = std::make_unique<JobCounters[]>(jobs->max_jobs());
    parts.slots = std::make_unique<aggregator::SlotTable>(slots);
    // In-band jobs' share of the hold pool, split over the workers.
    const uint32_t in_band_budget = (config.aggregation.InBandHeldTotal() + n_workers - 1) / n_workers;
    parts.holds = std::make_unique<HoldBuffers>(hold_pool_.get(), in_band_budget, slots.max_payload);
    // The store's buffers, split evenly: a job's chunks spread over the
    // workers' home slots.
    if (config.aggregation.store.buffers != 0) {
      parts.store = std::make_unique<ParameterStore>(
          (config.aggregation.store.buffers + n_workers - 1) / n_workers, slots.max_payload,
          jobs->max_jobs(), n_workers);
    }
    parts.bypass = std::make_unique<aggregator::BypassTable>(bypass_entries, bypass_ttl);
    if (slot_regions_.spare.size != 0) {
      // Every lease may be of a chunk whose placed slot this worker owns.
      parts.relocations = std::make_unique<aggregator::RelocationMap>(slot_regions_.spare.size);
    }
    parts.kept = std::make_unique<KeptResults>(kKeptResults, slots.max_payload);
    agg.handoff[w] = parts.channels->handoff.get();
  }
  for (uint16_t w = 0; w < n_workers; ++w) {
    WorkerParts& parts = workers_[w];
    const config::WorkerConfig& wc = config.workers[w];
    WorkerSetup setup;
    setup.lcore = wc.lcore;
    setup.tx_queue = w;
    setup.tick_shift = tick_shift_;
    setup.idle_sleep_us = config.eal.idle_sleep_us;
    setup.int_settings = int_settings_.get();
    setup.worker_index = w;
    setup.clock = clock_;
    if (aggregation) {
      setup.agg = agg;
      setup.agg.index = w;
      setup.agg.slots = parts.slots.get();
      setup.agg.holds = parts.holds.get();
      setup.agg.store = parts.store.get();
      setup.agg.bypass = parts.bypass.get();
      setup.agg.job_counters = parts.stats->jobs.get();
      setup.agg.relocations = parts.relocations.get();
      setup.agg.kept = parts.kept.get();
      ASSIGN_OR_RETURN(setup.agg.reader_id, jobs->RegisterReader());
    }
    for (size_t p = 0; p < ports_.size(); ++p) {
      setup.port_ids[p] = ports_[p].port_id;
      if (config.ports[p].faults) setup.faults[p] = &*config.ports[p].faults;
      if (!ports_[p].tx_chains) setup.linear_tx_ports |= uint64_t{1} << p;
    }
    parts.info = WorkerInfo{wc.lcore, setup.tx_queue, {}};
    for (const config::RxQueueRef& rx : wc.rx) {
      if (setup.n_rx == kMaxRxQueuesPerWorker) {
        return common::InvalidArgument("worker on lcore " + std::to_string(wc.lcore) + " polls more than " +
                                       std::to_string(kMaxRxQueuesPerWorker) + " queues");
      }
      setup.rx[setup.n_rx++] = WorkerSetup::Rx{static_cast<uint16_t>(config.PortIndex(rx.port)), rx.queue};
      parts.info.rx.emplace_back(rx.port, rx.queue);
    }
    parts.worker = std::make_unique<Worker>(setup, *plan_, *mac_table_, *parts.channels, pool_.get(),
                                            *parts.stats, quit_);
  }
  return Status::Ok();
}

Status Dataplane::SetUpTelemetry(const config::Config& config) {
  RETURN_IF_ERROR(IntMark::Register());
  const config::TelemetryConfig& t = config.telemetry;
  int_settings_ = std::make_unique<IntSettings>();
  int_settings_->node_id = t.node_id;
  if (t.collector) int_settings_->collector = *t.collector;
  int_settings_->int_port = t.int_port;
  int_settings_->max_hops = t.max_hops;
  int_settings_->n_workers = static_cast<uint16_t>(std::max<size_t>(1, config.workers.size()));
  for (size_t p = 0; p < config.ports.size(); ++p) {
    if (config.ports[p].role == config::PortRole::kFabric) int_settings_->fabric_ports |= uint64_t{1} << p;
    int_settings_->ip_mtu[p] = config.ports[p].mtu;
  }
  agg_udp_port_ = config.aggregation.udp_port;
  int_settings_->agg_udp_port = config.aggregation.udp_port;
  if (config.aggregation.address) int_settings_->agg_address = config.aggregation.address->prefix.ip.addr;
  return SetWatchList(t.watch);
}

Status Dataplane::SetPathDecisions(const std::vector<PathDecision>& decisions) {
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (decisions[i].port >= plan_->port_count()) {
      return common::InvalidArgument("decisions[" + std::to_string(i) +
                                     "].port: expected a port index below " +
                                     std::to_string(plan_->port_count()) + ", got " +
                                     std::to_string(decisions[i].port));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<const PathDecisions> next, PathDecisions::Build(decisions));
  std::lock_guard<std::mutex> lock(decisions_mu_);
  std::unique_ptr<const PathDecisions> old = plan_->groups().Publish(std::move(next));
  // No worker holds the old table past its poll.
  if (old != nullptr) UnmapGuard::Synchronize();
  return Status::Ok();
}

void Dataplane::WatchGroupLinks() {
  UplinkGroups& groups = plan_->groups();
  const uint64_t members = groups.members();
  if (members == 0) return;
  const uint64_t now = clock_->Cycles();
  if (now - group_links_checked_tsc_ < tsc_hz_ / 10) return;
  group_links_checked_tsc_ = now;
  uint64_t down = 0;
  for (uint64_t rest = members; rest != 0; rest &= rest - 1) {
    const auto p = static_cast<uint16_t>(__builtin_ctzll(rest));
    rte_eth_link link{};
    if (rte_eth_link_get_nowait(ports_[p].port_id, &link) == 0 &&
        link.link_status == RTE_ETH_LINK_DOWN) {
      down |= uint64_t{1} << p;
    }
  }
  const uint64_t changed = down ^ groups.down();
  if (changed == 0) return;
  for (uint64_t rest = changed; rest != 0; rest &= rest - 1) {
    const auto p = static_cast<uint16_t>(__builtin_ctzll(rest));
    AGG_LOG(kWarning, "uplink group %s: %s link %s", groups.name(p).c_str(),
            plan_->port(p).name.c_str(), (down >> p & 1) != 0 ? "down, its flows move to the others" : "up again");
  }
  groups.SetDown(down);
}

std::vector<PathDecision> Dataplane::path_decisions() const {
  std::lock_guard<std::mutex> lock(decisions_mu_);
  const PathDecisions* table = plan_->groups().decisions();
  return table == nullptr ? std::vector<PathDecision>{} : table->entries();
}

Status Dataplane::SetWatchList(const std::vector<config::WatchEntry>& entries) {
  if (int_settings_ == nullptr) {
    return common::FailedPrecondition("in-band telemetry is off: the config has no telemetry section");
  }
  std::lock_guard<std::mutex> lock(watch_mu_);
  std::unique_ptr<const WatchList> next = WatchList::Build(entries, agg_udp_port_);
  const WatchList* old = int_settings_->watch.exchange(next.release(), std::memory_order_acq_rel);
  watch_entries_ = entries;
  // No worker holds the old list past its poll.
  if (old != nullptr) {
    UnmapGuard::Synchronize();
    delete old;
  }
  return Status::Ok();
}

std::vector<config::WatchEntry> Dataplane::watch_entries() const {
  std::lock_guard<std::mutex> lock(watch_mu_);
  return watch_entries_;
}

size_t Dataplane::ProcessIntRecords(const std::function<void(const IntHopRecord&)>& fn) {
  size_t n = 0;
  for (WorkerParts& w : workers_) {
    rte_ring* ring = w.channels->int_records.get();
    if (ring == nullptr) continue;
    IntHopRecord records[64];
    unsigned got;
    while ((got = rte_ring_sc_dequeue_burst_elem(ring, records, sizeof(IntHopRecord), 64, nullptr)) != 0) {
      for (unsigned i = 0; i < got; ++i) fn(records[i]);
      n += got;
    }
  }
  return n;
}

Status Dataplane::Start() {
  if (running_) return common::FailedPrecondition("dataplane already running");
  quit_.store(false, std::memory_order_relaxed);
  for (size_t w = 0; w < workers_.size(); ++w) {
    const unsigned lcore = workers_[w].info.lcore;
    if (!rte_lcore_is_enabled(lcore) || lcore == rte_get_main_lcore()) {
      Stop();
      return common::InvalidArgument("lcore " + std::to_string(lcore) +
                                     " is not an enabled worker lcore (check eal.lcores)");
    }
    if (int rc = rte_eal_remote_launch(Worker::LaunchEntry, workers_[w].worker.get(), lcore); rc != 0) {
      Stop();
      return common::Unavailable("cannot launch worker on lcore " + std::to_string(lcore) + ": " +
                                 Errno(rc));
    }
    running_ = true;
  }
  running_ = true;
  return Status::Ok();
}

void Dataplane::Stop() {
  quit_.store(true, std::memory_order_relaxed);
  if (running_) {
    for (const WorkerParts& w : workers_) rte_eal_wait_lcore(w.info.lcore);
    running_ = false;
  }
  StopPorts();
}

void Dataplane::StopPorts() {
  for (Port& port : ports_) {
    if (!port.started) continue;
    if (rte_eth_dev_stop(port.port_id) != 0) {
      AGG_LOG(kWarning, "port %s: stop failed", port.config.name.c_str());
    }
    port.started = false;
  }
}

void Dataplane::PollWorkerOnce(size_t index) {
  if (running_ || index >= workers_.size()) return;
  workers_[index].worker->PollOnce();
}

void Dataplane::ProcessLearnRequests() {
  const uint32_t now = NowTick();
  LearnRequest batch[64];
  for (WorkerParts& w : workers_) {
    rte_ring* ring = w.channels->learn.get();
    // Bounded: at most one ring's worth per call, so the control loop stays responsive.
    for (unsigned drained = 0; drained < WorkerChannels::kLearnRingSize;) {
      const unsigned n = rte_ring_sc_dequeue_burst_elem(ring, batch, sizeof(LearnRequest), 64, nullptr);
      if (n == 0) break;
      drained += n;
      for (unsigned i = 0; i < n; ++i) {
        switch (mac_table_->Learn(batch[i].key, batch[i].port, now)) {
          case MacTable::LearnResult::kAdded: mac_events_.learned.Add(1); break;
          case MacTable::LearnResult::kMoved: mac_events_.moved.Add(1); break;
          case MacTable::LearnResult::kStaticConflict: mac_events_.static_conflicts.Add(1); break;
          case MacTable::LearnResult::kFull: mac_events_.table_full.Add(1); break;
          case MacTable::LearnResult::kRefreshed: break;
        }
      }
    }
  }
}

void Dataplane::AgeMacTable() {
  const uint32_t aging = aging_seconds_.load(std::memory_order_relaxed);
  if (aging == 0) return;
  const double tick_s = TickSeconds();
  const auto max_age = static_cast<uint32_t>(std::ceil(aging / tick_s));
  // Called about every millisecond: spread one full pass over aging/4 seconds.
  const double calls_per_pass = std::max(1.0, aging * 1000.0 / kAgingPassesPerPeriod);
  const auto budget = static_cast<uint32_t>(
      std::max(1.0, std::ceil(mac_table_->bucket_count() / calls_per_pass)));
  mac_events_.aged.Add(mac_table_->AgeSome(NowTick(), max_age, budget));
}

Status Dataplane::ApplyMacTableConfig(const config::MacTableConfig& mac_config) {
  mac_table_->ClearStatic();
  for (const config::StaticMacEntry& e : mac_config.static_entries) {
    int port = -1;
    for (uint16_t p = 0; p < plan_->port_count(); ++p) {
      if (plan_->port(p).name == e.port) port = p;
    }
    if (port < 0) return common::NotFound("static MAC " + e.mac.ToString() + ": no port " + e.port);
    RETURN_IF_ERROR(mac_table_->AddStatic(MacKey(e.vlan, e.mac), static_cast<uint16_t>(port)));
  }
  aging_seconds_.store(mac_config.aging_seconds, std::memory_order_relaxed);
  return Status::Ok();
}

PortInfo Dataplane::GetPortInfo(size_t port_index) const {
  const Port& port = ports_[port_index];
  PortInfo info;
  info.name = port.config.name;
  info.devargs = port.config.devargs;
  info.port_id = port.port_id;
  info.rx_queues = port.rx_queues;
  info.tx_queues = port.tx_queues;
  info.vlan_mode = VlanModeText(port.config);
  rte_eth_dev_info dev{};
  if (rte_eth_dev_info_get(port.port_id, &dev) == 0 && dev.driver_name) info.driver = dev.driver_name;
  rte_ether_addr mac{};
  if (rte_eth_macaddr_get(port.port_id, &mac) == 0) std::copy_n(mac.addr_bytes, 6, info.mac.bytes.begin());
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port.port_id, &link) == 0) {
    info.link_up = link.link_status == RTE_ETH_LINK_UP;
    info.link_speed_mbps = link.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0 : link.link_speed;
  }
  return info;
}

PortTotals Dataplane::GetPortTotals(size_t port_index) const {
  PortTotals t;
  for (const WorkerParts& w : workers_) {
    const PortCounters& c = w.stats->ports[port_index];
#define AGG_PORT_SUM(name, help) t.name += c.name.Get();
    AGG_PORT_COUNTERS(AGG_PORT_SUM)
#undef AGG_PORT_SUM
    for (size_t r = 0; r < kNumDropReasons; ++r) t.drops[r] += c.drops[r].Get();
    for (size_t f = 0; f < kNumFaults; ++f) t.faults[f] += c.faults[f].Get();
  }
  rte_eth_stats eth{};
  if (rte_eth_stats_get(ports_[port_index].port_id, &eth) != 0) eth = rte_eth_stats{};
  const XskCounters xsk = ReadXskCounters(ports_[port_index].xsks);
#define AGG_PORT_DEVICE_READ(name, source, help) t.dev_##name = source;
  AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_READ)
#undef AGG_PORT_DEVICE_READ
  return t;
}

std::vector<RingFill> Dataplane::WorkerRingsNow(size_t index) const {
  std::vector<RingFill> out;
  if (index >= workers_.size() || workers_[index].channels == nullptr) return out;
  workers_[index].channels->ForEachRing([&out](const char* name, const rte_ring* ring) {
    out.push_back(RingFill{name, rte_ring_count(ring), rte_ring_get_capacity(ring)});
  });
  return out;
}

std::vector<PoolStats> Dataplane::PoolStatsNow() const {
  std::vector<PoolStats> out;
  auto add = [&out](const char* name, const rte_mempool* pool) {
    if (pool == nullptr) return;
    out.push_back(PoolStats{name, pool->size, rte_mempool_avail_count(pool)});
  };
  add("mbuf", pool_.get());
  add("hold", hold_pool_.get());
  return out;
}

namespace {

// The NACK that tells a member why its job was not registered; 0: it exists now.
aggregator::NackReason VerdictOf(RegistrationResult result) {
  using aggregator::NackReason;
  switch (result) {
    case RegistrationResult::admitted:
    case RegistrationResult::existing:
      return NackReason{0};
    case RegistrationResult::table_full:
      return NackReason::kJobTableFull;
    case RegistrationResult::key_mismatch:
      return NackReason::kKeyMismatch;
    case RegistrationResult::invalid:
      return NackReason::kMalformed;
    case RegistrationResult::rate_limited:
      return NackReason::kRateLimited;
    case RegistrationResult::in_band_full:
      return NackReason::kInBandFull;
    case RegistrationResult::no_upstream:
      return NackReason::kNoUpstream;
    case RegistrationResult::no_parameter_node:
      return NackReason::kNoParameterNode;
    case RegistrationResult::kCount:
      break;
  }
  return NackReason::kMalformed;
}

}  // namespace

size_t Dataplane::ProcessRegistrations(const Admission& admit) {
  size_t handled = 0;
  for (WorkerParts& w : workers_) {
    rte_ring* up = w.channels->upcall.get();
    rte_ring* down = w.channels->reinject.get();
    if (up == nullptr) continue;
    FrameRef batch[32];
    // What the way back has room for, so no datagram is stranded; bounded by
    // the ring size per call.
    unsigned room = rte_ring_free_count(down);
    while (room > 0) {
      const unsigned n = rte_ring_sc_dequeue_burst_elem(up, batch, sizeof(FrameRef),
                                                        std::min(room, 32u), nullptr);
      if (n == 0) break;
      room -= n;
      for (unsigned i = 0; i < n; ++i) {
        FrameRef& u = batch[i];
        const auto* data = rte_pktmbuf_mtod(u.m, const uint8_t*);
        UdpInfo udp;
        aggregator::AggPacket pkt;
        // The worker checked both before sending it up.
        if (!ParseAggregationFrame(data, rte_pktmbuf_data_len(u.m), u.l3_offset, &udp, &pkt)) {
          rte_pktmbuf_free(u.m);
          continue;
        }
        const aggregator::AggHeader& h = *pkt.header;
        RegistrationRequest request;
        request.job_id = h.job_id.host();
        request.key = h.job_key.host();
        request.expected = h.expected.host();
        request.node_count = h.node_count.host();
        request.ordered = (h.flags.host() & aggregator::flags::kOrdered) != 0;
        request.verify = (h.flags.host() & aggregator::flags::kVerifyMode) != 0;
        request.addr_low = h.addr_low.host();
        request.node_id = h.node_id.host();
        request.src_ip = udp.src_ip;
        const RegistrationResult result = admit(request);
        registrations_[static_cast<size_t>(result)].Add(1);
        u.verdict_or_spare = static_cast<uint16_t>(VerdictOf(result));
        // Cannot fail: `room` was checked and the control thread is the only producer.
        (void)rte_ring_sp_enqueue_elem(down, &u, sizeof(FrameRef));
        ++handled;
      }
    }
  }
  return handled;
}

size_t Dataplane::ProcessEscalations(std::chrono::steady_clock::time_point now) {
  if (!escalations_) return 0;
  // An escalation sends at most a move to every worker, the word to forget
  // a lease that ended to one, and its own answer. Handled only while every
  // ring has room for all three, so none is ever lost; bounded by the ring
  // size per call.
  const auto room = [&] {
    for (const WorkerParts& w : workers_) {
      if (rte_ring_free_count(w.channels->relocate.get()) < 3) return false;
    }
    return true;
  };
  // Cannot fail: `room` was checked and the control thread is each ring's
  // only producer.
  const auto send = [](WorkerParts& to, Relocation r) {
    (void)rte_ring_sp_enqueue_elem(to.channels->relocate.get(), &r, sizeof(r));
  };
  constexpr FrameRef kNoFrame{nullptr, 0, 0, 0, Via::kPlacement, 0};
  size_t handled = 0;
  for (WorkerParts& w : workers_) {
    rte_ring* up = w.channels->escalate.get();
    for (unsigned budget = WorkerChannels::kEscalateRingSize; budget > 0 && room(); --budget) {
      Escalation e;
      if (rte_ring_sc_dequeue_elem(up, &e, sizeof(e)) != 0) break;
      const EscalationPolicy::Answer a = escalations_->Decide(e, now);
      if (a.moved_now) {
        // Before any answer that counts on it, on every worker: each sends
        // on the chunks whose home slot it owns.
        for (WorkerParts& to : workers_) {
          send(to, Relocation{kNoFrame, e.job_id, e.job_generation, 0, 0, Relocation::Kind::kMove});
        }
      }
      if (a.ended) {
        send(workers_[a.ended->placed_slot % n_agg_workers_],
             Relocation{kNoFrame, a.ended->key.job_id, a.ended->key.job_generation,
                        a.ended->key.seq, a.hint, Relocation::Kind::kForget});
      }
      // The escalating worker owns the slot the contribution collided at.
      send(w, Relocation{e.frame, e.job_id, e.job_generation, e.seq, a.hint, a.kind});
      ++handled;
    }
  }
  return handled;
}

void Dataplane::ReadJobCounters(uint16_t index, uint64_t (&out)[kNumJobCounters]) const {
  if (jobs_ == nullptr || index >= jobs_->max_jobs()) return;
  for (const WorkerParts& w : workers_) w.stats->jobs[index].AddTo(out);
}

uint32_t Dataplane::JobStoreBuffers(uint16_t index, uint32_t generation) const {
  uint32_t n = 0;
  for (const WorkerParts& w : workers_) {
    if (w.store != nullptr) n += w.store->JobUsed(index, generation);
  }
  return n;
}

SlotLatencyTotals Dataplane::ReadSlotLatency() const {
  SlotLatencyTotals t;
  uint64_t cycles = 0;
  for (const WorkerParts& w : workers_) {
    const LatencyHistogram& h = w.stats->lcore.slot_latency;
    for (size_t b = 0; b < kSlotLatencyBuckets; ++b) t.buckets[b] += h.buckets[b].Get();
    t.count += h.count.Get();
    cycles += h.sum_cycles.Get();
  }
  t.sum_seconds = static_cast<double>(cycles) / static_cast<double>(tsc_hz_);
  return t;
}

common::Result<SlotDump> Dataplane::DumpSlots(size_t limit, std::chrono::milliseconds timeout) const {
  SlotDump dump;
  if (jobs_ == nullptr) return dump;
  std::lock_guard<std::mutex> lock(dump_mu_);
  const uint32_t per_worker = static_cast<uint32_t>(std::min<size_t>(limit, kMaxSlotDump));
  if (running_) RETURN_IF_ERROR(AwaitDumps(&WorkerChannels::slot_dump, per_worker, timeout, "slots"));
  const uint32_t n_workers = static_cast<uint32_t>(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    const SlotDumpExchange& d = *workers_[w].channels->slot_dump;
    const aggregator::SlotTable& table = *workers_[w].slots;
    const unsigned lcore = workers_[w].info.lcore;
    auto add = [&](const SlotDumpExchange::Entry& e, uint64_t now_tsc) {
      SlotInfo& info = dump.slots.emplace_back();
      info.lcore = lcore;
      info.index = e.index * n_workers + static_cast<uint32_t>(w);
      info.complete = e.complete;
      info.forwarded = e.forwarded;
      info.job_id = e.job_id;
      info.seq = e.seq;
      info.count = e.count;
      info.expected = e.expected;
      info.dtype = e.dtype;
      info.op = e.op;
      info.elem_count = e.elem_count;
      info.overflow = e.overflow;
      const int64_t age = static_cast<int64_t>(now_tsc - e.first_tsc);
      info.age_seconds = age <= 0 ? 0.0 : static_cast<double>(age) / static_cast<double>(tsc_hz_);
    };
    if (running_) {
      dump.busy += d.busy;
      for (uint32_t i = 0; i < d.n; ++i) add(d.entries[i], d.now_tsc);
      dump.truncated |= d.busy > d.n;
      continue;
    }
    // Stopped: nobody else touches the slots.
    const uint64_t now = clock_->Cycles();
    uint32_t taken = 0;
    for (uint32_t i = 0; i < table.size(); ++i) {
      const aggregator::Slot& slot = table.slot(i);
      if (slot.state() == aggregator::Slot::State::kFree) continue;
      ++dump.busy;
      if (taken == per_worker) {
        dump.truncated = true;
        continue;
      }
      ++taken;
      add(SlotDumpExchange::Entry::Of(i, slot), now);
    }
  }
  if (dump.slots.size() > limit) {
    dump.slots.resize(limit);
    dump.truncated = true;
  }
  return dump;
}

template <typename Exchange>
common::Status Dataplane::AwaitDumps(std::unique_ptr<Exchange> WorkerChannels::*which,
                                     uint32_t per_worker, std::chrono::milliseconds timeout,
                                     const char* what) const {
  std::vector<uint64_t> generation(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    Exchange& d = *(workers_[w].channels.get()->*which);
    d.limit.store(per_worker, std::memory_order_relaxed);
    generation[w] = d.requested.load(std::memory_order_relaxed) + 1;
    d.requested.store(generation[w], std::memory_order_release);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t w = 0; w < workers_.size(); ++w) {
    const Exchange& d = *(workers_[w].channels.get()->*which);
    while (d.done.load(std::memory_order_acquire) < generation[w]) {
      if (std::chrono::steady_clock::now() >= deadline) {
        return common::Unavailable("worker on lcore " + std::to_string(workers_[w].info.lcore) +
                                   " did not copy out its " + what + " within " +
                                   std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return common::Status::Ok();
}

common::Result<BypassDump> Dataplane::DumpBypass(size_t limit, std::chrono::milliseconds timeout) const {
  BypassDump dump;
  if (jobs_ == nullptr) return dump;
  std::lock_guard<std::mutex> lock(dump_mu_);
  const uint32_t per_worker = static_cast<uint32_t>(std::min<size_t>(limit, kMaxBypassDump));
  if (running_) {
    RETURN_IF_ERROR(AwaitDumps(&WorkerChannels::bypass_dump, per_worker, timeout, "bypass entries"));
  }
  for (size_t w = 0; w < workers_.size(); ++w) {
    const unsigned lcore = workers_[w].info.lcore;
    auto add = [&](const aggregator::BypassKey& key, uint64_t expiry, uint64_t now) {
      BypassInfo& info = dump.entries.emplace_back();
      info.lcore = lcore;
      info.job_id = key.job_id;
      info.seq = key.seq;
      info.node = key.node;
      info.ttl_seconds = expiry > now ? static_cast<double>(expiry - now) / static_cast<double>(tsc_hz_) : 0;
    };
    if (running_) {
      const BypassDumpExchange& d = *workers_[w].channels->bypass_dump;
      dump.live += d.busy;
      for (uint32_t i = 0; i < d.n; ++i) add(d.entries[i].key, d.entries[i].expiry_tsc, d.now_tsc);
      dump.truncated |= d.busy > d.n;
      continue;
    }
    // Stopped: nobody else touches the table.
    const uint64_t now = clock_->Cycles();
    uint32_t cursor = 0;
    do {
      cursor = workers_[w].bypass->Dump(cursor, BypassDumpEntry::kScanPerPass, now,
                                       [&](const aggregator::BypassKey& key, uint64_t expiry) {
                                         ++dump.live;
                                         add(key, expiry, now);
                                       });
    } while (cursor != 0);
  }
  if (dump.entries.size() > limit) {
    dump.entries.resize(limit);
    dump.truncated = true;
  }
  return dump;
}

uint32_t Dataplane::NowTick() const { return static_cast<uint32_t>(clock_->Cycles() >> tick_shift_); }

uint32_t Dataplane::SeenTick() const { return static_cast<uint32_t>(clock_->Cycles() >> seen_shift_); }

uint32_t Dataplane::MillisecondsToTicks(uint32_t ms) const {
  const double ticks = static_cast<double>(ms) * 1e-3 * static_cast<double>(tsc_hz_) /
                       std::ldexp(1.0, static_cast<int>(seen_shift_));
  return ms == 0 ? 0 : std::max<uint32_t>(1, static_cast<uint32_t>(std::min(ticks, 4e9)));
}

double Dataplane::TickSeconds() const {
  return std::ldexp(1.0, static_cast<int>(tick_shift_)) / static_cast<double>(tsc_hz_);
}

size_t Dataplane::ProcessNeighborReports(const std::function<void(const NeighborReport&)>& fn) {
  size_t handled = 0;
  for (WorkerParts& w : workers_) {
    if (w.channels->neighbors == nullptr) continue;
    NeighborReport reports[32];
    const unsigned n = rte_ring_sc_dequeue_burst_elem(w.channels->neighbors.get(), reports, sizeof(NeighborReport),
                                                      32, nullptr);
    for (unsigned i = 0; i < n; ++i) fn(reports[i]);
    handled += n;
  }
  return handled;
}

size_t Dataplane::ProcessOffsetSamples(const std::function<void(const OffsetSample&)>& fn) {
  size_t handled = 0;
  for (WorkerParts& w : workers_) {
    if (w.channels->samples_full == nullptr) continue;
    void* samples[16];
    const unsigned n =
        rte_ring_sc_dequeue_burst(w.channels->samples_full.get(), samples, 16, nullptr);
    for (unsigned i = 0; i < n; ++i) {
      fn(*static_cast<const OffsetSample*>(samples[i]));
      (void)rte_ring_sp_enqueue(w.channels->samples_free.get(), samples[i]);
    }
    handled += n;
  }
  return handled;
}

rte_mbuf* Dataplane::CopyToMbuf(const uint8_t* bytes, uint32_t len) const {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_.get());
  if (m == nullptr) return nullptr;
  auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len)));
  if (data == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  std::memcpy(data, bytes, len);
  return m;
}

bool Dataplane::SendFromSwitch(const uint8_t* frame, uint32_t len, uint16_t vlan) {
  rte_ring* ring = workers_.empty() ? nullptr : workers_[0].channels->control_tx.get();
  if (ring == nullptr) return false;
  rte_mbuf* m = CopyToMbuf(frame, len);
  if (m == nullptr) return false;
  FrameRef f{m, 0, vlan, kEtherHdrLen, Via::kPlacement, 0};
  if (rte_ring_sp_enqueue_elem(ring, &f, sizeof(f)) != 0) {
    rte_pktmbuf_free(m);
    return false;
  }
  return true;
}

size_t Dataplane::ProcessTanInput(const std::function<void(const uint8_t*, uint32_t)>& fn) {
  size_t handled = 0;
  for (WorkerParts& w : workers_) {
    if (w.channels->tan_up == nullptr) continue;
    // Everything queued, at most a ring's worth: a burst per poll fell behind
    // the late data of many excluded members, and the full ring then dropped
    // the root's first data, which no resend of a late makes up for.
    for (unsigned budget = WorkerChannels::kTanRingSize; budget > 0;) {
      rte_mbuf* pkts[32];
      const unsigned n = rte_ring_sc_dequeue_burst(w.channels->tan_up.get(),
                                                   reinterpret_cast<void**>(pkts), 32, nullptr);
      for (unsigned i = 0; i < n; ++i) {
        fn(rte_pktmbuf_mtod(pkts[i], const uint8_t*), rte_pktmbuf_data_len(pkts[i]));
        rte_pktmbuf_free(pkts[i]);
      }
      handled += n;
      if (n < 32) break;
      budget = budget > n ? budget - n : 0;
    }
  }
  return handled;
}

bool Dataplane::SendTanResult(const uint8_t* datagram, uint32_t len) {
  aggregator::AggPacket pkt;
  if (jobs_ == nullptr ||
      aggregator::ParseAggregation(datagram, len, &pkt) != aggregator::WireError::kOk) {
    return false;
  }
  const aggregator::Job* job = jobs_->Find(pkt.header->job_id.host());
  if (job == nullptr) return false;
  const uint32_t seq = pkt.header->seq.host();
  // A chunk moved to a spare slot completes there: at the root, a chunk
  // that went to the TAN lacking members waits in that slot, and a member
  // it lacks, asking after the result, would find it waiting still.
  const uint16_t spare =
      escalations_ ? escalations_->SpareOf({job->id(), job->generation(), seq})
                   : aggregator::SpareSlots::kNone;
  const uint32_t slot = spare != aggregator::SpareSlots::kNone
                            ? slot_regions_.Spare(spare)
                            : slot_regions_.Of(job->in_band(), job->placement(), seq);
  rte_ring* ring = workers_[slot % n_agg_workers_].channels->tan_down.get();
  rte_mbuf* m = CopyToMbuf(datagram, len);
  if (m == nullptr) return false;
  rte_pktmbuf_mtod(m, aggregator::AggHeader*)->slot_hint = common::be16_t::FromHost(spare);
  // The control thread is the ring's only producer.
  if (rte_ring_sp_enqueue(ring, m) != 0) {
    rte_pktmbuf_free(m);
    return false;
  }
  return true;
}

}  // namespace aggswitch::dataplane
