// Tests of the Config structs and Validate() on configurations built in code.
// The YAML-driven tests, with lines and columns, are in loader_test.cc.
#include "config/config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace aggswitch::config {
namespace {

using common::MacAddr;

PortConfig AccessPort(std::string name, std::string devargs, uint16_t vlan) {
  PortConfig port;
  port.name = std::move(name);
  port.devargs = std::move(devargs);
  port.access_vlan = vlan;
  return port;
}

PortConfig TrunkPort(std::string name, std::string devargs, std::vector<uint16_t> vlans) {
  PortConfig port;
  port.name = std::move(name);
  port.devargs = std::move(devargs);
  port.mode = VlanMode::kTrunk;
  port.trunk_vlans = std::move(vlans);
  return port;
}

// Two access ports in VLAN 10 and a trunk with 10 and 20, one worker polling all.
Config ValidConfig() {
  Config config;
  config.ports.push_back(AccessPort("p0", "net_null0", 10));
  config.ports.push_back(AccessPort("p1", "net_null1", 10));
  config.ports.push_back(TrunkPort("p2", "net_null2", {10, 20}));
  WorkerConfig worker;
  worker.lcore = 1;
  worker.rx = {{"p0", 0, {}}, {"p1", 0, {}}, {"p2", 0, {}}};
  config.workers.push_back(worker);
  return config;
}

std::vector<ConfigError> ErrorsOf(const Config& config) {
  std::vector<ConfigError> errors;
  Validate(config, errors);
  return errors;
}

// Exactly one error, at `path`, whose message contains `fragment`.
::testing::AssertionResult OneError(const Config& config, const std::string& path,
                                    const std::string& fragment) {
  const std::vector<ConfigError> errors = ErrorsOf(config);
  std::string all;
  for (const ConfigError& e : errors) all += "\n  " + e.Format("cfg");
  if (errors.size() != 1) {
    return ::testing::AssertionFailure() << "expected one error, got " << errors.size() << all;
  }
  if (errors[0].path != path) {
    return ::testing::AssertionFailure() << "expected path " << path << all;
  }
  if (errors[0].message.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected message with '" << fragment << "'" << all;
  }
  return ::testing::AssertionSuccess();
}

TEST(ConfigErrorTest, FormatsSourceLineColumnPathAndMessage) {
  const ConfigError error{"ports[1].access", {12, 13}, "expected a VLAN id 1..4094, got \"5000\""};
  EXPECT_EQ(error.Format("cfg.yaml"),
            "cfg.yaml:12:13: ports[1].access: expected a VLAN id 1..4094, got \"5000\"");
}

TEST(ConfigErrorTest, FormatLeavesOutAnEmptyPath) {
  const ConfigError error{"", {}, "cannot read: No such file or directory"};
  EXPECT_EQ(error.Format("/etc/a.yaml"), "/etc/a.yaml:0:0: cannot read: No such file or directory");
}

TEST(ConfigTest, FindPortAndPortIndex) {
  const Config config = ValidConfig();
  EXPECT_EQ(config.PortIndex("p0"), 0);
  EXPECT_EQ(config.PortIndex("p2"), 2);
  EXPECT_EQ(config.PortIndex("p3"), -1);
  EXPECT_EQ(config.PortIndex(""), -1);
  ASSERT_NE(config.FindPort("p1"), nullptr);
  EXPECT_EQ(config.FindPort("p1")->devargs, "net_null1");
  EXPECT_EQ(config.FindPort("nope"), nullptr);
}

TEST(ConfigTest, RxQueueCountIsOnePastTheHighestPolledQueue) {
  Config config = ValidConfig();
  WorkerConfig second;
  second.lcore = 2;
  second.rx = {{"p2", 3, {}}, {"p2", 1, {}}, {"p2", 2, {}}};
  config.workers.push_back(second);
  EXPECT_EQ(config.RxQueueCount("p0"), 1);
  EXPECT_EQ(config.RxQueueCount("p2"), 4);
  EXPECT_EQ(config.RxQueueCount("unknown"), 0);
  config.workers[0].rx.erase(config.workers[0].rx.begin());  // nobody polls p0 now
  EXPECT_EQ(config.RxQueueCount("p0"), 0);
}

TEST(ConfigTest, LocOfReturnsTheRecordedLocationOrTheFallback) {
  Config config;
  config.source_locs["ports[0].mtu"] = {7, 10};
  EXPECT_EQ(config.LocOf("ports[0].mtu").line, 7);
  EXPECT_EQ(config.LocOf("ports[0].mtu").column, 10);
  EXPECT_EQ(config.LocOf("ports[1].mtu", {3, 5}).line, 3);
  EXPECT_EQ(config.LocOf("ports[1].mtu").line, 0);
}

TEST(PortConfigTest, AccessPortCarriesOnlyItsVlan) {
  const PortConfig port = AccessPort("p0", "net_null0", 10);
  EXPECT_TRUE(port.Carries(10));
  EXPECT_FALSE(port.Carries(1));
  EXPECT_FALSE(port.Carries(20));
}

TEST(PortConfigTest, TrunkCarriesItsListAndItsNativeVlan) {
  PortConfig port = TrunkPort("p0", "net_null0", {10, 20});
  EXPECT_TRUE(port.Carries(10));
  EXPECT_TRUE(port.Carries(20));
  EXPECT_FALSE(port.Carries(1));
  port.native_vlan = 1;
  EXPECT_TRUE(port.Carries(1));
  EXPECT_FALSE(port.Carries(30));
}

TEST(ParseLcoreListTest, AcceptsEalSyntax) {
  using V = std::vector<unsigned>;
  EXPECT_EQ(ParseLcoreList("0,1"), V({0, 1}));
  EXPECT_EQ(ParseLcoreList("3"), V({3}));
  EXPECT_EQ(ParseLcoreList("2-5"), V({2, 3, 4, 5}));
  EXPECT_EQ(ParseLcoreList("0,4-5,2"), V({0, 2, 4, 5}));
  EXPECT_EQ(ParseLcoreList("1@2"), V({1}));
  EXPECT_EQ(ParseLcoreList("(4-5)@6"), V({4, 5}));
  EXPECT_EQ(ParseLcoreList("7@(0,1)"), V({7}));
  EXPECT_EQ(ParseLcoreList("(0,2-3)@(4-5,7),8@9"), V({0, 2, 3, 8}));
  EXPECT_EQ(ParseLcoreList("1,1,0-1"), V({0, 1}));
  EXPECT_EQ(ParseLcoreList("1023"), V({1023}));
}

TEST(ParseLcoreListTest, RejectsMalformedLists) {
  for (const char* bad :
       {"",   ",",    "0,",   ",0", "a",   "1-",  "-1",   "3-1",    "1@",    "@1",
        "(1", "(1,2", "1@(2", "()", "1 2", "0x1", "1024", "0-1024", "1@2@3", "(1)2"}) {
    EXPECT_EQ(ParseLcoreList(bad), std::nullopt) << '"' << bad << '"';
  }
}

TEST(ApplyDerivedDefaultsTest, AddsOneWorkerOnTheLowestNonMainLcore) {
  Config config = ValidConfig();
  config.workers.clear();
  config.eal.lcores = "4-6,2";
  config.eal.main_lcore = 2;
  ApplyDerivedDefaults(config);
  ASSERT_EQ(config.workers.size(), 1u);
  EXPECT_EQ(config.workers[0].lcore, 4u);
  ASSERT_EQ(config.workers[0].rx.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(config.workers[0].rx[i].port, config.ports[i].name);
    EXPECT_EQ(config.workers[0].rx[i].queue, 0);
    EXPECT_EQ(config.workers[0].rx[i].loc.line, 0);
  }
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ApplyDerivedDefaultsTest, KeepsExplicitWorkers) {
  Config config = ValidConfig();
  config.workers[0].lcore = 1;
  config.workers[0].rx.resize(1);
  ApplyDerivedDefaults(config);
  ASSERT_EQ(config.workers.size(), 1u);
  EXPECT_EQ(config.workers[0].rx.size(), 1u);
}

TEST(ApplyDerivedDefaultsTest, AddsNoWorkerWithoutASpareLcore) {
  Config config = ValidConfig();
  config.workers.clear();
  config.eal.lcores = "0";
  ApplyDerivedDefaults(config);
  EXPECT_TRUE(config.workers.empty());
  EXPECT_TRUE(OneError(config, "workers", "has no lcore besides eal.main_lcore 0"));

  config.eal.lcores = "zero";
  ApplyDerivedDefaults(config);
  EXPECT_TRUE(config.workers.empty());
  // Only the lcore list is wrong; the missing worker follows from it.
  EXPECT_TRUE(OneError(config, "eal.lcores", "got \"zero\""));
}

TEST(ApplyDerivedDefaultsTest, AddsTheAggregationAddressAsASwitchAddress) {
  Config config = ValidConfig();
  config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.10.254/24"), 0, {}});
  SwitchAddress agg;
  agg.prefix = *common::Ipv4Prefix::Parse("10.0.20.250");
  agg.vlan = 20;
  config.aggregation.address = agg;
  ApplyDerivedDefaults(config);
  ASSERT_EQ(config.switch_.addresses.size(), 2u);
  const SwitchAddress& derived = config.switch_.addresses[1];
  EXPECT_EQ(derived.prefix.ToString(), "10.0.20.250/32");
  EXPECT_EQ(derived.vlan, 20);
  EXPECT_TRUE(derived.from_aggregation);
  // Idempotent.
  ApplyDerivedDefaults(config);
  EXPECT_EQ(config.switch_.addresses.size(), 2u);
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ApplyDerivedDefaultsTest, KeepsASwitchAddressThatIsAlsoTheAggregationAddress) {
  Config config = ValidConfig();
  config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.10.254/24"), 0, {}});
  SwitchAddress agg;
  agg.prefix = *common::Ipv4Prefix::Parse("10.0.10.254");
  config.aggregation.address = agg;
  ApplyDerivedDefaults(config);
  EXPECT_EQ(config.switch_.addresses.size(), 1u);
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, AggregationDefaultsAreValid) {
  const AggregationConfig agg;
  EXPECT_FALSE(agg.address);
  EXPECT_EQ(agg.udp_port, 47000);
  EXPECT_TRUE(agg.in_band_registration);
  EXPECT_EQ(agg.slots, 4096u);
  EXPECT_EQ(agg.max_fan_in, 256);
  EXPECT_EQ(agg.max_jobs, 1024u);
  EXPECT_TRUE(agg.jobs.empty());
  EXPECT_TRUE(ErrorsOf(ValidConfig()).empty());
}

TEST(ValidateTest, AggregationChecks) {
  auto with = [](auto change) {
    Config config = ValidConfig();
    change(config.aggregation);
    ApplyDerivedDefaults(config);
    return config;
  };
  auto job = [](uint32_t id, uint16_t members) {
    AggregationJobConfig j;
    j.id = id;
    j.key = id;
    j.members = members;
    return j;
  };
  EXPECT_TRUE(OneError(with([](auto& a) { a.udp_port = 0; }), "aggregation.udp_port", "got \"0\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.slots = 100; }), "aggregation.slots",
                       "expected a power of two 64..1048576, got \"100\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.slots = 32; }), "aggregation.slots", "\"32\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.slots = 2097152; }), "aggregation.slots", "2097152"));
  EXPECT_TRUE(OneError(with([](auto& a) { a.max_fan_in = 0; }), "aggregation.max_fan_in",
                       "expected 1..1024 members, got \"0\""));
  EXPECT_TRUE(
      OneError(with([](auto& a) { a.max_fan_in = 1025; }), "aggregation.max_fan_in", "1025"));
  EXPECT_TRUE(OneError(with([](auto& a) { a.max_jobs = 0; }), "aggregation.max_jobs",
                       "expected 1..65536 jobs, got \"0\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.max_jobs = 65537; }), "aggregation.max_jobs", "65537"));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.max_jobs = 1;
                         a.jobs = {job(1, 2), job(2, 2)};
                       }),
                       "aggregation.jobs",
                       "expected at most 1 jobs (aggregation.max_jobs), got 2"));
  EXPECT_TRUE(OneError(with([&](auto& a) { a.jobs = {job(0, 2)}; }), "aggregation.jobs[0].id",
                       "expected a job id 1..4294967295"));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.jobs = {job(7, 2), job(8, 2), job(7, 3)};
                       }),
                       "aggregation.jobs[2].id",
                       "expected each job id once, got \"7\" again (also aggregation.jobs[0])"));
  EXPECT_TRUE(OneError(with([&](auto& a) { a.jobs = {job(7, 0)}; }), "aggregation.jobs[0].members",
                       "expected 1..256 members (aggregation.max_fan_in), got \"0\""));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.max_fan_in = 8;
                         a.jobs = {job(7, 9)};
                       }),
                       "aggregation.jobs[0].members", "expected 1..8 members"));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.jobs = {job(7, 2)};
                         a.jobs[0].nodes = 0;
                       }),
                       "aggregation.jobs[0].nodes", "expected a node count 1..65535"));
  // Several nodes, but no upstream to send the partial sum to and no child
  // switches to sum: the members' sum would be answered as the result.
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.jobs = {job(7, 2)};
                         a.jobs[0].nodes = 2;
                       }),
                       "aggregation.jobs[0].nodes",
                       "expected 1 for a job with neither an upstream nor child switches"));
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) {
                a.max_fan_in = 1024;
                a.max_jobs = 2;
                a.jobs = {job(1, 1024), job(0xffffffff, 1)};
              })).empty());
}

