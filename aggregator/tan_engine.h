// The timeout aggregation node (TAN): merges a root switch's partial result
// with the late data of the members it timed out on (docs/stragglers.md, "The
// timeout aggregation node"). The same engine runs in the switch's control
// thread (`tan: {strategy: self}`) and in `agg-ps` (tools/agg-ps); it does no
// I/O: the caller parses datagrams (wire.h), feeds them in with their source
// and the time, and sends the datagrams it gets back.
//
//   TanEngine tan(TanOptions{.give_up_ns = 5'000'000'000, .trigger = TanTrigger::kBatch});
//   std::vector<TanOutput> out;
//   AggPacket pkt;
//   if (ParseAggregation(data, len, &pkt) == WireError::kOk) {
//     tan.OnDatagram(pkt, from, now_ns, &out);
//   }
//   tan.Expire(now_ns, &out);                            // every ~10 ms
//   for (const TanOutput& o : out) send(o.to, o.datagram);
//
// Per chunk (job id, seq):
//   * First data: a PARTIAL from the root: its payload (the root's reduction),
//     its missing list (node ids still outstanding), its job key. The RESULT
//     goes back to where the first data came from (`from`). A first data
//     again while the chunk is open, listing nothing missing, completes it
//     as that payload (the root reduced the chunk again, every child's
//     partial in, where the lates that would have made up for them did not
//     all come; counted complete_again). One that lists ids missing takes
//     the first data's place (Refine) when it holds an id that the first
//     data in use listed and that is still outstanding, and lacks only ids
//     outstanding, merged here (awaited again: their senders have no
//     result and send again) or sent by a parked late (offered to it
//     again), not the own worker's: a child's partial that came after the
//     root's bypass entries had gone was reduced there in a slot anew, so
//     its late partial never comes, and the ranks it lacks send their data
//     as lates that the first data alone could not place. Any other repeat
//     changes nothing.
//   * A first data flagged CONFLICT holds nobody's data: the root found no
//     slot for the chunk and sent the op's identity (docs/aggregation.md,
//     "Collisions"). The first late folded into it is taken as it is, as a
//     slot takes a chunk's first contribution, and the others are reduced
//     into that: a chunk of one contribution comes back bit for bit as
//     sent (a NaN's payload too), the same bytes a slot would have given
//     it, where folding it into the identity would make any NaN canonical.
//   * Late data: a LATE (the switch sets BYPASS on it), or a CONTRIBUTION with
//     BYPASS (a self-flagged worker), from node X with its own missing list M.
//     Its payload holds the data of S = {X}, plus C \ M when SetCovers said
//     that switch X covers the ids C (less what each switch in M covers, when
//     known; when M names a switch whose ids the TAN does not know, S is
//     {X} alone, as without SetCovers), or, with CONTENT, plus the ids its
//     list names (it then lacks none). It resolves S ∩ outstanding; the ids of
//     M that are neither outstanding nor already merged become outstanding
//     (nested timeouts), but for those the first data holds: where the TAN
//     knows what X covers and every id awaited, an id of X's share (or a
//     switch below X) that nothing awaited lacks came with the first data
//     (X sent the chunk up twice, a restart between). A late from X after
//     X's merged late flagged CONFLICT (it held nobody's data and listed
//     X's share missing), with
//     neither CONFLICT nor CONTENT and listing only ids that one listed,
//     holds S = that list less its own (X reduced the chunk in a slot after
//     all), not X again. A late whose S overlaps ids already merged from
//     another late (it would count them twice) is a duplicate and is dropped.
//     A late that resolves nothing is a duplicate too, but it is parked until
//     the chunk finishes (counted duplicate_late then): when a nested missing
//     list later makes one of its ids outstanding it resolves after all, so a
//     leaf's late that overtakes its switch's late partial is not lost. An
//     awaited switch whose ranks the TAN knows (the switch outstanding, or
//     its ranks, as a root lists them) is resolved when the parked lates
//     hold its whole share, each part once: its late partial and those of
//     the switches below it that it lacks, down to lates that lack nothing
//     (or ranks merged already), or else its ranks' own data (its late
//     partial was lost, or went up as missing and then lost, while its
//     members' data went around it). They are merged, and what they stand
//     for; a late partial for it that still comes overlaps them and is a
//     duplicate (counted by_members). One late is parked per sender and
//     missing list (a resend adds nothing). Its
//     key must be the first data's key, and its dtype, op, scale and
//     elem_count the first data's (else counted key_mismatch or malformed).
//   * Triggers: kIncremental folds each resolving late into the first data on
//     arrival; kBatch holds them and reduces when nothing is outstanding. A
//     first data with ORDERED is always batch and reduces first data, then
//     the lates in ascending node id (the same bits whatever the arrival
//     order); otherwise lates are folded in arrival order.
//   * Late data before its first data is held (at most give_up_ns after its
//     arrival; counted orphan_late when dropped) and goes through the rules
//     above when the first data comes: the lates that hold the most members'
//     data first, in arrival order among equals (a child switch's late
//     partial before the same members' own data sent around it).
//   * Completion: one RESULT (node_id = TanOptions::node_id; OVERFLOW when a
//     sum saturated here or an input carried it; ORDERED and FINAL copied; aux, the
//     chunk's element offset, copied; no missing list) to the first data's
//     source. A first data with an empty missing list completes at once (a
//     parameter-server job sends every chunk so; docs/stragglers.md).
//   * Completion hook (TanOptions::on_complete, optional): called once per
//     chunk that completes with nothing outstanding, with the RESULT's fields
//     and the reduced payload, just before the RESULT is built. It may
//     rewrite the payload in place (agg-ps --sgd puts the updated parameters
//     there). When it returns false the RESULT is INCOMPLETE with an empty
//     missing list instead (counted completion_refused, not completed). Never
//     called on give-up, nor for a repeated first data (that gets the cached
//     RESULT), so a hook's side effect happens exactly once per chunk while
//     the result is remembered.
//   * Give-up (Expire): give_up_ns after the first data with ids still
//     outstanding, a RESULT with INCOMPLETE and the outstanding ids, sorted,
//     as its missing list: at most 255 of them, and no more than keeps the
//     datagram within max(the first data's size, 1472 bytes), so it fits
//     the path the first data took. Its payload is the partial reduction of
//     what arrived; workers must not use it (docs/protocol.md, INCOMPLETE).
//   * Runs (docs/protocol.md, "Runs"): a datagram's incarnation is the run
//     label of the root switch that sent it. Per job the engine keeps the
//     current label and the one before it. A new nonzero label is a new run
//     of the job: every chunk of the job is forgotten, unanswered, and the
//     old label's datagrams are dropped from then on (run_ended). Label 0
//     (a root that has no label yet) belongs to whatever run is current.
//     RESULTs carry the first data's label.
//   * A finished chunk is remembered for give_up_ns with its result: a
//     repeated first data gets that same datagram again (to its own source);
//     late data for it is counted late_after_done and answered with the
//     result again, to the first data's source (its sender's result was
//     lost on its way down, or it went around the sender's slot, and the
//     sender asks again with its data). A QUERY for it with its key (a
//     root asking after a chunk it no longer holds, for a member whose
//     result was lost) gets the result again, to the QUERY's source; one
//     for an unfinished chunk, or with another key, gets nothing (every
//     QUERY counted queries).
//
// Memory is bounded: at most max_pending unfinished chunks (a new one beyond
// that is refused and counted refused_full), at most max_pending finished
// ones (the oldest is forgotten first), at most max_held_lates late payloads
// held in all (batch, ordered and parked lates, lates before their first
// data; beyond that a late is refused and counted refused_full, or, when it
// would only have been parked, duplicate_late), payloads of at most
// max_payload bytes (larger ones count as malformed).
//
// Thread safety: [any single thread; not thread-safe]. Control-side code: it
// allocates, never blocks, and throws nothing of its own (only std::bad_alloc
// could escape, when the process is out of memory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aggregator/wire.h"

