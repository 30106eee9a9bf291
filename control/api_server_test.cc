// The switch's API server as a client sees it, over real sockets on
// loopback: the access checks in front of the router (Host, Origin, content
// type, the API token), their counts in /metrics, the stack the router runs
// on, and the API staying up while slow clients hold connections.
#include "control/api_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/http_guard.h"

namespace aggswitch::control {
namespace {

using common::Access;
using common::HttpServer;
using common::Refusal;

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

struct Reply {
  int status = 0;
  std::string headers;
  std::string body;
};

int ConnectTo(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` as it is and reads the whole reply (the server closes).
Reply Send(uint16_t port, const std::string& request) {
  Reply r;
  const int fd = ConnectTo(port);
  if (fd < 0) return r;
  (void)!write(fd, request.data(), request.size());
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  r.headers = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// A request with the headers aggctl sends, changed by the caller.
std::string Request(const std::string& method, const std::string& target, const std::string& extra,
                    const std::string& body = "", const std::string& host = "127.0.0.1") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n" +
                  extra;
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

const std::string kJson = "Content-Type: application/json\r\n";
const std::string kBearer = std::string("Authorization: Bearer ") + kToken + "\r\n";

class ApiServerTest : public ::testing::Test {
 protected:
  // Starts a server whose routes succeed: what reaches the router is counted.
  void StartServer(Access access, uint32_t threads = 64) {
    DataSource source;
    source.snapshot = [this] {
      pthread_attr_t attr;
      size_t stack = 0;
      if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstacksize(&attr, &stack);
        pthread_attr_destroy(&attr);
      }
      handler_stack_.store(stack);
      return StatsSnapshot{};
    };
    source.mac_entries = [] { return std::vector<MacEntrySnapshot>{}; };
    source.stragglers = [this](uint32_t job, const StragglerRequest&) -> common::Result<StragglerReport> {
      routed_.fetch_add(1);
      StragglerReport report;
      report.job = job;
      return report;
    };
    HttpServer::Options options;
    options.listen = "127.0.0.1:0";
    options.access = std::move(access);
    options.threads = threads;
    options.request_timeout_ms = 3000;
    auto server = StartApiServer(options, std::move(source));
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(server).value();
  }
  uint64_t Refused(Refusal why) const {
    return server_->Counts().refused[static_cast<size_t>(why) - 1];
  }
  uint16_t port() const { return server_->port(); }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> routed_{0};
  std::atomic<size_t> handler_stack_{0};
};

const char kApply[] = R"({"top": 1, "apply": true})";

TEST_F(ApiServerTest, ChangesNeedTheTokenAndJson) {
  StartServer(Access{.token = kToken});
  Reply r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", kJson, kApply));
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_NE(r.headers.find("WWW-Authenticate: Bearer"), std::string::npos) << r.headers;
  EXPECT_EQ(Refused(Refusal::kNoToken), 1u);

  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers",
                           kJson + "Authorization: Bearer 0123456789abcdef0123456789abcdeX\r\n", kApply));
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("the API token is wrong"), std::string::npos) << r.body;
  EXPECT_EQ(Refused(Refusal::kBadToken), 1u);

  // A page's cross-origin "simple request": text/plain, no preflight.
  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", "Content-Type: text/plain\r\n" + kBearer,
                           kApply));
  EXPECT_EQ(r.status, 415) << r.body;
  EXPECT_EQ(Refused(Refusal::kContentType), 1u);

  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers",
                           kJson + kBearer + "Origin: http://attacker.example\r\n", kApply));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(Refused(Refusal::kOrigin), 1u);
  EXPECT_EQ(routed_.load(), 0) << "a refused request reached the router";

  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers",
                           "Content-Type: application/json; charset=utf-8\r\n" + kBearer, kApply));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(routed_.load(), 1);
  // A read passes without the token.
  r = Send(port(), Request("GET", "/api/v1/jobs/7/stragglers?top=1", ""));
  EXPECT_EQ(r.status, 200) << r.body;
  // /metrics counts the refusals.
  r = Send(port(), Request("GET", "/metrics", ""));
  EXPECT_NE(r.body.find("aggswitch_http_requests_refused_total{reason=\"bad_token\"} 1"),
            std::string::npos);
}

// DNS rebinding: a page at attacker.example whose name now resolves to the
// switch still sends "Host: attacker.example"; reads are refused too.
TEST_F(ApiServerTest, ForeignHostIsRefused) {
  StartServer(Access{.token = kToken, .allowed_hosts = {"switch1.rack4.example"}});
  for (const char* host : {"attacker.example:9477", "attacker.example", "", "127.0.0.1.attacker.example"}) {
    const Reply r = Send(port(), Request("GET", "/api/v1/stats", "", "", host));
    EXPECT_EQ(r.status, 403) << host << ": " << r.body;
  }
  EXPECT_EQ(Refused(Refusal::kHost), 4u);
  for (const char* host : {"127.0.0.1:9477", "localhost", "LOCALHOST:1", "[::1]:9477", "10.0.0.1",
                           "Switch1.rack4.example:9477"}) {
    const Reply r = Send(port(), Request("GET", "/api/v1/ports", "", "", host));
    EXPECT_EQ(r.status, 200) << host << ": " << r.body;
  }
}

TEST_F(ApiServerTest, WithoutATokenTheApiIsReadOnly) {
  StartServer(Access{});
  Reply r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", kJson + kBearer, kApply));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_NE(r.body.find("read-only"), std::string::npos) << r.body;
  r = Send(port(), Request("DELETE", "/api/v1/jobs/7", kBearer));
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(Refused(Refusal::kReadOnly), 2u);
  EXPECT_EQ(Send(port(), Request("GET", "/metrics", "")).status, 200);
}

TEST_F(ApiServerTest, ProtectedReadsNeedTheToken) {
  StartServer(Access{.token = kToken, .protect_reads = true});
  EXPECT_EQ(Send(port(), Request("GET", "/metrics", "")).status, 401);
  EXPECT_EQ(Send(port(), Request("GET", "/metrics", kBearer)).status, 200);
}

// The router runs on civetweb's request threads; their stack is the one the
// router's bounds and its tests assume (api.h).
TEST_F(ApiServerTest, RequestThreadsHaveTheStackTheRouterAssumes) {
  StartServer(Access{});
  ASSERT_EQ(Send(port(), Request("GET", "/api/v1/ports", "")).status, 200);
  EXPECT_EQ(handler_stack_.load(), kRequestStackBytes);
}

// A nested body over HTTP, as text/plain and as JSON: refused, the server up.
TEST_F(ApiServerTest, NestedBodiesAreRefused) {
  StartServer(Access{.token = kToken});
  const std::string deep = "{\"top\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
  Reply r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", "Content-Type: text/plain\r\n", deep));
  EXPECT_EQ(r.status, 415);
  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", kJson + kBearer, deep));
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("more than 16 levels deep"), std::string::npos) << r.body;
  r = Send(port(), Request("POST", "/api/v1/jobs/7/stragglers", kJson + kBearer, R"({"over": 1e999})"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Send(port(), Request("GET", "/metrics", "")).status, 200);
}

// 50 clients that send half a request and wait: the API still answers,
// because each holds one of http.threads threads and no more.
TEST_F(ApiServerTest, MetricsAnswerUnderFiftySlowConnections) {
  StartServer(Access{});
  std::vector<int> slow;
  for (int i = 0; i < 50; ++i) {
    const int fd = ConnectTo(port());
    ASSERT_GE(fd, 0);
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    (void)!write(fd, half.data(), half.size());
    slow.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every slow one taken by a thread
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Reply r = Send(port(), Request("GET", "/metrics", ""));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.status, 200);
    EXPECT_LT(took, std::chrono::seconds(1));
  }
  for (const int fd : slow) close(fd);
}

}  // namespace
}  // namespace aggswitch::control
