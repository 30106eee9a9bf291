// tan_fuzz: agg-ps's datagram handling (tools::HandleDatagram, the step its
// poll loop runs for every datagram it receives) and the parameter node's
// engine behind it (aggregator/ps_engine.h: the timeout aggregation node and
// the aggregation of direct contributions), on sequences of
// datagrams from several peers with a simulated clock, so that give-ups,
// held lates and forgotten results all happen.
//
// Input: one option byte, then records, each a control byte and a datagram
// (a big-endian 16-bit length, then the bytes).
//   option byte: bit 0 batch trigger (else incremental); bit 1 job 7 is an
//     --sgd job (its SgdModel is the completion hook, as PsServer wires it);
//     bit 2 --covers 7:100=0-3; bits 3-4 max_pending 4096 (the default), 64,
//     8 or 2; bits 5-6 max_held_lates 16384 (the default), 32, 4 or 1; bit 7
//     an own worker
//     (SetOwnWorker) receives the results of chunks that took its data.
//     0: agg-ps's defaults.
//   control byte: bits 0-2 how far the clock moves before the datagram (0,
//     1 us, 1 ms, 10 ms, give_up/2, give_up, give_up + 1 ns, 3 give_up;
//     Expire runs whenever 10 ms, the loop's expire period, have passed);
//     bits 3-4 the sender (two roots, a worker, a child switch); bit 5
//     repairs the header (magic, version, opcode, dtype/op, and counts that
//     fit the datagram) so that mutations reach the engine; bit 6 offers it
//     as the own worker's contribution (PsServer::OfferOwn) instead; bit 7
//     delivers it twice.
//
// Invariants, each a finding when broken:
//   * every datagram sent parses, is a RESULT from the TAN's node id with
//     only OVERFLOW, ORDERED, INCOMPLETE and VERIFIED flags, a sorted missing
//     list only when INCOMPLETE, and the job key, elem_count, dtype, op,
//     scale and aux of a first data or direct contribution of its chunk;
//   * it goes to a sender of that chunk's first data or direct data, to one
//     that asked after it (QUERY), or to the own worker;
//   * it is no longer than max(that first data, 1472 bytes);
//   * the engine stays within max_pending chunks (open and finished, of the
//     TAN and of direct data) and max_held_lates held payloads (each), and
//     its counters add up: every datagram handled is counted once, as first
//     data, late, query, ignored or direct (direct data passed on to the TAN is
//     counted late there too, and to_tan here);
//   * once give_up_ns has passed with no traffic every chunk is given up or
//     forgotten, and after another give_up_ns every result too.
#include <algorithm>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "aggregator/ps_engine.h"
#include "common/log.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/agg-ps/server.h"
#include "tools/agg-ps/sgd.h"

