// The aggswitch configuration as plain structs, and the one place that checks it.
//
// Configuration flows one way: YAML text -> LoadConfigText() (the only code that
// knows yaml-cpp, in loader.h) -> these structs -> Validate() -> the dataplane
// and control thread build their immutable runtime state from a validated Config.
//
// Every item remembers where it came from (SourceLoc) so that Validate() can
// name the line of a cross-field mistake, not only the loader's shape errors.
//
// Thread safety: plain values; build and validate on the control thread, then
// share read-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/net_addr.h"

namespace aggswitch::config {

inline constexpr uint16_t kMinVlan = 1;
inline constexpr uint16_t kMaxVlan = 4094;
inline constexpr size_t kMaxPorts = 64;
inline constexpr size_t kMaxWorkers = 127;
inline constexpr size_t kMaxRxQueuesPerPort = 16;
inline constexpr size_t kMaxSwitchAddresses = 16;

// Further inclusive ranges that Validate() enforces.
inline constexpr uint16_t kMinDescriptors = 64;  // and a power of two
inline constexpr uint16_t kMaxDescriptors = 16384;
inline constexpr uint16_t kMinMtu = 68;
inline constexpr uint16_t kMaxMtu = 9600;
inline constexpr unsigned kMinMemoryMb = 64;
inline constexpr uint32_t kMinMacTableSize = 16;
inline constexpr uint32_t kMaxMacTableSize = 1048576;
inline constexpr uint32_t kMaxAgingSeconds = 1000000;
inline constexpr uint32_t kMinMbufs = 1023;
inline constexpr uint32_t kMaxMbufs = 1048575;
inline constexpr uint32_t kMaxMempoolCache = 512;
// The HTTP server.
inline constexpr uint32_t kMaxHttpThreads = 1024;
inline constexpr uint32_t kMinHttpTimeoutMs = 100;
inline constexpr uint32_t kMaxHttpTimeoutMs = 600000;
inline constexpr size_t kMaxAllowedHosts = 64;
// Upper bound on lcore ids in eal.lcores; EAL applies its own RTE_MAX_LCORE later.
inline constexpr unsigned kMaxLcoreId = 1023;
// The aggregation section.
inline constexpr uint16_t kDefaultAggregationUdpPort = 47000;  // docs/protocol.md
inline constexpr uint32_t kMinAggregationSlots = 64;           // and a power of two
inline constexpr uint32_t kMaxAggregationSlots = 1048576;
// A slot hint is 16 bits: 0xFFFF says none, 0xFFFE a moved partition
// (aggregator/wire.h), the rest index the spare slots.
inline constexpr uint32_t kMaxSpareSlots = 65534;
// ports[].faults.delay_us at most: one second.
inline constexpr uint32_t kMaxFaultDelayUs = 1000000;
inline constexpr uint16_t kMaxAggregationFanIn = 1024;
inline constexpr uint32_t kMaxAggregationJobs = 65536;
inline constexpr uint32_t kMinHoldBuffers = 64;
inline constexpr uint32_t kMaxHoldBuffers = 1048576;
inline constexpr uint32_t kMaxStoreBuffers = 1048576;
inline constexpr uint32_t kMinIdleTimeoutMs = 1000;
inline constexpr uint32_t kMaxIdleTimeoutMs = 86400000;
inline constexpr uint32_t kMaxRegistrationRate = 1000000;
// The tree (docs/stragglers.md): node ids, timers, bypass entries, the TAN.
inline constexpr uint16_t kMaxNodeId = 65534;       // 65535 is reserved
// Node ids one job may list in all (node_ids and every covers), ranges
// expanded: its members and the nodes below its child switches are distinct.
inline constexpr size_t kMaxJobListedNodeIds = size_t{kMaxNodeId} + 1;
// Node ids a whole config file may list, ranges and YAML aliases expanded:
// what keeps a small file from expanding into gigabytes.
inline constexpr size_t kMaxConfigNodeIds = size_t{1} << 20;
inline constexpr uint32_t kMaxTimeoutMs = 3600000;  // timeout_ms, give_up_ms, bypass.ttl_ms
inline constexpr uint32_t kMaxBypassEntries = 16777216;
inline constexpr size_t kMaxTanCandidates = 64;
inline constexpr uint16_t kMaxTanHops = 255;

// Line and column (1-based) in the YAML source; 0 when the item was defaulted.
struct SourceLoc {
  int line = 0;
  int column = 0;
  // Where a value was written is not part of its value: moving a line in the
  // file does not change the configuration (reload compares sections with ==).
  friend bool operator==(const SourceLoc&, const SourceLoc&) { return true; }
};

// One configuration mistake: where, which key, and what was expected.
struct ConfigError {
  std::string path;  // key path, e.g. "ports[1].access"
  SourceLoc loc;
  std::string message;  // says what was expected and what was found

