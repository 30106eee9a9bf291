#include "control/telemetry.h"

#include <rte_telemetry.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <string_view>

#include "control/stats_snapshot.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {
namespace {

// See telemetry.h for why this is a file-scope pointer.
std::mutex g_mutex;
const dataplane::Dataplane* g_dataplane = nullptr;  // guarded by g_mutex

// Runs `fn(dataplane)` under the lock. Telemetry callbacks are C callbacks:
// nothing may be thrown through DPDK's telemetry thread.
template <typename Fn>
int WithDataplane(Fn&& fn) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_dataplane == nullptr) return -ENODEV;
  try {
    return fn(*g_dataplane);
  } catch (const std::exception&) {
    return -ENOMEM;
  }
}

// Adds an array container of `n` values `value(i)` to dict `d` under `name`.
template <typename ValueFn>
int AddU64Column(rte_tel_data* d, const char* name, size_t n, ValueFn&& value) {
  rte_tel_data* column = rte_tel_data_alloc();
  if (column == nullptr) return -ENOMEM;
  rte_tel_data_start_array(column, RTE_TEL_U64_VAL);
  for (size_t i = 0; i < n; ++i) rte_tel_data_add_array_u64(column, value(i));
  const int rc = rte_tel_data_add_dict_container(d, name, column, /*keep=*/0);
  if (rc != 0) rte_tel_data_free(column);
  return rc;
}

int PortsCommand(const char* /*cmd*/, const char* /*params*/, rte_tel_data* d) {
  return WithDataplane([d](const dataplane::Dataplane& dp) {
    rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
    for (size_t i = 0; i < dp.port_count(); ++i) {
      rte_tel_data_add_array_string(d, dp.plan().port(i).name.c_str());
    }
    return 0;
  });
}

// The index of the port `param` names: a port name first, else a decimal index.
int FindPort(const dataplane::Dataplane& dp, std::string_view param) {
  for (size_t i = 0; i < dp.port_count(); ++i) {
    if (dp.plan().port(i).name == param) return static_cast<int>(i);
  }
  unsigned index = 0;
  const char* end = param.data() + param.size();
  auto [ptr, ec] = std::from_chars(param.data(), end, index);
  if (param.empty() || ec != std::errc() || ptr != end || index >= dp.port_count()) return -1;
  return static_cast<int>(index);
}

int PortStatsCommand(const char* /*cmd*/, const char* params, rte_tel_data* d) {
  if (params == nullptr || params[0] == '\0') return -EINVAL;
  return WithDataplane([d, params](const dataplane::Dataplane& dp) {
    const int index = FindPort(dp, params);
    if (index < 0) return -EINVAL;
    const dataplane::PortInfo info = dp.GetPortInfo(index);
    const dataplane::PortTotals t = dp.GetPortTotals(index);
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "name", info.name.c_str());
    rte_tel_data_add_dict_u64(d, "index", index);
    rte_tel_data_add_dict_u64(d, "link_up", info.link_up ? 1 : 0);
#define AGG_PORT_TELEMETRY(name, help) rte_tel_data_add_dict_u64(d, #name, t.name);
    AGG_PORT_COUNTERS(AGG_PORT_TELEMETRY)
#undef AGG_PORT_TELEMETRY
    uint64_t dropped = 0;
    for (uint64_t n : t.drops) dropped += n;
    rte_tel_data_add_dict_u64(d, "dropped_packets", dropped);
    for (size_t r = 0; r < dataplane::kNumDropReasons; ++r) {
      const std::string key =
          std::string("drop_") + dataplane::DropReasonLabel(static_cast<dataplane::DropReason>(r));
      rte_tel_data_add_dict_u64(d, key.c_str(), t.drops[r]);
    }
#define AGG_PORT_DEVICE_TELEMETRY(name, stat, help) \
  rte_tel_data_add_dict_u64(d, "device_" #name, t.dev_##name);
    AGG_PORT_DEVICE_COUNTERS(AGG_PORT_DEVICE_TELEMETRY)
#undef AGG_PORT_DEVICE_TELEMETRY
    return 0;
  });
}

