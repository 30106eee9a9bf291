// What the baseline allreduce programs of bench/allreduce.sh share: the
// command line, the seeded vectors every rank can compute for every rank, the
// check of a result, the timing loop's statistics and the JSON summary.
//
// gloo_allreduce.cc and mpi_allreduce.cc are two front ends of one loop,
// shaped like agg-worker's so that bench/allreduce.sh compares like with like:
//
//   RunOptions opt;                            // --size, --iterations, --json, ...
//   std::vector<float> pristine(n), buf(n);
//   FillRank(opt.seed, rank, pristine);        // this rank's vector
//   buf = pristine; AllReduce(buf);            // iteration 0: the check
//   VerifyReport v = Verify(opt.seed, world, buf);
//   for (it = 0; it < opt.iterations; ++it) {  // timed: refill, barrier, allreduce
//     buf = pristine; Barrier(); t0 = now(); AllReduce(buf); seconds.push_back(now() - t0);
//   }
//   WriteJson(opt.json, Summary{...});
//
// The vectors are exact in float32 whatever the summation order: element i of
// rank r is k / 64 - 32 with k = Mix(seed, r, i) mod 4096, a multiple of 1/64
// in [-32, 32) with at most 12 significant bits. Any partial sum over up to
// kMaxWorld ranks is a multiple of 1/64 below 2^13 in magnitude, so it needs
// at most 19 significant bits and float32 (24) holds it exactly: a ring, a
// tree or a recursive-doubling reduction must all give the local sum bit for
// bit, and any other bit pattern is a broken run.
//
// Thread safety: plain functions on the caller's data; the main thread.
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace aggswitch::bench {

// Ranks the exactness argument above covers.
inline constexpr int kMaxWorld = 256;

// Exit codes, as agg-worker's: 0 done and checked; 1 the check failed; 2 a bad
// command line; 3 the run failed (rendezvous, a peer gone, a timeout).
inline constexpr int kExitMismatch = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailed = 3;

// splitmix64's finaliser: consecutive inputs give unrelated outputs.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Element i of rank r's vector (see the top of the file).
inline float SeededValue(uint64_t seed, int rank, size_t i) {
  const uint64_t k = Mix(Mix(seed * 0x100000001b3ULL + static_cast<uint64_t>(rank)) + i) & 4095;
  return static_cast<float>(k) / 64.0f - 32.0f;
}

inline void FillRank(uint64_t seed, int rank, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = SeededValue(seed, rank, i);
}

struct VerifyReport {
  uint64_t mismatches = 0;
  std::string first;  // the first mismatch, for the message
};

// Compares `result` with the sum over ranks 0..world-1, bit for bit.
inline VerifyReport Verify(uint64_t seed, int world, std::span<const float> result) {
  VerifyReport r;
  for (size_t i = 0; i < result.size(); ++i) {
    float expected = 0;
    for (int rank = 0; rank < world; ++rank) expected += SeededValue(seed, rank, i);
    if (std::memcmp(&expected, &result[i], sizeof(float)) != 0) {
      if (r.mismatches++ == 0) {
        char text[128];
        std::snprintf(text, sizeof(text), "element %zu is %.9g, expected %.9g", i, result[i],
                      expected);
        r.first = text;
      }
    }
  }
  return r;
}

// "4096", "64K", "16M", "1G": bytes (powers of 1024, as agg-worker's --size).
inline std::optional<uint64_t> ParseSize(std::string_view text) {
  uint64_t v = 0;
  const auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || next == text.data()) return std::nullopt;
  const std::string_view unit = text.substr(static_cast<size_t>(next - text.data()));
  int shift = 0;
  if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "m") {
    shift = 20;
  } else if (unit == "G" || unit == "g") {
    shift = 30;
  } else if (!unit.empty()) {
    return std::nullopt;
  }
  if (v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

// The options both programs take. Rank and world come from the command line
// (Gloo) or from MPI.
struct RunOptions {
  int rank = -1;
  int world = 0;
  uint64_t bytes = 1 << 20;
  uint32_t iterations = 10;
  uint64_t seed = 1;
  std::string json_path;  // "{rank}" is replaced by the rank
  // Gloo only: the rendezvous directory (FileStore), a prefix that names this
  // run in it, the address to listen on, and the timeout of every operation.
  std::string store;
  std::string prefix = "allreduce";
  std::string host = "127.0.0.1";
  uint32_t timeout_ms = 60000;
};

// Parses "--name value" pairs into `o`; --rank, --world and the Gloo options
// only when `gloo`. Returns an error message, or "" when all is well; "help"
// after --help.
inline std::string ParseArgs(int argc, char** argv, bool gloo, RunOptions& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view name = argv[i];
    if (name == "-h" || name == "--help") return "help";
    if (i + 1 >= argc) return "missing value after " + std::string(name);
    const std::string value = argv[++i];
    auto number = [&](auto& field) {
      const auto [next, ec] = std::from_chars(value.data(), value.data() + value.size(), field);
      return ec == std::errc() && next == value.data() + value.size();
    };
    bool ok = true;
    if (name == "--size") {
      const std::optional<uint64_t> b = ParseSize(value);
      ok = b.has_value();
      if (ok) o.bytes = *b;
    } else if (name == "--iterations") {
      ok = number(o.iterations);
    } else if (name == "--seed") {
      ok = number(o.seed);
    } else if (name == "--json") {
      o.json_path = value;
    } else if (gloo && name == "--rank") {
      ok = number(o.rank);
    } else if (gloo && name == "--world") {
      ok = number(o.world);
    } else if (gloo && name == "--store") {
      o.store = value;
    } else if (gloo && name == "--prefix") {
      o.prefix = value;
    } else if (gloo && name == "--host") {
      o.host = value;
    } else if (gloo && name == "--timeout-ms") {
      ok = number(o.timeout_ms);
    } else {
      return "unknown option " + std::string(name);
    }
    if (!ok) return "bad value for " + std::string(name) + ": \"" + value + "\"";
  }
  if (o.bytes == 0 || o.bytes % sizeof(float) != 0) {
    return "--size must be a positive multiple of 4 bytes";
  }
  if (o.iterations == 0) return "--iterations must be at least 1";
  if (gloo) {
    if (o.world < 1 || o.world > kMaxWorld)
      return "--world must be 1.." + std::to_string(kMaxWorld);
    if (o.rank < 0 || o.rank >= o.world) return "--rank must be 0..world-1";
    if (o.store.empty()) return "--store DIR is required";
  }
  return "";
}

