#include "cache/external_store.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cache/placement.h"

namespace aggswitch::cache {
namespace {

class DirectoryStore final : public ExternalStore {
 public:
  explicit DirectoryStore(std::string root) : root_(std::move(root)) {}

  common::Result<std::vector<Entry>> List() override {
    const std::string manifest = root_ + "/MANIFEST";
    struct stat st {};
    if (::stat(manifest.c_str(), &st) == 0) {
      std::vector<char> buf(static_cast<size_t>(st.st_size));
      auto read = ReadFile("MANIFEST", buf.data(), buf.size());
      if (!read.ok()) return read.status();
      return ParseManifest(std::string(buf.data(), buf.size()));
    }
    std::vector<Entry> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(root_, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (!it->is_regular_file(ec)) continue;
      out.push_back(Entry{std::filesystem::relative(it->path(), root_).string(),
                          static_cast<uint64_t>(it->file_size(ec))});
    }
    if (ec) return common::Unavailable("cannot list " + root_ + ": " + ec.message());
    std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
    return out;
  }

  common::Result<Object> Read(const std::string& name, void* dest, uint64_t capacity) override {
    if (!ValidName(name)) return common::InvalidArgument("a bad object name: " + name);
    return ReadFile(name, dest, capacity);
  }

  std::string Describe() const override { return "directory " + root_; }

 private:
  common::Result<Object> ReadFile(const std::string& name, void* dest, uint64_t capacity) {
    const std::string path = root_ + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return common::NotFound("no object " + name + " in " + root_);
      return common::Unavailable("cannot open " + path + ": " + std::strerror(errno));
    }
    struct stat st {};
    ::fstat(fd, &st);
    const auto length = static_cast<uint64_t>(st.st_size);
    if (length > capacity) {
      ::close(fd);
      return common::OutOfRange(name + " has " + std::to_string(length) + " bytes, more than " +
                                std::to_string(capacity));
    }
    uint64_t done = 0;
    auto* p = static_cast<char*>(dest);
    while (done < length) {
      const ssize_t n = ::pread(fd, p + done, length - done, static_cast<off_t>(done));
      if (n <= 0) {
        const std::string why = n == 0 ? "it shrank" : std::strerror(errno);
        ::close(fd);
        return common::Unavailable("cannot read " + path + ": " + why);
      }
      done += static_cast<uint64_t>(n);
    }
    ::close(fd);
    Count(length);
    const uint64_t version =
        static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ULL + static_cast<uint64_t>(st.st_mtim.tv_nsec);
    return Object{length, version};
  }

  std::string root_;
};

struct Sink {
  char* dest;
  uint64_t capacity;
  uint64_t size = 0;
  bool overflow = false;
  std::string* grow = nullptr;  // appended to instead of dest, up to capacity
};

size_t SinkWrite(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (s->size + len > s->capacity) {
    s->overflow = true;
    return 0;  // aborts the transfer
  }
  if (s->grow != nullptr) {
    s->grow->append(data, len);
  } else {
    std::memcpy(s->dest + s->size, data, len);
  }
  s->size += len;
  return len;
}

struct Validator {
  std::string etag;
  std::string last_modified;
};

size_t HeaderLine(char* data, size_t size, size_t n, void* user) {
  auto* v = static_cast<Validator*>(user);
  std::string line(data, size * n);
  auto take = [&line](const char* name, std::string& out) {
    const size_t len = std::strlen(name);
    if (line.size() > len && strncasecmp(line.c_str(), name, len) == 0) {
      out = line.substr(len);
      while (!out.empty() && (out.back() == '\r' || out.back() == '\n' || out.back() == ' ')) out.pop_back();
      while (!out.empty() && out.front() == ' ') out.erase(out.begin());
    }
  };
  take("etag:", v->etag);
  take("last-modified:", v->last_modified);
  return size * n;
}

class HttpStore final : public ExternalStore {
 public:
  explicit HttpStore(std::string prefix) : prefix_(std::move(prefix)) {}

  common::Result<std::vector<Entry>> List() override {
    std::string text;
    ASSIGN_OR_RETURN(Object o, Fetch("MANIFEST", nullptr, kMaxManifest, &text));
    (void)o;
    return ParseManifest(text);
  }

