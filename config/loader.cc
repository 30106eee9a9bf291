#include "config/loader.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "common/job_key.h"

namespace aggswitch::config {
namespace {

// Values the loader stores when it could not read a field. Each is out of range,
// so Validate() flags the same key path and LoadConfigText() drops that second
// report; and cross-checks skip them, so one mistake yields one error.
constexpr uint16_t kUnreadVlan = std::numeric_limits<uint16_t>::max();
constexpr uint16_t kUnreadQueue = std::numeric_limits<uint16_t>::max();
constexpr unsigned kUnreadLcore = std::numeric_limits<unsigned>::max();
constexpr uint16_t kUnreadNodeId = std::numeric_limits<uint16_t>::max();  // reserved

constexpr size_t kMaxQuotedChars = 64;
// Items of any list (ports, jobs, static MACs, ...): as many as the largest
// table a list fills, aggregation.max_jobs.
constexpr size_t kMaxListItems = kMaxAggregationJobs;
// What the loader reads of a file at most.
constexpr size_t kMaxConfigBytes = size_t{16} << 20;

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text.substr(0, kMaxQuotedChars)) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  if (text.size() > kMaxQuotedChars) out += "...";
  return out + "\"";
}

SourceLoc LocOf(const YAML::Mark& mark) {
  if (mark.is_null()) return {};
  return {mark.line + 1, mark.column + 1};
}

SourceLoc LocOf(const YAML::Node& node) {
  return node.IsDefined() ? LocOf(node.Mark()) : SourceLoc{};
}

// What a node is, for "got ..." in messages.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Null:
      return "an empty value";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

std::string KeyList(const std::vector<std::string_view>& keys) {
  std::string out;
  for (std::string_view key : keys) {
    if (!out.empty()) out += ", ";
    out += key;
  }
  return out;
}

std::string VlanRangeText() {
  return "a VLAN id " + std::to_string(kMinVlan) + ".." + std::to_string(kMaxVlan);
}

// One key of a YAML map and how to load its value (given the value and its key path).
struct Field {
  std::string_view key;
  std::function<void(const YAML::Node&, const std::string&)> load;
  bool required = false;
};

// Walks the YAML tree once, filling `config` and appending every shape, type and
// syntax error it meets. Range and cross-field checks are left to Validate().
class Loader {
 public:
  Loader(Config& config, std::vector<ConfigError>& errors) : config_(config), errors_(errors) {}

  void LoadRoot(const YAML::Node& root) {
    if (!root.IsMap() && !root.IsNull()) {
      Error("", root,
            "expected a map of sections (eal, switch, ports, workers, mac_table, mempool, http, "
            "aggregation, telemetry), got " +
                Describe(root));
      return;
    }
    LoadMap(
        root, "",
        {
            {"eal", [this](const YAML::Node& n, const std::string& p) { LoadEal(n, p); }},
            {"switch", [this](const YAML::Node& n, const std::string& p) { LoadSwitch(n, p); }},
            {"ports", [this](const YAML::Node& n, const std::string& p) { LoadPorts(n, p); }, true},
            {"workers", [this](const YAML::Node& n, const std::string& p) { LoadWorkers(n, p); }},
            {"mac_table",
             [this](const YAML::Node& n, const std::string& p) { LoadMacTable(n, p); }},
            {"mempool", [this](const YAML::Node& n, const std::string& p) { LoadMempool(n, p); }},
            {"http", [this](const YAML::Node& n, const std::string& p) { LoadHttp(n, p); }},
            {"aggregation",
             [this](const YAML::Node& n, const std::string& p) { LoadAggregation(n, p); }},
            {"telemetry",
             [this](const YAML::Node& n, const std::string& p) { LoadTelemetry(n, p); }},
        });
  }

 private:
  // An empty value has no position of its own (its mark is the next token), so
  // its error points at the key, remembered under `path` by LoadMap().
  void Error(std::string path, const YAML::Node& at, std::string message) {
    SourceLoc loc = LocOf(at);
    if (at.IsNull()) loc = config_.LocOf(path, loc);
    errors_.push_back(ConfigError{std::move(path), loc, std::move(message)});
  }

  // Where the item at `path` starts; for an empty value, where its key is.
  SourceLoc ItemLoc(const YAML::Node& node, const std::string& path) const {
    const SourceLoc loc = LocOf(node);
    return node.IsNull() ? config_.LocOf(path, loc) : loc;
  }

  void Remember(const std::string& path, const YAML::Node& node) {
    config_.source_locs[path] = LocOf(node);
  }

