// The simulator's oracle: what every rank got from one allreduce, judged
// against the reduction of every rank's input, computed here from the
// documented semantics (docs/protocol.md, "Data types and operations"), not
// by the switch's code:
//   - integers (sum, min, max, and, or) and bools: exact; an int32 sum
//     whose true value leaves the int32 range must fail with the overflow
//     error (kOutOfRange), and may only fail so when some order of
//     summing its elements saturates (its positive or negative parts
//     overflow);
//   - float32 sums in fixed point: per chunk, the exact integer sum of the
//     ranks' fixed-point values (the client's encoding), or, where that
//     sum can saturate, the chunk's float32 redo;
//   - ordered float sums (ORDERED: float16/bfloat16 sums, the fixed-point
//     redo, FloatMode::kFloatOrdered) bit for bit as each switch of the
//     job's tree reduces its members in member order (or, for data the
//     parameter node reduces, in rank order), when no timer, TAN or
//     parameter node can have changed the order; otherwise within the
//     rounding of the sum, as unordered float sums are;
//   - min and max of floats: exact, NaN first, min(-0, +0) = -0;
//   - a parameter-server job's float32 sum: the parameters before it, less
//     the learning rate times the sum, within the sum's rounding and the
//     two of the step (agg-ps --sgd); its other allreduces as any job's;
//   - every rank of an allreduce that succeeded got the same bytes;
//   - a partial copy of the result (the main server's final result) is
//     judged chunk by chunk as a rank's result, is the same bytes as the
//     ranks', and carries OVERFLOW exactly where an int32 sum saturated.
// An allreduce that failed is a finding unless a fault the scenario
// injected explains it (a crashed rank, a restarted switch, a parameter
// node that went away) or it is the overflow error above; so is one that
// succeeded after the scenario's bound on its time (more for an allreduce
// of more windows of chunks).
//
//   OpView v{...};
//   JudgeOp(v, &findings);
//
// Thread safety: pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/sim/rank.h"
#include "tests/sim/scenario.h"

namespace aggswitch::sim {

// One allreduce of one run of a job, as the ranks lived it.
struct OpView {
  const Scenario* scenario = nullptr;
  size_t job = 0;
  uint32_t run = 0;
  uint32_t op = 0;
  // By rank: what it got; null when the rank's process never ran it.
  std::vector<const OpOutcome*> outcomes;
  // By rank: what it sent.
  std::vector<std::vector<uint8_t>> inputs;
  // Why a failure of this allreduce is allowed (a fault that touched it);
  // empty: none is.
  std::string excuse;
  // What others got of the result, judged as a rank's result is, chunk by
  // chunk (the main server's final result): the chunks it got, at their
  // place in `data`, and each chunk's flags. An int32 chunk whose sum leaves
  // the int32 range must come flagged OVERFLOW, and only a chunk that some
  // order saturates may.
  struct Partial {
    std::string who;
    std::vector<uint8_t> data;       // count * size(dtype)
    uint32_t per_chunk = 1;          // elements per chunk
    std::vector<bool> have;          // by chunk
    std::vector<uint16_t> flags;     // by chunk
  };
  std::vector<Partial> partials;
  // A parameter-server job's float32 sum (JobSpecSim::learning_rate): every
  // rank gets the job's parameters after one SGD step, params - rate * sum,
  // within the sum's rounding and the step's two, from `params`: what they
  // were before (zero beyond its end). Element e with known[e] false is not
  // judged (a step that failed or that every rank died in, or agg-ps
  // restarted, left it unknown).
  std::vector<float> params;
  std::vector<bool> known;
};

// Appends a line per broken promise to `findings`.
void JudgeOp(const OpView& view, std::vector<std::string>* findings);

}  // namespace aggswitch::sim
