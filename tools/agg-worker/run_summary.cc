#include "tools/agg-worker/run_summary.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

namespace aggswitch::tools {

namespace {

using json = nlohmann::json;

unsigned long long U(uint64_t v) {
  return static_cast<unsigned long long>(v);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string FailureReason(const RunSummary& s) {
  if (!s.error.empty()) return s.error;
  if (s.mismatches > 0) {
    const uint32_t answered = s.completed + s.overflows;
    return std::to_string(s.mismatches) + " elements differ from the expected result in " +
           std::to_string(answered - s.verified) + " of " + std::to_string(answered) +
           " iterations";
  }
  return "";
}

}  // namespace

common::Result<uint64_t> ParseSize(const std::string& text) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  uint64_t v = 0;
  const auto [next, ec] = std::from_chars(first, last, v);
  if (next == first || ec != std::errc()) {
    return common::InvalidArgument("--size: expected a byte count such as 4096, 64K or 4M, got \"" +
                                   text + "\"");
  }
  std::string suffix = Lower(std::string(next, last));
  if (suffix.ends_with("ib")) {
    suffix.resize(suffix.size() - 2);
  } else if (suffix.size() > 1 && suffix.ends_with("b")) {
    suffix.resize(suffix.size() - 1);
  }
  unsigned shift = 0;
  if (suffix == "k") {
    shift = 10;
  } else if (suffix == "m") {
    shift = 20;
  } else if (suffix == "g") {
    shift = 30;
  } else if (!suffix.empty() && suffix != "b") {
    return common::InvalidArgument("--size: unknown unit in \"" + text + "\" (K, M or G)");
  }
  if (v > (UINT64_MAX >> shift))
    return common::InvalidArgument("--size: \"" + text + "\" is too large");
  return v << shift;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), u == 0 ? "%.0f %s" : "%.1f %s", v, kUnits[u]);
  return text;
}

LatencySummary Summarize(std::vector<double> seconds) {
  LatencySummary s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  // Nearest rank: the smallest value with at least p percent at or below it.
  const auto rank = [n](double p) {
    return std::min(n - 1, static_cast<size_t>(std::ceil(p * static_cast<double>(n))) - 1);
  };
  s.min = seconds.front();
  s.max = seconds.back();
  s.median = seconds[rank(0.5)];
  s.p99 = seconds[rank(0.99)];
  s.mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(n);
  return s;
}

void PrintSummary(FILE* out, const RunSummary& s) {
  std::fprintf(out, "agg-worker rank %u of %u, job %u via %s over %s\n", s.rank, s.world, s.job,
               s.switches.c_str(), s.transport.c_str());
  std::fprintf(out, "  %s %s of %llu elements (%s), %s mode: %u of %u iterations done\n",
               s.dtype.c_str(), s.op.c_str(), U(s.elements), FormatBytes(s.bytes).c_str(),
               s.float_mode.c_str(), s.completed, s.iterations);
  if (s.completed > 0) {
    const LatencySummary& l = s.latency;
    std::fprintf(out,
                 "  latency per allreduce: median %.3f ms, p99 %.3f ms (min %.3f, mean %.3f, "
                 "max %.3f)\n",
                 l.median * 1e3, l.p99 * 1e3, l.min * 1e3, l.mean * 1e3, l.max * 1e3);
    std::fprintf(out, "  algorithm bandwidth: %.1f MB/s (%.3f Gbit/s) at the median\n",
                 s.AlgorithmBandwidth() / 1e6, s.AlgorithmBandwidth() * 8 / 1e9);
  }
  const client::ClientStats& c = s.stats;
  std::fprintf(out,
               "  chunks %llu, retransmissions %llu, duplicate results %llu, stray %llu, receive "
               "drops %llu\n",
               U(c.chunks), U(c.retransmissions), U(c.duplicate_results), U(c.stray_datagrams),
               U(c.receive_drops));
  std::fprintf(out,
               "  round trip %.3f ms, retransmission timeout %.3f ms; queries %llu, answered held "
               "%llu, missing %llu\n",
               static_cast<double>(c.round_trip_us) / 1e3,
               static_cast<double>(c.retransmit_timeout_us) / 1e3, U(c.queries),
               U(c.held_notices), U(c.missing_notices));
  if (c.scale_exchanges + c.overflow_redos + c.float_fallbacks + c.saturated_chunks +
          c.transient_nacks >
      0) {
    std::fprintf(out,
                 "  scale exchanges %llu, overflow redos %llu, float fallbacks %llu, saturated "
                 "int32 chunks %llu, retried NACKs %llu\n",
                 U(c.scale_exchanges), U(c.overflow_redos), U(c.float_fallbacks),
                 U(c.saturated_chunks), U(c.transient_nacks));
  }
  if (s.verify) {
    std::fprintf(out, "  verified: %u of %u iterations match the local reduction", s.verified,
                 s.completed + s.overflows);
    if (s.overflows > 0) {
      std::fprintf(out, "; %u failed with the int32 overflow, as their sums can saturate",
                   s.overflows);
    }
    std::fprintf(out, "\n");
    for (const std::string& e : s.mismatch_examples) std::fprintf(out, "    %s\n", e.c_str());
  }
  const std::string why = FailureReason(s);
  std::fprintf(out, "RESULT %s%s\n", why.empty() ? "ok" : "FAIL: ", why.c_str());
  std::fflush(out);
}

common::Status WriteJsonSummary(const std::string& path, const RunSummary& s) {
  const client::ClientStats& c = s.stats;
  const json doc = {
      {"ok", s.ok()},
      {"failure", FailureReason(s)},
      {"rank", s.rank},
      {"world", s.world},
      {"job", s.job},
      {"switches", s.switches},
      {"transport", s.transport},
      {"dtype", s.dtype},
      {"op", s.op},
      {"float_mode", s.float_mode},
      {"elements", s.elements},
      {"bytes", s.bytes},
      {"iterations", s.iterations},
      {"completed", s.completed},
      {"verify", s.verify},
      {"verified", s.verified},
      {"mismatches", s.mismatches},
      {"overflows", s.overflows},
      {"mismatch_examples", s.mismatch_examples},
      {"latency_s",
       {{"min", s.latency.min},
        {"median", s.latency.median},
        {"p99", s.latency.p99},
        {"max", s.latency.max},
        {"mean", s.latency.mean}}},
      {"algbw_bytes_per_s", s.AlgorithmBandwidth()},
      {"client",
       {{"allreduces", c.allreduces},
        {"chunks", c.chunks},
        {"retransmissions", c.retransmissions},
        {"results", c.results},
        {"duplicate_results", c.duplicate_results},
        {"stray_datagrams", c.stray_datagrams},
        {"transient_nacks", c.transient_nacks},
        {"scale_exchanges", c.scale_exchanges},
        {"float_fallbacks", c.float_fallbacks},
        {"overflow_redos", c.overflow_redos},
        {"saturated_chunks", c.saturated_chunks},
        {"notices", c.notices},
        {"kept_local", c.kept_local},
        {"receive_drops", c.receive_drops},
        {"held_notices", c.held_notices},
        {"queries", c.queries},
        {"missing_notices", c.missing_notices},
        {"answered_resends", c.answered_resends},
        {"relocated_notices", c.relocated_notices},
        {"round_trip_us", c.round_trip_us},
        {"retransmit_timeout_us", c.retransmit_timeout_us}}},
  };
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  f.close();
  if (!f) return common::Unavailable("cannot write " + path + ": " + std::strerror(errno));
  return common::Status::Ok();
}

}  // namespace aggswitch::tools
