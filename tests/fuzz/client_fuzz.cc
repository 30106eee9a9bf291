// client_fuzz: the client library's answer parsing (client/internal/engine.cc:
// what it makes of every datagram it receives while an allreduce runs). A
// real Client, its I/O thread and its UDP socket run one allreduce per input
// against a "switch" that is this harness on 127.0.0.1: the harness answers
// each datagram the client sends with the input's next datagram, patched as
// its control byte says so that mutations reach past the parser, and, once
// the input is used up (or when a control byte asks), with the true answer.
//
// Input: one option byte, then records, each a control byte and a datagram
// (a big-endian 16-bit length, then the bytes).
//   option byte: bits 0-1 the allreduce: 40 int32 summed, 40 float32 summed
//     in fixed point (a scale exchange first), 40 float32 summed in rank
//     order, 40 int32 max; bit 2 the job is announced (task info
//     kControlUnit, a TASK_INFO phase first) instead of known to the switch.
//     Chunks hold 8 elements, so 5 chunks; the job has one rank (world 1),
//     so the true result of a chunk is what the rank sent.
//   control byte: bit 0 repairs magic and version; bit 1 sets job id 7 and
//     the incarnation of the datagram it answers (the client's); bit 2 sets the sequence number of the datagram it answers;
//     bit 3 sets node id 0 (the rank); bits 4-5 set the opcode: unchanged,
//     RESULT, NACK, NOTICE; bit 6 sends it from another UDP port than the
//     switch's (a stranger); bit 7 sends the true answer right after it.
//
// Invariants, each a finding when broken:
//   * the allreduce ends (with a result or an error) within its deadline and
//     a second, whatever it receives;
//   * its error, if any, is one of those client.h lists for a running
//     allreduce (kFailedPrecondition, kResourceExhausted, kUnavailable; and
//     kOutOfRange or kIncomplete after a forged result), never
//     kInvalidArgument or kInternal;
//   * a result it returns is the true one unless the switch's own address
//     sent a datagram that parses as a RESULT of the job and its run: nothing from a
//     stranger, nothing unparseable and no other opcode changes the data.
// ASan and UBSan watch the rest (tests/fuzz/README.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <vector>

#include "aggregator/wire.h"
#include "client/client.h"
#include "common/log.h"
#include "tests/fuzz/fuzz_check.h"

namespace aggswitch::client {
namespace {

using aggregator::AggFields;
using aggregator::AggHeader;
using aggregator::AggPacket;
using aggregator::Opcode;
using aggregator::WireError;

constexpr uint32_t kJob = 7;
constexpr size_t kElems = 40;
constexpr uint32_t kChunkElems = 8;
constexpr auto kDeadline = std::chrono::milliseconds(120);
constexpr size_t kMaxDatagram = 1472;

// A UDP socket on 127.0.0.1, ephemeral port; made once, for every input.
struct Socket {
  int fd = -1;
  uint16_t port = 0;

