// Tests of the YAML loader: every field, both item forms, every error with its
// key path and line, and the rule that one mistake yields one error.
#include "config/loader.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace aggswitch::config {
namespace {

ConfigLoad Load(std::string_view yaml) {
  return LoadConfigText(yaml, "test.yaml");
}

std::string Dump(const ConfigLoad& load) {
  return load.errors.empty() ? std::string(" (no errors)") : "\n" + load.FormatErrors();
}

// Exactly one error, at `path` on `line`, whose message contains `fragment`.
::testing::AssertionResult OneError(const ConfigLoad& load, const std::string& path, int line,
                                    const std::string& fragment) {
  if (load.errors.size() != 1) {
    return ::testing::AssertionFailure()
           << "expected one error, got " << load.errors.size() << Dump(load);
  }
  const ConfigError& e = load.errors[0];
  if (e.path != path || e.loc.line != line || e.message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected " << path << " on line " << line << " with '"
                                         << fragment << "'" << Dump(load);
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::string> Paths(const ConfigLoad& load) {
  std::vector<std::string> paths;
  for (const ConfigError& e : load.errors) paths.push_back(e.path);
  return paths;
}

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string ExamplePath(const char* name) {
  return std::string(AGG_CONFIG_EXAMPLES_DIR) + "/" + name;
}

// --- Files that ship with the project ------------------------------------------

TEST(EmbeddedDefaultTest, IsExamplesDefaultYamlByteForByte) {
  EXPECT_EQ(std::string(EmbeddedDefaultConfigText()), ReadFile(ExamplePath("default.yaml")));
}

TEST(EmbeddedDefaultTest, LoadsAndValidatesWithoutErrors) {
  const ConfigLoad load = LoadConfigText(EmbeddedDefaultConfigText(), "<embedded>");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;
  EXPECT_EQ(load.source_name, "<embedded>");
  EXPECT_EQ(c.eal.file_prefix, "aggswitch-default");
  ASSERT_EQ(c.ports.size(), 4u);
  EXPECT_EQ(c.ports[0].devargs, "net_af_packet0,iface=agg-sw0");
  EXPECT_EQ(c.ports[1].access_vlan, 10);
  EXPECT_EQ(c.ports[2].mode, VlanMode::kTrunk);
  EXPECT_EQ(c.ports[2].trunk_vlans, std::vector<uint16_t>({10, 20}));
  EXPECT_EQ(c.ports[2].native_vlan, 10);
  ASSERT_EQ(c.switch_.addresses.size(), 2u);
  EXPECT_EQ(c.switch_.addresses[1].vlan, 20);
  ASSERT_EQ(c.workers.size(), 1u);
  EXPECT_EQ(c.ports[3].access_vlan, 10);
  EXPECT_EQ(c.workers[0].rx.size(), 4u);
  EXPECT_TRUE(c.aggregation.enabled);
  EXPECT_TRUE(c.aggregation.in_band_registration);
  std::vector<ConfigError> errors;
  EXPECT_TRUE(Validate(c, errors));
}

TEST(ExampleFilesTest, TorLeafLoads) {
  const ConfigLoad load = LoadConfigFile(ExamplePath("tor-leaf.yaml"));
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;
  EXPECT_TRUE(c.eal.hugepages);
  EXPECT_TRUE(c.eal.pci);
  ASSERT_EQ(c.workers.size(), 2u);
  const PortConfig* uplink = c.FindPort("uplink0");
  ASSERT_NE(uplink, nullptr);
  EXPECT_EQ(uplink->mode, VlanMode::kTrunk);
  EXPECT_EQ(uplink->native_vlan, 1);
  EXPECT_EQ(c.RxQueueCount("uplink0"), 4);
  EXPECT_EQ(c.RxQueueCount("srv3"), 1);
  EXPECT_FALSE(c.mac_table.static_entries.empty());
}

TEST(ExampleFilesTest, MemifBenchLoads) {
  const ConfigLoad load = LoadConfigFile(ExamplePath("memif-bench.yaml"));
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;
  ASSERT_EQ(c.ports.size(), 2u);
  EXPECT_EQ(c.ports[0].devargs.rfind("net_memif", 0), 0u);
  EXPECT_NE(c.ports[0].devargs.find("role=server"), std::string::npos);
  EXPECT_NE(c.ports[0].devargs.find("socket=/run/aggswitch/bench.sock"), std::string::npos);
  EXPECT_EQ(c.ports[1].devargs, "net_null0,no-rx=1");
  EXPECT_EQ(c.ports[0].access_vlan, 1);
  EXPECT_EQ(c.ports[1].access_vlan, 1);
  ASSERT_EQ(c.workers.size(), 1u);
  EXPECT_EQ(c.workers[0].lcore, 1u);
  ASSERT_EQ(c.mac_table.static_entries.size(), 1u);
  EXPECT_EQ(c.mac_table.static_entries[0].mac.ToString(), "02:00:00:00:00:02");
  EXPECT_EQ(c.mac_table.static_entries[0].vlan, 1);
  EXPECT_EQ(c.mac_table.static_entries[0].port, "sink");
}

TEST(ExampleFilesTest, EveryExampleLoads) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(AGG_CONFIG_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    names.push_back(entry.path().filename().string());
    const ConfigLoad load = LoadConfigFile(entry.path().string());
    EXPECT_TRUE(load.ok()) << entry.path() << Dump(load);
  }
  std::sort(names.begin(), names.end());
  // At least these; a file added later is loaded above without a change here.
  for (const char* name : {"agg-bench.yaml", "default.yaml", "memif-bench.yaml", "tor-leaf.yaml",
                           "tree-leaf-a.yaml", "tree-leaf-b.yaml", "tree-spine.yaml"}) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), name)) << name;
  }
}

// The three tree files describe one job on a 2-leaf + spine tree; the files
// must agree on node ids, addresses and the key.
TEST(ExampleFilesTest, TreeFilesDescribeOneJob) {
  const ConfigLoad leaf_a = LoadConfigFile(ExamplePath("tree-leaf-a.yaml"));
  const ConfigLoad leaf_b = LoadConfigFile(ExamplePath("tree-leaf-b.yaml"));
  const ConfigLoad spine = LoadConfigFile(ExamplePath("tree-spine.yaml"));
  ASSERT_TRUE(leaf_a.ok()) << Dump(leaf_a);
  ASSERT_TRUE(leaf_b.ok()) << Dump(leaf_b);
  ASSERT_TRUE(spine.ok()) << Dump(spine);

  const AggregationConfig& root = spine.config.aggregation;
  ASSERT_TRUE(root.address);
  EXPECT_EQ(root.address->prefix.ip.ToString(), "10.0.9.1");
  ASSERT_EQ(root.jobs.size(), 1u);
  const AggregationJobConfig& top = root.jobs[0];
  EXPECT_EQ(top.id, 7u);
  EXPECT_FALSE(top.upstream) << "the spine is the root";
  EXPECT_TRUE(top.node_ids.empty());
  ASSERT_EQ(top.switches.size(), 2u);
  EXPECT_EQ(top.members, 2);
  EXPECT_EQ(top.MemberNodeIds(), std::vector<uint16_t>({100, 101}));
  ASSERT_TRUE(top.tan);
  EXPECT_EQ(top.tan->strategy, TanStrategy::kFixed);
  ASSERT_EQ(top.tan->candidates.size(), 1u);
  EXPECT_EQ(top.tan->candidates[0].address.ToString(), "10.0.9.50");
  EXPECT_EQ(top.tan->candidates[0].hops, 1);
  EXPECT_EQ(root.bypass.subswitch, SubswitchEntries::kNodes);
  EXPECT_GT(root.timeout_ms, 0u);

  std::vector<uint16_t> workers;
  for (size_t i = 0; i < 2; ++i) {
    const ConfigLoad& leaf = i == 0 ? leaf_a : leaf_b;
    SCOPED_TRACE(leaf.source_name);
    const AggregationConfig& agg = leaf.config.aggregation;
    ASSERT_TRUE(agg.address);
    EXPECT_EQ(agg.address->prefix.ip.ToString(), i == 0 ? "10.0.9.11" : "10.0.9.12");
    EXPECT_EQ(agg.address->vlan, 10);
    EXPECT_EQ(agg.timeout_ms, 20u);
    EXPECT_LT(agg.timeout_ms, root.timeout_ms) << "the spine waits longer than its leaves";
    ASSERT_EQ(agg.jobs.size(), 1u);
    const AggregationJobConfig& job = agg.jobs[0];
    EXPECT_EQ(job.id, top.id);
    EXPECT_EQ(job.key, top.key);
    EXPECT_EQ(job.nodes, 3);
    EXPECT_EQ(job.members, 4);
    EXPECT_TRUE(job.switches.empty());
    EXPECT_FALSE(job.tan);
    ASSERT_TRUE(job.upstream);
    EXPECT_EQ(job.upstream->address, root.address->prefix.ip);
    EXPECT_EQ(job.upstream->port, root.udp_port);
    EXPECT_EQ(job.upstream->vlan, 10);
    // The spine knows this leaf by its upstream.node and covers its workers.
    const ChildSwitchConfig& child = top.switches[i];
    EXPECT_EQ(job.upstream->node, i == 0 ? 100 : 101);
    EXPECT_EQ(child.node, job.upstream->node);
    EXPECT_EQ(child.covers, job.node_ids);
    EXPECT_EQ(job.MemberNodeIds(), job.node_ids);
    workers.insert(workers.end(), job.node_ids.begin(), job.node_ids.end());
  }
  EXPECT_EQ(workers, std::vector<uint16_t>({0, 1, 2, 3, 4, 5, 6, 7}));

  // Three processes on one host: nothing they would share.
  const Config* all[] = {&leaf_a.config, &leaf_b.config, &spine.config};
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      EXPECT_NE(all[i]->eal.file_prefix, all[j]->eal.file_prefix);
      EXPECT_NE(all[i]->http.listen, all[j]->http.listen);
      EXPECT_NE(all[i]->switch_.mac, all[j]->switch_.mac);
      EXPECT_NE(all[i]->switch_.addresses[0].prefix.ip, all[j]->switch_.addresses[0].prefix.ip);
      for (const PortConfig& a : all[i]->ports) {
        for (const PortConfig& b : all[j]->ports)
          EXPECT_NE(a.devargs.substr(a.devargs.find("iface=")),
                    b.devargs.substr(b.devargs.find("iface=")));
      }
    }
  }
}

// --- Round trips -----------------------------------------------------------------

