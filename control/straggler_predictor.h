// Straggler prediction (seed 000, the management side): from how late each
// member's contributions arrived in past operations, which members will be
// late again. A member's lateness in one operation is its arrival offset: the
// seconds between the operation's first contribution at its switch and its
// own. Over a chosen number of the most recent operations, a member's figure
// is the mean of its offsets in those it took part in. Two rules pick the
// predicted stragglers: the `k` largest figures (top-k), or every figure
// strictly greater than a duration ("greater than 4 s" leaves a member at
// exactly 4 s out, as the seed's worked example requires).
//
//   StragglerPredictor p(/*history=*/16);
//   std::vector<MemberOffset> op = {{111, 0.0}, {112, 2.1}, {113, 4.5}};
//   p.Record(op);                   // one operation
//   p.TopK(1, /*operations=*/2);    // {113, 4.5}
//   p.Over(4.0, 2);                 // {113, 4.5}
//   p.Record(next, /*held=*/{113});  // 113 excluded now: it keeps its 4.5
//
// Thread safety: none; the control thread owns a predictor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <vector>

namespace aggswitch::control {

struct MemberOffset {
  uint32_t node = 0;    // the member's node id
  double offset_s = 0;  // seconds after the operation's first arrival
};

class StragglerPredictor {
 public:
  // Keeps the offsets of the last `history` operations (at least 1).
  explicit StragglerPredictor(size_t history);

  // One operation: the offsets of the members that arrived in it. A member
  // missing from an operation counts only the operations it took part in.
  // The members in `held` were excluded from it (predicted stragglers, whose
  // data went around the switch): each keeps the figure it had, so that a
  // prediction goes on naming it instead of forgetting it once its offsets
  // leave the history.
  void Record(std::span<const MemberOffset> offsets, std::span<const uint32_t> held = {});

  // The `k` members with the largest mean offset over the last `operations`
  // operations (0 or more than recorded: all of them), largest first; equal
  // figures by node id.
  std::vector<MemberOffset> TopK(size_t k, size_t operations) const;
  // The members whose mean offset over the last `operations` operations is
  // strictly greater than `seconds`, largest first.
  std::vector<MemberOffset> Over(double seconds, size_t operations) const;

  size_t operations() const { return recorded_; }

 private:
  // Every member's figure, largest first (ties: lower node id first).
  std::vector<MemberOffset> Ranked(size_t operations) const;

  size_t history_;
  size_t recorded_ = 0;  // operations recorded, up to history_
  // Per member: (operation number, offset), oldest first, within the history.
  std::map<uint32_t, std::deque<std::pair<uint64_t, double>>> offsets_;
  // Held members: the figure each had when first held.
  std::map<uint32_t, double> held_;
  uint64_t next_op_ = 0;
};

}  // namespace aggswitch::control
