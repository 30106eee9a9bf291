// agg-ps as a parameter server: per job (--sgd JOB=LR) a float32 parameter
// vector that each completed chunk's gradient sum updates by plain SGD, and
// the updated parameters as the chunk's RESULT (docs/stragglers.md,
// "Parameter-server jobs").
//
// A parameter-server job's root switch sends every chunk to its TAN (this
// process) as first data; the TAN engine reduces it with any late data and
// calls its completion hook (aggregator::TanOptions::on_complete) once per
// chunk. PsServer wires that hook to Apply, which for chunk elements
// [aux, aux + elem_count) of the job's buffer does, in float32:
//
//   params[aux + i] = params[aux + i] - lr * grad[i]   // two roundings: the
//                                                      // product, then the
//                                                      // difference; no FMA
//
// and writes params[aux .. aux + elem_count) into the payload in its place
// (packed little-endian float32, the wire encoding), so every member
// receives the new parameters. Parameters start at zero and grow on demand
// up to max_elems per job. NaN and infinity are not special: they propagate.
//
// What Apply does with a chunk of a --sgd job:
//   * op sum, dtype float32: a gradient; applied (counted updates, elements).
//   * any other op (e.g. the int32 max a client exchanges to agree on a
//     fixed-point exponent): passed through unchanged (counted passed).
//   * op sum of another dtype (int32 fixed point, float16, ...): refused,
//     the RESULT becomes INCOMPLETE (counted refused, warned once per job).
//     Parameter-server jobs must use the client's float32 modes:
//     `agg-worker --float-mode float` or `--float-mode ordered`.
//   * beyond max_elems (aux + elem_count > max_elems): refused likewise.
// Chunks of other jobs pass through unchanged and are not counted.
//
//   SgdModel sgd(SgdModel::kDefaultMaxElems);
//   RETURN_IF_ERROR(sgd.AddJob(*ParseSgd("7=0.01")));
//   tan_options.on_complete = [&sgd](const AggFields& f, std::span<uint8_t> p) {
//     return sgd.Apply(f, p);
//   };
//
// Thread safety: ParseSgd [any]. SgdModel [control-side, one thread at a
// time; not thread-safe]: PsServer calls it under its mutex, from the engine's
// hook. It allocates (parameter growth) and throws nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aggregator/wire.h"
#include "common/status.h"

namespace aggswitch::tools {

// --sgd JOB=LR: job JOB is a parameter-server job with learning rate LR.
struct SgdJob {
  uint32_t job_id = 0;
  float learning_rate = 0;
};

// "JOB=LR", e.g. "7=0.01" (LR a positive finite number, like 1e-3).
common::Result<SgdJob> ParseSgd(std::string_view text);

// Event counts since construction.
struct SgdCounters {
  uint64_t updates = 0;   // gradient chunks applied
  uint64_t elements = 0;  // parameters updated, over all those chunks
  uint64_t passed = 0;    // chunks of --sgd jobs that are no sum, passed through
  uint64_t refused = 0;   // sums of another dtype than float32, or beyond max_elems
};

class SgdModel {
 public:
  static constexpr uint64_t kDefaultMaxElems = uint64_t{1} << 26;  // 256 MiB of float32
  // aux (32 bits) + elem_count can address no further.
  static constexpr uint64_t kMaxMaxElems = uint64_t{1} << 32;

  // `max_elems`: parameters per job at most, 1..kMaxMaxElems.
  explicit SgdModel(uint64_t max_elems = kDefaultMaxElems);

  // Makes `job.job_id` a parameter-server job. Errors (naming --sgd): the job
  // is already one; the learning rate is not positive and finite.
  common::Status AddJob(const SgdJob& job);

  // The completion hook: the chunk `fields` (a RESULT's, aux its offset) with
  // its reduced `payload` (elem_count wire elements). See the header comment;
  // true to send the payload as it is then, false to make the RESULT
  // INCOMPLETE.
  bool Apply(const aggregator::AggFields& fields, std::span<uint8_t> payload);

  bool HasJob(uint32_t job_id) const { return jobs_.count(job_id) != 0; }
  size_t jobs() const { return jobs_.size(); }
  // The job's parameters so far (as long as the furthest chunk applied);
  // empty for a job without --sgd.
  std::span<const float> Parameters(uint32_t job_id) const;
  uint64_t max_elems() const { return max_elems_; }
  const SgdCounters& counters() const { return counters_; }

 private:
  struct Job {
    float learning_rate = 0;
    std::vector<float> params;
    bool warned = false;  // a refusal was logged
  };
  // Counts a refusal of `job_id`'s chunk, logs the first of each job.
  bool Refuse(uint32_t job_id, Job& job, const char* why);

  uint64_t max_elems_;
  SgdCounters counters_;
  std::unordered_map<uint32_t, Job> jobs_;
};

}  // namespace aggswitch::tools