TEST(LoaderTest, ReadsEveryField) {
  const ConfigLoad load = Load(R"yaml(eal:
  lcores: "(0-1)@0,2-3"
  main_lcore: 1
  memory_mb: 4096
  hugepages: yes
  pci: true
  file_prefix: rt_1
  telemetry: false
  args: ["--log-level=8", "--huge-unlink"]
switch:
  name: rt-switch
  mac: 02:11:22:33:44:55
  addresses:
    - 192.168.1.1
    - 10.1.0.1/16
    - {address: 10.2.0.1/24, vlan: 30}
ports:
  - name: up
    devargs: "0000:01:00.0"
    trunk: [30, 40]
    native: 50
    rx_descriptors: 512
    tx_descriptors: 256
    mtu: 9000
  - name: down.1
    devargs: net_null0,no-rx=1
    access: 40
workers:
  - lcore: 0
    rx: ["up:1", {port: down.1, queue: 0}]
  - lcore: 2
    rx: [up, {port: up, queue: 2}]
mac_table:
  size: 1024
  aging_seconds: 0
  static:
    - {mac: "02:00:00:00:00:01", vlan: 50, port: up}
    - mac: 02:00:00:00:00:02
      port: down.1
      vlan: 40
mempool:
  mbufs: 4095
  cache: 0
http:
  listen: 0.0.0.0:8080
  token_file: /etc/aggswitch/api.token
  protect_reads: true
  allowed_hosts: [switch1.rack4.example, localhost.localdomain]
  threads: 16
  request_timeout_ms: 2500
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;

  EXPECT_EQ(c.eal.lcores, "(0-1)@0,2-3");
  EXPECT_EQ(c.eal.main_lcore, 1u);
  EXPECT_EQ(c.eal.memory_mb, 4096u);
  EXPECT_TRUE(c.eal.hugepages);
  EXPECT_TRUE(c.eal.pci);
  EXPECT_EQ(c.eal.file_prefix, "rt_1");
  EXPECT_FALSE(c.eal.telemetry);
  EXPECT_EQ(c.eal.args, std::vector<std::string>({"--log-level=8", "--huge-unlink"}));
  EXPECT_EQ(c.eal.loc.line, 2);

  EXPECT_EQ(c.switch_.name, "rt-switch");
  EXPECT_EQ(c.switch_.mac.ToString(), "02:11:22:33:44:55");
  ASSERT_EQ(c.switch_.addresses.size(), 3u);
  EXPECT_EQ(c.switch_.addresses[0].prefix.ToString(), "192.168.1.1/32");
  EXPECT_EQ(c.switch_.addresses[0].vlan, 0);
  EXPECT_EQ(c.switch_.addresses[0].loc.line, 14);
  EXPECT_EQ(c.switch_.addresses[1].prefix.ToString(), "10.1.0.1/16");
  EXPECT_EQ(c.switch_.addresses[1].vlan, 0);
  EXPECT_EQ(c.switch_.addresses[2].prefix.ToString(), "10.2.0.1/24");
  EXPECT_EQ(c.switch_.addresses[2].vlan, 30);

  ASSERT_EQ(c.ports.size(), 2u);
  const PortConfig& up = c.ports[0];
  EXPECT_EQ(up.name, "up");
  EXPECT_EQ(up.devargs, "0000:01:00.0");
  EXPECT_EQ(up.mode, VlanMode::kTrunk);
  EXPECT_EQ(up.trunk_vlans, std::vector<uint16_t>({30, 40}));
  EXPECT_EQ(up.native_vlan, 50);
  EXPECT_EQ(up.rx_descriptors, 512);
  EXPECT_EQ(up.tx_descriptors, 256);
  EXPECT_EQ(up.mtu, 9000);
  EXPECT_EQ(up.loc.line, 18);
  EXPECT_EQ(up.loc.column, 5);
  const PortConfig& down = c.ports[1];
  EXPECT_EQ(down.name, "down.1");
  EXPECT_EQ(down.devargs, "net_null0,no-rx=1");
  EXPECT_EQ(down.mode, VlanMode::kAccess);
  EXPECT_EQ(down.access_vlan, 40);
  EXPECT_FALSE(down.native_vlan.has_value());
  EXPECT_EQ(down.rx_descriptors, 1024);
  EXPECT_EQ(down.mtu, 1500);

  ASSERT_EQ(c.workers.size(), 2u);
  EXPECT_EQ(c.workers[0].lcore, 0u);
  ASSERT_EQ(c.workers[0].rx.size(), 2u);
  EXPECT_EQ(c.workers[0].rx[0].port, "up");
  EXPECT_EQ(c.workers[0].rx[0].queue, 1);
  EXPECT_EQ(c.workers[0].rx[1].port, "down.1");
  EXPECT_EQ(c.workers[0].rx[1].queue, 0);
  EXPECT_EQ(c.workers[0].rx[1].loc.line, 30);
  EXPECT_EQ(c.workers[1].lcore, 2u);
  ASSERT_EQ(c.workers[1].rx.size(), 2u);
  EXPECT_EQ(c.workers[1].rx[0].queue, 0);
  EXPECT_EQ(c.workers[1].rx[1].queue, 2);
  EXPECT_EQ(c.RxQueueCount("up"), 3);
  EXPECT_EQ(c.RxQueueCount("down.1"), 1);

  EXPECT_EQ(c.mac_table.size, 1024u);
  EXPECT_EQ(c.mac_table.aging_seconds, 0u);
  ASSERT_EQ(c.mac_table.static_entries.size(), 2u);
  EXPECT_EQ(c.mac_table.static_entries[0].mac.ToString(), "02:00:00:00:00:01");
  EXPECT_EQ(c.mac_table.static_entries[0].vlan, 50);
  EXPECT_EQ(c.mac_table.static_entries[0].port, "up");
  EXPECT_EQ(c.mac_table.static_entries[1].mac.ToString(), "02:00:00:00:00:02");
  EXPECT_EQ(c.mac_table.static_entries[1].vlan, 40);
  EXPECT_EQ(c.mac_table.static_entries[1].port, "down.1");
  EXPECT_EQ(c.mac_table.static_entries[1].loc.line, 38);

  EXPECT_EQ(c.mempool.mbufs, 4095u);
  EXPECT_EQ(c.mempool.cache, 0u);
  EXPECT_EQ(c.http.listen, "0.0.0.0:8080");
  EXPECT_EQ(c.http.token_file, "/etc/aggswitch/api.token");
  EXPECT_TRUE(c.http.protect_reads);
  EXPECT_EQ(c.http.allowed_hosts,
            std::vector<std::string>({"switch1.rack4.example", "localhost.localdomain"}));
  EXPECT_EQ(c.http.threads, 16u);
  EXPECT_EQ(c.http.request_timeout_ms, 2500u);

  EXPECT_EQ(c.LocOf("ports[0].trunk[1]").line, 20);
  EXPECT_EQ(c.LocOf("ports[0].trunk[1]").column, 17);
  EXPECT_EQ(c.LocOf("http.listen").line, 45);
}

TEST(LoaderTest, MinimalConfigGetsEveryDefault) {
  const ConfigLoad load = Load("ports: [{name: p0, devargs: net_null0}]\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;
  const Config defaults;
  EXPECT_EQ(c.eal.lcores, defaults.eal.lcores);
  EXPECT_EQ(c.eal.memory_mb, defaults.eal.memory_mb);
  EXPECT_EQ(c.eal.file_prefix, defaults.eal.file_prefix);
  EXPECT_EQ(c.switch_.mac, defaults.switch_.mac);
  EXPECT_EQ(c.ports[0].mode, VlanMode::kAccess);
  EXPECT_EQ(c.ports[0].access_vlan, 1);
  EXPECT_EQ(c.ports[0].rx_descriptors, 1024);
  EXPECT_EQ(c.mac_table.size, defaults.mac_table.size);
  EXPECT_EQ(c.mempool.mbufs, defaults.mempool.mbufs);
  EXPECT_EQ(c.http.listen, defaults.http.listen);
}

TEST(LoaderTest, EmptySectionsMeanDefaults) {
  const ConfigLoad load = Load(R"yaml(eal:
switch:
ports:
  - name: p0
    devargs: net_null0
workers:
mac_table:
mempool:
http:
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.workers.size(), 1u);
}

TEST(LoaderTest, DerivesOneWorkerWhenNoneAreGiven) {
  const ConfigLoad load = Load(R"yaml(eal: {lcores: "(2-3)@0,5,4@(1,2)", main_lcore: 2}
ports:
  - {name: p0, devargs: net_null0}
  - {name: p1, devargs: net_null1}
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  ASSERT_EQ(load.config.workers.size(), 1u);
  const WorkerConfig& worker = load.config.workers[0];
  EXPECT_EQ(worker.lcore, 3u);
  ASSERT_EQ(worker.rx.size(), 2u);
  EXPECT_EQ(worker.rx[0].port, "p0");
  EXPECT_EQ(worker.rx[1].port, "p1");
  EXPECT_EQ(worker.rx[0].queue, 0);
  EXPECT_EQ(worker.rx[1].queue, 0);
}

TEST(LoaderTest, RxItemForms) {
  const ConfigLoad load = Load(R"yaml(eal: {lcores: "0-2"}
ports:
  - {name: a.b-c_1, devargs: net_null0}
  - {name: p1, devargs: net_null1}
workers:
  - lcore: 1
    rx:
      - a.b-c_1
      - a.b-c_1:1
      - {port: p1}
  - lcore: 2
    rx:
      - {port: p1, queue: 1}
      - "a.b-c_1:2"
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const auto& w = load.config.workers;
  ASSERT_EQ(w.size(), 2u);
  ASSERT_EQ(w[0].rx.size(), 3u);
  EXPECT_EQ(w[0].rx[0].port, "a.b-c_1");
  EXPECT_EQ(w[0].rx[0].queue, 0);
  EXPECT_EQ(w[0].rx[1].port, "a.b-c_1");
  EXPECT_EQ(w[0].rx[1].queue, 1);
  EXPECT_EQ(w[0].rx[2].port, "p1");
  EXPECT_EQ(w[0].rx[2].queue, 0);
  EXPECT_EQ(w[0].rx[2].loc.line, 10);
  ASSERT_EQ(w[1].rx.size(), 2u);
  EXPECT_EQ(w[1].rx[0].port, "p1");
  EXPECT_EQ(w[1].rx[0].queue, 1);
  EXPECT_EQ(w[1].rx[1].queue, 2);
}

TEST(LoaderTest, AddressForms) {
  const ConfigLoad load = Load(R"yaml(switch:
  addresses:
    - 10.0.0.1
    - 10.0.1.1/24
    - {address: 10.0.2.1/24, vlan: 2}
    - address: 10.0.3.1
ports:
  - {name: p0, devargs: net_null0, trunk: [1, 2]}
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const auto& a = load.config.switch_.addresses;
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].prefix.ToString(), "10.0.0.1/32");
  EXPECT_EQ(a[0].vlan, 0);
  EXPECT_EQ(a[1].prefix.ToString(), "10.0.1.1/24");
  EXPECT_EQ(a[1].vlan, 0);
  EXPECT_EQ(a[2].prefix.ToString(), "10.0.2.1/24");
  EXPECT_EQ(a[2].vlan, 2);
  EXPECT_EQ(a[3].prefix.ToString(), "10.0.3.1/32");
  EXPECT_EQ(a[3].vlan, 0);
  EXPECT_EQ(a[3].loc.line, 6);
}

TEST(LoaderTest, BooleanSpellings) {
  for (const char* yes : {"true", "True", "yes", "on", "y"}) {
    const ConfigLoad load =
        Load(std::string("eal: {pci: ") + yes + "}\nports: [{name: p0, devargs: d}]\n");
    ASSERT_TRUE(load.ok()) << yes << Dump(load);
    EXPECT_TRUE(load.config.eal.pci) << yes;
  }
  for (const char* no : {"false", "no", "off", "n"}) {
    const ConfigLoad load =
        Load(std::string("eal: {telemetry: ") + no + "}\nports: [{name: p0, devargs: d}]\n");
    ASSERT_TRUE(load.ok()) << no << Dump(load);
    EXPECT_FALSE(load.config.eal.telemetry) << no;
  }
}

TEST(LoaderTest, StaticEntryVlanDefaultsToOne) {
  const ConfigLoad load = Load(R"yaml(ports: [{name: p0, devargs: d}]
mac_table:
  static: [{mac: "02:00:00:00:00:09", port: p0}]
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.mac_table.static_entries[0].vlan, 1);
}

// --- Error format ------------------------------------------------------------------

TEST(LoaderErrorTest, FormatMatchesTheDocumentedExample) {
  const ConfigLoad load = LoadConfigText(R"yaml(# Line 1.
eal:
  lcores: "0,1"
switch:
  name: s
ports:
  - name: p0
    devargs: net_null0
    access: 10
  - name: p1
    devargs: net_null1
    access: 5000
)yaml",
                                         "cfg.yaml");
  EXPECT_EQ(load.FormatErrors(),
            "cfg.yaml:12:13: ports[1].access: expected a VLAN id 1..4094, got \"5000\"");
}

TEST(LoaderErrorTest, FiveIndependentMistakesGiveExactlyFiveErrors) {
  const ConfigLoad load = Load(R"yaml(rolle: leaf
eal:
  lcores: "0-2"
ports:
  - name: p0
    devargs: net_null0
    mtu: abc
  - name: p1
    devargs: net_null1
    access: 5000
workers:
  - lcore: 0
    rx: [p0]
  - lcore: 2
    rx: [p1]
mac_table:
  static:
    - {mac: "02:00:00:00:00:01", vlan: 1, port: p9}
)yaml");
  ASSERT_EQ(load.errors.size(), 5u) << Dump(load);
  EXPECT_EQ(Paths(load),
            std::vector<std::string>({"rolle", "ports[0].mtu", "ports[1].access",
                                      "workers[0].lcore", "mac_table.static[0].port"}));
  std::vector<int> lines;
  for (const ConfigError& e : load.errors) lines.push_back(e.loc.line);
  EXPECT_EQ(lines, std::vector<int>({1, 7, 10, 12, 18}));
  EXPECT_NE(load.errors[1].message.find("expected an unsigned integer, got \"abc\""),
            std::string::npos);
}

TEST(LoaderErrorTest, ErrorsComeInFileOrder) {
  const ConfigLoad load = Load(R"yaml(http: {listen: nowhere}
ports:
  - {name: p0, devargs: d, mtu: 1}
eal: {memory_mb: 1}
)yaml");
  EXPECT_EQ(Paths(load),
            std::vector<std::string>({"http.listen", "ports[0].mtu", "eal.memory_mb"}));
}

TEST(LoaderErrorTest, YamlSyntaxErrorIsOneErrorWithItsPosition) {
  const ConfigLoad load = Load("ports:\n  - name: p0\n    devargs: [net_null0\n");
  ASSERT_EQ(load.errors.size(), 1u) << Dump(load);
  EXPECT_EQ(load.errors[0].path, "");
  EXPECT_GE(load.errors[0].loc.line, 3);
  EXPECT_GE(load.errors[0].loc.column, 1);
  EXPECT_EQ(load.errors[0].message.rfind("invalid YAML: ", 0), 0u);
  EXPECT_EQ(load.FormatErrors().rfind("test.yaml:", 0), 0u);
}

TEST(LoaderErrorTest, BadIndentationIsASyntaxError) {
  const ConfigLoad load = Load("ports:\n  - name: p0\n   devargs: x\n");
  ASSERT_EQ(load.errors.size(), 1u) << Dump(load);
  EXPECT_EQ(load.errors[0].message.rfind("invalid YAML: ", 0), 0u);
  EXPECT_EQ(load.errors[0].loc.line, 3);
}

TEST(LoaderErrorTest, EmptyDocumentNeedsPorts) {
  const ConfigLoad load = Load("");
  ASSERT_EQ(load.errors.size(), 1u) << Dump(load);
  EXPECT_EQ(load.errors[0].path, "ports");
  EXPECT_EQ(load.errors[0].message, "missing required key \"ports\"");
}

TEST(LoaderErrorTest, RootMustBeAMap) {
  EXPECT_TRUE(OneError(Load("- a\n- b\n"), "", 1, "expected a map of sections"));
  EXPECT_TRUE(OneError(Load("hello\n"), "", 1, "got \"hello\""));
}

// --- Shape and type errors -----------------------------------------------------------

TEST(LoaderErrorTest, UnknownKeysListTheExpectedKeys) {
  EXPECT_TRUE(OneError(Load("role: leaf\nports: [{name: p0, devargs: d}]\n"), "role", 1,
                       "unknown key \"role\"; expected one of: eal, switch, ports, workers, "
                       "mac_table, mempool, http"));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    acess: 10\n"),
                       "ports[0].acess", 4,
                       "expected one of: name, devargs, access, trunk, native, rx_descriptors, "
                       "tx_descriptors, mtu, faults"));
  EXPECT_TRUE(OneError(Load("eal: {lcore: 1}\nports: [{name: p0, devargs: d}]\n"), "eal.lcore", 1,
                       "unknown key \"lcore\"; expected one of: lcores, main_lcore"));
  EXPECT_TRUE(OneError(
      Load("ports: [{name: p0, devargs: d}]\nworkers: [{lcore: 1, rx: [{port: p0, q: 1}]}]\n"),
      "workers[0].rx[0].q", 2, "expected one of: port, queue"));
}

TEST(LoaderTest, PortFaults) {
  const ConfigLoad load = Load(R"(ports:
  - name: p0
    devargs: d
    faults: {loss: 0.05, duplicate: 1e-2, reorder: 0.5, delay_us: 40, direction: tx, seed: 7}
  - {name: p1, devargs: d1, faults: {}}
  - {name: p2, devargs: d2}
)");
  ASSERT_TRUE(load.errors.empty()) << Dump(load);
  const auto& ports = load.config.ports;
  ASSERT_TRUE(ports[0].faults.has_value());
  EXPECT_DOUBLE_EQ(ports[0].faults->loss, 0.05);
  EXPECT_DOUBLE_EQ(ports[0].faults->duplicate, 0.01);
  EXPECT_DOUBLE_EQ(ports[0].faults->reorder, 0.5);
  EXPECT_EQ(ports[0].faults->delay_us, 40u);
  EXPECT_EQ(ports[0].faults->direction, FaultDirection::kTx);
  EXPECT_EQ(ports[0].faults->seed, 7u);
  EXPECT_EQ(ports[0].faults->loc.line, 4);
  ASSERT_TRUE(ports[1].faults.has_value());
  EXPECT_EQ(*ports[1].faults, (FaultConfig{.loc = ports[1].faults->loc}));
  EXPECT_FALSE(ports[2].faults.has_value());
}

TEST(LoaderErrorTest, PortFaults) {
  const auto with = [](const std::string& faults) {
    return Load("ports:\n  - name: p0\n    devargs: d\n    faults: " + faults + "\n");
  };
  EXPECT_TRUE(OneError(with("{loss: 1.5}"), "ports[0].faults.loss", 4,
                       "expected a probability from 0 to 1, got \"1.5\""));
  EXPECT_TRUE(OneError(with("{duplicate: -0.1}"), "ports[0].faults.duplicate", 4,
                       "expected a probability from 0 to 1, got \"-0.1\""));
  EXPECT_TRUE(OneError(with("{reorder: lots}"), "ports[0].faults.reorder", 4,
                       "expected a probability from 0 to 1, got \"lots\""));
  EXPECT_TRUE(OneError(with("{loss: nan}"), "ports[0].faults.loss", 4, "got \"nan\""));
  EXPECT_TRUE(OneError(with("{direction: up}"), "ports[0].faults.direction", 4,
                       "expected rx, tx or both, got \"up\""));
  EXPECT_TRUE(OneError(with("{loss: 0.6, reorder: 0.6}"), "ports[0].faults", 4,
                       "expected loss + reorder <= 1"));
  EXPECT_TRUE(OneError(with("{delay_us: 1000001}"), "ports[0].faults.delay_us", 4,
                       "expected microseconds, 0..1000000, got \"1000001\""));
  EXPECT_TRUE(OneError(with("{delay_us: -5}"), "ports[0].faults.delay_us", 4, "got \"-5\""));
  EXPECT_TRUE(OneError(with("{lose: 0.1}"), "ports[0].faults.lose", 4,
                       "expected one of: loss, duplicate, reorder, delay_us, direction, seed"));
  EXPECT_TRUE(OneError(with("0.1"), "ports[0].faults", 4, "expected a map, got \"0.1\""));
}

TEST(LoaderTest, Telemetry) {
  const ConfigLoad load = Load(R"(ports:
  - {name: p0, devargs: d0}
  - {name: up, devargs: d1, role: fabric}
telemetry:
  node_id: 3
  collector: 10.9.0.1:32766
  int_port: 7701
  max_hops: 4
  watch:
    - {name: grads, dst: 10.0.1.0/24, port: 5000, sample: 100, instructions: both}
    - {name: job7, job: 7, instructions: bandwidth}
    - {name: any}
)");
  ASSERT_TRUE(load.errors.empty()) << Dump(load);
  const TelemetryConfig& t = load.config.telemetry;
  EXPECT_EQ(load.config.ports[0].role, PortRole::kEdge);
  EXPECT_EQ(load.config.ports[1].role, PortRole::kFabric);
  EXPECT_EQ(t.node_id, 3u);
  ASSERT_TRUE(t.collector.has_value());
  EXPECT_EQ(t.collector->ToString(), "10.9.0.1:32766");
  EXPECT_EQ(t.int_port, 7701);
  EXPECT_EQ(t.max_hops, 4);
  ASSERT_EQ(t.watch.size(), 3u);
  EXPECT_EQ(t.watch[0].dst->ToString(), "10.0.1.0/24");
  EXPECT_EQ(t.watch[0].port, 5000);
  EXPECT_EQ(t.watch[0].sample, 100u);
  EXPECT_EQ(t.watch[0].instructions, IntInstructions::kBoth);
  EXPECT_EQ(t.watch[1].job, 7u);
  EXPECT_EQ(t.watch[1].instructions, IntInstructions::kBandwidth);
  EXPECT_EQ(t.watch[2].sample, 1u);
  EXPECT_EQ(t.watch[2].instructions, IntInstructions::kLatency);
  EXPECT_FALSE(t.watch[2].src.has_value());
}

