// agg-sim: the deterministic simulator of whole fabrics (docs/testing.md,
// "The fabric simulator"). Each scenario is drawn from a seed and runs the
// real switch, control-thread, parameter-node and client code in this one
// process, on simulated links and a simulated clock.
//
//   agg-sim --seed 1234                       one scenario; its findings, and its trace
//   agg-sim --seed 1234 --limits ranks=3      the same scenario, smaller
//   agg-sim --seeds 200 --from 1000           scenarios 1000..1199, and the summary line
//   agg-sim --seeds 300 --except 17,42        scenarios 1..300 but 17 and 42
//   agg-sim --seeds 200 --shrink              a failing seed is shrunk before it is printed
//   agg-sim --seed 1234 --replay              runs it twice: the traces must agree bit for bit
//   agg-sim --seed-file tests/sim/seeds.txt   the scenarios listed there ("SEED [LIMITS]" a line)
//
// The last line of a run of many: "sim scenarios=N failures=F scenarios_per_s=R".
// Exit status: 0 when every scenario kept the promise, 1 when one did not,
// 2 for a bad command line or a world the simulator could not build.
//
// Thread safety: a program; everything runs on its main thread.
#include <algorithm>
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "dataplane/eal.h"
#include "tests/sim/run.h"
#include "tests/sim/scenario.h"
#include "tests/sim/shrink.h"