TEST(ValidateTest, AggregationAddressChecks) {
  auto with_address = [](const char* ip, uint16_t vlan) {
    Config config = ValidConfig();
    SwitchAddress agg;
    agg.prefix = *common::Ipv4Prefix::Parse(ip);
    agg.vlan = vlan;
    config.aggregation.address = agg;
    ApplyDerivedDefaults(config);
    return config;
  };
  EXPECT_TRUE(ErrorsOf(with_address("10.0.10.254", 0)).empty());
  EXPECT_TRUE(ErrorsOf(with_address("10.0.20.254", 20)).empty());
  for (const char* bad : {"0.0.0.0", "127.0.0.1", "224.0.0.5", "255.255.255.255"}) {
    EXPECT_TRUE(
        OneError(with_address(bad, 0), "aggregation.address", "expected a unicast host address"))
        << bad;
  }
  EXPECT_TRUE(OneError(with_address("10.0.10.254", 30), "aggregation.address.vlan",
                       "expected a VLAN that some port carries, got \"30\""));
  EXPECT_TRUE(OneError(with_address("10.0.10.254", 4095), "aggregation.address.vlan",
                       "expected a VLAN id 1..4094"));

  // A switch address with the same IP must cover the aggregation VLAN.
  Config narrow = ValidConfig();
  narrow.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.10.254/24"), 10, {}});
  SwitchAddress agg;
  agg.prefix = *common::Ipv4Prefix::Parse("10.0.10.254");
  narrow.aggregation.address = agg;
  ApplyDerivedDefaults(narrow);
  EXPECT_TRUE(OneError(narrow, "aggregation.address",
                       "expected switch.addresses[0], which has the same address on VLAN 10 only, "
                       "to cover every VLAN"));
  narrow.aggregation.address->vlan = 10;
  EXPECT_TRUE(ErrorsOf(narrow).empty());

  // No room left in switch.addresses.
  Config full = ValidConfig();
  for (size_t i = 0; i < kMaxSwitchAddresses; ++i) {
    full.switch_.addresses.push_back(
        {*common::Ipv4Prefix::Parse("10.1." + std::to_string(i) + ".1/24"), 0, {}});
  }
  full.aggregation.address = agg;
  ApplyDerivedDefaults(full);
  EXPECT_EQ(full.switch_.addresses.size(), kMaxSwitchAddresses);
  EXPECT_TRUE(OneError(full, "aggregation.address", "expected room for the aggregation address"));
}