TEST(LoaderErrorTest, Telemetry) {
  const std::string ports = "ports: [{name: p0, devargs: d0}]\n";
  const std::string head = ports + "telemetry:\n  node_id: 1\n  collector: 10.9.0.1:32766\n";
  EXPECT_TRUE(OneError(Load(ports + "telemetry:\n  watch: [{name: w}]\n  collector: 1.2.3.4:5\n"),
                       "telemetry.node_id", 3, "expected this switch's INT node id"));
  EXPECT_TRUE(OneError(Load(ports + "telemetry:\n  node_id: 2\n  watch: [{name: w}]\n"),
                       "telemetry.collector", 3, "a watch list is configured"));
  EXPECT_TRUE(OneError(Load(head + "  watch: [{name: w, instructions: jitter}]\n"),
                       "telemetry.watch[0].instructions", 5,
                       "expected latency, bandwidth or both, got \"jitter\""));
  EXPECT_TRUE(OneError(Load(head + "  watch: [{name: w, src: 10.0.0.5/24}]\n"),
                       "telemetry.watch[0].src", 5, "without host bits"));
  EXPECT_TRUE(OneError(Load(head + "  watch: [{name: w, sample: 0}]\n"), "telemetry.watch[0].sample",
                       5, "expected 1 in N datagrams"));
  EXPECT_TRUE(OneError(Load(head + "  watch: [{name: w}, {name: w}]\n"),
                       "telemetry.watch[1].name", 5, "no other entry has"));
  EXPECT_TRUE(OneError(Load(head + "  watch: [{port: 5}]\n"), "telemetry.watch[0].name", 5,
                       "missing"));
  EXPECT_TRUE(OneError(Load(ports + "telemetry:\n  collector: nowhere\n"), "telemetry.collector", 3,
                       "expected the collector's"));
  EXPECT_TRUE(OneError(Load(head + "  max_hops: 0\n"), "telemetry.max_hops", 5, "1..255"));
  EXPECT_TRUE(OneError(Load(head + "  int_port: 47000\n"), "telemetry.int_port", 5,
                       "other than aggregation.udp_port"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d0, role: spine}]\n"), "ports[0].role", 1,
                       "expected edge or fabric, got \"spine\""));
}

TEST(LoaderTest, UplinkGroups) {
  const ConfigLoad load = Load(R"(ports:
  - {name: h0, devargs: d0, access: 10}
  - {name: s1, devargs: d1, trunk: [10, 20], role: fabric, group: spines}
  - {name: s2, devargs: d2, trunk: [10, 20], role: fabric, group: spines}
)");
  ASSERT_TRUE(load.errors.empty()) << Dump(load);
  EXPECT_EQ(load.config.ports[0].group, "");
  EXPECT_EQ(load.config.ports[1].group, "spines");
  EXPECT_EQ(load.config.ports[2].group, "spines");
}

TEST(LoaderErrorTest, UplinkGroups) {
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: s1, devargs: d1, trunk: [10, 20], group: up}\n"
                            "  - {name: s2, devargs: d2, trunk: [10], group: up}\n"),
                       "ports[1].group", 3,
                       "expected the members of group \"up\" to carry the same VLANs the same way, "
                       "got VLANs that differ from ports[0], line 2"));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: s1, devargs: d1, group: up}\n"
                            "  - {name: s2, devargs: d2, access: 20, group: up}\n"),
                       "ports[1].group", 3, "carry the same VLANs"));
  EXPECT_TRUE(OneError(Load("ports: [{name: s1, devargs: d1, group: \"a b\"}]\n"), "ports[0].group",
                       1, "expected a group name of 1..32 characters"));
}

TEST(LoaderErrorTest, RepeatedKey) {
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    name: p1\n"),
                       "ports[0].name", 4, "expected each key once, got \"name\" again"));
}

TEST(LoaderErrorTest, TypeErrorsSayWhatWasFound) {
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, mtu: abc}\n"), "ports[0].mtu", 2,
                       "expected an unsigned integer, got \"abc\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, mtu: -1}\n"), "ports[0].mtu", 2,
                       "expected an unsigned integer, got \"-1\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, mtu: 1.5e3}\n"), "ports[0].mtu", 2,
                       "got \"1.5e3\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, mtu: [1]}\n"), "ports[0].mtu", 2,
                       "expected an unsigned integer, got a list"));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, trunk: {a: 1}}\n"),
                       "ports[0].trunk", 2, "expected a list, got a map"));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, trunk: 10}\n"), "ports[0].trunk", 2,
                       "expected a list, got \"10\""));
  EXPECT_TRUE(OneError(Load("eal: [1]\nports: [{name: p0, devargs: d}]\n"), "eal", 1,
                       "expected a map, got a list"));
  EXPECT_TRUE(OneError(Load("eal: {hugepages: maybe}\nports: [{name: p0, devargs: d}]\n"),
                       "eal.hugepages", 1, "expected true or false, got \"maybe\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: [p0], devargs: d}\n"), "ports[0].name", 2,
                       "expected a string, got a list"));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: }\n"), "ports[0].devargs", 2,
                       "expected a string, got an empty value"));
  EXPECT_TRUE(OneError(Load("switch: {mac: \"02:00:00:00:00\"}\nports: [{name: p0, devargs: d}]\n"),
                       "switch.mac", 1,
                       "expected a MAC address xx:xx:xx:xx:xx:xx, got \"02:00:00:00:00\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\neal: {args: [[a]]}\n"), "eal.args[0]",
                       2, "expected a string, got a list"));
  EXPECT_TRUE(OneError(Load("ports: 3\n"), "ports", 1, "expected a list, got \"3\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - p0\n"), "ports[0]", 2, "expected a map, got \"p0\""));
}

TEST(LoaderErrorTest, NumbersTooLargeForTheFieldNameTheRange) {
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, access: 70000}\n"),
                       "ports[0].access", 2, "expected a VLAN id 1..4094, got \"70000\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, mtu: 65536}\n"), "ports[0].mtu", 2,
                       "expected an MTU 68..9600, got \"65536\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, rx_descriptors: 65536}\n"),
                       "ports[0].rx_descriptors", 2, "expected a power of two 64..16384"));
  EXPECT_TRUE(
      OneError(Load("ports: [{name: p0, devargs: d}]\nmac_table: {size: 99999999999999999999}\n"),
               "mac_table.size", 2, "expected a table size 16..1048576"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\neal: {memory_mb: 4294967296}\n"),
                       "eal.memory_mb", 2, "expected an unsigned integer up to 4294967295"));
}

TEST(LoaderErrorTest, MissingRequiredKeys) {
  EXPECT_TRUE(OneError(Load("eal: {}\n"), "ports", 1, "missing required key \"ports\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - devargs: d\n"), "ports[0].name", 2,
                       "missing required key \"name\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n"), "ports[0].devargs", 2,
                       "missing required key \"devargs\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\nworkers:\n  - rx: [p0]\n"),
                       "workers[0].lcore", 3, "missing required key \"lcore\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\nworkers:\n  - lcore: 1\n"),
                       "workers[0].rx", 3, "missing required key \"rx\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\nworkers:\n  - {lcore: 1, rx: p0}\n"),
                       "workers[0].rx", 3, "expected a list, got \"p0\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\n"
                            "mac_table: {static: [{port: p0}]}\n"),
                       "mac_table.static[0].mac", 2, "missing required key \"mac\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\n"
                            "mac_table: {static: [{mac: \"02:00:00:00:00:01\"}]}\n"),
                       "mac_table.static[0].port", 2, "missing required key \"port\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\n"
                            "workers: [{lcore: 1, rx: [{queue: 0}]}]\n"),
                       "workers[0].rx[0]", 2, "missing required key \"port\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\n"
                            "switch: {addresses: [{vlan: 1}]}\n"),
                       "switch.addresses[0].address", 2, "missing required key \"address\""));
}

TEST(LoaderErrorTest, EmptyValuesPointAtTheirKey) {
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs:\n    mtu: 1500\n"),
                       "ports[0].devargs", 3, "expected a string, got an empty value"));
  // An empty list item has no position of its own: the list's start stands in.
  EXPECT_TRUE(
      OneError(Load("ports:\n  - name: p0\n    devargs: d\n  -\n  - {name: p2, devargs: e}\n"),
               "ports[1]", 2, "expected a map, got an empty value"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\nworkers:\n  -\n"), "workers[0]", 3,
                       "expected a map, got an empty value"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\nmac_table:\n  static:\n    -\n"),
                       "mac_table.static[0]", 4, "expected a map, got an empty value"));
  // An empty section is all defaults; a Validate() finding about it names its key line.
  const ConfigLoad load = Load("ports: [{name: p0, devargs: d}]\neal:\n\nhttp: {listen: x}\n");
  EXPECT_TRUE(OneError(load, "http.listen", 4, "got \"x\""));
  EXPECT_EQ(load.config.eal.loc.line, 2);
}

TEST(LoaderErrorTest, AccessAndTrunkTogether) {
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    access: 1\n"
                            "    trunk: [1, 2]\n"),
                       "ports[0].trunk", 5, "expected exactly one of \"access\" or \"trunk\""));
}

TEST(LoaderErrorTest, MalformedRxItems) {
  const char* ports = "ports: [{name: p0, devargs: d}]\nworkers:\n  - lcore: 1\n    rx:\n";
  EXPECT_TRUE(OneError(Load(std::string(ports) + "      - p0:x\n"), "workers[0].rx[0]", 5,
                       "expected \"port\" or \"port:queue\" with an unsigned queue number, got "
                       "\"p0:x\""));
  EXPECT_TRUE(OneError(Load(std::string(ports) + "      - \"p0:\"\n"), "workers[0].rx[0]", 5,
                       "got \"p0:\""));
  EXPECT_TRUE(OneError(Load(std::string(ports) + "      - p0:70000\n"), "workers[0].rx[0]", 5,
                       "got \"p0:70000\""));
  EXPECT_TRUE(OneError(Load(std::string(ports) + "      - [p0]\n"), "workers[0].rx[0]", 5,
                       "expected \"port\", \"port:queue\" or a map {port, queue}, got a list"));
  EXPECT_TRUE(OneError(Load(std::string(ports) + "      - {port: p0, queue: x}\n"),
                       "workers[0].rx[0]", 5, "expected an unsigned integer, got \"x\""));
}

TEST(LoaderErrorTest, MalformedAddresses) {
  const char* base = "ports: [{name: p0, devargs: d}]\nswitch:\n  addresses:\n";
  EXPECT_TRUE(OneError(Load(std::string(base) + "    - 10.0.0.300/24\n"), "switch.addresses[0]", 4,
                       "expected an IPv4 address \"a.b.c.d\" or \"a.b.c.d/len\", got "
                       "\"10.0.0.300/24\""));
  EXPECT_TRUE(OneError(Load(std::string(base) + "    - 10.0.0.1/33\n"), "switch.addresses[0]", 4,
                       "got \"10.0.0.1/33\""));
  EXPECT_TRUE(OneError(Load(std::string(base) + "    - {address: 10.0.0, vlan: 1}\n"),
                       "switch.addresses[0].address", 4, "got \"10.0.0\""));
  EXPECT_TRUE(OneError(Load(std::string(base) + "    - [10.0.0.1]\n"), "switch.addresses[0]", 4,
                       "expected \"a.b.c.d[/len]\" or a map {address, vlan}, got a list"));
  EXPECT_TRUE(OneError(Load(std::string(base) + "    - {address: 10.0.0.1, vlan: x}\n"),
                       "switch.addresses[0].vlan", 4, "expected an unsigned integer"));
}

// --- One mistake, one error ------------------------------------------------------------

TEST(LoaderErrorTest, AnUnreadableVlanIsReportedOnce) {
  // The static entry in VLAN 10 would not be carried by a port whose access VLAN
  // was replaced; that follows from the first mistake and is not reported.
  EXPECT_TRUE(OneError(Load(R"yaml(ports:
  - {name: p0, devargs: d, access: ten}
mac_table:
  static: [{mac: "02:00:00:00:00:01", vlan: 10, port: p0}]
switch:
  addresses: [{address: 10.0.0.1/24, vlan: 10}]
)yaml"),
                       "ports[0].access", 2, "expected an unsigned integer, got \"ten\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, trunk: [10, x, 20]}\n"),
                       "ports[0].trunk[1]", 2, "got \"x\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: d, trunk: [1], native: z}\n"),
                       "ports[0].native", 2, "got \"z\""));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\n"
                            "mac_table: {static: [{mac: \"02:00:00:00:00:01\", vlan: v, "
                            "port: p0}]}\n"),
                       "mac_table.static[0].vlan", 2, "got \"v\""));
}

TEST(LoaderErrorTest, AMissingPortNameIsReportedOnce) {
  EXPECT_TRUE(OneError(Load("ports:\n  - devargs: d0\n  - {name: p2, devargs: d2}\n"
                            "workers: [{lcore: 1, rx: [p2]}]\n"),
                       "ports[0].name", 2, "missing required key"));
}

TEST(LoaderErrorTest, AWrongPortsSectionIsReportedOnce) {
  EXPECT_TRUE(OneError(Load(R"yaml(ports: {p0: net_null0}
workers: [{lcore: 1, rx: [p0]}]
mac_table: {static: [{mac: "02:00:00:00:00:01", port: p0}]}
switch: {addresses: [{address: 10.0.0.1/24, vlan: 10}]}
)yaml"),
                       "ports", 1, "expected a list, got a map"));
}

TEST(LoaderErrorTest, AWrongEalSectionIsReportedOnce) {
  EXPECT_TRUE(OneError(Load(R"yaml(eal: "0-3"
ports: [{name: p0, devargs: d}]
workers: [{lcore: 3, rx: [p0]}]
)yaml"),
                       "eal", 1, "expected a map, got \"0-3\""));
}

TEST(LoaderErrorTest, UnreadableItemsAreReportedOnce) {
  const ConfigLoad load = Load(
      "ports: [{name: p0, devargs: d}]\n"
      "workers: [{lcore: x, rx: [p0]}, {lcore: y, rx: [p0:1]}]\n"
      "mac_table: {static: [{mac: bad, port: p0}, {mac: bad, port: p0}]}\n");
  EXPECT_EQ(Paths(load),
            std::vector<std::string>({"workers[0].lcore", "workers[1].lcore",
                                      "mac_table.static[0].mac", "mac_table.static[1].mac"}))
      << Dump(load);
}

// --- Validate() findings, located -------------------------------------------------------

TEST(ValidateErrorTest, PortList) {
  EXPECT_TRUE(OneError(Load("eal: {}\nports: []\n"), "ports", 2, "expected 1..64 ports, got none"));
  std::string many = "ports:\n";
  for (int i = 0; i < 65; ++i) {
    many += "  - {name: p" + std::to_string(i) + ", devargs: d" + std::to_string(i) + "}\n";
  }
  EXPECT_TRUE(OneError(Load(many), "ports", 2, "expected 1..64 ports, got 65"));
}

TEST(ValidateErrorTest, PortNamesAndDevargs) {
  EXPECT_TRUE(OneError(Load(R"yaml(ports:
  - {name: p0, devargs: d0}
  - {name: p0, devargs: d1}
)yaml"),
                       "ports[1].name", 3,
                       "expected a unique port name, got \"p0\" again "
                       "(also ports[0], line 2)"));
  EXPECT_TRUE(OneError(Load(R"yaml(ports:
  - {name: p0, devargs: d0}
  - name: p1
    devargs: d0
)yaml"),
                       "ports[1].devargs", 4, "expected unique devargs, got \"d0\" again"));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: \"p 0\", devargs: d}\n"), "ports[0].name", 2,
                       "expected a port name of 1..32 characters from [A-Za-z0-9_.-], got "
                       "\"p 0\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - {name: p0, devargs: \"\"}\n"), "ports[0].devargs", 2,
                       "expected non-empty DPDK devargs"));
}