namespace aggswitch::aggregator {

// A UDP endpoint, host byte order. Opaque to the engine: the first data's
// source, handed back as the RESULT's destination.
struct TanPeer {
  uint32_t ip = 0;
  uint16_t port = 0;
  friend bool operator==(const TanPeer& a, const TanPeer& b) {
    return a.ip == b.ip && a.port == b.port;
  }
};

enum class TanTrigger : uint8_t {
  kIncremental,  // fold each resolving late on arrival
  kBatch,        // hold the lates, reduce when nothing is outstanding
};

struct TanOptions {
  uint64_t give_up_ns = 5'000'000'000;  // first data -> INCOMPLETE; also how long results are kept
  TanTrigger trigger = TanTrigger::kIncremental;
  uint16_t node_id = 0xFFFE;      // the RESULT's node_id
  size_t max_pending = 4096;      // unfinished chunks (and, apart, finished ones kept)
  size_t max_held_lates = 16384;  // late payloads held, all chunks together
  uint32_t max_payload = 9000;    // payload bytes per datagram
  // The engine is the job's parameter node (agg-ps): a complete RESULT that
  // no sum saturated in carries VERIFIED (docs/parameter-node.md).
  bool verified_results = false;
  // Completion hook (see above): `fields` are the RESULT's (the first data's
  // job, seq, key, dtype, op, scale, elem_count and aux; its flags without
  // INCOMPLETE), `payload` its elem_count packed little-endian wire elements.
  // Runs on the thread calling OnDatagram or OfferOwn; must not call back
  // into the engine. Empty: every complete chunk is answered as reduced.
  std::function<bool(const AggFields& fields, std::span<uint8_t> payload)> on_complete;
};

// Event counts since construction. `first_data` and `late` count every such
// datagram; the others say what became of some of them.
struct TanCounters {
  uint64_t first_data = 0;      // PARTIALs received
  uint64_t late = 0;            // LATEs and BYPASS contributions received
  uint64_t merged = 0;          // lates that resolved ids (folded or held for the batch)
  uint64_t duplicate_late = 0;  // lates that resolved nothing (or would count ids twice)
  uint64_t key_mismatch = 0;    // a late or repeated first data with another key
  uint64_t completed = 0;       // RESULTs for chunks with nothing outstanding
  uint64_t gave_up = 0;         // INCOMPLETE RESULTs at the give-up
  // INCOMPLETE RESULTs, no missing ids, because TanOptions::on_complete returned false
  uint64_t completion_refused = 0;
  uint64_t orphan_late = 0;      // held lates whose first data never came
  uint64_t late_after_done = 0;  // lates for a finished chunk (answered with its result again)
  uint64_t repeat_first = 0;     // first data for a chunk already open or finished
  uint64_t refused_full = 0;     // chunks or held lates refused at max_pending / max_held_lates
  uint64_t malformed = 0;        // dtype/op/scale/elem_count differ from the first data; too large
  uint64_t ignored = 0;          // other opcodes (RESULT, ACK, a CONTRIBUTION without BYPASS, ...)
  uint64_t own_data = 0;         // the TAN's own late contributions taken locally (OfferOwn)
  uint64_t own_repeats = 0;      // retransmissions of own data already taken (OfferOwn)
  uint64_t new_runs = 0;         // a job's datagrams under a new run label: its chunks forgotten
  uint64_t run_ended = 0;        // datagrams under the label of a job's run that ended here
  uint64_t queries = 0;          // QUERYs received (a finished chunk's answered with its RESULT)
  // outstanding switches resolved by their ranks' own late data, every one of them here
  uint64_t by_members = 0;
  // open chunks completed by a repeated first data that lists nothing missing
  uint64_t complete_again = 0;
};

// A datagram to send: the whole UDP payload, built with BuildAggregation.
struct TanOutput {
  TanPeer to;
  std::vector<uint8_t> datagram;
};

class TanEngine {
 public:
  explicit TanEngine(const TanOptions& options);

