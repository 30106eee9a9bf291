#include "config/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>
#include <map>
#include <set>
#include <string_view>
#include <utility>

#include "common/siphash.h"

namespace aggswitch::config {
namespace {

// "ports[1]", "workers[0].rx[2]".
std::string Index(std::string_view base, size_t i) {
  return std::string(base) + "[" + std::to_string(i) + "]";
}

std::string Quote(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

std::string QuoteNumber(uint64_t value) {
  return Quote(std::to_string(value));
}

std::string JoinVlans(const std::vector<uint16_t>& vlans) {
  std::string out;
  for (uint16_t v : vlans) {
    if (!out.empty()) out += ", ";
    out += std::to_string(v);
  }
  return out;
}

bool IsValidVlan(unsigned vlan) {
  return vlan >= kMinVlan && vlan <= kMaxVlan;
}

bool IsPowerOfTwo(unsigned v) {
  return v != 0 && (v & (v - 1)) == 0;
}

bool IsNameChar(char c, std::string_view extra) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         extra.find(c) != std::string_view::npos;
}

bool IsValidPortName(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameChar(c, "_.-"); });
}

bool IsValidFilePrefix(std::string_view prefix) {
  if (prefix.empty()) return false;
  return std::all_of(prefix.begin(), prefix.end(), [](char c) { return IsNameChar(c, "_-"); });
}

// "host:port" with a dotted-quad host and a port 1..65535.
bool IsValidListen(std::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string_view::npos) return false;
  if (!common::Ipv4Addr::Parse(listen.substr(0, colon))) return false;
  const std::string_view port = listen.substr(colon + 1);
  if (port.empty() || port[0] == '0') return false;
  unsigned value = 0;
  auto [next, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  return ec == std::errc() && next == port.data() + port.size() && value >= 1 && value <= 65535;
}

// "127.x.x.x:port": only this host can connect.
bool IsLoopbackListen(std::string_view listen) {
  const std::optional<common::Ipv4Addr> ip = common::Ipv4Addr::Parse(listen.substr(0, listen.rfind(':')));
  return ip && (ip->addr >> 24) == 127;
}

// A DNS name as a Host header carries it: labels of letters, digits and '-',
// dot-separated, 1..253 characters.
bool IsHostName(std::string_view name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.back() == '.') return false;
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return name.find("..") == std::string_view::npos;
}

// An address the switch can own: not 0.0.0.0, loopback, multicast or reserved,
// and not the network or broadcast address of its own prefix.
bool IsHostAddress(const common::Ipv4Prefix& prefix) {
  const uint32_t a = prefix.ip.addr;
  if (a == 0 || (a >> 24) == 127 || (a >> 28) >= 0xe) return false;
  if (prefix.length <= 30) {
    const uint32_t host_mask = prefix.length == 0 ? ~0u : (~0u >> prefix.length);
    if ((a & host_mask) == 0 || (a & host_mask) == host_mask) return false;
  }
  return true;
}

// Parses one lcore set: "N", "N-M" or "(a,b-c,...)"; appends the ids to `out`.
bool ParseLcoreSet(std::string_view& text, std::vector<unsigned>& out) {
  auto parse_number = [&text](unsigned& value) {
    auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || next == text.data() || value > kMaxLcoreId) return false;
    text.remove_prefix(next - text.data());
    return true;
  };
  auto parse_range = [&](std::vector<unsigned>& ids) {
    unsigned first = 0;
    if (!parse_number(first)) return false;
    unsigned last = first;
    if (!text.empty() && text[0] == '-') {
      text.remove_prefix(1);
      if (!parse_number(last) || last < first) return false;
    }
    for (unsigned id = first; id <= last; ++id) ids.push_back(id);
    return true;
  };
  if (text.empty()) return false;
  if (text[0] != '(') return parse_range(out);
  text.remove_prefix(1);
  while (true) {
    if (!parse_range(out)) return false;
    if (text.empty()) return false;
    const char c = text[0];
    text.remove_prefix(1);
    if (c == ')') return true;
    if (c != ',') return false;
  }
}

// The port names a reference may use, for messages: "p0, p1, p2".
std::string PortNames(const Config& config) {
  constexpr size_t kMaxListed = 10;
  std::set<std::string_view> listed;
  std::string out;
  for (const PortConfig& port : config.ports) {
    if (!listed.insert(port.name).second) continue;
    if (listed.size() > kMaxListed) return out + ", ...";
    if (!out.empty()) out += ", ";
    out += port.name;
  }
  return out;
}

// Runs every check of Validate() and collects the errors.
class Validator {
 public:
  Validator(const Config& config, std::vector<ConfigError>& errors)
      : config_(config), errors_(errors) {}

  void Run() {
    CheckEal();
    CheckPorts();
    CheckWorkers();
    CheckSwitch();
    CheckMacTable();
    CheckMempool();
    CheckHttp();
    CheckAggregation();
    CheckTelemetry();
  }

 private:
  void Error(std::string path, SourceLoc fallback, std::string message) {
    const SourceLoc loc = config_.LocOf(path, fallback);
    errors_.push_back(ConfigError{std::move(path), loc, std::move(message)});
  }

  // "ports[0], line 12" for "also ..." hints.
  std::string Where(const std::string& path, SourceLoc fallback) const {
    const SourceLoc loc = config_.LocOf(path, fallback);
    if (loc.line == 0) return path;
    return path + ", line " + std::to_string(loc.line);
  }

  // Reports a VLAN id out of range; returns whether it was in range.
  bool CheckVlan(const std::string& path, SourceLoc fallback, unsigned vlan) {
    if (IsValidVlan(vlan)) return true;
    Error(path, fallback,
          "expected a VLAN id " + std::to_string(kMinVlan) + ".." + std::to_string(kMaxVlan) +
              ", got " + QuoteNumber(vlan));
    return false;
  }

  void CheckEal() {
    const EalConfig& eal = config_.eal;
    lcores_ = ParseLcoreList(eal.lcores);
    if (!lcores_) {
      Error("eal.lcores", eal.loc,
            "expected a comma-separated lcore list such as \"0,1\", \"0-3\" or \"1@2\", got " +
                Quote(eal.lcores));
    } else if (!HasLcore(eal.main_lcore)) {
      Error("eal.main_lcore", eal.loc,
            "expected an lcore listed in eal.lcores " + Quote(eal.lcores) + ", got " +
                QuoteNumber(eal.main_lcore));
    }
    if (eal.memory_mb < kMinMemoryMb) {
      Error("eal.memory_mb", eal.loc,
            "expected at least " + std::to_string(kMinMemoryMb) + " MB, got " +
                QuoteNumber(eal.memory_mb));
    }
    if (!IsValidFilePrefix(eal.file_prefix)) {
      Error("eal.file_prefix", eal.loc,
            "expected a non-empty name from [A-Za-z0-9_-], got " + Quote(eal.file_prefix));
    }
    if (eal.idle_sleep_us > kMaxIdleSleepUs) {
      Error("eal.idle_sleep_us", eal.loc,
            "expected 0.." + std::to_string(kMaxIdleSleepUs) + " microseconds (0: busy-poll), got " +
                QuoteNumber(eal.idle_sleep_us));
    }
  }

  bool HasLcore(unsigned lcore) const {
    return lcores_ && std::binary_search(lcores_->begin(), lcores_->end(), lcore);
  }

