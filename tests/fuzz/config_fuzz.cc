// config_fuzz: config::LoadConfigText (config/loader.h), the YAML loader and
// the Validate() it runs, on arbitrary text taken as the config file. Run it
// with -rss_limit_mb=2048 -timeout=10 (tests/fuzz/run_fuzz.sh does): a
// config must not crash the loader, hang it (YAML aliases can make a small
// file name a huge tree) or make it use unbounded memory.
//
// Invariants, each a finding when broken:
//   * a failed load reports at least one error, and every error formats;
//   * a successful load is a config Validate() accepts, without errors, as
//     the daemon and --check-config rely on.
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "config/config.h"
#include "config/loader.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  aggswitch::common::SetLogLevel(aggswitch::common::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace aggswitch::config;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ConfigLoad load = LoadConfigText(text, "<fuzz>");
  if (!load.ok()) {
    const std::string formatted = load.FormatErrors();
    FUZZ_CHECK(!formatted.empty());
    return 0;
  }
  std::vector<ConfigError> errors;
  FUZZ_CHECK(Validate(load.config, errors));
  FUZZ_CHECK(errors.empty());
  return 0;
}