// --- The tree: node ids, child switches, upstream, timers, bypass, TAN ---------------

AggregationJobConfig TreeJob(uint32_t id, std::vector<uint16_t> node_ids,
                             std::vector<ChildSwitchConfig> switches) {
  AggregationJobConfig job;
  job.id = id;
  job.key = id;
  job.node_ids = std::move(node_ids);
  job.switches = std::move(switches);
  job.members = static_cast<uint16_t>(job.node_ids.size() + job.switches.size());
  return job;
}

ChildSwitchConfig Child(uint16_t node, std::vector<uint16_t> covers = {}) {
  ChildSwitchConfig child;
  child.node = node;
  child.covers = std::move(covers);
  return child;
}

TanCandidate Candidate(const char* ip, uint16_t hops = 0) {
  TanCandidate candidate;
  candidate.address = *common::Ipv4Addr::Parse(ip);
  candidate.hops = hops;
  return candidate;
}

// ValidConfig() with aggregation address 10.0.10.250 and `job`.
Config TreeConfig(AggregationJobConfig job) {
  Config config = ValidConfig();
  SwitchAddress address;
  address.prefix = *common::Ipv4Prefix::Parse("10.0.10.250");
  config.aggregation.address = address;
  config.aggregation.jobs.push_back(std::move(job));
  ApplyDerivedDefaults(config);
  return config;
}

TEST(TreeConfigTest, Defaults) {
  const AggregationConfig agg;
  EXPECT_EQ(agg.timeout_ms, 0u);
  EXPECT_EQ(agg.trigger, AggTrigger::kIncremental);
  EXPECT_EQ(agg.give_up_ms, 5000u);
  EXPECT_EQ(agg.bypass.entries, 65536u);
  EXPECT_EQ(agg.bypass.ttl_ms, 10000u);
  EXPECT_EQ(agg.bypass.subswitch, SubswitchEntries::kSwitch);
  EXPECT_FALSE(agg.tan);
  const AggregationJobConfig job;
  EXPECT_TRUE(job.node_ids.empty());
  EXPECT_TRUE(job.switches.empty());
  EXPECT_FALSE(job.upstream);
  EXPECT_FALSE(job.timeout_ms);
  EXPECT_FALSE(job.trigger);
  EXPECT_FALSE(job.tan);
  EXPECT_FALSE(job.parameter_server);
  EXPECT_EQ(UpstreamConfig().port, kDefaultAggregationUdpPort);
  EXPECT_EQ(UpstreamConfig().vlan, 0);
  EXPECT_EQ(TanCandidate().port, kDefaultAggregationUdpPort);
  EXPECT_EQ(TanConfig().strategy, TanStrategy::kFixed);
}

TEST(TreeConfigTest, MemberNodeIdsListsWorkersThenChildSwitches) {
  AggregationJobConfig job = TreeJob(1, {7, 3, 5}, {Child(200, {0, 1}), Child(100)});
  EXPECT_EQ(job.MemberNodeIds(), std::vector<uint16_t>({7, 3, 5, 200, 100}));
  job.node_ids.clear();
  EXPECT_EQ(job.MemberNodeIds(), std::vector<uint16_t>({200, 100}));
  // Flat: 0..members-1.
  AggregationJobConfig flat;
  flat.members = 4;
  EXPECT_EQ(flat.MemberNodeIds(), std::vector<uint16_t>({0, 1, 2, 3}));
  flat.members = 0;
  EXPECT_TRUE(flat.MemberNodeIds().empty());
}

TEST(TreeConfigTest, EqualityIgnoresLocationsButNotValues) {
  AggregationJobConfig a = TreeJob(1, {0, 1}, {Child(100, {2, 3})});
  a.upstream = UpstreamConfig{*common::Ipv4Addr::Parse("10.0.0.1"), 47000, 9, 0, {3, 4}};
  a.tan.reset();
  AggregationJobConfig b = a;
  b.loc = {10, 1};
  b.switches[0].loc = {11, 5};
  b.upstream->loc = {12, 7};
  EXPECT_EQ(a, b);
  b.switches[0].covers.push_back(4);
  EXPECT_NE(a, b);
  b = a;
  b.upstream->vlan = 10;
  EXPECT_NE(a, b);
  b = a;
  b.timeout_ms = 0;
  EXPECT_NE(a, b) << "an explicit 0 is not an absent override";
  b = a;
  b.trigger = AggTrigger::kBatch;
  EXPECT_NE(a, b);
  b = a;
  b.parameter_server = true;
  EXPECT_NE(a, b);

  AggregationConfig x;
  x.tan = TanConfig{TanStrategy::kFewestHops, {Candidate("10.0.9.50", 1)}, {1, 1}};
  AggregationConfig y = x;
  y.tan->loc = {2, 2};
  y.tan->candidates[0].loc = {3, 3};
  EXPECT_EQ(x, y);
  y.tan->candidates[0].hops = 2;
  EXPECT_NE(x, y);
  y = x;
  y.bypass.subswitch = SubswitchEntries::kNodes;
  EXPECT_NE(x, y);
  y = x;
  y.bypass.loc = {9, 9};
  EXPECT_EQ(x, y);
}

