// agg-ps: the option parsers; the server on 127.0.0.1 (an ephemeral port, in
// a thread) answering first data and late data sent over real UDP sockets,
// and the parameters of --sgd jobs; and the binary itself (exit codes,
// messages, signals, the stats file).
#include "tools/agg-ps/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/ps_engine.h"
#include "aggregator/wire.h"
#include "tests/lib/test_process.h"

namespace aggswitch::tools {
namespace {

using aggregator::AggFields;
using aggregator::AggPacket;
using aggregator::Opcode;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kKey = 0x5eed;

TEST(AggPsOptionsTest, ParsesListen) {
  auto a = ParseListen("127.0.0.1:47001");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ip.ToString(), "127.0.0.1");
  EXPECT_EQ(a->port, 47001);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "localhost:1", "1.2.3:4"}) {
    auto r = ParseListen(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--listen: expected ADDR:PORT"), std::string::npos);
  }
}

TEST(AggPsOptionsTest, ParsesIdListsAndCovers) {
  auto ids = ParseIdList("7,0-3,2");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<uint16_t>{0, 1, 2, 3, 7}));
  auto c = ParseCovers("7:100=0-3,7");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->job_id, 7u);
  EXPECT_EQ(c->switch_node, 100);
  EXPECT_EQ(c->ids, (std::vector<uint16_t>{0, 1, 2, 3, 7}));
  EXPECT_EQ(ParseCovers("1:2=65535")->ids, std::vector<uint16_t>{65535});
  for (const char* bad : {"7:100", "7=100:1", "x:100=1", "7:70000=1", "7:100=", "7:100=3-1",
                          "7:100=1,,2", "7:100=1-", "7:100=a"}) {
    auto r = ParseCovers(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--covers: expected JOB:SWITCH=IDS"), std::string::npos)
        << r.status().message();
  }
}

TEST(AggPsOptionsTest, ParsesJobs) {
  auto j = ParseJob("7:0x5eed:4");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->id, 7u);
  EXPECT_EQ(j->key, 0x5eedu);
  EXPECT_EQ(j->world, 4);
  j = ParseJob("9:123");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->key, 123u);
  EXPECT_EQ(j->world, 0) << "no world: not checked";
  for (const char* bad : {"7", "0:1", "x:1", "7:", "7:x", "7:0x", "7:0xg1", "7:1:0", "7:1:70000",
                          "7:1:4:5"}) {
    auto r = ParseJob(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--job: expected JOB:KEY[:WORLD]"), std::string::npos)
        << r.status().message();
  }
  const auto twice = PsJobPolicy::Make({{7, 1, 0}, {7, 2, 0}}, false);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), "--job: job 7 is listed twice");
}

// The --job list: a listed job's datagrams need its key, and its data for
// the parameter node its world; with --listed-jobs-only every other job's
// datagrams are dropped. Each refusal is counted, and the engine never sees
// the datagram.
TEST(AggPsServerTest, TheJobListChecksKeysAndWorlds) {
  auto policy = PsJobPolicy::Make({{7, kKey, 4}}, false);
  ASSERT_TRUE(policy.ok());
  aggregator::PsEngine engine{aggregator::PsOptions{}};
  PsSocketCounters counters;
  std::vector<aggregator::TanOutput> out;
  const aggregator::TanPeer from{0x7f000001, 40000};
  uint32_t seq = 0;
  auto send = [&](uint32_t job, uint64_t key, uint16_t expected,
                  Opcode opcode = Opcode::kContribution,
                  uint16_t flags = aggregator::flags::kAggregateAtPs) {
    AggFields f;
    f.opcode = opcode;
    f.flags = flags;
    f.node_count = expected;
    f.job_id = job;
    f.seq = seq++;
    f.job_key = key;
    f.expected = expected;
    f.elem_count = 1;
    const int32_t value = 1;
    Bytes buf(sizeof(aggregator::AggHeader) + 4);
    EXPECT_EQ(aggregator::BuildAggregation(f, nullptr, 0, reinterpret_cast<const uint8_t*>(&value),
                                           4, buf.data(), static_cast<uint32_t>(buf.size())),
              buf.size());
    HandleDatagram(buf.data(), static_cast<uint32_t>(buf.size()), from, 1000, engine, counters,
                   &out, &*policy);
  };
  send(7, kKey + 1, 4);
  EXPECT_EQ(counters.job_key_refused, 1u);
  send(7, kKey, 3);
  EXPECT_EQ(counters.job_world_refused, 1u);
  EXPECT_EQ(engine.counters().direct, 0u) << "neither reached the engine";
  send(7, kKey, 4);
  EXPECT_EQ(engine.counters().direct, 1u);
  send(9, 5, 2);
  EXPECT_EQ(engine.counters().direct, 2u) << "an unlisted job passes without --listed-jobs-only";
  policy->listed_only = true;
  send(9, 5, 2);
  EXPECT_EQ(counters.job_unlisted_refused, 1u);
  EXPECT_EQ(engine.counters().direct, 2u);
  EXPECT_EQ(counters.rx_datagrams, 5u);
  // A root's CONFLICT says its members, every rank of a flat job; a VERIFY
  // may count fewer members than ranks (a tree's root), never more.
  send(7, kKey, 3, Opcode::kContribution,
       aggregator::flags::kConflict | aggregator::flags::kAggregateAtPs);
  EXPECT_EQ(counters.job_world_refused, 2u);
  send(7, kKey, 4, Opcode::kContribution,
       aggregator::flags::kConflict | aggregator::flags::kAggregateAtPs);
  EXPECT_EQ(engine.counters().conflicts, 1u);
  send(7, kKey, 5, Opcode::kVerify, 0);
  send(7, kKey, 0, Opcode::kVerify, 0);
  EXPECT_EQ(counters.job_world_refused, 4u);
  EXPECT_EQ(engine.counters().verify, 0u);
  send(7, kKey, 2, Opcode::kVerify, 0);
  EXPECT_EQ(engine.counters().verify, 1u) << "two child switches of a four-rank tree";
}

