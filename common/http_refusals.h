// Why the HTTP server refused a request (http_guard.h): one list, from which
// the enum, the metric labels (aggswitch_http_requests_refused_total) and the
// answers are generated, and the server's counts of them. Its own header so
// that the switch's snapshot types (control/stats_snapshot.h) count refusals
// without the server.
//
// Thread safety: constants; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace aggswitch::common {

// Why a request was refused: enum name, metric label, HTTP status, message.
#define AGG_HTTP_REFUSALS(X)                                                                    \
  X(kHost, "host", 403,                                                                         \
    "the Host header names neither an IP address, localhost nor one of http.allowed_hosts")     \
  X(kOrigin, "origin", 403, "a request from a web page (Origin header) may not change anything") \
  X(kContentType, "content_type", 415, "the body of a request that changes something must be "  \
    "application/json")                                                                         \
  X(kNoToken, "no_token", 401, "this request needs the API token: Authorization: Bearer <token>") \
  X(kBadToken, "bad_token", 401, "the API token is wrong")                                      \
  X(kReadOnly, "read_only", 403,                                                                \
    "the control API of this switch is read-only: its config sets no http.token_file")          \
  X(kBodyTooLarge, "body_too_large", 413, "the request body is unreadable or larger than 64 KiB")

enum class Refusal : uint8_t {
  kNone = 0,
#define AGG_REFUSAL_ENUM(name, label, status, message) name,
  AGG_HTTP_REFUSALS(AGG_REFUSAL_ENUM)
#undef AGG_REFUSAL_ENUM
      kCount
};
// Refusal reasons, kNone excluded: index r - 1.
inline constexpr size_t kNumRefusals = static_cast<size_t>(Refusal::kCount) - 1;

struct RefusalText {
  const char* label;
  int status;
  const char* message;
};
inline constexpr RefusalText kRefusalText[kNumRefusals] = {
#define AGG_REFUSAL_TEXT(name, label, status, message) {label, status, message},
    AGG_HTTP_REFUSALS(AGG_REFUSAL_TEXT)
#undef AGG_REFUSAL_TEXT
};
inline const RefusalText& TextOf(Refusal r) { return kRefusalText[static_cast<size_t>(r) - 1]; }

// What a server refused, by reason, and its request threads (HttpServer::Counts).
struct HttpCounts {
  uint64_t refused[kNumRefusals] = {};  // by Refusal (index r - 1)
  uint32_t threads = 0;                 // request threads
};

}  // namespace aggswitch::common