namespace {

using namespace aggswitch;

std::string Command(const std::string& program, uint64_t seed, const sim::Limits& limits) {
  std::string cmd = program + " --seed " + std::to_string(seed);
  if (!(limits == sim::Limits{})) cmd += " --limits " + limits.ToString();
  return cmd;
}

// The scenarios a seed file lists: "SEED [LIMITS]" a line; '#' starts a
// comment. InvalidArgument naming the line for anything else.
common::Result<std::vector<std::pair<uint64_t, sim::Limits>>> ReadSeedFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return common::InvalidArgument("--seed-file: cannot read " + path);
  std::vector<std::pair<uint64_t, sim::Limits>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string seed_text, limits_text, extra;
    if (!(words >> seed_text)) continue;
    words >> limits_text >> extra;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    uint64_t seed = 0;
    if (seed_text.find_first_not_of("0123456789") != std::string::npos ||
        !(std::istringstream(seed_text) >> seed) || !extra.empty()) {
      return common::InvalidArgument(where + "expected SEED [LIMITS], got '" + line + "'");
    }
    sim::Limits limits;
    if (!limits_text.empty()) {
      auto parsed = sim::Limits::Parse(limits_text);
      if (!parsed.ok()) return common::InvalidArgument(where + parsed.status().message());
      limits = *parsed;
    }
    out.emplace_back(seed, limits);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"agg-sim: the deterministic fabric simulator (real switches, clients and agg-ps on simulated time)"};
  uint64_t seed = 0;
  uint64_t seeds = 0;
  uint64_t from = 1;
  std::string limits_text;
  bool shrink = false;
  bool replay = false;
  bool verbose = false;
  bool describe = false;
  uint64_t max_shown = 10;
  auto* seed_opt = app.add_option("--seed", seed, "Run the scenario of this seed");
  auto* seeds_opt = app.add_option("--seeds", seeds, "Run this many scenarios, from --from on");
  std::string seed_file;
  auto* file_opt = app.add_option("--seed-file", seed_file,
                                  "Also run the scenarios this file lists, \"SEED [LIMITS]\" a line");
  app.add_option("--from", from, "The first seed of --seeds (default 1)");
  std::vector<uint64_t> except;
  app.add_option("--except", except,
                 "Seeds of --seeds left out: known open failures (docs/testing.md)")
      ->delimiter(',');
  app.add_option("--limits", limits_text,
                 "Bounds on what a scenario draws: switches=,levels=,ranks=,jobs=,ops=,elems=,faults=,features=");
  app.add_flag("--shrink", shrink, "Shrink each failing scenario before printing its command");
  app.add_flag("--replay", replay, "Run the scenario twice and compare the traces");
  app.add_flag("--describe", describe, "Print each scenario before it runs");
  app.add_flag("-v,--verbose", verbose, "The switches' log lines too");
  bool frames = false;
  app.add_flag("--frames", frames, "Print every frame a link delivers (stderr)");
  app.add_option("--show", max_shown, "Failing scenarios printed in full at most (default 10)");
  seed_opt->excludes(seeds_opt);
  seed_opt->excludes(file_opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (seed_opt->count() == 0 && seeds_opt->count() == 0 && file_opt->count() == 0) {
    std::fprintf(stderr, "agg-sim: give --seed S, --seeds N or --seed-file FILE\n");
    return 2;
  }
  sim::Limits limits;
  if (!limits_text.empty()) {
    auto parsed = sim::Limits::Parse(limits_text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "agg-sim: %s\n", parsed.status().message().c_str());
      return 2;
    }
    limits = *parsed;
  }
  common::SetLogLevel(verbose ? common::LogLevel::kInfo : common::LogLevel::kError);
  auto eal = dataplane::EalSession::Init(
      "agg-sim", {"--no-huge", "-m", "1024", "--no-pci", "--no-shconf", "--no-telemetry", "--lcores", "0",
                  "--file-prefix", "agg_sim_" + std::to_string(getpid()), "--log-level", "lib.*:error"});
  if (!eal.ok()) {
    std::fprintf(stderr, "agg-sim: %s\n", eal.status().message().c_str());
    return 2;
  }
  const std::string program = argv[0];
  const sim::RunOptions options{.verbose = verbose, .print_frames = frames};

  if (seed_opt->count() != 0) {
    const sim::Scenario s = sim::Generate(seed, limits);
    std::printf("%s", s.Describe().c_str());
    auto outcome = sim::RunScenario(s, options);
    if (!outcome.ok()) {
      std::fprintf(stderr, "agg-sim: seed %" PRIu64 ": %s\n", seed, outcome.status().message().c_str());
      return 2;
    }
    for (const std::string& f : outcome->failures) std::printf("FAIL %s\n", f.c_str());
    std::printf("seed %" PRIu64 " %s: %u of %u allreduces ok, %.1f ms simulated, %" PRIu64
                " events, trace %016" PRIx64 "\n",
                seed, outcome->ok() ? "kept the promise" : "FAILED", outcome->ops_ok, outcome->ops,
                static_cast<double>(outcome->sim_ns) / 1e6, outcome->events, outcome->trace);
    if (replay) {
      auto again = sim::RunScenario(s, options);
      if (!again.ok() || again->trace != outcome->trace || again->failures != outcome->failures) {
        std::printf("replay DIFFERS: trace %016" PRIx64 " then %016" PRIx64 "\n", outcome->trace,
                    again.ok() ? again->trace : 0);
        return 1;
      }
      std::printf("replay identical: trace %016" PRIx64 "\n", again->trace);
    }
    if (!outcome->ok()) {
      sim::Limits shown = limits;
      if (shrink) shown = sim::Shrink(seed, limits, options);
      std::printf("reproduce: %s\n", Command(program, seed, shown).c_str());
    }
    return outcome->ok() ? 0 : 1;
  }

  // The scenarios: the range, then the file's.
  std::vector<std::pair<uint64_t, sim::Limits>> runs;
  for (uint64_t k = 0; k < seeds; ++k) {
    if (std::find(except.begin(), except.end(), from + k) == except.end()) {
      runs.emplace_back(from + k, limits);
    }
  }
  if (!seed_file.empty()) {
    auto listed = ReadSeedFile(seed_file);
    if (!listed.ok()) {
      std::fprintf(stderr, "agg-sim: %s\n", listed.status().message().c_str());
      return 2;
    }
    runs.insert(runs.end(), listed->begin(), listed->end());
  }
  const auto began = std::chrono::steady_clock::now();
  std::vector<uint64_t> failing;
  uint64_t shown = 0;
  for (const auto& [sd, run_limits] : runs) {
    const sim::Limits& limits = run_limits;
    const sim::Scenario s = sim::Generate(sd, limits);
    if (describe) std::printf("%s", s.Describe().c_str());
    auto outcome = sim::RunScenario(s, options);
    if (!outcome.ok()) {
      std::printf("seed %" PRIu64 ": the simulator could not run it: %s\n", sd, outcome.status().message().c_str());
      failing.push_back(sd);
      continue;
    }
    if (outcome->ok()) continue;
    failing.push_back(sd);
    if (shown++ >= max_shown) continue;
    sim::Limits small = limits;
    if (shrink) small = sim::Shrink(sd, limits, options);
    const sim::Scenario shrunk = sim::Generate(sd, small);
    auto again = shrink ? sim::RunScenario(shrunk, options) : std::move(outcome);
    std::printf("FAIL seed %" PRIu64 "\n%s", sd, shrunk.Describe().c_str());
    if (again.ok()) {
      for (size_t i = 0; i < again->failures.size() && i < 8; ++i) std::printf("  %s\n", again->failures[i].c_str());
    }
    std::printf("reproduce: %s\n", Command(program, sd, small).c_str());
    std::fflush(stdout);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (!failing.empty()) {
    std::printf("failing seeds:");
    for (uint64_t sd : failing) std::printf(" %" PRIu64, sd);
    std::printf("\n");
  }
  std::printf("sim scenarios=%zu failures=%zu scenarios_per_s=%.2f\n", runs.size(), failing.size(),
              secs > 0 ? static_cast<double>(runs.size()) / secs : 0.0);
  return failing.empty() ? 0 : 1;
}
