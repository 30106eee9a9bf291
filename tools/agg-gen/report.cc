#include "tools/agg-gen/report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace aggswitch::tools {

namespace {

using json = nlohmann::ordered_json;

const char* ExpectName(Expect e) {
  return e == Expect::kEcho ? "echo" : "results";
}

double Gbps(const GenConfig& cfg, double contributions_per_s) {
  return contributions_per_s * GradientBits(cfg) / 1e9;
}

// Why the run failed, or "" when it did not.
std::string FailureReason(const RunReport& r) {
  std::string why;
  auto add = [&why](const std::string& part) { why += (why.empty() ? "" : "; ") + part; };
  if (r.counters.Errors() != 0) add(std::to_string(r.counters.Errors()) + " wrong answers");
  if (r.unanswered != 0) add(std::to_string(r.unanswered) + " contributions never answered");
  if (r.stalled) {
    add("no chunk was answered at every worker for " + std::to_string(r.cfg.give_up_ms) + " ms");
  }
  return why;
}

std::string DetailText(const ErrorDetail& d) {
  char buf[256];
  switch (d.error) {
    case GenError::kPayload:
      std::snprintf(
          buf, sizeof(buf), "job %u seq %u worker %u: element %lld is 0x%08llx, expected 0x%08llx",
          d.job_id, d.seq, d.worker, static_cast<long long>(d.index),
          static_cast<unsigned long long>(d.got), static_cast<unsigned long long>(d.want));
      break;
    case GenError::kHeader:
    case GenError::kStray:
      std::snprintf(buf, sizeof(buf), "job %u seq %u worker %u: %s is %llu, expected %llu%s",
                    d.job_id, d.seq, d.worker, d.field, static_cast<unsigned long long>(d.got),
                    static_cast<unsigned long long>(d.want),
                    d.error == GenError::kStray && std::strcmp(d.field, "seq") == 0
                        ? " (first seq not sent)"
                        : "");
      break;
    case GenError::kAddress:
      std::snprintf(buf, sizeof(buf),
                    "job %u seq %u to worker %u's port: wrong MAC, IPv4 or source", d.job_id, d.seq,
                    d.worker);
      break;
    case GenError::kMalformed:
    case GenError::kCount:
      std::snprintf(buf, sizeof(buf), "datagram to worker %u's port does not parse", d.worker);
      break;
  }
  return std::string(GenErrorLabel(d.error)) + ": " + buf;
}

}  // namespace