  void CheckSwitch() {
    const SwitchConfig& sw = config_.switch_;
    if (sw.name.empty()) Error("switch.name", sw.loc, "expected a non-empty name, got \"\"");
    if (sw.mac.IsMulticast() || sw.mac.IsZero()) {
      Error("switch.mac", sw.loc,
            "expected a unicast, non-zero MAC address, got " + Quote(sw.mac.ToString()));
    }
    if (sw.addresses.size() > kMaxSwitchAddresses) {
      Error("switch.addresses", sw.loc,
            "expected at most " + std::to_string(kMaxSwitchAddresses) + " addresses, got " +
                std::to_string(sw.addresses.size()));
    }
    for (size_t i = 0; i < sw.addresses.size(); ++i) {
      const SwitchAddress& address = sw.addresses[i];
      // Checked as aggregation.address, where the user wrote it.
      if (address.from_aggregation) continue;
      const std::string path = Index("switch.addresses", i);
      // The map form names the address under "address"; point there.
      std::string address_path = path + ".address";
      if (config_.source_locs.find(address_path) == config_.source_locs.end()) {
        address_path = path;
      }
      bool valid = true;
      if (!IsHostAddress(address.prefix)) {
        Error(address_path, address.loc,
              "expected a unicast host address, got " + Quote(address.prefix.ToString()));
        valid = false;
      }
      if (address.vlan != 0) {
        if (!IsValidVlan(address.vlan)) {
          CheckVlan(path + ".vlan", address.loc, address.vlan);
          valid = false;
        } else if (AllPortVlansKnown() && !AnyPortCarries(address.vlan)) {
          Error(path + ".vlan", address.loc,
                "expected a VLAN that some port carries, got " + QuoteNumber(address.vlan));
        }
      }
      if (!valid) continue;
      for (size_t j = 0; j < i; ++j) {
        const SwitchAddress& other = sw.addresses[j];
        const bool overlapping = other.vlan == 0 || address.vlan == 0 || other.vlan == address.vlan;
        if (other.prefix.ip == address.prefix.ip && overlapping) {
          Error(address_path, address.loc,
                "expected each address once per VLAN, got " + Quote(address.prefix.ip.ToString()) +
                    " again (also " + Where(Index("switch.addresses", j), other.loc) + ")");
          break;
        }
      }
    }
  }

  // False with no ports, or when a port has a VLAN out of range (reported at
  // the port): then whether a VLAN is carried is not known.
  bool AllPortVlansKnown() const {
    return !config_.ports.empty() &&
           std::all_of(vlans_ok_.begin(), vlans_ok_.end(), [](bool ok) { return ok; });
  }

  bool AnyPortCarries(uint16_t vlan) const {
    return std::any_of(config_.ports.begin(), config_.ports.end(),
                       [vlan](const PortConfig& port) { return port.Carries(vlan); });
  }

  void CheckPorts() {
    const size_t n = config_.ports.size();
    if (n == 0 || n > kMaxPorts) {
      Error("ports", {},
            "expected 1.." + std::to_string(kMaxPorts) + " ports, got " +
                (n == 0 ? std::string("none") : std::to_string(n)));
    }
    std::map<std::string, size_t> names;
    std::map<std::string, size_t> devargs;
    std::map<std::string, size_t> groups;  // group name -> its first member
    name_ok_.assign(n, true);
    vlans_ok_.assign(n, true);
    for (size_t i = 0; i < n; ++i) {
      const PortConfig& port = config_.ports[i];
      const std::string path = Index("ports", i);
      if (!IsValidPortName(port.name)) {
        name_ok_[i] = false;
        Error(path + ".name", port.loc,
              "expected a port name of 1..32 characters from [A-Za-z0-9_.-], got " +
                  Quote(port.name));
      } else if (auto [it, inserted] = names.emplace(port.name, i); !inserted) {
        name_ok_[i] = false;
        Error(path + ".name", port.loc,
              "expected a unique port name, got " + Quote(port.name) + " again (also " +
                  Where(Index("ports", it->second), config_.ports[it->second].loc) + ")");
      }
      if (port.devargs.empty()) {
        Error(path + ".devargs", port.loc, "expected non-empty DPDK devargs, got \"\"");
      } else if (auto [it, inserted] = devargs.emplace(port.devargs, i); !inserted) {
        Error(path + ".devargs", port.loc,
              "expected unique devargs, got " + Quote(port.devargs) + " again (also " +
                  Where(Index("ports", it->second), config_.ports[it->second].loc) + ")");
      }
      vlans_ok_[i] = CheckPortVlans(port, path);
      CheckGroup(i, path, groups);
      CheckDescriptors(path + ".rx_descriptors", port.loc, port.rx_descriptors);
      CheckDescriptors(path + ".tx_descriptors", port.loc, port.tx_descriptors);
      if (port.mtu < kMinMtu || port.mtu > kMaxMtu) {
        Error(path + ".mtu", port.loc,
              "expected an MTU " + std::to_string(kMinMtu) + ".." + std::to_string(kMaxMtu) +
                  ", got " + QuoteNumber(port.mtu));
      }
    }
  }

  // A group's name is a port name's kind; its members carry the same VLANs,
  // the same way, so that the group is one port to the L2 switch.
  void CheckGroup(size_t i, const std::string& path, std::map<std::string, size_t>& groups) {
    const PortConfig& port = config_.ports[i];
    if (port.group.empty()) return;
    if (!IsValidPortName(port.group)) {
      Error(path + ".group", port.loc,
            "expected a group name of 1..32 characters from [A-Za-z0-9_.-], got " +
                Quote(port.group));
      return;
    }
    const auto [it, first] = groups.emplace(port.group, i);
    if (first) return;
    const PortConfig& head = config_.ports[it->second];
    if (port.mode != head.mode || port.access_vlan != head.access_vlan ||
        port.trunk_vlans != head.trunk_vlans || port.native_vlan != head.native_vlan) {
      Error(path + ".group", port.loc,
            "expected the members of group " + Quote(port.group) +
                " to carry the same VLANs the same way, got VLANs that differ from " +
                Where(Index("ports", it->second), head.loc));
    }
  }

  // Returns false when some VLAN of the port is out of range.
  bool CheckPortVlans(const PortConfig& port, const std::string& path) {
    if (port.mode == VlanMode::kAccess) {
      if (port.native_vlan) {
        Error(path + ".native", port.loc,
              "expected \"native\" only on a trunk port, got it on an access port");
      }
      return CheckVlan(path + ".access", port.loc, port.access_vlan);
    }
    if (port.trunk_vlans.empty()) {
      Error(path + ".trunk", port.loc, "expected a non-empty list of VLAN ids, got an empty list");
    }
    bool ok = true;
    std::map<uint16_t, size_t> seen;
    for (size_t j = 0; j < port.trunk_vlans.size(); ++j) {
      const uint16_t vlan = port.trunk_vlans[j];
      const std::string item = Index(path + ".trunk", j);
      if (!CheckVlan(item, port.loc, vlan)) {
        ok = false;
      } else if (auto [it, inserted] = seen.emplace(vlan, j); !inserted) {
        Error(item, port.loc,
              "expected each VLAN once, got " + QuoteNumber(vlan) + " again (also " +
                  Where(Index(path + ".trunk", it->second), port.loc) + ")");
      }
    }
    if (port.native_vlan && !CheckVlan(path + ".native", port.loc, *port.native_vlan)) ok = false;
    return ok;
  }

  void CheckDescriptors(const std::string& path, SourceLoc fallback, uint16_t count) {
    if (count < kMinDescriptors || count > kMaxDescriptors || !IsPowerOfTwo(count)) {
      Error(path, fallback,
            "expected a power of two " + std::to_string(kMinDescriptors) + ".." +
                std::to_string(kMaxDescriptors) + ", got " + QuoteNumber(count));
    }
  }