TEST(ValidateTest, TreeMembers) {
  EXPECT_TRUE(ErrorsOf(TreeConfig(TreeJob(7, {0, 1, 2, 3}, {Child(100, {4, 5})}))).empty());
  EXPECT_TRUE(ErrorsOf(TreeConfig(TreeJob(7, {}, {Child(100), Child(101)}))).empty());

  // The count must match the lists.
  AggregationJobConfig stale = TreeJob(7, {0, 1}, {Child(100)});
  stale.members = 2;
  EXPECT_TRUE(OneError(TreeConfig(stale), "aggregation.jobs[0].members",
                       "expected members to equal the node ids and child switches listed (2 "
                       "node_ids + 1 switches = 3), got \"2\""));
  Config wide = TreeConfig(TreeJob(7, {0, 1, 2}, {Child(100)}));
  wide.aggregation.max_fan_in = 3;
  EXPECT_TRUE(OneError(wide, "aggregation.jobs[0].node_ids",
                       "expected 1..3 members (aggregation.max_fan_in), got \"4\" (3 node_ids + 1 "
                       "switches)"));
  wide.aggregation.jobs[0] = TreeJob(7, {}, {Child(100), Child(101), Child(102), Child(103)});
  EXPECT_TRUE(
      OneError(wide, "aggregation.jobs[0].switches", "got \"4\" (0 node_ids + 4 switches)"));

  // Node ids: in range, once per job.
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {0, 65535}, {})), "aggregation.jobs[0].node_ids[1]",
                       "expected a node id 0..65534 (65535 is reserved), got \"65535\""));
  EXPECT_TRUE(ErrorsOf(TreeConfig(TreeJob(7, {0, 65534}, {}))).empty());
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {4, 5, 4}, {})), "aggregation.jobs[0].node_ids[2]",
                       "expected each member's node id once in the job, got \"4\" again (also "
                       "aggregation.jobs[0].node_ids[0])"));
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {4, 5}, {Child(5)})),
                       "aggregation.jobs[0].switches[0].node",
                       "got \"5\" again (also aggregation.jobs[0].node_ids[1])"));
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(65535)})),
                       "aggregation.jobs[0].switches[0].node", "65535 is reserved"));

  // Covers: below the child, not the child, not a member here, under one child.
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(100, {0, 100})})),
                       "aggregation.jobs[0].switches[0].covers[1]",
                       "expected the node ids below switch \"100\", not its own, got \"100\""));
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(100, {0, 1, 0})})),
                       "aggregation.jobs[0].switches[0].covers[2]",
                       "got \"0\" again (also aggregation.jobs[0].switches[0].covers[0])"));
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(100, {0, 1}), Child(101, {1, 2})})),
                       "aggregation.jobs[0].switches[1].covers[0]",
                       "expected each node id below one child switch, once, got \"1\" again"));
  EXPECT_TRUE(OneError(
      TreeConfig(TreeJob(7, {3}, {Child(100, {3})})), "aggregation.jobs[0].switches[0].covers[0]",
      "not a member of the job here, got \"3\" (also aggregation.jobs[0].node_ids[0])"));
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(100, {0}), Child(101, {100})})),
                       "aggregation.jobs[0].switches[1].covers[0]",
                       "not a member of the job here, got \"100\" (also "
                       "aggregation.jobs[0].switches[0].node)"));
  EXPECT_TRUE(
      ErrorsOf(TreeConfig(TreeJob(7, {8}, {Child(100, {0, 1}), Child(101, {2, 200})}))).empty());
  EXPECT_TRUE(OneError(TreeConfig(TreeJob(7, {}, {Child(100, {65535})})),
                       "aggregation.jobs[0].switches[0].covers[0]", "65535 is reserved"));
  Config nodes = TreeConfig(TreeJob(7, {}, {Child(100, {0}), Child(101)}));
  nodes.aggregation.bypass.subswitch = SubswitchEntries::kNodes;
  EXPECT_TRUE(OneError(nodes, "aggregation.jobs[0].switches[1]",
                       "expected covers, the node ids below switch \"101\""));
  nodes.aggregation.bypass.subswitch = SubswitchEntries::kSwitch;
  EXPECT_TRUE(ErrorsOf(nodes).empty());
}

TEST(ValidateTest, TreeUpstream) {
  auto with_upstream = [](const char* ip, uint16_t node, auto change) {
    AggregationJobConfig job = TreeJob(7, {0, 1, 2, 3}, {});
    job.upstream.emplace();
    job.upstream->address = *common::Ipv4Addr::Parse(ip);
    job.upstream->node = node;
    change(*job.upstream, job);
    return TreeConfig(job);
  };
  auto none = [](auto&, auto&) {};
  EXPECT_TRUE(ErrorsOf(with_upstream("10.0.10.1", 100, none)).empty());
  EXPECT_TRUE(
      ErrorsOf(with_upstream("10.0.10.1", 100, [](auto& up, auto&) { up.vlan = 20; })).empty());
  EXPECT_TRUE(OneError(with_upstream("10.0.10.250", 100, none),
                       "aggregation.jobs[0].upstream.address",
                       "expected the parent switch's aggregation address, got this switch's own "
                       "aggregation address \"10.0.10.250\" (aggregation.address)"));
  EXPECT_TRUE(OneError(with_upstream("0.0.0.0", 100, none), "aggregation.jobs[0].upstream.address",
                       "a unicast host address, got \"0.0.0.0\""));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 3, none), "aggregation.jobs[0].upstream.node",
                       "expected this switch's node id in the parent, not one of this job's "
                       "members, got \"3\" (also aggregation.jobs[0].node_ids[3])"));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 65535, none), "aggregation.jobs[0].upstream.node",
                       "65535 is reserved"));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 100, [](auto& up, auto&) { up.port = 0; }),
                       "aggregation.jobs[0].upstream.port", "expected a UDP port 1..65535"));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 100, [](auto& up, auto&) { up.vlan = 4095; }),
                       "aggregation.jobs[0].upstream.vlan",
                       "expected 0 (the aggregation address's VLAN) or a VLAN id 1..4094"));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 100, [](auto& up, auto&) { up.vlan = 30; }),
                       "aggregation.jobs[0].upstream.vlan",
                       "expected a VLAN that some port carries, got \"30\""));
  EXPECT_TRUE(OneError(with_upstream("10.0.10.1", 100,
                                     [](auto&, auto& job) {
                                       job.tan = TanConfig{TanStrategy::kSelf, {}, {}};
                                     }),
                       "aggregation.jobs[0].tan",
                       "a TAN is chosen by the root; this job has an upstream"));
  // The same address as one the switch lists itself.
  Config own = with_upstream("10.0.10.254", 100, none);
  own.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.10.254/24"), 0, {}});
  EXPECT_TRUE(OneError(own, "aggregation.jobs[0].upstream.address",
                       "got an address of this switch \"10.0.10.254\" (switch.addresses[1])"));
}

