// The vectors agg-worker allreduces: generated from a seed, so that every rank
// can compute every other rank's vector, or read from one file per rank.
//
// Generated element i of rank r in iteration t depends only on (seed, r, t, i)
// (a counter-based hash, splitmix64), so any range of any rank's vector can be
// produced on demand, in any order, on any machine. The values are chosen so
// that the reference reduction is well defined:
//   int32 sum       uniform in [-B, B], B = INT32_MAX / world: no partial sum
//                   can saturate, whatever the arrival order;
//   int32 others    any 32-bit value;
//   float32         m * 2^k, m uniform in [-1, 1) with 24 bits, k in -8..8:
//                   magnitudes spread over 16 binades;
//   float16/bf16    a float in [-4, 4) rounded to the type;
//   bool            true with probability 0.5^(1/world) for and, and
//                   1 - 0.5^(1/world) for or, so that the result is
//                   true about half the time either way.
//
// File-backed: the path pattern's "{rank}" is replaced by the rank; the file
// holds packed little-endian elements of the dtype (bools as 0/1 bytes), the
// same number for every rank, and the same data every iteration.
//
//   GeneratedVectors gen(DType::kFloat32, ReduceOp::kSum, /*world=*/4, /*seed=*/1, n);
//   gen.Read(rank, iteration, 0, n, buffer);
//   ASSIGN_OR_RETURN(auto files, FileVectors::Load("/data/grad.{rank}.bin", dtype, ranks));
//
// Thread safety: immutable after construction; Read is [any].
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aggregator/types.h"
#include "common/status.h"

namespace aggswitch::tools {

// Every rank's vector, in any range.
class RankVectors {
 public:
  virtual ~RankVectors() = default;
  // Elements in each rank's vector.
  virtual size_t elements() const = 0;
  // Writes elements [first, first + count) of `rank`'s vector for `iteration`
  // as packed little-endian elements. first + count <= elements().
  virtual void Read(uint16_t rank, uint32_t iteration, size_t first, size_t count,
                    uint8_t* out) const = 0;
};

class GeneratedVectors final : public RankVectors {
 public:
  GeneratedVectors(aggregator::DType dtype, aggregator::ReduceOp op, uint16_t world, uint64_t seed,
                   size_t elements);
  size_t elements() const override { return elements_; }
  void Read(uint16_t rank, uint32_t iteration, size_t first, size_t count,
            uint8_t* out) const override;

 private:
  aggregator::DType dtype_;
  aggregator::ReduceOp op_;
  uint64_t seed_;
  size_t elements_;
  int64_t int_bound_;        // int32 sum: values in [-int_bound_, int_bound_]
  uint64_t bool_threshold_;  // bool: true when the element's 53-bit hash is below it
};

class FileVectors final : public RankVectors {
 public:
  // Reads the files of `ranks` (the pattern with "{rank}" replaced). Every
  // file must hold a whole number of elements, and all the same number.
  static common::Result<std::unique_ptr<FileVectors>> Load(const std::string& pattern,
                                                           aggregator::DType dtype,
                                                           const std::vector<uint16_t>& ranks);
  size_t elements() const override { return elements_; }
  void Read(uint16_t rank, uint32_t iteration, size_t first, size_t count,
            uint8_t* out) const override;

 private:
  FileVectors() = default;
  size_t element_size_ = 0;
  size_t elements_ = 0;
  std::vector<std::vector<uint8_t>> data_;  // indexed by rank; empty for ranks not loaded
};

// The pattern with every "{rank}" replaced by `rank`.
std::string RankPath(const std::string& pattern, uint16_t rank);

}  // namespace aggswitch::tools
