#include "common/http_response.h"

#include <nlohmann/json.hpp>

namespace aggswitch::common {

std::string ErrorJson(std::string_view message) {
  // Invalid UTF-8 in a message (a value echoed from a request) is replaced,
  // never an exception.
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace aggswitch::common