  // "<source>:<line>:<col>: <path>: <message>"
  std::string Format(const std::string& source_name) const;
};

// eal.idle_sleep_us at most: a sleep that a frame may wait behind.
inline constexpr uint32_t kMaxIdleSleepUs = 1000;

struct EalConfig {
  std::string lcores = "0,1";  // EAL --lcores; one control lcore plus the workers
  unsigned main_lcore = 0;     // the lcore the control thread runs on
  unsigned memory_mb = 1024;   // -m
  bool hugepages = false;      // false: --no-huge
  bool pci = false;            // false: --no-pci (virtual devices only)
  std::string file_prefix = "aggswitch";
  bool telemetry = true;          // DPDK telemetry socket
  // A worker lcore whose last 64 polls found no packet sleeps this long
  // (microseconds) before it polls again; 0 (the default): it busy-polls.
  // For a switch that shares its CPUs with other work (a vSwitch on a
  // host): the CPU goes back to that work while no traffic comes, and the
  // first frame after a quiet spell waits up to this long.
  uint32_t idle_sleep_us = 0;  // at most kMaxIdleSleepUs
  std::vector<std::string> args;  // extra EAL arguments, appended verbatim
  SourceLoc loc;

  friend bool operator==(const EalConfig&, const EalConfig&) = default;
};

enum class VlanMode { kAccess, kTrunk };

// Faults a port injects into its own traffic (ports[].faults), so that tests
// can lose, duplicate and reorder frames without kernel netem. Each frame
// draws once: dropped with probability `loss`, else held back with
// probability `reorder` (it then goes out behind the frames of the port's
// next poll), and, when not dropped, also delivered twice with probability
// `duplicate`. Meant for test and lab switches, never for production traffic.
enum class FaultDirection { kRx, kTx, kBoth };
struct FaultConfig {
  double loss = 0;
  double duplicate = 0;
  double reorder = 0;
  uint32_t delay_us = 0;                             // every frame delivered this much later
  FaultDirection direction = FaultDirection::kBoth;  // frames received, sent, or both
  uint64_t seed = 1;                                 // with the lcore id: the random sequence
  SourceLoc loc;

  friend bool operator==(const FaultConfig&, const FaultConfig&) = default;
};

// What a port faces, for in-band telemetry (telemetry.watch): hosts, where
// INT starts and ends, or other switches, where it travels on.
enum class PortRole { kEdge, kFabric };

struct PortConfig {
  std::string name;
  std::string devargs;  // DPDK devargs: "net_af_packet0,iface=veth0", "0000:01:00.0", ...
  VlanMode mode = VlanMode::kAccess;
  uint16_t access_vlan = 1;
  std::vector<uint16_t> trunk_vlans;    // allowed VLANs on a trunk
  std::optional<uint16_t> native_vlan;  // trunk: untagged frames belong here
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  uint16_t mtu = 1500;
  std::optional<FaultConfig> faults;  // none unless configured
  PortRole role = PortRole::kEdge;
  // Uplink group: ports toward the same set of switches (a leaf's links to
  // two spines) share a name. The L2 switch treats a group as one port:
  // addresses learned on any member belong to the group, one member (the
  // first in the list) carries flooded frames, nothing goes from a member
  // back out another, and known unicast to the group takes the member a path
  // decision names for its destination, else one by flow hash
  // (docs/telemetry.md). Empty: the port stands alone.
  std::string group;
  SourceLoc loc;