  void CheckWorkers() {
    const std::vector<WorkerConfig>& workers = config_.workers;
    if (workers.empty()) {
      // An unreadable eal.lcores (reported above) or the lack of ports explains
      // the missing default worker.
      if (lcores_ && !config_.ports.empty()) {
        const bool spare = std::any_of(lcores_->begin(), lcores_->end(), [this](unsigned id) {
          return id != config_.eal.main_lcore;
        });
        Error("workers", {},
              spare ? std::string("expected at least one worker, got none")
                    : "expected at least one worker, got none (eal.lcores " +
                          Quote(config_.eal.lcores) + " has no lcore besides eal.main_lcore " +
                          std::to_string(config_.eal.main_lcore) + ")");
      }
    } else if (workers.size() > kMaxWorkers) {
      Error("workers", {},
            "expected at most " + std::to_string(kMaxWorkers) + " workers, got " +
                std::to_string(workers.size()));
    }
    std::map<unsigned, size_t> lcores;
    // (port index, queue) -> the rx item that polls it.
    std::map<std::pair<int, uint16_t>, std::string> polled;
    std::vector<bool> port_polled(config_.ports.size(), false);
    std::vector<std::set<uint16_t>> port_queues(config_.ports.size());
    // An rx item naming no known port was meant for some port; which one is
    // unknown, so no port is reported as unpolled.
    bool unresolved_rx = false;
    for (size_t i = 0; i < workers.size(); ++i) {
      const WorkerConfig& worker = workers[i];
      const std::string path = Index("workers", i);
      const std::string lcore_path = path + ".lcore";
      if (worker.lcore == config_.eal.main_lcore) {
        Error(lcore_path, worker.loc,
              "expected an lcore other than eal.main_lcore, got " + QuoteNumber(worker.lcore));
      } else if (lcores_ && !HasLcore(worker.lcore)) {
        Error(lcore_path, worker.loc,
              "expected an lcore listed in eal.lcores " + Quote(config_.eal.lcores) + ", got " +
                  QuoteNumber(worker.lcore));
      } else if (auto [it, inserted] = lcores.emplace(worker.lcore, i); !inserted) {
        Error(lcore_path, worker.loc,
              "expected a different lcore for each worker, got " + QuoteNumber(worker.lcore) +
                  " again (also " + Where(Index("workers", it->second), workers[it->second].loc) +
                  ")");
      }
      if (worker.rx.empty() && !config_.ports.empty()) {
        Error(path + ".rx", worker.loc, "expected at least one RX queue to poll, got none");
      }
      for (size_t j = 0; j < worker.rx.size(); ++j) {
        const RxQueueRef& rx = worker.rx[j];
        const std::string item = Index(path + ".rx", j);
        const int port = config_.PortIndex(rx.port);
        if (port < 0) {
          unresolved_rx = true;
          // With no ports at all, the "ports" error already explains this.
          if (!config_.ports.empty()) {
            Error(item, rx.loc,
                  "expected one of the ports " + PortNames(config_) + ", got " + Quote(rx.port));
          }
          continue;
        }
        port_polled[port] = true;
        if (rx.queue >= kMaxRxQueuesPerPort) {
          Error(item, rx.loc,
                "expected an RX queue 0.." + std::to_string(kMaxRxQueuesPerPort - 1) + ", got " +
                    QuoteNumber(rx.queue));
          continue;
        }
        port_queues[port].insert(rx.queue);
        auto [it, inserted] = polled.emplace(std::make_pair(port, rx.queue), item);
        if (!inserted) {
          Error(item, rx.loc,
                "expected each RX queue to be polled by one worker, got " + rx.port + ":" +
                    std::to_string(rx.queue) + " again (also " + Where(it->second, {}) + ")");
        }
      }
    }
    if (workers.empty()) return;
    for (size_t p = 0; p < config_.ports.size(); ++p) {
      const PortConfig& port = config_.ports[p];
      const std::string path = Index("ports", p);
      // A port without a valid, unique name cannot be named by a worker.
      if (!name_ok_[p]) continue;
      if (!port_polled[p]) {
        if (unresolved_rx) continue;
        Error(path, port.loc,
              "expected a worker to poll port " + Quote(port.name) + ", got none polling it");
        continue;
      }
      const std::set<uint16_t>& queues = port_queues[p];
      if (!queues.empty() && *queues.rbegin() + 1u != queues.size()) {
        std::string list;
        for (uint16_t q : queues) list += (list.empty() ? "" : ",") + std::to_string(q);
        Error(path, port.loc,
              "expected the polled RX queues of port " + Quote(port.name) +
                  " to be contiguous from 0, got " + list);
      }
    }
  }

  void CheckMacTable() {
    const MacTableConfig& table = config_.mac_table;
    if (table.size < kMinMacTableSize || table.size > kMaxMacTableSize) {
      Error("mac_table.size", table.loc,
            "expected a table size " + std::to_string(kMinMacTableSize) + ".." +
                std::to_string(kMaxMacTableSize) + ", got " + QuoteNumber(table.size));
    }
    if (table.aging_seconds > kMaxAgingSeconds) {
      Error("mac_table.aging_seconds", table.loc,
            "expected 0.." + std::to_string(kMaxAgingSeconds) + " seconds, got " +
                QuoteNumber(table.aging_seconds));
    }
    if (table.static_entries.size() > table.size) {
      Error("mac_table.static", table.loc,
            "expected at most " + std::to_string(table.size) +
                " static entries (mac_table.size), got " +
                std::to_string(table.static_entries.size()));
    }
    std::map<std::pair<uint64_t, uint16_t>, size_t> seen;
    for (size_t i = 0; i < table.static_entries.size(); ++i) {
      const StaticMacEntry& entry = table.static_entries[i];
      const std::string path = Index("mac_table.static", i);
      bool valid = true;
      if (entry.mac.IsMulticast() || entry.mac.IsZero()) {
        Error(path + ".mac", entry.loc,
              "expected a unicast, non-zero MAC address, got " + Quote(entry.mac.ToString()));
        valid = false;
      }
      if (!IsValidVlan(entry.vlan)) {
        CheckVlan(path + ".vlan", entry.loc, entry.vlan);
        valid = false;
      }
      const PortConfig* port = config_.FindPort(entry.port);
      if (port == nullptr) {
        if (!config_.ports.empty()) {
          Error(path + ".port", entry.loc,
                "expected one of the ports " + PortNames(config_) + ", got " + Quote(entry.port));
        }
      } else if (IsValidVlan(entry.vlan) && vlans_ok_[port - config_.ports.data()] &&
                 !port->Carries(entry.vlan)) {
        Error(path + ".vlan", entry.loc,
              "expected a VLAN that port " + Quote(port->name) + " carries (" +
                  JoinVlans(CarriedVlans(*port)) + "), got " + QuoteNumber(entry.vlan));
      }
      if (!valid) continue;
      auto [it, inserted] = seen.emplace(std::make_pair(entry.mac.ToU64(), entry.vlan), i);
      if (!inserted) {
        Error(
            path, entry.loc,
            "expected each (mac, vlan) once, got " + entry.mac.ToString() + " vlan " +
                std::to_string(entry.vlan) + " again (also " +
                Where(Index("mac_table.static", it->second), table.static_entries[it->second].loc) +
                ")");
      }
    }
  }

  static std::vector<uint16_t> CarriedVlans(const PortConfig& port) {
    if (port.mode == VlanMode::kAccess) return {port.access_vlan};
    std::set<uint16_t> vlans(port.trunk_vlans.begin(), port.trunk_vlans.end());
    if (port.native_vlan) vlans.insert(*port.native_vlan);
    return {vlans.begin(), vlans.end()};
  }

  void CheckMempool() {
    const MempoolConfig& pool = config_.mempool;
    if (pool.mbufs < kMinMbufs || pool.mbufs > kMaxMbufs) {
      Error("mempool.mbufs", pool.loc,
            "expected " + std::to_string(kMinMbufs) + ".." + std::to_string(kMaxMbufs) +
                " mbufs, got " + QuoteNumber(pool.mbufs));
    }
    if (pool.cache > kMaxMempoolCache) {
      Error("mempool.cache", pool.loc,
            "expected a cache size 0.." + std::to_string(kMaxMempoolCache) + ", got " +
                QuoteNumber(pool.cache));
    }
  }

  void CheckTelemetry() {
    const TelemetryConfig& t = config_.telemetry;
    if (t.watch.size() > kMaxWatchEntries) {
      Error("telemetry.watch", t.loc,
            "expected at most " + std::to_string(kMaxWatchEntries) + " entries, got " +
                std::to_string(t.watch.size()));
    }
    if (!t.watch.empty()) {
      if (t.node_id == 0 || t.node_id == UINT32_MAX) {
        Error("telemetry.node_id", t.loc,
              "expected this switch's INT node id 1..4294967294 (a watch list is configured), got " +
                  QuoteNumber(t.node_id));
      }
      if (!t.collector) {
        Error("telemetry.collector", t.loc,
              "expected the collector's \"a.b.c.d:port\" (a watch list is configured), got none");
      }
    }
    if (t.max_hops == 0) {
      Error("telemetry.max_hops", t.loc, "expected a hop count 1..255, got \"0\"");
    }
    if (t.int_port == 0) Error("telemetry.int_port", t.loc, "expected a UDP port 1..65535, got \"0\"");
    if (t.int_port == config_.aggregation.udp_port) {
      Error("telemetry.int_port", t.loc,
            "expected a UDP port other than aggregation.udp_port, got " + QuoteNumber(t.int_port));
    }
    for (size_t i = 0; i < t.watch.size(); ++i) {
      const WatchEntry& w = t.watch[i];
      const std::string path = Index("telemetry.watch", i);
      if (w.name.empty()) Error(path + ".name", w.loc, "expected a non-empty name, got \"\"");
      for (size_t j = 0; j < i; ++j) {
        if (!w.name.empty() && t.watch[j].name == w.name) {
          Error(path + ".name", w.loc,
                "expected a name no other entry has, got " + Quote(w.name) + " (also " +
                    Where(Index("telemetry.watch", j), t.watch[j].loc) + ")");
        }
      }
      if (w.vlan != 0) {
        if (CheckVlan(path + ".vlan", w.loc, w.vlan) && AllPortVlansKnown() &&
            !AnyPortCarries(w.vlan)) {
          Error(path + ".vlan", w.loc, "expected a VLAN that some port carries, got " + QuoteNumber(w.vlan));
        }
      }
      for (const auto& [key, prefix] : {std::pair{".src", w.src}, std::pair{".dst", w.dst}}) {
        if (!prefix) continue;
        const uint32_t mask = prefix->length == 0 ? 0 : ~uint32_t{0} << (32 - prefix->length);
        if ((prefix->ip.addr & ~mask) != 0) {
          Error(path + key, w.loc,
                "expected a prefix without host bits (such as \"10.0.0.0/24\"), got " +
                    Quote(prefix->ToString()));
        }
      }
      if (w.sample == 0 || w.sample > kMaxWatchSample) {
        Error(path + ".sample", w.loc,
              "expected 1 in N datagrams, N 1.." + std::to_string(kMaxWatchSample) + ", got " +
                  QuoteNumber(w.sample));
      }
    }
  }

