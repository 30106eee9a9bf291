// A plain, self-contained copy of everything the observability side shows:
// ports, worker lcores, the MAC table and build information.
//
// CollectSnapshot() reads the dataplane once through its [any] accessors
// (relaxed counter loads, rte_eth_stats_get) and copies the values out. The
// renderers (metrics.h, api.h) take a snapshot, never the Dataplane, so they
// are unit-testable without EAL: a test fills a StatsSnapshot by hand. The types here deliberately
// mirror dataplane::PortInfo, PortTotals and WorkerInfo instead of embedding them, because those
// live in dataplane.h, which pulls in DPDK headers; this header needs none.
//
// Counters of different lcores are read one after another while the workers
// run, so a snapshot is not one instant; each counter is exact and monotonic.
//
//   StatsSnapshot snap = CollectSnapshot(*dataplane);       // any thread
//   std::string text = RenderPrometheus(snap);               // metrics.h
//   std::vector<MacEntrySnapshot> macs = CollectMacEntries(*dataplane);
//
// Thread safety: the types are plain values. CollectSnapshot() and
// CollectMacEntries() may be called from any thread (control thread, civetweb
// threads, DPDK's telemetry thread) while the workers run.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/net_addr.h"
#include "dataplane/counters.h"

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

// The metric label and help text of each drop reason, indexed by DropReason.
// Expanded from AGG_DROP_REASONS, the same list DropReasonLabel() expands, so
// the strings are identical; the rendering library uses this table because
// DropReasonLabel() is compiled into agg_dataplane, which links DPDK.
struct DropReasonText {
  const char* label;
  const char* help;
};
inline constexpr DropReasonText kDropReasonText[dataplane::kNumDropReasons] = {
#define AGG_DROP_TEXT(name, label, help) {label, help},
    AGG_DROP_REASONS(AGG_DROP_TEXT)
#undef AGG_DROP_TEXT
};

struct BuildInfo {
  std::string version;       // aggswitch version, e.g. "0.1.0"
  std::string dpdk_version;  // rte_version(), e.g. "DPDK 22.11.4"
};

// One port: identity and state (from dataplane::PortInfo) and counters summed
// over every worker lcore plus the device's own counters (dataplane::PortTotals).
struct PortSnapshot {
  size_t index = 0;  // position in the config's port list; MAC entries use it
  std::string name;
  std::string devargs;
  std::string driver;
  uint16_t port_id = 0;  // DPDK ethdev port id
  common::MacAddr mac;
  bool link_up = false;
  uint32_t link_speed_mbps = 0;
  uint16_t rx_queues = 0;
  uint16_t tx_queues = 0;
  std::string vlan_mode;  // "access 10" or "trunk 10,20 native 1"

  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t flooded_packets = 0;
  std::array<uint64_t, dataplane::kNumDropReasons> drops{};  // indexed by DropReason
  uint64_t dev_imissed = 0;                                  // frames the NIC dropped: RX ring full
  uint64_t dev_ierrors = 0;                                  // erroneous received frames
  uint64_t dev_oerrors = 0;                                  // failed transmissions
  uint64_t dev_rx_nombuf = 0;                                // RX mbuf allocation failures

  // Sum of drops[] (the dataplane's own drops, not the device counters).
  uint64_t TotalDrops() const {
    uint64_t sum = 0;
    for (uint64_t d : drops) sum += d;
    return sum;
  }
};

// One worker lcore: what it polls and its counters (dataplane::LcoreCounters).
struct LcoreSnapshot {
  unsigned lcore = 0;
  uint16_t tx_queue = 0;
  std::vector<std::pair<std::string, uint16_t>> rx;  // (port name, queue)

  uint64_t busy_cycles = 0;
  uint64_t idle_cycles = 0;
  uint64_t busy_packets = 0;
  uint64_t polls = 0;
  uint64_t learn_requests = 0;
  uint64_t learn_ring_full = 0;
  uint64_t arp_replies = 0;
  uint64_t icmp_replies = 0;

  // busy_cycles / busy_packets; 0 before the first packet.
  double CyclesPerPacket() const {
    return busy_packets == 0 ? 0.0 : static_cast<double>(busy_cycles) / busy_packets;
  }
  // Share of polling cycles spent on polls that found packets, 0..100; 0
  // before the first poll.
  double BusyPercent() const {
    const uint64_t all = busy_cycles + idle_cycles;
    return all == 0 ? 0.0 : 100.0 * static_cast<double>(busy_cycles) / all;
  }
};

// MAC table occupancy and the control thread's MacEventCounters.
struct MacTableSnapshot {
  uint32_t entries = 0;  // learned + static
  uint32_t capacity = 0;
  uint32_t static_entries = 0;
  uint32_t aging_seconds = 0;  // 0: aging disabled
  uint64_t learned = 0;
  uint64_t moved = 0;
  uint64_t aged = 0;
  uint64_t static_conflicts = 0;
  uint64_t learn_refused = 0;  // learn requests refused because the table was full
};

struct StatsSnapshot {
  BuildInfo build;
  uint64_t tsc_hz = 0;
  std::vector<PortSnapshot> ports;
  std::vector<LcoreSnapshot> lcores;
  MacTableSnapshot mac_table;
};

// One MAC table entry as the API shows it.
struct MacEntrySnapshot {
  uint16_t vlan = 0;
  common::MacAddr mac;
  uint16_t port_index = 0;
  std::string port;  // the port's name
  bool is_static = false;
  // Seconds since a worker last saw the MAC as a source; 0 for static entries.
  double age_seconds = 0;
};

// Copies every counter and port state out of the dataplane. [any]
StatsSnapshot CollectSnapshot(const dataplane::Dataplane& dp);

// Every MAC table entry, sorted by (VLAN, MAC). [any]
// The table is read bucket by bucket while the control thread may learn and
// age, so an entry that moves during the walk can appear once or be missed.
std::vector<MacEntrySnapshot> CollectMacEntries(const dataplane::Dataplane& dp);

}  // namespace aggswitch::control