TEST(ValidateTest, TreeTimersBypassAndTan) {
  auto with = [](auto change) {
    Config config = TreeConfig(TreeJob(7, {0, 1}, {}));
    change(config.aggregation);
    return config;
  };
  EXPECT_TRUE(ErrorsOf(with([](auto& a) {
                a.timeout_ms = kMaxTimeoutMs;
                a.give_up_ms = kMaxTimeoutMs;
                a.bypass.entries = kMaxBypassEntries;
                a.bypass.ttl_ms = kMaxTimeoutMs;
                a.jobs[0].timeout_ms = 0;
              })).empty());
  EXPECT_TRUE(ErrorsOf(with([](auto& a) {
                a.give_up_ms = 1;
                a.bypass.entries = 1;
                a.bypass.ttl_ms = 1;
              })).empty());
  EXPECT_TRUE(OneError(with([](auto& a) { a.timeout_ms = 3600001; }), "aggregation.timeout_ms",
                       "expected 0..3600000 milliseconds (0: timers off), got \"3600001\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.jobs[0].timeout_ms = 3600001; }),
                       "aggregation.jobs[0].timeout_ms", "got \"3600001\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.give_up_ms = 0; }), "aggregation.give_up_ms",
                       "expected 1..3600000 milliseconds, got \"0\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.give_up_ms = 3600001; }), "aggregation.give_up_ms",
                       "got \"3600001\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.bypass.entries = 0; }), "aggregation.bypass.entries",
                       "expected 1..16777216 entries, got \"0\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.bypass.entries = 16777217; }),
                       "aggregation.bypass.entries", "got \"16777217\""));
  EXPECT_TRUE(OneError(with([](auto& a) { a.bypass.ttl_ms = 0; }), "aggregation.bypass.ttl_ms",
                       "expected 1..3600000 milliseconds"));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.jobs[0].ordered = true;
                         a.jobs[0].trigger = AggTrigger::kIncremental;
                       }),
                       "aggregation.jobs[0].trigger", "expected batch, or no trigger"));
  EXPECT_TRUE(ErrorsOf(with([](auto& a) {
                a.trigger = AggTrigger::kIncremental;
                a.jobs[0].ordered = true;
              })).empty());

  // TAN choices, on the section and on a job.
  EXPECT_TRUE(ErrorsOf(with([](auto& a) {
                a.tan = TanConfig{TanStrategy::kRandom,
                                  {Candidate("10.0.9.50"), Candidate("10.0.9.51", 255)},
                                  {}};
                a.jobs[0].tan = TanConfig{TanStrategy::kSelf, {}, {}};
              })).empty());
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFixed, {}, {}};
                       }),
                       "aggregation.tan", "expected 1..64 candidates for strategy \"fixed\""));
  EXPECT_TRUE(OneError(
      with([](auto& a) {
        a.jobs[0].tan = TanConfig{TanStrategy::kSelf, {Candidate("10.0.9.50")}, {}};
      }),
      "aggregation.jobs[0].tan.candidates", "expected no candidates with strategy \"self\""));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFewestHops, {}, {}};
                         for (int i = 0; i < 65; ++i) {
                           a.tan->candidates.push_back(
                               Candidate(("10.0.8." + std::to_string(i + 1)).c_str()));
                         }
                       }),
                       "aggregation.tan.candidates", "expected at most 64 candidates, got 65"));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFixed, {Candidate("10.0.10.250")}, {}};
                       }),
                       "aggregation.tan.candidates[0].address",
                       "got this switch's own aggregation address \"10.0.10.250\""));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFixed, {Candidate("10.0.9.50", 256)}, {}};
                       }),
                       "aggregation.tan.candidates[0].hops", "expected 0..255 hops, got \"256\""));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFixed, {Candidate("10.0.9.50")}, {}};
                         a.tan->candidates[0].port = 0;
                       }),
                       "aggregation.tan.candidates[0].port", "expected a UDP port 1..65535"));
  EXPECT_TRUE(OneError(with([](auto& a) {
                         a.tan = TanConfig{TanStrategy::kFixed,
                                           {Candidate("10.0.9.50"), Candidate("10.0.9.50", 4)},
                                           {}};
                       }),
                       "aggregation.tan.candidates[1]",
                       "expected each candidate once, got 10.0.9.50:47000 again (also "
                       "aggregation.tan.candidates[0])"));
}

// A parameter-server job: rooted here, with a remote TAN (the job's tan,
// else aggregation.tan), the agg-ps --sgd that answers every chunk; or
// below such a root, with an upstream and no TAN.
TEST(ValidateTest, ParameterServerJobs) {
  auto with = [](auto change) {
    Config config = TreeConfig(TreeJob(7, {0, 1}, {}));
    config.aggregation.jobs[0].parameter_server = true;
    change(config.aggregation);
    return config;
  };
  const TanConfig remote{TanStrategy::kFixed, {Candidate("10.0.9.50")}, {}};
  const TanConfig self{TanStrategy::kSelf, {}, {}};
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) { a.tan = remote; })).empty());
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) { a.jobs[0].tan = remote; })).empty());
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) {
                a.tan = self;
                a.jobs[0].tan = remote;
              })).empty())
      << "the job's own tan overrides the section's";
  EXPECT_TRUE(OneError(with([](auto&) {}), "aggregation.jobs[0].parameter_server",
                       "expected a remote tan for a parameter-server job (the job's tan, or "
                       "aggregation.tan, with a strategy other than \"self\": the agg-ps --sgd "
                       "that answers every chunk), got none"));
  EXPECT_TRUE(OneError(with([&](auto& a) { a.tan = self; }), "aggregation.jobs[0].parameter_server",
                       "got strategy \"self\" (aggregation.tan)"));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.tan = remote;
                         a.jobs[0].tan = self;
                       }),
                       "aggregation.jobs[0].parameter_server",
                       "got strategy \"self\" (aggregation.jobs[0].tan)"));
  // Below the root it says the root has one, and needs no TAN here.
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) {
                a.jobs[0].upstream =
                    UpstreamConfig{*common::Ipv4Addr::Parse("10.0.10.1"), 47000, 100, 0, {}};
              })).empty());
  // Off, a job needs none of it.
  EXPECT_TRUE(ErrorsOf(with([](auto& a) { a.jobs[0].parameter_server = false; })).empty());
}

// Verify mode needs what a parameter-server job needs: a root with a remote
// TAN, which checks every complete chunk.
TEST(ValidateTest, VerifyModeJobs) {
  auto with = [](auto change) {
    Config config = TreeConfig(TreeJob(7, {0, 1}, {}));
    config.aggregation.jobs[0].verify = true;
    change(config.aggregation);
    return config;
  };
  const TanConfig remote{TanStrategy::kFixed, {Candidate("10.0.9.50")}, {}};
  const TanConfig self{TanStrategy::kSelf, {}, {}};
  EXPECT_TRUE(ErrorsOf(with([&](auto& a) { a.tan = remote; })).empty());
  EXPECT_TRUE(OneError(with([](auto&) {}), "aggregation.jobs[0].verify",
                       "expected a remote tan for a job in verify mode (the job's tan, or "
                       "aggregation.tan, with a strategy other than \"self\": the agg-ps that "
                       "checks every complete chunk), got none"));
  EXPECT_TRUE(OneError(with([&](auto& a) { a.jobs[0].tan = self; }), "aggregation.jobs[0].verify",
                       "got strategy \"self\" (aggregation.jobs[0].tan)"));
  EXPECT_TRUE(OneError(with([&](auto& a) {
                         a.tan = remote;
                         a.jobs[0].upstream = UpstreamConfig{
                             *common::Ipv4Addr::Parse("10.0.10.1"), 47000, 100, 0, {}};
                       }),
                       "aggregation.jobs[0].verify",
                       "only a root job (without upstream) has a verifying parameter node"));
}

