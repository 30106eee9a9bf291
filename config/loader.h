// YAML -> Config. The only code in the project that includes yaml-cpp.
//
// The loader reports every mistake it can find in one pass: unknown keys (with
// the keys that were expected), wrong types, out-of-range values, and then
// everything Validate() finds. A file with five mistakes yields five errors.
// Errors come in file order. A value the loader could not read is reported once:
// Validate() findings at or below that key path are dropped.
//
//   ConfigLoad load = LoadConfigFile("/etc/aggswitch.yaml");
//   if (!load.ok()) for (auto& e : load.errors) puts(e.Format(load.source_name).c_str());
//
// Thread safety: no shared state; call from the control thread (or any thread).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "config/config.h"

namespace aggswitch::config {

struct ConfigLoad {
  std::string source_name;  // file path, or "<embedded>"
  Config config;            // meaningful only when ok()
  std::vector<ConfigError> errors;

  bool ok() const { return errors.empty(); }
  // All errors, one per line, each "<source>:<line>:<col>: <path>: <message>".
  std::string FormatErrors() const;
};

// Parses and validates YAML text.
ConfigLoad LoadConfigText(std::string_view yaml, std::string source_name);

// Reads the file and calls LoadConfigText(); a missing or unreadable file is
// one error with line 0.
ConfigLoad LoadConfigFile(const std::string& path);

// Result-style wrapper: the Config, or InvalidArgument with FormatErrors().
common::Result<Config> LoadConfig(const std::string& path);

}  // namespace aggswitch::config
