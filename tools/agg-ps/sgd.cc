#include "tools/agg-ps/sgd.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "common/log.h"

namespace aggswitch::tools {

namespace {

using aggregator::DType;
using aggregator::ReduceOp;

// Packed float32 at any alignment; the payload's little-endian is the host
// order (docs/protocol.md, "Payload").
float LoadFloat(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void StoreFloat(uint8_t* p, float v) { std::memcpy(p, &v, sizeof(v)); }

}  // namespace

common::Result<SgdJob> ParseSgd(std::string_view text) {
  const std::string expected =
      "--sgd: expected JOB=LR (a job id and a positive learning rate, e.g. 7=0.01), got \"" +
      std::string(text) + "\"";
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) return common::InvalidArgument(expected);
  SgdJob job;
  const std::string_view id = text.substr(0, equals);
  const auto [id_end, id_ec] = std::from_chars(id.data(), id.data() + id.size(), job.job_id);
  if (id.empty() || id_ec != std::errc() || id_end != id.data() + id.size()) {
    return common::InvalidArgument(expected + ": JOB is not a job id (0..4294967295)");
  }
  const std::string_view lr = text.substr(equals + 1);
  const auto [lr_end, lr_ec] = std::from_chars(lr.data(), lr.data() + lr.size(), job.learning_rate);
  if (lr.empty() || lr_ec != std::errc() || lr_end != lr.data() + lr.size() ||
      !std::isfinite(job.learning_rate) || !(job.learning_rate > 0)) {
    return common::InvalidArgument(expected + ": LR is not a positive finite number");
  }
  return job;
}

SgdModel::SgdModel(uint64_t max_elems) : max_elems_(max_elems) {}

common::Status SgdModel::AddJob(const SgdJob& job) {
  if (!std::isfinite(job.learning_rate) || !(job.learning_rate > 0)) {
    return common::InvalidArgument("--sgd " + std::to_string(job.job_id) +
                                   "=LR: LR must be a positive finite number");
  }
  if (!jobs_.emplace(job.job_id, Job{job.learning_rate, {}, false}).second) {
    return common::InvalidArgument("--sgd: job " + std::to_string(job.job_id) +
                                   " given twice (one learning rate per job)");
  }
  return common::Status::Ok();
}

std::span<const float> SgdModel::Parameters(uint32_t job_id) const {
  const auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return {};
  return it->second.params;
}

bool SgdModel::Refuse(uint32_t job_id, Job& job, const char* why) {
  ++counters_.refused;
  if (!job.warned) {
    job.warned = true;
    AGG_LOG(kWarning, "--sgd job %u: %s; its results go out INCOMPLETE (further ones not logged)",
            job_id, why);
  }
  return false;
}

bool SgdModel::Apply(const aggregator::AggFields& f, std::span<uint8_t> payload) {
  const auto it = jobs_.find(f.job_id);
  if (it == jobs_.end()) return true;
  Job& job = it->second;
  if (f.op != ReduceOp::kSum) {
    ++counters_.passed;
    return true;
  }
  if (f.dtype != DType::kFloat32) {
    return Refuse(f.job_id, job,
                  "a sum of a dtype other than float32 is no gradient here (parameter-server "
                  "jobs need agg-worker --float-mode float or ordered)");
  }
  const uint32_t n = f.elem_count;
  if (payload.size() != size_t{n} * 4) {
    return Refuse(f.job_id, job, "a payload of the wrong length");
  }
  const uint64_t end = uint64_t{f.aux} + n;
  if (end > max_elems_) {
    return Refuse(f.job_id, job, "a chunk beyond --sgd-max-elems");
  }
  if (job.params.size() < end) {
    try {
      job.params.resize(end, 0.0f);
    } catch (const std::bad_alloc&) {
      return Refuse(f.job_id, job, "out of memory growing the parameters");
    }
  }
  float* params = job.params.data() + f.aux;
  const float lr = job.learning_rate;
  for (uint32_t i = 0; i < n; ++i) {
    const float g = LoadFloat(payload.data() + size_t{i} * 4);
    // The product is rounded to float32 on its own (volatile): a fused
    // multiply-add, which -march and -ffp-contract allow, would round once
    // and give other bits than the documented two roundings.
    const volatile float step = lr * g;
    params[i] = params[i] - step;
    StoreFloat(payload.data() + size_t{i} * 4, params[i]);
  }
  ++counters_.updates;
  counters_.elements += n;
  return true;
}

}  // namespace aggswitch::tools