  void CheckHttp() {
    const HttpConfig& http = config_.http;
    if (!IsValidListen(http.listen)) {
      Error("http.listen", http.loc,
            "expected \"host:port\" with an IPv4 host and a port 1..65535, got " +
                Quote(http.listen));
    } else if (http.token_file.empty() && !IsLoopbackListen(http.listen)) {
      // Beyond loopback every host that reaches the port could drive the API.
      Error("http.listen", http.loc,
            "expected a loopback address (127.x.x.x) unless http.token_file is set: an API "
            "reachable beyond this host needs a token, got " + Quote(http.listen));
    }
    if (http.protect_reads && http.token_file.empty()) {
      Error("http.protect_reads", http.loc,
            "expected http.token_file with protect_reads: true (the token protects the reads), "
            "got no token_file");
    }
    if (http.threads < 1 || http.threads > kMaxHttpThreads) {
      Error("http.threads", http.loc,
            "expected 1.." + std::to_string(kMaxHttpThreads) + " threads, got " +
                QuoteNumber(http.threads));
    }
    if (http.request_timeout_ms < kMinHttpTimeoutMs || http.request_timeout_ms > kMaxHttpTimeoutMs) {
      Error("http.request_timeout_ms", http.loc,
            "expected " + std::to_string(kMinHttpTimeoutMs) + ".." +
                std::to_string(kMaxHttpTimeoutMs) + " milliseconds, got " +
                QuoteNumber(http.request_timeout_ms));
    }
    if (http.allowed_hosts.size() > kMaxAllowedHosts) {
      Error("http.allowed_hosts", http.loc,
            "expected at most " + std::to_string(kMaxAllowedHosts) + " names, got " +
                std::to_string(http.allowed_hosts.size()));
    }
    for (size_t i = 0; i < http.allowed_hosts.size(); ++i) {
      if (!IsHostName(http.allowed_hosts[i])) {
        const std::string path = "http.allowed_hosts[" + std::to_string(i) + "]";
        Error(path, config_.LocOf(path, http.loc),
              "expected a DNS name (letters, digits, '-' and '.', without a port), got " +
                  Quote(http.allowed_hosts[i]));
      }
    }
  }

  void CheckAggregation() {
    const AggregationConfig& agg = config_.aggregation;
    if (agg.address) CheckAggregationAddress(*agg.address);
    if (agg.udp_port == 0) {
      Error("aggregation.udp_port", agg.loc, "expected a UDP port 1..65535, got \"0\"");
    }
    if (agg.slots < kMinAggregationSlots || agg.slots > kMaxAggregationSlots ||
        !IsPowerOfTwo(agg.slots)) {
      Error("aggregation.slots", agg.loc,
            "expected a power of two " + std::to_string(kMinAggregationSlots) + ".." +
                std::to_string(kMaxAggregationSlots) + ", got " + QuoteNumber(agg.slots));
    }
    const bool fan_in_ok = agg.max_fan_in >= 1 && agg.max_fan_in <= kMaxAggregationFanIn;
    if (!fan_in_ok) {
      Error("aggregation.max_fan_in", agg.loc,
            "expected 1.." + std::to_string(kMaxAggregationFanIn) + " members, got " +
                QuoteNumber(agg.max_fan_in));
    }
    const bool max_jobs_ok = agg.max_jobs >= 1 && agg.max_jobs <= kMaxAggregationJobs;
    if (!max_jobs_ok) {
      Error("aggregation.max_jobs", agg.loc,
            "expected 1.." + std::to_string(kMaxAggregationJobs) + " jobs, got " +
                QuoteNumber(agg.max_jobs));
    } else if (agg.jobs.size() > agg.max_jobs) {
      Error("aggregation.jobs", agg.loc,
            "expected at most " + std::to_string(agg.max_jobs) +
                " jobs (aggregation.max_jobs), got " + std::to_string(agg.jobs.size()));
    }
    std::map<uint32_t, size_t> ids;
    for (size_t i = 0; i < agg.jobs.size(); ++i) {
      const AggregationJobConfig& job = agg.jobs[i];
      const std::string path = Index("aggregation.jobs", i);
      if (job.id == 0) {
        Error(path + ".id", job.loc, "expected a job id 1..4294967295, got \"0\"");
      } else if (auto [it, inserted] = ids.emplace(job.id, i); !inserted) {
        Error(path + ".id", job.loc,
              "expected each job id once, got " + QuoteNumber(job.id) + " again (also " +
                  Where(Index("aggregation.jobs", it->second), agg.jobs[it->second].loc) + ")");
      }
      CheckJobMembers(job, path, fan_in_ok ? agg.max_fan_in : kMaxAggregationFanIn);
      if (job.nodes == 0) {
        Error(path + ".nodes", job.loc, "expected a node count 1..65535, got \"0\"");
      } else if (job.PartialSumGoesNowhere()) {
        Error(path + ".nodes", job.loc,
              "expected 1 for a job with neither an upstream nor child switches (switches), got " +
                  QuoteNumber(job.nodes) + ": the sum of this switch's members would be a partial one");
      }
      CheckJobTree(job, path);
    }
    CheckTimers(agg);
    CheckLimits(agg);
    CheckUpstreamCandidates(agg);
  }