  common::Result<Object> Read(const std::string& name, void* dest, uint64_t capacity) override {
    if (!ValidName(name)) return common::InvalidArgument("a bad object name: " + name);
    return Fetch(name, dest, capacity);
  }

  std::string Describe() const override { return "HTTP store " + prefix_; }

 private:
  // The MANIFEST of a million items is about 30 MB; a larger one is refused.
  static constexpr uint64_t kMaxManifest = 256ull << 20;

  // Into `dest` (capacity bytes), or, with `grow`, into that string.
  common::Result<Object> Fetch(const std::string& name, void* dest, uint64_t capacity,
                               std::string* grow = nullptr) {
    CURL* curl = curl_easy_init();
    if (curl == nullptr) return common::Internal("curl_easy_init failed");
    const std::string url = prefix_ + "/" + name;
    Sink sink{static_cast<char*>(dest), capacity, 0, false, grow};
    Validator validator;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, SinkWrite);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, HeaderLine);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &validator);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
    // A stalled transfer (under 1 KB/s for 10 s) is an error, not a hang.
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 10L);
    const CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    if (sink.overflow) {
      return common::OutOfRange(name + " is larger than " + std::to_string(capacity) + " bytes");
    }
    if (rc != CURLE_OK) return common::Unavailable(url + ": " + curl_easy_strerror(rc));
    if (status == 404) return common::NotFound("no object " + name + " at " + prefix_);
    if (status != 200) return common::Unavailable(url + ": HTTP " + std::to_string(status));
    Count(sink.size);
    const std::string& tag = !validator.etag.empty() ? validator.etag : validator.last_modified;
    const char* bytes = grow != nullptr ? grow->data() : sink.dest;
    const uint64_t version = !tag.empty() ? ItemHash(tag) : ItemHash(std::string_view(bytes, sink.size));
    return Object{sink.size, version};
  }

  std::string prefix_;
};

}  // namespace

bool ExternalStore::ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength || name.front() == '/' ||
      name.find('\0') != std::string::npos) {
    return false;
  }
  std::stringstream ss(name);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part == ".." || part == "." || part.empty()) return false;
  }
  return name.back() != '/';
}

std::string ExternalStore::FormatManifest(const std::vector<Entry>& entries) {
  std::string out;
  for (const Entry& e : entries) out += e.name + " " + std::to_string(e.length) + "\n";
  return out;
}

common::Result<std::vector<ExternalStore::Entry>> ExternalStore::ParseManifest(
    const std::string& text) {
  std::vector<Entry> out;
  std::stringstream ss(text);
  std::string line;
  for (int n = 1; std::getline(ss, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::stringstream fields(line);
    std::string name, bytes, extra;
    if (!(fields >> name)) continue;
    uint64_t length = 0;
    const bool has_bytes = static_cast<bool>(fields >> bytes);
    const auto [ptr, ec] = std::from_chars(bytes.data(), bytes.data() + bytes.size(), length);
    if (!has_bytes || ec != std::errc() || ptr != bytes.data() + bytes.size() || (fields >> extra)) {
      return common::InvalidArgument("MANIFEST line " + std::to_string(n) +
                                     ": expected \"<name> <bytes>\", got \"" + line + "\"");
    }
    if (!ValidName(name)) {
      return common::InvalidArgument("MANIFEST line " + std::to_string(n) + ": a bad object name \"" +
                                     name + "\" (a relative path without . or ..)");
    }
    out.push_back(Entry{name, length});
  }
  return out;
}

common::Result<std::unique_ptr<ExternalStore>> ExternalStore::Open(const std::string& url) {
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    std::string prefix = url;
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    return std::unique_ptr<ExternalStore>(new HttpStore(prefix));
  }
  std::string root = url.rfind("file:", 0) == 0 ? url.substr(5) : url;
  if (root.empty() || root.front() != '/') {
    return common::InvalidArgument("store " + url + ": expected an absolute path or an http(s):// URL");
  }
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return common::NotFound("store " + root + " is not a directory");
  }
  return std::unique_ptr<ExternalStore>(new DirectoryStore(root));
}

}  // namespace aggswitch::cache