  // True when frames of `vlan` may enter or leave this port: the access VLAN, or
  // a trunk VLAN, or the trunk's native VLAN (which need not be in trunk_vlans).
  bool Carries(uint16_t vlan) const;

  friend bool operator==(const PortConfig&, const PortConfig&) = default;
};

// One RX queue that a worker lcore polls.
struct RxQueueRef {
  std::string port;
  uint16_t queue = 0;
  SourceLoc loc;

  friend bool operator==(const RxQueueRef&, const RxQueueRef&) = default;
};

struct WorkerConfig {
  unsigned lcore = 1;
  std::vector<RxQueueRef> rx;
  SourceLoc loc;

  friend bool operator==(const WorkerConfig&, const WorkerConfig&) = default;
};

// An address the switch owns. vlan == 0: answered on every VLAN.
struct SwitchAddress {
  common::Ipv4Prefix prefix;
  uint16_t vlan = 0;
  SourceLoc loc;
  // Added by ApplyDerivedDefaults() for aggregation.address (so the switch
  // answers ARP and ping on it); checked as aggregation.address, not here.
  bool from_aggregation = false;

  friend bool operator==(const SwitchAddress&, const SwitchAddress&) = default;
};

struct SwitchConfig {
  std::string name = "aggswitch";
  common::MacAddr mac = *common::MacAddr::Parse("02:a9:9c:00:00:01");
  std::vector<SwitchAddress> addresses;
  SourceLoc loc;

  friend bool operator==(const SwitchConfig&, const SwitchConfig&) = default;
};

struct StaticMacEntry {
  common::MacAddr mac;
  uint16_t vlan = 1;
  std::string port;
  SourceLoc loc;

  friend bool operator==(const StaticMacEntry&, const StaticMacEntry&) = default;
};

struct MacTableConfig {
  uint32_t size = 8192;          // maximum number of learned + static entries
  uint32_t aging_seconds = 300;  // 0 disables aging
  std::vector<StaticMacEntry> static_entries;
  SourceLoc loc;

  friend bool operator==(const MacTableConfig&, const MacTableConfig&) = default;
};

struct MempoolConfig {
  uint32_t mbufs = 16383;  // per pool; one pool per NUMA socket in use
  uint32_t cache = 256;    // per-lcore mempool cache
  SourceLoc loc;

  friend bool operator==(const MempoolConfig&, const MempoolConfig&) = default;
};

struct HttpConfig {
  std::string listen = "127.0.0.1:9477";  // host:port of /metrics and /api/v1
  // The file holding the control API's bearer token (created with a random
  // token, readable by its owner only, when it does not exist). Empty: no
  // token, and the API refuses every request that would change something.
  // A listen address beyond loopback needs one.
  std::string token_file;
  bool protect_reads = false;  // reads, /metrics included, need the token too
  // Names a request's Host header may carry besides IP literals and
  // "localhost" (what stops DNS rebinding), e.g. the switch's DNS name.
  std::vector<std::string> allowed_hosts;
  // Request threads: each serves one connection at a time, so as many
  // clients (slow ones included) can hold the API at once.
  uint32_t threads = 64;
  uint32_t request_timeout_ms = 5000;  // a request must arrive whole within this
  SourceLoc loc;

