#include "cache/cache_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace aggswitch::cache {
namespace {

// No list takes more (YAML aliases make a long list out of a short file).
constexpr size_t kMaxListItems = 1024;

// Collects "<source>:<line>:<col>: <path>: <message>" errors while walking.
class Walker {
 public:
  explicit Walker(std::string source) : source_(std::move(source)) {}

  void Error(const YAML::Node& at, const std::string& path, const std::string& message) {
    const YAML::Mark m = at.Mark();
    errors_.push_back(source_ + ":" + std::to_string(m.line + 1) + ":" +
                      std::to_string(m.column + 1) + ": " + path + ": " + message);
  }
  void ErrorAt(const YAML::Mark& m, const std::string& path, const std::string& message) {
    errors_.push_back(source_ + ":" + std::to_string(m.line + 1) + ":" +
                      std::to_string(m.column + 1) + ": " + path + ": " + message);
  }

  using Load = std::function<void(const YAML::Node&, const std::string&)>;
  struct Field {
    const char* key;
    Load load;
    bool required = false;
  };

  void Map(const YAML::Node& node, const std::string& path, const std::vector<Field>& fields) {
    if (!node.IsMap()) {
      Error(node, path, "expected a map");
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;
      const YAML::Node value = it->second;
      const std::string name = key.IsScalar() ? key.Scalar() : "?";
      const std::string sub = path + "." + name;
      auto f = std::find_if(fields.begin(), fields.end(),
                            [&name](const Field& x) { return name == x.key; });
      if (f == fields.end()) {
        std::string expected;
        for (const Field& x : fields) expected += (expected.empty() ? "" : ", ") + std::string(x.key);
        Error(key, sub, "unknown key \"" + name + "\"; expected one of: " + expected);
        continue;
      }
      if (!seen.insert(name).second) {
        Error(key, sub, "expected each key once, got \"" + name + "\" again");
        continue;
      }
      f->load(value.IsNull() ? key : value, sub);
    }
    for (const Field& x : fields) {
      if (x.required && seen.count(x.key) == 0) {
        Error(node, path + "." + x.key, std::string("missing required key \"") + x.key + "\"");
      }
    }
  }

  Load String(std::string& out) {
    return [this, &out](const YAML::Node& n, const std::string& p) {
      if (!n.IsScalar() || n.Scalar().empty()) return Error(n, p, "expected a string");
      out = n.Scalar();
    };
  }
  Load Size(uint64_t& out) {
    return [this, &out](const YAML::Node& n, const std::string& p) {
      auto v = n.IsScalar() ? ParseSize(n.Scalar()) : std::nullopt;
      if (!v || *v == 0) {
        return Error(n, p, "expected a size such as 512MiB, got \"" + (n.IsScalar() ? n.Scalar() : "") + "\"");
      }
      out = *v;
    };
  }
  Load Uint(uint32_t& out, uint32_t lo, uint32_t hi) {
    return [this, &out, lo, hi](const YAML::Node& n, const std::string& p) {
      uint32_t v = 0;
      const std::string s = n.IsScalar() ? n.Scalar() : "";
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
        return Error(n, p, "expected an integer " + std::to_string(lo) + ".." + std::to_string(hi) +
                               ", got \"" + s + "\"");
      }
      out = v;
    };
  }
  Load Bool(bool& out) {
    return [this, &out](const YAML::Node& n, const std::string& p) {
      const std::string s = n.IsScalar() ? n.Scalar() : "";
      if (s == "true") out = true;
      else if (s == "false") out = false;
      else Error(n, p, "expected true or false, got \"" + s + "\"");
    };
  }
  Load Strings(std::vector<std::string>& out) {
    return [this, &out](const YAML::Node& n, const std::string& p) {
      if (!n.IsSequence()) return Error(n, p, "expected a list of names");
      if (n.size() > kMaxListItems) {
        return Error(n, p, "expected at most " + std::to_string(kMaxListItems) + " items, got " +
                               std::to_string(n.size()));
      }
      for (size_t i = 0; i < n.size(); ++i) {
        if (!n[i].IsScalar() || n[i].Scalar().empty()) {
          Error(n[i], p + "[" + std::to_string(i) + "]", "expected a name");
          continue;
        }
        out.push_back(n[i].Scalar());
      }
    };
  }

