// Checks tools/wireshark/aggswitch.lua against the one builder: frames built
// with aggregator/wire.h are written to a classic pcap file, decoded by
// tshark with the dissector loaded, and every field tshark reports is
// compared with what was built.
//
// Needs /usr/bin/tshark (the tshark package; scripts/install-deps.sh installs
// it). Without it the test fails instead of skipping, so CI cannot pass
// without having run the dissector.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/wire.h"
#include "telemetry/int_wire.h"

namespace aggswitch::aggregator {
namespace {

constexpr char kTshark[] = "/usr/bin/tshark";
constexpr char kLuaScript[] = AGG_SOURCE_DIR "/tools/wireshark/aggswitch.lua";

// Everything the test reads back, in the order of tshark's -e options.
const std::vector<std::string> kFields = {
    "aggswitch.magic",
    "aggswitch.version",
    "aggswitch.opcode",
    "aggswitch.flags",
    "aggswitch.flags.aggregate_at_ps",
    "aggswitch.flags.retransmission",
    "aggswitch.flags.conflict",
    "aggswitch.flags.verified",
    "aggswitch.flags.bypass",
    "aggswitch.flags.overflow",
    "aggswitch.flags.incomplete",
    "aggswitch.flags.task_info",
    "aggswitch.flags.ordered",
    "aggswitch.node_id",
    "aggswitch.job_id",
    "aggswitch.seq",
    "aggswitch.job_key",
    "aggswitch.ack_watermark",
    "aggswitch.addr_low",
    "aggswitch.expected",
    "aggswitch.node_count",
    "aggswitch.slot_hint",
    "aggswitch.elem_count",
    "aggswitch.dtype",
    "aggswitch.op",
    "aggswitch.scale",
    "aggswitch.missing_count",
    "aggswitch.aux",
    "aggswitch.incarnation",
    "aggswitch.missing.node",
    "aggswitch.elem.int32",
    "aggswitch.elem.float32",
    "aggswitch.elem.float16",
    "aggswitch.elem.bfloat16",
    "aggswitch.elem.bool",
    "_ws.col.Protocol",
    "_ws.col.Info",
    "_ws.expert.message",
    "_ws.expert.severity",
};

// Wireshark's PI_ERROR (epan/proto.h) as tshark prints _ws.expert.severity.
constexpr char kSeverityError[] = "8388608";

using Bytes = std::vector<uint8_t>;
using Row = std::map<std::string, std::string>;

Bytes Datagram(const AggFields& f, const std::vector<uint16_t>& missing, const Bytes& payload) {
  Bytes buf(9000);
  const uint32_t n = BuildAggregation(f, missing.data(), static_cast<uint8_t>(missing.size()),
                                      payload.data(), static_cast<uint32_t>(payload.size()),
                                      buf.data(), static_cast<uint32_t>(buf.size()));
  EXPECT_GT(n, 0u) << "BuildAggregation rejected the test datagram";
  buf.resize(n);
  return buf;
}

template <typename T>
Bytes LittleEndian(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());  // the test hosts are little-endian
  return out;
}

void PutBe16(Bytes& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v >> 8);
  b[at + 1] = static_cast<uint8_t>(v);
}

