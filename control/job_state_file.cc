#include "control/job_state_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"

namespace aggswitch::control {
namespace {

using nlohmann::json;
constexpr int kVersion = 1;

}  // namespace

common::Result<JobStateFile::Jobs> JobStateFile::Load() const {
  std::ifstream in(path_);
  if (!in) {
    if (errno == ENOENT) return Jobs{};
    return common::Unavailable("aggregation.state_file " + path_ + ": " + std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  const json doc = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  std::string why;
  Jobs jobs;
  if (!doc.is_object() || !doc.contains("jobs") || !doc["jobs"].is_array()) {
    why = "expected {\"version\": 1, \"jobs\": [...]}";
  } else if (!doc.contains("version") || doc["version"] != kVersion) {
    why = "expected version 1";
  } else {
    for (const json& job : doc["jobs"]) {
      if (!job.is_object() || !job.contains("id") || !job["id"].is_number_unsigned() ||
          job["id"].get<uint64_t>() > UINT32_MAX) {
        why = "a job without a numeric id: " + job.dump().substr(0, 80);
        break;
      }
      jobs[job["id"].get<uint32_t>()] = job.dump();
    }
  }
  if (why.empty()) return jobs;
  const std::string aside = path_ + ".bad";
  const bool moved = std::rename(path_.c_str(), aside.c_str()) == 0;
  return common::InvalidArgument("aggregation.state_file " + path_ + ": " + why + "; " +
                                 (moved ? "moved aside to " + aside : "left in place (cannot move it aside)") +
                                 ", no API job restored");
}

common::Status JobStateFile::Save(const Jobs& jobs) const {
  json doc{{"version", kVersion}, {"jobs", json::array()}};
  for (const auto& [id, request] : jobs) {
    json job = json::parse(request, nullptr, /*allow_exceptions=*/false);
    if (!job.is_object()) return common::Internal("job " + std::to_string(id) + ": a request that is not JSON");
    doc["jobs"].push_back(std::move(job));
  }
  common::Status written = common::WriteFileAtomically(path_, doc.dump(2) + "\n", 0600);
  if (!written.ok()) return common::Unavailable("aggregation.state_file: " + written.message());
  return common::Status::Ok();
}

}  // namespace aggswitch::control