// What one rank reports.
struct Summary {
  std::string method;  // "gloo ring", "mpi", ...
  int rank = 0;
  int world = 0;
  uint64_t bytes = 0;
  bool verified = false;
  uint64_t mismatches = 0;
  std::string error;            // why the run failed, if it did
  std::vector<double> seconds;  // timed iterations, in order
  double setup_seconds = 0;     // rendezvous / init to the first allreduce
};

// The median of `v` (the mean of the two middle values for an even count).
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

inline std::string ForRank(std::string path, int rank) {
  const size_t at = path.find("{rank}");
  if (at != std::string::npos) path.replace(at, 6, std::to_string(rank));
  return path;
}

// One human line on stdout, and the JSON summary when asked for. The JSON has
// agg-worker's field names where they mean the same (ok, rank, world, bytes,
// latency_s.median, algbw_bytes_per_s), so one parser reads all three.
inline bool Report(const RunOptions& o, const Summary& s) {
  const double median = Median(s.seconds);
  const bool ok =
      s.error.empty() && s.verified && s.mismatches == 0 && s.seconds.size() == o.iterations;
  std::printf("%s rank %d of %d: %llu bytes, %zu timed allreduces, median %.3f ms, %.1f MB/s, %s\n",
              s.method.c_str(), s.rank, s.world, static_cast<unsigned long long>(s.bytes),
              s.seconds.size(), median * 1e3, median > 0 ? s.bytes / median / 1e6 : 0.0,
              ok ? "result checked" : ("FAIL: " + s.error).c_str());
  if (o.json_path.empty()) return true;
  nlohmann::json doc = {
      {"ok", ok},
      {"failure", s.error},
      {"method", s.method},
      {"rank", s.rank},
      {"world", s.world},
      {"bytes", s.bytes},
      {"iterations", o.iterations},
      {"completed", s.seconds.size()},
      {"verified", s.verified ? 1 : 0},
      {"mismatches", s.mismatches},
      {"setup_s", s.setup_seconds},
      {"latency_s",
       {{"median", median},
        {"min", s.seconds.empty() ? 0 : *std::min_element(s.seconds.begin(), s.seconds.end())},
        {"max", s.seconds.empty() ? 0 : *std::max_element(s.seconds.begin(), s.seconds.end())}}},
      {"seconds", s.seconds},
      {"algbw_bytes_per_s", median > 0 ? s.bytes / median : 0},
  };
  const std::string path = ForRank(o.json_path, s.rank);
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace aggswitch::bench