TEST(ValidateTest, UpstreamCandidates) {
  auto with = [](std::vector<const char*> ips, auto change) {
    Config config = TreeConfig(TreeJob(7, {0, 1}, {}));
    for (const char* ip : ips) {
      UpstreamCandidateConfig up;
      up.address = *common::Ipv4Addr::Parse(ip);
      config.aggregation.upstreams.push_back(up);
    }
    change(config);
    return config;
  };
  auto none = [](Config&) {};
  EXPECT_TRUE(ErrorsOf(with({"10.0.10.1", "10.0.10.2"}, none)).empty());
  EXPECT_TRUE(OneError(with({"10.0.10.1", "10.0.10.2"},
                            [](Config& c) {
                              c.aggregation.address.reset();
                              c.switch_.addresses.clear();
                            }),
                       "aggregation.upstreams",
                       "expected aggregation.address to be set: the upper switches answer "
                       "partials there"));
  EXPECT_TRUE(OneError(with({"10.0.10.1", "10.0.10.1"}, none), "aggregation.upstreams[1]",
                       "expected each upper switch once, got \"10.0.10.1:47000\" again (also "
                       "aggregation.upstreams[0])"));
  EXPECT_TRUE(ErrorsOf(with({"10.0.10.1", "10.0.10.1"},
                            [](Config& c) { c.aggregation.upstreams[1].port = 47001; }))
                  .empty())
      << "another port is another switch";
  EXPECT_TRUE(OneError(with({"10.0.10.250"}, none), "aggregation.upstreams[0].address",
                       "got this switch's own aggregation address"));
  EXPECT_TRUE(OneError(with({"10.0.10.1"}, [](Config& c) { c.aggregation.upstreams[0].port = 0; }),
                       "aggregation.upstreams[0].port", "expected a UDP port 1..65535"));
  EXPECT_TRUE(OneError(with({"10.0.10.1"}, [](Config& c) { c.aggregation.upstreams[0].vlan = 30; }),
                       "aggregation.upstreams[0].vlan", "expected a VLAN that some port carries"));
  std::vector<const char*> seventeen;
  static const std::vector<std::string> kIps = [] {
    std::vector<std::string> v;
    for (int i = 1; i <= 17; ++i) v.push_back("10.0.10." + std::to_string(i));
    return v;
  }();
  for (const std::string& ip : kIps) seventeen.push_back(ip.c_str());
  EXPECT_TRUE(OneError(with(seventeen, none), "aggregation.upstreams",
                       "expected at most 16 upper switches, got 17"));
}

TEST(ValidateTest, PartialsNeedTheAggregationAddress) {
  Config config = ValidConfig();
  config.aggregation.in_band_registration = false;
  config.aggregation.jobs.push_back(TreeJob(7, {0, 1}, {}));
  config.aggregation.jobs.push_back(TreeJob(8, {0, 1}, {}));
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.aggregation.jobs[1].upstream =
      UpstreamConfig{*common::Ipv4Addr::Parse("10.0.10.1"), 47000, 100, 0, {}};
  EXPECT_TRUE(OneError(config, "aggregation.jobs[1].upstream",
                       "expected aggregation.address to be set: job 8 has an upstream"));
  config.aggregation.jobs[1].upstream.reset();
  config.aggregation.jobs[0].timeout_ms = 10;
  EXPECT_TRUE(
      OneError(config, "aggregation.jobs[0].timeout_ms",
               "expected aggregation.address to be set: job 7 has timers on (timeout_ms 10)"));
  config.aggregation.jobs[0].timeout_ms = 0;
  config.aggregation.timeout_ms = 20;
  EXPECT_TRUE(OneError(config, "aggregation.jobs[1]",
                       "job 8 has timers on (timeout_ms 20, from aggregation.timeout_ms)"));
  config.aggregation.jobs.pop_back();
  EXPECT_TRUE(ErrorsOf(config).empty()) << "job 7 turns its timer off";
  config.aggregation.in_band_registration = true;
  EXPECT_TRUE(OneError(config, "aggregation.timeout_ms",
                       "timers are on for the jobs that register in band"));
  SwitchAddress address;
  address.prefix = *common::Ipv4Prefix::Parse("10.0.10.250");
  config.aggregation.address = address;
  ApplyDerivedDefaults(config);
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, AcceptsAValidConfig) {
  std::vector<ConfigError> errors;
  EXPECT_TRUE(Validate(ValidConfig(), errors));
  EXPECT_TRUE(errors.empty());
}

TEST(ValidateTest, AppendsToExistingErrorsAndReportsOnlyItsOwn) {
  Config config = ValidConfig();
  config.ports[0].mtu = 10;
  std::vector<ConfigError> errors = {ConfigError{"earlier", {1, 1}, "kept"}};
  EXPECT_FALSE(Validate(config, errors));
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].path, "earlier");
  EXPECT_EQ(errors[1].path, "ports[0].mtu");

  std::vector<ConfigError> more = errors;
  EXPECT_TRUE(Validate(ValidConfig(), more));
  EXPECT_EQ(more.size(), 2u);
}

TEST(ValidateTest, FallsBackToTheItemLocationWithoutSourceLocs) {
  Config config = ValidConfig();
  config.ports[1].loc = {20, 5};
  config.ports[1].access_vlan = 5000;
  const std::vector<ConfigError> errors = ErrorsOf(config);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].Format("cfg"),
            "cfg:20:5: ports[1].access: expected a VLAN id 1..4094, got \"5000\"");

  config.source_locs["ports[1].access"] = {21, 13};
  EXPECT_EQ(ErrorsOf(config)[0].loc.line, 21);
  EXPECT_EQ(ErrorsOf(config)[0].loc.column, 13);
}

TEST(ValidateTest, VlanRangeOnEveryVlanField) {
  Config config = ValidConfig();
  config.ports[0].access_vlan = 0;
  EXPECT_TRUE(OneError(config, "ports[0].access", "expected a VLAN id 1..4094, got \"0\""));

  config = ValidConfig();
  config.ports[2].trunk_vlans = {10, 4095};
  EXPECT_TRUE(OneError(config, "ports[2].trunk[1]", "got \"4095\""));

  config = ValidConfig();
  config.ports[2].native_vlan = 4095;
  EXPECT_TRUE(OneError(config, "ports[2].native", "got \"4095\""));

  config = ValidConfig();
  config.mac_table.static_entries.push_back({*MacAddr::Parse("02:00:00:00:00:01"), 0, "p0", {}});
  EXPECT_TRUE(OneError(config, "mac_table.static[0].vlan", "expected a VLAN id 1..4094"));

  config = ValidConfig();
  config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.0.1/24"), 4095, {}});
  EXPECT_TRUE(OneError(config, "switch.addresses[0].vlan", "got \"4095\""));
}

TEST(ValidateTest, TrunkChecks) {
  Config config = ValidConfig();
  config.ports[2].trunk_vlans.clear();
  EXPECT_TRUE(OneError(config, "ports[2].trunk", "non-empty list of VLAN ids"));

  config = ValidConfig();
  config.ports[2].trunk_vlans = {10, 20, 10};
  EXPECT_TRUE(OneError(config, "ports[2].trunk[2]", "got \"10\" again (also ports[2].trunk[0])"));

  config = ValidConfig();
  config.ports[2].native_vlan = 10;  // also in the list: allowed
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.ports[2].native_vlan = 30;  // not in the list: implicitly allowed
  EXPECT_TRUE(ErrorsOf(config).empty());

  config = ValidConfig();
  config.ports[0].native_vlan = 10;
  EXPECT_TRUE(OneError(config, "ports[0].native", "only on a trunk port"));
}

