#include "common/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "common/log.h"

namespace aggswitch::common {
namespace {

// The first message civetweb logs while mg_start2() runs on this thread; it
// explains a failed start ("cannot bind to 127.0.0.1:9477: 98 (Address already
// in use)") better than mg_start2()'s own error text.
thread_local std::string* t_start_message = nullptr;

int LogMessage(const mg_connection* /*conn*/, const char* message) {
  if (t_start_message != nullptr) {
    if (t_start_message->empty()) *t_start_message = message;
  } else {
    AGG_LOG(kWarning, "http: %s", message);
  }
  return 1;  // handled: civetweb prints nothing itself
}

// Turns "host:port" or "[v6addr]:port" into civetweb's listening_ports form
// with a numeric address. civetweb itself accepts lists ("80,443s"), suffixes
// ('s' for TLS, 'r' for redirect) and silently misreads some bad addresses;
// this server takes exactly one plain address, resolved here.
Result<std::string> ListeningPortsOption(const std::string& listen) {
  const Status bad = InvalidArgument("cannot listen on '" + listen +
                                                     "': expected host:port, e.g. 127.0.0.1:9477");
  std::string host, port;
  if (!listen.empty() && listen[0] == '[') {
    const size_t close = listen.find(']');
    if (close == std::string::npos || listen.compare(close + 1, 1, ":") != 0) return bad;
    host = listen.substr(1, close - 1);
    port = listen.substr(close + 2);
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return bad;
    host = listen.substr(0, colon);
    port = listen.substr(colon + 1);
  }
  bool digits = !host.empty() && !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (!digits || std::stoul(port) > 65535) return bad;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addrs = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &addrs);
  if (rc != 0) {
    return InvalidArgument("cannot listen on '" + listen + "': " + gai_strerror(rc));
  }
  char numeric[INET6_ADDRSTRLEN] = "";
  const int family = addrs->ai_family;
  getnameinfo(addrs->ai_addr, addrs->ai_addrlen, numeric, sizeof(numeric), nullptr, 0,
              NI_NUMERICHOST);
  freeaddrinfo(addrs);
  if (family == AF_INET6 && mg_check_feature(MG_FEATURES_IPV6) == 0) {
    return InvalidArgument("cannot listen on '" + listen +
                                   "': this libcivetweb was built without IPv6");
  }
  std::string option;
  if (family == AF_INET6) option += '[';
  option += numeric;
  if (family == AF_INET6) option += ']';
  option += ':';
  option += port;
  return option;
}

std::string_view Header(const mg_connection* conn, const char* name) {
  const char* value = mg_get_header(conn, name);
  return value != nullptr ? value : "";
}

void SendResponse(mg_connection* conn, const HttpResponse& r, bool head) {
  mg_response_header_start(conn, r.status);
  // A 204 has neither a body nor the headers that describe one.
  if (r.status != 204) {
    mg_response_header_add(conn, "Content-Type", r.content_type.c_str(), -1);
    const std::string length = std::to_string(r.body.size());
    mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  }
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  if (r.status == 405) mg_response_header_add(conn, "Allow", r.allow.c_str(), -1);
  if (!r.authenticate.empty()) {
    mg_response_header_add(conn, "WWW-Authenticate", r.authenticate.c_str(), -1);
  }
  mg_response_header_send(conn);
  if (!head && r.status != 204) mg_write(conn, r.body.data(), r.body.size());
}

// Reads the request body into `body`. False when it is larger than
// kMaxRequestBody or the connection fails.
bool ReadBody(mg_connection* conn, const mg_request_info* ri, std::string& body) {
  if (ri->content_length > static_cast<long long>(kMaxRequestBody)) return false;
  char buf[4096];
  while (true) {
    const int n = mg_read(conn, buf, sizeof(buf));
    if (n < 0) return false;
    if (n == 0) return true;
    body.append(buf, static_cast<size_t>(n));
    if (body.size() > kMaxRequestBody) return false;
  }
}

}  // namespace

HttpCounts HttpServer::Counts() const {
  HttpCounts counts;
  for (size_t r = 0; r < kNumRefusals; ++r) counts.refused[r] = refused_[r].load(std::memory_order_relaxed);
  counts.threads = options_.threads;
  return counts;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options, Handler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer(options));
  server->handler_ = std::move(handler);
  return Launch(std::move(server));
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                      const std::function<Handler(const HttpServer&)>& make) {
  std::unique_ptr<HttpServer> server(new HttpServer(options));
  server->handler_ = make(*server);
  return Launch(std::move(server));
}