  // What one job, and in-band jobs together, may take (docs/security.md).
  void CheckLimits(const AggregationConfig& agg) {
    auto range = [&](const std::string& path, SourceLoc loc, uint64_t value, uint64_t min,
                     uint64_t max, const std::string& what) {
      if (value >= min && value <= max) return true;
      Error(path, loc,
            "expected " + std::to_string(min) + ".." + std::to_string(max) + " " + what + ", got " +
                QuoteNumber(value));
      return false;
    };
    if (!agg.slot_secret.empty() && !common::SipKey::Parse(agg.slot_secret)) {
      Error("aggregation.slot_secret", agg.loc,
            "expected \"0x\" and 32 hex digits (128 bits), got " + Quote(agg.slot_secret));
    }
    // The slot quotas only mean something with a valid table (reported above).
    const bool slots_ok = agg.slots >= kMinAggregationSlots && agg.slots <= kMaxAggregationSlots &&
                          IsPowerOfTwo(agg.slots);
    const uint32_t in_band_slots = agg.InBandSlots();
    bool in_band_ok = true;
    if (slots_ok && agg.in_band_registration) {
      // The provisioned jobs keep at least as many slots as the in-band ones.
      in_band_ok = range("aggregation.in_band.slots", agg.in_band.loc, in_band_slots, 1, agg.slots / 2,
                         "slots (at most half of aggregation.slots)");
      if (in_band_ok) {
        range("aggregation.in_band.slots_per_job", agg.in_band.loc, agg.InBandSlotsPerJob(), 1,
              in_band_slots, "chunks (aggregation.in_band.slots at most)");
      }
    }
    bool spare_ok = true;
    if (slots_ok && in_band_ok) {
      // A slot hint is 16 bits, 0xFFFF meaning none and 0xFFFE a moved
      // partition (SlotRegions::kMaxSpareSlots); config and API jobs keep at
      // least a quarter of the table.
      spare_ok = range("aggregation.spare_slots", agg.loc, agg.SpareSlots(), 0,
                       std::min<uint32_t>(kMaxSpareSlots, agg.slots - in_band_slots - agg.slots / 4),
                       "slots (at most 65534, and at most what leaves config and API jobs a "
                       "quarter of aggregation.slots after in_band.slots)");
    }
    if (slots_ok && in_band_ok && spare_ok) {
      range("aggregation.slots_per_job", agg.loc, agg.SlotsPerJob(), 1,
            agg.slots - in_band_slots - agg.SpareSlots(),
            "chunks (the slots config and API jobs have: aggregation.slots - in_band.slots - "
            "spare_slots)");
    }
    const HoldConfig& hold = agg.hold;
    const bool buffers_ok = range("aggregation.hold.buffers", hold.loc, hold.buffers,
                                  kMinHoldBuffers, kMaxHoldBuffers, "buffers");
    if (buffers_ok) {
      range("aggregation.hold.per_job", hold.loc, agg.HoldPerJob(), 1, hold.buffers,
            "buffers (aggregation.hold.buffers at most)");
    }
    const StoreConfig& store = agg.store;
    if (range("aggregation.store.buffers", store.loc, store.buffers, 0, kMaxStoreBuffers,
              "buffers (0: no store)") &&
        store.buffers != 0) {
      range("aggregation.store.per_job", store.loc, store.PerJob(), 1, store.buffers,
            "buffers (aggregation.store.buffers at most)");
    }
    range("aggregation.store.final_timeout_ms", store.loc, store.final_timeout_ms, 1,
          kMaxTimeoutMs, "milliseconds");
    range("aggregation.member_rebind_ms", agg.loc, agg.member_rebind_ms, 0, kMaxTimeoutMs,
          "milliseconds (0: only the API rebinds)");
    range("aggregation.restart_grace_ms", agg.loc, agg.restart_grace_ms, 0, kMaxTimeoutMs,
          "milliseconds (0: none)");
    const InBandConfig& in_band = agg.in_band;
    if (buffers_ok &&
        range("aggregation.in_band.held_total", in_band.loc, agg.InBandHeldTotal(), 1,
              hold.buffers / 2, "buffers (half of aggregation.hold.buffers at most)")) {
      range("aggregation.in_band.held_per_job", in_band.loc, agg.InBandHeldPerJob(), 1,
            agg.InBandHeldTotal(), "buffers (aggregation.in_band.held_total at most)");
    }
    range("aggregation.in_band.max_jobs", in_band.loc, agg.InBandMaxJobs(), 1,
          std::max(1u, agg.max_jobs), "jobs (aggregation.max_jobs at most)");
    range("aggregation.in_band.idle_timeout_ms", in_band.loc, in_band.idle_timeout_ms,
          kMinIdleTimeoutMs, kMaxIdleTimeoutMs, "milliseconds");
    for (const auto& [name, rate] : {std::pair{"per_source", &in_band.per_source},
                                     std::pair{"total", &in_band.total}}) {
      const std::string path = std::string("aggregation.in_band.") + name;
      range(path + ".per_second", rate->loc, rate->per_second, 1, kMaxRegistrationRate,
            "registrations a second");
      range(path + ".burst", rate->loc, rate->burst, 1, kMaxRegistrationRate, "registrations");
    }
  }

  // Where a node id is named in its job: node_ids[k], switches[j].node or
  // switches[j].covers[k], and the item's location should the key path have
  // none recorded. The path itself is built only for an error message: a job
  // may name 65535 ids.
  struct NodeIdPlace {
    enum class Kind : uint8_t { kNodeId, kSwitchNode, kCovered };
    Kind kind;
    uint32_t j = 0;
    uint32_t k = 0;
    SourceLoc fallback;
  };
  using NodeIdPlaces = std::map<uint16_t, NodeIdPlace>;

  static std::string PathOf(const std::string& job_path, const NodeIdPlace& place) {
    switch (place.kind) {
      case NodeIdPlace::Kind::kNodeId:
        return Index(job_path + ".node_ids", place.k);
      case NodeIdPlace::Kind::kSwitchNode:
        return Index(job_path + ".switches", place.j) + ".node";
      case NodeIdPlace::Kind::kCovered:
        break;
    }
    return Index(Index(job_path + ".switches", place.j) + ".covers", place.k);
  }

  bool Recorded(const std::string& path) const {
    return config_.source_locs.find(path) != config_.source_locs.end();
  }

  // The member count: `members` for a flat job, else node_ids plus switches,
  // which `members` must then equal.
  void CheckJobMembers(const AggregationJobConfig& job, const std::string& path,
                       unsigned max_fan_in) {
    const std::string range =
        "expected 1.." + std::to_string(max_fan_in) + " members (aggregation.max_fan_in), got ";
    const size_t listed = job.node_ids.size() + job.switches.size();
    if (listed == 0) {
      if (job.members != 0 && job.members <= max_fan_in) return;
      // `node_ids: []` without `members`: point at the empty list.
      std::string count_path = path + ".members";
      if (!Recorded(count_path)) {
        if (Recorded(path + ".node_ids")) {
          count_path = path + ".node_ids";
        } else if (Recorded(path + ".switches")) {
          count_path = path + ".switches";
        }
      }
      Error(count_path, job.loc,
            range + (count_path == path + ".members" ? QuoteNumber(job.members)
                                                     : std::string("none (node_ids and switches "
                                                                   "are empty)")));
      return;
    }
    const std::string counted = std::to_string(job.node_ids.size()) + " node_ids + " +
                                std::to_string(job.switches.size()) + " switches";
    if (listed > max_fan_in) {
      Error(path + (job.node_ids.empty() ? ".switches" : ".node_ids"), job.loc,
            range + QuoteNumber(listed) + " (" + counted + ")");
    }
    if (listed <= UINT16_MAX && job.members != listed) {
      Error(path + ".members", job.loc,
            "expected members to equal the node ids and child switches listed (" + counted + " = " +
                std::to_string(listed) + "), got " + QuoteNumber(job.members));
    }
  }

  // Reports a node id out of range (65535 is reserved); returns whether it was
  // in range.
  bool CheckNodeId(const std::string& path, SourceLoc fallback, unsigned id) {
    if (id <= kMaxNodeId) return true;
    Error(path, fallback,
          "expected a node id 0.." + std::to_string(kMaxNodeId) + " (" +
              std::to_string(kMaxNodeId + 1) + " is reserved), got " + QuoteNumber(id));
    return false;
  }

