// An embedded HTTP server, DPDK-free: an RAII wrapper over civetweb
// (Debian's libcivetweb, the server prometheus-cpp also embeds), serving
// what a Handler answers. The switch (its /metrics and /api/v1, through
// control/api_server.h), agg-intcollector and agg-cached serve through it.
//
// Start() binds the listen address and starts civetweb's own threads (one
// listener plus Options::threads request threads, each serving one
// connection at a time, for at most Options::request_timeout_ms per
// request); the destructor stops them and waits for requests in flight.
// Every request first passes the access checks of http_guard.h (Host,
// Origin, content type, the API token); a refused one is answered and
// counted here, never handed on. A request body (POST, PUT, PATCH) of at
// most kMaxRequestBody bytes is read whole before the handler runs.
//
//   HttpServer::Options options{.listen = "127.0.0.1:9478", .access = {.token = token}};
//   ASSIGN_OR_RETURN(auto http, HttpServer::Start(options, [](auto method, auto path, auto query,
//                                                              const std::string& body) { ... }));
//   ...
//   http.reset();   // before whatever the handler reads is destroyed
//
// Thread safety: Start() and the destructor on the thread that owns the
// server; the accessors on any thread. The handler runs on civetweb's
// threads, concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/http_guard.h"
#include "common/http_refusals.h"
#include "common/http_response.h"
#include "common/status.h"

struct mg_context;
struct mg_connection;

namespace aggswitch::common {

// Request bodies above this size get 413.
inline constexpr size_t kMaxRequestBody = 64 * 1024;
// The stack of civetweb's request threads, on which every handler runs: a
// handler's recursion (the switch's JSON parsing) is bounded to fit it.
inline constexpr size_t kRequestStackBytes = 102400;

class HttpServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:9477";  // "host:port"; port 0 picks a free port (see port())
    Access access;                          // who may do what (http_guard.h)
    uint32_t threads = 64;                  // request threads
    uint32_t request_timeout_ms = 5000;     // a request must arrive whole within this
  };
  using Handler = std::function<HttpResponse(std::string_view method, std::string_view path,
                                             std::string_view query, const std::string& body)>;

  // Serves whatever `handler` answers, after the access checks. A bad
  // address or a port in use is an error naming the address. [owner]
  static Result<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler);
  // The same with the handler `make(server)` returns, for a handler that
  // shows the server's own counts (Counts) from its first request on. [owner]
  static Result<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                   const std::function<Handler(const HttpServer&)>& make);

  // Stops accepting, waits for requests in flight, joins civetweb's threads. [owner]
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address as configured. [any]
  const std::string& listen() const { return options_.listen; }
  // The TCP port actually bound. [any]
  uint16_t port() const { return port_; }
  // Requests refused so far, by reason, and the thread count. [any]
  HttpCounts Counts() const;

 private:
  explicit HttpServer(Options options) : options_(std::move(options)) {}
  // Binds and starts civetweb for a server whose handler is set.
  static Result<std::unique_ptr<HttpServer>> Launch(std::unique_ptr<HttpServer> server);

  // civetweb's request handler for every URI; `cbdata` is the HttpServer.
  static int OnRequest(mg_connection* conn, void* cbdata);
  // The access checks; a refusal is counted and answered. Whether the request may go on.
  bool Admit(mg_connection* conn, std::string_view method) const;
  void CountRefusal(Refusal why) const {
    refused_[static_cast<size_t>(why) - 1].fetch_add(1, std::memory_order_relaxed);
  }
  // Connects to the listening port and closes at once (the destructor's
  // nudge to civetweb's master thread).
  void WakeListener() const;

  const Options options_;
  Handler handler_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
  mutable std::atomic<uint64_t> refused_[kNumRefusals] = {};
};

}  // namespace aggswitch::common
