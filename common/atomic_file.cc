#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace aggswitch::common {
namespace {

std::string Why(const std::string& what) { return what + ": " + std::strerror(errno); }

// The directory part of `path` ("." when it has none).
std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status WriteFileAtomically(const std::string& path, const std::string& content, mode_t mode) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable(Why("cannot create " + tmp));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Status failed = Unavailable(Why("cannot write " + tmp));
      ::close(fd);
      ::unlink(tmp.c_str());
      return failed;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const Status failed = Unavailable(Why("cannot flush " + tmp));
    ::close(fd);
    ::unlink(tmp.c_str());
    return failed;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status failed = Unavailable(Why("cannot rename " + tmp + " to " + path));
    ::unlink(tmp.c_str());
    return failed;
  }
  // The rename itself is durable once the directory is flushed.
  const int dir = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
}

}  // namespace aggswitch::common
