#include "tools/agg-ps/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/atomic_file.h"
#include "common/log.h"
#include "common/prometheus.h"
#include "common/udp_bind.h"

namespace aggswitch::tools {

namespace {

using Clock = std::chrono::steady_clock;
using aggregator::TanOutput;

// Datagrams per recvmmsg; each buffer holds the largest UDP payload, so
// nothing is ever truncated (the engine refuses what exceeds max_payload).
constexpr uint32_t kBatch = 32;
constexpr uint32_t kBufferBytes = 65536;
// How long a full send buffer may hold one datagram up.
constexpr int kSendWaitMs = 10;

uint64_t NowNs(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

std::string ErrnoText() {
  return std::strerror(errno);
}

template <typename T>
bool ParseNumber(std::string_view text, T* value) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [next, ec] = std::from_chars(first, last, *value);
  return first != last && ec == std::errc() && next == last;
}

}  // namespace

common::Result<ListenAddress> ParseListen(std::string_view text) {
  const std::optional<common::Ipv4Endpoint> at = common::Ipv4Endpoint::Parse(text);
  if (!at) {
    return common::InvalidArgument(
        "--listen: expected ADDR:PORT (an IPv4 address and a port "
        "0..65535, e.g. 0.0.0.0:47000), got \"" +
        std::string(text) + "\"");
  }
  return ListenAddress{at->ip, at->port};
}

common::Result<std::vector<uint16_t>> ParseIdList(std::string_view text) {
  std::vector<uint16_t> ids;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string_view item =
        text.substr(at, comma == std::string_view::npos ? comma : comma - at);
    const size_t dash = item.find('-');
    uint16_t lo = 0, hi = 0;
    bool ok = dash == std::string_view::npos ? ParseNumber(item, &lo)
                                             : ParseNumber(item.substr(0, dash), &lo) &&
                                                   ParseNumber(item.substr(dash + 1), &hi);
    if (dash == std::string_view::npos) hi = lo;
    if (!ok || lo > hi) {
      return common::InvalidArgument("\"" + std::string(item) +
                                     "\" is not a node id (0..65535) or a range LO-HI");
    }
    for (uint32_t id = lo; id <= hi; ++id) ids.push_back(static_cast<uint16_t>(id));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

common::Result<CoverSpec> ParseCovers(std::string_view text) {
  const std::string expected =
      "--covers: expected JOB:SWITCH=IDS (IDS like 0-3,7), got \"" + std::string(text) + "\"";
  const size_t colon = text.find(':');
  const size_t equals = text.find('=');
  if (colon == std::string_view::npos || equals == std::string_view::npos || equals < colon) {
    return common::InvalidArgument(expected);
  }
  CoverSpec c;
  if (!ParseNumber(text.substr(0, colon), &c.job_id)) {
    return common::InvalidArgument(expected + ": JOB is not a job id (0..4294967295)");
  }
  if (!ParseNumber(text.substr(colon + 1, equals - colon - 1), &c.switch_node)) {
    return common::InvalidArgument(expected + ": SWITCH is not a node id (0..65535)");
  }
  auto ids = ParseIdList(text.substr(equals + 1));
  if (!ids.ok()) return common::InvalidArgument(expected + ": " + ids.status().message());
  c.ids = std::move(*ids);
  return c;
}

common::Result<PsJob> ParseJob(std::string_view text) {
  const std::string expected = "--job: expected JOB:KEY[:WORLD] (KEY decimal or 0x-hex, WORLD "
                               "the ranks 1..65535), got \"" + std::string(text) + "\"";
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos) return common::InvalidArgument(expected);
  const size_t second = text.find(':', colon + 1);
  PsJob job;
  if (!ParseNumber(text.substr(0, colon), &job.id) || job.id == 0) {
    return common::InvalidArgument(expected + ": JOB is not a job id (1..4294967295)");
  }
  std::string_view key = text.substr(colon + 1, second == std::string_view::npos
                                                    ? std::string_view::npos
                                                    : second - colon - 1);
  bool key_ok;
  if (key.substr(0, 2) == "0x" || key.substr(0, 2) == "0X") {
    const char* first = key.data() + 2;
    const char* last = key.data() + key.size();
    const auto [next, ec] = std::from_chars(first, last, job.key, 16);
    key_ok = first != last && ec == std::errc() && next == last;
  } else {
    key_ok = ParseNumber(key, &job.key);
  }
  if (!key_ok) return common::InvalidArgument(expected + ": KEY is not a 64-bit key");
  if (second != std::string_view::npos &&
      (!ParseNumber(text.substr(second + 1), &job.world) || job.world == 0)) {
    return common::InvalidArgument(expected + ": WORLD is not a rank count (1..65535)");
  }
  return job;
}

common::Result<PsJobPolicy> PsJobPolicy::Make(const std::vector<PsJob>& jobs, bool listed_only) {
  PsJobPolicy policy;
  policy.listed_only = listed_only;
  for (const PsJob& job : jobs) {
    if (!policy.jobs.emplace(job.id, job).second) {
      return common::InvalidArgument("--job: job " + std::to_string(job.id) + " is listed twice");
    }
  }
  return policy;
}

struct PsServer::Batch {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch];
  sockaddr_in from[kBatch];
};

