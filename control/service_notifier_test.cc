// ServiceNotifier against a real notification socket, as systemd would
// listen on: what it says, when it feeds the watchdog, and that a worker
// that stops polling starves it.
#include "control/service_notifier.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace aggswitch::control {
namespace {

using std::chrono::milliseconds;

class ServiceNotifierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/tmp/aggswitch-notify-test." + std::to_string(::getpid());
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd_, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    path_.copy(sa.sun_path, sizeof(sa.sun_path) - 1);
    ASSERT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    timeval tv{0, 200'000};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
    ::setenv("WATCHDOG_USEC", "200000", 1);
    ::setenv("WATCHDOG_PID", std::to_string(::getpid()).c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  // The next datagram, or "" when none came within 200 ms.
  std::string Next() {
    char buf[512];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  }
  std::string path_;
  int fd_ = -1;
};

TEST_F(ServiceNotifierTest, SaysReadyReloadingAndStopping) {
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  ASSERT_TRUE(n.enabled());
  EXPECT_EQ(n.watchdog(), std::chrono::microseconds(200000));
  n.Ready("forwarding: 2 ports");
  EXPECT_EQ(Next(), "READY=1\nSTATUS=forwarding: 2 ports");
  n.Reloading();
  const std::string reloading = Next();
  EXPECT_EQ(reloading.rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << reloading;
  n.Stopping();
  EXPECT_EQ(Next(), "STOPPING=1\nSTATUS=stopping");
}

TEST_F(ServiceNotifierTest, FeedsTheWatchdogEveryHalfPeriodWhileEveryWorkerPolls) {
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  const auto t0 = ServiceNotifier::Clock::now();
  EXPECT_TRUE(n.Poll(t0, {10, 20}));
  EXPECT_EQ(Next(), "WATCHDOG=1");
  EXPECT_FALSE(n.Poll(t0 + milliseconds(50), {11, 21})) << "half the period has not passed";
  EXPECT_TRUE(n.Poll(t0 + milliseconds(100), {12, 22}));
  EXPECT_EQ(Next(), "WATCHDOG=1");
  EXPECT_EQ(n.pings(), 2u);
}

TEST_F(ServiceNotifierTest, AWorkerThatStopsPollingStarvesTheWatchdog) {
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  const auto t0 = ServiceNotifier::Clock::now();
  ASSERT_TRUE(n.Poll(t0, {10, 20}));
  ASSERT_EQ(Next(), "WATCHDOG=1");
  EXPECT_FALSE(n.Poll(t0 + milliseconds(100), {11, 20}));
  const std::string status = Next();
  EXPECT_NE(status.find("worker 1 has not polled"), std::string::npos) << status;
  EXPECT_FALSE(n.Poll(t0 + milliseconds(200), {12, 20}));
  EXPECT_EQ(Next(), "") << "said once, not every period";
  EXPECT_EQ(n.withheld(), 2u);
  EXPECT_TRUE(n.Poll(t0 + milliseconds(300), {13, 21})) << "it polls again: fed again";
  EXPECT_EQ(Next(), "STATUS=forwarding: every worker polls again");
  EXPECT_EQ(Next(), "WATCHDOG=1");
}

TEST_F(ServiceNotifierTest, OutsideAServiceManagerNothingIsSent) {
  ::unsetenv("NOTIFY_SOCKET");
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  EXPECT_FALSE(n.enabled());
  n.Ready("x");
  EXPECT_FALSE(n.Poll(ServiceNotifier::Clock::now(), {1}));
  EXPECT_EQ(Next(), "");
}

TEST_F(ServiceNotifierTest, AWatchdogMeantForAnotherProcessIsNotFed) {
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);
  ServiceNotifier n = ServiceNotifier::FromEnvironment();
  EXPECT_EQ(n.watchdog().count(), 0);
  EXPECT_FALSE(n.Poll(ServiceNotifier::Clock::now(), {1}));
}

}  // namespace
}  // namespace aggswitch::control
