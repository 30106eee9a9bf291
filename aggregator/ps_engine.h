// The parameter node's engine (agg-ps; docs/parameter-node.md): the timeout
// aggregation node (TanEngine) plus what only a parameter node does, the
// aggregation of contributions no switch reduced. It does no I/O: the caller
// parses datagrams (wire.h), feeds them in with their source and the time,
// and sends the datagrams it gets back.
//
//   PsEngine ps(PsOptions{.tan = {.give_up_ns = 5'000'000'000}});
//   std::vector<TanOutput> out;
//   ps.OnDatagram(pkt, from, now_ns, &out);
//   ps.Expire(now_ns, &out);                               // every ~10 ms
//   for (const TanOutput& o : out) send(o.to, o.datagram);
//
// Datagrams:
//   * A CONTRIBUTION with AGGREGATE_AT_PS (a member's, which the switches
//     only forwarded) or CONFLICT (a root switch had no slot for its chunk):
//     direct data of node `node_id`, one of the chunk's `expected` members.
//     - When the TAN has the chunk open (first data in), it goes to the TAN
//       as that node's late data; when the TAN has finished the chunk, its
//       result goes again to the sender.
//     - Otherwise it is kept, one per node (a second one from the same node
//       is a duplicate), until either the chunk's first data comes (then every
//       kept contribution goes to the TAN as late data, in node order: the
//       first data covers some of them, the rest resolve outstanding ids) or
//       `expected` distinct nodes are in: then they are reduced here, in
//       ascending node id (the same bits whatever the arrival order), the
//       TAN's completion hook (TanOptions::on_complete: agg-ps --sgd) sees
//       the sum as it sees the TAN's, and one RESULT goes to the first one's
//       sender: VERIFIED, or OVERFLOW when a sum saturated (here, or an input
//       said so), or INCOMPLETE when the hook refused it. A chunk still
//       short give_up_ns after its first contribution gets a RESULT with
//       INCOMPLETE (no missing list: the engine knows how many members the
//       chunk has, not which).
//     First data (a PARTIAL) for a chunk answered here is answered the
//     same way, not reduced again at the TAN.
//     Every kept contribution of a chunk must carry the first one's key,
//     dtype, op, scale, elem_count and expected (else counted malformed or
//     key_mismatch). A finished chunk's result is kept for give_up_ns and
//     sent again to a sender that repeats itself.
//   * A VERIFY (verify mode, or a sum that saturated at the root): the root
//     switch's reduction of chunk (job, seq), to be checked before the
//     members get it.
//     - Omission: its missing list is not empty, or `node_count` (the
//       members it counts) is not `expected` (the root's members). Nothing is sent: the
//       members' timers recover it. With a missing list it is the TAN's first
//       data (the members' resends, marked AGGREGATE_AT_PS, complete it
//       there); without one it is dropped.
//     - Overflow (the OVERFLOW flag: a sum saturated): EXCEPTION_RETRANSMIT
//       to the sender, carrying the saturated sum, flagged OVERFLOW. The
//       members redo the chunk in float32, marked AGGREGATE_AT_PS, which is
//       direct data here.
//     - Else a RESULT with VERIFIED, the same payload.
//     The answer is kept for give_up_ns and sent again to a repeat.
//   * Runs: the TAN's rule (tan_engine.h) holds for every datagram; a new
//     run of a job forgets its kept contributions and answers here too.
//   * Anything else goes to the TAN (tan_engine.h), which ignores what it does
//     not know. The TAN's complete results that no sum saturated in carry
//     VERIFIED too: the parameter node reduced them.
//
// Memory is bounded like the TAN's: at most tan.max_pending chunks of kept
// contributions (and as many finished results), at most tan.max_held_lates
// contributions kept in all, payloads of at most tan.max_payload bytes.
//
// Thread safety: [any single thread; not thread-safe]. Control-side code: it
// allocates, never blocks, and throws nothing of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregator/tan_engine.h"
#include "aggregator/wire.h"