common::Result<std::unique_ptr<PsServer>> PsServer::Open(const PsServerOptions& options) {
  if (options.sgd_max_elems == 0 || options.sgd_max_elems > SgdModel::kMaxMaxElems) {
    return common::InvalidArgument("--sgd-max-elems: expected 1.." +
                                   std::to_string(SgdModel::kMaxMaxElems) + " elements, got " +
                                   std::to_string(options.sgd_max_elems));
  }
  SgdModel sgd(options.sgd_max_elems);
  for (const SgdJob& job : options.sgd) {
    if (common::Status s = sgd.AddJob(job); !s.ok()) return s;
  }
  ASSIGN_OR_RETURN(PsJobPolicy jobs, PsJobPolicy::Make(options.jobs, options.listed_jobs_only));
  const std::string where =
      "--listen " + options.listen.ip.ToString() + ":" + std::to_string(options.listen.port);
  ASSIGN_OR_RETURN(const common::BoundUdp bound,
                   common::BindUdp(common::Ipv4Endpoint{options.listen.ip, options.listen.port}, where));
  const int fd = bound.fd;
  // DF like every aggregation datagram (docs/protocol.md: never fragmented).
  const int pmtu = IP_PMTUDISC_DO;
  setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
  std::unique_ptr<PsServer> server(new PsServer(options, std::move(sgd), fd, bound.port));
  server->jobs_ = std::move(jobs);
  return server;
}

PsServer::PsServer(const PsServerOptions& options, SgdModel sgd, int fd, uint16_t port)
    : options_(options),
      fd_(fd),
      port_(port),
      sgd_(std::move(sgd)),
      engine_(EngineOptions(options)),
      buffers_(size_t{kBatch} * kBufferBytes),
      batch_(std::make_unique<Batch>()) {
  for (const CoverSpec& c : options_.covers) engine_.SetCovers(c.job_id, c.switch_node, c.ids);
}

aggregator::PsOptions PsServer::EngineOptions(const PsServerOptions& options) {
  aggregator::PsOptions ps;
  ps.tan = options.tan;
  if (options.sgd.empty()) return ps;
  // The engine calls it with mu_ held (the loop, or OfferOwn), so the model
  // is only ever used under mu_.
  ps.tan.on_complete = [this](const aggregator::AggFields& f, std::span<uint8_t> payload) {
    return sgd_.Apply(f, payload);
  };
  return ps;
}

PsServer::~PsServer() {
  if (fd_ >= 0) close(fd_);
}

bool PsServer::MayWarn() {
  const Clock::time_point now = Clock::now();
  if (now - last_warning_ < std::chrono::seconds(1)) {
    ++suppressed_warnings_;
    return false;
  }
  if (suppressed_warnings_ > 0) {
    AGG_LOG(kWarning, "%lu similar warnings suppressed",
            static_cast<unsigned long>(suppressed_warnings_));
    suppressed_warnings_ = 0;
  }
  last_warning_ = now;
  return true;
}

common::Result<uint32_t> PsServer::ReceiveBatch(std::vector<TanOutput>* out) {
  Batch& b = *batch_;
  for (uint32_t i = 0; i < kBatch; ++i) {
    b.iov[i] = iovec{buffers_.data() + size_t{i} * kBufferBytes, kBufferBytes};
    msghdr& h = b.msgs[i].msg_hdr;
    h = msghdr{};
    h.msg_name = &b.from[i];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &b.iov[i];
    h.msg_iovlen = 1;
  }
  const int r = recvmmsg(fd_, b.msgs, kBatch, MSG_DONTWAIT, nullptr);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0u;
    return common::Unavailable("recvmmsg: " + ErrnoText());
  }
  const uint64_t now_ns = NowNs(Clock::now());
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < r; ++i) {
    const aggregator::TanPeer from{ntohl(b.from[i].sin_addr.s_addr), ntohs(b.from[i].sin_port)};
    HandleDatagram(buffers_.data() + size_t(i) * kBufferBytes, b.msgs[i].msg_len, from, now_ns,
                   engine_, counters_, out, &jobs_);
  }
  return static_cast<uint32_t>(r);
}