TEST(ValidateErrorTest, Vlans) {
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    access: 0\n"),
                       "ports[0].access", 4, "expected a VLAN id 1..4094, got \"0\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    trunk:\n      - 10\n"
                            "      - 4095\n"),
                       "ports[0].trunk[1]", 6, "expected a VLAN id 1..4094, got \"4095\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    trunk: [1]\n"
                            "    native: 5000\n"),
                       "ports[0].native", 5, "got \"5000\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    trunk: []\n"),
                       "ports[0].trunk", 4,
                       "expected a non-empty list of VLAN ids, got an empty list"));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    trunk:\n"), "ports[0].trunk",
                       4, "got an empty list"));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    trunk: [10, 20, 10]\n"),
                       "ports[0].trunk[2]", 4, "expected each VLAN once, got \"10\" again"));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    access: 3\n"
                            "    native: 3\n"),
                       "ports[0].native", 5, "expected \"native\" only on a trunk port"));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    native: 3\n"),
                       "ports[0].native", 4, "only on a trunk port"));
  EXPECT_TRUE(Load("ports:\n  - {name: p0, devargs: d, trunk: [10], native: 10}\n").ok());
}

TEST(ValidateErrorTest, PortNumbers) {
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    rx_descriptors: 1000\n"),
                       "ports[0].rx_descriptors", 4,
                       "expected a power of two 64..16384, got \"1000\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    tx_descriptors: 32\n"),
                       "ports[0].tx_descriptors", 4, "got \"32\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    tx_descriptors: 32768\n"),
                       "ports[0].tx_descriptors", 4, "got \"32768\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    mtu: 67\n"), "ports[0].mtu",
                       4, "expected an MTU 68..9600, got \"67\""));
  EXPECT_TRUE(OneError(Load("ports:\n  - name: p0\n    devargs: d\n    mtu: 9601\n"),
                       "ports[0].mtu", 4, "got \"9601\""));
}

constexpr const char* kTwoPorts = R"yaml(eal: {lcores: "0-3"}
ports:
  - {name: p0, devargs: d0}
  - {name: p1, devargs: d1}
workers:
)yaml";  // workers follow on line 6

TEST(ValidateErrorTest, WorkerRxReferences) {
  const std::string base = kTwoPorts;
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1, p9]\n"), "workers[0].rx[2]", 7,
                       "expected one of the ports p0, p1, got \"p9\""));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1]\n  - lcore: 2\n"
                                   "    rx: [\"p1:0\"]\n"),
                       "workers[1].rx[0]", 9,
                       "expected each RX queue to be polled by one worker, got p1:0 again (also "
                       "workers[0].rx[1], line 7)"));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0]\n"), "ports[1]", 4,
                       "expected a worker to poll port \"p1\", got none"));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1, \"p1:16\"]\n"),
                       "workers[0].rx[2]", 7, "expected an RX queue 0..15, got \"16\""));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1, {port: p1, queue: 16}]\n"),
                       "workers[0].rx[2]", 7, "got \"16\""));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1, \"p1:2\"]\n"), "ports[1]", 4,
                       "expected the polled RX queues of port \"p1\" to be contiguous from 0, "
                       "got 0,2"));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 1\n    rx: [p0, p1]\n  - lcore: 2\n    rx: []\n"),
                       "workers[1].rx", 9, "expected at least one RX queue to poll, got none"));
}

TEST(ValidateErrorTest, WorkerLcores) {
  const std::string base = kTwoPorts;
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 0\n    rx: [p0, p1]\n"), "workers[0].lcore", 6,
                       "expected an lcore other than eal.main_lcore, got \"0\""));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 7\n    rx: [p0, p1]\n"), "workers[0].lcore", 6,
                       "expected an lcore listed in eal.lcores \"0-3\", got \"7\""));
  EXPECT_TRUE(OneError(Load(base + "  - lcore: 2\n    rx: [p0]\n  - lcore: 2\n    rx: [p1]\n"),
                       "workers[1].lcore", 8,
                       "expected a different lcore for each worker, got \"2\" again (also "
                       "workers[0], line 6)"));
}

TEST(ValidateErrorTest, TooManyWorkers) {
  std::string yaml = "eal: {lcores: \"0-128\"}\nports:\n";
  for (int p = 0; p < 8; ++p)
    yaml += "  - {name: p" + std::to_string(p) + ", devargs: d" + std::to_string(p) + "}\n";
  yaml += "workers:\n";  // line 11
  for (unsigned w = 0; w <= kMaxWorkers; ++w) {
    yaml += "  - {lcore: " + std::to_string(w + 1) + ", rx: [\"p" + std::to_string(w / 16) + ":" +
            std::to_string(w % 16) + "\"]}\n";
  }
  EXPECT_TRUE(OneError(Load(yaml), "workers", 12, "expected at most 127 workers, got 128"));
}

TEST(ValidateErrorTest, NoLcoreLeftForTheDefaultWorker) {
  EXPECT_TRUE(OneError(
      Load("eal: {lcores: \"3\", main_lcore: 3}\nports: [{name: p0, devargs: d}]\n"), "workers", 0,
      "expected at least one worker, got none (eal.lcores \"3\" has no lcore "
      "besides eal.main_lcore 3)"));
}

TEST(ValidateErrorTest, Eal) {
  const std::string ports = "ports: [{name: p0, devargs: d}]\n";
  EXPECT_TRUE(OneError(Load("eal:\n  lcores: \"0,x\"\n" + ports), "eal.lcores", 2,
                       "expected a comma-separated lcore list"));
  EXPECT_TRUE(OneError(Load("eal:\n  lcores: \"1-2\"\n  main_lcore: 0\n" + ports), "eal.main_lcore",
                       3, "expected an lcore listed in eal.lcores \"1-2\""));
  EXPECT_TRUE(OneError(Load("eal:\n  memory_mb: 63\n" + ports), "eal.memory_mb", 2,
                       "expected at least 64 MB, got \"63\""));
  EXPECT_TRUE(OneError(Load("eal:\n  file_prefix: a/b\n" + ports), "eal.file_prefix", 2,
                       "expected a non-empty name from [A-Za-z0-9_-], got \"a/b\""));
}

TEST(ValidateErrorTest, Switch) {
  const std::string ports = "ports: [{name: p0, devargs: d, trunk: [10, 20]}]\n";
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  mac: 01:00:5e:00:00:01\n"), "switch.mac", 3,
                       "expected a unicast, non-zero MAC address, got \"01:00:5e:00:00:01\""));
  EXPECT_TRUE(
      OneError(Load(ports + "switch:\n  mac: 00:00:00:00:00:00\n"), "switch.mac", 3, "non-zero"));
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  name: \"\"\n"), "switch.name", 3, "non-empty"));
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  addresses:\n    - {address: 10.0.0.1/24, "
                                    "vlan: 30}\n"),
                       "switch.addresses[0].vlan", 4,
                       "expected a VLAN that some port carries, got \"30\""));
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  addresses:\n    - {address: 10.0.0.1/24, "
                                    "vlan: 4095}\n"),
                       "switch.addresses[0].vlan", 4, "expected a VLAN id 1..4094"));
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  addresses:\n    - 10.0.0.1/24\n"
                                    "    - {address: 10.0.0.1/16, vlan: 10}\n"),
                       "switch.addresses[1].address", 5,
                       "expected each address once per VLAN, got \"10.0.0.1\" again (also "
                       "switch.addresses[0], line 4)"));
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  addresses:\n    - 10.0.0.1/24\n"
                                    "    - 10.0.0.1\n"),
                       "switch.addresses[1]", 5, "again"));
  EXPECT_TRUE(Load(ports + "switch:\n  addresses:\n    - {address: 10.0.0.1/24, vlan: 10}\n"
                           "    - {address: 10.0.0.1/24, vlan: 20}\n")
                  .ok());
  EXPECT_TRUE(OneError(Load(ports + "switch:\n  addresses:\n    - 10.0.0.0/24\n"),
                       "switch.addresses[0]", 4,
                       "expected a unicast host address, got \"10.0.0.0/24\""));
}

TEST(ValidateErrorTest, MacTable) {
  const std::string ports = R"yaml(ports:
  - {name: p0, devargs: d0, access: 10}
  - {name: p1, devargs: d1, trunk: [10, 20], native: 1}
mac_table:
)yaml";  // mac_table keys from line 5
  EXPECT_TRUE(OneError(Load(ports + "  static:\n    - {mac: 02:00:00:00:00:01, port: p2}\n"),
                       "mac_table.static[0].port", 6,
                       "expected one of the ports p0, p1, got \"p2\""));
  EXPECT_TRUE(OneError(Load(ports + "  static:\n    - mac: 02:00:00:00:00:01\n"
                                    "      port: p0\n      vlan: 20\n"),
                       "mac_table.static[0].vlan", 8,
                       "expected a VLAN that port \"p0\" carries (10), got \"20\""));
  EXPECT_TRUE(OneError(Load(ports + "  static:\n    - {mac: 02:00:00:00:00:01, port: p1, "
                                    "vlan: 30}\n"),
                       "mac_table.static[0].vlan", 6, "port \"p1\" carries (1, 10, 20)"));
  EXPECT_TRUE(
      OneError(Load(ports + "  static:\n    - {mac: 02:00:00:00:00:01, port: p0, vlan: 10}\n"
                            "    - {mac: 02:00:00:00:00:01, port: p1, vlan: 10}\n"),
               "mac_table.static[1]", 7,
               "expected each (mac, vlan) once, got 02:00:00:00:00:01 vlan 10 again"));
  EXPECT_TRUE(Load(ports + "  static:\n    - {mac: 02:00:00:00:00:01, port: p0, vlan: 10}\n"
                           "    - {mac: 02:00:00:00:00:01, port: p1, vlan: 20}\n")
                  .ok());
  EXPECT_TRUE(
      OneError(Load(ports + "  static:\n    - {mac: 03:00:00:00:00:01, port: p0, vlan: 10}\n"),
               "mac_table.static[0].mac", 6, "expected a unicast, non-zero MAC"));
  EXPECT_TRUE(OneError(Load(ports + "  static:\n    - {mac: 02:00:00:00:00:01, port: p0, "
                                    "vlan: 5000}\n"),
                       "mac_table.static[0].vlan", 6, "expected a VLAN id 1..4094, got \"5000\""));
  EXPECT_TRUE(OneError(Load(ports + "  size: 8\n"), "mac_table.size", 5,
                       "expected a table size 16..1048576, got \"8\""));
  EXPECT_TRUE(OneError(Load(ports + "  aging_seconds: 1000001\n"), "mac_table.aging_seconds", 5,
                       "expected 0..1000000 seconds"));

  std::string full = ports + "  size: 16\n  static:\n";  // static list from line 7
  for (int i = 0; i < 17; ++i) {
    full += "    - {mac: 02:00:00:00:00:" + std::to_string(10 + i) + ", port: p0, vlan: 10}\n";
  }
  EXPECT_TRUE(OneError(Load(full), "mac_table.static", 7,
                       "expected at most 16 static entries (mac_table.size), got 17"));
}

TEST(ValidateErrorTest, MempoolAndHttp) {
  const std::string ports = "ports: [{name: p0, devargs: d}]\n";
  EXPECT_TRUE(OneError(Load(ports + "mempool:\n  mbufs: 1000\n"), "mempool.mbufs", 3,
                       "expected 1023..1048575 mbufs, got \"1000\""));
  EXPECT_TRUE(OneError(Load(ports + "mempool:\n  cache: 1024\n"), "mempool.cache", 3,
                       "expected a cache size 0..512, got \"1024\""));
  EXPECT_TRUE(OneError(Load(ports + "http:\n  listen: localhost:9477\n"), "http.listen", 3,
                       "expected \"host:port\" with an IPv4 host and a port 1..65535, got "
                       "\"localhost:9477\""));
}

// --- The aggregation section ------------------------------------------------------

