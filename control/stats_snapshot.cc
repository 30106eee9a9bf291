#include "control/stats_snapshot.h"

#include <rte_version.h>

#include <algorithm>
#include <iterator>
#include <tuple>

#include "common/version.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {

StatsSnapshot CollectSnapshot(const dataplane::Dataplane& dp) {
  StatsSnapshot snap;
  snap.build.version = common::Version();
  snap.build.dpdk_version = rte_version();
  snap.tsc_hz = dp.tsc_hz();

  snap.ports.reserve(dp.port_count());
  for (size_t i = 0; i < dp.port_count(); ++i) {
    PortSnapshot& p = snap.ports.emplace_back();
    static_cast<dataplane::PortInfo&>(p) = dp.GetPortInfo(i);
    static_cast<dataplane::PortTotals&>(p) = dp.GetPortTotals(i);
    p.index = i;
  }

  snap.lcores.reserve(dp.worker_count());
  for (size_t i = 0; i < dp.worker_count(); ++i) {
    const dataplane::LcoreCounters& c = dp.worker_stats(i).lcore;
    LcoreSnapshot& l = snap.lcores.emplace_back();
    static_cast<dataplane::WorkerInfo&>(l) = dp.GetWorkerInfo(i);
    c.agg.Read(l.agg);
    if (const aggregator::SlotTable* slots = dp.worker_slots(i); slots != nullptr) {
      l.slots = slots->size();
      l.slots_busy = slots->busy();
      l.slots_complete = slots->complete();
      l.slot_timers = slots->armed_timers();
    }
    if (const aggregator::BypassTable* bypass = dp.worker_bypass(i); bypass != nullptr) {
      l.bypass_entries = bypass->live();
    }
    l.busy_cycles = c.busy_cycles.Get();
    l.idle_cycles = c.idle_cycles.Get();
    l.busy_packets = c.busy_packets.Get();
    l.polls = c.polls.Get();
    l.learn_requests = c.learn_requests.Get();
    l.learn_ring_full = c.learn_ring_full.Get();
    l.arp_replies = c.arp_replies.Get();
    l.icmp_replies = c.icmp_replies.Get();
  }

  const dataplane::MacTable& table = dp.mac_table();
  const dataplane::MacEventCounters& events = dp.mac_events();
  MacTableSnapshot& m = snap.mac_table;
  m.entries = table.size();
  m.capacity = table.capacity();
  m.static_entries = table.static_count();
  m.aging_seconds = dp.aging_seconds();
  m.learned = events.learned.Get();
  m.moved = events.moved.Get();
  m.aged = events.aged.Get();
  m.static_conflicts = events.static_conflicts.Get();
  m.learn_refused = events.table_full.Get();

  if (dp.aggregation_enabled()) {
    AggregationSnapshot& a = snap.aggregation.emplace();
    a.slot_latency = dp.ReadSlotLatency();
    for (size_t r = 0; r < dataplane::kNumRegistrationResults; ++r) {
      a.registrations[r] = dp.registrations(static_cast<dataplane::RegistrationResult>(r));
    }
  }
  return snap;
}

JobCounterValues CollectJobCounters(const dataplane::Dataplane& dp, uint16_t index) {
  uint64_t values[dataplane::kNumJobCounters] = {};
  dp.ReadJobCounters(index, values);
  JobCounterValues out;
  std::copy(std::begin(values), std::end(values), out.begin());
  return out;
}

std::vector<MacEntrySnapshot> CollectMacEntries(const dataplane::Dataplane& dp) {
  std::vector<std::string> port_names;
  port_names.reserve(dp.port_count());
  for (size_t i = 0; i < dp.port_count(); ++i) port_names.push_back(dp.plan().port(i).name);

  const dataplane::MacTable& table = dp.mac_table();
  const uint32_t now = dp.NowTick();
  const double tick_seconds = dp.TickSeconds();
  std::vector<MacEntrySnapshot> out;
  out.reserve(table.size());
  table.ForEach([&](const dataplane::MacTable::EntryView& e) {
    MacEntrySnapshot& s = out.emplace_back();
    s.vlan = e.vlan;
    s.mac = e.mac;
    s.port_index = e.port;
    s.port = e.port < port_names.size() ? port_names[e.port] : "port" + std::to_string(e.port);
    s.is_static = e.is_static;
    // The difference of two ticks taken as signed is correct across the tick
    // counter's wrap-around. A worker may touch the entry after NowTick() was
    // read, which makes it negative; that is age 0.
    const int32_t age_ticks = static_cast<int32_t>(now - e.last_seen_tick);
    s.age_seconds = e.is_static || age_ticks <= 0 ? 0.0 : age_ticks * tick_seconds;
  });
  std::sort(out.begin(), out.end(), [](const MacEntrySnapshot& a, const MacEntrySnapshot& b) {
    return std::make_tuple(a.vlan, a.mac.ToU64()) < std::make_tuple(b.vlan, b.mac.ToU64());
  });
  return out;
}

}  // namespace aggswitch::control
