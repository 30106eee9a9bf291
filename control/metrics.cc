#include "control/metrics.h"

#include "common/prometheus.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace aggswitch::control {
namespace {

using common::FormatPrometheusFloat;
using Label = common::PrometheusExposition::Label;
using Exposition = common::PrometheusExposition;

// A labelled family's help: `intro`, then each label with its meaning,
// "label (meaning);", the last ';' made a '.'.
template <typename Text, size_t N>
std::string ListHelp(std::string intro, const Text (&texts)[N], const char* Text::*label,
                     const char* Text::*meaning) {
  for (const Text& t : texts) intro += std::string(" ") + t.*label + " (" + t.*meaning + ");";
  intro.back() = '.';
  return intro;
}

// A counter family read from one field of a snapshot type (a port's, an
// lcore's, in-band telemetry's).
template <typename Snapshot>
struct CounterFamily {
  const char* name;
  const char* help;
  uint64_t Snapshot::*field;
};
using PortCounterFamily = CounterFamily<PortSnapshot>;

constexpr PortCounterFamily kPortCounters[] = {
#define AGG_PORT_FAMILY(name, help) {"aggswitch_port_" #name "_total", help, &PortSnapshot::name},
    AGG_PORT_COUNTERS(AGG_PORT_FAMILY)
#undef AGG_PORT_FAMILY
};

constexpr PortCounterFamily kPortDeviceCounters[] = {
#define AGG_PORT_DEVICE_FAMILY(name, stat, help) \
  {"aggswitch_port_device_" #name "_total", help, &PortSnapshot::dev_##name},
    AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_FAMILY)
#undef AGG_PORT_DEVICE_FAMILY
};

constexpr CounterFamily<LcoreSnapshot> kLcoreCounters[] = {
#define AGG_LCORE_FAMILY(name, help) {"aggswitch_lcore_" #name "_total", help, &LcoreSnapshot::name},
    AGG_LCORE_COUNTERS(AGG_LCORE_FAMILY)
#undef AGG_LCORE_FAMILY
};

constexpr CounterFamily<IntSnapshot> kIntCounters[] = {
#define AGG_INT_FAMILY(name, help) {"aggswitch_int_" #name "_total", help, &IntSnapshot::name},
    AGG_INT_COUNTERS(AGG_INT_FAMILY)
#undef AGG_INT_FAMILY
};

// The own TAN's counters (aggregator::TanCounters; docs/stragglers.md).
struct TanCounterFamily {
  const char* name;
  uint64_t aggregator::TanCounters::*field;
  const char* help;
};
constexpr TanCounterFamily kTanCounters[] = {
    {"aggswitch_tan_first_data_total", &aggregator::TanCounters::first_data,
     "First data the switch's own TAN received: the root's partial results that miss members."},
    {"aggswitch_tan_late_data_total", &aggregator::TanCounters::late,
     "Late data the own TAN received (LATE datagrams and BYPASS contributions)."},
    {"aggswitch_tan_merged_total", &aggregator::TanCounters::merged,
     "Late data the own TAN merged into a chunk (or held for its batch)."},
    {"aggswitch_tan_duplicate_late_total", &aggregator::TanCounters::duplicate_late,
     "Late data the own TAN dropped: it resolved no outstanding member."},
    {"aggswitch_tan_key_mismatches_total", &aggregator::TanCounters::key_mismatch,
     "Datagrams the own TAN dropped for carrying another job key than the chunk's."},
    {"aggswitch_tan_completed_chunks_total", &aggregator::TanCounters::completed,
     "Chunks the own TAN completed: every missing member's data merged."},
    {"aggswitch_tan_gave_up_chunks_total", &aggregator::TanCounters::gave_up,
     "Chunks the own TAN gave up on after give_up_ms, answered with an INCOMPLETE result."},
    {"aggswitch_tan_orphan_late_total", &aggregator::TanCounters::orphan_late,
     "Late data the own TAN held for a first data that never came."},
    {"aggswitch_tan_late_after_done_total", &aggregator::TanCounters::late_after_done,
     "Late data for chunks the own TAN had already finished."},
    {"aggswitch_tan_repeated_first_data_total", &aggregator::TanCounters::repeat_first,
     "First data for a chunk the own TAN already had (the root resent it)."},
    {"aggswitch_tan_refused_total", &aggregator::TanCounters::refused_full,
     "Chunks or late data the own TAN refused: its pending or held-late limit was reached."},
    {"aggswitch_tan_malformed_total", &aggregator::TanCounters::malformed,
     "Datagrams the own TAN dropped: type, length or scale unlike the chunk's first data."},
    {"aggswitch_tan_ignored_total", &aggregator::TanCounters::ignored,
     "Datagrams the own TAN ignored: neither first data nor late data."},
    {"aggswitch_tan_new_runs_total", &aggregator::TanCounters::new_runs,
     "Jobs the own TAN saw under a new run label: their chunks were forgotten."},
    {"aggswitch_tan_run_ended_total", &aggregator::TanCounters::run_ended,
     "Datagrams the own TAN dropped for the label of a job's run that ended."},
    {"aggswitch_tan_queries_total", &aggregator::TanCounters::queries,
     "QUERYs the own TAN received from the root: a finished chunk's result goes again."},
    {"aggswitch_tan_by_members_total", &aggregator::TanCounters::by_members,
     "Outstanding child switches the own TAN resolved by every rank's own late data."},
    {"aggswitch_tan_complete_again_total", &aggregator::TanCounters::complete_again,
     "Open chunks the own TAN completed from the root's first data again, nothing missing."},
};

struct MacGaugeFamily {
  const char* name;
  const char* help;
  uint32_t MacTableSnapshot::*field;
};

constexpr MacGaugeFamily kMacGauges[] = {
    {"aggswitch_mac_table_entries", "Entries in the MAC table, learned and static.",
     &MacTableSnapshot::entries},
    {"aggswitch_mac_table_capacity_entries", "Maximum number of MAC table entries.",
     &MacTableSnapshot::capacity},
    {"aggswitch_mac_table_static_entries", "Static entries in the MAC table.",
     &MacTableSnapshot::static_entries},
    {"aggswitch_mac_table_aging_seconds",
     "Seconds after which an unseen learned entry is removed; 0 disables aging.",
     &MacTableSnapshot::aging_seconds},
};

struct MacCounterFamily {
  const char* name;
  const char* help;
  uint64_t MacTableSnapshot::*field;
};

constexpr MacCounterFamily kMacCounters[] = {
    {"aggswitch_mac_table_learned_total", "MAC table entries added by learning.",
     &MacTableSnapshot::learned},
    {"aggswitch_mac_table_moved_total", "Learned MAC entries that moved to another port.",
     &MacTableSnapshot::moved},
    {"aggswitch_mac_table_aged_total", "Learned MAC entries removed by aging.",
     &MacTableSnapshot::aged},
    {"aggswitch_mac_table_static_conflicts_total",
     "Frames whose source MAC is a static entry of another port.",
     &MacTableSnapshot::static_conflicts},
    {"aggswitch_mac_table_learn_refused_total",
     "Learn requests refused because the MAC table was full.", &MacTableSnapshot::learn_refused},
};

// The dataplane's help texts are phrases ("contributions counted into a
// slot"); # HELP lines here are sentences.
std::string Sentence(std::string_view phrase) {
  std::string out(phrase);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  out += '.';
  return out;
}

}  // namespace

