#include "client/internal/transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace aggswitch::client::internal {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

common::Result<Waker> Waker::Create() {
  Waker w;
  w.fd_ = UniqueFd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (w.fd_.get() < 0) return common::Unavailable(std::string("eventfd: ") + std::strerror(errno));
  return w;
}

common::Status Waker::Wait(int fd, short events, Clock::time_point deadline) const {
  pollfd fds[2] = {{fd, events, 0}, {fd_.get(), POLLIN, 0}};
  const auto left = std::max(deadline - Clock::now(), Clock::duration::zero());
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int r = ppoll(fds, 2, deadline == Clock::time_point::max() ? nullptr : &ts, nullptr);
  if (r < 0 && errno != EINTR) return common::Unavailable(std::string("ppoll: ") + std::strerror(errno));
  if (r > 0 && (fds[1].revents & POLLIN) != 0) {
    uint64_t count;
    const ssize_t ignored = read(fd_.get(), &count, sizeof(count));
    (void)ignored;
  }
  return common::Status::Ok();
}

void Waker::Wake() const {
  const uint64_t one = 1;
  const ssize_t ignored = write(fd_.get(), &one, sizeof(one));
  (void)ignored;
}

}  // namespace aggswitch::client::internal