double MedianCompletedPerSecond(const std::vector<RateSample>& samples) {
  if (samples.empty()) return 0;
  std::vector<double> v;
  for (const RateSample& s : samples) v.push_back(s.CompletedPerSecond());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void PrintSample(FILE* out, const GenConfig& cfg, double since_start_s, const RateSample& s) {
  const double rate = s.CompletedPerSecond();
  std::fprintf(out,
               "agg-gen: %6.1f s  %7.3f Mpps contributions  %7.2f Gbit/s  sent %llu  "
               "retransmits %llu  errors %llu\n",
               since_start_s, rate / 1e6, Gbps(cfg, rate), static_cast<unsigned long long>(s.sent),
               static_cast<unsigned long long>(s.retransmits),
               static_cast<unsigned long long>(s.errors));
  std::fflush(out);
}

void PrintReport(FILE* out, const RunReport& r) {
  const GenConfig& cfg = r.cfg;
  const GenCounters& c = r.counters;
  const double avg = r.seconds > 0 ? c.completed / r.seconds : 0;
  const double median = MedianCompletedPerSecond(r.samples);
  auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::fprintf(out,
               "agg-gen: %u workers x %u jobs (ids %u..%u), %u x %s %s, window %u, expect %s, %s\n",
               cfg.workers, cfg.jobs, cfg.job_base, cfg.job_base + cfg.jobs - 1, cfg.elems,
               std::string(aggregator::DTypeName(cfg.dtype)).c_str(),
               std::string(aggregator::ReduceOpName(cfg.op)).c_str(), cfg.window,
               ExpectName(cfg.expect), r.port.c_str());
  std::fprintf(out, "  sent %llu contributions (%llu retransmissions), answered %llu in %.2f s\n",
               u(c.sent), u(c.retransmits), u(c.completed), r.seconds);
  std::fprintf(out,
               "  answers %llu (%llu duplicates), NACKs %llu, other frames %llu, final ACKs %llu\n",
               u(c.answers), u(c.duplicates), u(c.nacks), u(c.other), u(r.port_stats.acks_sent));
  std::fprintf(out, "  port: TX ring full %llu times, mbuf allocation failed %llu times\n",
               u(r.port_stats.tx_full), u(r.port_stats.no_mbuf));
  std::fprintf(out, "  rate: %.3f Mpps contributions, %.2f Gbit/s of gradient (run average)\n",
               avg / 1e6, Gbps(cfg, avg));
  if (!r.samples.empty()) {
    std::fprintf(out, "        %.3f Mpps, %.2f Gbit/s (median of %zu 1-s samples)\n", median / 1e6,
                 Gbps(cfg, median), r.samples.size());
  }
  std::fprintf(out, "  wrong answers: %llu\n", u(c.Errors()));
  for (size_t e = 0; e < kNumGenErrors; ++e) {
    if (c.errors[e] == 0) continue;
    const auto error = static_cast<GenError>(e);
    std::fprintf(out, "    %-9s %llu: %s\n", GenErrorLabel(error), u(c.errors[e]),
                 GenErrorHelp(error));
  }
  std::fprintf(out, "  contributions never answered: %llu\n", u(r.unanswered));
  for (const ErrorDetail& d : r.details) std::fprintf(out, "  %s\n", DetailText(d).c_str());
  const std::string why = FailureReason(r);
  std::fprintf(out, "RESULT %s%s\n", why.empty() ? "ok" : "FAIL: ", why.c_str());
  std::fflush(out);
}

common::Status WriteJsonReport(const std::string& path, const RunReport& r) {
  const GenConfig& cfg = r.cfg;
  const GenCounters& c = r.counters;
  const double avg = r.seconds > 0 ? c.completed / r.seconds : 0;
  const double median = MedianCompletedPerSecond(r.samples);
  json errors = json::object();
  for (size_t e = 0; e < kNumGenErrors; ++e) {
    errors[GenErrorLabel(static_cast<GenError>(e))] = c.errors[e];
  }
  json samples = json::array();
  for (const RateSample& s : r.samples) {
    samples.push_back({{"t", s.end_epoch_s},
                       {"seconds", s.seconds},
                       {"sent", s.sent},
                       {"retransmits", s.retransmits},
                       {"completed", s.completed},
                       {"errors", s.errors},
                       {"contributions_per_s", s.CompletedPerSecond()},
                       {"gbit_per_s", Gbps(cfg, s.CompletedPerSecond())}});
  }
  json details = json::array();
  for (const ErrorDetail& d : r.details) details.push_back(DetailText(d));
  const json doc = {
      {"ok", r.ok()},
      {"failure", FailureReason(r)},
      {"config",
       {{"workers", cfg.workers},
        {"jobs", cfg.jobs},
        {"job_base", cfg.job_base},
        {"elems", cfg.elems},
        {"dtype", aggregator::DTypeName(cfg.dtype)},
        {"op", aggregator::ReduceOpName(cfg.op)},
        {"window", cfg.window},
        {"expect", ExpectName(cfg.expect)},
        {"timeout_ms", cfg.timeout_ms},
        {"chunks", cfg.chunks},
        {"duration_s", cfg.duration_s},
        {"port", r.port}}},
      {"seconds", r.seconds},
      {"sent", c.sent},
      {"retransmits", c.retransmits},
      {"completed", c.completed},
      {"answers", c.answers},
      {"duplicates", c.duplicates},
      {"nacks", c.nacks},
      {"other", c.other},
      {"unanswered", r.unanswered},
      {"stalled", r.stalled},
      {"errors_total", c.Errors()},
      {"errors", std::move(errors)},
      {"port_stats",
       {{"tx_full", r.port_stats.tx_full},
        {"no_mbuf", r.port_stats.no_mbuf},
        {"acks_sent", r.port_stats.acks_sent}}},
      {"contributions_per_s", avg},
      {"gbit_per_s", Gbps(cfg, avg)},
      {"median_contributions_per_s", median},
      {"median_gbit_per_s", Gbps(cfg, median)},
      {"samples", std::move(samples)},
      {"error_details", std::move(details)},
  };
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  f.close();
  if (!f) return common::Unavailable("cannot write " + path + ": " + std::strerror(errno));
  return common::Status::Ok();
}

}  // namespace aggswitch::tools