  // Switch `switch_node` of job `job_id` covers these node ids (its members,
  // transitively; variant 2 of docs/stragglers.md): its late partial resolves
  // them, less the ids its own missing list names. An empty list forgets the
  // coverage. Applies to lates processed from now on.
  void SetCovers(uint32_t job_id, uint16_t switch_node, std::vector<uint16_t> ids);

  // One parsed datagram (ParseAggregation returned kOk) from `from` at
  // `now_ns` (steady clock). Appends what to send to `out`.
  void OnDatagram(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                  std::vector<TanOutput>* out);

  // The TAN also runs a worker of the job, and `pkt` (a CONTRIBUTION) is that
  // worker's own, about to be sent (case 2 of "the TAN is late",
  // docs/stragglers.md). When the chunk's first data is here and lists the
  // contribution's node_id as outstanding, the worker is late: the engine
  // takes the contribution as that node's late data (every rule above
  // applies), appends what that finishes to `out` and returns true; the
  // caller must not send it. The same contribution again (the worker
  // retransmits: its result is slow or was lost) is taken too, and once the
  // chunk is done its result goes to the worker again (SetOwnWorker).
  // Otherwise it changes nothing and returns false.
  bool OfferOwn(const AggPacket& pkt, uint64_t now_ns, std::vector<TanOutput>* out);
  // Where that worker receives its results. Its switch learns a member's
  // address from its contributions, and has none from this worker for a
  // chunk whose data the TAN kept, so a chunk that took own data also sends
  // its RESULT (or INCOMPLETE result) here. ip 0: nowhere.
  void SetOwnWorker(const TanPeer& worker);