TEST(AggregationLoaderTest, ReadsEveryField) {
  const ConfigLoad load = Load(R"yaml(ports: [{name: p0, devargs: d, trunk: [10, 20]}]
aggregation:
  address: {address: 10.0.20.250, vlan: 20}
  udp_port: 47001
  in_band_registration: false
  slots: 65536
  max_fan_in: 512
  max_jobs: 8
  stale_slot_ms: 2500
  upstreams:
    - {address: 10.0.20.1}
    - {address: 10.0.20.2, port: 47002, vlan: 10}
  jobs:
    - {id: 7, key: 0x00c0ffee00000007, members: 4}
    - id: 4294967295
      key: 18446744073709551615
      members: 512
      nodes: 3
      ordered: true
      upstream: {address: 10.0.20.1, node: 600}
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const AggregationConfig& a = load.config.aggregation;
  ASSERT_TRUE(a.address);
  EXPECT_EQ(a.address->prefix.ToString(), "10.0.20.250/32");
  EXPECT_EQ(a.address->vlan, 20);
  EXPECT_EQ(a.address->loc.line, 3);
  EXPECT_EQ(a.udp_port, 47001);
  EXPECT_FALSE(a.in_band_registration);
  EXPECT_EQ(a.slots, 65536u);
  EXPECT_EQ(a.max_fan_in, 512);
  EXPECT_EQ(a.max_jobs, 8u);
  EXPECT_EQ(a.stale_slot_ms, 2500u);
  ASSERT_EQ(a.jobs.size(), 2u);
  EXPECT_EQ(a.jobs[0].id, 7u);
  EXPECT_EQ(a.jobs[0].key, 0x00c0ffee00000007ull);
  EXPECT_EQ(a.jobs[0].members, 4);
  EXPECT_EQ(a.jobs[0].nodes, 1);
  EXPECT_FALSE(a.jobs[0].ordered);
  EXPECT_EQ(a.jobs[0].loc.line, 14);
  ASSERT_EQ(a.upstreams.size(), 2u);
  EXPECT_EQ(a.upstreams[0].address.ToString(), "10.0.20.1");
  EXPECT_EQ(a.upstreams[0].port, kDefaultAggregationUdpPort);
  EXPECT_EQ(a.upstreams[0].vlan, 0);
  EXPECT_EQ(a.upstreams[1].port, 47002);
  EXPECT_EQ(a.upstreams[1].vlan, 10);
  EXPECT_EQ(a.upstreams[1].loc.line, 12);
  EXPECT_EQ(a.jobs[1].id, 4294967295u);
  EXPECT_EQ(a.jobs[1].key, 18446744073709551615ull);
  EXPECT_EQ(a.jobs[1].members, 512);
  EXPECT_EQ(a.jobs[1].nodes, 3);
  EXPECT_TRUE(a.jobs[1].ordered);
  ASSERT_TRUE(a.jobs[1].upstream);
  EXPECT_EQ(a.jobs[1].upstream->node, 600);
  // The switch answers ARP and ping on the aggregation address.
  ASSERT_EQ(load.config.switch_.addresses.size(), 1u);
  EXPECT_TRUE(load.config.switch_.addresses[0].from_aggregation);
  EXPECT_EQ(load.config.switch_.addresses[0].vlan, 20);
}

TEST(AggregationLoaderTest, DefaultsAndTheScalarAddressForm) {
  ConfigLoad load = Load("ports: [{name: p0, devargs: d}]\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.aggregation, AggregationConfig());
  EXPECT_FALSE(load.config.aggregation.enabled) << "no section: a plain L2 switch";

  // An empty section turns aggregation on with every default.
  load = Load("ports: [{name: p0, devargs: d}]\naggregation:\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  AggregationConfig enabled_defaults;
  enabled_defaults.enabled = true;
  EXPECT_EQ(load.config.aggregation, enabled_defaults);

  load = Load("ports: [{name: p0, devargs: d}]\naggregation:\n  address: 10.0.0.9\n  jobs:\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  ASSERT_TRUE(load.config.aggregation.address);
  EXPECT_EQ(load.config.aggregation.address->prefix.ToString(), "10.0.0.9/32");
  EXPECT_EQ(load.config.aggregation.address->vlan, 0);
  EXPECT_TRUE(load.config.aggregation.jobs.empty());
}

TEST(AggregationLoaderTest, KeyForms) {
  const std::string head = "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n";
  for (const auto& [text, value] :
       std::vector<std::pair<std::string, uint64_t>>{{"0", 0},
                                                     {"42", 42},
                                                     {"0x2A", 42},
                                                     {"0Xffffffffffffffff", ~0ull},
                                                     {"\"0x0000000000000001\"", 1}}) {
    const ConfigLoad load = Load(head + "    - {id: 1, members: 2, key: " + text + "}\n");
    ASSERT_TRUE(load.ok()) << text << Dump(load);
    EXPECT_EQ(load.config.aggregation.jobs[0].key, value) << text;
  }
  for (const char* bad : {"-1", "0x", "0x10000000000000000", "0x00000000000000001",
                          "18446744073709551616", "12ab", "abc", "[1]", "0xg1"}) {
    EXPECT_TRUE(OneError(Load(head + "    - {id: 1, members: 2, key: " + bad + "}\n"),
                         "aggregation.jobs[0].key", 4, "expected a job key"))
        << bad;
  }
}

TEST(AggregationLoaderTest, Errors) {
  const std::string ports = "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n";
  // Shape and type errors from the loader.
  EXPECT_TRUE(OneError(Load(ports + "  colour: red\n"), "aggregation.colour", 3,
                       "unknown key \"colour\"; expected one of: address, udp_port, "
                       "in_band_registration, slots, max_fan_in, max_jobs, stale_slot_ms, jobs"));
  EXPECT_TRUE(OneError(Load(ports + "  stale_slot_ms: 0\n"), "aggregation.stale_slot_ms", 3,
                       "at least 1, got 0"));
  EXPECT_TRUE(OneError(Load(ports + "  state_file: \"\"\n"), "aggregation.state_file", 3,
                       "expected a file path"));
  EXPECT_TRUE(OneError(Load(ports + "  state_file: [a]\n"), "aggregation.state_file", 3, "expected"));
  EXPECT_EQ(Load(ports + "  state_file: /var/lib/aggswitch/jobs.json\n").config.aggregation.state_file,
            "/var/lib/aggswitch/jobs.json");
  EXPECT_TRUE(OneError(Load(ports + "  address: 10.0.0.1/24\n"), "aggregation.address", 3,
                       "expected an IPv4 host address \"a.b.c.d\", got \"10.0.0.1/24\""));
  EXPECT_TRUE(OneError(Load(ports + "  address: [10.0.0.1]\n"), "aggregation.address", 3,
                       "expected \"a.b.c.d\" or a map {address, vlan}, got a list"));
  EXPECT_TRUE(OneError(Load(ports + "  address: {vlan: 10}\n"), "aggregation.address.address", 3,
                       "missing required key \"address\""));
  EXPECT_TRUE(OneError(Load(ports + "  address: {address: nope, vlan: 10}\n"),
                       "aggregation.address.address", 3, "got \"nope\""));
  EXPECT_TRUE(OneError(Load(ports + "  udp_port: 65536\n"), "aggregation.udp_port", 3,
                       "expected a UDP port 1..65535, got \"65536\""));
  EXPECT_TRUE(OneError(Load(ports + "  in_band_registration: maybe\n"),
                       "aggregation.in_band_registration", 3, "expected true or false"));
  EXPECT_TRUE(OneError(Load(ports + "  max_fan_in: 70000\n"), "aggregation.max_fan_in", 3,
                       "expected 1..1024 members, got \"70000\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs: {id: 1}\n"), "aggregation.jobs", 3,
                       "expected a list, got a map"));
  EXPECT_TRUE(OneError(Load(ports + "  jobs: [7]\n"), "aggregation.jobs[0]", 3,
                       "expected a map, got \"7\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 4294967296, key: 1, members: 2}\n"),
                       "aggregation.jobs[0].id", 4,
                       "expected a job id 1..4294967295, got \"4294967296\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 1, key: 1, members: 2, ordered: 3}\n"),
                       "aggregation.jobs[0].ordered", 4, "expected true or false"));
  // A missing required key is one error, not also a range error.
  ConfigLoad load = Load(ports + "  jobs:\n    - {key: 1}\n");
  EXPECT_EQ(Paths(load),
            std::vector<std::string>({"aggregation.jobs[0].id", "aggregation.jobs[0].members"}))
      << Dump(load);

  // Range and cross-field errors from Validate(), with their lines.
  EXPECT_TRUE(OneError(Load(ports + "  slots: 1000\n"), "aggregation.slots", 3,
                       "expected a power of two 64..1048576, got \"1000\""));
  EXPECT_TRUE(OneError(Load(ports + "  udp_port: 0\n"), "aggregation.udp_port", 3, "got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  max_jobs: 0\n"), "aggregation.max_jobs", 3,
                       "expected 1..65536 jobs"));
  EXPECT_TRUE(OneError(Load(ports + "  max_fan_in: 2000\n"), "aggregation.max_fan_in", 3,
                       "expected 1..1024 members, got \"2000\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 0, key: 1, members: 2}\n"),
                       "aggregation.jobs[0].id", 4, "expected a job id 1..4294967295, got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 5, key: 1, members: 2}\n"
                                    "    - {id: 6, key: 1, members: 2}\n"
                                    "    - {id: 5, key: 2, members: 3}\n"),
                       "aggregation.jobs[2].id", 6,
                       "expected each job id once, got \"5\" again (also aggregation.jobs[0], "
                       "line 4)"));
  EXPECT_TRUE(
      OneError(Load(ports + "  max_fan_in: 4\n  jobs:\n    - {id: 5, key: 1, members: 5}\n"),
               "aggregation.jobs[0].members", 5,
               "expected 1..4 members (aggregation.max_fan_in), got \"5\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 5, key: 1, members: 0}\n"),
                       "aggregation.jobs[0].members", 4, "got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  jobs:\n    - {id: 5, key: 1, members: 2, nodes: 0}\n"),
                       "aggregation.jobs[0].nodes", 4, "expected a node count 1..65535"));
  EXPECT_TRUE(OneError(Load(ports + "  max_jobs: 1\n  jobs:\n    - {id: 5, key: 1, members: 2}\n"
                                    "    - {id: 6, key: 1, members: 2}\n"),
                       "aggregation.jobs", 5,
                       "expected at most 1 jobs (aggregation.max_jobs), got 2"));
  EXPECT_TRUE(OneError(Load(ports + "  address: 224.0.0.1\n"), "aggregation.address", 3,
                       "expected a unicast host address, got \"224.0.0.1\""));
  EXPECT_TRUE(OneError(Load(ports + "  address: {address: 10.0.0.1, vlan: 20}\n"),
                       "aggregation.address.vlan", 3,
                       "expected a VLAN that some port carries, got \"20\""));
  EXPECT_TRUE(OneError(Load(ports + "  address: {address: 127.0.0.1, vlan: 10}\n"),
                       "aggregation.address.address", 3, "expected a unicast host address"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d, access: 10}]\n"
                            "switch:\n  addresses:\n    - {address: 10.0.0.1/24, vlan: 10}\n" +
                            std::string("aggregation:\n  address: 10.0.0.1\n")),
                       "aggregation.address", 6, "to cover every VLAN"));
}

// --- The tree: node ids, child switches, upstream, timers, bypass, TAN ---------------

