// `agg-gen --pcap-out`: runs the real binary (no EAL), reads the capture back
// with the dataplane's and the wire format's parsers, and checks every frame:
// count and order, addressing, header fields, payload values. When tshark is
// installed the capture is also decoded with tools/wireshark/aggswitch.lua.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "aggregator/wire.h"
#include "common/net_addr.h"
#include "dataplane/net_headers.h"
#include "dataplane/packet.h"
#include "tools/agg-gen/pcap_writer.h"
#include "tests/lib/test_process.h"

namespace aggswitch::tools {
namespace {

constexpr char kAggGen[] = AGG_GEN_BIN;
constexpr char kTshark[] = "/usr/bin/tshark";
constexpr char kLuaScript[] = AGG_SOURCE_DIR "/tools/wireshark/aggswitch.lua";

using Bytes = std::vector<uint8_t>;

struct Capture {
  uint32_t magic = 0, linktype = 0, snaplen = 0;
  uint16_t major = 0, minor = 0;
  std::vector<Bytes> frames;
  std::vector<uint64_t> timestamps_us;
};

template <typename T>
T Get(const Bytes& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// Reads a classic pcap file; ADD_FAILUREs on anything truncated.
Capture ReadPcap(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Capture c;
  if (b.size() < 24) {
    ADD_FAILURE() << path << ": " << b.size() << " bytes, no pcap global header";
    return c;
  }
  c.magic = Get<uint32_t>(b, 0);
  c.major = Get<uint16_t>(b, 4);
  c.minor = Get<uint16_t>(b, 6);
  c.snaplen = Get<uint32_t>(b, 16);
  c.linktype = Get<uint32_t>(b, 20);
  size_t at = 24;
  while (at < b.size()) {
    if (at + 16 > b.size()) {
      ADD_FAILURE() << "truncated record header at byte " << at;
      break;
    }
    const uint32_t incl = Get<uint32_t>(b, at + 8);
    EXPECT_EQ(incl, Get<uint32_t>(b, at + 12)) << "record at byte " << at << " is cut";
    if (at + 16 + incl > b.size()) {
      ADD_FAILURE() << "truncated record at byte " << at;
      break;
    }
    c.timestamps_us.push_back(uint64_t{Get<uint32_t>(b, at)} * 1000000 + Get<uint32_t>(b, at + 4));
    c.frames.emplace_back(b.begin() + static_cast<std::ptrdiff_t>(at + 16),
                          b.begin() + static_cast<std::ptrdiff_t>(at + 16 + incl));
    at += 16 + incl;
  }
  return c;
}

common::MacAddr MacAt(const uint8_t* p) {
  common::MacAddr m;
  std::memcpy(m.bytes.data(), p, 6);
  return m;
}

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += (ch == '\'') ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

class PcapModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "agg_gen_pcap_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs agg-gen with `args`; returns its exit code.
  int RunAggGen(std::vector<std::string> args) {
    args.insert(args.begin(), kAggGen);
    auto gen = TestProcess::Start(args, dir_ + "/agg-gen.log");
    EXPECT_NE(gen, nullptr) << "cannot start " << kAggGen;
    if (gen == nullptr) return -1;
    const std::optional<int> code = gen->Wait(30);
    EXPECT_TRUE(code.has_value()) << "agg-gen --pcap-out did not finish within 30 s";
    return code.value_or(-1);
  }

  std::string Log() const {
    std::ifstream in(dir_ + "/agg-gen.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string dir_;
};

// The command line and what it must produce, shared by the two tests below.
constexpr uint16_t kWorkers = 3;
constexpr uint16_t kJobs = 2;
constexpr uint32_t kJobBase = 100;
constexpr uint32_t kChunks = 5;
constexpr uint32_t kWindow = 2;
constexpr uint16_t kElems = 6;
constexpr uint64_t kKey = 0x0123456789abcdefULL;

std::vector<std::string> CaptureArgs(const std::string& pcap) {
  return {"--pcap-out",   pcap,
          "--chunks",     std::to_string(kChunks),
          "--workers",    std::to_string(kWorkers),
          "--jobs",       std::to_string(kJobs),
          "--job-base",   std::to_string(kJobBase),
          "--window",     std::to_string(kWindow),
          "--elems",      std::to_string(kElems),
          "--key",        "0x0123456789abcdef",
          "--switch-mac", "02:a9:9c:00:00:b2",
          "--switch-ip",  "10.1.2.3",
          "--op",         "max"};
}

TEST_F(PcapModeTest, WritesEveryContributionThenTheFinalAcks) {
  const std::string pcap = dir_ + "/agg.pcap";
  ASSERT_EQ(RunAggGen(CaptureArgs(pcap)), 0) << Log();
  EXPECT_NE(Log().find("wrote 36 frames"), std::string::npos) << Log();
  const Capture c = ReadPcap(pcap);
  EXPECT_EQ(c.magic, kPcapMagicMicros);
  EXPECT_EQ(c.major, 2);
  EXPECT_EQ(c.minor, 4);
  EXPECT_EQ(c.linktype, kPcapLinkTypeEthernet);
  EXPECT_EQ(c.snaplen, kPcapSnapLen);
  const uint32_t contributions = kChunks * kJobs * kWorkers;
  ASSERT_EQ(c.frames.size(), contributions + kJobs * kWorkers);

  const common::MacAddr switch_mac = *common::MacAddr::Parse("02:a9:9c:00:00:b2");
  const uint32_t switch_ip = common::Ipv4Addr::Parse("10.1.2.3")->addr;
  for (size_t n = 0; n < c.frames.size(); ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    const Bytes& f = c.frames[n];
    if (n > 0) {
      EXPECT_GT(c.timestamps_us[n], c.timestamps_us[n - 1]);
    }
    const bool is_ack = n >= contributions;
    // Contributions: seq-major, then job, then worker; then one ACK per (job, worker).
    const uint32_t i = static_cast<uint32_t>(is_ack ? n - contributions : n);
    const uint16_t worker = static_cast<uint16_t>(i % kWorkers);
    const uint32_t job_id = kJobBase + (i / kWorkers) % kJobs;
    const uint32_t seq = i / (kWorkers * kJobs);

    dataplane::L2Info l2;
    ASSERT_EQ(dataplane::ParseL2(f.data(), static_cast<uint32_t>(f.size()), &l2),
              dataplane::ParseStatus::kOk);
    ASSERT_EQ(l2.ether_type, dataplane::kEtherTypeIpv4);
    dataplane::UdpInfo udp;
    ASSERT_EQ(
        dataplane::ParseIpv4Udp(f.data(), static_cast<uint32_t>(f.size()), l2.l3_offset, &udp),
        dataplane::UdpParse::kOk);
    aggregator::AggPacket pkt;
    ASSERT_EQ(aggregator::ParseAggregation(f.data() + udp.payload_offset, udp.payload_len, &pkt),
              aggregator::WireError::kOk);
    const auto* eth = reinterpret_cast<const dataplane::EtherHdr*>(f.data());
    EXPECT_EQ(MacAt(eth->dst), switch_mac);
    EXPECT_EQ(MacAt(eth->src).ToString(), "02:a9:9c:01:00:0" + std::to_string(worker));
    EXPECT_EQ(common::Ipv4Addr{udp.src_ip}.ToString(), "10.0.10.1" + std::to_string(worker));
    EXPECT_EQ(udp.dst_ip, switch_ip);
    EXPECT_EQ(udp.src_port, 40000 + worker);
    EXPECT_EQ(udp.dst_port, 47000);

    const aggregator::AggFields h = aggregator::ReadAggFields(*pkt.header);
    EXPECT_EQ(h.node_id, worker);
    EXPECT_EQ(h.job_id, job_id);
    EXPECT_EQ(h.job_key, kKey);
    EXPECT_EQ(h.flags, 0);
    EXPECT_EQ(h.dtype, aggregator::DType::kInt32);
    EXPECT_EQ(h.op, aggregator::ReduceOp::kMax);
    if (is_ack) {
      EXPECT_EQ(h.opcode, aggregator::Opcode::kAck);
      EXPECT_EQ(h.ack_watermark, kChunks);
      EXPECT_EQ(pkt.payload_len, 0u);
      EXPECT_EQ(f.size(), 42u + sizeof(aggregator::AggHeader));
      continue;
    }
    EXPECT_EQ(h.opcode, aggregator::Opcode::kContribution);
    EXPECT_EQ(h.seq, seq);
    // The steady state of a window-2 loop: the results of all but the last
    // chunk are back.
    EXPECT_EQ(h.ack_watermark, seq + 1 > kWindow ? seq + 1 - kWindow : 0);
    ASSERT_EQ(h.elem_count, kElems);
    ASSERT_EQ(pkt.payload_len, 4u * kElems);
    for (uint32_t e = 0; e < kElems; ++e) {
      int32_t v;
      std::memcpy(&v, pkt.payload + 4 * e, 4);
      EXPECT_EQ(v, static_cast<int32_t>((worker + 1) * (e + 1) + seq)) << "element " << e;
    }
  }
}

TEST_F(PcapModeTest, TsharkDecodesTheCaptureWithTheDissector) {
  if (access(kTshark, X_OK) != 0) GTEST_SKIP() << kTshark << " is not installed";
  const std::string pcap = dir_ + "/agg.pcap";
  ASSERT_EQ(RunAggGen(CaptureArgs(pcap)), 0) << Log();
  const std::string cmd = "env HOME=" + ShellQuote(dir_) + " XDG_CONFIG_HOME=" + ShellQuote(dir_) +
                          " " + kTshark + " -X lua_script:" + ShellQuote(kLuaScript) + " -r " +
                          ShellQuote(pcap) +
                          " -T fields -E separator=, -e _ws.col.Protocol -e aggswitch.opcode"
                          " -e aggswitch.job_id -e aggswitch.seq -e aggswitch.node_id"
                          " -e aggswitch.ack_watermark -e aggswitch.elem.int32"
                          " -e _ws.expert.message 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> chunk;
  size_t n;
  while ((n = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) out.append(chunk.data(), n);
  ASSERT_EQ(WEXITSTATUS(pclose(pipe)), 0) << out;

  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 36u) << out;
  // Frame 8 is seq 1 of job 100 from worker 1, which sends 2 (e + 1) + 1 (tshark
  // joins repeated fields with the separator); the last frame is the ACK of
  // job 101, worker 2. No row may carry an expert message (the last column).
  EXPECT_EQ(lines[7], "AGGSWITCH,1,100,1,1,0,3,5,7,9,11,13,") << out;
  EXPECT_EQ(lines[35], "AGGSWITCH,8,101,0,2,5,,") << out;
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("AGGSWITCH,", 0), 0u) << line;
    EXPECT_EQ(line.back(), ',') << "expert message in: " << line;
  }
}

TEST_F(PcapModeTest, RefusesToWriteWithoutAChunkCount) {
  EXPECT_EQ(RunAggGen({"--pcap-out", dir_ + "/x.pcap"}), 2);
  EXPECT_NE(Log().find("--pcap-out needs --chunks"), std::string::npos) << Log();
}

}  // namespace
}  // namespace aggswitch::tools
