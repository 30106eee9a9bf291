#include "tools/agg-intcollector/collector.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/log.h"
#include "common/udp_bind.h"
#include "common/prometheus.h"
#include "telemetry/path_analysis.h"

namespace aggswitch::tools {
namespace {

using telemetry::ReportError;

constexpr unsigned kBatch = 64;
// Rows of each kind a Flush deletes at least (more when more came since).
constexpr uint64_t kPruneBudget = 5000;
constexpr size_t kMaxReport = 2048;  // a report is one hop's: ~100 bytes

std::string IpText(uint32_t host_order) { return common::Ipv4Addr{host_order}.ToString(); }

nlohmann::json RouteJson(const telemetry::PathSummary& p) {
  nlohmann::json route = nlohmann::json::array();
  for (const telemetry::RouteHop& h : p.route) {
    route.push_back({{"node", h.node_id}, {"ingress_port", h.ingress_port}, {"egress_port", h.egress_port}});
  }
  return route;
}

nlohmann::json PathJson(const telemetry::PathSummary& p) {
  return {{"route", RouteJson(p)},
          {"hops", p.hops()},
          {"samples", p.samples},
          {"latency_ns", p.latency_ns},
          {"free_share", p.free_share ? nlohmann::json(*p.free_share) : nlohmann::json(nullptr)}};
}

common::HttpResponse Json(int status, std::string body) {
  return {status, common::kJsonContentType, std::move(body)};
}

}  // namespace

common::Result<Reporter> ParseReporterOption(std::string_view text) {
  ASSIGN_OR_RETURN(const NodeAnd split, SplitNodeOption("--reporter", "NODE=ADDR", text));
  const std::optional<common::Ipv4Addr> ip = common::Ipv4Addr::Parse(split.rest);
  if (!ip) {
    return common::InvalidArgument("--reporter " + std::string(text) +
                                   ": expected NODE=ADDR, got address \"" + std::string(split.rest) +
                                   "\"");
  }
  return Reporter{split.node_id, ip->addr};
}

common::Result<std::unique_ptr<Collector>> Collector::Open(const CollectorOptions& options) {
  if (options.window.count() <= 0) {
    return common::InvalidArgument("--window: expected at least 1 second");
  }
  if (options.retain < options.window) {
    return common::InvalidArgument("--retain: expected at least the window (" +
                                   std::to_string(options.window.count()) + " s), got " +
                                   std::to_string(options.retain.count()) + " s");
  }
  if (options.max_rows == 0) return common::InvalidArgument("--max-rows: expected at least 1");
  if (options.any_reporter && options.apply) {
    return common::InvalidArgument(
        "--any-reporter: not with --apply (a forged report would choose the switches' uplinks): "
        "expected --reporter NODE=ADDR for each switch that reports");
  }
  if (!options.any_reporter && options.reporters.empty()) {
    return common::InvalidArgument(
        "--reporter: expected NODE=ADDR for each switch whose reports to accept (its "
        "telemetry.node_id and the address its reports come from), or --any-reporter");
  }
  ASSIGN_OR_RETURN(telemetry::RecordStore store, telemetry::RecordStore::Open(options.db_path));
  // The analysis's own connection, which reads what the writer committed
  // (a second connection to ":memory:" would be another database).
  ASSIGN_OR_RETURN(telemetry::RecordStore reader,
                   options.db_path == ":memory:"
                       ? common::Result<telemetry::RecordStore>(common::InvalidArgument(
                             "--db: expected a file (the analysis reads it beside the writer)"))
                       : telemetry::RecordStore::Open(options.db_path,
                                                      telemetry::RecordStore::Access::kRead));
  ASSIGN_OR_RETURN(const common::BoundUdp bound,
                   common::BindUdp(options.listen, "--listen " + options.listen.ToString()));
  return std::unique_ptr<Collector>(
      new Collector(options, std::move(store), std::move(reader), bound.fd, bound.port));
}

Collector::Collector(const CollectorOptions& options, telemetry::RecordStore store,
                     telemetry::RecordStore reader, int fd, uint16_t port)
    : options_(options),
      store_(std::move(store)),
      reader_(std::move(reader)),
      fd_(fd),
      port_(port),
      pusher_(options.apply ? std::make_unique<DecisionPusher>(options.switches) : nullptr),
      buffers_(size_t{kBatch} * kMaxReport) {
  for (const Reporter& r : options_.reporters) reporters_.insert({r.node_id, r.ip});
  paths_json_ = decisions_json_ = R"({"window_seconds":)" + std::to_string(options_.window.count()) +
                                  R"(,"flows":[]})" + "\n";
}

Collector::~Collector() {
  StopAnalysis();
  close(fd_);
}

void Collector::StartAnalysis(std::chrono::milliseconds interval) {
  if (analysis_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(analysis_mu_);
    analysis_stop_ = false;
  }
  analysis_ = std::thread([this, interval] { AnalysisLoop(interval); });
}

void Collector::StopAnalysis() {
  if (!analysis_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(analysis_mu_);
    analysis_stop_ = true;
  }
  reader_.Interrupt();
  analysis_cv_.notify_all();
  analysis_.join();
}

void Collector::AnalysisLoop(std::chrono::milliseconds interval) {
  std::unique_lock<std::mutex> lock(analysis_mu_);
  while (!analysis_cv_.wait_for(lock, interval, [this] { return analysis_stop_; })) {
    lock.unlock();
    const common::Status s = Analyse();
    lock.lock();
    // An analysis the stop interrupted is no failure.
    if (!s.ok() && !analysis_stop_) AGG_LOG(kError, "analysis: %s", s.message().c_str());
  }
}

int64_t Collector::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

size_t Collector::Poll(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return 0;
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_in from[kBatch];
  for (unsigned i = 0; i < kBatch; ++i) {
    iov[i] = {buffers_.data() + size_t{i} * kMaxReport, kMaxReport};
    msgs[i] = {};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
  }
  const int n = recvmmsg(fd_, msgs, kBatch, MSG_DONTWAIT, nullptr);
  if (n <= 0) return 0;
  const int64_t now = NowNs();
  for (int i = 0; i < n; ++i) {
    // A datagram longer than the buffer is cut: it fails to parse whole.
    const size_t len = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ? 0 : msgs[i].msg_len;
    const uint32_t ip = msgs[i].msg_hdr.msg_namelen == sizeof(sockaddr_in) ? ntohl(from[i].sin_addr.s_addr) : 0;
    OnDatagram(static_cast<const uint8_t*>(iov[i].iov_base), len, ip, now);
  }
  return static_cast<size_t>(n);
}

void Collector::OnDatagram(const uint8_t* data, size_t len, uint32_t from_ip, int64_t now_ns) {
  telemetry::HopReport r;
  const ReportError why = telemetry::ParseReport(data, len, &r);
  if (why != ReportError::kNone) {
    reports_[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!options_.any_reporter && !reporters_.contains({r.node_id, from_ip})) {
    unknown_sender_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  reports_[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
  // Lost reports: the gap to the sequence number expected from this
  // (node, hw_id), modulo 2^22, up to kMaxCountedGap. A number at or
  // before the expected one (a repeat, a reordering), or far past it (a
  // restarted switch), starts the count afresh.
  const auto key = std::make_pair(r.node_id, r.hw_id);
  const auto it = next_sequence_.find(key);
  if (it != next_sequence_.end()) {
    const uint32_t gap = (r.sequence - it->second) & 0x3FFFFFu;
    if (gap <= kMaxCountedGap) reports_lost_.fetch_add(gap, std::memory_order_relaxed);
  }
  next_sequence_[key] = (r.sequence + 1) & 0x3FFFFFu;
  if (const common::Status s = store_.Add(r, now_ns); !s.ok()) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    AGG_LOG(kWarning, "%s", s.message().c_str());
    return;
  }
  hop_records_.store(store_.hop_rows(), std::memory_order_relaxed);
  path_ends_.store(store_.path_end_rows(), std::memory_order_relaxed);
}

common::Status Collector::Flush() {
  if (const common::Status s = store_.Flush(); !s.ok()) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  // At least as many rows as came since the last prune go, when that many
  // are due: the table stays within its bounds under any intake.
  const uint64_t written = store_.hop_rows();
  const uint64_t budget = std::max(kPruneBudget, 2 * (written - rows_at_prune_));
  rows_at_prune_ = written;
  const int64_t before =
      NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.retain).count();
  auto pruned = store_.Prune(before, options_.max_rows, budget);
  if (!pruned.ok()) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return pruned.status();
  }
  for (size_t t = 0; t < 2; ++t) {
    rows_deleted_[t][0].fetch_add(pruned->aged[t], std::memory_order_relaxed);
    rows_deleted_[t][1].fetch_add(pruned->capped[t], std::memory_order_relaxed);
  }
  return common::Status::Ok();
}

common::Status Collector::Analyse() {
  const int64_t since =
      NowNs() - std::chrono::duration_cast<std::chrono::nanoseconds>(options_.window).count();
  auto traversals = reader_.Traversals(since);
  if (!traversals.ok()) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return traversals.status();
  }
  const std::vector<telemetry::FlowPaths> flows =
      telemetry::GroupByFlow(telemetry::SummarisePaths(*traversals));
  nlohmann::json paths = nlohmann::json::array();
  nlohmann::json decisions = nlohmann::json::array();
  uint64_t n_paths = 0;
  for (const telemetry::FlowPaths& f : flows) {
    nlohmann::json list = nlohmann::json::array();
    for (const telemetry::PathSummary& p : f.paths) list.push_back(PathJson(p));
    n_paths += f.paths.size();
    nlohmann::json chosen = nlohmann::json::object();
    nlohmann::json routes = nlohmann::json::object();
    for (const telemetry::Rule rule : telemetry::kRules) {
      const std::optional<size_t> best = telemetry::Choose(f, rule);
      chosen[telemetry::RuleName(rule)] = best ? nlohmann::json(*best) : nlohmann::json(nullptr);
      routes[telemetry::RuleName(rule)] = best ? PathJson(f.paths[*best]) : nlohmann::json(nullptr);
    }
    paths.push_back({{"src", IpText(f.src_ip)}, {"dst", IpText(f.dst_ip)}, {"paths", list},
                     {"decisions", chosen}});
    decisions.push_back({{"src", IpText(f.src_ip)}, {"dst", IpText(f.dst_ip)}, {"decisions", routes}});
  }
  const nlohmann::json window = options_.window.count();
  std::string p = nlohmann::json{{"window_seconds", window}, {"flows", paths}}.dump() + "\n";
  std::string d = nlohmann::json{{"window_seconds", window}, {"flows", decisions}}.dump() + "\n";
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    paths_json_ = std::move(p);
    decisions_json_ = std::move(d);
  }
  if (pusher_ != nullptr) {
    pusher_->Push(PlanDecisions(flows, *options_.apply), std::chrono::steady_clock::now(), [this] {
      std::lock_guard<std::mutex> lock(analysis_mu_);
      return analysis_stop_;
    });
  }
  traversals_.store(traversals->size(), std::memory_order_relaxed);
  flows_.store(flows.size(), std::memory_order_relaxed);
  paths_.store(n_paths, std::memory_order_relaxed);
  return common::Status::Ok();
}