Result<std::unique_ptr<HttpServer>> HttpServer::Launch(std::unique_ptr<HttpServer> server) {
  const Options& options = server->options_;
  const std::string& listen = options.listen;
  ASSIGN_OR_RETURN(const std::string listening_ports, ListeningPortsOption(listen));
  const std::string threads = std::to_string(options.threads);
  const std::string timeout = std::to_string(options.request_timeout_ms);

  // Reference-counted by civetweb; the destructor's mg_exit_library() balances it.
  mg_init_library(0);
  mg_callbacks callbacks{};
  callbacks.log_message = LogMessage;
  // clang-format off
  const char* civetweb_options[] = {
      "listening_ports", listening_ports.c_str(),
      "num_threads", threads.c_str(),
      "enable_directory_listing", "no",
      "request_timeout_ms", timeout.c_str(),
      "enable_keep_alive", "no",
      nullptr,
  };
  // clang-format on
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = civetweb_options;
  char error_text[256] = "";
  unsigned error_code = 0;
  mg_error_data error{};
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);

  std::string start_message;
  t_start_message = &start_message;
  server->ctx_ = mg_start2(&init, &error);
  t_start_message = nullptr;
  if (server->ctx_ == nullptr) {
    mg_exit_library();
    const std::string reason = !start_message.empty()  ? start_message
                               : error_text[0] != '\0' ? error_text
                                                       : "civetweb failed to start";
    return Unavailable("cannot listen on " + listen + ": " + reason);
  }
  if (!start_message.empty()) AGG_LOG(kWarning, "http: %s", start_message.c_str());
  // One handler for every URI; the Handler does the routing.
  mg_set_request_handler(server->ctx_, "/", &HttpServer::OnRequest, server.get());

  mg_server_port ports[1] = {};
  if (mg_get_server_ports(server->ctx_, 1, ports) == 1) {
    server->port_ = static_cast<uint16_t>(ports[0].port);
  }
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  // civetweb's master thread sees the stop only when its poll of the
  // listening socket returns: at a connection, or after its 2-second
  // quantum. A connection made (and closed at once) while mg_stop waits
  // brings the stop within milliseconds.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    for (int i = 0; i < 100 && !stopped.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!stopped.load()) WakeListener();
    }
  });
  mg_stop(ctx_);
  stopped.store(true);
  waker.join();
  mg_exit_library();
}

void HttpServer::WakeListener() const {
  std::string host = options_.listen.substr(0, options_.listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "*") host = "127.0.0.1";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port_);
  if (port_ == 0 || inet_pton(AF_INET, host.c_str(), &to.sin_addr) != 1) return;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  close(fd);
}

bool HttpServer::Admit(mg_connection* conn, std::string_view method) const {
  const RequestHeaders headers{method, Header(conn, "Host"), Header(conn, "Origin"),
                               Header(conn, "Content-Type"), Header(conn, "Authorization")};
  const Refusal why = CheckAccess(headers, options_.access);
  if (why == Refusal::kNone) return true;
  CountRefusal(why);
  SendResponse(conn, RefusalResponse(why), method == "HEAD");
  return false;
}

int HttpServer::OnRequest(mg_connection* conn, void* cbdata) {
  const HttpServer* self = static_cast<const HttpServer*>(cbdata);
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string_view method = ri->request_method != nullptr ? ri->request_method : "";
  const std::string_view path = ri->local_uri != nullptr ? ri->local_uri : "";
  const std::string_view query = ri->query_string != nullptr ? ri->query_string : "";
  if (!self->Admit(conn, method)) return 1;  // answered
  std::string body;
  if (method == "POST" || method == "PUT" || method == "PATCH") {
    if (!ReadBody(conn, ri, body)) {
      self->CountRefusal(Refusal::kBodyTooLarge);
      const HttpResponse too_large = RefusalResponse(Refusal::kBodyTooLarge);
      SendResponse(conn, too_large, false);
      return too_large.status;
    }
  }
  const HttpResponse response = self->handler_(method, path, query, body);
  SendResponse(conn, response, method == "HEAD");
  return response.status;
}

}  // namespace aggswitch::common