TEST(ValidateTest, PortChecks) {
  Config config;
  EXPECT_TRUE(OneError(config, "ports", "expected 1..64 ports, got none"));

  config = ValidConfig();
  config.ports[1].name = "p0";
  config.workers[0].rx.pop_back();
  config.workers[0].rx.pop_back();
  config.workers[0].rx.push_back({"p2", 0, {}});
  EXPECT_TRUE(OneError(config, "ports[1].name", "expected a unique port name, got \"p0\" again"));

  config = ValidConfig();
  config.ports[2].devargs = "net_null0";
  EXPECT_TRUE(OneError(config, "ports[2].devargs", "also ports[0]"));

  config = ValidConfig();
  config.ports[0].devargs = "";
  EXPECT_TRUE(OneError(config, "ports[0].devargs", "non-empty"));

  config = ValidConfig();
  config.ports[0].rx_descriptors = 1000;
  EXPECT_TRUE(OneError(config, "ports[0].rx_descriptors", "power of two 64..16384, got \"1000\""));
  config.ports[0].rx_descriptors = 32768;
  EXPECT_TRUE(OneError(config, "ports[0].rx_descriptors", "got \"32768\""));
  config.ports[0].rx_descriptors = 64;
  config.ports[0].tx_descriptors = 32;
  EXPECT_TRUE(OneError(config, "ports[0].tx_descriptors", "got \"32\""));
  config.ports[0].tx_descriptors = 16384;
  config.ports[0].mtu = 9601;
  EXPECT_TRUE(OneError(config, "ports[0].mtu", "expected an MTU 68..9600"));
  config.ports[0].mtu = 68;
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, PortNameCharactersAndLength) {
  Config config = ValidConfig();
  for (const char* good : {"a", "eth0.10", "up-link_1", "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"}) {
    config.ports[0].name = good;
    config.workers[0].rx[0].port = good;
    EXPECT_TRUE(ErrorsOf(config).empty()) << good;
  }
  for (const char* bad : {"", "has space", "a:b", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456", "é"}) {
    config.ports[0].name = bad;
    config.workers[0].rx[0].port = bad;
    EXPECT_TRUE(OneError(config, "ports[0].name", "1..32 characters")) << bad;
  }
}

TEST(ValidateTest, WorkerChecks) {
  Config config = ValidConfig();
  config.workers[0].rx.push_back({"p9", 0, {}});
  EXPECT_TRUE(OneError(config, "workers[0].rx[3]", "expected one of the ports p0, p1, p2, got"));

  config = ValidConfig();
  for (int i = 3; i < 12; ++i) {
    config.ports.push_back(AccessPort("p" + std::to_string(i), "d" + std::to_string(i), 10));
    config.workers[0].rx.push_back({"p" + std::to_string(i), 0, {}});
  }
  config.workers[0].rx.push_back({"q", 0, {}});
  EXPECT_TRUE(OneError(config, "workers[0].rx[12]", "p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, ..."));

  config = ValidConfig();
  config.workers[0].rx.push_back({"p0", 16, {}});
  EXPECT_TRUE(OneError(config, "workers[0].rx[3]", "expected an RX queue 0..15, got \"16\""));

  config = ValidConfig();
  config.eal.lcores = "0-2";
  config.workers.push_back({2, {{"p1", 0, {}}}, {}});
  EXPECT_TRUE(OneError(config, "workers[1].rx[0]", "p1:0 again (also workers[0].rx[1])"));

  config = ValidConfig();
  config.workers[0].rx.push_back({"p0", 0, {}});
  EXPECT_TRUE(OneError(config, "workers[0].rx[3]", "polled by one worker"));

  config = ValidConfig();
  config.workers[0].rx.pop_back();
  EXPECT_TRUE(OneError(config, "ports[2]", "expected a worker to poll port \"p2\""));

  config = ValidConfig();
  config.workers[0].rx.push_back({"p0", 2, {}});
  EXPECT_TRUE(OneError(config, "ports[0]", "contiguous from 0, got 0,2"));

  config = ValidConfig();
  config.workers[0].rx[0].queue = 1;
  EXPECT_TRUE(OneError(config, "ports[0]", "contiguous from 0, got 1"));

  config = ValidConfig();
  config.workers[0].lcore = 0;
  EXPECT_TRUE(OneError(config, "workers[0].lcore", "other than eal.main_lcore, got \"0\""));

  config = ValidConfig();
  config.workers[0].lcore = 3;
  EXPECT_TRUE(OneError(config, "workers[0].lcore", "listed in eal.lcores \"0,1\", got \"3\""));

  config = ValidConfig();
  config.eal.lcores = "0-2";
  config.workers[0].rx.pop_back();
  config.workers.push_back({1, {{"p2", 0, {}}}, {}});
  EXPECT_TRUE(OneError(config, "workers[1].lcore", "got \"1\" again (also workers[0])"));

  config = ValidConfig();
  config.workers[0].rx.clear();
  config.workers.push_back({1, {{"p0", 0, {}}, {"p1", 0, {}}, {"p2", 0, {}}}, {}});
  config.eal.lcores = "0-2";
  config.workers[1].lcore = 2;
  EXPECT_TRUE(OneError(config, "workers[0].rx", "at least one RX queue"));
}

TEST(ValidateTest, AtMostMaxWorkers) {
  Config config;
  config.eal.lcores = "0-" + std::to_string(kMaxWorkers + 1);
  for (int p = 0; p < 8; ++p)
    config.ports.push_back(AccessPort("p" + std::to_string(p), "d" + std::to_string(p), 1));
  for (unsigned w = 0; w < kMaxWorkers + 1; ++w) {
    const std::string port = "p" + std::to_string(w / kMaxRxQueuesPerPort);
    config.workers.push_back({w + 1, {{port, uint16_t(w % kMaxRxQueuesPerPort), {}}}, {}});
  }
  EXPECT_TRUE(OneError(config, "workers", "expected at most 127 workers, got 128"));
  config.workers.pop_back();
  config.workers.back().rx.push_back({"p7", 15, {}});
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, AtMostMaxSwitchAddresses) {
  Config config = ValidConfig();
  config.switch_.addresses.clear();
  for (size_t i = 0; i <= kMaxSwitchAddresses; ++i) {
    const std::string ip = "10.0." + std::to_string(i) + ".1/24";
    config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse(ip), 0, {}});
  }
  EXPECT_TRUE(OneError(config, "switch.addresses", "expected at most 16 addresses, got 17"));
  config.switch_.addresses.pop_back();
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, EalChecks) {
  Config config = ValidConfig();
  config.eal.lcores = "0;1";
  EXPECT_TRUE(OneError(config, "eal.lcores", "comma-separated lcore list"));

  config = ValidConfig();
  config.eal.lcores = "1,2";
  config.eal.main_lcore = 0;
  config.workers[0].lcore = 2;
  EXPECT_TRUE(OneError(config, "eal.main_lcore", "listed in eal.lcores \"1,2\", got \"0\""));

  config = ValidConfig();
  config.eal.memory_mb = 63;
  EXPECT_TRUE(OneError(config, "eal.memory_mb", "at least 64 MB, got \"63\""));

  config = ValidConfig();
  config.eal.file_prefix = "a.b";
  EXPECT_TRUE(OneError(config, "eal.file_prefix", "[A-Za-z0-9_-], got \"a.b\""));
  config.eal.file_prefix = "";
  EXPECT_TRUE(OneError(config, "eal.file_prefix", "got \"\""));
}

