// The embedded HTTP server of /metrics and /api/v1: an RAII wrapper over
// civetweb (Debian's libcivetweb, the server prometheus-cpp also embeds).
//
// Start() binds the listen address and starts civetweb's own threads (one
// listener plus two request workers); the destructor stops them and waits for
// requests in flight. Routing and bodies live in api.h (HandleRequest); this
// file only adapts civetweb to it, reading a request body (POST) of at most
// kMaxRequestBody bytes.
//
// civetweb's threads are not EAL lcores. They read the dataplane only through
// its [any] accessors (CollectSnapshot, CollectMacEntries, DumpSlots) and never
// touch a worker lcore's state for writing, so a scrape cannot stall
// forwarding; a slot dump asks the workers for a copy and waits at most
// 500 ms for it. The job routes (a job's TAN too), each job's counters and
// the own TAN's counters go through JobControl, which hands them to the
// control thread.
//
//   ASSIGN_OR_RETURN(auto http, HttpServer::Start(config.http.listen, *dataplane, &job_control));
//   AGG_LOG(kInfo, "metrics at http://%s/metrics", http->listen().c_str());
//   ...
//   http.reset();   // before the dataplane is destroyed
//
// Thread safety: Start() and the destructor on the control thread; the
// accessors on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "control/api.h"

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
  // Serves `dp`, and the job table through `jobs` when given (else the job
  // routes answer 503); both must outlive the server. /api/v1/slots answers
  // 503 unless `dp` aggregates. `listen` is "host:port"
  // ("127.0.0.1:9477"; port 0 picks a free port, see port()). A bad address
  // or a port in use is an error naming the address. [control]
  static common::Result<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           const dataplane::Dataplane& dp,
                                                           JobControl* jobs = nullptr,
                                                           TreeControl* tree = nullptr);
  // Serves whatever `source` returns; its functions are called from civetweb's
  // threads, concurrently. For tests and tools that have no Dataplane. [control]
  static common::Result<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           DataSource source);

  // Stops accepting, waits for requests in flight, joins civetweb's threads. [control]
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address as configured. [any]
  const std::string& listen() const { return listen_; }
  // The TCP port actually bound. [any]
  uint16_t port() const { return port_; }

 private:
  HttpServer(std::string listen, DataSource source)
      : listen_(std::move(listen)), source_(std::move(source)) {}

  // civetweb's request handler for every URI; `cbdata` is the HttpServer.
  static int OnRequest(mg_connection* conn, void* cbdata);

  std::string listen_;
  DataSource source_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace aggswitch::control