// A UDP socket on 127.0.0.1 playing the root switch.
class Peer {
 public:
  Peer() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  }
  ~Peer() { close(fd_); }
  uint16_t port() const {
    sockaddr_in a{};
    socklen_t n = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    return ntohs(a.sin_port);
  }

  void SendTo(uint16_t port, const Bytes& datagram) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    EXPECT_EQ(sendto(fd_, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&to),
                     sizeof(to)),
              static_cast<ssize_t>(datagram.size()));
  }
  // The next datagram, or nullopt after `timeout_ms`.
  std::optional<Bytes> Receive(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return std::nullopt;
    Bytes b(65536);
    const ssize_t n = recv(fd_, b.data(), b.size(), 0);
    if (n < 0) return std::nullopt;
    b.resize(static_cast<size_t>(n));
    return b;
  }

 private:
  int fd_ = -1;
};

Bytes Datagram(Opcode opcode, uint16_t flags, uint16_t node, uint32_t seq,
               const std::vector<int32_t>& values, const std::vector<uint16_t>& missing) {
  AggFields f;
  f.opcode = opcode;
  f.flags = flags;
  f.node_id = node;
  f.job_id = 7;
  f.seq = seq;
  f.job_key = kKey;
  f.elem_count = static_cast<uint16_t>(values.size());
  Bytes payload(values.size() * 4);
  std::memcpy(payload.data(), values.data(), payload.size());
  Bytes buf(sizeof(aggregator::AggHeader) + 2 * missing.size() + payload.size());
  EXPECT_EQ(aggregator::BuildAggregation(f, missing.data(), static_cast<uint8_t>(missing.size()),
                                         payload.data(), static_cast<uint32_t>(payload.size()),
                                         buf.data(), static_cast<uint32_t>(buf.size())),
            buf.size());
  return buf;
}

Bytes FirstData(uint32_t seq, const std::vector<int32_t>& values,
                const std::vector<uint16_t>& missing) {
  return Datagram(Opcode::kPartial, 0, 1, seq, values, missing);
}

Bytes LateData(uint32_t seq, uint16_t node, const std::vector<int32_t>& values) {
  return Datagram(Opcode::kLate, aggregator::flags::kBypass, node, seq, values, {});
}

struct Result {
  AggFields f;
  std::vector<uint16_t> missing;
  std::vector<int32_t> values;
};

Result ParseResult(const Bytes& b) {
  Result r;
  AggPacket pkt;
  EXPECT_EQ(aggregator::ParseAggregation(b.data(), static_cast<uint32_t>(b.size()), &pkt),
            aggregator::WireError::kOk);
  if (pkt.header == nullptr) return r;
  r.f = aggregator::ReadAggFields(*pkt.header);
  for (uint32_t i = 0; i < pkt.header->missing_count; ++i) r.missing.push_back(pkt.MissingNode(i));
  r.values.resize(pkt.payload_len / 4);
  std::memcpy(r.values.data(), pkt.payload, pkt.payload_len);
  return r;
}