  // Loads a map whose keys are `fields`. An empty value counts as an empty map.
  // Reports unknown, repeated and missing required keys. Returns false (after
  // reporting) when the node is not a map.
  bool LoadMap(const YAML::Node& node, const std::string& path, const std::vector<Field>& fields) {
    if (!node.IsMap() && !node.IsNull()) {
      Error(path, node, "expected a map, got " + Describe(node));
      return false;
    }
    std::set<std::string_view> seen;
    if (node.IsMap()) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        // Copies: the iterator hands out a temporary proxy.
        const YAML::Node key = it->first;
        const YAML::Node value = it->second;
        if (!key.IsScalar()) {
          Error(path, key, "expected a key name, got " + Describe(key));
          continue;
        }
        const std::string& name = key.Scalar();
        const std::string key_path = Join(path, name);
        auto field = std::find_if(fields.begin(), fields.end(),
                                  [&name](const Field& f) { return f.key == name; });
        if (field == fields.end()) {
          std::vector<std::string_view> expected;
          for (const Field& f : fields) expected.push_back(f.key);
          Error(key_path, key,
                "unknown key " + Quote(name) + "; expected one of: " + KeyList(expected));
          continue;
        }
        if (!seen.insert(field->key).second) {
          Error(key_path, key, "expected each key once, got " + Quote(name) + " again");
          continue;
        }
        Remember(key_path, value.IsNull() ? key : value);
        field->load(value, key_path);
      }
    }
    for (const Field& f : fields) {
      if (f.required && seen.count(f.key) == 0) {
        const std::string key_path = Join(path, f.key);
        const SourceLoc loc = ItemLoc(node, path);
        errors_.push_back(ConfigError{key_path, loc, "missing required key " + Quote(f.key)});
        config_.source_locs[key_path] = loc;
      }
    }
    return true;
  }

  // A list item that must be a map; unlike a section, it may not be empty.
  bool IsMapItem(const YAML::Node& node, const std::string& path) {
    if (node.IsMap()) return true;
    Error(path, node, "expected a map, got " + Describe(node));
    return false;
  }

  // Calls load_item(item, item_path) for each item. An empty value counts as an
  // empty list. Returns false (after reporting) when the node is not a list,
  // or has more than kMaxListItems items (no key takes as many; YAML aliases
  // make a long list out of a short file).
  template <typename Fn>
  bool LoadList(const YAML::Node& node, const std::string& path, Fn&& load_item) {
    if (node.IsNull()) return true;
    if (!node.IsSequence()) {
      Error(path, node, "expected a list, got " + Describe(node));
      return false;
    }
    if (node.size() > kMaxListItems) {
      Error(path, node,
            "expected at most " + std::to_string(kMaxListItems) + " items, got " +
                std::to_string(node.size()));
      return false;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node item = node[i];
      const std::string item_path = Index(path, i);
      // An empty item has no position of its own; the list's is the nearest known.
      if (item.IsNull()) {
        config_.source_locs[item_path] = config_.LocOf(path, LocOf(node));
      } else {
        Remember(item_path, item);
      }
      load_item(item, item_path);
    }
    return true;
  }

  // On failure `out` becomes empty: every required string is invalid when empty.
  bool ReadString(const YAML::Node& node, const std::string& path, std::string& out) {
    if (!node.IsScalar()) {
      Error(path, node, "expected a string, got " + Describe(node));
      out.clear();
      return false;
    }
    out = node.Scalar();
    return true;
  }

  // Reads a decimal unsigned integer that fits T. On failure `out` becomes
  // `unread` when given and is left alone otherwise. `range` describes the valid
  // values for the message about a number too large for T.
  template <typename T>
  bool ReadUnsigned(const YAML::Node& node, const std::string& path, T& out,
                    std::optional<T> unread = std::nullopt, std::string range = {}) {
    auto fail = [&](std::string message) {
      Error(path, node, std::move(message));
      if (unread) out = *unread;
      return false;
    };
    if (!node.IsScalar()) return fail("expected an unsigned integer, got " + Describe(node));
    const std::string& text = node.Scalar();
    uint64_t value = 0;
    auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    const bool digits = !text.empty() && next == text.data() + text.size();
    if (ec == std::errc::invalid_argument || !digits) {
      return fail("expected an unsigned integer, got " + Quote(text));
    }
    if (ec == std::errc::result_out_of_range || value > std::numeric_limits<T>::max()) {
      if (range.empty()) {
        range = "an unsigned integer up to " + std::to_string(std::numeric_limits<T>::max());
      }
      return fail("expected " + range + ", got " + Quote(text));
    }
    out = static_cast<T>(value);
    return true;
  }

  bool ReadVlan(const YAML::Node& node, const std::string& path, uint16_t& out) {
    return ReadUnsigned<uint16_t>(node, path, out, kUnreadVlan, VlanRangeText());
  }

  bool ReadBool(const YAML::Node& node, const std::string& path, bool& out) {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      Error(path, node, "expected true or false, got " + Describe(node));
      return false;
    }
    out = value;
    return true;
  }

  // On failure `out` is left alone.
  bool ReadMac(const YAML::Node& node, const std::string& path, common::MacAddr& out) {
    std::optional<common::MacAddr> mac;
    if (node.IsScalar()) mac = common::MacAddr::Parse(node.Scalar());
    if (!mac) {
      Error(path, node, "expected a MAC address xx:xx:xx:xx:xx:xx, got " + Describe(node));
      return false;
    }
    out = *mac;
    return true;
  }

  bool ReadPrefix(const YAML::Node& node, const std::string& path, common::Ipv4Prefix& out) {
    std::optional<common::Ipv4Prefix> prefix;
    if (node.IsScalar()) prefix = common::Ipv4Prefix::Parse(node.Scalar());
    if (!prefix) {
      Error(path, node,
            "expected an IPv4 address \"a.b.c.d\" or \"a.b.c.d/len\", got " + Describe(node));
      return false;
    }
    out = *prefix;
    return true;
  }

  void LoadEal(const YAML::Node& node, const std::string& path) {
    EalConfig& eal = config_.eal;
    eal.loc = ItemLoc(node, path);
    const bool ok =
        LoadMap(node, path,
                {
                    {"lcores", [&](auto& n, auto& p) { ReadString(n, p, eal.lcores); }},
                    {"main_lcore", [&](auto& n, auto& p) { ReadUnsigned(n, p, eal.main_lcore); }},
                    {"memory_mb", [&](auto& n, auto& p) { ReadUnsigned(n, p, eal.memory_mb); }},
                    {"hugepages", [&](auto& n, auto& p) { ReadBool(n, p, eal.hugepages); }},
                    {"pci", [&](auto& n, auto& p) { ReadBool(n, p, eal.pci); }},
                    {"file_prefix", [&](auto& n, auto& p) { ReadString(n, p, eal.file_prefix); }},
                    {"telemetry", [&](auto& n, auto& p) { ReadBool(n, p, eal.telemetry); }},
                    {"idle_sleep_us",
                     [&](auto& n, auto& p) { ReadUnsigned(n, p, eal.idle_sleep_us); }},
                    {"args",
                     [&](auto& n, auto& p) {
                       LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                         ReadString(item, item_path, eal.args.emplace_back());
                       });
                     }},
                });
    // Without the section the lcore set is unknown: skip the checks that need it
    // rather than judge the workers against the default.
    if (!ok) eal.lcores.clear();
  }

  void LoadSwitch(const YAML::Node& node, const std::string& path) {
    SwitchConfig& sw = config_.switch_;
    sw.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"name", [&](auto& n, auto& p) { ReadString(n, p, sw.name); }},
                {"mac", [&](auto& n, auto& p) { ReadMac(n, p, sw.mac); }},
                {"addresses",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     LoadSwitchAddress(item, item_path, sw.addresses.emplace_back());
                   });
                 }},
            });
  }

  // "a.b.c.d[/len]" (every VLAN) or {address: "a.b.c.d[/len]", vlan: N}.
  void LoadSwitchAddress(const YAML::Node& node, const std::string& path, SwitchAddress& out) {
    out.loc = ItemLoc(node, path);
    if (!node.IsMap()) {
      if (node.IsScalar()) {
        ReadPrefix(node, path, out.prefix);
      } else {
        Error(path, node,
              "expected \"a.b.c.d[/len]\" or a map {address, vlan}, got " + Describe(node));
      }
      return;
    }
    LoadMap(node, path,
            {
                {"address", [&](auto& n, auto& p) { ReadPrefix(n, p, out.prefix); }, true},
                {"vlan", [&](auto& n, auto& p) { ReadVlan(n, p, out.vlan); }},
            });
  }

  void LoadPorts(const YAML::Node& node, const std::string& path) {
    LoadList(node, path, [&](const YAML::Node& item, const std::string& item_path) {
      LoadPort(item, item_path, config_.ports.emplace_back());
    });
  }

  void LoadPort(const YAML::Node& node, const std::string& path, PortConfig& port) {
    port.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    bool has_access = false;
    // Copied, not assigned: YAML::Node assignment rewrites the referenced node.
    std::optional<YAML::Node> trunk;
    LoadMap(node, path,
            {
                {"name", [&](auto& n, auto& p) { ReadString(n, p, port.name); }, true},
                {"devargs", [&](auto& n, auto& p) { ReadString(n, p, port.devargs); }, true},
                {"access",
                 [&](auto& n, auto& p) {
                   has_access = true;
                   ReadVlan(n, p, port.access_vlan);
                 }},
                {"trunk",
                 [&](auto& n, auto& p) {
                   trunk.emplace(n);
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     ReadVlan(item, item_path, port.trunk_vlans.emplace_back());
                   });
                 }},
                {"native",
                 [&](auto& n, auto& p) {
                   uint16_t vlan = 0;
                   ReadVlan(n, p, vlan);
                   port.native_vlan = vlan;
                 }},
                {"rx_descriptors",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, port.rx_descriptors, {}, DescriptorRangeText());
                 }},
                {"tx_descriptors",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, port.tx_descriptors, {}, DescriptorRangeText());
                 }},
                {"mtu",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(
                       n, p, port.mtu, {},
                       "an MTU " + std::to_string(kMinMtu) + ".." + std::to_string(kMaxMtu));
                 }},
                {"faults", [&](auto& n, auto& p) { LoadFaults(n, p, port.faults.emplace()); }},
                {"role",
                 [&](auto& n, auto& p) {
                   ReadEnum<PortRole>(n, p, {{"edge", PortRole::kEdge}, {"fabric", PortRole::kFabric}},
                                      port.role);
                 }},
                {"group", [&](auto& n, auto& p) { ReadString(n, p, port.group); }},
            });
    if (has_access && trunk) {
      Error(Join(path, "trunk"), *trunk,
            "expected exactly one of \"access\" or \"trunk\", got both");
    }
    port.mode = trunk ? VlanMode::kTrunk : VlanMode::kAccess;
  }

  void LoadFaults(const YAML::Node& node, const std::string& path, FaultConfig& out) {
    out.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    LoadMap(node, path,
            {
                {"loss", [&](auto& n, auto& p) { ReadProbability(n, p, out.loss); }},
                {"duplicate", [&](auto& n, auto& p) { ReadProbability(n, p, out.duplicate); }},
                {"reorder", [&](auto& n, auto& p) { ReadProbability(n, p, out.reorder); }},
                {"delay_us",
                 [&](auto& n, auto& p) {
                   if (ReadUnsigned(n, p, out.delay_us, {}, "microseconds, 0..1000000") &&
                       out.delay_us > kMaxFaultDelayUs) {
                     Error(p, n, "expected microseconds, 0..1000000, got " + Describe(n));
                   }
                 }},
                {"direction",
                 [&](auto& n, auto& p) {
                   const std::string text = n.IsScalar() ? n.Scalar() : std::string();
                   if (text == "rx") {
                     out.direction = FaultDirection::kRx;
                   } else if (text == "tx") {
                     out.direction = FaultDirection::kTx;
                   } else if (text == "both") {
                     out.direction = FaultDirection::kBoth;
                   } else {
                     Error(p, n, "expected rx, tx or both, got " + Describe(n));
                   }
                 }},
                {"seed", [&](auto& n, auto& p) { ReadUnsigned(n, p, out.seed); }},
            });
    if (out.loss + out.reorder > 1) {
      Error(path, node,
            "expected loss + reorder <= 1 (one draw decides both), got " +
                std::to_string(out.loss + out.reorder));
    }
  }

  // A probability: a number from 0 to 1. On failure `out` is left alone.
  bool ReadProbability(const YAML::Node& node, const std::string& path, double& out) {
    double value = -1;
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || next != text.data() + text.size()) value = -1;
    }
    if (!(value >= 0 && value <= 1)) {
      Error(path, node, "expected a probability from 0 to 1, got " + Describe(node));
      return false;
    }
    out = value;
    return true;
  }

  static std::string DescriptorRangeText() {
    return "a power of two " + std::to_string(kMinDescriptors) + ".." +
           std::to_string(kMaxDescriptors);
  }

  void LoadWorkers(const YAML::Node& node, const std::string& path) {
    LoadList(node, path, [&](const YAML::Node& item, const std::string& item_path) {
      WorkerConfig& worker = config_.workers.emplace_back();
      worker.loc = ItemLoc(item, item_path);
      // Replaced when "lcore" is read; a missing one must not pass for lcore 1.
      worker.lcore = kUnreadLcore;
      bool rx_read = false;
      if (IsMapItem(item, item_path)) {
        LoadMap(
            item, item_path,
            {
                {"lcore",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, worker.lcore, {kUnreadLcore}); }, true},
                {"rx",
                 [&](auto& n, auto& p) {
                   rx_read = LoadList(n, p, [&](const YAML::Node& rx, const std::string& rx_path) {
                     LoadRxQueueRef(rx, rx_path, worker.rx.emplace_back());
                   });
                 },
                 true},
            });
      }
      // The queues of this worker are unknown. A stand-in naming no port tells
      // Validate() not to call the ports it was meant to poll unpolled.
      if (!rx_read) worker.rx.push_back(RxQueueRef{"", kUnreadQueue, worker.loc});
    });
  }

  // "port" (queue 0), "port:queue" or {port, queue}. Every mistake in one item is
  // reported on the item's path, where Validate() reports the item too.
  void LoadRxQueueRef(const YAML::Node& node, const std::string& path, RxQueueRef& rx) {
    rx.loc = ItemLoc(node, path);
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      const size_t colon = text.rfind(':');
      rx.port = text.substr(0, colon);
      if (colon == std::string::npos) return;
      const std::string queue = text.substr(colon + 1);
      unsigned value = 0;
      auto [next, ec] = std::from_chars(queue.data(), queue.data() + queue.size(), value);
      if (queue.empty() || ec != std::errc() || next != queue.data() + queue.size() ||
          value > std::numeric_limits<uint16_t>::max()) {
        Error(path, node,
              "expected \"port\" or \"port:queue\" with an unsigned queue number, got " +
                  Quote(text));
        rx.queue = kUnreadQueue;
        return;
      }
      rx.queue = static_cast<uint16_t>(value);
      return;
    }
    if (!node.IsMap()) {
      Error(path, node,
            "expected \"port\", \"port:queue\" or a map {port, queue}, got " + Describe(node));
      return;
    }
    bool has_port = false;
    LoadMap(node, path,
            {
                {"port",
                 [&](auto& n, auto&) {
                   has_port = true;
                   ReadString(n, path, rx.port);
                 }},
                {"queue", [&](auto& n, auto&) { ReadUnsigned(n, path, rx.queue, {kUnreadQueue}); }},
            });
    if (!has_port) Error(path, node, "missing required key \"port\"");
  }

  void LoadMacTable(const YAML::Node& node, const std::string& path) {
    MacTableConfig& table = config_.mac_table;
    table.loc = ItemLoc(node, path);
    LoadMap(
        node, path,
        {
            {"size",
             [&](auto& n, auto& p) {
               ReadUnsigned(n, p, table.size, {},
                            "a table size " + std::to_string(kMinMacTableSize) + ".." +
                                std::to_string(kMaxMacTableSize));
             }},
            {"aging_seconds",
             [&](auto& n, auto& p) {
               ReadUnsigned(n, p, table.aging_seconds, {},
                            "0.." + std::to_string(kMaxAgingSeconds) + " seconds");
             }},
            {"static",
             [&](auto& n, auto& p) {
               LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                 StaticMacEntry& entry = table.static_entries.emplace_back();
                 entry.loc = ItemLoc(item, item_path);
                 if (!IsMapItem(item, item_path)) return;
                 LoadMap(
                     item, item_path,
                     {
                         {"mac", [&](auto& v, auto& vp) { ReadMac(v, vp, entry.mac); }, true},
                         {"vlan", [&](auto& v, auto& vp) { ReadVlan(v, vp, entry.vlan); }},
                         {"port", [&](auto& v, auto& vp) { ReadString(v, vp, entry.port); }, true},
                     });
               });
             }},
        });
  }

  void LoadMempool(const YAML::Node& node, const std::string& path) {
    MempoolConfig& pool = config_.mempool;
    pool.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"mbufs",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(
                       n, p, pool.mbufs, {},
                       std::to_string(kMinMbufs) + ".." + std::to_string(kMaxMbufs) + " mbufs");
                 }},
                {"cache",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, pool.cache, {},
                                "a cache size 0.." + std::to_string(kMaxMempoolCache));
                 }},
            });
  }

  void LoadHttp(const YAML::Node& node, const std::string& path) {
    config_.http.loc = ItemLoc(node, path);
    HttpConfig& http = config_.http;
    LoadMap(node, path,
            {
                {"listen", [&](auto& n, auto& p) { ReadString(n, p, http.listen); }},
                {"token_file", [&](auto& n, auto& p) { ReadString(n, p, http.token_file); }},
                {"protect_reads", [&](auto& n, auto& p) { ReadBool(n, p, http.protect_reads); }},
                {"allowed_hosts",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     ReadString(item, item_path, http.allowed_hosts.emplace_back());
                   });
                 }},
                {"threads",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, http.threads, {},
                                "1.." + std::to_string(kMaxHttpThreads) + " threads");
                 }},
                {"request_timeout_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, http.request_timeout_ms, {},
                                std::to_string(kMinHttpTimeoutMs) + ".." +
                                    std::to_string(kMaxHttpTimeoutMs) + " milliseconds");
                 }},
            });
  }

  // "a.b.c.d" only: the aggregation address is one host, not a subnet.
  bool ReadHostAddress(const YAML::Node& node, const std::string& path, common::Ipv4Prefix& out) {
    std::optional<common::Ipv4Addr> ip;
    if (node.IsScalar()) ip = common::Ipv4Addr::Parse(node.Scalar());
    if (!ip) {
      Error(path, node, "expected an IPv4 host address \"a.b.c.d\", got " + Describe(node));
      return false;
    }
    out = common::Ipv4Prefix{*ip, 32};
    return true;
  }

  bool ReadJobKey(const YAML::Node& node, const std::string& path, uint64_t& out) {
    const std::optional<uint64_t> key =
        node.IsScalar() ? common::ParseJobKey(node.Scalar()) : std::nullopt;
    if (!key) {
      Error(path, node, std::string("expected ") + common::kJobKeyExpected + ", got " + Describe(node));
      return false;
    }
    out = *key;
    return true;
  }

  void LoadAggregation(const YAML::Node& node, const std::string& path) {
    AggregationConfig& agg = config_.aggregation;
    agg.enabled = true;  // the section's presence turns the aggregation path on
    agg.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"address",
                 [&](auto& n, auto& p) { LoadAggregationAddress(n, p, agg.address.emplace()); }},
                {"udp_port",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.udp_port, {}, "a UDP port 1..65535");
                 }},
                {"in_band_registration",
                 [&](auto& n, auto& p) { ReadBool(n, p, agg.in_band_registration); }},
                {"slots",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.slots, {},
                                "a power of two " + std::to_string(kMinAggregationSlots) + ".." +
                                    std::to_string(kMaxAggregationSlots));
                 }},
                {"max_fan_in",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.max_fan_in, {},
                                "1.." + std::to_string(kMaxAggregationFanIn) + " members");
                 }},
                {"max_jobs",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.max_jobs, {},
                                "1.." + std::to_string(kMaxAggregationJobs) + " jobs");
                 }},
                {"stale_slot_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.stale_slot_ms, {}, "milliseconds, 1..4294967295");
                   if (agg.stale_slot_ms == 0) Error(p, n, "expected milliseconds, at least 1, got 0");
                 }},
                {"jobs",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     LoadAggregationJob(item, item_path, agg.jobs.emplace_back());
                   });
                 }},
                {"timeout_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.timeout_ms, {}, TimeoutRangeText());
                 }},
                {"trigger", [&](auto& n, auto& p) { ReadTrigger(n, p, agg.trigger); }},
                {"give_up_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.give_up_ms, {}, MillisecondsRangeText());
                 }},
                {"bypass", [&](auto& n, auto& p) { LoadBypass(n, p, agg.bypass); }},
                {"tan", [&](auto& n, auto& p) { LoadTan(n, p, agg.tan.emplace()); }},
                {"upstreams",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     LoadUpstreamCandidate(item, item_path, agg.upstreams.emplace_back());
                   });
                 }},
                {"slot_secret", [&](auto& n, auto& p) { ReadString(n, p, agg.slot_secret); }},
                {"placement",
                 [&](auto& n, auto& p) {
                   ReadEnum<SlotPlacement>(n, p,
                                           {{"hash", SlotPlacement::kHash},
                                            {"round_robin", SlotPlacement::kRoundRobin},
                                            {"random", SlotPlacement::kRandom}},
                                           agg.placement);
                 }},
                {"slots_per_job",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.slots_per_job.emplace(), {}, "chunks");
                 }},
                {"spare_slots",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.spare_slots.emplace(), {}, "slots");
                 }},
                {"hold", [&](auto& n, auto& p) { LoadHold(n, p, agg.hold); }},
                {"store", [&](auto& n, auto& p) { LoadStore(n, p, agg.store); }},
                {"member_rebind_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.member_rebind_ms, {}, "milliseconds (0: only the API)");
                 }},
                {"restart_grace_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, agg.restart_grace_ms, {}, "milliseconds (0: none)");
                 }},
                {"in_band", [&](auto& n, auto& p) { LoadInBand(n, p, agg.in_band); }},
                {"state_file",
                 [&](auto& n, auto& p) {
                   if (ReadString(n, p, agg.state_file) && agg.state_file.empty()) {
                     Error(p, n, "expected a file path (leave the key out to keep no state)");
                   }
                 }},
            });
  }

  void LoadHold(const YAML::Node& node, const std::string& path, HoldConfig& out) {
    out.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"buffers", [&](auto& n, auto& p) { ReadUnsigned(n, p, out.buffers, {}, "buffers"); }},
                {"per_job",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.per_job.emplace(), {}, "buffers"); }},
            });
  }

  void LoadStore(const YAML::Node& node, const std::string& path, StoreConfig& out) {
    out.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"buffers", [&](auto& n, auto& p) { ReadUnsigned(n, p, out.buffers, {}, "buffers"); }},
                {"per_job",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.per_job.emplace(), {}, "buffers"); }},
                {"final_timeout_ms",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.final_timeout_ms, {}, "milliseconds"); }},
            });
  }

  // {per_second, burst}.
  void LoadRate(const YAML::Node& node, const std::string& path, RateConfig& out) {
    out.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"per_second",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.per_second, {}, "a rate"); }},
                {"burst", [&](auto& n, auto& p) { ReadUnsigned(n, p, out.burst, {}, "a count"); }},
            });
  }

  void LoadInBand(const YAML::Node& node, const std::string& path, InBandConfig& out) {
    out.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"slots", [&](auto& n, auto& p) { ReadUnsigned(n, p, out.slots.emplace(), {}, "slots"); }},
                {"slots_per_job",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, out.slots_per_job.emplace(), {}, "chunks");
                 }},
                {"held_per_job",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, out.held_per_job.emplace(), {}, "buffers");
                 }},
                {"held_total",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.held_total.emplace(), {}, "buffers"); }},
                {"max_jobs",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, out.max_jobs.emplace(), {}, "jobs"); }},
                {"idle_timeout_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, out.idle_timeout_ms, {}, "milliseconds");
                 }},
                {"per_source", [&](auto& n, auto& p) { LoadRate(n, p, out.per_source); }},
                {"total", [&](auto& n, auto& p) { LoadRate(n, p, out.total); }},
            });
  }

  static std::string TimeoutRangeText() {
    return "0.." + std::to_string(kMaxTimeoutMs) + " milliseconds (0: timers off)";
  }

  static std::string MillisecondsRangeText() {
    return "1.." + std::to_string(kMaxTimeoutMs) + " milliseconds";
  }

  static std::string NodeIdRangeText() { return "a node id 0.." + std::to_string(kMaxNodeId); }

  void LoadTelemetry(const YAML::Node& node, const std::string& path) {
    TelemetryConfig& t = config_.telemetry;
    t.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"node_id", [&](auto& n, auto& p) { ReadUnsigned(n, p, t.node_id); }},
                {"collector",
                 [&](auto& n, auto& p) {
                   std::optional<common::Ipv4Endpoint> at;
                   if (n.IsScalar()) at = common::Ipv4Endpoint::Parse(n.Scalar());
                   if (!at || at->port == 0) {
                     Error(p, n, "expected the collector's \"a.b.c.d:port\", got " + Describe(n));
                     return;
                   }
                   t.collector = *at;
                 }},
                {"int_port", [&](auto& n, auto& p) { ReadUnsigned(n, p, t.int_port); }},
                {"max_hops",
                 [&](auto& n, auto& p) { ReadUnsigned(n, p, t.max_hops, {}, "a hop count 1..255"); }},
                {"watch",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     LoadWatchEntry(item, item_path, t.watch.emplace_back());
                   });
                 }},
            });
  }

  void LoadWatchEntry(const YAML::Node& node, const std::string& path, WatchEntry& w) {
    w.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    LoadMap(node, path,
            {
                {"name", [&](auto& n, auto& p) { ReadString(n, p, w.name); }, true},
                {"vlan", [&](auto& n, auto& p) { ReadVlan(n, p, w.vlan); }},
                {"src", [&](auto& n, auto& p) { ReadPrefix(n, p, w.src.emplace()); }},
                {"dst", [&](auto& n, auto& p) { ReadPrefix(n, p, w.dst.emplace()); }},
                {"port", [&](auto& n, auto& p) { ReadUnsigned(n, p, w.port); }},
                {"job", [&](auto& n, auto& p) { ReadUnsigned(n, p, w.job.emplace()); }},
                {"sample",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, w.sample, {},
                                "1 in N datagrams, N 1.." + std::to_string(kMaxWatchSample));
                 }},
                {"instructions",
                 [&](auto& n, auto& p) {
                   ReadEnum<IntInstructions>(n, p,
                                             {{"latency", IntInstructions::kLatency},
                                              {"bandwidth", IntInstructions::kBandwidth},
                                              {"both", IntInstructions::kBoth}},
                                             w.instructions);
                 }},
            });
  }

  // Reads one of `names` into `out`; on failure `out` is left alone.
  template <typename E>
  bool ReadEnum(const YAML::Node& node, const std::string& path,
                const std::vector<std::pair<std::string_view, E>>& names, E& out) {
    if (node.IsScalar()) {
      for (const auto& [name, value] : names) {
        if (node.Scalar() == name) {
          out = value;
          return true;
        }
      }
    }
    std::string expected;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) expected += i + 1 == names.size() ? " or " : ", ";
      expected += names[i].first;
    }
    Error(path, node, "expected " + expected + ", got " + Describe(node));
    return false;
  }

  bool ReadTrigger(const YAML::Node& node, const std::string& path, AggTrigger& out) {
    return ReadEnum<AggTrigger>(
        node, path, {{"incremental", AggTrigger::kIncremental}, {"batch", AggTrigger::kBatch}},
        out);
  }

  // "a.b.c.d" into an address; on failure `out` is left alone.
  bool ReadIpv4(const YAML::Node& node, const std::string& path, common::Ipv4Addr& out) {
    common::Ipv4Prefix prefix;
    if (!ReadHostAddress(node, path, prefix)) return false;
    out = prefix.ip;
    return true;
  }

  // aggregation.bypass: {entries, ttl_ms, subswitch}.
  void LoadBypass(const YAML::Node& node, const std::string& path, BypassConfig& out) {
    out.loc = ItemLoc(node, path);
    LoadMap(node, path,
            {
                {"entries",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, out.entries, {},
                                "1.." + std::to_string(kMaxBypassEntries) + " entries");
                 }},
                {"ttl_ms",
                 [&](auto& n, auto& p) {
                   ReadUnsigned(n, p, out.ttl_ms, {}, MillisecondsRangeText());
                 }},
                {"subswitch",
                 [&](auto& n, auto& p) {
                   ReadEnum<SubswitchEntries>(
                       n, p,
                       {{"switch", SubswitchEntries::kSwitch}, {"nodes", SubswitchEntries::kNodes}},
                       out.subswitch);
                 }},
            });
  }

  // {strategy, candidates: [{address, port, hops}, ...]}.
  void LoadTan(const YAML::Node& node, const std::string& path, TanConfig& out) {
    out.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    LoadMap(node, path,
            {
                {"strategy",
                 [&](auto& n, auto& p) {
                   ReadEnum<TanStrategy>(n, p,
                                         {{"fixed", TanStrategy::kFixed},
                                          {"random", TanStrategy::kRandom},
                                          {"least_load", TanStrategy::kLeastLoad},
                                          {"fewest_hops", TanStrategy::kFewestHops},
                                          {"self", TanStrategy::kSelf}},
                                         out.strategy);
                 }},
                {"candidates",
                 [&](auto& n, auto& p) {
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     TanCandidate& candidate = out.candidates.emplace_back();
                     candidate.loc = ItemLoc(item, item_path);
                     if (!IsMapItem(item, item_path)) return;
                     LoadMap(
                         item, item_path,
                         {
                             {"address",
                              [&](auto& v, auto& vp) { ReadIpv4(v, vp, candidate.address); }, true},
                             {"port",
                              [&](auto& v, auto& vp) {
                                ReadUnsigned(v, vp, candidate.port, {}, "a UDP port 1..65535");
                              }},
                             {"hops",
                              [&](auto& v, auto& vp) {
                                ReadUnsigned(v, vp, candidate.hops, {},
                                             "0.." + std::to_string(kMaxTanHops) + " hops");
                              }},
                         });
                   });
                 }},
            });
  }

  // The keys of a parent switch's aggregation address: address, port, vlan.
  std::vector<Field> ParentSwitchFields(common::Ipv4Addr& address, uint16_t& port, uint16_t& vlan) {
    // Pointers: the fields outlive this call.
    return {
        {"address", [this, a = &address](auto& n, auto& p) { ReadIpv4(n, p, *a); }, true},
        {"port",
         [this, o = &port](auto& n, auto& p) {
           ReadUnsigned(n, p, *o, {}, "a UDP port 1..65535");
         }},
        {"vlan",
         [this, v = &vlan](auto& n, auto& p) {
           ReadUnsigned<uint16_t>(n, p, *v, kUnreadVlan,
                                  "0 (the aggregation address's VLAN) or " + VlanRangeText());
         }},
    };
  }

  // {address, port, node, vlan}: the parent switch, and this switch's node id there.
  void LoadUpstream(const YAML::Node& node, const std::string& path, UpstreamConfig& out) {
    out.loc = ItemLoc(node, path);
    // Replaced when "node" is read; a missing one must not pass for node 0.
    out.node = kUnreadNodeId;
    if (!IsMapItem(node, path)) return;
    std::vector<Field> fields = ParentSwitchFields(out.address, out.port, out.vlan);
    fields.insert(fields.begin() + 2, {"node",
                      [&](auto& n, auto& p) {
                        ReadUnsigned(n, p, out.node, {kUnreadNodeId}, NodeIdRangeText());
                      },
                      true});
    LoadMap(node, path, fields);
  }

  // aggregation.upstreams[]: {address, port, vlan}.
  void LoadUpstreamCandidate(const YAML::Node& node, const std::string& path,
                             UpstreamCandidateConfig& out) {
    out.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    LoadMap(node, path, ParentSwitchFields(out.address, out.port, out.vlan));
  }

  // One item of a node id list: "N" or "A-B" (A <= B). False when it does not parse.
  static bool ParseNodeIdItem(const YAML::Node& node, uint16_t& first, uint16_t& last) {
    if (!node.IsScalar()) return false;
    const std::string& text = node.Scalar();
    auto parse = [](std::string_view digits, uint16_t& out) {
      uint32_t value = 0;
      auto [next, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (digits.empty() || ec != std::errc() || next != digits.data() + digits.size() ||
          value > std::numeric_limits<uint16_t>::max()) {
        return false;
      }
      out = static_cast<uint16_t>(value);
      return true;
    };
    const size_t dash = text.find('-');
    if (dash == std::string::npos) {
      if (!parse(text, first)) return false;
      last = first;
      return true;
    }
    const std::string_view view(text);
    return parse(view.substr(0, dash), first) && parse(view.substr(dash + 1), last) &&
           first <= last;
  }

  // A list of node ids whose items are numbers or "a-b" ranges. Ranges are
  // expanded, and key paths index the expanded list: in ["0-3", 8], 8 is
  // [4]; each id's location is its item's. An unreadable item is reported
  // and stands in as one reserved id, which the cross-checks skip. Returns
  // false when something could not be read.
  //
  // What ranges and aliases may expand to is bounded: a job lists at most
  // kMaxJobListedNodeIds ids (`job_listed` counts them over its lists, as
  // the API does), a file at most kMaxConfigNodeIds. Past a bound the item
  // is reported and the list not read further. Each item records one
  // location (Config::item_locs), whatever it expands to.
  bool LoadNodeIds(const YAML::Node& node, const std::string& path, std::vector<uint16_t>& out,
                   size_t& job_listed) {
    if (node.IsNull()) return true;
    if (!node.IsSequence()) {
      Error(path, node, "expected a list of node ids, got " + Describe(node));
      return false;
    }
    std::vector<std::pair<size_t, SourceLoc>>& items = config_.item_locs[path];
    bool ok = true;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node item = node[i];
      // An empty item has no position of its own; the list's is the nearest known.
      const SourceLoc loc = item.IsNull() ? config_.LocOf(path, LocOf(node)) : LocOf(item);
      const std::string item_path = Index(path, out.size());
      uint16_t first = 0;
      uint16_t last = 0;
      if (!ParseNodeIdItem(item, first, last)) {
        config_.source_locs[item_path] = loc;
        Error(item_path, item,
              "expected " + NodeIdRangeText() + " or a range \"a-b\" of them (a <= b), got " +
                  Describe(item));
        out.push_back(kUnreadNodeId);
        ok = false;
        continue;
      }
      const size_t count = size_t{last} - first + 1;
      if (job_listed + count > kMaxJobListedNodeIds) {
        config_.source_locs[item_path] = loc;
        Error(item_path, item,
              "expected at most " + std::to_string(kMaxJobListedNodeIds) +
                  " node ids in a job's node_ids and covers lists (its members and the nodes "
                  "below its child switches are distinct ids 0.." + std::to_string(kMaxNodeId) +
                  "), got more with this item");
        return false;
      }
      if (file_node_ids_ + count > kMaxConfigNodeIds) {
        config_.source_locs[item_path] = loc;
        Error(item_path, item,
              "expected at most " + std::to_string(kMaxConfigNodeIds) +
                  " node ids in the whole file (ranges and aliases expanded), got more with this "
                  "item");
        return false;
      }
      job_listed += count;
      file_node_ids_ += count;
      items.emplace_back(out.size(), loc);
      for (uint32_t id = first; id <= last; ++id) out.push_back(static_cast<uint16_t>(id));
    }
    return ok;
  }

  // "a.b.c.d" (every VLAN) or {address: "a.b.c.d", vlan: N}.
  void LoadAggregationAddress(const YAML::Node& node, const std::string& path, SwitchAddress& out) {
    out.loc = ItemLoc(node, path);
    if (!node.IsMap()) {
      if (node.IsScalar()) {
        ReadHostAddress(node, path, out.prefix);
      } else {
        Error(path, node, "expected \"a.b.c.d\" or a map {address, vlan}, got " + Describe(node));
      }
      return;
    }
    LoadMap(node, path,
            {
                {"address", [&](auto& n, auto& p) { ReadHostAddress(n, p, out.prefix); }, true},
                {"vlan", [&](auto& n, auto& p) { ReadVlan(n, p, out.vlan); }},
            });
  }

  void LoadAggregationJob(const YAML::Node& node, const std::string& path,
                          AggregationJobConfig& job) {
    job.loc = ItemLoc(node, path);
    if (!IsMapItem(node, path)) return;
    bool has_members = false;
    bool members_read = false;
    bool has_lists = false;  // node_ids or switches given
    bool lists_read = true;  // and every item of them read
    size_t ids_listed = 0;   // node ids in node_ids and every covers, ranges expanded
    LoadMap(
        node, path,
        {
            {"id",
             [&](auto& n, auto& p) { ReadUnsigned(n, p, job.id, {}, "a job id 1..4294967295"); },
             true},
            {"key", [&](auto& n, auto& p) { ReadJobKey(n, p, job.key); }, true},
            {"members",
             [&](auto& n, auto& p) {
               has_members = true;
               members_read = ReadUnsigned(
                   n, p, job.members, {},
                   "1..max_fan_in members (at most " + std::to_string(kMaxAggregationFanIn) + ")");
             }},
            {"nodes",
             [&](auto& n, auto& p) { ReadUnsigned(n, p, job.nodes, {}, "a node count 1..65535"); }},
            {"ordered", [&](auto& n, auto& p) { ReadBool(n, p, job.ordered); }},
            {"node_ids",
             [&](auto& n, auto& p) {
               has_lists = true;
               if (!LoadNodeIds(n, p, job.node_ids, ids_listed)) lists_read = false;
             }},
            {"switches",
             [&](auto& n, auto& p) {
               has_lists = true;
               const bool listed =
                   LoadList(n, p, [&](const YAML::Node& item, const std::string& item_path) {
                     ChildSwitchConfig& child = job.switches.emplace_back();
                     child.loc = ItemLoc(item, item_path);
                     // Replaced when "node" is read; a missing one must not pass for node 0.
                     child.node = kUnreadNodeId;
                     if (!IsMapItem(item, item_path)) {
                       lists_read = false;
                       return;
                     }
                     LoadMap(item, item_path,
                             {
                                 {"node",
                                  [&](auto& v, auto& vp) {
                                    if (!ReadUnsigned(v, vp, child.node, {kUnreadNodeId},
                                                      NodeIdRangeText())) {
                                      lists_read = false;
                                    }
                                  },
                                  true},
                                 {"covers",
                                  [&](auto& v, auto& vp) {
                                    LoadNodeIds(v, vp, child.covers, ids_listed);
                                  }},
                             });
                   });
               if (!listed) lists_read = false;
             }},
            {"upstream", [&](auto& n, auto& p) { LoadUpstream(n, p, job.upstream.emplace()); }},
            {"timeout_ms",
             [&](auto& n, auto& p) {
               ReadUnsigned(n, p, job.timeout_ms.emplace(), {}, TimeoutRangeText());
             }},
            {"trigger", [&](auto& n, auto& p) { ReadTrigger(n, p, job.trigger.emplace()); }},
            {"tan", [&](auto& n, auto& p) { LoadTan(n, p, job.tan.emplace()); }},
            {"tan_member",
             [&](auto& n, auto& p) {
               ReadUnsigned(n, p, job.tan_member.emplace(), {}, NodeIdRangeText());
             }},
            {"parameter_server", [&](auto& n, auto& p) { ReadBool(n, p, job.parameter_server); }},
            {"verify", [&](auto& n, auto& p) { ReadBool(n, p, job.verify); }},
            {"placement_hint",
             [&](auto& n, auto& p) {
               ReadUnsigned(n, p, job.placement_hint.emplace(), {}, "a slot index in the region");
             }},
            {"mode",
             [&](auto& n, auto& p) {
               ReadEnum<JobMode>(n, p,
                                 {{"aggregate", JobMode::kAggregate},
                                  {"store", JobMode::kStore},
                                  {"both", JobMode::kBoth}},
                                 job.mode);
             }},
            {"main_server",
             [&](auto& n, auto& p) {
               std::optional<common::Ipv4Endpoint> at;
               if (n.IsScalar()) at = common::Ipv4Endpoint::ParsePortOptional(n.Scalar());
               if (!at || at->ip.addr == 0) {
                 Error(p, n, "expected the main server's \"a.b.c.d\" or \"a.b.c.d:port\", got " + Describe(n));
                 return;
               }
               job.main_server = *at;
             }},
        });
    if (has_lists) {
      // The lists count the members. A `members` key must agree (Validate()
      // checks); one that could not be read, or lists that could not be read
      // in full, leave only the count of what was read, and no second error.
      if (!has_members || !members_read || !lists_read) {
        const size_t listed = job.node_ids.size() + job.switches.size();
        job.members =
            static_cast<uint16_t>(std::min<size_t>(listed, std::numeric_limits<uint16_t>::max()));
      }
    } else if (!has_members) {
      const std::string key_path = Join(path, "members");
      const SourceLoc loc = ItemLoc(node, path);
      errors_.push_back(ConfigError{
          key_path, loc,
          "missing required key \"members\" (or the members' node ids in \"node_ids\" and "
          "\"switches\")"});
      config_.source_locs[key_path] = loc;
    }
  }

  Config& config_;
  std::vector<ConfigError>& errors_;
  size_t file_node_ids_ = 0;  // node ids every list of the file expanded to
};

