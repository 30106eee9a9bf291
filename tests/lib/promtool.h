// Tests only: pipes a text exposition into `promtool check metrics`
// (Prometheus's own linter; scripts/install-deps.sh installs it) and returns
// its exit code and everything it printed. A promtool that is missing or
// cannot run is exit code -1 and says so: a test of the format fails then,
// never passes unchecked.
//
//   const PromtoolResult r = RunPromtool(RenderPrometheus(snap));
//   EXPECT_EQ(r.exit_code, 0) << r.output;
//
// Thread safety: any thread; it runs a process and a temporary file.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace aggswitch::testing {

inline constexpr char kPromtool[] = "/usr/bin/promtool";

struct PromtoolResult {
  int exit_code = -1;
  std::string output;
};

inline PromtoolResult RunPromtool(const std::string& text) {
  if (access(kPromtool, X_OK) != 0) return {-1, std::string(kPromtool) + " is not installed"};
  char out_path[] = "/tmp/promtool_check_XXXXXX";
  const int fd = mkstemp(out_path);
  if (fd < 0) return {-1, "mkstemp failed"};
  close(fd);
  const std::string cmd = std::string(kPromtool) + " check metrics >" + out_path + " 2>&1";
  PromtoolResult result;
  FILE* pipe = popen(cmd.c_str(), "w");
  if (pipe != nullptr) {
    fwrite(text.data(), 1, text.size(), pipe);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::ifstream in(out_path);
  std::stringstream buf;
  buf << in.rdbuf();
  result.output = buf.str();
  unlink(out_path);
  return result;
}

}  // namespace aggswitch::testing