  Socket() {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0);
    socklen_t len = sizeof(a);
    FUZZ_CHECK(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  void SendTo(const sockaddr_in& to, const uint8_t* data, size_t len) const {
    // Loopback drops nothing while its buffer has room; a full one only
    // means the client sees less of this input.
    (void)sendto(fd, data, len, 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }
  void Drain() const {
    uint8_t buf[2048];
    while (recv(fd, buf, sizeof(buf), 0) > 0) {
    }
  }
};

void Put16(uint8_t* at, uint16_t v) {
  at[0] = static_cast<uint8_t>(v >> 8);
  at[1] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* at, uint32_t v) {
  Put16(at, static_cast<uint16_t>(v >> 16));
  Put16(at + 2, static_cast<uint16_t>(v));
}

// The switch's answer to a datagram of a one-rank job: a RESULT that is the
// contribution itself, an announcement echoed; nothing for an ACK.
size_t TrueAnswer(const AggPacket& in, uint8_t* out) {
  AggFields f = aggregator::ReadAggFields(*in.header);
  if (in.opcode == Opcode::kTaskInfo) {
    std::memcpy(out, in.header, sizeof(AggHeader));
    return sizeof(AggHeader);
  }
  if (in.opcode != Opcode::kContribution) return 0;
  f.opcode = Opcode::kResult;
  f.job_key = 0;
  f.flags &= aggregator::flags::kOrdered;
  return aggregator::BuildAggregation(f, nullptr, 0, in.payload, in.payload_len, out,
                                      kMaxDatagram);
}

class Harness {
 public:
  Harness() { common::SetLogLevel(common::LogLevel::kError); }

  void Run(const uint8_t* data, size_t size) {
    fuzz::FuzzReader in(data, size);
    const uint8_t option = in.Byte();
    switch_.Drain();
    stranger_.Drain();

    ClientOptions o;
    o.switches = {{*common::Ipv4Addr::Parse("127.0.0.1"), switch_.port}};
    o.job_id = kJob;
    o.job_key = 0x5eed;
    o.rank = 0;
    o.world = 1;
    o.task_info = (option & 4) ? TaskInfoMode::kControlUnit : TaskInfoMode::kNone;
    o.window = 4;
    o.max_chunk_elements = kChunkElems;
    // Short timers: an input that stalls the client costs little.
    o.retransmit_timeout = std::chrono::milliseconds(1);
    o.max_retransmit_timeout = std::chrono::milliseconds(4);
    o.progress_timeout = std::chrono::milliseconds(50);
    o.deadline = kDeadline;
    const int kind = option & 3;
    o.float_mode = kind == 2 ? FloatMode::kFloatOrdered : FloatMode::kFixedPoint;
    auto created = Client::Create(o);
    FUZZ_CHECK(created.ok());
    std::unique_ptr<Client> client = std::move(*created);

    std::array<int32_t, kElems> ints{};
    std::array<float, kElems> floats{};
    for (size_t i = 0; i < kElems; ++i) {
      ints[i] = static_cast<int32_t>(i * 3) - 7;
      floats[i] = (static_cast<float>(i) - 20.0f) * 0.5f;
    }
    const auto want_ints = ints;
    const auto want_floats = floats;
    const bool is_float = kind == 1 || kind == 2;
    Pending pending = is_float ? client->Start(std::span<float>(floats), aggregator::ReduceOp::kSum)
                               : client->Start(std::span<int32_t>(ints),
                                               kind == 3 ? aggregator::ReduceOp::kMax
                                                         : aggregator::ReduceOp::kSum);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(client->local_port());

    forged_result_ = false;
    const auto give_up = std::chrono::steady_clock::now() + kDeadline + std::chrono::seconds(1);
    while (!pending.WaitFor(std::chrono::nanoseconds(0))) {
      FUZZ_CHECK(std::chrono::steady_clock::now() < give_up);
      pollfd p{switch_.fd, POLLIN, 0};
      if (poll(&p, 1, 1) <= 0) continue;
      uint8_t buf[2048];
      const ssize_t n = recv(switch_.fd, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      AggPacket pkt;
      FUZZ_CHECK(aggregator::ParseAggregation(buf, static_cast<uint32_t>(n), &pkt) ==
                 WireError::kOk);  // the client sends nothing malformed
      if (pkt.opcode == Opcode::kAck) continue;
      if (in.empty()) {
        SendTrue(pkt, to);
        continue;
      }
      const uint8_t control = in.Byte();
      Inject(control, in.Record(), pkt, to);
      if (control & 0x80) SendTrue(pkt, to);
    }

    const common::Status status = pending.Wait();
    if (!status.ok()) {
      const common::StatusCode code = status.code();
      // A forged answer may say that the int32 sum saturated, or that
      // the result lacks members.
      FUZZ_CHECK(code == common::StatusCode::kFailedPrecondition ||
                 code == common::StatusCode::kResourceExhausted ||
                 code == common::StatusCode::kUnavailable ||
                 (code == common::StatusCode::kOutOfRange && forged_result_) ||
                 (code == common::StatusCode::kIncomplete && forged_result_));
      return;
    }
    if (forged_result_) return;
    if (is_float) {
      FUZZ_CHECK(std::memcmp(floats.data(), want_floats.data(), sizeof(floats)) == 0);
    } else {
      FUZZ_CHECK(ints == want_ints);
    }
  }

 private:
  void SendTrue(const AggPacket& pkt, const sockaddr_in& to) {
    uint8_t out[kMaxDatagram];
    const size_t n = TrueAnswer(pkt, out);
    if (n > 0) switch_.SendTo(to, out, n);
  }

  void Inject(uint8_t control, std::span<const uint8_t> record, const AggPacket& answering,
              const sockaddr_in& to) {
    uint8_t out[kMaxDatagram];
    const size_t n = std::min(record.size(), kMaxDatagram);
    if (n > 0) std::memcpy(out, record.data(), n);
    if (n >= sizeof(AggHeader)) {
      if (control & 0x01) {
        Put16(out + offsetof(AggHeader, magic), aggregator::kAggMagic);
        out[offsetof(AggHeader, version)] = aggregator::kAggVersion;
      }
      if (control & 0x02) {
        Put32(out + offsetof(AggHeader, job_id), kJob);
        Put32(out + offsetof(AggHeader, incarnation), answering.header->incarnation.host());
      }
      if (control & 0x04) Put32(out + offsetof(AggHeader, seq), answering.header->seq.host());
      if (control & 0x08) Put16(out + offsetof(AggHeader, node_id), 0);
      static constexpr Opcode kOpcodes[] = {Opcode::kResult, Opcode::kNack, Opcode::kNotice};
      if (const int op = (control >> 4) & 3; op != 0) {
        out[offsetof(AggHeader, opcode)] = static_cast<uint8_t>(kOpcodes[op - 1]);
      }
    }
    const bool from_stranger = (control & 0x40) != 0;
    AggPacket pkt;
    if (!from_stranger &&
        aggregator::ParseAggregation(out, static_cast<uint32_t>(n), &pkt) == WireError::kOk &&
        (pkt.opcode == Opcode::kResult || pkt.opcode == Opcode::kExceptionRetransmit) &&
        pkt.header->job_id.host() == kJob &&
        pkt.header->incarnation.host() == answering.header->incarnation.host()) {
      forged_result_ = true;  // from the switch's own address: the client must believe it
    }
    (from_stranger ? stranger_ : switch_).SendTo(to, out, n);
  }

  Socket switch_;
  Socket stranger_;
  bool forged_result_ = false;
};

}  // namespace
}  // namespace aggswitch::client

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static aggswitch::client::Harness harness;
  harness.Run(data, size);
  return 0;
}