// A PsServer on 127.0.0.1:<ephemeral> running in a thread until destroyed.
class RunningServer {
 public:
  explicit RunningServer(PsServerOptions options) {
    options.listen = *ParseListen("127.0.0.1:0");
    auto s = PsServer::Open(options);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) return;
    server_ = std::move(*s);
    thread_ = std::thread([this] { status_ = server_->Run(stop_); });
  }
  ~RunningServer() { Stop(); }
  // Stops the loop and joins it; the server's counters may be read after.
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  PsServer& server() { return *server_; }
  uint16_t port() const { return server_->port(); }
  const common::Status& status() const { return status_; }

 private:
  std::unique_ptr<PsServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  common::Status status_;
};

TEST(AggPsServerTest, MergesLateDataOverUdpAndAnswersTheRoot) {
  const std::string stats =
      ::testing::TempDir() + "/agg_ps_stats_" + std::to_string(getpid()) + ".json";
  PsServerOptions o;
  o.stats_path = stats;
  RunningServer s(o);
  ASSERT_NE(s.port(), 0);
  Peer root, leaf;
  root.SendTo(s.port(), FirstData(1, {76, -5}, {112}));
  leaf.SendTo(s.port(), Bytes{1, 2, 3});  // not a datagram of ours: counted, no answer
  EXPECT_FALSE(root.Receive(100)) << "nothing before the late data";
  // The late data comes from somewhere else; the result goes to the root.
  leaf.SendTo(s.port(), LateData(1, 112, {2, 5}));
  const std::optional<Bytes> got = root.Receive(5000);
  ASSERT_TRUE(got);
  const Result r = ParseResult(*got);
  EXPECT_EQ(r.f.opcode, Opcode::kResult);
  EXPECT_EQ(r.f.node_id, 0xFFFE);
  EXPECT_EQ(r.f.job_id, 7u);
  EXPECT_EQ(r.f.seq, 1u);
  EXPECT_EQ(r.f.job_key, kKey);
  EXPECT_EQ(r.f.flags, aggregator::flags::kVerified);  // the parameter node reduced it
  EXPECT_TRUE(r.missing.empty());
  EXPECT_EQ(r.values, (std::vector<int32_t>{78, 0}));
  EXPECT_FALSE(leaf.Receive(50));
  // A repeated first data gets the same result.
  root.SendTo(s.port(), FirstData(1, {76, -5}, {112}));
  const std::optional<Bytes> again = root.Receive(5000);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *got);

  s.Stop();
  EXPECT_TRUE(s.status().ok()) << s.status().message();
  const aggregator::TanCounters& c = s.server().engine().tan().counters();
  EXPECT_EQ(c.first_data, 2u);
  EXPECT_EQ(c.late, 1u);
  EXPECT_EQ(c.completed, 1u);
  EXPECT_EQ(c.repeat_first, 1u);
  EXPECT_EQ(s.server().socket_counters().parse_errors, 1u);
  EXPECT_EQ(s.server().socket_counters().rx_datagrams, 4u);
  EXPECT_EQ(s.server().socket_counters().tx_datagrams, 2u);
  // The stats file is written at exit, through a rename.
  const std::string json = ReadFile(stats);
  EXPECT_NE(json.find("\"completed\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"parse_errors\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"pending\": 0"), std::string::npos) << json;
  EXPECT_EQ(json, s.server().StatsJson());
  EXPECT_FALSE(std::ifstream(stats + ".tmp").good());
  std::remove(stats.c_str());
}

TEST(AggPsServerTest, GivesUpWithAnIncompleteResult) {
  PsServerOptions o;
  o.tan.give_up_ns = 100'000'000;  // 100 ms
  o.tan.trigger = aggregator::TanTrigger::kBatch;
  o.covers.push_back(*ParseCovers("7:100=0-3"));
  RunningServer s(o);
  Peer root, leaf;
  root.SendTo(s.port(), FirstData(5, {10}, {3, 0, 1, 2, 9}));
  leaf.SendTo(s.port(), Datagram(Opcode::kLate, aggregator::flags::kBypass, 100, 5, {1}, {2}));
  const std::optional<Bytes> got = root.Receive(5000);
  ASSERT_TRUE(got);
  const Result r = ParseResult(*got);
  EXPECT_EQ(r.f.opcode, Opcode::kResult);
  EXPECT_EQ(r.f.seq, 5u);
  EXPECT_EQ(r.f.flags, aggregator::flags::kIncomplete);
  EXPECT_EQ(r.missing, (std::vector<uint16_t>{2, 9}));
  EXPECT_EQ(r.values, std::vector<int32_t>{11});
  s.Stop();
  EXPECT_EQ(s.server().engine().tan().counters().gave_up, 1u);
  EXPECT_EQ(s.server().engine().tan().pending(), 0u);
}

