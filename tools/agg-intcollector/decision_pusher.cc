#include "tools/agg-intcollector/decision_pusher.h"

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/http_client.h"
#include "common/log.h"
#include "common/net_addr.h"

namespace aggswitch::tools {
namespace {

std::string IpText(uint32_t host_order) { return common::Ipv4Addr{host_order}.ToString(); }

std::string Body(const std::map<uint32_t, uint16_t>& decisions) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [dst, port] : decisions) {
    list.push_back({{"dst", IpText(dst) + "/32"}, {"port", port}});
  }
  return nlohmann::json{{"decisions", std::move(list)}}.dump();
}

}  // namespace

common::Result<NodeAnd> SplitNodeOption(std::string_view option, std::string_view form,
                                        std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return common::InvalidArgument(std::string(option) + " " + std::string(text) + ": expected " +
                                   std::string(form) + ", " + why);
  };
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) return bad("got no \"=\"");
  NodeAnd out;
  const std::string_view node = text.substr(0, eq);
  const auto [end, ec] = std::from_chars(node.data(), node.data() + node.size(), out.node_id);
  if (ec != std::errc() || end != node.data() + node.size() || node.empty()) {
    return bad("got node id \"" + std::string(node) + "\"");
  }
  out.rest = text.substr(eq + 1);
  return out;
}

common::Result<SwitchEndpoint> ParseSwitchOption(std::string_view text) {
  constexpr std::string_view kForm = "NODE=ADDR:PORT[,token-file=PATH]";
  const auto bad = [&](const std::string& why) {
    return common::InvalidArgument("--switch " + std::string(text) + ": expected " +
                                   std::string(kForm) + ", " + why);
  };
  ASSIGN_OR_RETURN(const NodeAnd split, SplitNodeOption("--switch", kForm, text));
  SwitchEndpoint sw;
  sw.node_id = split.node_id;
  std::string_view rest = split.rest;
  const size_t comma = rest.find(',');
  const std::string server(rest.substr(0, comma));
  if (!common::Ipv4Endpoint::Parse(server) || common::Ipv4Endpoint::Parse(server)->port == 0) {
    return bad("got address \"" + server + "\"");
  }
  sw.server = server;
  if (comma == std::string_view::npos) return sw;
  constexpr std::string_view kTokenFile = "token-file=";
  const std::string_view option = rest.substr(comma + 1);
  if (option.substr(0, kTokenFile.size()) != kTokenFile || option.size() == kTokenFile.size()) {
    return bad("got \"" + std::string(option) + "\" after the address");
  }
  const std::string path(option.substr(kTokenFile.size()));
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  if (!in) return bad("cannot read the token file " + path);
  std::string token = content.str();
  const size_t first = token.find_first_not_of(" \t\r\n");
  const size_t last = token.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return bad("the token file " + path + " is empty");
  sw.token = token.substr(first, last - first + 1);
  return sw;
}

NodeDecisions PlanDecisions(std::span<const telemetry::FlowPaths> flows, telemetry::Rule rule) {
  struct Pick {
    uint16_t port;
    uint64_t samples;
  };
  std::map<uint32_t, std::map<uint32_t, Pick>> picks;
  for (const telemetry::FlowPaths& f : flows) {
    const std::optional<size_t> best = telemetry::Choose(f, rule);
    if (!best) continue;
    const telemetry::PathSummary& path = f.paths[*best];
    for (const telemetry::RouteHop& hop : path.route) {
      auto [it, fresh] = picks[hop.node_id].try_emplace(f.dst_ip, Pick{hop.egress_port, path.samples});
      if (!fresh && path.samples > it->second.samples) it->second = {hop.egress_port, path.samples};
    }
  }
  NodeDecisions out;
  for (const auto& [node, by_dst] : picks) {
    for (const auto& [dst, pick] : by_dst) out[node][dst] = pick.port;
  }
  return out;
}

DecisionPusher::DecisionPusher(std::vector<SwitchEndpoint> switches, std::chrono::seconds refresh,
                               int timeout_ms)
    : refresh_(refresh), timeout_ms_(timeout_ms) {
  for (SwitchEndpoint& e : switches) switches_.push_back(Switch{std::move(e), {}, false, {}, {}});
}

void DecisionPusher::Push(const NodeDecisions& plan, std::chrono::steady_clock::time_point now,
                          const std::function<bool()>& stopping) {
  static const std::map<uint32_t, uint16_t> kNone;
  uint64_t decisions = 0;
  uint64_t unknown = 0;
  for (const auto& [node, by_dst] : plan) {
    bool known = false;
    for (const Switch& s : switches_) known = known || s.endpoint.node_id == node;
    if (!known) ++unknown;
  }
  for (Switch& s : switches_) {
    const auto it = plan.find(s.endpoint.node_id);
    const std::map<uint32_t, uint16_t>& want = it == plan.end() ? kNone : it->second;
    decisions += want.size();
    if (s.ever_taken && s.last_error.empty() && want == s.taken && now - s.taken_at < refresh_) continue;
    if (stopping && stopping()) break;
    const common::Result<common::HttpReply> reply =
        common::HttpCall({.server = s.endpoint.server,
                          .method = "PUT",
                          .target = "/api/v1/int/decisions",
                          .body = Body(want),
                          .token = s.endpoint.token,
                          .timeout_ms = timeout_ms_,
                          .peer = "aggswitch node " + std::to_string(s.endpoint.node_id),
                          .user_agent = "agg-intcollector"});
    std::string error;
    if (!reply.ok()) {
      error = reply.status().message();
    } else if (reply->status != 200) {
      error = "aggswitch node " + std::to_string(s.endpoint.node_id) + " at " + s.endpoint.server +
              " answered HTTP " + std::to_string(reply->status) + ": " + reply->body;
      while (!error.empty() && (error.back() == '\n' || error.back() == '\r')) error.pop_back();
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error.empty()) {
      if (!s.ever_taken || want != s.taken) {
        AGG_LOG(kInfo, "node %u (%s) took %zu path decisions", s.endpoint.node_id,
                s.endpoint.server.c_str(), want.size());
      }
      s.taken = want;
      s.ever_taken = true;
      s.taken_at = now;
      s.last_error.clear();
      pushed_.fetch_add(1, std::memory_order_relaxed);
    } else {
      if (error != s.last_error) AGG_LOG(kWarning, "path decisions not applied: %s", error.c_str());
      s.last_error = std::move(error);
      failed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  decisions_.store(decisions, std::memory_order_relaxed);
  unknown_nodes_.store(unknown, std::memory_order_relaxed);
}

DecisionPusher::Counts DecisionPusher::counts() const {
  return {pushed_.load(std::memory_order_relaxed), failed_.load(std::memory_order_relaxed),
          decisions_.load(std::memory_order_relaxed), unknown_nodes_.load(std::memory_order_relaxed)};
}

std::string DecisionPusher::StateJson() const {
  nlohmann::json list = nlohmann::json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const Switch& s : switches_) {
    nlohmann::json taken = nlohmann::json::array();
    for (const auto& [dst, port] : s.taken) taken.push_back({{"dst", IpText(dst) + "/32"}, {"port", port}});
    list.push_back({{"node", s.endpoint.node_id},
                    {"server", s.endpoint.server},
                    {"decisions", std::move(taken)},
                    {"error", s.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.last_error)}});
  }
  return list.dump();
}

}  // namespace aggswitch::tools