  // Gives up on chunks whose first data is older than give_up_ns (appending
  // their INCOMPLETE results to `out`), drops held lates older than that, and
  // forgets results kept longer than that. Call every few milliseconds.
  void Expire(uint64_t now_ns, std::vector<TanOutput>* out);

  // Where chunk (job_id, seq) stands here: unknown, late data waiting for
  // its first data, open (first data in, ids outstanding), or finished with
  // its result kept.
  enum class ChunkPhase : uint8_t { kNone, kAwaitingFirst, kOpen, kDone };
  ChunkPhase PhaseOf(uint32_t job_id, uint32_t seq) const;
  // The RESULT datagram of a finished chunk whose result is kept; else null.
  // Valid until the next call into the engine.
  const std::vector<uint8_t>* ResultOf(uint32_t job_id, uint32_t seq) const;

  // The run rule above for a datagram of job `job_id` under label
  // `incarnation`: kCurrent (go on), kNew (go on; the job's chunks were
  // forgotten, and the caller forgets its own) or kEnded (drop it).
  // OnDatagram applies it itself.
  enum class Run : uint8_t { kCurrent, kNew, kEnded };
  Run AdmitRun(uint32_t job_id, uint32_t incarnation);

  const TanCounters& counters() const { return counters_; }
  // Unfinished chunks: waiting for late data, or for their first data.
  size_t pending() const { return pending_; }
  // Finished chunks whose results are kept.
  size_t finished() const { return chunks_.size() - pending_; }
  // Late payloads held (batch mode, ordered chunks, lates before first data).
  size_t held_lates() const { return held_lates_; }

