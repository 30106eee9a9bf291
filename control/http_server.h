// The embedded HTTP server of /metrics and /api/v1: an RAII wrapper over
// civetweb (Debian's libcivetweb, the server prometheus-cpp also embeds).
//
// Start() binds the listen address and starts civetweb's own threads (one
// listener plus Options::threads request threads, each serving one
// connection at a time, for at most Options::request_timeout_ms per
// request); the destructor stops them and waits for requests in flight.
// Every request first passes the access checks of http_guard.h (Host,
// Origin, content type, the API token); a refused one is answered and
// counted here, never routed. The switch's routing and bodies live in
// api.h (HandleRequest over a DataSource; the switch's own source is
// SwitchDataSource, stats_snapshot.h); another program (agg-intcollector)
// gives its own Handler. This file only adapts civetweb to them, reading a
// request body (POST) of at most kMaxRequestBody bytes. It links no DPDK.
//
//   HttpServer::Options options{.listen = cfg.http.listen, .access = {.token = token}};
//   ASSIGN_OR_RETURN(auto http, HttpServer::Start(options, SwitchDataSource(*dataplane, &jobs)));
//   AGG_LOG(kInfo, "metrics at http://%s/metrics", http->listen().c_str());
//   ...
//   http.reset();   // before whatever its source reads is destroyed
//
// Thread safety: Start() and the destructor on the thread that owns the
// server (the switch's control thread); the accessors on any thread. The
// source's or handler's functions run on civetweb's threads, concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/config.h"
#include "control/api.h"
#include "control/http_guard.h"

struct mg_context;
struct mg_connection;

namespace aggswitch::control {

// Request bodies above this size get 413.
inline constexpr size_t kMaxRequestBody = 64 * 1024;

class HttpServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:9477";  // "host:port"; port 0 picks a free port (see port())
    Access access;                          // who may do what (http_guard.h)
    uint32_t threads = 64;                  // request threads
    uint32_t request_timeout_ms = 5000;     // a request must arrive whole within this
  };
  // The options of the config's http section, with `token` (LoadOrCreateToken
  // of http.token_file; empty without one). [any]
  static Options OptionsFrom(const config::HttpConfig& http, std::string token);

  // Serves `source` (api.h's routes). A bad address or a port in use is an
  // error naming the address. [owner]
  static common::Result<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           DataSource source);
  // Serves whatever `handler` answers, after the same access checks. [owner]
  using Handler = std::function<HttpResponse(std::string_view method, std::string_view path,
                                             std::string_view query, const std::string& body)>;
  static common::Result<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler);

  // Stops accepting, waits for requests in flight, joins civetweb's threads. [owner]
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address as configured. [any]
  const std::string& listen() const { return options_.listen; }
  // The TCP port actually bound. [any]
  uint16_t port() const { return port_; }
  // Requests refused so far, by reason, and the thread count. [any]
  HttpSnapshot Counts() const;

 private:
  explicit HttpServer(Options options) : options_(std::move(options)) {}
  // Binds and starts civetweb for a server whose handler is set.
  static common::Result<std::unique_ptr<HttpServer>> Launch(std::unique_ptr<HttpServer> server);

  // civetweb's request handler for every URI; `cbdata` is the HttpServer.
  static int OnRequest(mg_connection* conn, void* cbdata);
  // The access checks; a refusal is counted and answered. Whether the request may go on.
  bool Admit(mg_connection* conn, std::string_view method) const;
  void CountRefusal(Refusal why) const {
    refused_[static_cast<size_t>(why) - 1].fetch_add(1, std::memory_order_relaxed);
  }

  const Options options_;
  Handler handler_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
  // Connects to the listening port and closes at once (the destructor's
  // nudge to civetweb's master thread).
  void WakeListener() const;
  mutable std::atomic<uint64_t> refused_[kNumRefusals] = {};
};

}  // namespace aggswitch::control