void HandleDatagram(const uint8_t* data, uint32_t length, const aggregator::TanPeer& from,
                    uint64_t now_ns, aggregator::PsEngine& engine, PsSocketCounters& counters,
                    std::vector<TanOutput>* out, const PsJobPolicy* jobs) {
  ++counters.rx_datagrams;
  aggregator::AggPacket pkt;
  const aggregator::WireError err = aggregator::ParseAggregation(data, length, &pkt);
  if (err != aggregator::WireError::kOk) {
    ++counters.parse_errors;
    AGG_LOG(kDebug, "dropped a datagram of %u bytes: %s", length, aggregator::WireErrorLabel(err));
    return;
  }
  if (jobs != nullptr && (!jobs->jobs.empty() || jobs->listed_only)) {
    const aggregator::AggHeader& h = *pkt.header;
    const auto it = jobs->jobs.find(h.job_id.host());
    if (it == jobs->jobs.end()) {
      if (jobs->listed_only) {
        ++counters.job_unlisted_refused;
        return;
      }
    } else {
      const PsJob& job = it->second;
      if (h.job_key.host() != job.key) {
        ++counters.job_key_refused;
        return;
      }
      // Data for the parameter node itself says how many ranks the whole
      // allreduce has: its members' own resends say the world, and a root
      // that could not give a chunk a slot (CONFLICT) its members, which at
      // a flat job's root are every rank. A VERIFY says the root's members,
      // workers and child switches, of which there are at most as many as
      // ranks.
      const uint16_t flags = h.flags.host();
      const uint16_t expected = h.expected.host();
      const bool direct = pkt.opcode == aggregator::Opcode::kContribution &&
                          (flags & aggregator::flags::kAggregateAtPs) != 0;
      const bool verify = pkt.opcode == aggregator::Opcode::kVerify;
      if (job.world != 0 && ((direct && expected != job.world) ||
                             (verify && (expected == 0 || expected > job.world)))) {
        ++counters.job_world_refused;
        return;
      }
    }
  }
  engine.OnDatagram(pkt, from, now_ns, out);
}

void PsServer::Send(const std::vector<TanOutput>& out) {
  for (const TanOutput& o : out) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(o.to.ip);
    to.sin_port = htons(o.to.port);
    bool waited = false;
    while (true) {
      const ssize_t n = sendto(fd_, o.datagram.data(), o.datagram.size(), MSG_DONTWAIT,
                               reinterpret_cast<const sockaddr*>(&to), sizeof(to));
      if (n >= 0) {
        ++counters_.tx_datagrams;
        AGG_LOG(kDebug, "sent %zu bytes to %s:%u", o.datagram.size(),
                common::Ipv4Addr{o.to.ip}.ToString().c_str(), o.to.port);
        break;
      }
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) && !waited) {
        pollfd p{fd_, POLLOUT, 0};
        poll(&p, 1, kSendWaitMs);
        waited = true;
        continue;
      }
      const bool full = errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS;
      ++(full ? counters_.tx_dropped : counters_.tx_errors);
      if (MayWarn()) {
        AGG_LOG(kWarning, "send %zu bytes to %s:%u: %s", o.datagram.size(),
                common::Ipv4Addr{o.to.ip}.ToString().c_str(), o.to.port, ErrnoText().c_str());
      }
      break;
    }
  }
}

common::Status PsServer::Run(const std::atomic<bool>& stop) {
  std::vector<TanOutput> out;
  Clock::time_point next_expire = Clock::now() + options_.expire_period;
  const bool files = !options_.stats_path.empty() || !options_.metrics_path.empty();
  Clock::time_point next_stats = files ? Clock::now() : Clock::time_point::max();
  common::Status status;
  while (!stop.load(std::memory_order_relaxed)) {
    auto got = ReceiveBatch(&out);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (now >= next_expire) {
        engine_.Expire(NowNs(now), &out);
        next_expire = now + options_.expire_period;
      }
      if (!out.empty()) {
        Send(out);
        out.clear();
      }
      if (now >= next_stats) {
        if (const common::Status s = WriteStatsLocked(); !s.ok() && MayWarn()) {
          AGG_LOG(kWarning, "%s", s.message().c_str());
        }
        next_stats = now + options_.stats_period;
      }
    }
    if (*got == kBatch) continue;  // more may be waiting
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(
        std::min(next_expire, next_stats) - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    // A signal interrupts the wait (EINTR), and the loop looks at `stop`.
    poll(&p, 1, static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 1000)));
  }
  if (files) {
    if (const common::Status s = WriteStats(); !s.ok())
      AGG_LOG(kWarning, "%s", s.message().c_str());
  }
  return status;
}