// Ethernet | IPv4 (DF, checksummed) | UDP (no checksum) | `payload`, padded to 60 bytes.
Bytes UdpFrame(const Bytes& payload, uint8_t src_host, uint8_t dst_host, uint16_t src_port,
               uint16_t dst_port) {
  constexpr size_t kIp = 14;
  constexpr size_t kUdp = kIp + 20;
  constexpr size_t kData = kUdp + 8;
  Bytes f(std::max<size_t>(kData + payload.size(), 60), 0);
  const std::array<uint8_t, 6> dst_mac = {0x02, 0, 0, 0, 0, dst_host};
  const std::array<uint8_t, 6> src_mac = {0x02, 0, 0, 0, 0, src_host};
  std::memcpy(&f[0], dst_mac.data(), dst_mac.size());
  std::memcpy(&f[6], src_mac.data(), src_mac.size());
  PutBe16(f, 12, 0x0800);  // IPv4
  f[kIp] = 0x45;
  PutBe16(f, kIp + 2, static_cast<uint16_t>(20 + 8 + payload.size()));
  f[kIp + 6] = 0x40;  // DF
  f[kIp + 8] = 64;
  f[kIp + 9] = 17;  // UDP
  const std::array<uint8_t, 8> addrs = {10, 0, 0, src_host, 10, 0, 0, dst_host};
  std::memcpy(&f[kIp + 12], addrs.data(), addrs.size());
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(f[kIp + i] << 8 | f[kIp + i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  PutBe16(f, kIp + 10, static_cast<uint16_t>(~sum));
  PutBe16(f, kUdp, src_port);
  PutBe16(f, kUdp + 2, dst_port);
  PutBe16(f, kUdp + 4, static_cast<uint16_t>(8 + payload.size()));
  if (!payload.empty()) std::memcpy(&f[kData], payload.data(), payload.size());
  return f;
}

// Classic libpcap format: global header, then a 16-byte record header per
// frame, all in host (little-endian) order; link type 1 is Ethernet.
void WritePcap(const std::string& path, const std::vector<Bytes>& frames) {
  std::ofstream out(path, std::ios::binary);
  auto put32 = [&out](uint32_t v) { out.write(reinterpret_cast<const char*>(&v), 4); };
  auto put16 = [&out](uint16_t v) { out.write(reinterpret_cast<const char*>(&v), 2); };
  put32(0xA1B2C3D4);  // magic, microsecond timestamps
  put16(2);           // version 2.4
  put16(4);
  put32(0);      // thiszone
  put32(0);      // sigfigs
  put32(65535);  // snaplen
  put32(1);      // LINKTYPE_ETHERNET
  uint32_t usec = 0;
  for (const Bytes& f : frames) {
    put32(1700000000);
    put32(usec += 1000);
    put32(static_cast<uint32_t>(f.size()));
    put32(static_cast<uint32_t>(f.size()));
    out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  }
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs tshark with the dissector loaded and a private HOME and configuration
// directory, so a user's preferences or plugins cannot change the result.
CommandResult RunTshark(const std::string& dir, const std::string& args) {
  const std::string err_path = dir + "/tshark.stderr";
  const std::string cmd = "env HOME=" + ShellQuote(dir) + " XDG_CONFIG_HOME=" + ShellQuote(dir) +
                          " WIRESHARK_CONFIG_DIR=" + ShellQuote(dir) + " " + kTshark +
                          " -X lua_script:" + ShellQuote(kLuaScript) + " " + args + " 2>" +
                          ShellQuote(err_path);
  CommandResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> chunk;
  size_t n;
  while ((n = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) r.out.append(chunk.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream ss;
  ss << err.rdbuf();
  r.err = ss.str();
  return r;
}

// Splits one line of `-E separator=, -E quote=d` output into its fields.
std::vector<std::string> SplitQuotedCsv(const std::string& line) {
  std::vector<std::string> cols(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cols.emplace_back();
    } else {
      cols.back() += c;
    }
  }
  return cols;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ";") + p;
  return s;
}

class DissectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "aggswitch_dissector_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl << ": " << strerror(errno);
    dir_ = tmpl;
    ASSERT_EQ(access(kTshark, X_OK), 0)
        << kTshark << " is missing: install the tshark package (scripts/install-deps.sh does). "
        << "This test fails rather than skips so the dissector is always checked.";
    ASSERT_EQ(access(kLuaScript, R_OK), 0) << "cannot read the dissector " << kLuaScript;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Writes `frames`, decodes them with tshark and returns one row per frame
  // of `fields`.
  std::vector<Row> Decode(const std::vector<Bytes>& frames,
                          const std::vector<std::string>& fields = kFields) {
    const std::string pcap = dir_ + "/capture.pcap";
    WritePcap(pcap, frames);
    std::string args = "-r " + ShellQuote(pcap) +
                       " -T fields -E separator=, -E quote=d -E 'aggregator=;' -E occurrence=a";
    for (const std::string& f : fields) args += " -e " + f;
    const CommandResult r = RunTshark(dir_, args);
    EXPECT_EQ(r.exit_code, 0) << "tshark failed; stderr:\n" << r.err;
    ExpectNoLuaError(r);
    std::vector<Row> rows;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) {
      const std::vector<std::string> cols = SplitQuotedCsv(line);
      EXPECT_EQ(cols.size(), fields.size()) << "unexpected tshark line: " << line;
      Row row;
      for (size_t i = 0; i < fields.size() && i < cols.size(); ++i) row[fields[i]] = cols[i];
      rows.push_back(std::move(row));
    }
    EXPECT_EQ(rows.size(), frames.size()) << "tshark output:\n" << r.out;
    return rows;
  }

  // A Lua error on packet contents shows up in the tree (checked by the
  // callers), a load error on stderr, which otherwise holds at most tshark's
  // running-as-root notice.
  static void ExpectNoLuaError(const CommandResult& r) {
    std::istringstream lines(r.err);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind("Running as user", 0) == 0) continue;
      ADD_FAILURE() << "tshark stderr: " << line;
    }
  }

  std::string dir_;
};

AggFields Contribution() {
  AggFields f;
  f.opcode = Opcode::kContribution;
  f.flags = flags::kTaskInfo;
  f.node_id = 3;
  f.job_id = 7;
  f.seq = 42;
  f.job_key = 0x1122334455667788ULL;
  f.ack_watermark = 40;
  f.addr_low = 0x00ABC000;
  f.expected = 4;
  f.node_count = 1;
  f.slot_hint = kNoSlotHint;
  f.dtype = DType::kFloat32;
  f.op = ReduceOp::kSum;
  f.incarnation = 0x5eed0001;
  return f;
}

