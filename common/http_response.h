// What an HTTP handler answers (http_server.h): a status, a typed body and
// the headers some statuses need. Its own header so that the switch's
// router (control/api.h) builds answers without the server.
//
// Thread safety: a value type.
#pragma once

#include <string>
#include <string_view>

namespace aggswitch::common {

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::string allow = "GET";      // the Allow header of a 405 response
  std::string authenticate = "";  // the WWW-Authenticate header of a 401 response
};

inline constexpr char kJsonContentType[] = "application/json";

// {"error": message} and a newline, the body of every error answer. [any]
std::string ErrorJson(std::string_view message);

}  // namespace aggswitch::common
