// What the dataplane reports about its ports and workers, as plain values:
// identity and state, counter totals summed over the worker lcores, and what
// each worker polls. No DPDK headers, so renderers and tests can use them.
//
//   dataplane::PortTotals t = dataplane.GetPortTotals(0);
//   uint64_t tx_full = t.drops[static_cast<size_t>(DropReason::kTxFull)];
//
// Thread safety: plain values; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/net_addr.h"
#include "dataplane/counters.h"

namespace aggswitch::dataplane {

// What the API shows about a port.
struct PortInfo {
  std::string name;
  std::string devargs;
  std::string driver;
  uint16_t port_id = 0;
  common::MacAddr mac;
  bool link_up = false;
  uint32_t link_speed_mbps = 0;
  uint16_t rx_queues = 0;
  uint16_t tx_queues = 0;
  std::string vlan_mode;  // "access 10" or "trunk 10,20 native 1"
};

// Per-port totals summed over every worker lcore plus the device's own counters.
struct PortTotals {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0, flooded_packets = 0;
  uint64_t drops[kNumDropReasons] = {};
  // From rte_eth_stats_get: frames the device itself dropped or failed on.
  uint64_t dev_imissed = 0, dev_ierrors = 0, dev_oerrors = 0, dev_rx_nombuf = 0;
};

struct WorkerInfo {
  unsigned lcore = 0;
  uint16_t tx_queue = 0;
  std::vector<std::pair<std::string, uint16_t>> rx;  // (port name, queue)
};

}  // namespace aggswitch::dataplane