  friend bool operator==(const HttpConfig&, const HttpConfig&) = default;
};

// How the switch places a job in its slot region when the job names no base
// of its own (aggregator/slot_placement.h; docs/aggregation.md, "Placement").
enum class SlotPlacement {
  kHash,        // "hash": the whole region, from a keyed hash of the job id
  kRoundRobin,  // "round_robin": a partition of the job's slot quota, after the newest job's
  kRandom,      // "random": a partition of the job's slot quota at a random base
};

// When a slot reduces its contributions (docs/stragglers.md, "Triggers").
enum class AggTrigger {
  kIncremental,  // "incremental": fold each contribution on arrival
  kBatch,        // "batch": hold them, reduce in member order when all are in or the timer fires
};

// Which bypass entries a child switch that misses the deadline gets
// (aggregation.bypass.subswitch).
enum class SubswitchEntries {
  kSwitch,  // "switch": one entry for the child switch's own node id (variant 1)
  kNodes,   // "nodes": one per node id the child covers, switches[].covers (variant 2)
};

// How a root switch picks the timeout aggregation node of a job (tan.strategy).
enum class TanStrategy {
  kFixed,       // "fixed": the first candidate
  kRandom,      // "random": candidate hash(job id) mod n, the same on every restart
  kLeastLoad,   // "least_load": the candidate with the fewest jobs here, then list order
  kFewestHops,  // "fewest_hops": the smallest configured hops, then list order
  kSelf,        // "self": the root switch is its own TAN; no candidates
};

// A TAN the root may choose (tan.candidates[]): an agg-ps process.
struct TanCandidate {
  common::Ipv4Addr address;
  uint16_t port = kDefaultAggregationUdpPort;  // its UDP port
  uint16_t hops = 0;                           // distance, for fewest_hops; 0..255
  SourceLoc loc;

  friend bool operator==(const TanCandidate&, const TanCandidate&) = default;
};

// aggregation.tan and aggregation.jobs[].tan.
struct TanConfig {
  TanStrategy strategy = TanStrategy::kFixed;
  std::vector<TanCandidate> candidates;  // 1..64 unless strategy is self (then none)
  SourceLoc loc;

  friend bool operator==(const TanConfig&, const TanConfig&) = default;
};

// Where a non-root switch sends its partials (aggregation.jobs[].upstream):
// the parent switch's aggregation address, and this switch's node id there.
struct UpstreamConfig {
  common::Ipv4Addr address;
  uint16_t port = kDefaultAggregationUdpPort;  // the parent's aggregation UDP port
  uint16_t node = 0;                           // this switch's node id in the parent, 0..65534
  uint16_t vlan = 0;  // VLAN to resolve the address on; 0: the aggregation address's
  SourceLoc loc;

  friend bool operator==(const UpstreamConfig&, const UpstreamConfig&) = default;
};

// An upper-tier switch that in-band jobs of several nodes send their
// partials to (aggregation.upstreams[]): its aggregation address.
struct UpstreamCandidateConfig {
  common::Ipv4Addr address;
  uint16_t port = kDefaultAggregationUdpPort;  // its aggregation UDP port
  uint16_t vlan = 0;  // VLAN to resolve the address on; 0: the aggregation address's
  SourceLoc loc;

  friend bool operator==(const UpstreamCandidateConfig&, const UpstreamCandidateConfig&) = default;
};
// aggregation.upstreams holds at most this many.
inline constexpr size_t kMaxUpstreamCandidates = 16;

// A child switch that is a member of a job here (aggregation.jobs[].switches[]).
struct ChildSwitchConfig {
  uint16_t node = 0;             // the child's node id, as in its upstream.node
  std::vector<uint16_t> covers;  // the node ids below it (bypass.subswitch: nodes)
  SourceLoc loc;

  friend bool operator==(const ChildSwitchConfig&, const ChildSwitchConfig&) = default;
};

// aggregation.bypass: the per-lcore tables of late members (docs/stragglers.md).
struct BypassConfig {
  uint32_t entries = 65536;  // in all, split over the workers; 1..16777216
  uint32_t ttl_ms = 10000;   // an entry's lifetime; 1..3600000
  SubswitchEntries subswitch = SubswitchEntries::kSwitch;
  SourceLoc loc;

  friend bool operator==(const BypassConfig&, const BypassConfig&) = default;
};

// aggregation.hold: the buffers ordered slots keep contributions in until
// they reduce them in member order (docs/aggregation.md). A pool of their
// own, so that held contributions never take the mbufs RX needs.
struct HoldConfig {
  uint32_t buffers = 16384;  // in all, 64..1048576
  // One config or API job at most, 1..buffers. Default: 4096, or the
  // buffers when fewer.
  std::optional<uint32_t> per_job;
  SourceLoc loc;