  common::Status Finish() const {
    if (errors_.empty()) return common::Status::Ok();
    std::string all;
    for (const std::string& e : errors_) all += (all.empty() ? "" : "\n") + e;
    return common::InvalidArgument(all);
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

common::Result<YAML::Node> ParseYaml(const std::string& yaml, const std::string& source) {
  try {
    return YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return common::InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

common::Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return common::NotFound(path + ":0:0: cannot read the file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The one section `name` of the file.
common::Result<YAML::Node> Section(const YAML::Node& root, const char* name, Walker& w) {
  if (!root.IsMap() || !root[name]) {
    w.Error(root, name, std::string("missing the \"") + name + "\" section");
    RETURN_IF_ERROR(w.Finish());
  }
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it->first.Scalar() != name) {
      w.Error(it->first, it->first.Scalar(), std::string("unknown section; expected \"") + name + "\"");
    }
  }
  return root[name];
}

}  // namespace

const char* ComponentName(Component c) { return c == Component::kGpu ? "gpu" : "cpu"; }
const char* MissPolicyName(MissPolicy m) { return m == MissPolicy::kFail ? "fail" : "read_through"; }

std::optional<uint64_t> ParseSize(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, value);
  if (ec != std::errc() || ptr != text.data() + i) return std::nullopt;
  const std::string unit = text.substr(i);
  double scale;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else return std::nullopt;
  const double bytes = value * scale;
  if (bytes > 1e18 || bytes != std::floor(bytes)) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

common::Result<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& source) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  Walker w(source);
  ASSIGN_OR_RETURN(YAML::Node c, Section(root, "cache", w));
  DaemonConfig cfg;
  YAML::Mark replicas_mark{};
  w.Map(c, "cache",
        {{"node", w.String(cfg.node), true},
         {"nodes", w.Strings(cfg.nodes), true},
         {"listen",
          [&](const YAML::Node& n, const std::string& p) {
            auto e = n.IsScalar() ? common::Ipv4Endpoint::Parse(n.Scalar()) : std::nullopt;
            if (!e || e->port == 0) return w.Error(n, p, "expected a.b.c.d:port (the UCX listener)");
            cfg.listen = n.Scalar();
          },
          true},
         {"memory", w.Size(cfg.memory)},
         {"hugepages", w.Bool(cfg.hugepages)},
         {"region_dir", w.String(cfg.region_dir)},
         {"store", w.String(cfg.store), true},
         {"dataset", w.String(cfg.dataset), true},
         {"records", w.String(cfg.records), true},
         {"prefix", w.String(cfg.prefix)},
         {"replicas",
          [&](const YAML::Node& n, const std::string& p) {
            replicas_mark = n.Mark();
            w.Uint(cfg.replicas, 1, 16)(n, p);
          }},
         {"allow",
          [&](const YAML::Node& n, const std::string& p) {
            w.Map(n, p,
                  {{"nodes",
                    [&](const YAML::Node& l, const std::string& lp) {
                      if (!l.IsSequence() || l.size() > kMaxListItems) {
                        return w.Error(l, lp, "expected a list of at most " + std::to_string(kMaxListItems) +
                                                  " prefixes");
                      }
                      for (size_t i = 0; i < l.size(); ++i) {
                        auto pre = l[i].IsScalar() ? common::Ipv4Prefix::Parse(l[i].Scalar()) : std::nullopt;
                        if (!pre) {
                          w.Error(l[i], lp + "[" + std::to_string(i) + "]",
                                  "expected an IPv4 prefix such as 10.0.0.0/24");
                          continue;
                        }
                        cfg.allow_nodes.push_back(*pre);
                      }
                    },
                    true},
                   {"jobs", w.Strings(cfg.allow_jobs)}});
          },
          true},
         {"ucx_tls", w.String(cfg.ucx_tls)},
         {"ucx_net_devices", w.String(cfg.ucx_net_devices)},
         {"metrics",
          [&](const YAML::Node& n, const std::string& p) {
            if (n.IsScalar() && n.Scalar().empty()) return void(cfg.metrics.clear());
            auto e = n.IsScalar() ? common::Ipv4Endpoint::Parse(n.Scalar()) : std::nullopt;
            if (!e) return w.Error(n, p, "expected a.b.c.d:port for /metrics");
            cfg.metrics = n.Scalar();
          }},
         {"lease_ttl_s", w.Uint(cfg.lease_ttl_s, 2, 3600)}});
  RETURN_IF_ERROR(w.Finish());
  if (std::find(cfg.nodes.begin(), cfg.nodes.end(), cfg.node) == cfg.nodes.end()) {
    w.Error(c["node"], "cache.node", "expected one of cache.nodes, got \"" + cfg.node + "\"");
  }
  if (std::set<std::string>(cfg.nodes.begin(), cfg.nodes.end()).size() != cfg.nodes.size()) {
    w.Error(c["nodes"], "cache.nodes", "expected distinct node names");
  }
  if (cfg.replicas > cfg.nodes.size()) {
    w.ErrorAt(replicas_mark, "cache.replicas",
              "expected at most " + std::to_string(cfg.nodes.size()) + " (one per node in cache.nodes)");
  }
  if (cfg.region_dir.empty()) cfg.region_dir = cfg.hugepages ? "/dev/hugepages" : "/dev/shm";
  RETURN_IF_ERROR(w.Finish());
  return cfg;
}

