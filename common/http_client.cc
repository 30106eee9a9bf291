#include "common/http_client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "common/version.h"

namespace aggswitch::common {
namespace {

// "Connection refused" -> "connection refused", to fit after a colon.
std::string LowerFirst(std::string text) {
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

std::string ErrnoText(int err) {
  return LowerFirst(std::strerror(err));
}

// Splits "host:port" or "[v6addr]:port".
Result<std::pair<std::string, std::string>> SplitHostPort(const std::string& server) {
  std::string host, port;
  if (!server.empty() && server[0] == '[') {
    const size_t close = server.find(']');
    if (close == std::string::npos || close + 1 >= server.size() || server[close + 1] != ':') {
      return InvalidArgument("bad server address '" + server + "': expected [addr]:port");
    }
    host = server.substr(1, close - 1);
    port = server.substr(close + 2);
  } else {
    const size_t colon = server.rfind(':');
    if (colon == std::string::npos) {
      return InvalidArgument("bad server address '" + server + "': expected host:port");
    }
    host = server.substr(0, colon);
    port = server.substr(colon + 1);
  }
  if (host.empty() || port.empty()) {
    return InvalidArgument("bad server address '" + server + "': expected host:port");
  }
  return std::make_pair(host, port);
}

// Connects within `timeout_ms`; returns the socket or the reason it failed.
Result<int> Connect(const std::string& peer, const std::string& server, int timeout_ms) {
  ASSIGN_OR_RETURN(auto host_port, SplitHostPort(server));
  const std::string prefix = "cannot reach " + peer + " at " + server + ": ";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  const int gai = getaddrinfo(host_port.first.c_str(), host_port.second.c_str(), &hints, &addrs);
  if (gai != 0) return Unavailable(prefix + LowerFirst(gai_strerror(gai)));

  std::string last_error = "no address";
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int n = poll(&p, 1, timeout_ms);
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (n < 0) {
          err = errno;
        } else {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      freeaddrinfo(addrs);
      return fd;
    }
    last_error = ErrnoText(err);
    close(fd);
  }
  freeaddrinfo(addrs);
  return Unavailable(prefix + last_error);
}

// Decodes a chunked transfer-encoded body; nullopt when it is malformed.
std::optional<std::string> Dechunk(const std::string& in) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t eol = in.find("\r\n", pos);
    if (eol == std::string::npos) return std::nullopt;
    size_t size = 0;
    try {
      size = std::stoul(in.substr(pos, eol - pos), nullptr, 16);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    pos = eol + 2;
    if (size == 0) return out;
    if (pos + size > in.size()) return std::nullopt;
    out.append(in, pos, size);
    pos += size + 2;  // chunk data and its CRLF
  }
}

}  // namespace

Result<HttpReply> HttpCall(const HttpRequest& r) {
  const std::string& server = r.server;
  const std::string& method = r.method;
  const std::string& body = r.body;
  const int timeout_ms = r.timeout_ms;
  ASSIGN_OR_RETURN(const int fd, Connect(r.peer, server, timeout_ms));
  const std::string prefix = "cannot reach " + r.peer + " at " + server + ": ";
  std::string request = method + " " + r.target + " HTTP/1.1\r\nHost: " + server +
                        "\r\nUser-Agent: " + r.user_agent + "/" + Version() +
                        "\r\nAccept: application/json\r\nConnection: close\r\n";
  if (!r.token.empty()) request += "Authorization: Bearer " + r.token + "\r\n";
  if (!body.empty() || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return Unavailable(prefix + ErrnoText(err));
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno;
      close(fd);
      return Unavailable(prefix + ErrnoText(err));
    }
    if (n == 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);

  const std::string bad = "bad HTTP response from " + r.peer + " at " + server;
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || header_end == std::string::npos) {
    return Unavailable(raw.empty() ? prefix + "connection closed without a response" : bad);
  }
  HttpReply reply;
  const size_t space = raw.find(' ');
  if (space == std::string::npos || space > header_end ||
      std::sscanf(raw.c_str() + space + 1, "%3d", &reply.status) != 1) {
    return Unavailable(bad);
  }
  std::string headers = raw.substr(0, header_end);
  for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  reply.body = raw.substr(header_end + 4);
  if (headers.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
    std::optional<std::string> body = Dechunk(reply.body);
    if (!body) return Unavailable(bad + ": broken chunked encoding");
    reply.body = std::move(*body);
  } else if (const size_t cl = headers.find("\r\ncontent-length:"); cl != std::string::npos) {
    const size_t length = std::strtoull(headers.c_str() + cl + 17, nullptr, 10);
    if (reply.body.size() < length) return Unavailable(bad + ": truncated body");
    reply.body.resize(length);
  }
  return reply;
}

}  // namespace aggswitch::common