  friend bool operator==(const HoldConfig&, const HoldConfig&) = default;
};

// aggregation.store: the switch memory jobs in store or both mode keep their
// members' contributions in (docs/protocol.md, "Store"), and the final
// results the root delivers to a job's main server. A pool of its own.
struct StoreConfig {
  uint32_t buffers = 1024;  // in all, split evenly over the workers; 0..1048576
  // One job at most, 1..buffers. Default: 256, or the buffers when fewer.
  std::optional<uint32_t> per_job;
  // How long the root retransmits a final result to the job's main server
  // before it gives up (counted), 1..3600000.
  uint32_t final_timeout_ms = 5000;
  SourceLoc loc;

  uint32_t PerJob() const { return per_job.value_or(std::min<uint32_t>(256, buffers)); }

  friend bool operator==(const StoreConfig&, const StoreConfig&) = default;
};

// What a job does with its members' contributions (aggregation.jobs[].mode).
enum class JobMode {
  kAggregate,  // "aggregate": reduce them, the result to every member
  kStore,      // "store": keep each member's latest per chunk, answer FETCH
  kBoth,       // "both": keep and reduce
};

// A token bucket: `per_second` tokens a second, at most `burst` saved up.
struct RateConfig {
  uint32_t per_second = 0;
  uint32_t burst = 0;
  SourceLoc loc;

  friend bool operator==(const RateConfig&, const RateConfig&) = default;
};

// aggregation.in_band: what jobs that register themselves (task info) may
// take of the switch, so that no host that can send a datagram can crowd out
// the jobs the operator provisioned, or other tenants (docs/security.md).
struct InBandConfig {
  // Slots of the table reserved for in-band jobs, which use no others;
  // config and API jobs use the rest. Default: a quarter of the slots with
  // in-band registration on, none with it off.
  std::optional<uint32_t> slots;
  // Chunks one in-band job keeps in flight (its slot quota). Default: 256,
  // or the in-band slots when fewer.
  std::optional<uint32_t> slots_per_job;
  // Held contributions of one in-band job (its hold quota). Default: 512,
  // or held_total when less.
  std::optional<uint32_t> held_per_job;
  // Held contributions of every in-band job together, at most half of
  // aggregation.hold.buffers: the rest is the provisioned jobs'. Default: a
  // quarter of the buffers.
  std::optional<uint32_t> held_total;
  // In-band jobs in the table at most; the rest is the provisioned jobs'.
  // Default: a quarter of aggregation.max_jobs (at least 1).
  std::optional<uint32_t> max_jobs;
  uint32_t idle_timeout_ms = 60000;  // an in-band job no member sent to for this long is removed
  RateConfig per_source{20, 40, {}};  // registrations per second per source IPv4 address
  RateConfig total{200, 400, {}};     // registrations per second for the whole switch
  SourceLoc loc;