namespace aggswitch::aggregator {

struct PsOptions {
  TanOptions tan;  // the TAN's; give_up_ns, max_pending, max_held_lates and max_payload bind both
};

// Event counts since construction, on top of the TAN's (TanCounters).
struct PsCounters {
  uint64_t direct = 0;          // contributions with AGGREGATE_AT_PS or CONFLICT received
  uint64_t conflicts = 0;       // ... of which a switch marked CONFLICT
  uint64_t to_tan = 0;          // direct contributions passed to the TAN as late data
  uint64_t reduced = 0;         // chunks reduced here from direct contributions
  uint64_t gave_up = 0;         // INCOMPLETE results for chunks still short at the give-up
  uint64_t refused = 0;         // INCOMPLETE results: the TAN's completion hook refused the chunk
  uint64_t duplicates = 0;      // a node's second direct contribution to a chunk
  uint64_t results_again = 0;   // results sent again for a finished chunk
  uint64_t first_again = 0;     // a root's first data for a chunk answered here: answered again
  uint64_t key_mismatch = 0;    // another key than the chunk's first contribution
  uint64_t malformed = 0;       // expected 0, node_id >= 65535, fields differ, too large
  uint64_t refused_full = 0;    // chunks or contributions refused at the bounds
  uint64_t verify = 0;          // VERIFYs received (repeats included)
  uint64_t verified = 0;        // ... answered with a RESULT flagged VERIFIED
  uint64_t verify_omissions = 0;  // ... that lacked members: no answer
  uint64_t verify_to_tan = 0;     // ... of those, passed to the TAN as first data (a missing list)
  uint64_t verify_overflows = 0;  // ... with a saturated sum: EXCEPTION_RETRANSMIT sent
  // QUERYs (a root asking after a chunk it no longer holds) answered with an
  // answer given here; the TAN answers those for its own chunks.
  uint64_t queries = 0;
};

class PsEngine {
 public:
  explicit PsEngine(const PsOptions& options);

  // TanEngine::SetCovers.
  void SetCovers(uint32_t job_id, uint16_t switch_node, std::vector<uint16_t> ids) {
    tan_.SetCovers(job_id, switch_node, std::move(ids));
  }
  // One parsed datagram (ParseAggregation returned kOk) from `from` at
  // `now_ns` (steady clock). Appends what to send to `out`.
  void OnDatagram(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                  std::vector<TanOutput>* out);
  // TanEngine::OfferOwn and SetOwnWorker.
  bool OfferOwn(const AggPacket& pkt, uint64_t now_ns, std::vector<TanOutput>* out) {
    return tan_.OfferOwn(pkt, now_ns, out);
  }
  void SetOwnWorker(const TanPeer& worker) { tan_.SetOwnWorker(worker); }
  // The TAN's Expire, then: gives up on chunks of kept contributions older
  // than give_up_ns and forgets results kept longer than that.
  void Expire(uint64_t now_ns, std::vector<TanOutput>* out);

  const TanEngine& tan() const { return tan_; }
  const PsCounters& counters() const { return counters_; }
  // Chunks of kept contributions waiting for more.
  size_t pending() const { return chunks_.size(); }
  // Contributions kept, all chunks together.
  size_t kept() const { return kept_; }
  // Results of chunks reduced (or given up) here, kept for repeats.
  size_t finished() const { return done_.size(); }

 private:
  struct ChunkId {
    uint32_t job_id = 0;
    uint32_t seq = 0;
    friend auto operator<=>(const ChunkId&, const ChunkId&) = default;
  };
  struct Chunk {
    AggFields fields;  // the first contribution's
    TanPeer reply_to;
    uint64_t deadline_ns = 0;
    // The direct contributions, whole datagrams as received, by node id.
    std::map<uint16_t, std::vector<uint8_t>> kept;
  };
  struct Done {
    std::vector<uint8_t> result;
    uint64_t deadline_ns = 0;
  };

  void OnDirect(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                std::vector<TanOutput>* out);
  void OnVerify(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                std::vector<TanOutput>* out);
  // Keeps `answer` as chunk `id`'s, to be sent again to a repeat.
  void Keep(const ChunkId& id, std::vector<uint8_t> answer, uint64_t now_ns);
  // Passes one direct contribution to the TAN as node `node`'s late data.
  void ToTan(const std::vector<uint8_t>& datagram, const TanPeer& from, uint64_t now_ns,
             std::vector<TanOutput>* out);
  // Every kept contribution of `id` to the TAN, once it has the chunk open or
  // finished; forgets the chunk here.
  void HandOver(const ChunkId& id, uint64_t now_ns, std::vector<TanOutput>* out);
  // Reduces the kept contributions (all in: a RESULT with VERIFIED; else
  // INCOMPLETE), sends it, keeps it, forgets the contributions.
  void Finish(const ChunkId& id, Chunk& c, bool complete, uint64_t now_ns,
              std::vector<TanOutput>* out);
  void Forget(std::map<ChunkId, Chunk>::iterator it);
  // Forgets every chunk and kept answer of job `job_id` (a new run of it).
  void ForgetJob(uint32_t job_id);

  PsOptions options_;
  TanEngine tan_;
  PsCounters counters_;
  size_t kept_ = 0;
  std::map<ChunkId, Chunk> chunks_;
  std::set<std::pair<uint64_t, ChunkId>> deadlines_;  // chunks_ by give-up time
  std::map<ChunkId, Done> done_;
  std::set<std::pair<uint64_t, ChunkId>> done_deadlines_;
};

}  // namespace aggswitch::aggregator