bool PsServer::OfferOwn(const uint8_t* datagram, uint32_t length) {
  aggregator::AggPacket pkt;
  if (aggregator::ParseAggregation(datagram, length, &pkt) != aggregator::WireError::kOk) {
    return false;
  }
  std::vector<TanOutput> out;
  std::lock_guard<std::mutex> lock(mu_);
  if (!engine_.OfferOwn(pkt, NowNs(Clock::now()), &out)) return false;
  Send(out);
  return true;
}

void PsServer::SetOwnWorker(const aggregator::TanPeer& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_.SetOwnWorker(worker);
}

std::string PsServer::StatsJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StatsJsonLocked();
}

common::Status PsServer::WriteStats() {
  std::lock_guard<std::mutex> lock(mu_);
  return WriteStatsLocked();
}

std::vector<PsServer::Stat> PsServer::StatsLocked() const {
  const aggregator::TanCounters& t = engine_.tan().counters();
  const aggregator::PsCounters& p = engine_.counters();
  constexpr bool kGauge = true, kCounter = false;
  return {
      {"first_data", t.first_data, kCounter, "first data (PARTIALs) received from root switches"},
      {"late", t.late, kCounter, "late data (LATEs, BYPASS contributions) received"},
      {"merged", t.merged, kCounter, "late data that resolved missing node ids"},
      {"duplicate_late", t.duplicate_late, kCounter, "late data that resolved nothing"},
      {"key_mismatch", t.key_mismatch, kCounter, "late or repeated first data with another key"},
      {"completed", t.completed, kCounter, "chunks completed from first data and late data"},
      {"gave_up", t.gave_up, kCounter, "INCOMPLETE results: first data still short at the give-up"},
      {"completion_refused", t.completion_refused, kCounter,
       "INCOMPLETE results: the --sgd model refused the chunk"},
      {"orphan_late", t.orphan_late, kCounter, "held late data whose first data never came"},
      {"late_after_done", t.late_after_done, kCounter, "late data for a finished chunk"},
      {"repeat_first", t.repeat_first, kCounter, "first data for a chunk already open or finished"},
      {"refused_full", t.refused_full, kCounter, "chunks or late data refused at the bounds"},
      {"malformed", t.malformed, kCounter, "first or late data the TAN could not use"},
      {"ignored", t.ignored, kCounter, "datagrams of opcodes the TAN does not take"},
      {"own_data", t.own_data, kCounter, "the own worker's contributions taken as late data"},
      {"own_repeats", t.own_repeats, kCounter, "the own worker's repeats of data taken already"},
      {"new_runs", t.new_runs, kCounter, "jobs seen under a new run label: their chunks forgotten"},
      {"run_ended", t.run_ended, kCounter, "datagrams under the label of a job's run that ended"},
      {"queries", t.queries, kCounter, "QUERYs from roots after chunks the TAN finished (answered again)"},
      {"by_members", t.by_members, kCounter, "outstanding switches resolved by every rank's own late data"},
      {"complete_again", t.complete_again, kCounter, "open chunks completed by a first data again with nothing missing"},
      {"pending", engine_.tan().pending(), kGauge, "chunks open at the TAN"},
      {"finished", engine_.tan().finished(), kGauge, "finished chunks' results kept for repeats"},
      {"held_lates", engine_.tan().held_lates(), kGauge, "late payloads held, all chunks"},
      {"direct", p.direct, kCounter, "contributions marked AGGREGATE_AT_PS or CONFLICT received"},
      {"conflicts", p.conflicts, kCounter, "contributions a root switch marked CONFLICT"},
      {"direct_to_tan", p.to_tan, kCounter, "direct contributions passed to the TAN as late data"},
      {"direct_reduced", p.reduced, kCounter, "chunks reduced here from direct contributions"},
      {"direct_gave_up", p.gave_up, kCounter,
       "INCOMPLETE results: direct contributions still short at the give-up"},
      {"direct_refused", p.refused, kCounter,
       "INCOMPLETE results: the --sgd model refused a chunk reduced from direct contributions"},
      {"direct_duplicates", p.duplicates, kCounter, "a node's second direct contribution to a chunk"},
      {"results_again", p.results_again, kCounter, "answers sent again for a finished chunk"},
      {"direct_queries", p.queries, kCounter, "QUERYs from roots answered with an answer given here"},
      {"direct_first_again", p.first_again, kCounter,
       "first data from roots for chunks answered here, answered again (not reduced twice)"},
      {"direct_key_mismatch", p.key_mismatch, kCounter,
       "direct contributions with another key than the chunk's first"},
      {"direct_malformed", p.malformed, kCounter,
       "direct contributions or VERIFYs with fields that disagree or are out of range"},
      {"direct_refused_full", p.refused_full, kCounter,
       "direct contributions or chunks refused at the bounds"},
      {"verify", p.verify, kCounter, "VERIFYs received from root switches (repeats included)"},
      {"verified", p.verified, kCounter, "VERIFYs answered with a RESULT flagged VERIFIED"},
      {"verify_omissions", p.verify_omissions, kCounter,
       "VERIFYs that lacked members: no answer, the members' resends complete the chunk"},
      {"verify_to_tan", p.verify_to_tan, kCounter,
       "VERIFYs that lacked members and listed them: kept as the TAN's first data"},
      {"verify_overflows", p.verify_overflows, kCounter,
       "VERIFYs with a saturated sum: answered EXCEPTION_RETRANSMIT"},
      {"direct_pending", engine_.pending(), kGauge, "chunks of direct contributions waiting for more"},
      {"direct_kept", engine_.kept(), kGauge, "direct contributions kept, all chunks"},
      {"direct_finished", engine_.finished(), kGauge, "answers of chunks finished here, kept for repeats"},
      {"sgd_updates", sgd_.counters().updates, kCounter, "--sgd model updates (chunks applied)"},
      {"sgd_elements", sgd_.counters().elements, kCounter, "--sgd parameters updated"},
      {"sgd_passed", sgd_.counters().passed, kCounter, "--sgd job chunks passed through (not sums)"},
      {"sgd_refused", sgd_.counters().refused, kCounter, "--sgd job chunks refused (INCOMPLETE)"},
      {"rx_datagrams", counters_.rx_datagrams, kCounter, "datagrams received"},
      {"parse_errors", counters_.parse_errors, kCounter, "datagrams that are no aggregation packet"},
      {"tx_datagrams", counters_.tx_datagrams, kCounter, "datagrams sent"},
      {"tx_errors", counters_.tx_errors, kCounter, "datagrams the kernel refused to send"},
      {"tx_dropped", counters_.tx_dropped, kCounter, "datagrams dropped: the send buffer stayed full"},
      {"stats_errors", counters_.stats_errors, kCounter,
       "stats or metrics files that could not be written"},
      {"job_key_refused", counters_.job_key_refused, kCounter,
       "datagrams of a --job with another key than its own"},
      {"job_world_refused", counters_.job_world_refused, kCounter,
       "data for the parameter node (CONFLICT included) of a --job that says another world than its own, or a VERIFY counting more members than it has ranks"},
      {"job_unlisted_refused", counters_.job_unlisted_refused, kCounter,
       "datagrams of jobs not listed by --job (--listed-jobs-only)"},
  };
}

