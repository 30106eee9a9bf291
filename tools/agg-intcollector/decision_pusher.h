// How agg-intcollector applies its path decisions (docs/telemetry.md,
// "Decisions applied"): the best path of each (source, destination) by one
// rule becomes, at every switch of that path, "traffic to this destination
// leaves by this port", pushed to the switch's API (PUT
// /api/v1/int/decisions). Every switch of a path gets its part of one
// decision, so the leaves and spines of a path agree on it; a switch uses
// it where the port is a member of the uplink group its L2 table sends the
// traffic to, and ignores it otherwise.
//
//   ASSIGN_OR_RETURN(SwitchEndpoint sw, ParseSwitchOption("1=10.0.79.1:9477,token-file=/t"));
//   DecisionPusher pusher({sw});
//   pusher.Push(PlanDecisions(flows, Rule::kMinLatency), steady_clock::now());
//
// A switch is sent its whole set when the set changed since the switch last
// took it, when the last push to it failed, and every `refresh` besides (a
// restarted switch has none). A push blocks the caller up to the timeout
// per switch, and a stop no longer than one of them.
//
// Thread safety: ParseSwitchOption and PlanDecisions are pure; Push on one
// thread (the collector's); counts and StateJson on any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "telemetry/path_analysis.h"

namespace aggswitch::tools {

struct SwitchEndpoint {
  uint32_t node_id = 0;  // its telemetry.node_id
  std::string server;    // its HTTP API, "addr:port"
  std::string token;     // its http.token_file's token
};

// "NODE=ADDR:PORT[,token-file=PATH]", the token read from PATH now; an
// error names what is wrong.
common::Result<SwitchEndpoint> ParseSwitchOption(std::string_view text);

// The node id before the "=" of an option's "NODE=REST", and the REST; an
// error, "OPTION TEXT: expected FORM, got ...", names what is wrong.
struct NodeAnd {
  uint32_t node_id = 0;
  std::string_view rest;
};
common::Result<NodeAnd> SplitNodeOption(std::string_view option, std::string_view form,
                                        std::string_view text);

// Per node id, per destination (IPv4, host order): the egress port.
using NodeDecisions = std::map<uint32_t, std::map<uint32_t, uint16_t>>;

// Every hop of each flow's best path by `rule` decides its node's egress
// port for the flow's destination. Where the paths of flows from several
// sources to one destination disagree at a node, the path with more
// samples decides there.
NodeDecisions PlanDecisions(std::span<const telemetry::FlowPaths> flows, telemetry::Rule rule);

class DecisionPusher {
 public:
  explicit DecisionPusher(std::vector<SwitchEndpoint> switches,
                          std::chrono::seconds refresh = std::chrono::seconds(30),
                          int timeout_ms = 1000);

  // Sends each known switch its decisions from `plan` as the header says.
  // Before each switch it asks `stopping` (when given), and sends no more
  // once it says so: a stop waits for one push at most. [collector]
  void Push(const NodeDecisions& plan, std::chrono::steady_clock::time_point now,
            const std::function<bool()>& stopping = {});

  struct Counts {
    uint64_t pushed = 0;  // PUTs a switch answered 200
    uint64_t failed = 0;  // PUTs that failed: unreachable, refused, an HTTP error
    uint64_t decisions = 0;  // in the last plan, at the switches known
    uint64_t unknown_nodes = 0;  // nodes of the last plan no --switch names
  };
  Counts counts() const;  // [any]
  // Per switch: node, server, decisions in force there (as last taken),
  // last error. [any]
  std::string StateJson() const;

 private:
  struct Switch {
    SwitchEndpoint endpoint;
    std::map<uint32_t, uint16_t> taken;  // what it last answered 200 to
    bool ever_taken = false;
    std::chrono::steady_clock::time_point taken_at;
    std::string last_error;
  };
  const std::chrono::seconds refresh_;
  const int timeout_ms_;
  mutable std::mutex mu_;  // guards switches_' taken and last_error for StateJson
  std::vector<Switch> switches_;
  std::atomic<uint64_t> pushed_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> decisions_{0};
  std::atomic<uint64_t> unknown_nodes_{0};
};

}  // namespace aggswitch::tools