  friend bool operator==(const InBandConfig&, const InBandConfig&) = default;
};

// A job declared in the file (aggregation.jobs[]).
//
// Its members at this switch are workers (node_ids) and child switches
// (switches). A job given by `members: N` alone is flat: its members are the
// nodes 0..N-1. When node_ids or switches are given, the loader sets
// `members` to their total (a `members` key must then agree), so members is
// always the member count.
struct AggregationJobConfig {
  uint32_t id = 0;       // 1..2^32-1
  uint64_t key = 0;      // per-job secret carried in every packet of the job
  uint16_t members = 0;  // expected members at this switch, 1..max_fan_in
  uint16_t nodes = 1;    // switches taking part; 1 = this switch is the root
  bool ordered = false;  // reduce floats in member order (bit-identical results)
  std::vector<uint16_t> node_ids;           // the workers' node ids at this switch
  std::vector<ChildSwitchConfig> switches;  // child switches, also members
  std::optional<UpstreamConfig> upstream;   // absent: this switch is the job's root
  std::optional<uint32_t> timeout_ms;       // overrides aggregation.timeout_ms
  std::optional<AggTrigger> trigger;        // overrides aggregation.trigger
  std::optional<TanConfig> tan;             // overrides aggregation.tan (root jobs only)
  // One of node_ids: that worker also runs the job's TAN, so when it is late
  // this switch lists it but writes no bypass entry; it keeps its own data
  // (case 2 of "the TAN is late", docs/stragglers.md).
  std::optional<uint16_t> tan_member;
  // A root job (no upstream) whose TAN, an `agg-ps --sgd`, is its parameter
  // server: the root sends it every chunk as first data, complete or not, and
  // the members receive what it answers (the updated parameters). Needs a
  // remote TAN: the job's tan, else aggregation.tan, with a strategy other
  // than self.
  bool parameter_server = false;
  // Verify mode (docs/parameter-node.md): every complete chunk is checked by
  // the job's parameter node before its members receive it. The same needs
  // as parameter_server: a root job with a remote TAN.
  bool verify = false;
  // The job's own placement: a partition of its slot quota whose first slot
  // is this index in the config and API jobs' region, whatever
  // aggregation.placement says. Jobs that share slots meet as collisions.
  std::optional<uint32_t> placement_hint;
  // The job's main server ("a.b.c.d" or "a.b.c.d:port"; docs/protocol.md,
  // "Distribution"): what it sends the job as DISTRIBUTE (with the job's
  // key) is replicated to every member. Port 0 (none given): any port.
  std::optional<common::Ipv4Endpoint> main_server;
  JobMode mode = JobMode::kAggregate;
  SourceLoc loc;

  // The node id of each member, by member index: node_ids, then each child
  // switch's node; 0..members-1 for a flat job.
  std::vector<uint16_t> MemberNodeIds() const;
  // Several nodes take part, yet this switch is neither a leaf (an upstream)
  // nor the root of a tree (child switches): its members' sum would be
  // answered as the result, though it is only a partial one.
  bool PartialSumGoesNowhere() const { return nodes > 1 && !upstream && switches.empty(); }