// Frame hosts: workers are 10.0.0.1..9, the switch's aggregation address is 10.0.0.254.
constexpr uint8_t kWorker = 3;
constexpr uint8_t kSwitch = 254;
constexpr uint16_t kWorkerPort = 40000;

TEST_F(DissectorTest, DecodesEveryFieldOfEveryDatagramKind) {
  std::vector<Bytes> frames;

  // 1: contribution with in-band task info, 256 float32 values (i - 100) / 4.
  std::vector<float> f32(256);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = (static_cast<float>(i) - 100.0f) / 4.0f;
  AggFields contribution = Contribution();
  contribution.elem_count = 256;
  frames.push_back(UdpFrame(Datagram(contribution, {}, LittleEndian(f32)), kWorker, kSwitch,
                            kWorkerPort, kAggUdpPort));

  // 2: incomplete, saturated int32 result from the switch with two members missing.
  const std::vector<int32_t> i32 = {INT32_MIN, INT32_MAX, -1, 0, 1, 123456, -7, 42};
  AggFields result = Contribution();
  result.opcode = Opcode::kResult;
  result.flags = flags::kIncomplete | flags::kOverflow;
  result.node_id = 0;
  result.seq = 43;
  result.ack_watermark = 0;
  result.expected = 0;
  result.node_count = 0;
  result.slot_hint = 12;
  result.elem_count = static_cast<uint16_t>(i32.size());
  result.dtype = DType::kInt32;
  result.scale = -8;
  frames.push_back(UdpFrame(Datagram(result, {5, 513}, LittleEndian(i32)), kSwitch, kWorker,
                            kAggUdpPort, kWorkerPort));

  // 3: float16 partial to the aggregation address on another port (the heuristic):
  // 1.5, -2, 65504 (largest), 2^-24 (smallest subnormal), -0, +inf, 0.333251953125.
  const std::vector<uint16_t> f16 = {0x3E00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0x3555};
  AggFields partial = Contribution();
  partial.opcode = Opcode::kPartial;
  partial.flags = 0;
  partial.node_id = 2;
  partial.elem_count = static_cast<uint16_t>(f16.size());
  partial.dtype = DType::kFloat16;
  partial.op = ReduceOp::kMax;
  frames.push_back(UdpFrame(Datagram(partial, {}, LittleEndian(f16)), 9, kSwitch, 40001, 40002));

  // 4: bfloat16 retransmission, ordered: 1.5, -2, 65280, 65536, 3.140625, 0.
  const std::vector<uint16_t> bf16 = {0x3FC0, 0xC000, 0x477F, 0x4780, 0x4049, 0x0000};
  AggFields retransmit = Contribution();
  retransmit.flags = flags::kRetransmission | flags::kOrdered;
  retransmit.elem_count = static_cast<uint16_t>(bf16.size());
  retransmit.dtype = DType::kBFloat16;
  retransmit.op = ReduceOp::kMin;
  frames.push_back(UdpFrame(Datagram(retransmit, {}, LittleEndian(bf16)), kWorker, kSwitch,
                            kWorkerPort, kAggUdpPort));

  // 5: bool late contribution with the remaining flags; any non-zero byte is true.
  const Bytes bools = {1, 0, 2, 0, 1};
  AggFields late = Contribution();
  late.opcode = Opcode::kLate;
  late.flags = flags::kAggregateAtPs | flags::kConflict | flags::kVerified | flags::kBypass;
  late.elem_count = static_cast<uint16_t>(bools.size());
  late.dtype = DType::kBool;
  late.op = ReduceOp::kOr;
  frames.push_back(UdpFrame(Datagram(late, {}, bools), kWorker, kSwitch, kWorkerPort, kAggUdpPort));

  // 6: ACK: no payload, only the watermark.
  AggFields ack = Contribution();
  ack.opcode = Opcode::kAck;
  ack.flags = 0;
  ack.ack_watermark = 100;
  ack.dtype = DType::kInt32;
  frames.push_back(UdpFrame(Datagram(ack, {}, {}), kWorker, kSwitch, kWorkerPort, kAggUdpPort));

  // 7: NACK, reason 2 (key mismatch).
  AggFields nack = Contribution();
  nack.opcode = Opcode::kNack;
  nack.flags = 0;
  nack.node_id = 3;
  nack.dtype = DType::kInt32;
  nack.aux = static_cast<uint32_t>(NackReason::kKeyMismatch);
  frames.push_back(UdpFrame(Datagram(nack, {}, {}), kSwitch, kWorker, kAggUdpPort, kWorkerPort));

  // 8: truncated: 30 bytes of a header.
  Bytes truncated = Datagram(Contribution(), {}, {});
  truncated.resize(30);
  frames.push_back(UdpFrame(truncated, kWorker, kSwitch, kWorkerPort, kAggUdpPort));

  // 9: counts that do not fit: 100 float32 announced, 4 present.
  AggFields big = Contribution();
  big.elem_count = 100;
  Bytes cut = Datagram(big, {}, LittleEndian(std::vector<float>(100, 1.0f)));
  cut.resize(sizeof(AggHeader) + 16);
  frames.push_back(UdpFrame(cut, kWorker, kSwitch, kWorkerPort, kAggUdpPort));

  // 10: wrong magic on the aggregation port.
  Bytes bad_magic = Datagram(Contribution(), {}, {});
  bad_magic[0] = 0xA6;
  bad_magic[1] = 0x5D;
  frames.push_back(UdpFrame(bad_magic, kWorker, kSwitch, kWorkerPort, kAggUdpPort));

  // 11: version 1 (the header before incarnations) on another port: the
  // heuristic must leave it alone.
  Bytes v2 = Datagram(Contribution(), {}, {});
  v2[2] = 1;
  frames.push_back(UdpFrame(v2, kWorker, kSwitch, 40001, 40002));

  // 12: NACK, reason 11 (member bound): a "not now" reason.
  AggFields bound = nack;
  bound.aux = static_cast<uint32_t>(NackReason::kMemberBound);
  frames.push_back(UdpFrame(Datagram(bound, {}, {}), kSwitch, kWorker, kAggUdpPort, kWorkerPort));

  const std::vector<Row> rows = Decode(frames);
  ASSERT_EQ(rows.size(), 12u);

  {
    SCOPED_TRACE("contribution, float32");
    Row r = rows[0];
    EXPECT_EQ(r["_ws.col.Protocol"], "AGGSWITCH");
    EXPECT_EQ(r["_ws.col.Info"], "CONTRIBUTION job=7 seq=42 node=3 float32x256 [TASK_INFO]");
    EXPECT_EQ(r["aggswitch.magic"], "0xa65c");
    EXPECT_EQ(r["aggswitch.version"], "2");
    EXPECT_EQ(r["aggswitch.opcode"], "1");
    EXPECT_EQ(r["aggswitch.flags"], "0x0080");
    EXPECT_EQ(r["aggswitch.flags.aggregate_at_ps"], "0");
    EXPECT_EQ(r["aggswitch.flags.retransmission"], "0");
    EXPECT_EQ(r["aggswitch.flags.conflict"], "0");
    EXPECT_EQ(r["aggswitch.flags.verified"], "0");
    EXPECT_EQ(r["aggswitch.flags.bypass"], "0");
    EXPECT_EQ(r["aggswitch.flags.overflow"], "0");
    EXPECT_EQ(r["aggswitch.flags.incomplete"], "0");
    EXPECT_EQ(r["aggswitch.flags.task_info"], "1");
    EXPECT_EQ(r["aggswitch.flags.ordered"], "0");
    EXPECT_EQ(r["aggswitch.node_id"], "3");
    EXPECT_EQ(r["aggswitch.job_id"], "7");
    EXPECT_EQ(r["aggswitch.seq"], "42");
    EXPECT_EQ(r["aggswitch.job_key"], "0x1122334455667788");
    EXPECT_EQ(r["aggswitch.ack_watermark"], "40");
    EXPECT_EQ(r["aggswitch.addr_low"], "0x00abc000");
    EXPECT_EQ(r["aggswitch.expected"], "4");
    EXPECT_EQ(r["aggswitch.node_count"], "1");
    EXPECT_EQ(r["aggswitch.slot_hint"], "65535");
    EXPECT_EQ(r["aggswitch.elem_count"], "256");
    EXPECT_EQ(r["aggswitch.dtype"], "1");
    EXPECT_EQ(r["aggswitch.op"], "0");
    EXPECT_EQ(r["aggswitch.scale"], "0");
    EXPECT_EQ(r["aggswitch.missing_count"], "0");
    EXPECT_EQ(r["aggswitch.aux"], "0");
    EXPECT_EQ(r["aggswitch.incarnation"], "0x5eed0001");
    EXPECT_EQ(r["aggswitch.missing.node"], "");
    std::vector<std::string> expected;
    for (float v : f32) {
      std::ostringstream s;
      s << v;  // quarter steps from -25 to 38.75 print the same in C++ and Wireshark
      expected.push_back(s.str());
    }
    EXPECT_EQ(r["aggswitch.elem.float32"], Join(expected));
    EXPECT_EQ(r["aggswitch.elem.int32"], "");
    EXPECT_EQ(r["_ws.expert.message"], "");
  }
  {
    SCOPED_TRACE("result, int32, missing list");
    Row r = rows[1];
    EXPECT_EQ(r["_ws.col.Info"],
              "RESULT job=7 seq=43 node=0 int32x8 missing=2 [OVERFLOW,INCOMPLETE]");
    EXPECT_EQ(r["aggswitch.opcode"], "3");
    EXPECT_EQ(r["aggswitch.flags"], "0x0060");
    EXPECT_EQ(r["aggswitch.flags.overflow"], "1");
    EXPECT_EQ(r["aggswitch.flags.incomplete"], "1");
    EXPECT_EQ(r["aggswitch.flags.task_info"], "0");
    EXPECT_EQ(r["aggswitch.flags.aggregate_at_ps"], "0");
    EXPECT_EQ(r["aggswitch.node_id"], "0");
    EXPECT_EQ(r["aggswitch.seq"], "43");
    EXPECT_EQ(r["aggswitch.slot_hint"], "12");
    EXPECT_EQ(r["aggswitch.elem_count"], "8");
    EXPECT_EQ(r["aggswitch.dtype"], "0");
    EXPECT_EQ(r["aggswitch.scale"], "-8");
    EXPECT_EQ(r["aggswitch.missing_count"], "2");
    EXPECT_EQ(r["aggswitch.missing.node"], "5;513");
    EXPECT_EQ(r["aggswitch.elem.int32"], "-2147483648;2147483647;-1;0;1;123456;-7;42");
    EXPECT_EQ(r["_ws.expert.message"], "");
  }
  {
    SCOPED_TRACE("partial, float16, heuristic");
    Row r = rows[2];
    EXPECT_EQ(r["_ws.col.Protocol"], "AGGSWITCH");
    EXPECT_EQ(r["_ws.col.Info"], "PARTIAL job=7 seq=42 node=2 float16x7");
    EXPECT_EQ(r["aggswitch.opcode"], "2");
    EXPECT_EQ(r["aggswitch.flags"], "0x0000");
    EXPECT_EQ(r["aggswitch.dtype"], "2");
    EXPECT_EQ(r["aggswitch.op"], "2");
    EXPECT_EQ(r["aggswitch.elem.float16"], "1.5;-2;65504;5.96046e-08;-0;inf;0.333252");
  }
  {
    SCOPED_TRACE("contribution, bfloat16");
    Row r = rows[3];
    EXPECT_EQ(r["_ws.col.Info"],
              "CONTRIBUTION job=7 seq=42 node=3 bfloat16x6 [RETRANSMISSION,ORDERED]");
    EXPECT_EQ(r["aggswitch.flags"], "0x0102");
    EXPECT_EQ(r["aggswitch.flags.retransmission"], "1");
    EXPECT_EQ(r["aggswitch.flags.ordered"], "1");
    EXPECT_EQ(r["aggswitch.flags.task_info"], "0");
    EXPECT_EQ(r["aggswitch.dtype"], "3");
    EXPECT_EQ(r["aggswitch.op"], "1");
    EXPECT_EQ(r["aggswitch.elem.bfloat16"], "1.5;-2;65280;65536;3.14062;0");
  }
  {
    SCOPED_TRACE("late, bool");
    Row r = rows[4];
    EXPECT_EQ(r["_ws.col.Info"],
              "LATE job=7 seq=42 node=3 boolx5 [AGGREGATE_AT_PS,CONFLICT,VERIFIED,BYPASS]");
    EXPECT_EQ(r["aggswitch.opcode"], "4");
    EXPECT_EQ(r["aggswitch.flags"], "0x001d");
    EXPECT_EQ(r["aggswitch.flags.aggregate_at_ps"], "1");
    EXPECT_EQ(r["aggswitch.flags.retransmission"], "0");
    EXPECT_EQ(r["aggswitch.flags.conflict"], "1");
    EXPECT_EQ(r["aggswitch.flags.verified"], "1");
    EXPECT_EQ(r["aggswitch.flags.bypass"], "1");
    EXPECT_EQ(r["aggswitch.dtype"], "4");
    EXPECT_EQ(r["aggswitch.op"], "4");
    EXPECT_EQ(r["aggswitch.elem.bool"], "1;0;1;0;1");
  }
  {
    SCOPED_TRACE("ack");
    Row r = rows[5];
    EXPECT_EQ(r["_ws.col.Info"], "ACK job=7 seq=42 node=3 ack=100");
    EXPECT_EQ(r["aggswitch.opcode"], "8");
    EXPECT_EQ(r["aggswitch.ack_watermark"], "100");
    EXPECT_EQ(r["aggswitch.elem_count"], "0");
    EXPECT_EQ(r["aggswitch.elem.int32"], "");
    EXPECT_EQ(r["_ws.expert.message"], "");
  }
  {
    SCOPED_TRACE("nack");
    Row r = rows[6];
    EXPECT_EQ(r["_ws.col.Info"], "NACK job=7 seq=42 node=3 reason=key mismatch");
    EXPECT_EQ(r["aggswitch.opcode"], "9");
    EXPECT_EQ(r["aggswitch.aux"], "2");
    EXPECT_EQ(r["_ws.expert.message"], "");
  }
  {
    SCOPED_TRACE("nack, member bound");
    Row r = rows[11];
    EXPECT_EQ(r["_ws.col.Info"], "NACK job=7 seq=42 node=3 reason=member bound to another address");
    EXPECT_EQ(r["aggswitch.aux"], "11");
    EXPECT_EQ(r["_ws.expert.message"], "");
  }
  {
    SCOPED_TRACE("truncated");
    Row r = rows[7];
    EXPECT_EQ(r["_ws.col.Protocol"], "AGGSWITCH");
    EXPECT_EQ(r["_ws.expert.message"], "30 bytes, shorter than the 52-byte header");
    EXPECT_EQ(r["_ws.expert.severity"], kSeverityError);
    EXPECT_EQ(r["aggswitch.opcode"], "");
  }
  {
    SCOPED_TRACE("count mismatch");
    Row r = rows[8];
    EXPECT_EQ(r["_ws.expert.message"],
              "missing list and payload need 452 bytes, the datagram has 68");
    EXPECT_EQ(r["_ws.expert.severity"], kSeverityError);
    EXPECT_EQ(r["aggswitch.elem_count"], "100");
    EXPECT_EQ(r["aggswitch.elem.float32"], "");
  }
  {
    SCOPED_TRACE("bad magic");
    Row r = rows[9];
    EXPECT_EQ(r["_ws.expert.message"], "magic 0xA65D is not 0xA65C");
    EXPECT_EQ(r["_ws.expert.severity"], kSeverityError);
    EXPECT_EQ(r["aggswitch.magic"], "0xa65d");
  }
  {
    SCOPED_TRACE("version 1, other port");
    Row r = rows[10];
    EXPECT_NE(r["_ws.col.Protocol"], "AGGSWITCH");
    EXPECT_EQ(r["aggswitch.magic"], "");
  }
}