Collector::Counts Collector::counts() const {
  Counts c;
  for (size_t i = 0; i < c.reports.size(); ++i) c.reports[i] = reports_[i].load(std::memory_order_relaxed);
  c.reports_lost = reports_lost_.load(std::memory_order_relaxed);
  c.unknown_sender = unknown_sender_.load(std::memory_order_relaxed);
  for (size_t t = 0; t < 2; ++t) {
    for (size_t r = 0; r < 2; ++r) {
      c.rows_deleted[t][r] = rows_deleted_[t][r].load(std::memory_order_relaxed);
    }
  }
  c.store_errors = store_errors_.load(std::memory_order_relaxed);
  c.hop_records = hop_records_.load(std::memory_order_relaxed);
  c.path_ends = path_ends_.load(std::memory_order_relaxed);
  c.traversals = traversals_.load(std::memory_order_relaxed);
  c.flows = flows_.load(std::memory_order_relaxed);
  c.paths = paths_.load(std::memory_order_relaxed);
  return c;
}

common::HttpResponse Collector::Handle(std::string_view method, std::string_view path,
                                        std::string_view /*query*/, const std::string& /*body*/) const {
  if (path != "/metrics" && path != "/api/v1/paths" && path != "/api/v1/decisions" &&
      path != "/api/v1/applied" && path != "/api/v1/stats") {
    return Json(404, common::ErrorJson("no such route: " + std::string(path)));
  }
  if (method != "GET" && method != "HEAD") {
    common::HttpResponse r = Json(405, common::ErrorJson("only GET"));
    r.allow = "GET, HEAD";
    return r;
  }
  const Counts c = counts();
  if (path == "/metrics") {
    common::PrometheusExposition out;
    const char* reports = "aggswitch_intcollector_reports_total";
    out.Family(reports, "counter",
               "Telemetry Reports received, by result: accepted, or why it was dropped "
               "(truncated, bad_version, not_int, bad_length, no_path_id, unknown_sender).");
    for (size_t i = 0; i < c.reports.size(); ++i) {
      const auto why = static_cast<ReportError>(i);
      out.Sample(reports, {{"result", why == ReportError::kNone ? "accepted" : telemetry::ReportErrorName(why)}},
                 c.reports[i]);
    }
    out.Sample(reports, {{"result", "unknown_sender"}}, c.unknown_sender);
    const auto one = [&out](const char* name, const char* type, const char* help, uint64_t v) {
      out.Family(name, type, help);
      out.Sample(name, {}, v);
    };
    one("aggswitch_intcollector_reports_lost_total", "counter",
        "Reports missing from the known switches' report sequence numbers (at most 1024 "
        "for one report).",
        c.reports_lost);
    const char* deleted = "aggswitch_intcollector_rows_deleted_total";
    out.Family(deleted, "counter",
               "Rows deleted from the record file, by table and reason: retention (received "
               "longer ago than --retain) or cap (more than --max-rows inserts behind the latest).");
    for (size_t t = 0; t < 2; ++t) {
      for (size_t r = 0; r < 2; ++r) {
        out.Sample(deleted,
                   {{"table", t == 0 ? "hop_records" : "path_ends"},
                    {"reason", r == 0 ? "retention" : "cap"}},
                   c.rows_deleted[t][r]);
      }
    }
    one("aggswitch_intcollector_store_errors_total", "counter",
        "Record-file writes or reads that failed.", c.store_errors);
    one("aggswitch_intcollector_hop_records_total", "counter",
        "Rows written to hop_records: one per hop per sampled datagram.", c.hop_records);
    one("aggswitch_intcollector_path_ends_total", "counter",
        "Rows written to path_ends: one per end-of-path notice.", c.path_ends);
    one("aggswitch_intcollector_traversals", "gauge",
        "Complete traversals in the last analysis's window.", c.traversals);
    one("aggswitch_intcollector_flows", "gauge",
        "Source-destination pairs in the last analysis's window.", c.flows);
    one("aggswitch_intcollector_paths", "gauge", "Paths in the last analysis's window.", c.paths);
    const DecisionPusher::Counts a = pusher_ != nullptr ? pusher_->counts() : DecisionPusher::Counts{};
    const char* pushes = "aggswitch_intcollector_decision_pushes_total";
    out.Family(pushes, "counter",
               "Path decision sets sent to a switch (--apply), by result: ok, or failed "
               "(unreachable, or refused).");
    out.Sample(pushes, {{"result", "ok"}}, a.pushed);
    out.Sample(pushes, {{"result", "failed"}}, a.failed);
    one("aggswitch_intcollector_applied_decisions", "gauge",
        "Path decisions of the last analysis at the switches --switch names.", a.decisions);
    one("aggswitch_intcollector_unknown_nodes", "gauge",
        "Nodes on decided paths that no --switch names: their part is not applied.",
        a.unknown_nodes);
    return {200, common::kPrometheusContentType, out.Take()};
  }
  if (path == "/api/v1/stats") {
    nlohmann::json reports = nlohmann::json::object();
    for (size_t i = 0; i < c.reports.size(); ++i) {
      const auto why = static_cast<ReportError>(i);
      reports[why == ReportError::kNone ? "accepted" : telemetry::ReportErrorName(why)] = c.reports[i];
    }
    reports["unknown_sender"] = c.unknown_sender;
    const nlohmann::json stats = {{"port", port_},
                                  {"database", options_.db_path},
                                  {"window_seconds", options_.window.count()},
                                  {"reports", reports},
                                  {"reports_lost", c.reports_lost},
                                  {"rows_deleted",
                                   {{"hop_records",
                                     {{"retention", c.rows_deleted[0][0]},
                                      {"cap", c.rows_deleted[0][1]}}},
                                    {"path_ends",
                                     {{"retention", c.rows_deleted[1][0]},
                                      {"cap", c.rows_deleted[1][1]}}}}},
                                  {"store_errors", c.store_errors},
                                  {"hop_records", c.hop_records},
                                  {"path_ends", c.path_ends},
                                  {"traversals", c.traversals},
                                  {"flows", c.flows},
                                  {"paths", c.paths}};
    return Json(200, stats.dump() + "\n");
  }
  if (path == "/api/v1/applied") {
    const nlohmann::json rule =
        options_.apply ? nlohmann::json(telemetry::RuleName(*options_.apply)) : nlohmann::json(nullptr);
    const std::string switches = pusher_ != nullptr ? pusher_->StateJson() : "[]";
    return Json(200, "{\"rule\":" + rule.dump() + ",\"switches\":" + switches + "}\n");
  }
  std::lock_guard<std::mutex> lock(published_mu_);
  return Json(200, path == "/api/v1/paths" ? paths_json_ : decisions_json_);
}

}  // namespace aggswitch::tools
