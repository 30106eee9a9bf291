// Who may use an HTTP API: the checks every request passes before its
// handler (the switch's router, control/api.h; a daemon's own) sees it, and
// the API token.
//
// The API changes what the switch does for every tenant (jobs, a job's TAN,
// who is a straggler), so a request that changes something, any method but
// GET and HEAD, must
//   - name this switch in its Host header: an IP literal, "localhost" or one
//     of http.allowed_hosts. A web page that rebinds its own DNS name to the
//     switch's address still sends its own name, so DNS rebinding fails here;
//   - carry no Origin header: browsers send one with every cross-origin (and
//     same-origin) POST and DELETE, aggctl and curl never do;
//   - send its body as application/json: a page cannot send that across
//     origins without a CORS preflight, which this server never approves;
//   - carry "Authorization: Bearer <token>" with the token of http.token_file.
//     Without a token file the API is read-only.
// Reads pass with a good Host; with http.protect_reads they need the token
// too. Every refusal is counted by its reason (kRefusalText, the metric
// aggswitch_http_requests_refused_total{reason}).
//
//   const Access access{.token = *LoadOrCreateToken(path), .allowed_hosts = {...}};
//   Refusal why = CheckAccess(request_headers, access);
//   if (why != Refusal::kNone) return RefusalResponse(why);
//
// Thread safety: CheckAccess and RefusalResponse are pure [any];
// LoadOrCreateToken reads and writes a file [control].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/http_refusals.h"
#include "common/http_response.h"

namespace aggswitch::common {

// What CheckAccess compares a request with (http: in the config).
struct Access {
  std::string token;          // empty: no token; changes are refused
  bool protect_reads = false;  // reads need the token too
  std::vector<std::string> allowed_hosts = {};
};

// The parts of a request CheckAccess looks at; a header that is absent is
// empty ("" and absent are the same to every rule).
struct RequestHeaders {
  std::string_view method;
  std::string_view host;
  std::string_view origin;
  std::string_view content_type;
  std::string_view authorization;
};

// Whether `method` changes something: anything but GET and HEAD. [any]
bool IsWrite(std::string_view method);

// The first rule `request` breaks, in the order of the header comment, or
// Refusal::kNone. [any]
Refusal CheckAccess(const RequestHeaders& request, const Access& access);

// The answer to a refused request: its status, {"error": message}, and for a
// 401 the WWW-Authenticate challenge. [any]
HttpResponse RefusalResponse(Refusal why);

// The token in `path`, one line of 16..512 printable characters (surrounding
// white space is dropped). When the file does not exist it is created,
// readable and writable by its owner only, with 32 random bytes in hex.
// An error names the path and says what is wrong: unreadable, a token too
// short or with spaces, or a file others may read (it must be 0600 or
// stricter). [control]
common::Result<std::string> LoadOrCreateToken(const std::string& path);

}  // namespace aggswitch::common