// Every malformation docs/protocol.md lists, and every truncation of a valid
// datagram, must give an expert error and never a Lua error.
TEST_F(DissectorTest, MalformedDatagramsGetExpertErrorsNotLuaErrors) {
  std::vector<Bytes> frames;
  AggFields f = Contribution();
  f.elem_count = 2;
  f.flags = 0xFFFF;  // every flag, reserved bits included
  const Bytes valid = Datagram(f, {1, 2, 3}, LittleEndian(std::vector<float>{1.0f, 2.0f}));
  frames.push_back(UdpFrame(valid, kWorker, kSwitch, kWorkerPort, kAggUdpPort));
  for (size_t len = 0; len < valid.size(); len += 3) {
    const Bytes cut(valid.begin(), valid.begin() + static_cast<std::ptrdiff_t>(len));
    frames.push_back(UdpFrame(cut, kWorker, kSwitch, kWorkerPort, kAggUdpPort));
  }
  auto corrupt = [&](size_t offset, uint8_t value) {
    Bytes d = valid;
    d[offset] = value;
    frames.push_back(UdpFrame(d, kWorker, kSwitch, kWorkerPort, kAggUdpPort));
  };
  corrupt(2, 0);     // version 0
  corrupt(3, 0);     // opcode 0
  corrupt(3, 14);    // opcode 14
  corrupt(40, 5);    // dtype 5
  corrupt(41, 5);    // op 5
  corrupt(41, 3);    // float32 with and
  corrupt(43, 255);  // 255 missing nodes

  const std::string pcap = dir_ + "/malformed.pcap";
  WritePcap(pcap, frames);
  const CommandResult r = RunTshark(dir_, "-r " + ShellQuote(pcap) + " -V");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ExpectNoLuaError(r);
  EXPECT_EQ(r.out.find("Lua Error"), std::string::npos) << r.out;
  for (const char* text : {
           "Reserved flag bits set (0x8000); receivers ignore them",
           "Missing node: 3",
           "0 bytes, shorter than the 52-byte header",
           "51 bytes, shorter than the 52-byte header",
           "missing list and payload need 66 bytes, the datagram has 63",
           "version 0 is not 2",
           "opcode 0 outside 1..13",
           "opcode 14 outside 1..13",
           "dtype 5 outside the table",
           "op 5 outside the table",
           "dtype float32 does not allow op and",
           "missing list and payload need 570 bytes, the datagram has 66",
       }) {
    EXPECT_NE(r.out.find(text), std::string::npos) << "no \"" << text << "\" in\n" << r.out;
  }
}