// The TAN runs in a worker's process (case 2 of "the TAN is late"): the
// worker's own contribution is taken only once the first data lists it, and
// the result then goes to the root at once, from another thread than the loop.
TEST(AggPsServerTest, TakesTheOwnWorkersContributionOnceTheFirstDataListsIt) {
  RunningServer s(PsServerOptions{});
  Peer root, worker;
  s.server().SetOwnWorker({0x7f000001, worker.port()});
  const Bytes own = Datagram(Opcode::kContribution, 0, 121, 3, {5, 6}, {});
  EXPECT_FALSE(s.server().OfferOwn(own.data(), static_cast<uint32_t>(own.size())))
      << "no first data yet: the worker is not late";
  EXPECT_FALSE(s.server().OfferOwn(own.data(), 10)) << "a truncated datagram";
  root.SendTo(s.port(), FirstData(3, {70, 1}, {121}));
  bool taken = false;
  for (int i = 0; i < 500 && !taken; ++i) {  // until the loop has the first data
    taken = s.server().OfferOwn(own.data(), static_cast<uint32_t>(own.size()));
    if (!taken) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(taken);
  const std::optional<Bytes> got = root.Receive(5000);
  ASSERT_TRUE(got);
  const Result r = ParseResult(*got);
  EXPECT_EQ(r.f.opcode, Opcode::kResult);
  EXPECT_EQ(r.f.seq, 3u);
  EXPECT_EQ(r.values, (std::vector<int32_t>{75, 7}));
  // The worker gets it too; its switch does not know where it is.
  const std::optional<Bytes> to_worker = worker.Receive(5000);
  ASSERT_TRUE(to_worker);
  EXPECT_EQ(*to_worker, *got);
  // A retransmission once the chunk is done: taken, and the result goes to the worker again.
  EXPECT_TRUE(s.server().OfferOwn(own.data(), static_cast<uint32_t>(own.size())));
  const std::optional<Bytes> again = worker.Receive(5000);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *got);
  EXPECT_FALSE(root.Receive(50));
  const Bytes other = Datagram(Opcode::kContribution, 0, 122, 3, {5, 6}, {});
  EXPECT_FALSE(s.server().OfferOwn(other.data(), static_cast<uint32_t>(other.size())))
      << "not the node whose data it took";
  EXPECT_NE(s.server().StatsJson().find("\"own_data\": 1"), std::string::npos);
  s.Stop();
  EXPECT_EQ(s.server().engine().tan().counters().completed, 1u);
}

// A parameter-server job's first data: float32 gradient sums, nothing missing,
// aux the chunk's element offset.
Bytes GradientChunk(uint32_t seq, uint32_t offset, const std::vector<float>& grad) {
  AggFields f;
  f.opcode = Opcode::kPartial;
  f.node_id = 1;
  f.job_id = 7;
  f.seq = seq;
  f.job_key = kKey;
  f.dtype = aggregator::DType::kFloat32;
  f.aux = offset;
  f.elem_count = static_cast<uint16_t>(grad.size());
  Bytes payload(grad.size() * 4);
  std::memcpy(payload.data(), grad.data(), payload.size());
  Bytes buf(sizeof(aggregator::AggHeader) + payload.size());
  EXPECT_EQ(aggregator::BuildAggregation(f, nullptr, 0, payload.data(),
                                         static_cast<uint32_t>(payload.size()), buf.data(),
                                         static_cast<uint32_t>(buf.size())),
            buf.size());
  return buf;
}

std::vector<float> Floats(const Bytes& datagram) {
  AggPacket pkt;
  EXPECT_EQ(
      aggregator::ParseAggregation(datagram.data(), static_cast<uint32_t>(datagram.size()), &pkt),
      aggregator::WireError::kOk);
  std::vector<float> v(pkt.payload_len / 4);
  std::memcpy(v.data(), pkt.payload, pkt.payload_len);
  return v;
}