  // Node ids, child switches, the upstream and the job's own timer and TAN settings.
  void CheckJobTree(const AggregationJobConfig& job, const std::string& path) {
    const AggregationConfig& agg = config_.aggregation;
    // Every member's node id, once: node id -> where it is named.
    NodeIdPlaces members;
    const auto where = [&](const NodeIdPlace& place) {
      return Where(PathOf(path, place), place.fallback);
    };
    // Two overlapping ranges repeat several ids; one error per item is enough.
    std::set<std::pair<int, int>> repeats;
    auto first_repeat = [&](const std::string& id_path, SourceLoc fallback) {
      const SourceLoc loc = config_.LocOf(id_path, fallback);
      return loc.line == 0 || repeats.emplace(loc.line, loc.column).second;
    };
    auto add_member = [&](const NodeIdPlace& place, uint16_t id) {
      if (id > kMaxNodeId) {
        CheckNodeId(PathOf(path, place), place.fallback, id);
        return;
      }
      auto [it, inserted] = members.emplace(id, place);
      if (inserted) return;
      const std::string id_path = PathOf(path, place);
      if (first_repeat(id_path, place.fallback)) {
        Error(id_path, place.fallback,
              "expected each member's node id once in the job, got " + QuoteNumber(id) +
                  " again (also " + where(it->second) + ")");
      }
    };
    for (size_t k = 0; k < job.node_ids.size(); ++k) {
      add_member({NodeIdPlace::Kind::kNodeId, 0, static_cast<uint32_t>(k), job.loc},
                 job.node_ids[k]);
    }
    for (size_t j = 0; j < job.switches.size(); ++j) {
      const ChildSwitchConfig& child = job.switches[j];
      add_member({NodeIdPlace::Kind::kSwitchNode, static_cast<uint32_t>(j), 0, child.loc},
                 child.node);
    }
    // The node ids below each child switch: not the child's own, not a member
    // here, and below one child only.
    NodeIdPlaces covered;
    for (size_t j = 0; j < job.switches.size(); ++j) {
      const ChildSwitchConfig& child = job.switches[j];
      const std::string child_path = Index(path + ".switches", j);
      const std::string child_name = "switch " + QuoteNumber(child.node);
      if (child.covers.empty() && agg.bypass.subswitch == SubswitchEntries::kNodes) {
        Error(child_path, child.loc,
              "expected covers, the node ids below " + child_name +
                  " (aggregation.bypass.subswitch is nodes: a late child's entries are the "
                  "nodes it covers), got none");
      }
      for (size_t k = 0; k < child.covers.size(); ++k) {
        const uint16_t id = child.covers[k];
        const NodeIdPlace place{NodeIdPlace::Kind::kCovered, static_cast<uint32_t>(j),
                                static_cast<uint32_t>(k), child.loc};
        const auto member = members.find(id);
        if (id <= kMaxNodeId && id != child.node && member == members.end() &&
            covered.emplace(id, place).second) {
          continue;  // the common case: no path string built
        }
        const std::string id_path = PathOf(path, place);
        if (!CheckNodeId(id_path, child.loc, id)) continue;
        if (id == child.node) {
          Error(id_path, child.loc,
                "expected the node ids below " + child_name + ", not its own, got " +
                    QuoteNumber(id));
        } else if (member != members.end()) {
          if (first_repeat(id_path, child.loc)) {
            Error(id_path, child.loc,
                  "expected the node ids below " + child_name +
                      ", not a member of the job here, got " + QuoteNumber(id) + " (also " +
                      where(member->second) + ")");
          }
        } else if (first_repeat(id_path, child.loc)) {
          Error(id_path, child.loc,
                "expected each node id below one child switch, once, got " + QuoteNumber(id) +
                    " again (also " + where(covered.find(id)->second) + ")");
        }
      }
    }
    if (job.upstream) CheckUpstream(job, path, members);
    if (job.timeout_ms) CheckTimeout(path + ".timeout_ms", job.loc, *job.timeout_ms);
    if (job.ordered && job.trigger == AggTrigger::kIncremental) {
      Error(path + ".trigger", job.loc,
            "expected batch, or no trigger, for an ordered job (it reduces in member order), got "
            "\"incremental\"");
    }
    if (job.tan_member && CheckNodeId(path + ".tan_member", job.loc, *job.tan_member)) {
      const std::vector<uint16_t> ids = job.MemberNodeIds();
      const auto is_switch = [&](const ChildSwitchConfig& c) { return c.node == *job.tan_member; };
      if (std::find(ids.begin(), ids.end(), *job.tan_member) == ids.end() ||
          std::any_of(job.switches.begin(), job.switches.end(), is_switch)) {
        Error(path + ".tan_member", job.loc,
              "expected the node id of a worker of this job here (one that also runs the job's "
              "TAN), got " + QuoteNumber(*job.tan_member));
      }
    }
    if (job.tan) {
      if (job.upstream) {
        Error(path + ".tan", job.tan->loc,
              "expected no tan: a TAN is chosen by the root; this job has an upstream (" +
                  Where(path + ".upstream", job.upstream->loc) + ")");
      } else {
        CheckTan(path + ".tan", *job.tan);
      }
    }
    // Below the root, parameter_server says only that the job's root has
    // one: this switch then fixes no run label before every member has sent.
    if (job.parameter_server && !job.upstream) {
      CheckRemoteTan(job, path, "parameter_server", "parameter server", "a parameter-server job",
                     "the agg-ps --sgd that answers every chunk");
    }
    if (job.verify) {
      CheckRemoteTan(job, path, "verify", "verifying parameter node", "a job in verify mode",
                     "the agg-ps that checks every complete chunk");
    }
    if (job.mode != JobMode::kAggregate) {
      const char* mode = job.mode == JobMode::kStore ? "store" : "both";
      if (config_.aggregation.store.buffers == 0) {
        Error(path + ".mode", job.loc,
              std::string("expected aggregate, or store buffers for mode ") + mode +
                  " (aggregation.store.buffers is 0)");
      } else if (job.mode == JobMode::kStore && (job.parameter_server || job.verify || job.ordered ||
                                                 !job.switches.empty() || job.upstream)) {
        Error(path + ".mode", job.loc,
              "expected aggregate or both for a job that reduces (parameter_server, verify or "
              "ordered) or spans switches (switches, upstream), got \"store\"");
      }
    }
    if (job.placement_hint) {
      const uint32_t region = config_.aggregation.ProvisionedSlots();
      if (*job.placement_hint >= region) {
        Error(path + ".placement_hint", job.loc,
              "expected a slot index 0.." + std::to_string(region == 0 ? 0 : region - 1) +
                  " (the slots config and API jobs have: aggregation.slots - in_band.slots - "
                  "spare_slots), got " + QuoteNumber(*job.placement_hint));
      }
    }
  }

  // A parameter-server job (the root sends every chunk to the job's TAN, an
  // `agg-ps --sgd`, as first data, and the members receive what it answers)
  // or a job in verify mode (the root sends every complete chunk to it as
  // VERIFY): the job is rooted here, and its TAN (the job's tan, else
  // aggregation.tan) is a remote one. `name` is the key that asks for it.
  void CheckRemoteTan(const AggregationJobConfig& job, const std::string& path,
                      const std::string& name, const std::string& role, const std::string& what,
                      const std::string& who) {
    const std::string key = path + "." + name;
    if (job.upstream) {
      Error(key, job.loc,
            "only a root job (without upstream) has a " + role +
                ": its TAN, chosen at the root, answers every chunk; this job has an upstream (" +
                Where(path + ".upstream", job.upstream->loc) + ")");
      return;
    }
    const std::string needs = "expected a remote tan for " + what +
                              " (the job's tan, or aggregation.tan, with a strategy other than "
                              "\"self\": " + who + "), got ";
    const AggregationConfig& agg = config_.aggregation;
    if (job.tan) {
      if (job.tan->strategy == TanStrategy::kSelf) {
        Error(key, job.loc, needs + "strategy \"self\" (" + Where(path + ".tan", job.tan->loc) + ")");
      }
    } else if (!agg.tan) {
      Error(key, job.loc, needs + "none");
    } else if (agg.tan->strategy == TanStrategy::kSelf) {
      Error(key, job.loc,
            needs + "strategy \"self\" (" + Where("aggregation.tan", agg.tan->loc) + ")");
    }
  }

  // The parent switch: an address of another switch, and a node id that no
  // member of this job has.
  void CheckUpstream(const AggregationJobConfig& job, const std::string& path,
                     const NodeIdPlaces& members) {
    const UpstreamConfig& up = *job.upstream;
    const std::string up_path = path + ".upstream";
    CheckParentSwitch(up_path, up.loc, up.address, up.port, up.vlan);
    if (CheckNodeId(up_path + ".node", up.loc, up.node)) {
      if (auto member = members.find(up.node); member != members.end()) {
        Error(up_path + ".node", up.loc,
              "expected this switch's node id in the parent, not one of this job's members, got " +
                  QuoteNumber(up.node) + " (also " +
                  Where(PathOf(path, member->second), member->second.fallback) + ")");
      }
    }
  }

  // A parent switch's aggregation address at `path` (address, port, vlan).
  void CheckParentSwitch(const std::string& path, SourceLoc loc, common::Ipv4Addr address,
                         uint16_t port, uint16_t vlan) {
    CheckPeerAddress(path + ".address", loc, address, "the parent switch's aggregation address");
    // 0: resolved on the aggregation address's VLAN.
    if (vlan != 0) {
      if (!IsValidVlan(vlan)) {
        Error(path + ".vlan", loc,
              "expected 0 (the aggregation address's VLAN) or a VLAN id " +
                  std::to_string(kMinVlan) + ".." + std::to_string(kMaxVlan) + ", got " +
                  QuoteNumber(vlan));
      } else if (AllPortVlansKnown() && !AnyPortCarries(vlan)) {
        Error(path + ".vlan", loc, "expected a VLAN that some port carries, got " + QuoteNumber(vlan));
      }
    }
    if (port == 0) Error(path + ".port", loc, "expected a UDP port 1..65535, got \"0\"");
  }