  friend bool operator==(const AggregationJobConfig&, const AggregationJobConfig&) = default;
};

struct AggregationConfig {
  // True when the file has an aggregation: section. Without one the switch is
  // a plain L2 switch: no job table, no classification on the worker lcores.
  bool enabled = false;
  // The host address the switch reserves for aggregation ("a.b.c.d", prefix
  // length 32; vlan 0: every VLAN). Without it only the UDP port trigger works.
  // ApplyDerivedDefaults() adds it to switch.addresses unless that lists it.
  std::optional<SwitchAddress> address;
  uint16_t udp_port = kDefaultAggregationUdpPort;  // the UDP port trigger
  bool in_band_registration = true;                // unknown jobs register from their task info
  uint32_t slots = 4096;                           // aggregation slots, a power of two
  uint16_t max_fan_in = 256;                       // members one job may have at this switch
  uint32_t max_jobs = 1024;                        // jobs the table holds, whatever their origin
  // A slot whose first contribution (a complete one: whose result) is older
  // than this gives way to the next chunk that hashes onto it: a member died
  // mid-chunk, or its last ACK was lost. Longer than any chunk should take,
  // and than a client's timeout.
  uint32_t stale_slot_ms = 10000;
  // The slot threshold (docs/stragglers.md, "Slot timers"): a slot whose first
  // contribution is this old sends what it has upstream (or, at the root, to
  // the TAN) and lists the missing members. 0: timers off, wait for everyone.
  uint32_t timeout_ms = 0;
  AggTrigger trigger = AggTrigger::kIncremental;
  // How long the TAN waits for late data after the first data, when the root
  // is its own TAN; then it sends an INCOMPLETE result.
  uint32_t give_up_ms = 5000;
  BypassConfig bypass;
  std::optional<TanConfig> tan;  // the default TAN choice for root jobs
  // The upper-tier switches of in-band jobs whose task info says more than
  // one node (docs/aggregation.md, "Several nodes"): chunk s of such a job
  // goes, as one partial carrying task info, to upstreams[addr_low mod size]
  // (addr_low: the chunk's). Empty: such jobs are refused (no_upstream).
  // Needs aggregation.address, which the parents answer to.
  std::vector<UpstreamCandidateConfig> upstreams;
  std::vector<AggregationJobConfig> jobs;
  // The secret of the slot placement ("0x" and 32 hex digits;
  // aggregator/slot_placement.h). Empty: a random one at every start. Set it
  // only where several switches must place jobs alike (labs, benchmarks).
  std::string slot_secret;
  // Where the jobs added through the API are kept, so that a restart brings
  // them back (control/job_state_file.h). Empty: API jobs last until the
  // process stops.
  std::string state_file;
  // How jobs without a placement_hint are placed in their region.
  SlotPlacement placement = SlotPlacement::kHash;
  // Chunks one config or API job keeps in flight (its slot quota). Default:
  // 1024, or the slots they have when fewer.
  std::optional<uint32_t> slots_per_job;
  // The last slots of the table, which the control thread leases to a chunk
  // whose own slot holds another chunk (docs/aggregation.md, "Collisions").
  // Default: a sixteenth of the slots; 0: a collision is refused (NACK
  // slot_busy) and the member retries.
  std::optional<uint32_t> spare_slots;
  HoldConfig hold;
  StoreConfig store;
  // A member sending from another address than it is bound to is refused
  // until the bound address has been silent this long; 0: only the API
  // unbinds (DELETE /api/v1/jobs/<id>/members/<node>).
  uint32_t member_rebind_ms = 30000;
  // For this long after the switch started, no job fixes its run label
  // before every member has sent (Job::UpLabel; docs/protocol.md, "Runs"):
  // back from a restart, a run's members resend within their longest
  // retransmission timeout (the clients' max_retransmit_timeout, 1 s by
  // default), and with all of them in, the label is the run's from before
  // the restart; one of some members would be a new run to the parent.
  // 0: none.
  uint32_t restart_grace_ms = 1000;
  InBandConfig in_band;
  SourceLoc loc;

  // Slots of the in-band region (in_band.slots, or a quarter of the slots;
  // none with in-band registration off) and in-band jobs at most
  // (in_band.max_jobs, or a quarter of max_jobs, at least 1).
  uint32_t InBandSlots() const;
  uint32_t InBandMaxJobs() const;
  // spare_slots, defaults resolved as above.
  uint32_t SpareSlots() const;
  // The slots of config and API jobs: slots - in-band slots - spare slots.
  uint32_t ProvisionedSlots() const;
  // The slot quotas, defaults resolved as above.
  uint32_t SlotsPerJob() const;
  uint32_t InBandSlotsPerJob() const;
  // in_band.held_total, or a quarter of hold.buffers.
  uint32_t InBandHeldTotal() const;
  // The hold quotas, defaults resolved as above.
  uint32_t HoldPerJob() const;
  uint32_t InBandHeldPerJob() const;

  friend bool operator==(const AggregationConfig&, const AggregationConfig&) = default;
};

// In-band network telemetry (docs/telemetry.md).
inline constexpr size_t kMaxWatchEntries = 64;
inline constexpr uint32_t kMaxWatchSample = 1u << 24;  // 1 in N at most
inline constexpr uint8_t kMaxIntHops = 255;

// Which metadata each hop records for a watch entry: the INT instruction
// sets (telemetry/int_wire.h).
enum class IntInstructions {
  kLatency,    // "latency": node id, ports, hop latency, queue occupancy
  kBandwidth,  // "bandwidth": node id, ports, egress TX utilisation
  kBoth,       // "both"
};

// One telemetry.watch entry: the traffic it selects (every field given must
// match; an absent one matches anything), how much of it gets INT, and what
// each hop records.
struct WatchEntry {
  std::string name;
  uint16_t vlan = 0;                       // 0: any
  std::optional<common::Ipv4Prefix> src;   // IPv4 source prefix
  std::optional<common::Ipv4Prefix> dst;   // IPv4 destination prefix
  uint16_t port = 0;                       // UDP source or destination port; 0: any
  std::optional<uint32_t> job;             // aggregation job id (its datagrams forwarded at L2)
  uint32_t sample = 1;                     // 1 in `sample` matching datagrams
  IntInstructions instructions = IntInstructions::kLatency;
  SourceLoc loc;