// --sgd 7=0.5: every chunk of job 7 comes as first data with nothing missing;
// the answers carry the parameters (-0.5 times the gradients so far, exact
// in float32), chunk by chunk at their offsets.
TEST(AggPsServerTest, SgdJobIsAnsweredWithTheUpdatedParameters) {
  PsServerOptions o;
  o.sgd.push_back(*ParseSgd("7=0.5"));
  RunningServer s(o);
  Peer root;
  const auto exchange = [&](uint32_t seq, uint32_t offset, const std::vector<float>& grad) {
    root.SendTo(s.port(), GradientChunk(seq, offset, grad));
    std::optional<Bytes> got = root.Receive(5000);
    EXPECT_TRUE(got) << "seq " << seq;
    return got.value_or(Bytes{});
  };
  // Iteration 1: chunks at offsets 0 and 3.
  const Bytes r1 = exchange(1, 0, {1.0f, 2.0f, -4.0f});
  const Result p1 = ParseResult(r1);
  EXPECT_EQ(p1.f.opcode, Opcode::kResult);
  EXPECT_EQ(p1.f.seq, 1u);
  EXPECT_EQ(p1.f.aux, 0u);
  EXPECT_EQ(p1.f.flags, aggregator::flags::kVerified);
  EXPECT_EQ(p1.f.dtype, aggregator::DType::kFloat32);
  EXPECT_EQ(Floats(r1), (std::vector<float>{-0.5f, -1.0f, 2.0f}));
  const Bytes r2 = exchange(2, 3, {8.0f, 0.25f});
  EXPECT_EQ(ParseResult(r2).f.aux, 3u);
  EXPECT_EQ(Floats(r2), (std::vector<float>{-4.0f, -0.125f}));
  // A repeated first data gets the same answer: the update is applied once.
  EXPECT_EQ(exchange(1, 0, {1.0f, 2.0f, -4.0f}), r1);
  // Iteration 2 (new seqs): the parameters accumulate.
  EXPECT_EQ(Floats(exchange(3, 0, {1.0f, 2.0f, -4.0f})), (std::vector<float>{-1.0f, -2.0f, 4.0f}));
  EXPECT_EQ(Floats(exchange(4, 3, {-8.0f, 0.25f})), (std::vector<float>{0.0f, -0.25f}));
  // An int32 sum (fixed point) is no gradient: refused, INCOMPLETE, nothing missing.
  root.SendTo(s.port(), FirstData(5, {10}, {}));
  const std::optional<Bytes> fixed = root.Receive(5000);
  ASSERT_TRUE(fixed);
  const Result pf = ParseResult(*fixed);
  EXPECT_EQ(pf.f.flags, aggregator::flags::kIncomplete);
  EXPECT_TRUE(pf.missing.empty());

  s.Stop();
  const SgdCounters& c = s.server().sgd().counters();
  EXPECT_EQ(c.updates, 4u);
  EXPECT_EQ(c.elements, 10u);
  EXPECT_EQ(c.refused, 1u);
  EXPECT_EQ(s.server().engine().tan().counters().completed, 4u);
  EXPECT_EQ(s.server().engine().tan().counters().completion_refused, 1u);
  const std::vector<float> params(s.server().sgd().Parameters(7).begin(),
                                  s.server().sgd().Parameters(7).end());
  EXPECT_EQ(params, (std::vector<float>{-1.0f, -2.0f, 4.0f, 0.0f, -0.25f}));
  const std::string json = s.server().StatsJson();
  EXPECT_NE(json.find("\"sgd_updates\": 4"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sgd_elements\": 10"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sgd_passed\": 0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sgd_refused\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"completion_refused\": 1"), std::string::npos) << json;
}

TEST(AggPsServerTest, SgdOptionErrorsNameTheOption) {
  PsServerOptions o;
  o.listen = *ParseListen("127.0.0.1:0");
  o.sgd = {{7, 0.5f}, {7, 0.1f}};
  auto twice = PsServer::Open(o);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("--sgd: job 7 given twice"), std::string::npos)
      << twice.status().message();
  o.sgd = {{7, 0.5f}};
  o.sgd_max_elems = 0;
  auto none = PsServer::Open(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--sgd-max-elems: expected 1.."), std::string::npos)
      << none.status().message();
}

TEST(AggPsServerTest, BindFailureNamesTheOption) {
  PsServerOptions o;
  o.listen = *ParseListen("192.0.2.1:47000");  // TEST-NET-1: not a local address
  auto s = PsServer::Open(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--listen 192.0.2.1:47000: cannot bind"), std::string::npos)
      << s.status().message();
}

// The binary: exit codes, messages, a clean stop, the stats file.
std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/agg_ps_" + std::to_string(getpid()) + "_" + name;
}