std::string PsServer::StatsJsonLocked() const {
  std::string json = "{";
  for (const Stat& s : StatsLocked()) {
    if (json.size() > 1) json += ", ";
    json += "\"" + std::string(s.name) + "\": " + std::to_string(s.value);
  }
  json += "}\n";
  return json;
}

std::string PsServer::MetricsTextLocked() const {
  common::PrometheusExposition out;
  for (const Stat& s : StatsLocked()) {
    const std::string name = "aggps_" + std::string(s.name) + (s.gauge ? "" : "_total");
    out.Family(name, s.gauge ? "gauge" : "counter", s.help);
    out.Sample(name, {}, s.value);
  }
  return out.Take();
}

std::string PsServer::MetricsText() const {
  std::lock_guard<std::mutex> lock(mu_);
  return MetricsTextLocked();
}

common::Status PsServer::WriteFileLocked(const char* option, const std::string& path,
                                         const std::string& content) {
  const common::Status written = common::WriteFileAtomically(path, content);
  if (!written.ok()) {
    ++counters_.stats_errors;
    return common::Unavailable(std::string(option) + " " + written.message());
  }
  return common::Status::Ok();
}

common::Status PsServer::WriteStatsLocked() {
  common::Status status;
  if (!options_.stats_path.empty()) {
    status = WriteFileLocked("--stats", options_.stats_path, StatsJsonLocked());
  }
  if (!options_.metrics_path.empty()) {
    const common::Status s = WriteFileLocked("--metrics", options_.metrics_path, MetricsTextLocked());
    if (status.ok()) status = s;
  }
  return status;
}

}  // namespace aggswitch::tools