common::Result<LoaderConfig> ParseLoaderConfig(const std::string& yaml, const std::string& source) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseYaml(yaml, source));
  Walker w(source);
  ASSIGN_OR_RETURN(YAML::Node l, Section(root, "loader", w));
  LoaderConfig cfg;
  w.Map(l, "loader",
        {{"records", w.String(cfg.records), true},
         {"prefix", w.String(cfg.prefix)},
         {"dataset", w.String(cfg.dataset), true},
         {"node", w.String(cfg.node)},
         {"job", w.String(cfg.job), true},
         {"request",
          [&](const YAML::Node& n, const std::string& p) {
            w.Map(n, p,
                  {{"amount", w.Size(cfg.amount), true},
                   {"component",
                    [&](const YAML::Node& v, const std::string& vp) {
                      const std::string s = v.IsScalar() ? v.Scalar() : "";
                      if (s == "cpu") cfg.component = Component::kCpu;
                      else if (s == "gpu") cfg.component = Component::kGpu;
                      else w.Error(v, vp, "expected cpu or gpu, got \"" + s + "\"");
                    },
                    true}});
          },
          true},
         {"miss",
          [&](const YAML::Node& v, const std::string& vp) {
            const std::string s = v.IsScalar() ? v.Scalar() : "";
            if (s == "read_through") cfg.miss = MissPolicy::kReadThrough;
            else if (s == "fail") cfg.miss = MissPolicy::kFail;
            else w.Error(v, vp, "expected read_through or fail, got \"" + s + "\"");
          }},
         {"store", w.String(cfg.store)},
         {"owner_timeout_ms", w.Uint(cfg.owner_timeout_ms, 10, 600000)},
         {"verify", w.Bool(cfg.verify)},
         {"ucx_tls", w.String(cfg.ucx_tls)},
         {"ucx_net_devices", w.String(cfg.ucx_net_devices)},
         {"window", w.Uint(cfg.window, 1, 256)}});
  RETURN_IF_ERROR(w.Finish());
  if (cfg.miss == MissPolicy::kReadThrough && cfg.store.empty()) {
    w.Error(l["miss"] ? l["miss"] : l, "loader.store",
            "expected the external store (miss: read_through reads from it)");
  }
  RETURN_IF_ERROR(w.Finish());
  return cfg;
}

common::Result<DaemonConfig> LoadDaemonConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseDaemonConfig(text, path);
}

common::Result<LoaderConfig> LoadLoaderConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseLoaderConfig(text, path);
}

}  // namespace aggswitch::cache