namespace aggswitch::tools {
namespace {

using aggregator::AggFields;
using aggregator::AggHeader;
using aggregator::AggPacket;
using aggregator::TanOutput;
using aggregator::TanPeer;
using aggregator::WireError;

constexpr uint64_t kGiveUpNs = 50'000'000;
constexpr uint64_t kExpirePeriodNs = 10'000'000;  // PsServerOptions::expire_period
constexpr uint32_t kPlainMtuPayload = 1472;
constexpr uint16_t kTanNode = 0xFFFE;  // TanOptions::node_id's default
constexpr uint64_t kSgdMaxElems = 4096;
const TanPeer kPeers[] = {
    {0x0a000901, 47000}, {0x0a000902, 47000}, {0x0a000a0a, 40000}, {0x0a000a01, 47000}};
const TanPeer kOwnWorker{0x0a000063, 40099};

// What the harness saw of a chunk's first data or direct data.
struct FirstData {
  uint64_t key;
  uint16_t elem_count;
  uint8_t dtype, op;
  int8_t scale;
  uint32_t aux;
  bool final;  // a FINAL partial: the answer may carry FINAL on
  TanPeer from;
};
struct Seen {
  std::vector<FirstData> firsts;  // and direct contributions
  std::vector<TanPeer> askers;    // QUERYs' sources: a finished chunk's result goes to them
  uint32_t max_len = 0;  // the longest first data (header, missing list, payload)
};
using ChunkKey = std::pair<uint32_t, uint32_t>;

// Makes a datagram of at least 52 bytes a valid one, keeping as much as it can.
void Repair(std::vector<uint8_t>& d) {
  if (d.size() < sizeof(AggHeader)) return;
  auto* h = reinterpret_cast<AggHeader*>(d.data());
  h->magic = common::be16_t::FromHost(aggregator::kAggMagic);
  h->version = aggregator::kAggVersion;
  if (h->opcode == 0 || h->opcode > aggregator::kMaxOpcode) h->opcode = 1 + h->opcode % 4;
  h->dtype %= aggregator::kNumDTypes;
  h->op %= aggregator::kNumReduceOps;
  const auto dtype = static_cast<aggregator::DType>(h->dtype);
  if (!aggregator::IsValid(dtype, static_cast<aggregator::ReduceOp>(h->op))) {
    h->op = static_cast<uint8_t>(dtype == aggregator::DType::kBool ? aggregator::ReduceOp::kOr
                                                                   : aggregator::ReduceOp::kSum);
  }
  const size_t room = d.size() - sizeof(AggHeader);
  h->missing_count = static_cast<uint8_t>(std::min<size_t>(h->missing_count, room / 2));
  const size_t payload_room = room - 2u * h->missing_count;
  const size_t fit = payload_room / aggregator::ElementSize(dtype);
  h->elem_count =
      common::be16_t::FromHost(static_cast<uint16_t>(std::min<size_t>(h->elem_count.host(), fit)));
}

class Harness {
 public:
  explicit Harness(uint8_t opt)
      : sgd_(kSgdMaxElems),
        engine_(Options(opt)),
        max_pending_(Options(opt).tan.max_pending),
        max_held_(Options(opt).tan.max_held_lates) {
    if (opt & 0x02) FUZZ_CHECK(sgd_.AddJob(*ParseSgd("7=0.5")).ok());
    if (opt & 0x04) {
      const common::Result<CoverSpec> c = ParseCovers("7:100=0-3");
      FUZZ_CHECK(c.ok());
      engine_.SetCovers(c->job_id, c->switch_node, c->ids);
    }
    if (opt & 0x80) {
      engine_.SetOwnWorker(kOwnWorker);
      own_worker_ = true;
    }
  }