// What one job, and in-band jobs together, may take (docs/security.md).
TEST(LimitsLoaderTest, ReadsEveryFieldAndDerivesTheDefaults) {
  const std::string ports = "ports: [{name: p0, devargs: d}]\n";
  ConfigLoad load = Load(ports + R"yaml(aggregation:
  slots: 8192
  max_jobs: 100
  slot_secret: "0x000102030405060708090a0b0c0d0e0f"
  slots_per_job: 2048
  hold: {buffers: 32768, per_job: 8192}
  member_rebind_ms: 0
  restart_grace_ms: 2500
  in_band:
    slots: 2048
    slots_per_job: 128
    held_per_job: 1024
    held_total: 4096
    max_jobs: 10
    idle_timeout_ms: 5000
    per_source: {per_second: 5, burst: 10}
    total: {per_second: 50, burst: 100}
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const AggregationConfig& a = load.config.aggregation;
  EXPECT_EQ(a.slot_secret, "0x000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(a.SlotsPerJob(), 2048u);
  EXPECT_EQ(a.hold.buffers, 32768u);
  EXPECT_EQ(a.HoldPerJob(), 8192u);
  EXPECT_EQ(a.member_rebind_ms, 0u);
  EXPECT_EQ(a.restart_grace_ms, 2500u);
  EXPECT_EQ(a.InBandSlots(), 2048u);
  EXPECT_EQ(a.InBandSlotsPerJob(), 128u);
  EXPECT_EQ(a.InBandHeldPerJob(), 1024u);
  EXPECT_EQ(a.InBandHeldTotal(), 4096u);
  EXPECT_EQ(a.InBandMaxJobs(), 10u);
  EXPECT_EQ(a.in_band.idle_timeout_ms, 5000u);
  EXPECT_EQ(a.in_band.per_source.per_second, 5u);
  EXPECT_EQ(a.in_band.total.burst, 100u);

  load = Load(ports + "aggregation:\n  slots: 4096\n  max_jobs: 1024\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const AggregationConfig& d = load.config.aggregation;
  EXPECT_EQ(d.InBandSlots(), 1024u) << "a quarter";
  EXPECT_EQ(d.SlotsPerJob(), 1024u);
  EXPECT_EQ(d.InBandSlotsPerJob(), 256u);
  EXPECT_EQ(d.InBandMaxJobs(), 256u);
  EXPECT_EQ(d.InBandHeldTotal(), 4096u) << "a quarter of 16384";
  EXPECT_EQ(d.member_rebind_ms, 30000u);
  EXPECT_EQ(d.restart_grace_ms, 1000u) << "the clients' longest retransmission timeout";
  // Small tables get small defaults; no in-band registration, no region.
  load = Load(ports + "aggregation:\n  slots: 64\n  in_band_registration: false\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.aggregation.InBandSlots(), 0u);
  EXPECT_EQ(load.config.aggregation.SpareSlots(), 4u) << "a sixteenth";
  EXPECT_EQ(load.config.aggregation.SlotsPerJob(), 60u);
  load = Load(ports + "aggregation:\n  slots: 64\n  spare_slots: 0\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.aggregation.SpareSlots(), 0u);
}

TEST(LimitsLoaderTest, Errors) {
  const std::string agg = "ports: [{name: p0, devargs: d}]\naggregation:\n";
  EXPECT_TRUE(OneError(Load(agg + "  slot_secret: \"0x1234\"\n"), "aggregation.slot_secret", 3,
                       "expected \"0x\" and 32 hex digits"));
  EXPECT_TRUE(OneError(Load(agg + "  slots_per_job: 4000\n"), "aggregation.slots_per_job", 3,
                       "expected 1..2816 chunks (the slots config and API jobs have: "
                       "aggregation.slots - in_band.slots - spare_slots)"));
  // Config and API jobs keep a quarter of the table: 4096 - 1024 - 1024.
  EXPECT_TRUE(OneError(Load(agg + "  spare_slots: 2049\n"), "aggregation.spare_slots", 3,
                       "expected 0..2048 slots"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\naggregation:\n  slots: 1048576\n"
                            "  spare_slots: 65536\n"),
                       "aggregation.spare_slots", 4, "expected 0..65534 slots"));
  EXPECT_TRUE(OneError(Load(agg + "  hold: {buffers: 10}\n"), "aggregation.hold.buffers", 3,
                       "expected 64..1048576 buffers, got \"10\""));
  EXPECT_TRUE(OneError(Load(agg + "  hold: {per_job: 20000}\n"), "aggregation.hold.per_job", 3,
                       "expected 1..16384 buffers"));
  EXPECT_TRUE(OneError(Load(agg + "  store: {buffers: 2000000}\n"), "aggregation.store.buffers", 3,
                       "expected 0..1048576 buffers (0: no store), got \"2000000\""));
  EXPECT_TRUE(OneError(Load(agg + "  store: {buffers: 100, per_job: 101}\n"),
                       "aggregation.store.per_job", 3, "expected 1..100 buffers"));
  EXPECT_TRUE(OneError(Load(agg + "  store: {final_timeout_ms: 0}\n"),
                       "aggregation.store.final_timeout_ms", 3, "expected 1..3600000 milliseconds"));
  {
    const ConfigLoad r = Load(agg + "  store: {buffers: 64, final_timeout_ms: 900}\n");
    EXPECT_EQ(r.config.aggregation.store.buffers, 64u);
    EXPECT_EQ(r.config.aggregation.store.PerJob(), 64u) << "256, or the buffers when fewer";
    EXPECT_EQ(r.config.aggregation.store.final_timeout_ms, 900u);
  }
  EXPECT_TRUE(OneError(Load(agg + "  store: {buffers: 0}\n  jobs: [{id: 1, key: 2, members: 2, mode: store}]\n"),
                       "aggregation.jobs[0].mode", 4,
                       "expected aggregate, or store buffers for mode store (aggregation.store.buffers is 0)"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {slots: 4096}\n"), "aggregation.in_band.slots", 3,
                       "expected 1..2048 slots (at most half of aggregation.slots)"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {slots: 100, slots_per_job: 101}\n"),
                       "aggregation.in_band.slots_per_job", 3, "expected 1..100 chunks"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {held_total: 9000}\n"), "aggregation.in_band.held_total",
                       3, "expected 1..8192 buffers"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {held_per_job: 5000}\n"),
                       "aggregation.in_band.held_per_job", 3, "expected 1..4096 buffers"));
  EXPECT_TRUE(OneError(Load(agg + "  max_jobs: 8\n  in_band: {max_jobs: 9}\n"),
                       "aggregation.in_band.max_jobs", 4, "expected 1..8 jobs"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {idle_timeout_ms: 10}\n"),
                       "aggregation.in_band.idle_timeout_ms", 3, "expected 1000..86400000"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {per_source: {per_second: 0}}\n"),
                       "aggregation.in_band.per_source.per_second", 3, "expected 1..1000000"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {total: {burst: 2000000}}\n"),
                       "aggregation.in_band.total.burst", 3, "expected 1..1000000"));
  EXPECT_TRUE(OneError(Load(agg + "  in_band: {rate: 5}\n"), "aggregation.in_band.rate", 3,
                       "unknown key \"rate\""));
  EXPECT_TRUE(OneError(Load(agg + "  member_rebind_ms: 3600001\n"), "aggregation.member_rebind_ms",
                       3, "expected 0..3600000 milliseconds"));
  EXPECT_TRUE(OneError(Load(agg + "  restart_grace_ms: 3600001\n"), "aggregation.restart_grace_ms",
                       3, "expected 0..3600000 milliseconds"));
}

TEST(TreeLoaderTest, ReadsEveryField) {
  const ConfigLoad load = Load(R"yaml(ports: [{name: p0, devargs: d, access: 10}]
aggregation:
  address: 10.0.9.11
  timeout_ms: 20
  trigger: batch
  give_up_ms: 4000
  bypass: {entries: 1024, ttl_ms: 500, subswitch: nodes}
  tan: {strategy: fewest_hops, candidates: [{address: 10.0.9.50, port: 47001, hops: 1}, {address: 10.0.9.51, hops: 2}]}
  jobs:
    - id: 7
      key: 0x1234
      node_ids: ["0-3", 8]
      switches:
        - {node: 100, covers: [20-22, 30]}
        - node: 101
          covers: [40]
      upstream: {address: 10.0.9.1, port: 47002, node: 110, vlan: 10}
      timeout_ms: 50
      trigger: incremental
    - id: 8
      key: 2
      members: 3
      tan: {strategy: self}
)yaml");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const AggregationConfig& a = load.config.aggregation;
  EXPECT_EQ(a.timeout_ms, 20u);
  EXPECT_EQ(a.trigger, AggTrigger::kBatch);
  EXPECT_EQ(a.give_up_ms, 4000u);
  EXPECT_EQ(a.bypass.entries, 1024u);
  EXPECT_EQ(a.bypass.ttl_ms, 500u);
  EXPECT_EQ(a.bypass.subswitch, SubswitchEntries::kNodes);
  EXPECT_EQ(a.bypass.loc.line, 7);
  ASSERT_TRUE(a.tan);
  EXPECT_EQ(a.tan->strategy, TanStrategy::kFewestHops);
  ASSERT_EQ(a.tan->candidates.size(), 2u);
  EXPECT_EQ(a.tan->candidates[0].address.ToString(), "10.0.9.50");
  EXPECT_EQ(a.tan->candidates[0].port, 47001);
  EXPECT_EQ(a.tan->candidates[0].hops, 1);
  EXPECT_EQ(a.tan->candidates[1].address.ToString(), "10.0.9.51");
  EXPECT_EQ(a.tan->candidates[1].port, kDefaultAggregationUdpPort);
  EXPECT_EQ(a.tan->candidates[1].hops, 2);

  ASSERT_EQ(a.jobs.size(), 2u);
  const AggregationJobConfig& j = a.jobs[0];
  EXPECT_EQ(j.node_ids, std::vector<uint16_t>({0, 1, 2, 3, 8}));
  ASSERT_EQ(j.switches.size(), 2u);
  EXPECT_EQ(j.switches[0].node, 100);
  EXPECT_EQ(j.switches[0].covers, std::vector<uint16_t>({20, 21, 22, 30}));
  EXPECT_EQ(j.switches[0].loc.line, 14);
  EXPECT_EQ(j.switches[1].node, 101);
  EXPECT_EQ(j.switches[1].covers, std::vector<uint16_t>({40}));
  EXPECT_EQ(j.members, 7) << "filled from node_ids and switches";
  EXPECT_EQ(j.MemberNodeIds(), std::vector<uint16_t>({0, 1, 2, 3, 8, 100, 101}));
  ASSERT_TRUE(j.upstream);
  EXPECT_EQ(j.upstream->address.ToString(), "10.0.9.1");
  EXPECT_EQ(j.upstream->port, 47002);
  EXPECT_EQ(j.upstream->node, 110);
  EXPECT_EQ(j.upstream->vlan, 10);
  EXPECT_EQ(j.upstream->loc.line, 17);
  EXPECT_EQ(j.timeout_ms, 50u);
  EXPECT_EQ(j.trigger, AggTrigger::kIncremental);
  EXPECT_FALSE(j.tan);
  // Each node id of a range has its item's location.
  EXPECT_EQ(load.config.LocOf("aggregation.jobs[0].node_ids[3]").line, 12);
  EXPECT_EQ(load.config.LocOf("aggregation.jobs[0].node_ids[4]").column, 25);

  const AggregationJobConfig& flat = a.jobs[1];
  EXPECT_EQ(flat.members, 3);
  EXPECT_TRUE(flat.node_ids.empty());
  EXPECT_TRUE(flat.switches.empty());
  EXPECT_EQ(flat.MemberNodeIds(), std::vector<uint16_t>({0, 1, 2}));
  EXPECT_FALSE(flat.upstream);
  EXPECT_FALSE(flat.timeout_ms);
  EXPECT_FALSE(flat.trigger);
  ASSERT_TRUE(flat.tan);
  EXPECT_EQ(flat.tan->strategy, TanStrategy::kSelf);
  EXPECT_TRUE(flat.tan->candidates.empty());
}

TEST(TreeLoaderTest, DefaultsWithoutTheNewKeys) {
  const ConfigLoad load = Load(
      "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n"
      "    - {id: 1, key: 1, members: 2}\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const AggregationConfig& a = load.config.aggregation;
  EXPECT_EQ(a.timeout_ms, 0u);
  EXPECT_EQ(a.trigger, AggTrigger::kIncremental);
  EXPECT_EQ(a.give_up_ms, 5000u);
  EXPECT_EQ(a.bypass, BypassConfig());
  EXPECT_EQ(a.bypass.entries, 65536u);
  EXPECT_EQ(a.bypass.ttl_ms, 10000u);
  EXPECT_EQ(a.bypass.subswitch, SubswitchEntries::kSwitch);
  EXPECT_FALSE(a.tan);
  const AggregationJobConfig& j = a.jobs[0];
  EXPECT_TRUE(j.node_ids.empty());
  EXPECT_TRUE(j.switches.empty());
  EXPECT_FALSE(j.upstream);
  EXPECT_FALSE(j.timeout_ms);
  EXPECT_FALSE(j.trigger);
  EXPECT_FALSE(j.tan);
  EXPECT_EQ(j.MemberNodeIds(), std::vector<uint16_t>({0, 1}));

  // An empty bypass section is every default; every enum spelling reads.
  for (const auto& [text, value] : std::vector<std::pair<std::string, TanStrategy>>{
           {"fixed", TanStrategy::kFixed},
           {"random", TanStrategy::kRandom},
           {"least_load", TanStrategy::kLeastLoad},
           {"fewest_hops", TanStrategy::kFewestHops}}) {
    const ConfigLoad l = Load(
        "ports: [{name: p0, devargs: d}]\naggregation:\n  bypass:\n"
        "  trigger: incremental\n  tan: {strategy: " +
        text + ", candidates: [{address: 10.0.9.50}]}\n");
    ASSERT_TRUE(l.ok()) << text << Dump(l);
    EXPECT_EQ(l.config.aggregation.tan->strategy, value) << text;
    EXPECT_EQ(l.config.aggregation.bypass, BypassConfig());
  }
  const ConfigLoad sw = Load(
      "ports: [{name: p0, devargs: d}]\naggregation:\n"
      "  bypass: {subswitch: switch}\n");
  ASSERT_TRUE(sw.ok()) << Dump(sw);
  EXPECT_EQ(sw.config.aggregation.bypass.subswitch, SubswitchEntries::kSwitch);
}

TEST(TreeLoaderTest, NodeIdListForms) {
  const std::string head = "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n";
  for (const auto& [text, ids] : std::vector<std::pair<std::string, std::vector<uint16_t>>>{
           {"[0, 1, 2, 3]", {0, 1, 2, 3}},
           {"[\"0-3\", 8]", {0, 1, 2, 3, 8}},
           {"[0-3, 8]", {0, 1, 2, 3, 8}},
           {"[5-5]", {5}},
           {"[9, 2, \"7\"]", {9, 2, 7}},
           {"[65530-65534]", {65530, 65531, 65532, 65533, 65534}}}) {
    const ConfigLoad load = Load(head + "    - {id: 1, key: 1, node_ids: " + text + "}\n");
    ASSERT_TRUE(load.ok()) << text << Dump(load);
    EXPECT_EQ(load.config.aggregation.jobs[0].node_ids, ids) << text;
    EXPECT_EQ(load.config.aggregation.jobs[0].members, ids.size()) << text;
  }
  // A spine: child switches only.
  const ConfigLoad spine =
      Load(head + "    - id: 1\n      key: 1\n      switches: [{node: 100}, {node: 101}]\n");
  ASSERT_TRUE(spine.ok()) << Dump(spine);
  EXPECT_EQ(spine.config.aggregation.jobs[0].members, 2);
  EXPECT_EQ(spine.config.aggregation.jobs[0].MemberNodeIds(), std::vector<uint16_t>({100, 101}));
}

TEST(TreeLoaderTest, MembersFromTheLists) {
  const std::string head = "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n";
  // `members` may be given when it agrees.
  ConfigLoad load =
      Load(head + "    - {id: 1, key: 1, members: 3, node_ids: [4, 5], switches: [{node: 9}]}\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.aggregation.jobs[0].members, 3);
  EXPECT_EQ(load.config.aggregation.jobs[0].MemberNodeIds(), std::vector<uint16_t>({4, 5, 9}));
  // Else it names both.
  EXPECT_TRUE(OneError(Load(head + "    - id: 1\n      key: 1\n      members: 4\n"
                                   "      node_ids: [4, 5]\n      switches: [{node: 9}]\n"),
                       "aggregation.jobs[0].members", 6,
                       "expected members to equal the node ids and child switches listed "
                       "(2 node_ids + 1 switches = 3), got \"4\""));
  // Without the lists, `members` is required.
  EXPECT_TRUE(OneError(Load(head + "    - {id: 1, key: 1}\n"), "aggregation.jobs[0].members", 4,
                       "missing required key \"members\" (or the members' node ids in "
                       "\"node_ids\" and \"switches\")"));
  // Empty lists and no `members`: the job has no member.
  EXPECT_TRUE(OneError(Load(head + "    - {id: 1, key: 1, node_ids: []}\n"),
                       "aggregation.jobs[0].node_ids", 4,
                       "expected 1..256 members (aggregation.max_fan_in), got none (node_ids and "
                       "switches are empty)"));
  EXPECT_TRUE(OneError(Load(head + "    - id: 1\n      key: 1\n      switches:\n"),
                       "aggregation.jobs[0].switches", 6, "got none"));
  // `members` with empty lists is the flat form.
  load = Load(head + "    - {id: 1, key: 1, members: 2, node_ids: []}\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  EXPECT_EQ(load.config.aggregation.jobs[0].MemberNodeIds(), std::vector<uint16_t>({0, 1}));
  // Too many members for max_fan_in, counted from the lists.
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\naggregation:\n  max_fan_in: 4\n"
                            "  jobs:\n    - id: 1\n      key: 1\n      node_ids: [0-3]\n"
                            "      switches: [{node: 100}]\n"),
                       "aggregation.jobs[0].node_ids", 7,
                       "expected 1..4 members (aggregation.max_fan_in), got \"5\" (4 node_ids + 1 "
                       "switches)"));
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\naggregation:\n  max_fan_in: 1\n"
                            "  jobs:\n    - id: 1\n      key: 1\n"
                            "      switches: [{node: 100}, {node: 101}]\n"),
                       "aggregation.jobs[0].switches", 7, "expected 1..1 members"));
}

TEST(TreeLoaderTest, NodeIdErrors) {
  const std::string head =
      "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n"
      "    - id: 1\n      key: 1\n";  // job keys from line 6
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0, 65535]\n"),
                       "aggregation.jobs[0].node_ids[1]", 6,
                       "expected a node id 0..65534 (65535 is reserved), got \"65535\""));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0, 70000]\n"),
                       "aggregation.jobs[0].node_ids[1]", 6,
                       "expected a node id 0..65534 or a range \"a-b\" of them (a <= b), got "
                       "\"70000\""));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0, 5-3]\n"), "aggregation.jobs[0].node_ids[1]",
                       6, "got \"5-3\""));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0, x, 2]\n"),
                       "aggregation.jobs[0].node_ids[1]", 6, "got \"x\""));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0-, 1]\n"), "aggregation.jobs[0].node_ids[0]",
                       6, "got \"0-\""));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [[1]]\n"), "aggregation.jobs[0].node_ids[0]", 6,
                       "got a list"));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: 3\n"), "aggregation.jobs[0].node_ids", 6,
                       "expected a list of node ids, got \"3\""));
  // One mistake, one error: `members` is not also called wrong.
  EXPECT_TRUE(OneError(Load(head + "      members: 3\n      node_ids: [0, x, 2]\n"),
                       "aggregation.jobs[0].node_ids[1]", 7, "got \"x\""));
  EXPECT_TRUE(OneError(Load(head + "      members: 3\n      node_ids: [0-x, 2]\n"),
                       "aggregation.jobs[0].node_ids[0]", 7, "got \"0-x\""));
  EXPECT_TRUE(OneError(Load(head + "      members: x\n      node_ids: [0, 2]\n"),
                       "aggregation.jobs[0].members", 6, "expected an unsigned integer"));

  // Each member's node id once, across node_ids and switches; both named.
  EXPECT_TRUE(OneError(Load(head + "      node_ids:\n        - 0-3\n        - 2\n"),
                       "aggregation.jobs[0].node_ids[4]", 8,
                       "expected each member's node id once in the job, got \"2\" again (also "
                       "aggregation.jobs[0].node_ids[2], line 7)"));
  // Overlapping ranges repeat several ids: one error for the item.
  EXPECT_TRUE(OneError(Load(head + "      node_ids:\n        - 0-3\n        - 2-5\n"),
                       "aggregation.jobs[0].node_ids[4]", 8,
                       "got \"2\" again (also aggregation.jobs[0].node_ids[2], line 7)"));
  EXPECT_TRUE(OneError(Load(head + "      node_ids: [0-3]\n      switches:\n"
                                   "        - {node: 100}\n        - {node: 3}\n"),
                       "aggregation.jobs[0].switches[1].node", 9,
                       "got \"3\" again (also aggregation.jobs[0].node_ids[3], line 6)"));
  EXPECT_TRUE(OneError(Load(head + "      switches:\n        - {node: 100}\n"
                                   "        - {node: 100}\n"),
                       "aggregation.jobs[0].switches[1].node", 8,
                       "(also aggregation.jobs[0].switches[0].node, line 7)"));

  // Child switches.
  EXPECT_TRUE(OneError(Load(head + "      switches: [{node: 65535}]\n"),
                       "aggregation.jobs[0].switches[0].node", 6, "65535 is reserved"));
  EXPECT_TRUE(OneError(Load(head + "      switches: [{node: 70000}]\n"),
                       "aggregation.jobs[0].switches[0].node", 6,
                       "expected a node id 0..65534, got \"70000\""));
  EXPECT_TRUE(OneError(Load(head + "      switches: [{covers: [1]}]\n"),
                       "aggregation.jobs[0].switches[0].node", 6, "missing required key \"node\""));
  EXPECT_TRUE(OneError(Load(head + "      switches: [100]\n"), "aggregation.jobs[0].switches[0]", 6,
                       "expected a map, got \"100\""));
  EXPECT_TRUE(OneError(Load(head + "      switches: {node: 100}\n"), "aggregation.jobs[0].switches",
                       6, "expected a list, got a map"));
  EXPECT_TRUE(OneError(Load(head + "      switches: [{node: 100, cover: [1]}]\n"),
                       "aggregation.jobs[0].switches[0].cover", 6,
                       "unknown key \"cover\"; expected one of: node, covers"));
  const std::string child = head + "      switches:\n        - node: 100\n          covers: ";
  EXPECT_TRUE(OneError(Load(child + "[0-3, 100]\n"), "aggregation.jobs[0].switches[0].covers[4]", 8,
                       "expected the node ids below switch \"100\", not its own, got \"100\""));
  EXPECT_TRUE(OneError(Load(child + "[0-3, 2]\n"), "aggregation.jobs[0].switches[0].covers[4]", 8,
                       "expected each node id below one child switch, once, got \"2\" again (also "
                       "aggregation.jobs[0].switches[0].covers[2], line 8)"));
  EXPECT_TRUE(OneError(Load(child + "[0-3, 65535]\n"), "aggregation.jobs[0].switches[0].covers[4]",
                       8, "65535 is reserved"));
  EXPECT_TRUE(OneError(Load(child + "[a-b]\n"), "aggregation.jobs[0].switches[0].covers[0]", 8,
                       "got \"a-b\""));
  EXPECT_TRUE(OneError(Load(child + "[0-3]\n        - {node: 101, covers: [1-4]}\n"),
                       "aggregation.jobs[0].switches[1].covers[0]", 9,
                       "got \"1\" again (also aggregation.jobs[0].switches[0].covers[1], line 8)"));
  EXPECT_TRUE(OneError(Load(child + "[0-3]\n        - {node: 101, covers: [3-4]}\n"),
                       "aggregation.jobs[0].switches[1].covers[0]", 9,
                       "got \"3\" again (also aggregation.jobs[0].switches[0].covers[3], line 8)"));
  EXPECT_TRUE(
      OneError(Load(head + "      node_ids: [7]\n      switches: [{node: 100, covers: [6-7]}]\n"),
               "aggregation.jobs[0].switches[0].covers[1]", 7,
               "expected the node ids below switch \"100\", not a member of the job here, "
               "got \"7\" (also aggregation.jobs[0].node_ids[0], line 6)"));
  // Variant 2 bypass entries need the covered nodes.
  EXPECT_TRUE(OneError(Load("ports: [{name: p0, devargs: d}]\naggregation:\n"
                            "  bypass: {subswitch: nodes}\n  jobs:\n    - id: 1\n      key: 1\n"
                            "      switches:\n        - {node: 100, covers: [0-3]}\n"
                            "        - {node: 101}\n"),
                       "aggregation.jobs[0].switches[1]", 9,
                       "expected covers, the node ids below switch \"101\" "
                       "(aggregation.bypass.subswitch is nodes"));
}

