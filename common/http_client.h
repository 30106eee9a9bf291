// A small blocking HTTP/1.1 client: one request per connection
// ("Connection: close"), JSON bodies, an optional bearer token. aggctl
// speaks to the switch and the collector with it, and agg-intcollector
// pushes its path decisions to the switches with it.
//
//   HttpRequest r{.server = "10.0.0.1:9477", .method = "PUT", .target = "/api/v1/int/decisions",
//                 .body = json, .token = token, .peer = "aggswitch"};
//   ASSIGN_OR_RETURN(HttpReply reply, HttpCall(r));
//
// Errors: an unreachable server, a timeout or a reply that is not HTTP is
// Unavailable, naming `peer` and the server; an HTTP error status is a
// reply like any other (the caller reads reply.status).
//
// Thread safety: HttpCall is reentrant; any thread. It blocks up to
// timeout_ms for the connection and again for each send and receive.
#pragma once

#include <string>

#include "common/status.h"

namespace aggswitch::common {

struct HttpRequest {
  std::string server;  // "host:port" or "[v6 address]:port"
  std::string method = "GET";
  std::string target;  // "/api/v1/..."
  std::string body;    // sent as application/json when not empty, or for POST
  std::string token;   // sent as "Authorization: Bearer <token>" when not empty
  int timeout_ms = 5000;
  std::string peer = "the server";  // names the server in messages
  std::string user_agent = "aggswitch";  // the version is appended
};

struct HttpReply {
  int status = 0;
  std::string body;  // de-chunked, cut to Content-Length
};

Result<HttpReply> HttpCall(const HttpRequest& request);

}  // namespace aggswitch::common
