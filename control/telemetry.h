// aggswitch's commands on DPDK's telemetry socket, next to DPDK's own
// (/ethdev/stats, /eal/params, ...), for dpdk-telemetry.py and collectd:
//
//   /aggswitch/ports                    ["uplink", "host1", ...]
//   /aggswitch/port_stats,<name|index>  {"name", "index", "link_up", "rx_packets",
//                                        "rx_bytes", "tx_packets", "tx_bytes",
//                                        "flooded_packets", "dropped_packets",
//                                        "drop_<reason>" for every reason,
//                                        "device_missed_packets", "device_rx_errors",
//                                        "device_tx_errors", "device_rx_nombuf",
//                                        "device_xsk_ring_full", "device_xsk_fill_empty"}
//   /aggswitch/lcores                   {"tsc_hz", and one array per field, element i
//                                        for worker i: "lcore", "tx_queue", "rx"
//                                        ("port/queue ..."), "busy_cycles",
//                                        "idle_cycles", "busy_packets", "polls",
//                                        "learn_requests", "learn_ring_full",
//                                        "arp_replies", "icmp_replies",
//                                        "cycles_per_packet"}
//   /aggswitch/mac_table                {"size", "capacity", "static_entries",
//                                        "aging_seconds", "learned", "moved", "aged",
//                                        "static_conflicts", "learn_refused"}
//
// DPDK 22.11 nests only arrays inside a telemetry dict, hence the
// column-per-field shape of /aggswitch/lcores.
//
// Why a file-scope pointer: rte_telemetry_register_cmd() callbacks receive no
// user pointer, and DPDK offers no way to unregister a command. So this module
// keeps one pointer to the Dataplane, guarded by a mutex: RegisterTelemetry()
// sets it, UnregisterTelemetry() clears it (waiting for a callback in flight),
// and a command that runs while it is clear answers with an error (null).
// The commands themselves are registered once per process.
//
//   RETURN_IF_ERROR(RegisterTelemetry(dataplane.get()));
//   ...
//   UnregisterTelemetry();   // before the dataplane is destroyed
//
// Thread safety: RegisterTelemetry() and UnregisterTelemetry() on the control
// thread. The callbacks run on DPDK's telemetry thread and read the dataplane
// only through its [any] accessors.
#pragma once

#include "common/status.h"

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

// Registers the commands (first call only) and points them at `dp`, which
// must stay alive until UnregisterTelemetry(). EAL need not have telemetry
// enabled; the commands are then simply never called. [control]
common::Status RegisterTelemetry(const dataplane::Dataplane* dp);

// Detaches the commands from the dataplane; returns after any callback in
// flight has finished. Idempotent. [control]
void UnregisterTelemetry();

}  // namespace aggswitch::control
