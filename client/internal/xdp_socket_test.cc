// The AF_XDP transport on a real veth pair between two network namespaces:
// whole clients allreduce through a TestSwitch in the peer namespace, one
// over AF_XDP and one over kernel UDP on the same interface (whose answers
// the XDP program must pass to the kernel), and Open's errors are the clear
// ones. Needs root: the test builds its namespaces (label "system").
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/test_switch.h"

namespace aggswitch::client {
namespace {

const std::string kSuffix = std::to_string(getpid() % 100000);
const std::string kWorkerNs = "aggxdp-w" + kSuffix;  // the clients' namespace
const std::string kSwitchNs = "aggxdp-s" + kSuffix;  // the TestSwitch's
const std::string kIface = "xw" + kSuffix;
const std::string kPeer = "xs" + kSuffix;
constexpr char kWorkerIp[] = "10.99.0.1";
constexpr char kSwitchIp[] = "10.99.0.2";

bool Sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

// The test runs in kWorkerNs with its own /sys, as `ip netns exec` would.
class AfXdpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    TearDownTestSuite();
    ready_ = Sh("ip netns add " + kWorkerNs) && Sh("ip netns add " + kSwitchNs) &&
             Sh("ip link add " + kIface + " netns " + kWorkerNs + " type veth peer name " + kPeer +
                " netns " + kSwitchNs) &&
             Sh("ip -n " + kWorkerNs + " addr add " + kWorkerIp + "/24 dev " + kIface) &&
             Sh("ip -n " + kSwitchNs + " addr add " + kSwitchIp + "/24 dev " + kPeer) &&
             Sh("ip -n " + kWorkerNs + " link set " + kIface + " up") &&
             Sh("ip -n " + kSwitchNs + " link set " + kPeer + " up") &&
             Sh("ip -n " + kWorkerNs + " link set lo up") && EnterNetns(kWorkerNs) &&
             unshare(CLONE_NEWNS) == 0 && mount("none", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
             umount2("/sys", MNT_DETACH) == 0 && mount("sysfs", "/sys", "sysfs", 0, nullptr) == 0;
  }
  static void TearDownTestSuite() {
    Sh("ip netns del " + kWorkerNs);
    Sh("ip netns del " + kSwitchNs);
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: it builds network namespaces";
    ASSERT_TRUE(ready_) << "could not build the namespaces and the veth pair";
  }

  static bool EnterNetns(const std::string& name) {
    const int fd = open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    return ok;
  }

  // A TestSwitch whose socket lives in kSwitchNs: built on a thread there.
  static std::unique_ptr<TestSwitch> SwitchInPeer(TestSwitch::Options options) {
    options.bind_ip = *common::Ipv4Addr::Parse(kSwitchIp);
    std::unique_ptr<TestSwitch> sw;
    std::thread([&] {
      if (EnterNetns(kSwitchNs)) sw = std::make_unique<TestSwitch>(options);
    }).join();
    return sw;
  }

  static ClientOptions Options(const TestSwitch& sw, uint16_t rank, uint16_t world) {
    ClientOptions o;
    o.switches = {sw.address()};
    o.job_id = 7;
    o.job_key = 0x5eed;
    o.rank = rank;
    o.world = world;
    o.task_info = TaskInfoMode::kNone;
    return o;
  }
  static ClientOptions AfXdp(ClientOptions o) {
    o.transport = TransportKind::kAfXdp;
    o.interface = kIface;
    return o;
  }

  static bool XdpAttached() { return Sh("ip -d link show " + kIface + " | grep -q prog/xdp"); }