// In-band network telemetry, built with telemetry/int_wire.h.
namespace tel = telemetry;

const std::vector<std::string> kIntFields = {
    "aggswitch_int.type",
    "aggswitch_int.npt",
    "aggswitch_int.length",
    "aggswitch_int.original_port",
    "aggswitch_int.version",
    "aggswitch_int.hop_ml",
    "aggswitch_int.remaining",
    "aggswitch_int.instructions",
    "aggswitch_int.domain_id",
    "aggswitch_int.hop.node_id",
    "aggswitch_int.hop.ingress_port",
    "aggswitch_int.hop.egress_port",
    "aggswitch_int.hop.latency",
    "aggswitch_int.hop.queue_occupancy",
    "aggswitch_int.path.source_node",
    "aggswitch_int.path.seq",
    "aggswitch.job_id",
    "aggswitch.seq",
    "_ws.col.Info",
};

tel::HopMetadata SampleHop() {
  tel::HopMetadata h;
  h.node_id = 101;
  h.ingress_port = 2;
  h.egress_port = 5;
  h.hop_latency_ns = 4321;
  h.queue_occupancy = 17;
  h.tx_utilization = 125000;
  return h;
}

// A watched contribution as it crosses a switch: the INT headers, the
// switch's own hop metadata pushed on top, the path id, then the datagram.
Bytes IntPayload(const Bytes& datagram) {
  Bytes b(tel::kInsertedBytes);
  tel::WriteIntHeaders(tel::instr::kLatencySet, kAggUdpPort, 8, 100, 77, b.data());
  Bytes hop(tel::HopWords(tel::instr::kLatencySet) * 4);
  tel::WriteHopMetadata(tel::instr::kLatencySet, SampleHop(), hop.data());
  b.insert(b.begin() + sizeof(tel::IntShim) + sizeof(tel::IntMdHeader), hop.begin(), hop.end());
  b[1] = static_cast<uint8_t>(b[1] + hop.size() / 4);
  b.insert(b.end(), datagram.begin(), datagram.end());
  return b;
}

