// The numbers agg-gen sends, and the reduction it expects back, in closed form.
//
// Element i (0-based) of worker w's contribution to chunk seq is
//
//   v(w, seq, i) = (w + 1) * (i + 1) + (seq & 0xff)
//
// (as int32, or as the float32 of that small integer), so for N workers and
// k = seq & 0xff every reduction is a line in i:
//
//   sum: (i + 1) * N(N+1)/2 + N * k     min: (i + 1) + k     max: N * (i + 1) + k
//
// i.e. expected(i) = a * (i + 1) + b * k with (a, b) fixed by the op. With at
// most 256 workers and 356 elements a sum stays below 2^24, so float32 sums are
// exact in any order and the check is bit-exact for both types. The low seq
// byte in every value catches a result of the wrong chunk; the worker factor
// catches a missing, doubled or foreign contribution.
//
//   ChunkValues values(cfg);
//   values.Fill(worker, seq, payload);                     // contribution payload
//   int32_t bad = values.FirstMismatch(seq, result_payload);  // -1: all correct
//
// Thread safety: immutable after construction; any thread. Fill and
// FirstMismatch are hot-path safe (no allocation, bounded loops).
#pragma once

#include <cstdint>

#include "tools/agg-gen/gen_config.h"

namespace aggswitch::tools {

class ChunkValues {
 public:
  explicit ChunkValues(const GenConfig& cfg);

  // Writes worker's elems elements for chunk seq (little-endian wire values). [any]
  void Fill(uint16_t worker, uint32_t seq, uint8_t* payload) const;

  // Index of the first element of a result payload that differs from the
  // expected reduction, or -1 when all elems match bit for bit. [any]
  int32_t FirstMismatch(uint32_t seq, const uint8_t* payload) const;

  // The expected element i of chunk seq's result, as its wire bits. [any]
  uint32_t ExpectedBits(uint32_t seq, uint32_t i) const;

  uint32_t payload_bytes() const { return elems_ * 4u; }

 private:
  bool float_;
  uint32_t elems_;
  int32_t a_;  // expected(i) = a_ * (i + 1) + b_ * (seq & 0xff)
  int32_t b_;
};

}  // namespace aggswitch::tools