  static inline bool ready_ = false;
};

TEST_F(AfXdpTest, AnAfXdpRankAndAUdpRankOnTheSameInterfaceGetExactSums) {
  auto sw = SwitchInPeer({.jobs = {{.id = 7, .key = 0x5eed, .members = 2}}});
  ASSERT_TRUE(sw && sw->ok());
  ClientOptions xdp_options = AfXdp(Options(*sw, 0, 2));
  xdp_options.mtu = 1500;
  auto xdp = Client::Create(xdp_options);
  ASSERT_TRUE(xdp.ok()) << xdp.status().ToString();
  EXPECT_NE((*xdp)->transport_description().find("af_xdp " + kIface + " queue 0"),
            std::string::npos)
      << (*xdp)->transport_description();
  EXPECT_TRUE(XdpAttached());
  auto udp = Client::Create(Options(*sw, 1, 2));
  ASSERT_TRUE(udp.ok()) << udp.status().ToString();
  EXPECT_EQ((*udp)->transport_description(), "udp, segmentation offload");

  // Several chunks, a window's worth and more, in every element type the
  // test can check exactly.
  const size_t n = 50'000;
  std::vector<int32_t> a(n), b(n);
  std::iota(a.begin(), a.end(), -25'000);
  std::iota(b.begin(), b.end(), 7);
  std::vector<float> fa(n), fb(n);
  for (size_t i = 0; i < n; ++i) {
    fa[i] = static_cast<float>(i % 1000) * 0.25f;
    fb[i] = static_cast<float>(i % 7) * -0.5f;
  }
  Pending pa = (*xdp)->Start(std::span<int32_t>(a), aggregator::ReduceOp::kSum);
  Pending pb = (*udp)->Start(std::span<int32_t>(b), aggregator::ReduceOp::kSum);
  Pending fpa = (*xdp)->Start(std::span<float>(fa), aggregator::ReduceOp::kSum);
  Pending fpb = (*udp)->Start(std::span<float>(fb), aggregator::ReduceOp::kSum);
  ASSERT_TRUE(pa.Wait().ok()) << pa.Wait().ToString();
  ASSERT_TRUE(pb.Wait().ok()) << pb.Wait().ToString();
  ASSERT_TRUE(fpa.Wait().ok()) << fpa.Wait().ToString();
  ASSERT_TRUE(fpb.Wait().ok()) << fpb.Wait().ToString();
  for (size_t i = 0; i < n; ++i) {
    const int32_t sum = static_cast<int32_t>(i) - 25'000 + static_cast<int32_t>(i) + 7;
    ASSERT_EQ(a[i], sum) << i;
    ASSERT_EQ(b[i], sum) << i;
    const float fsum = static_cast<float>(i % 1000) * 0.25f + static_cast<float>(i % 7) * -0.5f;
    ASSERT_EQ(fa[i], fsum) << i;
    ASSERT_EQ(fb[i], fsum) << i;
  }
  EXPECT_GT((*xdp)->stats().results, 2 * n / (*xdp)->ChunkElements(aggregator::DType::kInt32));
  // The host's own networking still works beside the program.
  EXPECT_TRUE(Sh(std::string("ping -c 1 -W 2 ") + kSwitchIp));
  xdp->reset();
  EXPECT_FALSE(XdpAttached()) << "the program goes with the client";
}

// Frames the XDP program hands over because of their addresses alone, with
// lengths that do not add up or no aggregation header, sent raw from the
// peer namespace: each is counted as stray and dropped, and the client goes on.
TEST_F(AfXdpTest, MalformedFramesToTheClientArePassedOverAndCounted) {
  auto sw = SwitchInPeer({.jobs = {{.id = 7, .key = 0x5eed, .members = 1}}});
  ASSERT_TRUE(sw && sw->ok());
  auto c = Client::Create(AfXdp(Options(*sw, 0, 1)));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const uint16_t port = (*c)->local_port();
  // Ethernet (broadcast), IPv4 (total length `ip_len`), UDP (length
  // `udp_len`) to the client's address and port, then `payload` bytes.
  const auto frame = [port](uint16_t ip_len, uint16_t udp_len, size_t payload) {
    std::vector<uint8_t> f(14 + 20 + 8 + payload, 0xab);
    std::memset(f.data(), 0xff, 6);
    f[12] = 0x08, f[13] = 0x00;
    uint8_t* ip = f.data() + 14;
    std::memset(ip, 0, 20);
    ip[0] = 0x45, ip[2] = static_cast<uint8_t>(ip_len >> 8), ip[3] = static_cast<uint8_t>(ip_len);
    ip[6] = 0x40, ip[8] = 64, ip[9] = 17;
    inet_pton(AF_INET, kSwitchIp, ip + 12);
    inet_pton(AF_INET, kWorkerIp, ip + 16);
    uint8_t* udp = ip + 20;
    udp[0] = 0xb7, udp[1] = 0x98;  // 47000
    udp[2] = static_cast<uint8_t>(port >> 8), udp[3] = static_cast<uint8_t>(port);
    udp[4] = static_cast<uint8_t>(udp_len >> 8), udp[5] = static_cast<uint8_t>(udp_len);
    udp[6] = udp[7] = 0;
    return f;
  };
  const std::vector<std::vector<uint8_t>> bad = {
      frame(20 + 2000, 2000, 100),  // UDP longer than the frame
      frame(20 + 8 + 50, 8 + 60, 60),  // IPv4 and UDP lengths disagree
      frame(20 + 4, 4, 0),  // a UDP length below its own header
      frame(20 + 8 + 30, 8 + 30, 30),  // lengths right, no aggregation header
  };
  bool sent = false;
  std::thread([&] {
    if (!EnterNetns(kSwitchNs)) return;
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(if_nametoindex(kPeer.c_str()));
    to.sll_halen = 6;
    std::memset(to.sll_addr, 0xff, 6);
    sent = true;
    for (const auto& f : bad) {
      sent &= sendto(fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
              static_cast<ssize_t>(f.size());
    }
    close(fd);
  }).join();
  ASSERT_TRUE(sent);
  std::vector<int32_t> v(5000, 3);
  ASSERT_TRUE((*c)->AllReduce(std::span<int32_t>(v), aggregator::ReduceOp::kSum).ok());
  for (int32_t x : v) ASSERT_EQ(x, 3);
  for (int i = 0; i < 100 && (*c)->stats().stray_datagrams < bad.size(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ((*c)->stats().stray_datagrams, bad.size());
}

TEST_F(AfXdpTest, LargerFramesCarryLargerChunks) {
  // Back to 1500 however the test ends: the next test counts on it.
  struct RestoreMtu {
    ~RestoreMtu() {
      Sh("ip -n " + kWorkerNs + " link set " + kIface + " mtu 1500");
      Sh("ip -n " + kSwitchNs + " link set " + kPeer + " mtu 1500");
    }
  } restore_mtu;
  ASSERT_TRUE(Sh("ip -n " + kWorkerNs + " link set " + kIface + " mtu 3500") &&
              Sh("ip -n " + kSwitchNs + " link set " + kPeer + " mtu 3500"));
  auto sw = SwitchInPeer({.jobs = {{.id = 7, .key = 0x5eed, .members = 1}}});
  ASSERT_TRUE(sw && sw->ok());
  ClientOptions o = AfXdp(Options(*sw, 0, 1));
  o.mtu = 3500;
  auto c = Client::Create(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // IPv4 and UDP, the aggregation header, room for a 32-id missing list.
  EXPECT_EQ((*c)->ChunkElements(aggregator::DType::kInt32),
            (3500 - 28 - sizeof(aggregator::AggHeader) - 32 * 2) / 4);
  std::vector<int32_t> v(20'000);
  std::iota(v.begin(), v.end(), 1);
  ASSERT_TRUE((*c)->AllReduce(std::span<int32_t>(v), aggregator::ReduceOp::kMax).ok());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<int32_t>(i + 1));
  c->reset();
}

TEST_F(AfXdpTest, OpenNamesWhatIsWrong) {
  auto sw = SwitchInPeer({.jobs = {{.id = 7, .key = 0x5eed, .members = 2}}});
  ASSERT_TRUE(sw && sw->ok());
  const auto message = [](const common::Result<std::unique_ptr<Client>>& r) {
    return r.ok() ? std::string("created") : r.status().message();
  };

  ClientOptions o = AfXdp(Options(*sw, 0, 2));
  o.interface = "nosuch0";
  auto r = Client::Create(o);
  EXPECT_EQ(r.status().code(), common::StatusCode::kNotFound) << message(r);
  EXPECT_NE(message(r).find("no interface nosuch0"), std::string::npos) << message(r);

  o = AfXdp(Options(*sw, 0, 2));
  o.queue = 3;
  r = Client::Create(o);
  EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << message(r);
  EXPECT_NE(message(r).find("has 1 receive queues"), std::string::npos) << message(r);

  o = AfXdp(Options(*sw, 0, 2));
  o.mtu = 3000;
  r = Client::Create(o);
  EXPECT_EQ(r.status().code(), common::StatusCode::kInvalidArgument) << message(r);
  EXPECT_NE(message(r).find("larger than the interface's MTU, 1500"), std::string::npos)
      << message(r);

  o = AfXdp(Options(*sw, 0, 2));
  o.switches = {{*common::Ipv4Addr::Parse("10.99.0.77"), 47000}};
  r = Client::Create(o);
  EXPECT_EQ(r.status().code(), common::StatusCode::kUnavailable) << message(r);
  EXPECT_NE(message(r).find("did not answer ARP on " + kIface), std::string::npos) << message(r);
  EXPECT_FALSE(XdpAttached()) << "nothing is left behind by a failed start";

  // A queue holds one AF_XDP socket.
  auto first = Client::Create(AfXdp(Options(*sw, 0, 2)));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  r = Client::Create(AfXdp(Options(*sw, 1, 2)));
  EXPECT_EQ(r.status().code(), common::StatusCode::kUnavailable) << message(r);
  EXPECT_NE(message(r).find("busy"), std::string::npos) << message(r);
  first->reset();

  // Without privilege: a clear refusal, not a hang. The child drops root.
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    auto unprivileged = Client::Create(AfXdp(Options(*sw, 0, 2)));
    const bool clear = !unprivileged.ok() &&
                       unprivileged.status().code() == common::StatusCode::kFailedPrecondition &&
                       unprivileged.status().message().find("CAP_NET_RAW") != std::string::npos;
    _exit(clear ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "an unprivileged start must fail with kFailedPrecondition naming CAP_NET_RAW";
}

}  // namespace
}  // namespace aggswitch::client