TEST_F(DissectorTest, DecodesIntHeadersAndTheDatagramUnderThem) {
  AggFields c = Contribution();
  c.elem_count = 2;
  const Bytes datagram = Datagram(c, {}, LittleEndian(std::vector<float>{1.0f, 2.0f}));
  const Bytes payload = IntPayload(datagram);
  const std::vector<Row> rows = Decode(
      {UdpFrame(payload, kWorker, kSwitch, kWorkerPort, tel::kDefaultIntPort),
       // On another port: found by the heuristic.
       UdpFrame(payload, kWorker, kSwitch, kWorkerPort, 9999)},
      kIntFields);
  ASSERT_EQ(rows.size(), 2u);
  for (const Row& r : rows) {
    EXPECT_EQ(r.at("aggswitch_int.type"), "1");
    EXPECT_EQ(r.at("aggswitch_int.npt"), "1");
    EXPECT_EQ(r.at("aggswitch_int.length"), "9");
    EXPECT_EQ(r.at("aggswitch_int.original_port"), "47000");
    EXPECT_EQ(r.at("aggswitch_int.version"), "2");
    EXPECT_EQ(r.at("aggswitch_int.hop_ml"), "4");
    EXPECT_EQ(r.at("aggswitch_int.remaining"), "8");
    EXPECT_EQ(r.at("aggswitch_int.instructions"), "0xf000");
    EXPECT_EQ(r.at("aggswitch_int.domain_id"), "0x4147");
    EXPECT_EQ(r.at("aggswitch_int.hop.node_id"), "101");
    EXPECT_EQ(r.at("aggswitch_int.hop.ingress_port"), "2");
    EXPECT_EQ(r.at("aggswitch_int.hop.egress_port"), "5");
    EXPECT_EQ(r.at("aggswitch_int.hop.latency"), "4321");
    EXPECT_EQ(r.at("aggswitch_int.hop.queue_occupancy"), "17");
    EXPECT_EQ(r.at("aggswitch_int.path.source_node"), "100");
    EXPECT_EQ(r.at("aggswitch_int.path.seq"), "77");
    // The original datagram, through the original port's dissector.
    EXPECT_EQ(r.at("aggswitch.job_id"), "7");
    EXPECT_EQ(r.at("aggswitch.seq"), "42");
  }
}