int LcoresCommand(const char* /*cmd*/, const char* /*params*/, rte_tel_data* d) {
  return WithDataplane([d](const dataplane::Dataplane& dp) {
    const StatsSnapshot snap = CollectSnapshot(dp);
    const auto& ls = snap.lcores;
    const size_t n = ls.size();
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_u64(d, "tsc_hz", snap.tsc_hz);
    AddU64Column(d, "lcore", n, [&](size_t i) { return ls[i].lcore; });
    AddU64Column(d, "tx_queue", n, [&](size_t i) { return ls[i].tx_queue; });

    rte_tel_data* rx = rte_tel_data_alloc();
    if (rx == nullptr) return -ENOMEM;
    rte_tel_data_start_array(rx, RTE_TEL_STRING_VAL);
    for (const LcoreSnapshot& l : ls) {
      std::string queues;
      for (const auto& [port, queue] : l.rx) {
        queues += (queues.empty() ? "" : " ") + port + "/" + std::to_string(queue);
      }
      rte_tel_data_add_array_string(rx, queues.c_str());  // truncated past 127 bytes
    }
    if (rte_tel_data_add_dict_container(d, "rx", rx, /*keep=*/0) != 0) rte_tel_data_free(rx);

#define AGG_LCORE_TELEMETRY(name, help) \
  AddU64Column(d, #name, n, [&](size_t i) { return ls[i].name; });
    AGG_LCORE_COUNTERS(AGG_LCORE_TELEMETRY)
#undef AGG_LCORE_TELEMETRY
    AddU64Column(d, "cycles_per_packet", n, [&](size_t i) {
      return static_cast<uint64_t>(std::llround(ls[i].CyclesPerPacket()));
    });
    return 0;
  });
}

int MacTableCommand(const char* /*cmd*/, const char* /*params*/, rte_tel_data* d) {
  return WithDataplane([d](const dataplane::Dataplane& dp) {
    const dataplane::MacTable& table = dp.mac_table();
    const dataplane::MacEventCounters& events = dp.mac_events();
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_u64(d, "size", table.size());
    rte_tel_data_add_dict_u64(d, "capacity", table.capacity());
    rte_tel_data_add_dict_u64(d, "static_entries", table.static_count());
    rte_tel_data_add_dict_u64(d, "aging_seconds", dp.aging_seconds());
    rte_tel_data_add_dict_u64(d, "learned", events.learned.Get());
    rte_tel_data_add_dict_u64(d, "moved", events.moved.Get());
    rte_tel_data_add_dict_u64(d, "aged", events.aged.Get());
    rte_tel_data_add_dict_u64(d, "static_conflicts", events.static_conflicts.Get());
    rte_tel_data_add_dict_u64(d, "learn_refused", events.table_full.Get());
    return 0;
  });
}

struct Command {
  const char* name;
  telemetry_cb fn;
  const char* help;  // at most 127 characters (RTE_TEL_MAX_STRING_LEN)
};

constexpr Command kCommands[] = {
    {"/aggswitch/ports", PortsCommand, "Returns the names of the switch ports."},
    {"/aggswitch/port_stats", PortStatsCommand,
     "Returns one port's counters and drops by reason. Parameters: port name or index."},
    {"/aggswitch/lcores", LcoresCommand,
     "Returns the worker lcores' counters, one array per counter."},
    {"/aggswitch/mac_table", MacTableCommand, "Returns MAC table occupancy and events."},
};

common::Status RegisterCommandsOnce() {
  static std::once_flag once;
  static common::Status status;
  std::call_once(once, [] {
    for (const Command& c : kCommands) {
      const int rc = rte_telemetry_register_cmd(c.name, c.fn, c.help);
      if (rc != 0) {
        status = common::Internal(std::string("cannot register telemetry command ") + c.name +
                                  ": " + std::strerror(-rc));
        return;
      }
    }
  });
  return status;
}

}  // namespace

common::Status RegisterTelemetry(const dataplane::Dataplane* dp) {
  if (dp == nullptr) return common::InvalidArgument("RegisterTelemetry needs a dataplane");
  RETURN_IF_ERROR(RegisterCommandsOnce());
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dataplane = dp;
  return common::Status::Ok();
}

void UnregisterTelemetry() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dataplane = nullptr;
}

}  // namespace aggswitch::control