  void Step(uint8_t ctl, std::span<const uint8_t> bytes) {
    static constexpr uint64_t kAdvance[] = {
        0, 1'000, 1'000'000, 10'000'000, kGiveUpNs / 2, kGiveUpNs, kGiveUpNs + 1, 3 * kGiveUpNs};
    Advance(kAdvance[ctl & 7]);
    const TanPeer from = kPeers[(ctl >> 3) & 3];
    std::vector<uint8_t> d(bytes.begin(), bytes.end());
    if (ctl & 0x20) Repair(d);
    const int times = ctl & 0x80 ? 2 : 1;
    for (int i = 0; i < times; ++i) {
      if (ctl & 0x40) {
        OfferOwn(d);
      } else {
        Handle(d, from);
      }
    }
  }

  // No traffic for give_up_ns: nothing may stay open or held; then no result
  // may stay remembered either.
  void Drain() {
    Advance(kGiveUpNs + 1);
    Expire();
    FUZZ_CHECK(engine_.tan().pending() == 0 && engine_.tan().held_lates() == 0);
    FUZZ_CHECK(engine_.pending() == 0 && engine_.kept() == 0);
    Advance(kGiveUpNs + 1);
    Expire();
    FUZZ_CHECK(engine_.tan().finished() == 0 && engine_.finished() == 0);
  }

 private:
  aggregator::PsOptions Options(uint8_t opt) {
    static constexpr size_t kPending[] = {4096, 64, 8, 2};
    static constexpr size_t kHeld[] = {16384, 32, 4, 1};
    aggregator::PsOptions ps;
    aggregator::TanOptions& o = ps.tan;
    o.give_up_ns = kGiveUpNs;
    o.trigger = opt & 0x01 ? aggregator::TanTrigger::kBatch : aggregator::TanTrigger::kIncremental;
    o.max_pending = kPending[(opt >> 3) & 3];
    o.max_held_lates = kHeld[(opt >> 5) & 3];
    if (opt & 0x02) {  // as PsServer::EngineOptions wires it
      o.on_complete = [this](const AggFields& f, std::span<uint8_t> payload) {
        return sgd_.Apply(f, payload);
      };
    }
    return ps;
  }

  void Advance(uint64_t ns) {
    now_ += ns;
    if (now_ - last_expire_ >= kExpirePeriodNs) Expire();
  }

  void Expire() {
    std::vector<TanOutput> out;
    engine_.Expire(now_, &out);
    last_expire_ = now_;
    Check(out);
  }

  void Handle(const std::vector<uint8_t>& d, const TanPeer& from) {
    AggPacket pkt;
    const bool ok = aggregator::ParseAggregation(d.data(), static_cast<uint32_t>(d.size()), &pkt) ==
                    WireError::kOk;
    if (ok) Record(pkt, from);
    const aggregator::TanCounters before = engine_.tan().counters();
    const aggregator::PsCounters ps_before = engine_.counters();
    const PsSocketCounters socket_before = socket_;
    std::vector<TanOutput> out;
    HandleDatagram(d.data(), static_cast<uint32_t>(d.size()), from, now_, engine_, socket_, &out);
    FUZZ_CHECK(socket_.rx_datagrams == socket_before.rx_datagrams + 1);
    FUZZ_CHECK(socket_.parse_errors == socket_before.parse_errors + (ok ? 0 : 1));
    const aggregator::TanCounters& after = engine_.tan().counters();
    const aggregator::PsCounters& ps_after = engine_.counters();
    // Each parsed datagram is counted once: by its kind, or as one of a run
    // that ended here.
    const uint64_t classified = (after.first_data - before.first_data) +
                                (after.late - before.late) + (after.ignored - before.ignored) +
                                (after.run_ended - before.run_ended) +
                                (after.queries - before.queries) +
                                (ps_after.queries - ps_before.queries) +
                                (ps_after.first_again - ps_before.first_again) +
                                (ps_after.direct - ps_before.direct) -
                                (ps_after.to_tan - ps_before.to_tan) +
                                (ps_after.verify - ps_before.verify) -
                                (ps_after.verify_to_tan - ps_before.verify_to_tan);
    FUZZ_CHECK(classified == (ok ? 1u : 0u));
    Check(out);
  }

  void OfferOwn(const std::vector<uint8_t>& d) {
    AggPacket pkt;
    if (aggregator::ParseAggregation(d.data(), static_cast<uint32_t>(d.size()), &pkt) !=
        WireError::kOk) {
      return;  // PsServer::OfferOwn: not taken
    }
    std::vector<TanOutput> out;
    const bool taken = engine_.OfferOwn(pkt, now_, &out);
    if (!taken) FUZZ_CHECK(out.empty());
    Check(out);
  }

  void Record(const AggPacket& pkt, const TanPeer& from) {
    const bool direct =
        pkt.opcode == aggregator::Opcode::kContribution &&
        (pkt.header->flags.host() &
         (aggregator::flags::kAggregateAtPs | aggregator::flags::kConflict)) != 0;
    if (pkt.opcode == aggregator::Opcode::kQuery) {
      seen_[{pkt.header->job_id.host(), pkt.header->seq.host()}].askers.push_back(from);
      return;
    }
    if (pkt.opcode != aggregator::Opcode::kPartial && pkt.opcode != aggregator::Opcode::kVerify &&
        !direct) {
      return;
    }
    const AggHeader& h = *pkt.header;
    Seen& s = seen_[{h.job_id.host(), h.seq.host()}];
    s.firsts.push_back({h.job_key.host(), h.elem_count.host(), h.dtype, h.op, h.scale,
                        h.aux.host(), (h.flags.host() & aggregator::flags::kFinal) != 0, from});
    const uint32_t len =
        static_cast<uint32_t>(sizeof(AggHeader)) + 2u * h.missing_count + pkt.payload_len;
    s.max_len = std::max(s.max_len, len);
  }

  void Check(const std::vector<TanOutput>& out) {
    for (const TanOutput& o : out) CheckResult(o);
    const aggregator::TanEngine& tan = engine_.tan();
    FUZZ_CHECK(tan.pending() <= max_pending_ && tan.finished() <= max_pending_);
    FUZZ_CHECK(tan.held_lates() <= max_held_);
    FUZZ_CHECK(engine_.pending() <= max_pending_ && engine_.finished() <= max_pending_);
    FUZZ_CHECK(engine_.kept() <= max_held_);
    const aggregator::TanCounters& c = tan.counters();
    FUZZ_CHECK(c.completed + c.gave_up + c.completion_refused <= c.first_data);
    const aggregator::PsCounters& p = engine_.counters();
    FUZZ_CHECK(p.reduced + p.gave_up <= p.direct && p.to_tan <= p.direct);
    FUZZ_CHECK(p.verified + p.verify_omissions + p.verify_overflows <= p.verify);
    FUZZ_CHECK(p.verify_to_tan <= p.verify_omissions);
    FUZZ_CHECK(sgd_.Parameters(7).size() <= kSgdMaxElems);
  }

  void CheckResult(const TanOutput& o) {
    AggPacket pkt;
    FUZZ_CHECK(aggregator::ParseAggregation(o.datagram.data(),
                                            static_cast<uint32_t>(o.datagram.size()),
                                            &pkt) == WireError::kOk);
    const AggHeader& h = *pkt.header;
    FUZZ_CHECK((pkt.opcode == aggregator::Opcode::kResult ||
                pkt.opcode == aggregator::Opcode::kExceptionRetransmit) &&
               h.node_id.host() == kTanNode);
    const uint16_t fl = h.flags.host();
    namespace flags = aggregator::flags;
    // An exception is a saturated sum, and says so (FINAL kept from its VERIFY).
    FUZZ_CHECK(pkt.opcode != aggregator::Opcode::kExceptionRetransmit ||
               (fl & ~(flags::kFinal | flags::kRecovered)) == flags::kOverflow);
    FUZZ_CHECK((fl & ~(flags::kOverflow | flags::kOrdered | flags::kIncomplete |
                       flags::kVerified | flags::kFinal | flags::kRecovered)) == 0);
    FUZZ_CHECK(h.missing_count == 0 || (fl & flags::kIncomplete) != 0);
    for (uint32_t i = 1; i < h.missing_count; ++i) {
      FUZZ_CHECK(pkt.MissingNode(i - 1) < pkt.MissingNode(i));
    }
    FUZZ_CHECK(o.datagram.size() == sizeof(AggHeader) + 2u * h.missing_count + pkt.payload_len);

    const auto it = seen_.find({h.job_id.host(), h.seq.host()});
    FUZZ_CHECK(it != seen_.end());
    const Seen& s = it->second;
    FUZZ_CHECK(o.datagram.size() <= std::max(s.max_len, kPlainMtuPayload));
    bool matches = false, sender = own_worker_ && o.to == kOwnWorker, final = false;
    for (const FirstData& f : s.firsts) {
      final = final || f.final;
      matches = matches ||
                (f.key == h.job_key.host() && f.elem_count == h.elem_count.host() &&
                 f.dtype == h.dtype && f.op == h.op && f.scale == h.scale && f.aux == h.aux.host());
      sender = sender || f.from == o.to;
    }
    for (const TanPeer& asker : s.askers) sender = sender || asker == o.to;
    FUZZ_CHECK(matches);
    FUZZ_CHECK(sender);
    // FINAL is copied from a partial that carried it, never invented.
    FUZZ_CHECK((fl & flags::kFinal) == 0 || final);
  }

  SgdModel sgd_;  // before engine_: its hook points here
  aggregator::PsEngine engine_;
  PsSocketCounters socket_;
  const size_t max_pending_;
  const size_t max_held_;
  bool own_worker_ = false;
  uint64_t now_ = 1'000'000'000;
  uint64_t last_expire_ = 1'000'000'000;
  std::map<ChunkKey, Seen> seen_;
};

}  // namespace
}  // namespace aggswitch::tools

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  aggswitch::common::SetLogLevel(aggswitch::common::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  aggswitch::fuzz::FuzzReader in(data, size);
  aggswitch::tools::Harness harness(in.Byte());
  while (!in.empty()) {
    const uint8_t ctl = in.Byte();
    harness.Step(ctl, in.Record());
  }
  harness.Drain();
  return 0;
}
