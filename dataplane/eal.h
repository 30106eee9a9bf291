// DPDK EAL start-up and shutdown.
//
// The EAL command line is built from the config's `eal:` section, then any
// operator overrides are appended (later arguments win in EAL's parser).
// Ports are not passed as --vdev: the dataplane probes each port's devargs
// itself (rte_dev_probe), so PCI ports only need an allow-list entry.
//
//   std::vector<std::string> args = BuildEalArgs(config, overrides);
//   ASSIGN_OR_RETURN(auto eal, EalSession::Init("aggswitch", args));
//   ...   // ~EalSession calls rte_eal_cleanup()
//
// TscClock() is the switch's clock (common/clock.h) once EAL is up: the TSC
// at rte_get_tsc_hz(), and steady_clock for the control side.
//
// Thread safety: Init and ~EalSession on the main thread, once per process;
// TscClock [any] after Init.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "config/config.h"

namespace aggswitch::dataplane {

std::vector<std::string> BuildEalArgs(const config::Config& config,
                                      const std::vector<std::string>& overrides);

// The TSC and steady_clock as one common::Clock. [any, after EAL init]
const common::Clock& TscClock();

class EalSession {
 public:
  // Calls rte_eal_init. Fails (does not exit) on bad arguments or when EAL
  // cannot start. [main thread]
  static common::Result<std::unique_ptr<EalSession>> Init(const std::string& program,
                                                         const std::vector<std::string>& args);
  ~EalSession();
  EalSession(const EalSession&) = delete;
  EalSession& operator=(const EalSession&) = delete;

 private:
  EalSession() = default;
};

}  // namespace aggswitch::dataplane