TEST(ValidateTest, SwitchChecks) {
  Config config = ValidConfig();
  config.switch_.mac = *MacAddr::Parse("01:00:5e:00:00:01");
  EXPECT_TRUE(OneError(config, "switch.mac", "unicast, non-zero"));
  config.switch_.mac = MacAddr{};
  EXPECT_TRUE(OneError(config, "switch.mac", "got \"00:00:00:00:00:00\""));

  config = ValidConfig();
  config.switch_.name = "";
  EXPECT_TRUE(OneError(config, "switch.name", "non-empty"));

  auto with_address = [](const char* text, uint16_t vlan) {
    Config c = ValidConfig();
    c.switch_.addresses.push_back({*common::Ipv4Prefix::Parse(text), vlan, {}});
    return c;
  };
  EXPECT_TRUE(ErrorsOf(with_address("10.0.0.1/24", 0)).empty());
  EXPECT_TRUE(ErrorsOf(with_address("10.0.0.1/31", 20)).empty());
  EXPECT_TRUE(ErrorsOf(with_address("10.0.0.0/31", 20)).empty());
  EXPECT_TRUE(ErrorsOf(with_address("10.0.0.0", 20)).empty());
  for (const char* bad : {"10.0.0.0/24", "10.0.0.255/24", "0.0.0.0", "127.0.0.1/8", "224.0.0.5",
                          "255.255.255.255", "240.0.0.1"}) {
    EXPECT_TRUE(OneError(with_address(bad, 0), "switch.addresses[0]", "unicast host address"))
        << bad;
  }
  EXPECT_TRUE(OneError(with_address("10.0.0.1/24", 30), "switch.addresses[0].vlan",
                       "expected a VLAN that some port carries, got \"30\""));

  config = with_address("10.0.0.1/24", 10);
  config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.0.1/16"), 0, {}});
  EXPECT_TRUE(OneError(config, "switch.addresses[1]", "got \"10.0.0.1\" again"));
  config.switch_.addresses[1].vlan = 20;  // the same address in another VLAN
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.switch_.addresses[1].vlan = 10;
  EXPECT_TRUE(OneError(config, "switch.addresses[1]", "(also switch.addresses[0])"));
}

TEST(ValidateTest, MacTableChecks) {
  const MacAddr mac1 = *MacAddr::Parse("02:00:00:00:00:01");
  Config config = ValidConfig();
  config.mac_table.static_entries.push_back({mac1, 10, "p9", {}});
  EXPECT_TRUE(OneError(config, "mac_table.static[0].port", "got \"p9\""));

  config = ValidConfig();
  config.mac_table.static_entries.push_back({mac1, 20, "p0", {}});
  EXPECT_TRUE(OneError(config, "mac_table.static[0].vlan",
                       "expected a VLAN that port \"p0\" carries (10), got \"20\""));

  config = ValidConfig();
  config.mac_table.static_entries.push_back({mac1, 20, "p2", {}});
  config.mac_table.static_entries.push_back({mac1, 10, "p0", {}});
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.mac_table.static_entries.push_back({mac1, 10, "p1", {}});
  EXPECT_TRUE(OneError(config, "mac_table.static[2]",
                       "02:00:00:00:00:01 vlan 10 again (also mac_table.static[1])"));

  config = ValidConfig();
  config.mac_table.static_entries.push_back({*MacAddr::Parse("ff:ff:ff:ff:ff:ff"), 10, "p0", {}});
  EXPECT_TRUE(OneError(config, "mac_table.static[0].mac", "unicast, non-zero"));

  config = ValidConfig();
  config.mac_table.size = 16;
  for (uint64_t i = 1; i <= 17; ++i) {
    config.mac_table.static_entries.push_back({MacAddr::FromU64(0x020000000000 + i), 10, "p0", {}});
  }
  EXPECT_TRUE(OneError(config, "mac_table.static", "at most 16 static entries"));

  config = ValidConfig();
  config.mac_table.size = 15;
  EXPECT_TRUE(OneError(config, "mac_table.size", "16..1048576, got \"15\""));
  config.mac_table.size = kMaxMacTableSize + 1;
  EXPECT_TRUE(OneError(config, "mac_table.size", "got \"1048577\""));
  config.mac_table.size = kMaxMacTableSize;
  config.mac_table.aging_seconds = 1000001;
  EXPECT_TRUE(OneError(config, "mac_table.aging_seconds", "0..1000000 seconds"));
  config.mac_table.aging_seconds = 0;
  EXPECT_TRUE(ErrorsOf(config).empty());
}

TEST(ValidateTest, MempoolAndHttpChecks) {
  Config config = ValidConfig();
  config.mempool.mbufs = 1022;
  EXPECT_TRUE(OneError(config, "mempool.mbufs", "1023..1048575 mbufs, got \"1022\""));
  config.mempool.mbufs = 1048576;
  EXPECT_TRUE(OneError(config, "mempool.mbufs", "got \"1048576\""));
  config.mempool.mbufs = 1023;
  config.mempool.cache = 513;
  EXPECT_TRUE(OneError(config, "mempool.cache", "0..512"));
  config.mempool.cache = 0;
  EXPECT_TRUE(ErrorsOf(config).empty());

  for (const char* good : {"127.0.0.1:9477", "127.3.4.5:1"}) {
    config.http.listen = good;
    EXPECT_TRUE(ErrorsOf(config).empty()) << good;
  }
  // Beyond loopback the API needs a token.
  for (const char* beyond : {"0.0.0.0:1", "10.1.2.3:65535"}) {
    config.http.listen = beyond;
    EXPECT_TRUE(OneError(config, "http.listen", "expected a loopback address (127.x.x.x) unless "
                                                "http.token_file is set"))
        << beyond;
    config.http.token_file = "/etc/aggswitch/api.token";
    EXPECT_TRUE(ErrorsOf(config).empty()) << beyond;
    config.http.token_file.clear();
  }
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                          "localhost:80", ":80", "127.0.0.1:08", "127.0.0.1:80x", "[::1]:80"}) {
    config.http.listen = bad;
    EXPECT_TRUE(OneError(config, "http.listen", "IPv4 host and a port 1..65535")) << bad;
  }
}

TEST(ValidateTest, HttpServerKeys) {
  Config config = ValidConfig();
  config.http.protect_reads = true;
  EXPECT_TRUE(OneError(config, "http.protect_reads", "expected http.token_file"));
  config.http.token_file = "/run/api.token";
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.http.threads = 0;
  EXPECT_TRUE(OneError(config, "http.threads", "expected 1..1024 threads, got \"0\""));
  config.http.threads = 1025;
  EXPECT_TRUE(OneError(config, "http.threads", "got \"1025\""));
  config.http.threads = 1;
  config.http.request_timeout_ms = 99;
  EXPECT_TRUE(OneError(config, "http.request_timeout_ms", "expected 100..600000 milliseconds"));
  config.http.request_timeout_ms = 600000;
  EXPECT_TRUE(ErrorsOf(config).empty());
  config.http.allowed_hosts = {"switch-1.example", "sw2"};
  EXPECT_TRUE(ErrorsOf(config).empty());
  for (const char* bad : {"", "host:80", "a..b", ".a", "a b", "evil.com/", "[::1]"}) {
    config.http.allowed_hosts = {"ok.example", bad};
    EXPECT_TRUE(OneError(config, "http.allowed_hosts[1]", "expected a DNS name")) << bad;
  }
  config.http.allowed_hosts.assign(65, "a");
  EXPECT_TRUE(OneError(config, "http.allowed_hosts", "expected at most 64 names"));
}

TEST(ValidateTest, NoPortsMeansNoPortReferenceErrors) {
  Config config = ValidConfig();
  config.ports.clear();
  config.mac_table.static_entries.push_back({*MacAddr::Parse("02:00:00:00:00:01"), 10, "p0", {}});
  config.switch_.addresses.push_back({*common::Ipv4Prefix::Parse("10.0.0.1/24"), 10, {}});
  EXPECT_TRUE(OneError(config, "ports", "got none"));
}

}  // namespace
}  // namespace aggswitch::config