 private:
  struct ChunkId {
    uint32_t job_id = 0;
    uint32_t seq = 0;
    friend bool operator==(const ChunkId& a, const ChunkId& b) {
      return a.job_id == b.job_id && a.seq == b.seq;
    }
    friend bool operator<(const ChunkId& a, const ChunkId& b) {
      return a.job_id != b.job_id ? a.job_id < b.job_id : a.seq < b.seq;
    }
  };
  struct ChunkIdHash {
    size_t operator()(const ChunkId& c) const {
      return std::hash<uint64_t>()(uint64_t{c.job_id} << 32 | c.seq);
    }
  };
  // One late datagram, copied out of the caller's buffer.
  struct Late {
    uint16_t node = 0;
    uint16_t flags = 0;
    uint64_t key = 0;
    DType dtype = DType::kInt32;
    ReduceOp op = ReduceOp::kSum;
    int8_t scale = 0;
    uint16_t elem_count = 0;
    uint64_t arrival_ns = 0;
    std::vector<uint16_t> missing;
    std::vector<uint8_t> payload;
  };
  enum class Phase : uint8_t { kAwaitingFirst, kOpen, kDone };
  struct Chunk {
    Phase phase = Phase::kAwaitingFirst;
    uint64_t deadline_ns = 0;  // its entry in the deadline set of its phase
    // kAwaitingFirst: lates in arrival order.
    std::vector<Late> early;
    // kOpen: the result's fields, where it goes, what is still awaited.
    AggFields fields;
    TanPeer reply_to;
    uint32_t first_len = 0;  // the first data's datagram length
    bool batch = false;
    bool ordered = false;
    bool final = false;  // the first data's FINAL, which the RESULT carries back
    // Its first data, or a late merged into it, came in a retransmission
    // or says its chunk had one (flags::kRecovered on the RESULT).
    bool recovered = false;
    bool overflow = false;
    std::set<uint16_t> outstanding;
    std::set<uint16_t> first_missing;  // what the first data in use listed missing
    std::set<uint16_t> merged;  // ids whose data came with a late
    // Senders of a merged late that held nobody's data (CONFLICT), and the
    // share it listed missing, sorted: the same sender's later partial from
    // a slot holds that share less what it lists.
    std::map<uint16_t, std::vector<uint16_t>> empty_shares;
    int32_t own_node = -1;      // the node whose own data OfferOwn took
    uint32_t own_incarnation = 0;  // and its incarnation, which its results carry
    std::vector<uint8_t> acc;   // first data, plus the folded lates when incremental
    // The first data in use holds nobody's data (CONFLICT): acc is the op's
    // identity, and the next late folded in is loaded into it, not reduced.
    bool acc_empty = false;
    std::vector<Late> held;     // batch: resolving lates in arrival order
    std::vector<Late> parked;   // lates that resolved nothing (yet)
    // kDone: the RESULT datagram, sent again to a repeated first data.
    std::vector<uint8_t> result;
  };
  using Deadlines = std::set<std::pair<uint64_t, ChunkId>>;

  enum class Resolution : uint8_t { kDropped, kParked, kMerged, kMergedNewIds };

