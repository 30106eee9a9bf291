// Tests only: a flood of aggregation datagrams for distinct unknown jobs,
// fast (sendmmsg batches) and without a job of its own, the way a
// misbehaving host would send it. The security system test runs it next to
// a real job and checks that the job does not notice.
//
//   udp_flood --to 10.0.50.253:47000 --count 1000000 [--first-job 100000]
//             [--task-info] [--rate PPS] [--bind ADDR]
//
// Datagram i is a 52-byte CONTRIBUTION header of job first-job + i, seq i,
// one int32 element; with --task-info it asks to register the job in-band.
// Prints one JSON line: {"sent", "seconds", "rate"}. Exit 0 when every
// datagram went out, 1 on a socket error, 2 on a bad command line.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/wire.h"

namespace {

bool ParseAddress(const std::string& text, sockaddr_in* out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return inet_pton(AF_INET, text.substr(0, colon).c_str(), &out->sin_addr) == 1;
}

int Usage() {
  std::fprintf(stderr,
               "usage: udp_flood --to ADDR:PORT --count N [--first-job J] [--task-info] "
               "[--rate PPS] [--bind ADDR]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace aggswitch::aggregator;  // NOLINT: a test tool
  sockaddr_in to{};
  sockaddr_in from{};
  from.sin_family = AF_INET;
  uint64_t count = 0;
  uint32_t first_job = 100000;
  bool task_info = false;
  double rate = 0;
  bool have_to = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--task-info") {
      task_info = true;
      continue;
    }
    if (value == nullptr) return Usage();
    ++i;
    if (arg == "--to") {
      have_to = ParseAddress(value, &to);
    } else if (arg == "--count") {
      count = std::strtoull(value, nullptr, 10);
    } else if (arg == "--first-job") {
      first_job = static_cast<uint32_t>(std::strtoul(value, nullptr, 10));
    } else if (arg == "--rate") {
      rate = std::strtod(value, nullptr);
    } else if (arg == "--bind") {
      if (inet_pton(AF_INET, value, &from.sin_addr) != 1) return Usage();
    } else {
      return Usage();
    }
  }
  if (!have_to || count == 0) return Usage();

  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0 || bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0) {
    std::perror("udp_flood: socket");
    return 1;
  }
  const int buffer = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));

  constexpr unsigned kBatch = 64;
  constexpr uint32_t kLen = sizeof(AggHeader) + 4;
  std::vector<uint8_t> bufs(kBatch * kLen);
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  const auto start = std::chrono::steady_clock::now();
  uint64_t sent = 0;
  while (sent < count) {
    const unsigned n = static_cast<unsigned>(std::min<uint64_t>(kBatch, count - sent));
    for (unsigned b = 0; b < n; ++b) {
      AggFields f;
      f.opcode = Opcode::kContribution;
      f.flags = task_info ? flags::kTaskInfo : 0;
      f.job_id = first_job + static_cast<uint32_t>(sent + b);
      f.seq = static_cast<uint32_t>(sent + b);
      f.job_key = 0xf100d;
      f.expected = task_info ? 4 : 0;
      f.node_count = task_info ? 1 : 0;
      f.elem_count = 1;
      const int32_t value = 1;
      uint8_t* buf = bufs.data() + b * kLen;
      BuildAggregation(f, nullptr, 0, reinterpret_cast<const uint8_t*>(&value), 4, buf, kLen);
      iovs[b] = {buf, kLen};
      msgs[b] = {};
      msgs[b].msg_hdr.msg_name = &to;
      msgs[b].msg_hdr.msg_namelen = sizeof(to);
      msgs[b].msg_hdr.msg_iov = &iovs[b];
      msgs[b].msg_hdr.msg_iovlen = 1;
    }
    const int r = sendmmsg(fd, msgs, n, 0);
    if (r < 0) {
      if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) continue;
      std::perror("udp_flood: sendmmsg");
      return 1;
    }
    sent += static_cast<uint64_t>(r);
    if (rate > 0) {
      const auto due = start + std::chrono::duration<double>(static_cast<double>(sent) / rate);
      std::this_thread::sleep_until(due);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"sent\": %llu, \"seconds\": %.3f, \"rate\": %.0f}\n",
              static_cast<unsigned long long>(sent), seconds, static_cast<double>(sent) / seconds);
  close(fd);
  return 0;
}