  friend bool operator==(const WatchEntry&, const WatchEntry&) = default;
};

struct TelemetryConfig {
  uint32_t node_id = 0;                  // this switch in reports and hop metadata; 1.. when watching
  std::optional<common::Ipv4Endpoint> collector;  // where reports go (UDP); needed with a watch list
  uint16_t int_port = 7700;              // UDP port that says "INT follows" between switches
  uint8_t max_hops = 8;                  // the remaining hop count a first hop writes
  std::vector<WatchEntry> watch;
  SourceLoc loc;

  bool enabled() const { return !watch.empty() || node_id != 0; }
  friend bool operator==(const TelemetryConfig&, const TelemetryConfig&) = default;
};

struct Config {
  EalConfig eal;
  SwitchConfig switch_;
  std::vector<PortConfig> ports;
  std::vector<WorkerConfig> workers;  // empty: one worker polls queue 0 of every port
  MacTableConfig mac_table;
  MempoolConfig mempool;
  HttpConfig http;
  AggregationConfig aggregation;
  TelemetryConfig telemetry;

  // Where each value and list item came from, by key path ("ports[1].trunk[2]",
  // "workers[0].rx[1]"), so that Validate() can point at the exact value. The
  // loader fills it; it is empty for a Config built in code.
  std::map<std::string, SourceLoc, std::less<>> source_locs;
  // Lists whose items expand into several values (node ids: "a-b" ranges),
  // by list path: the index where each item's values start, in order, and
  // where the item is written. LocOf("...node_ids[k]") finds value k's item
  // here, so a range of 65535 ids costs one entry, not 65535.
  std::map<std::string, std::vector<std::pair<size_t, SourceLoc>>, std::less<>> item_locs;

  const PortConfig* FindPort(const std::string& name) const;
  // Index of the named port in `ports`, or -1.
  int PortIndex(const std::string& name) const;
  // Number of RX queues each port needs: 1 + the highest queue a worker polls.
  // 0 for a port no worker polls (Validate() rejects that) or an unknown name.
  uint16_t RxQueueCount(const std::string& port) const;
  // The recorded location of `path` (for a value of an expanding list, its
  // item's), or `fallback` when none was recorded.
  SourceLoc LocOf(std::string_view path, SourceLoc fallback = {}) const;
};

// The lcore ids an EAL --lcores string names, sorted and without repeats: the
// ids left of '@' in "0,1", "2-5", "3@4", "(4-5)@6", "7@(0,1)". nullopt when the
// string does not parse or names an id above kMaxLcoreId.
std::optional<std::vector<unsigned>> ParseLcoreList(std::string_view lcores);

// Fills defaults that depend on other fields:
// * the default worker set: when `workers` is empty, adds one worker on the
//   lowest lcore of eal.lcores that is not eal.main_lcore, polling queue 0 of
//   every port. Adds none when there is no such lcore (Validate() then reports
//   the missing worker).
// * the aggregation address as a switch address (from_aggregation), so that
//   the switch answers ARP and ping on it, unless switch.addresses already has
//   that IP or is full (Validate() then reports what is wrong).
// Call before Validate(); LoadConfigText() does.
void ApplyDerivedDefaults(Config& config);

// Every cross-field and range check. Appends one error per mistake; returns
// true when none were found.
bool Validate(const Config& config, std::vector<ConfigError>& errors);

// The configuration the daemon runs without --config: three access ports on
// af_packet veths for the quick-start demo. The YAML text is compiled in from
// config/examples/default.yaml.
const char* EmbeddedDefaultConfigText();

}  // namespace aggswitch::config
