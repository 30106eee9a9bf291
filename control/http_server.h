// The embedded HTTP server of /metrics and /api/v1: an RAII wrapper over
// civetweb (Debian's libcivetweb, the server prometheus-cpp also embeds).
//
// Start() binds the listen address and starts civetweb's own threads (one
// listener plus Options::threads request threads, each serving one
// connection at a time, for at most Options::request_timeout_ms per
// request); the destructor stops them and waits for requests in flight.
// Every request first passes the access checks of http_guard.h (Host,
// Origin, content type, the API token); a refused one is answered and
// counted here, never routed. Routing and bodies live in api.h
// (HandleRequest); this file only adapts civetweb to it, reading a request
// body (POST) of at most kMaxRequestBody bytes.
//
// civetweb's threads are not EAL lcores. They read the dataplane only through
// its [any] accessors (CollectSnapshot, CollectMacEntries, DumpSlots) and never
// touch a worker lcore's state for writing, so a scrape cannot stall
// forwarding; a slot dump asks the workers for a copy and waits at most
// 500 ms for it. The job routes (a job's TAN too), each job's counters and
// the own TAN's counters go through JobControl, which hands them to the
// control thread.
//
//   HttpServer::Options options{.listen = cfg.http.listen, .access = {.token = token}};
//   ASSIGN_OR_RETURN(auto http, HttpServer::Start(options, *dataplane, &job_control));
//   AGG_LOG(kInfo, "metrics at http://%s/metrics", http->listen().c_str());
//   ...
//   http.reset();   // before the dataplane is destroyed
//
// Thread safety: Start() and the destructor on the control thread; the
// accessors on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/config.h"
#include "control/api.h"
#include "control/http_guard.h"

struct mg_context;
struct mg_connection;

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

class JobControl;
class TreeControl;

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

  // Serves `dp`, and the job table through `jobs` when given (else the job
  // routes answer 503); both must outlive the server. /api/v1/slots answers
  // 503 unless `dp` aggregates. A bad address or a port in use is an error
  // naming the address. [control]
  static common::Result<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           const dataplane::Dataplane& dp,
                                                           JobControl* jobs = nullptr,
                                                           TreeControl* tree = nullptr);
  // Serves whatever `source` returns; its functions are called from civetweb's
  // threads, concurrently. For tests and tools that have no Dataplane. [control]
  static common::Result<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           DataSource source);

  // Stops accepting, waits for requests in flight, joins civetweb's threads. [control]
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
  HttpServer(Options options, DataSource source)
      : options_(std::move(options)), source_(std::move(source)) {}

  // civetweb's request handler for every URI; `cbdata` is the HttpServer.
  static int OnRequest(mg_connection* conn, void* cbdata);
  // The access checks; a refusal is counted and answered. Whether the request may go on.
  bool Admit(mg_connection* conn, std::string_view method) const;
  void CountRefusal(Refusal why) const {
    refused_[static_cast<size_t>(why) - 1].fetch_add(1, std::memory_order_relaxed);
  }

  const Options options_;
  DataSource source_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
  mutable std::atomic<uint64_t> refused_[kNumRefusals] = {};
};

}  // namespace aggswitch::control
