// The jobs added through the API, kept across restarts: the file at
// aggregation.state_file holds the request of every API job, as POST
// /api/v1/jobs took it with the TAN changes POST /api/v1/jobs/<id>/tan made
// since (its "tan" and "tan_member"), and is replaced atomically
// (common/atomic_file.h) each time one is added, removed or given a TAN. At start the switch adds them again
// (JobControl::RestoreSavedJobs), after the config's jobs. In-band jobs
// register again from their task info, and config jobs come from the
// config, so neither is kept here.
//
//   {"version": 1, "jobs": [{"id": 7, "key": "0x...", "members": 4, ...}, ...]}
//
// The requests carry the jobs' keys: the file is written mode 0600.
//
//   JobStateFile state("/var/lib/aggswitch/jobs.json");
//   ASSIGN_OR_RETURN(JobStateFile::Jobs saved, state.Load());
//   saved[7] = request_json;
//   RETURN_IF_ERROR(state.Save(saved));
//
// Thread safety: one owner (JobControl, on the control thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"

namespace aggswitch::control {

class JobStateFile {
 public:
  // Each API job's request, a JSON object, by job id.
  using Jobs = std::map<uint32_t, std::string>;

  explicit JobStateFile(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  // The saved requests; none when the file does not exist. A file that is
  // not such a document is moved aside to "<path>.bad" (never overwritten,
  // never lost) and reported as InvalidArgument naming both paths; the
  // caller starts with no saved job. A single entry without a numeric "id"
  // is the same: the whole file is moved aside.
  common::Result<Jobs> Load() const;
  // Replaces the file with `jobs`.
  common::Status Save(const Jobs& jobs) const;

 private:
  std::string path_;
};

}  // namespace aggswitch::control