  void OnFirstData(const AggPacket& pkt, const TanPeer& from, uint64_t now_ns,
                   std::vector<TanOutput>* out);
  void OnLate(const AggPacket& pkt, uint64_t now_ns, std::vector<TanOutput>* out);
  void OnQuery(const AggPacket& pkt, const TanPeer& from, std::vector<TanOutput>* out);
  // A late datagram's fields and payload, copied.
  static Late CopyLate(const AggPacket& pkt, uint64_t now_ns);
  // Offers one late to an open chunk: resolves it, retries the parked lates
  // when it made new ids outstanding, and finishes the chunk when nothing is
  // outstanding any more.
  void Offer(const ChunkId& id, Chunk& c, Late&& late, uint64_t now_ns,
             std::vector<TanOutput>* out);
  // The resolution rules for one late of an open chunk: folds it (incremental)
  // or holds it (batch), parks it, or drops it.
  Resolution Resolve(Chunk& c, Late&& late);
  // Whether `pkt` has chunk `c`'s dtype, op, scale and element count, and a
  // payload of that many elements.
  static bool SameShape(const Chunk& c, const AggPacket& pkt);
  // A repeated first data of an open chunk that lists nothing missing: the
  // chunk is that, whatever was merged here (counted complete_again).
  void Complete(const ChunkId& id, Chunk& c, const AggPacket& pkt, uint64_t now_ns,
                std::vector<TanOutput>* out);
  // A repeated first data of an open chunk that lists ids missing: the
  // chunk becomes that, its held and parked lates offered to it again, when
  // it holds an id the first data in use lacked and that is still awaited,
  // and lacks only what is awaited, merged or parked here (above); else it
  // changes nothing.
  void Refine(const ChunkId& id, Chunk& c, const AggPacket& pkt, uint64_t now_ns,
              std::vector<TanOutput>* out);
  // Folds (incremental) or holds (batch) a late whose ids are accounted for.
  void Fold(Chunk& c, Late&& late);
  // Reduces `payload` into the chunk's accumulator (loads it, when the
  // accumulator holds nobody's data yet); true when a sum saturated.
  bool Reduce(Chunk& c, const uint8_t* payload);
  // Lates that together hold a switch's whole share (SubtreeChoice).
  struct SubtreeChoice {
    std::vector<size_t> lates;        // indexes into Chunk::parked
    std::set<uint16_t> nodes;         // the ids they stand for
    std::set<uint16_t> merged_refs;   // ranks they lack, merged already
  };
  // Whether the parked lates hold all of `node`'s share within a switch of
  // ranks `ranks`: a late from it, each id it lacks accounted for the same
  // way (or merged already), or, for a switch whose ranks the TAN knows,
  // each of them so. Adds what it takes to `choice`.
  // At most kSubtreeBudget steps per switch tried (subtree_budget_).
  bool Subtree(const Chunk& c, uint16_t node, const std::vector<uint16_t>& ranks,
               const std::multimap<uint16_t, size_t>& by_node, int depth,
               SubtreeChoice* choice) const;
  static constexpr uint32_t kSubtreeBudget = 4096;
  mutable uint32_t subtree_budget_ = 0;
  // A switch whose ranks the TAN knows (SetCovers), awaited here (itself, or
  // its ranks), whose whole share the parked lates hold, each part once
  // (its late partial and those of the switches below it it lacks, or its
  // ranks' own data), is resolved by them: they are merged, and the switch
  // and its ranks with them. True when one was (the outstanding ids changed).
  bool ResolveByMembers(Chunk& c);
  // The node ids whose data `late` of job `job_id` holds: its sender's, the
  // ids its CONTENT list names, or what the sender covers (SetCovers) less
  // what it and the switches it missed lack.
  std::vector<uint16_t> Content(uint32_t job_id, const Late& late) const;
  // `outstanding`, and every id the switches among them cover (SetCovers),
  // all the way down.
  std::set<uint16_t> Lacks(uint32_t job_id, const std::set<uint16_t>& outstanding) const;
  // Whether node `n`, which a late partial of switch `sender` lists missing,
  // is in chunk `c` already though never merged here: the first data holds
  // it (`lacks`, Lacks of what was outstanding before the late, names
  // neither `n` nor any of its ranks). A switch that sent the chunk up
  // twice (a restart lost its slot, and its new slot's partial came as
  // late data) lists a rank whose data its first partial brought into the
  // first data; awaited again, that rank's resend would count it twice.
  // Judged only where the TAN knows what `sender` covers and every id
  // awaited is one it knows (a known switch, or a rank of one): an unknown
  // id may be a switch that covers `n`.
  bool InChunkAlready(const Chunk& c, uint16_t sender, uint16_t n,
                      const std::set<uint16_t>& lacks) const;
  // Reduces, calls on_complete when nothing is outstanding, builds the
  // RESULT (INCOMPLETE when ids are outstanding or the hook refused), caches
  // it, moves the chunk to kDone and appends the datagram to `out`.
  void Finish(const ChunkId& id, Chunk& c, uint64_t now_ns, std::vector<TanOutput>* out);
  // Enters / leaves the deadline set of the chunk's phase.
  void Schedule(const ChunkId& id, Chunk& c, uint64_t deadline_ns);
  void Unschedule(const ChunkId& id, const Chunk& c);
  // Empties a list of held lates, keeping held_lates_ right.
  void Release(std::vector<Late>& lates);
  // `result` (a RESULT datagram of `c`) to the own worker, under its incarnation.
  TanOutput ForOwnWorker(const Chunk& c, const std::vector<uint8_t>& result) const;
  // Forgets a chunk entirely (its deadline entry included).
  void Erase(const ChunkId& id);

  TanOptions options_;
  TanCounters counters_;
  TanPeer own_worker_;
  size_t pending_ = 0;
  size_t held_lates_ = 0;
  std::unordered_map<ChunkId, Chunk, ChunkIdHash> chunks_;
  Deadlines pending_deadlines_;  // kAwaitingFirst (oldest held late) and kOpen (give-up)
  Deadlines done_deadlines_;     // kDone: when the cached result is forgotten
  // Per job: its current run label and the one that ended before it.
  struct Runs {
    uint32_t current = 0;
    uint32_t ended = 0;
  };
  std::unordered_map<uint32_t, Runs> runs_;
  // (job id, switch node) -> the node ids it covers, sorted.
  std::map<std::pair<uint32_t, uint16_t>, std::vector<uint16_t>> covers_;
};

}  // namespace aggswitch::aggregator