  // aggregation.upstreams: parent switches, each once, at most
  // kMaxUpstreamCandidates, and an aggregation address they can answer to.
  void CheckUpstreamCandidates(const AggregationConfig& agg) {
    const std::vector<UpstreamCandidateConfig>& ups = agg.upstreams;
    if (ups.empty()) return;
    if (ups.size() > kMaxUpstreamCandidates) {
      Error("aggregation.upstreams", ups[kMaxUpstreamCandidates].loc,
            "expected at most " + std::to_string(kMaxUpstreamCandidates) + " upper switches, got " +
                std::to_string(ups.size()));
    }
    if (!agg.address) {
      Error("aggregation.upstreams", ups[0].loc,
            "expected aggregation.address to be set: the upper switches answer partials there");
    }
    for (size_t i = 0; i < ups.size(); ++i) {
      const std::string path = Index("aggregation.upstreams", i);
      CheckParentSwitch(path, ups[i].loc, ups[i].address, ups[i].port, ups[i].vlan);
      for (size_t j = 0; j < i; ++j) {
        if (ups[j].address == ups[i].address && ups[j].port == ups[i].port) {
          Error(path, ups[i].loc,
                "expected each upper switch once, got " +
                    Quote(ups[i].address.ToString() + ":" + std::to_string(ups[i].port)) +
                    " again (also " + Where(Index("aggregation.upstreams", j), ups[j].loc) + ")");
          break;
        }
      }
    }
  }

  // An address of another node (the upstream switch, a TAN): a unicast host,
  // and not one of this switch's own. Returns whether it passed.
  bool CheckPeerAddress(const std::string& path, SourceLoc fallback, common::Ipv4Addr address,
                        const std::string& what) {
    if (!IsHostAddress(common::Ipv4Prefix{address, 32})) {
      Error(path, fallback,
            "expected " + what + ", a unicast host address, got " + Quote(address.ToString()));
      return false;
    }
    const std::optional<SwitchAddress>& own = config_.aggregation.address;
    if (own && own->prefix.ip == address) {
      Error(path, fallback,
            "expected " + what + ", got this switch's own aggregation address " +
                Quote(address.ToString()) + " (" + Where("aggregation.address", own->loc) + ")");
      return false;
    }
    const std::vector<SwitchAddress>& owned = config_.switch_.addresses;
    for (size_t i = 0; i < owned.size(); ++i) {
      if (owned[i].from_aggregation || owned[i].prefix.ip != address) continue;
      Error(path, fallback,
            "expected " + what + ", got an address of this switch " + Quote(address.ToString()) +
                " (" + Where(Index("switch.addresses", i), owned[i].loc) + ")");
      return false;
    }
    return true;
  }

  void CheckTimeout(const std::string& path, SourceLoc fallback, uint32_t ms) {
    if (ms <= kMaxTimeoutMs) return;
    Error(path, fallback,
          "expected 0.." + std::to_string(kMaxTimeoutMs) + " milliseconds (0: timers off), got " +
              QuoteNumber(ms));
  }

  void CheckMilliseconds(const std::string& path, SourceLoc fallback, uint32_t ms) {
    if (ms >= 1 && ms <= kMaxTimeoutMs) return;
    Error(path, fallback,
          "expected 1.." + std::to_string(kMaxTimeoutMs) + " milliseconds, got " + QuoteNumber(ms));
  }

  static std::string StrategyName(TanStrategy strategy) {
    switch (strategy) {
      case TanStrategy::kFixed:
        return "fixed";
      case TanStrategy::kRandom:
        return "random";
      case TanStrategy::kLeastLoad:
        return "least_load";
      case TanStrategy::kFewestHops:
        return "fewest_hops";
      case TanStrategy::kSelf:
        return "self";
    }
    return "?";
  }

  void CheckTan(const std::string& path, const TanConfig& tan) {
    const std::string candidates_path = path + ".candidates";
    if (tan.strategy == TanStrategy::kSelf) {
      if (!tan.candidates.empty()) {
        Error(candidates_path, tan.loc,
              "expected no candidates with strategy \"self\" (this switch is the TAN), got " +
                  std::to_string(tan.candidates.size()));
      }
      return;
    }
    if (tan.candidates.empty()) {
      Error(Recorded(candidates_path) ? candidates_path : path, tan.loc,
            "expected 1.." + std::to_string(kMaxTanCandidates) + " candidates for strategy " +
                Quote(StrategyName(tan.strategy)) + " (or strategy \"self\"), got none");
      return;
    }
    if (tan.candidates.size() > kMaxTanCandidates) {
      Error(candidates_path, tan.loc,
            "expected at most " + std::to_string(kMaxTanCandidates) + " candidates, got " +
                std::to_string(tan.candidates.size()));
    }
    std::map<std::pair<uint32_t, uint16_t>, size_t> seen;
    for (size_t k = 0; k < tan.candidates.size(); ++k) {
      const TanCandidate& candidate = tan.candidates[k];
      const std::string item = Index(candidates_path, k);
      bool valid =
          CheckPeerAddress(item + ".address", candidate.loc, candidate.address,
                           "a TAN's address (strategy \"self\" makes this switch the TAN)");
      if (candidate.port == 0) {
        Error(item + ".port", candidate.loc, "expected a UDP port 1..65535, got \"0\"");
        valid = false;
      }
      if (candidate.hops > kMaxTanHops) {
        Error(item + ".hops", candidate.loc,
              "expected 0.." + std::to_string(kMaxTanHops) + " hops, got " +
                  QuoteNumber(candidate.hops));
      }
      if (!valid) continue;
      auto [it, inserted] = seen.emplace(std::make_pair(candidate.address.addr, candidate.port), k);
      if (!inserted) {
        Error(item, candidate.loc,
              "expected each candidate once, got " + candidate.address.ToString() + ":" +
                  std::to_string(candidate.port) + " again (also " +
                  Where(Index(candidates_path, it->second), tan.candidates[it->second].loc) + ")");
      }
    }
  }

  // Section-wide timer, bypass and TAN settings, and the switch's own address,
  // which partials need.
  void CheckTimers(const AggregationConfig& agg) {
    CheckTimeout("aggregation.timeout_ms", agg.loc, agg.timeout_ms);
    CheckMilliseconds("aggregation.give_up_ms", agg.loc, agg.give_up_ms);
    const BypassConfig& bypass = agg.bypass;
    if (bypass.entries < 1 || bypass.entries > kMaxBypassEntries) {
      Error("aggregation.bypass.entries", bypass.loc,
            "expected 1.." + std::to_string(kMaxBypassEntries) + " entries, got " +
                QuoteNumber(bypass.entries));
    }
    CheckMilliseconds("aggregation.bypass.ttl_ms", bypass.loc, bypass.ttl_ms);
    if (agg.tan) CheckTan("aggregation.tan", *agg.tan);

    if (agg.address) return;
    const std::string why =
        " (a switch sends partials, and first data to the TAN, from its own address)";
    bool reported = false;
    for (size_t i = 0; i < agg.jobs.size(); ++i) {
      const AggregationJobConfig& job = agg.jobs[i];
      const std::string path = Index("aggregation.jobs", i);
      const std::string name = "job " + std::to_string(job.id);
      const uint32_t timeout = job.timeout_ms.value_or(agg.timeout_ms);
      if (job.upstream) {
        Error(path + ".upstream", job.upstream->loc,
              "expected aggregation.address to be set: " + name + " has an upstream" + why);
      } else if (timeout > 0) {
        Error(job.timeout_ms ? path + ".timeout_ms" : path, job.loc,
              "expected aggregation.address to be set: " + name + " has timers on (timeout_ms " +
                  std::to_string(timeout) +
                  (job.timeout_ms ? "" : ", from aggregation.timeout_ms") + ")" + why);
      } else {
        continue;
      }
      reported = true;
    }
    // Jobs that register in band get the section's timers too.
    if (!reported && agg.timeout_ms > 0 && agg.in_band_registration) {
      Error("aggregation.timeout_ms", agg.loc,
            "expected aggregation.address to be set: timers are on for the jobs that register in "
            "band (aggregation.in_band_registration)" +
                why);
    }
  }

