#include "common/http_guard.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/net_addr.h"

namespace aggswitch::common {
namespace {

constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxTokenChars = 512;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The host part of a Host header: "name", "name:port", "[v6]" or "[v6]:port".
std::string_view HostPart(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    return close == std::string_view::npos ? std::string_view() : host.substr(0, close + 1);
  }
  return host.substr(0, host.find(':'));
}

bool IsIpLiteral(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    // An IPv6 literal: hex digits, colons, dots (an embedded IPv4 address).
    for (const char c : host.substr(1, host.size() - 2)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
    }
    return true;
  }
  return common::Ipv4Addr::Parse(host).has_value();
}

bool HostAllowed(std::string_view header, const std::vector<std::string>& allowed) {
  const std::string_view host = HostPart(Trim(header));
  if (host.empty()) return false;
  if (IsIpLiteral(host) || EqualsIgnoreCase(host, "localhost")) return true;
  for (const std::string& name : allowed) {
    if (EqualsIgnoreCase(host, name)) return true;
  }
  return false;
}

bool IsJson(std::string_view content_type) {
  const std::string_view type = Trim(content_type.substr(0, content_type.find(';')));
  return EqualsIgnoreCase(type, "application/json");
}

// Compares in time that depends on the lengths only, not on where they differ.
bool SameToken(std::string_view given, std::string_view token) {
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  }
  return diff == 0;
}

Refusal CheckToken(std::string_view authorization, const Access& access) {
  const std::string_view value = Trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !EqualsIgnoreCase(value.substr(0, kScheme.size()), kScheme)) {
    return Refusal::kNoToken;
  }
  return SameToken(Trim(value.substr(kScheme.size())), access.token) ? Refusal::kNone
                                                                     : Refusal::kBadToken;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

bool IsWrite(std::string_view method) { return method != "GET" && method != "HEAD"; }

Refusal CheckAccess(const RequestHeaders& request, const Access& access) {
  if (!HostAllowed(request.host, access.allowed_hosts)) return Refusal::kHost;
  if (!IsWrite(request.method)) {
    return access.protect_reads ? CheckToken(request.authorization, access) : Refusal::kNone;
  }
  if (!request.origin.empty()) return Refusal::kOrigin;
  const bool has_body = request.method == "POST" || request.method == "PUT" || request.method == "PATCH";
  if (has_body && !IsJson(request.content_type)) return Refusal::kContentType;
  if (access.token.empty()) return Refusal::kReadOnly;
  return CheckToken(request.authorization, access);
}

HttpResponse RefusalResponse(Refusal why) {
  const RefusalText& text = TextOf(why);
  HttpResponse r{text.status, kJsonContentType, ErrorJson(text.message)};
  if (text.status == 401) r.authenticate = "Bearer realm=\"aggswitch\"";
  return r;
}

common::Result<std::string> LoadOrCreateToken(const std::string& path) {
  const std::string where = "http.token_file " + path + ": ";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    unsigned char random[32];
    if (getrandom(random, sizeof(random), 0) != static_cast<ssize_t>(sizeof(random))) {
      return common::Unavailable(where + "cannot draw a random token: " + std::strerror(errno));
    }
    const std::string token = Hex(random, sizeof(random));
    // Written whole under another name, then linked into place: a reader
    // never sees half a token, and of two switches that create the same
    // file at once one wins and both use its token.
    const std::string temp = path + ".new." + std::to_string(getpid());
    const int out = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) return common::Unavailable(where + "cannot create: " + std::strerror(errno));
    const std::string line = token + "\n";
    const bool written = write(out, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    close(out);
    const int linked = written ? link(temp.c_str(), path.c_str()) : -1;
    const int link_error = errno;
    unlink(temp.c_str());
    if (!written) return common::Unavailable(where + "cannot write the new token");
    if (linked == 0) return token;
    if (link_error != EEXIST) {
      return common::Unavailable(where + "cannot create: " + std::strerror(link_error));
    }
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);  // another one's, just made
  }
  if (fd < 0) return common::Unavailable(where + "cannot open: " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return common::InvalidArgument(where + "is not a regular file");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    close(fd);
    return common::InvalidArgument(where + "others may read it (mode " +
                                   std::to_string((st.st_mode >> 6) & 7) +
                                   std::to_string((st.st_mode >> 3) & 7) +
                                   std::to_string(st.st_mode & 7) + "); chmod 600 it");
  }
  char buf[kMaxTokenChars + 64];
  const ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n < 0) return common::Unavailable(where + "cannot read: " + std::strerror(errno));
  const std::string_view token = Trim(std::string_view(buf, static_cast<size_t>(n)));
  if (static_cast<size_t>(n) == sizeof(buf) || token.size() > kMaxTokenChars) {
    return common::InvalidArgument(where + "expected a token of at most " +
                                   std::to_string(kMaxTokenChars) + " characters");
  }
  if (token.size() < kMinTokenChars) {
    return common::InvalidArgument(where + "expected a token of at least " +
                                   std::to_string(kMinTokenChars) + " characters, got " +
                                   std::to_string(token.size()));
  }
  for (const char c : token) {
    if (!std::isgraph(static_cast<unsigned char>(c))) {
      return common::InvalidArgument(where + "expected one line of printable characters without "
                                     "spaces");
    }
  }
  return std::string(token);
}

}  // namespace aggswitch::common
