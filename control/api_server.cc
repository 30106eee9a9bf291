#include "control/api_server.h"

#include <utility>

namespace aggswitch::control {

common::HttpServer::Options ApiServerOptions(const config::HttpConfig& http, std::string token) {
  common::HttpServer::Options options;
  options.listen = http.listen;
  options.access.token = std::move(token);
  options.access.protect_reads = http.protect_reads;
  options.access.allowed_hosts = http.allowed_hosts;
  options.threads = http.threads;
  options.request_timeout_ms = http.request_timeout_ms;
  return options;
}

common::Result<std::unique_ptr<common::HttpServer>> StartApiServer(const common::HttpServer::Options& options,
                                                                   DataSource source) {
  return common::HttpServer::Start(options, [&source](const common::HttpServer& server) {
    // /metrics and /api/v1/stats show what this server refused.
    if (source.snapshot) {
      source.snapshot = [&server, inner = std::move(source.snapshot)] {
        StatsSnapshot snap = inner();
        snap.http = server.Counts();
        return snap;
      };
    }
    return common::HttpServer::Handler([source = std::move(source)](std::string_view method, std::string_view path,
                                                                    std::string_view query, const std::string& body) {
      return HandleRequest(method, path, query, body, source);
    });
  });
}

}  // namespace aggswitch::control
