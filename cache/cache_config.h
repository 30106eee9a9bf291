// The data cache's two configs, read from YAML: the daemon's (`cache:`
// section, agg-cached) and a loader's (`loader:` section, agg-load, the
// Python API and the PyTorch Dataset). docs/cache.md is their reference.
//
// Errors name the file, line and column, the key path and what was
// expected; every error in the file is reported, in file order:
//   cache.yaml:4:11: cache.memory: expected a size such as 512MiB, got "lots"
//
//   ASSIGN_OR_RETURN(DaemonConfig c, LoadDaemonConfig("/etc/aggswitch/cache.yaml"));
//
// Thread safety: pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/net_addr.h"
#include "common/status.h"

namespace aggswitch::cache {

inline constexpr const char* kDefaultPrefix = "/aggswitch/cache";
// UCX transports by default: verbs where there is an RDMA device, TCP where
// there is none; never shared memory, which would bypass the network.
inline constexpr const char* kDefaultTls = "rc_verbs,ud_verbs,tcp";

struct DaemonConfig {
  std::string node;                // this node's name; one of `nodes`
  std::vector<std::string> nodes;  // the cache's members: the placement ring
  std::string listen;              // "a.b.c.d:port" of the UCX listener
  uint64_t memory = 1ull << 30;    // the region's bytes
  bool hugepages = false;
  std::string region_dir;          // default /dev/shm, or /dev/hugepages with hugepages
  std::string store;               // the external store's path or URL
  std::string dataset;
  std::string records;             // etcd://... or file:...
  std::string prefix = kDefaultPrefix;
  uint32_t replicas = 1;
  std::vector<common::Ipv4Prefix> allow_nodes;  // who may connect
  std::vector<std::string> allow_jobs;          // empty: any job
  std::string ucx_tls = kDefaultTls;
  std::string ucx_net_devices;
  std::string metrics = "127.0.0.1:9480";  // /metrics; empty: none
  uint32_t lease_ttl_s = 10;
};

enum class Component { kCpu, kGpu };
enum class MissPolicy { kReadThrough, kFail };
const char* ComponentName(Component c);
const char* MissPolicyName(MissPolicy m);

struct LoaderConfig {
  std::string records;
  std::string prefix = kDefaultPrefix;
  std::string dataset;
  std::string node;  // this node's name, for the local path; empty: no local path
  std::string job;
  uint64_t amount = 64ull << 20;  // bytes per request (whole items, at least one)
  Component component = Component::kCpu;
  MissPolicy miss = MissPolicy::kReadThrough;
  std::string store;  // the external store, for read-through
  uint32_t owner_timeout_ms = 2000;
  bool verify = true;  // CRC-32C over every item read
  std::string ucx_tls = kDefaultTls;
  std::string ucx_net_devices;
  uint32_t window = 16;  // reads in flight per request
};

common::Result<DaemonConfig> LoadDaemonConfig(const std::string& path);
common::Result<DaemonConfig> ParseDaemonConfig(const std::string& yaml, const std::string& source);
common::Result<LoaderConfig> LoadLoaderConfig(const std::string& path);
common::Result<LoaderConfig> ParseLoaderConfig(const std::string& yaml, const std::string& source);

// "512MiB", "2GiB", "4096", "64KiB", "1.5GiB"; nullopt otherwise.
std::optional<uint64_t> ParseSize(const std::string& text);

}  // namespace aggswitch::cache