int RunToEnd(const std::vector<std::string>& argv, const std::string& log, std::string* output) {
  auto p = TestProcess::Start(argv, log);
  if (!p) return -1;
  const std::optional<int> code = p->Wait(10.0);
  *output = ReadFile(log);
  return code.value_or(-1);
}

TEST(AggPsBinaryTest, BadArgumentsAndBindFailureExit2WithAClearMessage) {
  const std::string log = TempPath("usage.log");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--covers", "7:100"}, "--covers: expected JOB:SWITCH=IDS"},
      {{"--listen", "1.2.3.4"}, "--listen: expected ADDR:PORT"},
      {{"--give-up-ms", "0"}, "--give-up-ms: expected 1..3600000"},
      {{"--trigger", "sometimes"}, "--trigger"},
      {{"--node-id", "70000"}, "--node-id: expected a node id 0..65535"},
      {{"--no-such-option"}, "no-such-option"},
      {{"--sgd", "7"}, "--sgd: expected JOB=LR"},
      {{"--sgd", "7=-1"}, "--sgd: expected JOB=LR"},
      {{"--sgd", "7=0.1", "--sgd", "7=0.2"}, "--sgd: job 7 given twice"},
      {{"--sgd-max-elems", "0"}, "--sgd-max-elems: expected 1..4294967296"},
      {{"--listen", "192.0.2.1:47000"}, "--listen 192.0.2.1:47000: cannot bind"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {AGG_PS_BIN};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::string output;
    EXPECT_EQ(RunToEnd(argv, log, &output), 2) << c.args[0] << ": " << output;
    EXPECT_NE(output.find(c.message), std::string::npos) << output;
  }
  std::string output;
  EXPECT_EQ(RunToEnd({AGG_PS_BIN, "--help"}, log, &output), 0);
  EXPECT_NE(output.find("--covers"), std::string::npos);
  EXPECT_NE(output.find("--sgd JOB=LR"), std::string::npos) << output;
  EXPECT_NE(output.find("--sgd-max-elems"), std::string::npos) << output;
  std::remove(log.c_str());
}

TEST(AggPsBinaryTest, ServesAndStopsCleanlyOnSigterm) {
  const std::string log = TempPath("serve.log");
  const std::string stats = TempPath("stats.json");
  const std::string metrics = TempPath("agg-ps.prom");
  std::remove(stats.c_str());
  std::remove(metrics.c_str());
  auto p = TestProcess::Start({AGG_PS_BIN, "--listen", "127.0.0.1:0", "--stats", stats,
                               "--metrics", metrics, "--give-up-ms", "200", "--covers",
                               "7:100=0-3"},
                              log);
  ASSERT_TRUE(p);
  // The log names the port it took.
  uint16_t port = 0;
  ASSERT_TRUE(WaitFor(10, [&] {
    const std::string text = ReadFile(log);
    const size_t at = text.find("on 127.0.0.1:");
    if (at == std::string::npos) return false;
    port = static_cast<uint16_t>(std::stoi(text.substr(at + 13)));
    return true;
  })) << ReadFile(log);
  ASSERT_TRUE(WaitFor(10, [&] { return !ReadFile(stats).empty(); }));
  Peer root;
  root.SendTo(port, FirstData(3, {40}, {0}));
  root.SendTo(port, LateData(3, 0, {2}));
  const std::optional<Bytes> got = root.Receive(5000);
  ASSERT_TRUE(got);
  EXPECT_EQ(ParseResult(*got).values, std::vector<int32_t>{42});
  p->Signal(SIGTERM);
  EXPECT_EQ(p->Wait(10.0), std::optional<int>(0)) << ReadFile(log);
  const std::string json = ReadFile(stats);
  EXPECT_NE(json.find("\"completed\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"late\": 1"), std::string::npos) << json;
  // The same counters for Prometheus, which promtool accepts.
  const std::string text = ReadFile(metrics);
  EXPECT_NE(text.find("# TYPE aggps_completed_total counter\naggps_completed_total 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE aggps_pending gauge\naggps_pending 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("aggps_verify_overflows_total 0\n"), std::string::npos) << text;
  const std::string check = TempPath("promtool.out");
  const int rc = std::system(("/usr/bin/promtool check metrics <" + metrics + " >" + check + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadFile(check);
  std::remove(check.c_str());
  std::remove(log.c_str());
  std::remove(stats.c_str());
  std::remove(metrics.c_str());
}

}  // namespace
}  // namespace aggswitch::tools
