// Tests only: a child process that is always reaped, and the small helpers
// that tests driving real aggswitch / agg-gen processes share. The destructor
// sends SIGTERM, gives the child 5 s, then SIGKILL, so a failing ASSERT never
// leaves a DPDK process behind.
//
//   auto gen = TestProcess::Start({AGG_GEN_BIN, "--pcap-out", path}, dir + "/gen.log");
//   std::optional<int> code = gen->Wait(10.0);   // exit code; 128 + signal if killed
//   WaitFor(30, [&] { return ReadFile(log).find(" running: ") != std::string::npos; });
//
// Thread safety: one test thread.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace aggswitch::tools {

// The whole file, or "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `done` every `period` for up to `timeout_s`; whether it came true.
template <typename F>
bool WaitFor(double timeout_s, F done,
             std::chrono::milliseconds period = std::chrono::milliseconds(50)) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(period);
  }
  return true;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
inline uint16_t FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

class TestProcess {
 public:
  // Starts argv[0] with stdin from /dev/null and stdout and stderr into
  // `log_path`. nullptr when it cannot be spawned.
  static std::unique_ptr<TestProcess> Start(const std::vector<std::string>& argv,
                                            const std::string& log_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<std::string> storage = argv;
    std::vector<char*> args;
    for (std::string& a : storage) args.push_back(a.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return nullptr;
    return std::unique_ptr<TestProcess>(new TestProcess(pid));
  }

  ~TestProcess() {
    if (exit_code_) return;
    Signal(SIGTERM);
    if (!Wait(5.0)) {
      Signal(SIGKILL);
      (void)Wait(5.0);
    }
  }
  TestProcess(const TestProcess&) = delete;
  TestProcess& operator=(const TestProcess&) = delete;

  void Signal(int sig) {
    if (!exit_code_) ::kill(pid_, sig);
  }

  // The exit code (128 + signal number if a signal ended it) once the process
  // has ended, waiting up to `timeout_s`; nullopt while it still runs.
  std::optional<int> Wait(double timeout_s) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (!exit_code_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else if (std::chrono::steady_clock::now() >= deadline) {
        break;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return exit_code_;
  }

  bool Running() { return !Wait(0); }
  pid_t pid() const { return pid_; }

 private:
  explicit TestProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  std::optional<int> exit_code_;
};

}  // namespace aggswitch::tools