// True when `path` is `base` or lies below it ("ports[1]" is below "ports").
bool IsAtOrBelow(const std::string& path, const std::string& base) {
  if (base.empty()) return true;
  if (path.compare(0, base.size(), base) != 0) return false;
  return path.size() == base.size() || path[base.size()] == '.' || path[base.size()] == '[';
}

}  // namespace

std::string ConfigLoad::FormatErrors() const {
  std::string out;
  for (const ConfigError& error : errors) {
    if (!out.empty()) out += '\n';
    out += error.Format(source_name);
  }
  return out;
}

ConfigLoad LoadConfigText(std::string_view yaml, std::string source_name) {
  ConfigLoad load;
  load.source_name = std::move(source_name);
  std::vector<ConfigError> errors;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    Loader(load.config, errors).LoadRoot(root);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp names it "bad file"; say what it is and where.
    load.errors.push_back(ConfigError{
        "", LocOf(e.mark),
        "invalid YAML: lists and maps nested too deep (the parser stopped at depth " +
            std::to_string(e.depth()) + "); a config nests at most 6 levels"});
    return load;
  } catch (const YAML::Exception& e) {
    // A syntax error leaves nothing worth validating.
    load.errors.push_back(ConfigError{"", LocOf(e.mark), "invalid YAML: " + e.msg});
    return load;
  } catch (const std::exception& e) {
    load.errors.push_back(ConfigError{"", {}, std::string("cannot load: ") + e.what()});
    return load;
  }

  ApplyDerivedDefaults(load.config);
  std::vector<ConfigError> findings;
  Validate(load.config, findings);
  // A value the loader could not read was reported already; Validate() sees
  // only its stand-in and would report the same key again.
  for (ConfigError& finding : findings) {
    const bool explained = std::any_of(errors.begin(), errors.end(), [&](const ConfigError& e) {
      return IsAtOrBelow(finding.path, e.path);
    });
    if (!explained) errors.push_back(std::move(finding));
  }
  // In file order; errors without a location (defaulted items) last.
  std::stable_sort(errors.begin(), errors.end(), [](const ConfigError& a, const ConfigError& b) {
    auto key = [](const SourceLoc& loc) {
      return std::make_pair(loc.line == 0 ? std::numeric_limits<int>::max() : loc.line, loc.column);
    };
    return key(a.loc) < key(b.loc);
  });
  load.errors = std::move(errors);
  return load;
}

ConfigLoad LoadConfigFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    ConfigLoad load;
    load.source_name = path;
    load.errors.push_back(ConfigError{"", {}, "cannot read: is a directory"});
    return load;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    const int err = errno;
    ConfigLoad load;
    load.source_name = path;
    load.errors.push_back(ConfigError{"", {}, std::string("cannot read: ") + std::strerror(err)});
    return load;
  }
  std::string text(kMaxConfigBytes + 1, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(file.gcount()));
  if (text.size() > kMaxConfigBytes) {
    ConfigLoad load;
    load.source_name = path;
    load.errors.push_back(ConfigError{
        "", {}, "cannot read: larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB"});
    return load;
  }
  if (file.bad()) {
    ConfigLoad load;
    load.source_name = path;
    load.errors.push_back(ConfigError{"", {}, "cannot read: I/O error"});
    return load;
  }
  return LoadConfigText(text, path);
}

common::Result<Config> LoadConfig(const std::string& path) {
  ConfigLoad load = LoadConfigFile(path);
  if (!load.ok()) return common::InvalidArgument(load.FormatErrors());
  return std::move(load.config);
}

}  // namespace aggswitch::config