TEST(TreeLoaderTest, UpstreamErrors) {
  const std::string head =
      "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n"
      "  address: 10.0.9.11\n  jobs:\n    - id: 7\n      key: 1\n"
      "      node_ids: [0-3]\n";  // job keys from line 8
  EXPECT_TRUE(Load(head + "      upstream: {address: 10.0.9.1, node: 100}\n").ok());
  EXPECT_TRUE(Load(head + "      upstream: {address: 10.0.9.1, node: 100, vlan: 0}\n").ok());
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1}\n"),
                       "aggregation.jobs[0].upstream.node", 8, "missing required key \"node\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {node: 100}\n"),
                       "aggregation.jobs[0].upstream.address", 8,
                       "missing required key \"address\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: 10.0.9.1\n"), "aggregation.jobs[0].upstream", 8,
                       "expected a map, got \"10.0.9.1\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream:\n"), "aggregation.jobs[0].upstream", 8,
                       "expected a map, got an empty value"));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, tan: 1}\n"),
                       "aggregation.jobs[0].upstream.tan", 8,
                       "unknown key \"tan\"; expected one of: address, port, node, vlan"));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1/24, node: 100}\n"),
                       "aggregation.jobs[0].upstream.address", 8,
                       "expected an IPv4 host address \"a.b.c.d\", got \"10.0.9.1/24\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 224.0.0.1, node: 100}\n"),
                       "aggregation.jobs[0].upstream.address", 8,
                       "expected the parent switch's aggregation address, a unicast host "
                       "address, got \"224.0.0.1\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.11, node: 100}\n"),
                       "aggregation.jobs[0].upstream.address", 8,
                       "expected the parent switch's aggregation address, got this switch's own "
                       "aggregation address \"10.0.9.11\" (aggregation.address, line 3)"));
  EXPECT_TRUE(
      OneError(Load("switch: {addresses: [10.0.9.12/24]}\n" + head +
                    "      upstream: {address: 10.0.9.12, node: 100}\n"),
               "aggregation.jobs[0].upstream.address", 9,
               "got an address of this switch \"10.0.9.12\" (switch.addresses[0], line 1)"));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, port: 0}\n"),
                       "aggregation.jobs[0].upstream.port", 8,
                       "expected a UDP port 1..65535, got \"0\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, port: 65536}\n"),
                       "aggregation.jobs[0].upstream.port", 8,
                       "expected a UDP port 1..65535, got \"65536\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 2}\n"),
                       "aggregation.jobs[0].upstream.node", 8,
                       "expected this switch's node id in the parent, not one of this job's "
                       "members, got \"2\" (also aggregation.jobs[0].node_ids[2], line 7)"));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 65535}\n"),
                       "aggregation.jobs[0].upstream.node", 8, "65535 is reserved"));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, vlan: 4095}\n"),
                       "aggregation.jobs[0].upstream.vlan", 8,
                       "expected 0 (the aggregation address's VLAN) or a VLAN id 1..4094, got "
                       "\"4095\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, vlan: 70000}\n"),
                       "aggregation.jobs[0].upstream.vlan", 8,
                       "expected 0 (the aggregation address's VLAN) or a VLAN id 1..4094, got "
                       "\"70000\""));
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100, vlan: 20}\n"),
                       "aggregation.jobs[0].upstream.vlan", 8,
                       "expected a VLAN that some port carries, got \"20\""));
  // A TAN is the root's business.
  EXPECT_TRUE(OneError(Load(head + "      upstream: {address: 10.0.9.1, node: 100}\n"
                                   "      tan: {strategy: self}\n"),
                       "aggregation.jobs[0].tan", 9,
                       "expected no tan: a TAN is chosen by the root; this job has an upstream "
                       "(aggregation.jobs[0].upstream, line 8)"));
}

TEST(TreeLoaderTest, TimerBypassAndTriggerErrors) {
  const std::string ports = "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n";
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {size: 1}\n"), "aggregation.bypass.size", 3,
                       "unknown key \"size\"; expected one of: entries, ttl_ms, subswitch"));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: [1]\n"), "aggregation.bypass", 3,
                       "expected a map, got a list"));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {entries: 0}\n"), "aggregation.bypass.entries", 3,
                       "expected 1..16777216 entries, got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {entries: 16777217}\n"),
                       "aggregation.bypass.entries", 3, "got \"16777217\""));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {entries: 4294967296}\n"),
                       "aggregation.bypass.entries", 3,
                       "expected 1..16777216 entries, got \"4294967296\""));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {ttl_ms: 0}\n"), "aggregation.bypass.ttl_ms", 3,
                       "expected 1..3600000 milliseconds, got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {ttl_ms: 3600001}\n"), "aggregation.bypass.ttl_ms",
                       3, "got \"3600001\""));
  EXPECT_TRUE(OneError(Load(ports + "  bypass: {subswitch: leaf}\n"),
                       "aggregation.bypass.subswitch", 3,
                       "expected switch or nodes, got \"leaf\""));
  EXPECT_TRUE(Load(ports + "  bypass: {entries: 16777216, ttl_ms: 3600000}\n").ok());
  EXPECT_TRUE(Load(ports + "  bypass: {entries: 1, ttl_ms: 1}\n").ok());

  EXPECT_TRUE(OneError(Load(ports + "  address: 10.0.9.11\n  timeout_ms: 3600001\n"),
                       "aggregation.timeout_ms", 4,
                       "expected 0..3600000 milliseconds (0: timers off), got \"3600001\""));
  EXPECT_TRUE(OneError(Load(ports + "  timeout_ms: soon\n"), "aggregation.timeout_ms", 3,
                       "expected an unsigned integer, got \"soon\""));
  EXPECT_TRUE(OneError(Load(ports + "  timeout_ms: 4294967296\n"), "aggregation.timeout_ms", 3,
                       "expected 0..3600000 milliseconds (0: timers off), got \"4294967296\""));
  EXPECT_TRUE(Load(ports + "  address: 10.0.9.11\n  timeout_ms: 3600000\n").ok());
  EXPECT_TRUE(OneError(Load(ports + "  give_up_ms: 0\n"), "aggregation.give_up_ms", 3,
                       "expected 1..3600000 milliseconds, got \"0\""));
  EXPECT_TRUE(OneError(Load(ports + "  give_up_ms: 3600001\n"), "aggregation.give_up_ms", 3,
                       "got \"3600001\""));
  EXPECT_TRUE(Load(ports + "  give_up_ms: 1\n").ok());
  EXPECT_TRUE(OneError(Load(ports + "  trigger: sometimes\n"), "aggregation.trigger", 3,
                       "expected incremental or batch, got \"sometimes\""));
  EXPECT_TRUE(OneError(Load(ports + "  trigger: [batch]\n"), "aggregation.trigger", 3,
                       "expected incremental or batch, got a list"));

  const std::string job = ports +
                          "  address: 10.0.9.11\n  jobs:\n    - id: 7\n      key: 1\n"
                          "      members: 2\n";  // job keys from line 8
  EXPECT_TRUE(OneError(Load(job + "      timeout_ms: 3600001\n"), "aggregation.jobs[0].timeout_ms",
                       8, "expected 0..3600000 milliseconds (0: timers off), got \"3600001\""));
  EXPECT_TRUE(OneError(Load(job + "      timeout_ms: -1\n"), "aggregation.jobs[0].timeout_ms", 8,
                       "expected an unsigned integer, got \"-1\""));
  EXPECT_TRUE(OneError(Load(job + "      trigger: eager\n"), "aggregation.jobs[0].trigger", 8,
                       "expected incremental or batch, got \"eager\""));
  EXPECT_TRUE(OneError(Load(job + "      ordered: true\n      trigger: incremental\n"),
                       "aggregation.jobs[0].trigger", 9,
                       "expected batch, or no trigger, for an ordered job"));
  EXPECT_TRUE(Load(job + "      ordered: true\n      trigger: batch\n").ok());
  EXPECT_TRUE(Load(job + "      ordered: true\n").ok());
  EXPECT_EQ(Load("eal: {idle_sleep_us: 20}\n" + ports + "  slots: 4096\n").config.eal.idle_sleep_us, 20u);
  EXPECT_TRUE(OneError(Load("eal: {idle_sleep_us: 1001}\n" + ports + "  slots: 4096\n"), "eal.idle_sleep_us", 1,
                       "expected 0..1000 microseconds (0: busy-poll), got \"1001\""));
  // Placement: the switch's policy, and a job's own hint within the config
  // and API jobs' region (4096 slots - 1024 in-band - 256 spare = 2816).
  EXPECT_TRUE(OneError(Load(ports + "  placement: sticky\n"), "aggregation.placement", 3,
                       "expected hash, round_robin or random, got \"sticky\""));
  for (const char* policy : {"hash", "round_robin", "random"}) {
    const ConfigLoad load = Load(ports + "  placement: " + policy + "\n");
    ASSERT_TRUE(load.ok()) << policy;
  }
  EXPECT_EQ(Load(ports + "  placement: round_robin\n").config.aggregation.placement,
            SlotPlacement::kRoundRobin);
  EXPECT_EQ(Load(job + "      placement_hint: 2815\n").config.aggregation.jobs[0].placement_hint,
            2815u);
  EXPECT_TRUE(OneError(Load(job + "      placement_hint: 2816\n"),
                       "aggregation.jobs[0].placement_hint", 8,
                       "expected a slot index 0..2815 (the slots config and API jobs have: "
                       "aggregation.slots - in_band.slots - spare_slots), got \"2816\""));
  EXPECT_TRUE(OneError(Load(job + "      placement_hint: -3\n"),
                       "aggregation.jobs[0].placement_hint", 8,
                       "expected an unsigned integer, got \"-3\""));
  const auto main_server = [&](const std::string& v) {
    return Load(job + "      main_server: " + v + "\n").config.aggregation.jobs[0].main_server;
  };
  EXPECT_EQ(main_server("10.0.0.9:45000")->ToString(), "10.0.0.9:45000");
  EXPECT_EQ(main_server("10.0.0.9")->port, 0) << "any port";
  EXPECT_TRUE(OneError(Load(job + "      main_server: ps.local\n"), "aggregation.jobs[0].main_server", 8,
                       "expected the main server's \"a.b.c.d\" or \"a.b.c.d:port\", got \"ps.local\""));
  EXPECT_EQ(Load(job + "      mode: both\n").config.aggregation.jobs[0].mode, JobMode::kBoth);
  EXPECT_EQ(Load(job).config.aggregation.jobs[0].mode, JobMode::kAggregate);
  EXPECT_TRUE(OneError(Load(job + "      mode: cache\n"), "aggregation.jobs[0].mode", 8,
                       "expected aggregate, store or both, got \"cache\""));
  EXPECT_TRUE(OneError(Load(job + "      mode: store\n      ordered: true\n      trigger: batch\n"),
                       "aggregation.jobs[0].mode", 8,
                       "expected aggregate or both for a job that reduces (parameter_server, "
                       "verify or ordered) or spans switches (switches, upstream), got \"store\""));
  EXPECT_TRUE(OneError(Load(job + "      colour: red\n"), "aggregation.jobs[0].colour", 8,
                       "unknown key \"colour\"; expected one of: id, key, members, nodes, ordered, "
                       "node_ids, switches, upstream, timeout_ms, trigger, tan, tan_member, "
                       "parameter_server"));
}

TEST(TreeLoaderTest, TanErrors) {
  const std::string ports =
      "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n"
      "  address: 10.0.9.11\n";  // tan from line 4
  EXPECT_TRUE(
      OneError(Load(ports + "  tan: {strategy: closest, candidates: [{address: 10.0.9.50}]}\n"),
               "aggregation.tan.strategy", 4,
               "expected fixed, random, least_load, fewest_hops or self, got \"closest\""));
  EXPECT_TRUE(OneError(Load(ports + "  tan: {strategy: fixed}\n"), "aggregation.tan", 4,
                       "expected 1..64 candidates for strategy \"fixed\" (or strategy \"self\"), "
                       "got none"));
  EXPECT_TRUE(OneError(Load(ports + "  tan:\n    strategy: random\n    candidates: []\n"),
                       "aggregation.tan.candidates", 6,
                       "expected 1..64 candidates for strategy \"random\""));
  EXPECT_TRUE(OneError(Load(ports + "  tan: {}\n"), "aggregation.tan", 4,
                       "candidates for strategy \"fixed\""));
  EXPECT_TRUE(OneError(Load(ports + "  tan: self\n"), "aggregation.tan", 4,
                       "expected a map, got \"self\""));
  EXPECT_TRUE(OneError(Load(ports + "  tan:\n    strategy: self\n"
                                    "    candidates: [{address: 10.0.9.50}]\n"),
                       "aggregation.tan.candidates", 6,
                       "expected no candidates with strategy \"self\" (this switch is the TAN), "
                       "got 1"));
  std::string many = ports + "  tan:\n    candidates:\n";  // list from line 6
  for (int i = 1; i <= 65; ++i) many += "      - {address: 10.0.8." + std::to_string(i) + "}\n";
  EXPECT_TRUE(OneError(Load(many), "aggregation.tan.candidates", 6,
                       "expected at most 64 candidates, got 65"));

  const std::string list = ports + "  tan:\n    candidates:\n      - ";  // item on line 6
  EXPECT_TRUE(Load(list + "{address: 10.0.9.50, port: 65535, hops: 255}\n").ok());
  EXPECT_TRUE(OneError(Load(list + "{port: 47000}\n"), "aggregation.tan.candidates[0].address", 6,
                       "missing required key \"address\""));
  EXPECT_TRUE(OneError(Load(list + "10.0.9.50\n"), "aggregation.tan.candidates[0]", 6,
                       "expected a map, got \"10.0.9.50\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9}\n"), "aggregation.tan.candidates[0].address",
                       6, "expected an IPv4 host address \"a.b.c.d\", got \"10.0.9\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 0.0.0.0}\n"), "aggregation.tan.candidates[0].address",
                       6,
                       "expected a TAN's address (strategy \"self\" makes this switch the "
                       "TAN), a unicast host address, got \"0.0.0.0\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.11}\n"),
                       "aggregation.tan.candidates[0].address", 6,
                       "got this switch's own aggregation address \"10.0.9.11\" "
                       "(aggregation.address, line 3)"));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.50, hops: 256}\n"),
                       "aggregation.tan.candidates[0].hops", 6,
                       "expected 0..255 hops, got \"256\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.50, hops: 65536}\n"),
                       "aggregation.tan.candidates[0].hops", 6,
                       "expected 0..255 hops, got \"65536\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.50, port: 0}\n"),
                       "aggregation.tan.candidates[0].port", 6,
                       "expected a UDP port 1..65535, got \"0\""));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.50, weight: 1}\n"),
                       "aggregation.tan.candidates[0].weight", 6,
                       "unknown key \"weight\"; expected one of: address, port, hops"));
  EXPECT_TRUE(OneError(Load(list + "{address: 10.0.9.50}\n      - {address: 10.0.9.51}\n"
                                   "      - {address: 10.0.9.50, port: 47000, hops: 3}\n"),
                       "aggregation.tan.candidates[2]", 8,
                       "expected each candidate once, got 10.0.9.50:47000 again (also "
                       "aggregation.tan.candidates[0], line 6)"));
  EXPECT_TRUE(
      Load(list + "{address: 10.0.9.50}\n      - {address: 10.0.9.50, port: 47001}\n").ok());
  EXPECT_TRUE(OneError(Load(ports + "  tan: {candidates: [{address: 10.0.9.50}], colour: 1}\n"),
                       "aggregation.tan.colour", 4,
                       "unknown key \"colour\"; expected one of: strategy, candidates"));

  // The same checks on a job's own tan.
  const std::string job = ports + "  jobs:\n    - id: 7\n      key: 1\n      members: 2\n";
  EXPECT_TRUE(OneError(Load(job + "      tan: {strategy: least_load}\n"), "aggregation.jobs[0].tan",
                       8, "expected 1..64 candidates for strategy \"least_load\""));
  EXPECT_TRUE(OneError(Load(job + "      tan: {strategy: fewest_hops, candidates: "
                                  "[{address: 10.0.9.50, hops: 300}]}\n"),
                       "aggregation.jobs[0].tan.candidates[0].hops", 8, "got \"300\""));
  EXPECT_TRUE(Load(job + "      tan: {strategy: self}\n").ok());

  // tan_member: a worker of the job here, not a child switch, not a stranger.
  const std::string tree = ports + "  jobs:\n    - id: 7\n      key: 1\n      node_ids: [4, 5]\n"
                                   "      switches: [{node: 9}]\n";  // job item on line 5
  const ConfigLoad with_member = Load(tree + "      tan_member: 5\n");
  ASSERT_TRUE(with_member.ok()) << with_member.FormatErrors();
  EXPECT_EQ(with_member.config.aggregation.jobs[0].tan_member, std::optional<uint16_t>(5));
  EXPECT_FALSE(Load(tree).config.aggregation.jobs[0].tan_member);
  EXPECT_TRUE(Load(job + "      tan_member: 1\n").ok());  // members: 2 are nodes 0 and 1
  EXPECT_TRUE(OneError(Load(job + "      tan_member: 2\n"), "aggregation.jobs[0].tan_member", 8,
                       "expected the node id of a worker of this job here (one that also runs "
                       "the job's TAN), got \"2\""));
  EXPECT_TRUE(OneError(Load(tree + "      tan_member: 9\n"), "aggregation.jobs[0].tan_member", 9,
                       "got \"9\""));
  EXPECT_TRUE(OneError(Load(tree + "      tan_member: 65535\n"),
                       "aggregation.jobs[0].tan_member", 9, "expected a node id 0..65534"));
}

