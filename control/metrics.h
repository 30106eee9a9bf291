// Renders a StatsSnapshot in the Prometheus text exposition format 0.0.4, the
// body of GET /metrics.
//
// Every family carries # HELP and # TYPE. Names follow
// aggswitch_<subsystem>_<name>_<unit>, and counters end in _total:
//
//   aggswitch_build_info{version,dpdk_version}                  gauge, always 1
//   aggswitch_port_info{port,driver,mac,vlan_mode}              gauge, always 1
//   aggswitch_port_link_up{port}                                gauge, 1 or 0
//   aggswitch_port_{rx,tx}_{packets,bytes}_total{port}          counters
//   aggswitch_port_flooded_packets_total{port}                  counter
//   aggswitch_port_dropped_packets_total{port,reason}           counter, every reason
//   aggswitch_port_device_{missed_packets,rx_errors,tx_errors,rx_nombuf,xsk_ring_full,
//                          xsk_fill_empty}_total{port}
//   aggswitch_lcore_{busy_cycles,idle_cycles,busy_packets,polls,learn_requests,
//                    learn_ring_full,arp_replies,icmp_replies}_total{lcore}
//   aggswitch_lcore_tsc_hertz                                   gauge
//   aggswitch_mac_table_{entries,capacity_entries,static_entries,aging_seconds}  gauges
//   aggswitch_mac_table_{learned,moved,aged,static_conflicts,learn_refused}_total
//   aggswitch_aggregation_<counter>_total{lcore}                counters, AGG_AGGREGATION_COUNTERS
//   aggswitch_aggregation_slots{,_busy,_complete}{lcore}        gauges
//   aggswitch_job_table_{jobs,capacity_jobs}                    gauges     } when the snapshot
//   aggswitch_job_info{job,origin,nodes,ordered}                gauge, 1   } has the job table
//   aggswitch_job_{expected_members,members}{job}               gauges     } (snap.jobs)
// and with aggregation on (snap.aggregation):
//   aggswitch_aggregation_slot_completion_latency_seconds       histogram (_bucket{le}, _sum,
//                                                               _count), every lcore together
//   aggswitch_aggregation_registrations_total{result}           counter, every result
//   aggswitch_aggregation_job_<counter>_total{job}              counters, AGG_JOB_COUNTERS, for
//                                                               each job of snap.jobs with counters
//   aggswitch_tan_{first_data,late_data,merged,duplicate_late,key_mismatches,completed_chunks,
//                  gave_up_chunks,orphan_late,late_after_done,repeated_first_data,refused,
//                  malformed,ignored,new_runs,run_ended,queries}_total
//                                                               counters } the switch's own TAN,
//   aggswitch_tan_pending_chunks                                gauge    } when snap.aggregation
//                                                                        } has it (tan)
// and with in-band telemetry on (snap.telemetry):
//   aggswitch_int_watch_entries                                 gauge
//   aggswitch_int_<counter>_total                               counters, AGG_INT_COUNTERS
//   aggswitch_int_reports_sent_total                            counter
//   aggswitch_int_reports_dropped_total{reason}                 counter: ring_full, send_failed
//
// Each drop reason of AGG_DROP_REASONS is exported for every port, zeros
// included, so that rate() works from the first scrape; so is every
// registration result. The output is checked with `promtool check metrics` in
// metrics_test.
//
//   StatsSnapshot snap = CollectSnapshot(*dataplane);
//   std::string body = RenderPrometheus(snap);   // serve with common::kPrometheusContentType
//
// Thread safety: pure functions of their arguments; any thread.
#pragma once

#include <string>
#include <string_view>

#include "control/stats_snapshot.h"

namespace aggswitch::control {

// The whole exposition (common/prometheus.h's writer), ending in a newline;
// serve it with common::kPrometheusContentType. [any]
std::string RenderPrometheus(const StatsSnapshot& snap);

}  // namespace aggswitch::control
