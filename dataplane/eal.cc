#include "dataplane/eal.h"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>

#include <regex>

namespace aggswitch::dataplane {

namespace {

class Tsc final : public common::Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  uint64_t Cycles() const override { return rte_rdtsc(); }
  uint64_t CyclesPerSecond() const override { return rte_get_tsc_hz(); }
};

}  // namespace

const common::Clock& TscClock() {
  static const Tsc clock;
  return clock;
}

std::vector<std::string> BuildEalArgs(const config::Config& config,
                                      const std::vector<std::string>& overrides) {
  const config::EalConfig& eal = config.eal;
  std::vector<std::string> args = {"--lcores", eal.lcores, "--main-lcore",
                                   std::to_string(eal.main_lcore), "-m",
                                   std::to_string(eal.memory_mb), "--file-prefix", eal.file_prefix};
  if (!eal.hugepages) args.push_back("--no-huge");
  if (!eal.telemetry) args.push_back("--no-telemetry");
  if (!eal.pci) {
    args.push_back("--no-pci");
  } else {
    static const std::regex kPciAddress(R"(^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])");
    for (const config::PortConfig& port : config.ports) {
      if (std::regex_search(port.devargs, kPciAddress)) {
        args.push_back("-a");
        args.push_back(port.devargs);
      }
    }
  }
  args.insert(args.end(), eal.args.begin(), eal.args.end());
  args.insert(args.end(), overrides.begin(), overrides.end());
  return args;
}

common::Result<std::unique_ptr<EalSession>> EalSession::Init(const std::string& program,
                                                            const std::vector<std::string>& args) {
  std::vector<std::string> storage;
  storage.push_back(program);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(storage.size()), argv.data()) < 0) {
    std::string line;
    for (const std::string& a : args) line += " " + a;
    return common::Unavailable("EAL init failed (" + std::string(rte_strerror(rte_errno)) +
                               "); arguments:" + line);
  }
  return std::unique_ptr<EalSession>(new EalSession());
}

EalSession::~EalSession() { rte_eal_cleanup(); }

}  // namespace aggswitch::dataplane