// parameter_server: a root job whose remote TAN (agg-ps --sgd) answers every
// chunk, or a job below such a root.
TEST(TreeLoaderTest, ParameterServer) {
  const std::string ports =
      "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n"
      "  address: 10.0.9.11\n";
  const std::string job = "  jobs:\n    - id: 7\n      key: 1\n      members: 2\n";
  const std::string remote = "  tan: {candidates: [{address: 10.0.9.50}]}\n";  // line 4
  // Job keys from line 9 with the section's tan, from line 8 without.
  const ConfigLoad ps = Load(ports + remote + job + "      parameter_server: true\n");
  ASSERT_TRUE(ps.ok()) << ps.FormatErrors();
  EXPECT_TRUE(ps.config.aggregation.jobs[0].parameter_server);
  EXPECT_FALSE(Load(ports + remote + job).config.aggregation.jobs[0].parameter_server);
  EXPECT_TRUE(Load(ports + remote + job + "      parameter_server: false\n").ok());
  EXPECT_TRUE(Load(ports + job +
                   "      tan: {candidates: [{address: 10.0.9.50}]}\n"
                   "      parameter_server: true\n")
                  .ok())
      << "the job's own tan";
  EXPECT_TRUE(OneError(Load(ports + remote + job + "      parameter_server: 3\n"),
                       "aggregation.jobs[0].parameter_server", 9,
                       "expected true or false, got \"3\""));
  EXPECT_TRUE(OneError(Load(ports + job + "      parameter_server: true\n"),
                       "aggregation.jobs[0].parameter_server", 8,
                       "expected a remote tan for a parameter-server job (the job's tan, or "
                       "aggregation.tan, with a strategy other than \"self\": the agg-ps --sgd "
                       "that answers every chunk), got none"));
  EXPECT_TRUE(
      OneError(Load(ports + "  tan: {strategy: self}\n" + job + "      parameter_server: true\n"),
               "aggregation.jobs[0].parameter_server", 9,
               "got strategy \"self\" (aggregation.tan, line 4)"));
  EXPECT_TRUE(OneError(Load(ports + remote + job +
                            "      tan: {strategy: self}\n"
                            "      parameter_server: true\n"),
                       "aggregation.jobs[0].parameter_server", 10,
                       "got strategy \"self\" (aggregation.jobs[0].tan, line 9)"));
  // Below the root: the job's root has a parameter server, and this switch
  // needs no TAN for it.
  const ConfigLoad below =
      Load(ports + job +
           "      upstream: {address: 10.0.9.1, node: 100}\n"
           "      parameter_server: true\n");
  ASSERT_TRUE(below.ok()) << below.FormatErrors();
  EXPECT_TRUE(below.config.aggregation.jobs[0].parameter_server);
}

TEST(TreeLoaderTest, PartialsNeedTheSwitchsOwnAddress) {
  const std::string ports = "ports: [{name: p0, devargs: d, access: 10}]\naggregation:\n";
  const std::string job = "  jobs:\n    - id: 7\n      key: 1\n      members: 2\n";
  // An upstream: the error names the job at its upstream.
  EXPECT_TRUE(OneError(Load(ports + job + "      upstream: {address: 10.0.9.1, node: 100}\n"),
                       "aggregation.jobs[0].upstream", 7,
                       "expected aggregation.address to be set: job 7 has an upstream (a switch "
                       "sends partials, and first data to the TAN, from its own address)"));
  // The job's own timer.
  EXPECT_TRUE(OneError(Load(ports + job + "      timeout_ms: 5\n"),
                       "aggregation.jobs[0].timeout_ms", 7,
                       "expected aggregation.address to be set: job 7 has timers on "
                       "(timeout_ms 5)"));
  // The section's timer, inherited.
  EXPECT_TRUE(OneError(Load(ports + "  in_band_registration: false\n  timeout_ms: 20\n" + job),
                       "aggregation.jobs[0]", 6,
                       "expected aggregation.address to be set: job 7 has timers on (timeout_ms "
                       "20, from aggregation.timeout_ms)"));
  // A job that turns its timer off needs no address.
  EXPECT_TRUE(Load(ports + "  in_band_registration: false\n  timeout_ms: 20\n" + job +
                   "      timeout_ms: 0\n")
                  .ok());
  // Jobs that register in band get the section's timer.
  EXPECT_TRUE(OneError(Load(ports + "  timeout_ms: 20\n"), "aggregation.timeout_ms", 3,
                       "expected aggregation.address to be set: timers are on for the jobs that "
                       "register in band"));
  EXPECT_TRUE(Load(ports + "  timeout_ms: 20\n  in_band_registration: false\n").ok());
  EXPECT_TRUE(Load(ports + "  address: 10.0.9.11\n  timeout_ms: 20\n" + job +
                   "      upstream: {address: 10.0.9.1, node: 100}\n")
                  .ok());
}

TEST(TreeLoaderTest, ReloadComparesSectionsByValueNotByLine) {
  const std::string a = R"yaml(ports: [{name: p0, devargs: d, access: 10}]
aggregation:
  address: 10.0.9.11
  timeout_ms: 20
  bypass: {subswitch: nodes}
  tan: {strategy: fixed, candidates: [{address: 10.0.9.50, hops: 1}]}
  jobs:
    - {id: 7, key: 1, node_ids: [0-3], switches: [{node: 100, covers: [4-7]}], timeout_ms: 30}
)yaml";
  // The same values, laid out differently.
  const std::string b = R"yaml(ports: [{name: p0, devargs: d, access: 10}]
aggregation:
  jobs:
    - id: 7
      key: 1
      members: 5
      node_ids: [0, 1, 2, 3]
      switches:
        - node: 100
          covers: ["4-7"]
      timeout_ms: 30
  tan:
    strategy: fixed
    candidates:
      - address: 10.0.9.50
        hops: 1
        port: 47000
  bypass:
    subswitch: nodes
  timeout_ms: 20
  address: 10.0.9.11
)yaml";
  const ConfigLoad first = Load(a);
  const ConfigLoad second = Load(b);
  ASSERT_TRUE(first.ok()) << Dump(first);
  ASSERT_TRUE(second.ok()) << Dump(second);
  EXPECT_EQ(first.config.aggregation, second.config.aggregation);

  auto changed = [&](const std::string& from, const std::string& to) {
    std::string text = a;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    const ConfigLoad load = Load(text);
    EXPECT_TRUE(load.ok()) << to << Dump(load);
    return load.config.aggregation;
  };
  const AggregationConfig& base = first.config.aggregation;
  EXPECT_NE(changed("timeout_ms: 20", "timeout_ms: 21"), base);
  EXPECT_NE(changed("{subswitch: nodes}", "{subswitch: switch}"), base);
  EXPECT_NE(changed("hops: 1", "hops: 2"), base);
  EXPECT_NE(changed("strategy: fixed", "strategy: random"), base);
  EXPECT_NE(changed("covers: [4-7]", "covers: [4-8]"), base);
  EXPECT_NE(changed("node: 100", "node: 101"), base);
  EXPECT_NE(changed("node_ids: [0-3]", "node_ids: [0-2, 8]"), base);
  EXPECT_NE(changed("node_ids: [0-3]", "node_ids: [3, 0-2]"), base) << "member order matters";
  EXPECT_NE(changed("timeout_ms: 30}", "timeout_ms: 30, trigger: batch}"), base);
  EXPECT_NE(changed("timeout_ms: 30}", "timeout_ms: 30, upstream: {address: 10.0.9.1, node: 9}}"),
            base);
  EXPECT_NE(changed("timeout_ms: 30}", "}"), base) << "an override that is absent";
  EXPECT_NE(changed("  tan: {strategy: fixed, candidates: [{address: 10.0.9.50, hops: 1}]}\n", ""),
            base);
}

// --- Files ----------------------------------------------------------------------------

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(LoadFileTest, MissingFileIsOneErrorOnLineZero) {
  const ConfigLoad load = LoadConfigFile("/nonexistent/aggswitch.yaml");
  ASSERT_EQ(load.errors.size(), 1u);
  EXPECT_EQ(load.source_name, "/nonexistent/aggswitch.yaml");
  EXPECT_EQ(load.errors[0].loc.line, 0);
  EXPECT_EQ(load.FormatErrors(),
            "/nonexistent/aggswitch.yaml:0:0: cannot read: No such file or directory");
}

TEST(LoadFileTest, DirectoryIsOneError) {
  const ConfigLoad load = LoadConfigFile(::testing::TempDir());
  ASSERT_EQ(load.errors.size(), 1u);
  EXPECT_EQ(load.errors[0].message, "cannot read: is a directory");
}

// Bytes this process has had resident at most (ru_maxrss).
size_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<size_t>(usage.ru_maxrss) * 1024;
}

// A few hundred bytes of YAML whose aliases expand one range into millions
// of node ids: refused when the file's bound is reached, in little time and
// memory. (It used to take gigabytes: each expanded id was recorded with its
// own location.)
TEST(LoaderBoundsTest, AliasesCannotExpandRangesWithoutBound) {
  std::string yaml = "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n";
  yaml += "  - {id: 1, key: 1, switches: [{node: 65534, covers: &c [\"0-65533\"]}]}\n";
  for (int j = 2; j <= 40; ++j) {
    yaml += "  - {id: " + std::to_string(j) + ", key: 1, switches: [{node: 65534, covers: *c}]}\n";
  }
  const size_t rss_before = PeakRssBytes();
  const auto start = std::chrono::steady_clock::now();
  const ConfigLoad load = Load(yaml);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(load.ok());
  // 16 jobs of 65534 ids fit in 2^20; the 17th does not.
  bool bounded = false;
  for (const ConfigError& e : load.errors) {
    if (e.path == "aggregation.jobs[16].switches[0].covers[0]" &&
        e.message.find("expected at most 1048576 node ids in the whole file") != std::string::npos) {
      bounded = true;
      EXPECT_EQ(e.loc.line, 4) << "where the aliased range is written";
    }
  }
  EXPECT_TRUE(bounded) << Dump(load);
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_LT(PeakRssBytes() - rss_before, size_t{400} << 20);
}

TEST(LoaderBoundsTest, OneJobListsAtMost65535NodeIds) {
  const ConfigLoad load = Load(
      "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n"
      "  - id: 1\n    key: 1\n    node_ids: [\"0-9\"]\n"
      "    switches:\n      - {node: 10, covers: [\"11-65534\"]}\n"
      "      - {node: 65534, covers: [\"11-12\"]}\n");
  ASSERT_FALSE(load.ok());
  const auto it = std::find_if(load.errors.begin(), load.errors.end(), [](const ConfigError& e) {
    return e.path == "aggregation.jobs[0].switches[1].covers[0]";
  });
  ASSERT_NE(it, load.errors.end()) << Dump(load);
  EXPECT_EQ(it->loc.line, 9);
  EXPECT_NE(it->message.find("expected at most 65535 node ids in a job's node_ids and covers "
                             "lists"),
            std::string::npos)
      << it->message;
}

// Values inside a range point at the range's item, as when every id had its
// own location.
TEST(LoaderBoundsTest, ValuesOfARangeHaveTheirItemsLocation) {
  const ConfigLoad load = Load(
      "ports: [{name: p0, devargs: d}]\naggregation:\n  jobs:\n"
      "  - id: 1\n    key: 1\n    node_ids:\n      - 7\n      - \"0-3\"\n      - 9\n");
  ASSERT_TRUE(load.ok()) << Dump(load);
  const Config& c = load.config;
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[0]").line, 7);
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[1]").line, 8);
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[4]").line, 8);
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[5]").line, 9);
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[6]", {42, 1}).line, 9) << "past the end: the last item";
  EXPECT_EQ(c.LocOf("aggregation.jobs[0].node_ids[x]", {42, 1}).line, 42);
}

TEST(LoaderBoundsTest, ListsHaveAtMost65536Items) {
  std::string yaml = "mac_table:\n  static: [";
  for (int i = 0; i < 70000; ++i) yaml += i == 0 ? "&m {mac: \"02:00:00:00:00:01\", port: p0}" : ", *m";
  yaml += "]\nports: [{name: p0, devargs: d}]\n";
  const ConfigLoad load = Load(yaml);
  EXPECT_TRUE(OneError(load, "mac_table.static", 2, "expected at most 65536 items, got 70000"))
      << Dump(load);
}

TEST(LoaderBoundsTest, DeepNestingNamesTheDepthAndTheLine) {
  const ConfigLoad load = Load("ports: [{name: p0, devargs: d}]\nmac_table:\n  static: " +
                               std::string(3000, '[') + std::string(3000, ']') + "\n");
  ASSERT_EQ(load.errors.size(), 1u) << Dump(load);
  const ConfigError& e = load.errors[0];
  EXPECT_EQ(e.loc.line, 3);
  EXPECT_NE(e.message.find("invalid YAML: lists and maps nested too deep (the parser stopped at "
                           "depth "),
            std::string::npos)
      << e.message;
  EXPECT_EQ(e.message.find("bad file"), std::string::npos) << e.message;
}

TEST(LoaderBoundsTest, FilesAbove16MiBAreNotRead) {
  const std::string path = WriteTemp("agg_huge.yaml", "ports: [{name: p0, devargs: d}]\n#" +
                                                          std::string(size_t{17} << 20, 'x') + "\n");
  const ConfigLoad load = LoadConfigFile(path);
  ASSERT_EQ(load.errors.size(), 1u);
  EXPECT_EQ(load.errors[0].message, "cannot read: larger than 16 MiB");
  std::remove(path.c_str());
}

TEST(LoadFileTest, ErrorsNameTheFile) {
  const std::string path =
      WriteTemp("agg_bad.yaml", "ports:\n  - {name: p0, devargs: d, mtu: 1}\n");
  const ConfigLoad load = LoadConfigFile(path);
  EXPECT_EQ(load.FormatErrors(), path + ":2:33: ports[0].mtu: expected an MTU 68..9600, got \"1\"");
  std::remove(path.c_str());
}

TEST(LoadConfigTest, ReturnsTheConfigOrInvalidArgument) {
  const std::string good = WriteTemp("agg_good.yaml", "ports: [{name: p0, devargs: d}]\n");
  common::Result<Config> config = LoadConfig(good);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->ports[0].name, "p0");
  std::remove(good.c_str());

  const std::string bad = WriteTemp("agg_bad2.yaml", "ports: []\nrole: x\n");
  const common::Result<Config> failed = LoadConfig(bad);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.status().message(),
            bad + ":1:8: ports: expected 1..64 ports, got none\n" + bad +
                ":2:1: role: unknown key \"role\"; expected one of: eal, switch, ports, workers, "
                "mac_table, mempool, http, aggregation, telemetry");
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace aggswitch::config
