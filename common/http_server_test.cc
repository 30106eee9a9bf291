// The HTTP server with a handler of its own, as the daemons use it, through
// the project's own client (http_client.h) over loopback: what reaches the
// handler, what the access checks and the body limit keep from it and count,
// a handler that shows the server's own counts, and the API token file.
#include "common/http_server.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>

#include "common/http_client.h"

namespace aggswitch::common {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";

// A handler that echoes what it was given, and counts its calls.
class EchoServer {
 public:
  explicit EchoServer(Access access) {
    HttpServer::Options options;
    options.listen = "127.0.0.1:0";
    options.access = std::move(access);
    options.threads = 4;
    auto server = HttpServer::Start(options, [this](std::string_view method, std::string_view path,
                                                    std::string_view query, const std::string& body) {
      calls_.fetch_add(1);
      return HttpResponse{200, "text/plain",
                          std::string(method) + " " + std::string(path) + "?" + std::string(query) + " " + body};
    });
    EXPECT_TRUE(server.ok()) << server.status().message();
    if (server.ok()) server_ = std::move(server).value();
  }
  Result<HttpReply> Call(const std::string& method, const std::string& target, const std::string& body = "",
                         const std::string& token = "") const {
    return HttpCall({.server = "127.0.0.1:" + std::to_string(server_->port()), .method = method,
                     .target = target, .body = body, .token = token});
  }
  uint64_t Refused(Refusal why) const { return server_->Counts().refused[static_cast<size_t>(why) - 1]; }
  int calls() const { return calls_.load(); }
  uint16_t port() const { return server_->port(); }

 private:
  std::atomic<int> calls_{0};
  std::unique_ptr<HttpServer> server_;
};

TEST(HttpServerTest, TheHandlerGetsTheRequestTheChecksLetThrough) {
  EchoServer s(Access{.token = kToken});
  auto r = s.Call("GET", "/metrics?name=x");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "GET /metrics?name=x ");
  r = s.Call("POST", "/a/b", R"({"k": 1})", kToken);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, R"(POST /a/b? {"k": 1})");
  EXPECT_EQ(s.calls(), 2);

  r = s.Call("POST", "/a/b", R"({"k": 1})");  // no token
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, ErrorJson(TextOf(Refusal::kNoToken).message));
  EXPECT_EQ(s.Refused(Refusal::kNoToken), 1u);
  r = s.Call("POST", "/a/b", std::string(kMaxRequestBody + 1, ' '), kToken);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(s.Refused(Refusal::kBodyTooLarge), 1u);
  EXPECT_EQ(s.calls(), 2) << "a refused request reached the handler";
}

TEST(HttpServerTest, AHandlerMadeWithTheServerShowsItsCounts) {
  HttpServer::Options options;
  options.listen = "127.0.0.1:0";
  options.threads = 2;
  auto server = HttpServer::Start(options, [](const HttpServer& self) {
    return HttpServer::Handler([&self](std::string_view, std::string_view, std::string_view, const std::string&) {
      const HttpCounts counts = self.Counts();
      return HttpResponse{200, "text/plain",
                          std::to_string(counts.refused[static_cast<size_t>(Refusal::kReadOnly) - 1]) + " of " +
                              std::to_string(counts.threads)};
    });
  });
  ASSERT_TRUE(server.ok()) << server.status().message();
  const std::string at = "127.0.0.1:" + std::to_string((*server)->port());
  auto r = HttpCall({.server = at, .method = "DELETE", .target = "/x"});  // no token file: read-only
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 403);
  r = HttpCall({.server = at, .target = "/x"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "1 of 2");
}

TEST(HttpServerTest, AnAddressInUseIsAnErrorNamingIt) {
  EchoServer first(Access{});
  HttpServer::Options options;
  options.listen = "127.0.0.1:" + std::to_string(first.port());
  auto second = HttpServer::Start(options, HttpServer::Handler([](auto...) { return HttpResponse{}; }));
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(options.listen), std::string::npos) << second.status().message();
  options.listen = "no-port";
  auto bad = HttpServer::Start(options, HttpServer::Handler([](auto...) { return HttpResponse{}; }));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected host:port"), std::string::npos) << bad.status().message();
}

TEST(LoadOrCreateTokenTest, CreatesReadsAndRefusesWhatItMust) {
  char dir_template[] = "/tmp/http_token_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string path = dir + "/api.token";
  auto created = LoadOrCreateToken(path);
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_EQ(created->size(), 64u);
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = LoadOrCreateToken(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *created) << "an existing token is kept";

  chmod(path.c_str(), 0644);
  auto readable = LoadOrCreateToken(path);
  ASSERT_FALSE(readable.ok());
  EXPECT_NE(readable.status().message().find("others may read it (mode 644); chmod 600 it"),
            std::string::npos)
      << readable.status().message();
  chmod(path.c_str(), 0600);
  std::ofstream(path) << "  short  \n";
  auto short_token = LoadOrCreateToken(path);
  ASSERT_FALSE(short_token.ok());
  EXPECT_NE(short_token.status().message().find("at least 16 characters, got 5"), std::string::npos);
  std::ofstream(path) << "a token with spaces inside\n";
  EXPECT_FALSE(LoadOrCreateToken(path).ok());
  std::ofstream(path) << "\n  an-operators-token-0123456789  \n\n";
  auto trimmed = LoadOrCreateToken(path);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().message();
  EXPECT_EQ(*trimmed, "an-operators-token-0123456789");
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace aggswitch::common
