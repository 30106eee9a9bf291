#include "control/stats_snapshot.h"

#include <rte_version.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

#include "common/version.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {

ProcessSnapshot CollectProcess() {
  ProcessSnapshot p;
  p.pid = getpid();
  // /proc/self/stat: the fields after the command (which may hold spaces)
  // start with the state, field 3; starttime is field 22, vsize 23, rss 24.
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream fields(stat.substr(close + 2));
    std::string field;
    uint64_t starttime = 0, vsize = 0, rss_pages = 0;
    for (int i = 3; i <= 24 && fields >> field; ++i) {
      if (i == 22) starttime = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 23) vsize = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 24) rss_pages = std::strtoull(field.c_str(), nullptr, 10);
    }
    p.virtual_memory_bytes = vsize;
    p.resident_memory_bytes = rss_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    std::ifstream proc_stat("/proc/stat");
    std::string key;
    uint64_t btime = 0;
    while (proc_stat >> key) {
      if (key == "btime") {
        proc_stat >> btime;
        break;
      }
    }
    const long ticks = sysconf(_SC_CLK_TCK);
    if (btime != 0 && ticks > 0) {
      p.start_time_seconds = static_cast<double>(btime) + static_cast<double>(starttime) / ticks;
    }
  }
  if (DIR* fds = opendir("/proc/self/fd"); fds != nullptr) {
    while (const dirent* e = readdir(fds)) {
      if (e->d_name[0] != '.') ++p.open_fds;
    }
    closedir(fds);
    if (p.open_fds > 0) --p.open_fds;  // the directory's own descriptor
  }
  return p;
}

StatsSnapshot CollectSnapshot(const dataplane::Dataplane& dp) {
  StatsSnapshot snap;
  snap.process = CollectProcess();
  for (const dataplane::PoolStats& pool : dp.PoolStatsNow()) {
    snap.pools.push_back(PoolSnapshot{pool.name, pool.capacity, pool.available});
  }
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
    l.rings = dp.WorkerRingsNow(i);
    for (size_t r = 0; r < dataplane::kNumMalformedReasons; ++r) l.malformed[r] = c.malformed[r].Get();
    if (const aggregator::SlotTable* slots = dp.worker_slots(i); slots != nullptr) {
      l.slots = slots->size();
      l.slots_busy = slots->busy();
      l.slots_complete = slots->complete();
      l.slot_timers = slots->armed_timers();
    }
    if (const dataplane::ParameterStore* store = dp.worker_store(i); store != nullptr) {
      l.store_buffers = store->capacity();
      l.store_buffers_used = store->used();
    }
    if (const aggregator::BypassTable* bypass = dp.worker_bypass(i); bypass != nullptr) {
      l.bypass_entries = bypass->live();
    }
#define AGG_LCORE_READ(name, help) l.name = c.name.Get();
    AGG_LCORE_COUNTERS(AGG_LCORE_READ)
#undef AGG_LCORE_READ
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

  if (const dataplane::IntSettings* settings = dp.int_settings(); settings != nullptr) {
    IntSnapshot& t = snap.telemetry.emplace();
    t.node_id = settings->node_id;
    t.int_port = settings->int_port;
    t.max_hops = settings->max_hops;
    if (settings->collector.port != 0) t.collector = settings->collector.ToString();
    for (size_t p = 0; p < dp.port_count(); ++p) {
      if ((settings->fabric_ports >> p) & 1) t.fabric_ports.push_back(dp.plan().port(static_cast<uint16_t>(p)).name);
    }
    t.watch = dp.watch_entries();
    t.watch_entries = static_cast<uint32_t>(t.watch.size());
    for (size_t i = 0; i < dp.worker_count(); ++i) {
      const dataplane::IntCounters& c = dp.worker_stats(i).lcore.int_;
#define AGG_INT_READ(name, help) t.name += c.name.Get();
      AGG_INT_COUNTERS(AGG_INT_READ)
#undef AGG_INT_READ
      t.records_lost += c.records_lost.Get();
    }
    t.reports_sent = dp.int_export().reports_sent.Get();
    t.send_failed = dp.int_export().send_failed.Get();
  }

  if (dp.aggregation_enabled()) {
    AggregationSnapshot& a = snap.aggregation.emplace();
    a.slot_latency = dp.ReadSlotLatency();
    for (size_t r = 0; r < dataplane::kNumRegistrationResults; ++r) {
      a.registrations[r] = dp.registrations(static_cast<dataplane::RegistrationResult>(r));
    }
    a.spare = dp.escalation_stats();
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