  void CheckAggregationAddress(const SwitchAddress& address) {
    const std::string path = "aggregation.address";
    // The map form names the address under "address"; point there.
    std::string address_path = path + ".address";
    if (config_.source_locs.find(address_path) == config_.source_locs.end()) address_path = path;
    if (!IsHostAddress(address.prefix)) {
      Error(address_path, address.loc,
            "expected a unicast host address, got " + Quote(address.prefix.ip.ToString()));
      return;
    }
    if (address.vlan != 0) {
      if (!CheckVlan(path + ".vlan", address.loc, address.vlan)) return;
      if (AllPortVlansKnown() && !AnyPortCarries(address.vlan)) {
        Error(path + ".vlan", address.loc,
              "expected a VLAN that some port carries, got " + QuoteNumber(address.vlan));
        return;
      }
    }
    // The switch answers ARP for it as one of its addresses: the entry
    // ApplyDerivedDefaults() added, or one the user listed, which must then
    // cover the aggregation address's VLAN.
    const std::vector<SwitchAddress>& owned = config_.switch_.addresses;
    for (size_t i = 0; i < owned.size(); ++i) {
      const SwitchAddress& other = owned[i];
      if (other.prefix.ip != address.prefix.ip) continue;
      if (other.from_aggregation || other.vlan == 0 || other.vlan == address.vlan) return;
      Error(address_path, address.loc,
            "expected " + Index("switch.addresses", i) + ", which has the same address on VLAN " +
                std::to_string(other.vlan) + " only, to cover " +
                (address.vlan == 0 ? std::string("every VLAN")
                                   : "VLAN " + std::to_string(address.vlan)) +
                "; give the aggregation address that vlan, or list it once on every VLAN");
      return;
    }
    Error(address_path, address.loc,
          "expected room for the aggregation address in switch.addresses (at most " +
              std::to_string(kMaxSwitchAddresses) + " addresses, this one included), got " +
              std::to_string(owned.size()) + " others");
  }

  const Config& config_;
  std::vector<ConfigError>& errors_;
  std::optional<std::vector<unsigned>> lcores_;
  std::vector<bool> name_ok_;   // per port: the name is valid and not a repeat
  std::vector<bool> vlans_ok_;  // per port: every VLAN id is in range
};

}  // namespace

std::string ConfigError::Format(const std::string& source_name) const {
  std::string out =
      source_name + ":" + std::to_string(loc.line) + ":" + std::to_string(loc.column) + ": ";
  if (!path.empty()) out += path + ": ";
  return out + message;
}

std::vector<uint16_t> AggregationJobConfig::MemberNodeIds() const {
  std::vector<uint16_t> ids;
  if (node_ids.empty() && switches.empty()) {
    ids.reserve(members);
    for (unsigned id = 0; id < members; ++id) ids.push_back(static_cast<uint16_t>(id));
    return ids;
  }
  ids.reserve(node_ids.size() + switches.size());
  ids.insert(ids.end(), node_ids.begin(), node_ids.end());
  for (const ChildSwitchConfig& child : switches) ids.push_back(child.node);
  return ids;
}

bool PortConfig::Carries(uint16_t vlan) const {
  if (mode == VlanMode::kAccess) return vlan == access_vlan;
  if (native_vlan && *native_vlan == vlan) return true;
  return std::find(trunk_vlans.begin(), trunk_vlans.end(), vlan) != trunk_vlans.end();
}

const PortConfig* Config::FindPort(const std::string& name) const {
  const int index = PortIndex(name);
  return index < 0 ? nullptr : &ports[index];
}

int Config::PortIndex(const std::string& name) const {
  for (size_t i = 0; i < ports.size(); ++i) {
    if (ports[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

uint16_t Config::RxQueueCount(const std::string& port) const {
  unsigned count = 0;
  for (const WorkerConfig& worker : workers) {
    for (const RxQueueRef& rx : worker.rx) {
      if (rx.port == port) count = std::max(count, rx.queue + 1u);
    }
  }
  return static_cast<uint16_t>(std::min<unsigned>(count, UINT16_MAX));
}

SourceLoc Config::LocOf(std::string_view path, SourceLoc fallback) const {
  if (auto it = source_locs.find(path); it != source_locs.end()) return it->second;
  // "list[k]" of an expanding list: the last item that starts at or before k.
  const size_t open = path.rfind('[');
  if (open == std::string_view::npos || path.back() != ']') return fallback;
  const auto items = item_locs.find(path.substr(0, open));
  if (items == item_locs.end()) return fallback;
  size_t k = 0;
  const std::string_view digits = path.substr(open + 1, path.size() - open - 2);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), k);
  if (ec != std::errc() || end != digits.data() + digits.size()) return fallback;
  const auto& starts = items->second;
  auto after = std::upper_bound(starts.begin(), starts.end(), k,
                                [](size_t index, const auto& item) { return index < item.first; });
  return after == starts.begin() ? fallback : std::prev(after)->second;
}

std::optional<std::vector<unsigned>> ParseLcoreList(std::string_view lcores) {
  std::vector<unsigned> ids;
  std::string_view text = lcores;
  while (true) {
    if (!ParseLcoreSet(text, ids)) return std::nullopt;
    if (!text.empty() && text[0] == '@') {
      // The CPU set the lcores run on; it is checked for syntax and then ignored.
      text.remove_prefix(1);
      std::vector<unsigned> cpus;
      if (!ParseLcoreSet(text, cpus)) return std::nullopt;
    }
    if (text.empty()) break;
    if (text[0] != ',') return std::nullopt;
    text.remove_prefix(1);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

namespace {

void AddAggregationAddress(Config& config) {
  const std::optional<SwitchAddress>& address = config.aggregation.address;
  if (!address) return;
  std::vector<SwitchAddress>& owned = config.switch_.addresses;
  for (const SwitchAddress& other : owned) {
    if (other.prefix.ip == address->prefix.ip) return;
  }
  if (owned.size() >= kMaxSwitchAddresses) return;
  SwitchAddress derived = *address;
  derived.prefix.length = 32;
  derived.from_aggregation = true;
  owned.push_back(derived);
}

}  // namespace

void ApplyDerivedDefaults(Config& config) {
  AddAggregationAddress(config);
  if (!config.workers.empty()) return;
  const auto lcores = ParseLcoreList(config.eal.lcores);
  if (!lcores) return;
  for (unsigned lcore : *lcores) {
    if (lcore == config.eal.main_lcore) continue;
    WorkerConfig worker;
    worker.lcore = lcore;
    for (size_t i = 0; i < config.ports.size(); ++i) {
      // A repeated name is one port to poll (and an error for Validate()).
      const std::string& name = config.ports[i].name;
      if (config.PortIndex(name) == static_cast<int>(i)) worker.rx.push_back({name, 0, {}});
    }
    config.workers.push_back(std::move(worker));
    return;
  }
}

uint32_t AggregationConfig::InBandSlots() const {
  if (!in_band_registration) return 0;
  return in_band.slots.value_or(slots / 4);
}

uint32_t AggregationConfig::ProvisionedSlots() const {
  return slots - std::min(slots, InBandSlots() + SpareSlots());
}

uint32_t AggregationConfig::SpareSlots() const {
  return spare_slots.value_or(std::min<uint32_t>(kMaxSpareSlots, slots / 16));
}

uint32_t AggregationConfig::SlotsPerJob() const {
  const uint32_t taken = InBandSlots() + SpareSlots();
  return slots_per_job.value_or(std::min<uint32_t>(1024, slots - std::min(slots, taken)));
}

uint32_t AggregationConfig::InBandSlotsPerJob() const {
  return in_band.slots_per_job.value_or(std::min<uint32_t>(256, InBandSlots()));
}

uint32_t AggregationConfig::InBandHeldTotal() const {
  return in_band.held_total.value_or(hold.buffers / 4);
}

uint32_t AggregationConfig::HoldPerJob() const {
  return hold.per_job.value_or(std::min<uint32_t>(4096, hold.buffers));
}

uint32_t AggregationConfig::InBandHeldPerJob() const {
  return in_band.held_per_job.value_or(std::min<uint32_t>(512, InBandHeldTotal()));
}

uint32_t AggregationConfig::InBandMaxJobs() const {
  return in_band.max_jobs.value_or(std::max<uint32_t>(1, max_jobs / 4));
}

bool Validate(const Config& config, std::vector<ConfigError>& errors) {
  const size_t before = errors.size();
  Validator(config, errors).Run();
  return errors.size() == before;
}

}  // namespace aggswitch::config