const std::vector<std::string> kReportFields = {
    "aggswitch_report.version",
    "aggswitch_report.hw_id",
    "aggswitch_report.sequence",
    "aggswitch_report.node_id",
    "aggswitch_report.rep_type",
    "aggswitch_report.in_type",
    "aggswitch_report.report_length",
    "aggswitch_report.md_length",
    "aggswitch_report.f",
    "aggswitch_report.i",
    "aggswitch_report.rep_md_bits",
    "aggswitch_report.ingress_port",
    "aggswitch_report.egress_port",
    "aggswitch_report.latency",
    "aggswitch_report.queue_occupancy",
    "aggswitch_report.tx_utilization",
    "aggswitch_report.path.source_node",
    "aggswitch_report.path.seq",
    "aggswitch_report.hop_index",
    "ip.src",
    "udp.dstport",
    "_ws.col.Info",
    "_ws.expert.message",
};

TEST_F(DissectorTest, DecodesTelemetryReports) {
  // The reported datagram's IPv4 and UDP headers: 10.0.0.3:40000 -> 10.0.0.254:47000.
  const Bytes original = UdpFrame({}, kWorker, kSwitch, kWorkerPort, kAggUdpPort);
  tel::HopReport r;
  r.node_id = 101;
  r.hw_id = 3;
  r.sequence = 0x12345;
  r.instructions = tel::instr::kBothSets;
  r.hop = SampleHop();
  r.source_node = 100;
  r.path_seq = 77;
  r.hop_index = 2;
  r.inner = original.data() + 14;
  r.has_inner = true;
  Bytes transit(tel::ReportBytes(r.instructions, true));
  ASSERT_EQ(tel::BuildReport(r, transit.data(), transit.size()), transit.size());
  r.last_hop = true;
  r.has_inner = false;
  r.instructions = tel::instr::kLatencySet;
  r.hop_index = 3;
  Bytes last(tel::ReportBytes(r.instructions, false));
  ASSERT_EQ(tel::BuildReport(r, last.data(), last.size()), last.size());
  Bytes truncated = transit;
  truncated.resize(40);
  constexpr uint8_t kCollector = 200;
  const std::vector<Row> rows = Decode(
      {UdpFrame(transit, 101, kCollector, 5000, tel::kDefaultReportPort),
       UdpFrame(last, 101, kCollector, 5000, 6000),  // another port: the heuristic
       UdpFrame(truncated, 101, kCollector, 5000, tel::kDefaultReportPort)},
      kReportFields);
  ASSERT_EQ(rows.size(), 3u);
  const Row& t = rows[0];
  EXPECT_EQ(t.at("aggswitch_report.version"), "2");
  EXPECT_EQ(t.at("aggswitch_report.hw_id"), "3");
  EXPECT_EQ(t.at("aggswitch_report.sequence"), "74565");
  EXPECT_EQ(t.at("aggswitch_report.node_id"), "101");
  EXPECT_EQ(t.at("aggswitch_report.rep_type"), "1");
  EXPECT_EQ(t.at("aggswitch_report.in_type"), "4");
  EXPECT_EQ(t.at("aggswitch_report.report_length"), std::to_string((transit.size() - 12) / 4));
  EXPECT_EQ(t.at("aggswitch_report.md_length"), "7");
  EXPECT_EQ(t.at("aggswitch_report.f"), "1");
  EXPECT_EQ(t.at("aggswitch_report.i"), "1");
  EXPECT_EQ(t.at("aggswitch_report.rep_md_bits"), "0x7100");
  EXPECT_EQ(t.at("aggswitch_report.ingress_port"), "2");
  EXPECT_EQ(t.at("aggswitch_report.egress_port"), "5");
  EXPECT_EQ(t.at("aggswitch_report.latency"), "4321");
  EXPECT_EQ(t.at("aggswitch_report.queue_occupancy"), "17");
  EXPECT_EQ(t.at("aggswitch_report.tx_utilization"), "125000");
  EXPECT_EQ(t.at("aggswitch_report.path.source_node"), "100");
  EXPECT_EQ(t.at("aggswitch_report.path.seq"), "77");
  EXPECT_EQ(t.at("aggswitch_report.hop_index"), "2");
  // The outer datagram's source, then the reported one's, decoded inside.
  EXPECT_EQ(t.at("ip.src"), "10.0.0.101;10.0.0.3");
  EXPECT_EQ(t.at("udp.dstport"), "32766;47000");
  EXPECT_EQ(t.at("_ws.col.Info").find("Report from node 101: path 100/77 hop 2"), 0u) << t.at("_ws.col.Info");

  const Row& l = rows[1];
  EXPECT_EQ(l.at("aggswitch_report.i"), "0");
  EXPECT_EQ(l.at("aggswitch_report.in_type"), "0");
  EXPECT_EQ(l.at("aggswitch_report.rep_md_bits"), "0x7000");
  EXPECT_EQ(l.at("aggswitch_report.tx_utilization"), "");
  EXPECT_EQ(l.at("aggswitch_report.hop_index"), "3");
  EXPECT_EQ(l.at("_ws.col.Info"), "Report from node 101: path 100/77 hop 3 (end of path)");

  EXPECT_NE(rows[2].at("_ws.expert.message").find("report length"), std::string::npos)
      << rows[2].at("_ws.expert.message");
}

}  // namespace
}  // namespace aggswitch::aggregator