std::string RenderPrometheus(const StatsSnapshot& snap) {
  Exposition e;

  e.Family("aggswitch_build_info", "gauge",
           "Build information of the running aggswitch; the value is always 1.");
  e.Sample("aggswitch_build_info",
           {{"version", snap.build.version}, {"dpdk_version", snap.build.dpdk_version}}, 1);

  // --- The process (the standard process_* families) ---
  const ProcessSnapshot& proc = snap.process;
  e.Family("process_start_time_seconds", "gauge",
           "Start time of the process since the Unix epoch in seconds.");
  e.Sample("process_start_time_seconds", {}, FormatPrometheusFloat(proc.start_time_seconds));
  e.Family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  e.Sample("process_resident_memory_bytes", {}, proc.resident_memory_bytes);
  e.Family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  e.Sample("process_virtual_memory_bytes", {}, proc.virtual_memory_bytes);
  e.Family("process_open_fds", "gauge", "Number of open file descriptors.");
  e.Sample("process_open_fds", {}, proc.open_fds);

  // --- Buffer pools ---
  if (!snap.pools.empty()) {
    e.Family("aggswitch_pool_capacity_buffers", "gauge",
             "Buffers of the pool: mbuf (every frame received, sent or copied) or hold "
             "(contributions ordered slots keep until they reduce them).");
    for (const PoolSnapshot& p : snap.pools) {
      e.Sample("aggswitch_pool_capacity_buffers", {{"pool", p.name}}, p.capacity);
    }
    e.Family("aggswitch_pool_available_buffers", "gauge",
             "Free buffers of the pool, in the pool and in the lcores' caches; at 0 an mbuf pool "
             "receives nothing more.");
    for (const PoolSnapshot& p : snap.pools) {
      e.Sample("aggswitch_pool_available_buffers", {{"pool", p.name}}, p.available);
    }
  }

  // --- The HTTP server ---
  if (snap.http) {
    e.Family("aggswitch_http_requests_refused_total", "counter",
             ListHelp("Requests the HTTP server refused before routing them, by reason:",
                      common::kRefusalText, &common::RefusalText::label, &common::RefusalText::message));
    for (size_t r = 0; r < common::kNumRefusals; ++r) {
      e.Sample("aggswitch_http_requests_refused_total", {{"reason", common::kRefusalText[r].label}},
               snap.http->refused[r]);
    }
    e.Family("aggswitch_http_threads", "gauge", "Request threads of the HTTP server (http.threads).");
    e.Sample("aggswitch_http_threads", {}, snap.http->threads);
  }

  // --- Ports ---
  e.Family("aggswitch_port_info", "gauge",
           "Static information about a port; the value is always 1.");
  for (const PortSnapshot& p : snap.ports) {
    const std::string mac = p.mac.ToString();
    e.Sample("aggswitch_port_info",
             {{"port", p.name}, {"driver", p.driver}, {"mac", mac}, {"vlan_mode", p.vlan_mode}}, 1);
  }
  e.Family("aggswitch_port_link_up", "gauge", "1 when the port's link is up, 0 when it is down.");
  for (const PortSnapshot& p : snap.ports) {
    e.Sample("aggswitch_port_link_up", {{"port", p.name}}, p.link_up ? 1 : 0);
  }
  for (const PortCounterFamily& f : kPortCounters) {
    e.Family(f.name, "counter", f.help);
    for (const PortSnapshot& p : snap.ports) e.Sample(f.name, {{"port", p.name}}, p.*f.field);
  }
  e.Family("aggswitch_port_dropped_packets_total", "counter",
           ListHelp("Frames the dataplane dropped, by reason; charged to the ingress port except "
                    "tx_full, which is charged to the egress port. Reasons:",
                    kDropReasonText, &DropReasonText::label, &DropReasonText::help));
  for (const PortSnapshot& p : snap.ports) {
    for (size_t r = 0; r < dataplane::kNumDropReasons; ++r) {
      e.Sample("aggswitch_port_dropped_packets_total",
               {{"port", p.name}, {"reason", kDropReasonText[r].label}}, p.drops[r]);
    }
  }
  e.Family("aggswitch_port_injected_faults_total", "counter",
           ListHelp("Faults the port's fault injection (ports[].faults, for tests) put on its "
                    "frames, in either direction. Faults:",
                    dataplane::kFaultText, &DropReasonText::label, &DropReasonText::help));
  for (const PortSnapshot& p : snap.ports) {
    for (size_t f = 0; f < dataplane::kNumFaults; ++f) {
      e.Sample("aggswitch_port_injected_faults_total",
               {{"port", p.name}, {"fault", dataplane::kFaultText[f].label}}, p.faults[f]);
    }
  }
  for (const PortCounterFamily& f : kPortDeviceCounters) {
    e.Family(f.name, "counter", f.help);
    for (const PortSnapshot& p : snap.ports) e.Sample(f.name, {{"port", p.name}}, p.*f.field);
  }

  // --- Worker lcores ---
  for (const auto& f : kLcoreCounters) {
    e.Family(f.name, "counter", f.help);
    for (const LcoreSnapshot& l : snap.lcores) {
      const std::string lcore = std::to_string(l.lcore);
      e.Sample(f.name, {{"lcore", lcore}}, l.*f.field);
    }
  }
  for (size_t a = 0; a < dataplane::kNumAggCounters; ++a) {
    const std::string name =
        std::string("aggswitch_aggregation_") + dataplane::kAggCounterText[a].name + "_total";
    e.Family(name, "counter", Sentence(dataplane::kAggCounterText[a].help));
    for (const LcoreSnapshot& l : snap.lcores) {
      e.Sample(name, {{"lcore", std::to_string(l.lcore)}}, l.agg[a]);
    }
  }
  {
    constexpr const char* kMalformed = "aggswitch_aggregation_malformed_total";
    e.Family(kMalformed, "counter",
             ListHelp("Aggregation datagrams that failed their checks, summed over the lcores, "
                      "by reason:",
                      dataplane::kMalformedText, &dataplane::AggCounterText::name,
                      &dataplane::AggCounterText::help));
    for (size_t r = 0; r < dataplane::kNumMalformedReasons; ++r) {
      uint64_t sum = 0;
      for (const LcoreSnapshot& l : snap.lcores) sum += l.malformed[r];
      e.Sample(kMalformed, {{"reason", dataplane::kMalformedText[r].name}}, sum);
    }
  }
  struct SlotGauge {
    const char* name;
    const char* help;
    uint32_t LcoreSnapshot::*field;
  };
  for (const SlotGauge& g :
       {SlotGauge{"aggswitch_aggregation_slots", "Aggregation slots the lcore owns.",
                  &LcoreSnapshot::slots},
        SlotGauge{"aggswitch_aggregation_slots_busy", "Slots aggregating or holding a result.",
                  &LcoreSnapshot::slots_busy},
        SlotGauge{"aggswitch_aggregation_slots_complete",
                  "Slots holding a result until every member acknowledged it.",
                  &LcoreSnapshot::slots_complete},
        SlotGauge{"aggswitch_aggregation_slot_timers", "Slots whose timeout timer is armed.",
                  &LcoreSnapshot::slot_timers},
        SlotGauge{"aggswitch_aggregation_store_buffers",
                  "Parameter store buffers the lcore has (aggregation.store.buffers split over the workers).",
                  &LcoreSnapshot::store_buffers},
        SlotGauge{"aggswitch_aggregation_store_buffers_used",
                  "Parameter store buffers holding a kept contribution or a final result in delivery.",
                  &LcoreSnapshot::store_buffers_used},
        SlotGauge{"aggswitch_aggregation_bypass_entries",
                  "Live bypass entries: members a timeout left behind, waiting for their late data.",
                  &LcoreSnapshot::bypass_entries}}) {
    e.Family(g.name, "gauge", g.help);
    for (const LcoreSnapshot& l : snap.lcores)
      e.Sample(g.name, {{"lcore", std::to_string(l.lcore)}}, l.*g.field);
  }
  e.Family("aggswitch_lcore_ring_entries", "gauge",
           "Entries waiting in one of the lcore's rings: learn (MAC learning to the control "
           "thread), handoff (contributions for its slots from other lcores), upcall and "
           "reinject (in-band registrations), escalate and relocate (collisions), tan_up and "
           "tan_down (its own TAN), neighbors (ARP), control_tx, samples_full (arrival "
           "offsets), int_records (telemetry). Near zero when the lcore keeps up.");
  for (const LcoreSnapshot& l : snap.lcores) {
    for (const dataplane::RingFill& r : l.rings) {
      e.Sample("aggswitch_lcore_ring_entries", {{"lcore", std::to_string(l.lcore)}, {"ring", r.name}},
               r.entries);
    }
  }
  e.Family("aggswitch_lcore_ring_capacity_entries", "gauge", "Capacity of each of the lcore's rings.");
  for (const LcoreSnapshot& l : snap.lcores) {
    for (const dataplane::RingFill& r : l.rings) {
      e.Sample("aggswitch_lcore_ring_capacity_entries",
               {{"lcore", std::to_string(l.lcore)}, {"ring", r.name}}, r.capacity);
    }
  }
  e.Family("aggswitch_lcore_tsc_hertz", "gauge",
           "TSC frequency; divides the lcore cycle counters into seconds.");
  e.Sample("aggswitch_lcore_tsc_hertz", {}, snap.tsc_hz);

  // --- Aggregation engine, switch-wide (only with aggregation on) ---
  if (snap.aggregation) {
    const AggregationSnapshot& a = *snap.aggregation;
    // The dataplane keeps one counter per bucket; Prometheus wants each
    // bucket to count everything at or below its bound. _count is the +Inf
    // bucket rather than SlotLatencyTotals::count: the buckets and the count
    // are read one after another while workers complete chunks, and a
    // histogram whose _count and +Inf bucket disagree confuses
    // histogram_quantile().
    constexpr char kLatency[] = "aggswitch_aggregation_slot_completion_latency_seconds";
    const std::string bucket = std::string(kLatency) + "_bucket";
    e.Family(kLatency, "histogram",
             "Time from a chunk's first contribution to its result being sent, over every "
             "worker lcore.");
    uint64_t cumulative = 0;
    for (size_t b = 0; b < dataplane::kSlotLatencyBuckets; ++b) {
      cumulative += a.slot_latency.buckets[b];
      const std::string le = b + 1 < dataplane::kSlotLatencyBuckets
                                 ? FormatPrometheusFloat(dataplane::kSlotLatencyBoundsSeconds[b])
                                 : "+Inf";
      e.Sample(bucket, {{"le", le}}, cumulative);
    }
    e.Sample(std::string(kLatency) + "_sum", {}, FormatPrometheusFloat(a.slot_latency.sum_seconds));
    e.Sample(std::string(kLatency) + "_count", {}, cumulative);

    e.Family("aggswitch_aggregation_registrations_total", "counter",
             ListHelp("In-band job registrations by the control thread, by result:",
                      dataplane::kRegistrationResultText, &dataplane::AggCounterText::name,
                      &dataplane::AggCounterText::help));
    for (size_t r = 0; r < dataplane::kNumRegistrationResults; ++r) {
      e.Sample("aggswitch_aggregation_registrations_total",
               {{"result", dataplane::kRegistrationResultText[r].name}}, a.registrations[r]);
    }

    // Collisions moved to spare slots, jobs moved (docs/aggregation.md,
    // "Collisions", "Moves").
    e.Family("aggswitch_aggregation_spare_slots", "gauge",
             "Spare slots: the slots the control thread leases to chunks whose own slot holds "
             "another chunk (aggregation.spare_slots).");
    e.Sample("aggswitch_aggregation_spare_slots", {}, a.spare.slots);
    e.Family("aggswitch_aggregation_spare_slots_leased", "gauge",
             "Spare slots leased to a chunk (some leases may be over and not yet reclaimed).");
    e.Sample("aggswitch_aggregation_spare_slots_leased", {}, a.spare.leased);
    e.Family("aggswitch_aggregation_relocations_total", "counter",
             "Chunks the control thread moved to a spare slot (leases granted).");
    e.Sample("aggswitch_aggregation_relocations_total", {}, a.spare.granted);
    e.Family("aggswitch_aggregation_relocations_refused_total", "counter",
             "Escalated contributions refused with NACK slot_busy: every spare slot was leased.");
    e.Sample("aggswitch_aggregation_relocations_refused_total", {}, a.spare.refused);
    e.Family("aggswitch_aggregation_job_moves_total", "counter",
             "Jobs the control thread moved to a partition of their own after a collision "
             "(docs/aggregation.md, \"Moves\").");
    e.Sample("aggswitch_aggregation_job_moves_total", {}, a.spare.moves);

    // The switch's own TAN (a root with tan: {strategy: self}).
    if (a.tan) {
      const aggregator::TanCounters& t = a.tan->counters;
      for (const TanCounterFamily& f : kTanCounters) {
        e.Family(f.name, "counter", f.help);
        e.Sample(f.name, {}, t.*f.field);
      }
      e.Family("aggswitch_tan_pending_chunks", "gauge",
               "Chunks the switch's own TAN holds open: waiting for late data, or for their "
               "first data.");
      e.Sample("aggswitch_tan_pending_chunks", {}, a.tan->pending);
    }
  }

  // --- In-band telemetry ---
  if (snap.telemetry) {
    const IntSnapshot& t = *snap.telemetry;
    e.Family("aggswitch_int_watch_entries", "gauge", "Entries of the telemetry watch list.");
    e.Sample("aggswitch_int_watch_entries", {}, t.watch_entries);
    for (const auto& f : kIntCounters) {
      e.Family(f.name, "counter", f.help);
      e.Sample(f.name, {}, t.*f.field);
    }
    e.Family("aggswitch_int_reports_sent_total", "counter",
             "Telemetry Reports sent to the collector, one per hop record.");
    e.Sample("aggswitch_int_reports_sent_total", {}, t.reports_sent);
    e.Family("aggswitch_int_reports_dropped_total", "counter",
             "Telemetry Reports not sent, by reason: ring_full (the workers' hop records found the "
             "ring to the control thread full), send_failed (the socket refused the report).");
    e.Sample("aggswitch_int_reports_dropped_total", {{"reason", "ring_full"}}, t.records_lost);
    e.Sample("aggswitch_int_reports_dropped_total", {{"reason", "send_failed"}}, t.send_failed);
  }

  // --- MAC table ---
  for (const MacGaugeFamily& f : kMacGauges) {
    e.Family(f.name, "gauge", f.help);
    e.Sample(f.name, {}, snap.mac_table.*f.field);
  }
  for (const MacCounterFamily& f : kMacCounters) {
    e.Family(f.name, "counter", f.help);
    e.Sample(f.name, {}, snap.mac_table.*f.field);
  }

  // --- Job table (gauges from the table; with aggregation on, the dataplane's
  // per-job counters, read on the control thread with the table) ---
  if (snap.jobs) {
    const JobTableSnapshot& t = *snap.jobs;
    e.Family("aggswitch_job_table_jobs", "gauge",
             "Jobs in the job table, whatever their origin (config, api, in-band).");
    e.Sample("aggswitch_job_table_jobs", {}, t.jobs.size());
    e.Family("aggswitch_job_table_capacity_jobs", "gauge",
             "Maximum number of jobs (aggregation.max_jobs).");
    e.Sample("aggswitch_job_table_capacity_jobs", {}, t.capacity);
    if (t.in_band_capacity != 0) {
      uint64_t in_band = 0;
      for (const JobSnapshot& j : t.jobs) in_band += j.origin == "in-band";
      e.Family("aggswitch_job_table_in_band_jobs", "gauge",
               "Jobs in the job table that registered themselves in-band.");
      e.Sample("aggswitch_job_table_in_band_jobs", {}, in_band);
      e.Family("aggswitch_job_table_in_band_capacity_jobs", "gauge",
               "In-band jobs the table holds at most (aggregation.in_band.max_jobs).");
      e.Sample("aggswitch_job_table_in_band_capacity_jobs", {}, t.in_band_capacity);
      e.Family("aggswitch_job_table_in_band_removed_total", "counter",
               "In-band jobs removed, by reason: idle (no member sent to them for "
               "aggregation.in_band.idle_timeout_ms) or displaced (a config or API job took "
               "their id or their entry).");
      e.Sample("aggswitch_job_table_in_band_removed_total", {{"reason", "idle"}}, t.in_band_expired);
      e.Sample("aggswitch_job_table_in_band_removed_total", {{"reason", "displaced"}},
               t.in_band_displaced);
    }
    e.Family("aggswitch_job_info", "gauge",
             "Static information about a job; the value is always 1.");
    for (const JobSnapshot& j : t.jobs) {
      const std::string id = std::to_string(j.id);
      const std::string nodes = std::to_string(j.nodes);
      e.Sample("aggswitch_job_info",
               {{"job", id},
                {"origin", j.origin},
                {"nodes", nodes},
                {"ordered", j.ordered ? "true" : "false"},
                {"mode", std::string(j.mode)}},
               1);
    }
    e.Family("aggswitch_job_expected_members", "gauge",
             "Members the job expects at this switch (its task info).");
    for (const JobSnapshot& j : t.jobs) {
      const std::string id = std::to_string(j.id);
      e.Sample("aggswitch_job_expected_members", {{"job", id}}, j.members);
    }
    e.Family("aggswitch_job_members", "gauge",
             "Members of the job whose address the switch has learned from their packets.");
    for (const JobSnapshot& j : t.jobs) {
      const std::string id = std::to_string(j.id);
      e.Sample("aggswitch_job_members", {{"job", id}}, j.learned);
    }
    e.Family("aggswitch_job_store_buffers", "gauge",
             "Store buffers the job holds: its kept contributions and final results in delivery.");
    for (const JobSnapshot& j : t.jobs) {
      e.Sample("aggswitch_job_store_buffers", {{"job", std::to_string(j.id)}}, j.store_buffers);
    }
    e.Family("aggswitch_job_store_quota_buffers", "gauge",
             "Store buffers the job may hold at once (aggregation.store.per_job).");
    for (const JobSnapshot& j : t.jobs) {
      e.Sample("aggswitch_job_store_quota_buffers", {{"job", std::to_string(j.id)}}, j.store_quota);
    }
    if (snap.aggregation) {
      for (size_t c = 0; c < dataplane::kNumJobCounters; ++c) {
        const std::string name = std::string("aggswitch_aggregation_job_") +
                                 dataplane::kJobCounterText[c].name + "_total";
        e.Family(name, "counter", Sentence(dataplane::kJobCounterText[c].help));
        for (const JobSnapshot& j : t.jobs) {
          if (j.counters) e.Sample(name, {{"job", std::to_string(j.id)}}, (*j.counters)[c]);
        }
      }
    }
  }
  return e.Take();
}

}  // namespace aggswitch::control
