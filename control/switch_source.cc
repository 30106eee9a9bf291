#include "control/switch_source.h"

#include <algorithm>

#include <chrono>
#include <optional>

#include "control/job_control.h"
#include "control/stats_snapshot.h"
#include "control/tree_control.h"
#include "dataplane/dataplane.h"

namespace aggswitch::control {
namespace {

// How long a slot dump waits for the workers (a few hundred slots per poll
// loop each); past it /api/v1/slots answers 503.
constexpr std::chrono::milliseconds kSlotDumpTimeout{500};

// Runs `fn` (which returns a Result<T>) on the control thread and returns
// its result, or why the control thread did not take it.
template <typename T, typename Fn>
common::Result<T> ResultOnControl(JobControl& jobs, Fn&& fn) {
  common::Result<T> result = common::Internal("not run");
  RETURN_IF_ERROR(jobs.RunOnControl([&] {
    result = fn();
    return common::Status::Ok();
  }));
  return result;
}

}  // namespace

DataSource SwitchDataSource(const dataplane::Dataplane& dp, JobControl* jobs, TreeControl* tree) {
  DataSource source;
  source.snapshot = [&dp, jobs, tree] {
    StatsSnapshot snap = CollectSnapshot(dp);
    if (jobs != nullptr) {
      // The job table and the own TAN belong to the control thread: both are
      // read there, in one step. Without an answer /metrics leaves their
      // families out rather than fail the whole scrape.
      JobTableSnapshot table;
      std::optional<OwnTanSnapshot> tan;
      const bool aggregating = snap.aggregation.has_value();
      const common::Status read = jobs->RunOnControl([&] {
        table = jobs->Snapshot();
        if (tree != nullptr && aggregating) {
          tan = OwnTanSnapshot{tree->tan_counters(), tree->tan_pending()};
        }
        return common::Status::Ok();
      });
      if (read.ok()) {
        snap.jobs = std::move(table);
        if (aggregating) snap.aggregation->tan = tan;
      }
    }
    return snap;
  };
  source.mac_entries = [&dp] { return CollectMacEntries(dp); };
  if (dp.aggregation_enabled()) {
    // DumpSlots waits for the workers and serialises its callers, so a dump
    // never runs on a worker lcore and civetweb's two threads take turns.
    source.slots = [&dp](size_t limit) { return dp.DumpSlots(limit, kSlotDumpTimeout); };
    source.bypass = [&dp](size_t limit) { return dp.DumpBypass(limit, kSlotDumpTimeout); };
  }
  if (jobs != nullptr) jobs->Attach(source);
  if (jobs != nullptr && tree != nullptr) {
    // The predictors and the participation bitmaps belong to the control thread.
    source.stragglers = [jobs, tree](uint32_t job, const StragglerRequest& request) {
      return ResultOnControl<StragglerReport>(*jobs, [&] { return tree->Stragglers(job, request); });
    };
    // A TAN needs the aggregation path. JobControl changes it on the control
    // thread, and its change hook has the tree resolve the new one.
    source.tan = [jobs](uint32_t job, const std::optional<TanRequest>& request) {
      return jobs->Tan(job, request);
    };
  }
  return source;
}

common::Status CheckWatchList(const config::Config& running,
                              const std::vector<config::WatchEntry>& watch) {
  config::Config next = running;
  next.telemetry.watch = watch;
  next.source_locs.clear();  // the body's entries have no place in the file
  std::vector<config::ConfigError> errors;
  if (config::Validate(next, errors)) return common::Status::Ok();
  std::string message;
  constexpr std::string_view kPrefix = "telemetry.";
  for (const config::ConfigError& e : errors) {
    std::string_view path = e.path;
    if (path.substr(0, kPrefix.size()) == kPrefix) path.remove_prefix(kPrefix.size());
    if (!message.empty()) message += "; ";
    message += std::string(path) + ": " + e.message;
  }
  return common::InvalidArgument(message);
}

void AttachPathDecisions(dataplane::Dataplane& dp, DataSource& source) {
  const dataplane::ForwardingPlan& plan = dp.plan();
  source.decisions = [&dp, &plan] {
    PathDecisionsView view;
    for (uint16_t p = 0; p < plan.port_count(); ++p) {
      const std::string& group = plan.groups().name(p);
      if (group.empty()) continue;
      auto it = std::find_if(view.groups.begin(), view.groups.end(),
                             [&](const PathDecisionsView::Group& g) { return g.name == group; });
      if (it == view.groups.end()) it = view.groups.insert(view.groups.end(), {group, {}});
      it->ports.push_back(plan.port(p).name);
    }
    for (const dataplane::PathDecision& d : dp.path_decisions()) {
      view.decisions.push_back({d.dst, plan.port(d.port).name, d.port, plan.groups().name(d.port)});
    }
    return view;
  };
  source.set_decisions = [&dp, &plan](const std::vector<PathDecisionEntry>& entries) -> common::Status {
    std::vector<dataplane::PathDecision> decisions;
    decisions.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const PathDecisionEntry& e = entries[i];
      uint16_t port = e.port_index.value_or(dataplane::PathDecisions::kNone);
      if (!e.port_index) {
        for (uint16_t p = 0; p < plan.port_count(); ++p) {
          if (plan.port(p).name == e.port) port = p;
        }
        if (port == dataplane::PathDecisions::kNone) {
          return common::InvalidArgument("decisions[" + std::to_string(i) +
                                         "].port: expected a port of this switch, got \"" + e.port +
                                         "\"");
        }
      }
      decisions.push_back({e.dst, port});
    }
    return dp.SetPathDecisions(decisions);
  };
}

std::function<common::Status(const std::vector<config::WatchEntry>&)> WatchListSetter(
    dataplane::Dataplane& dp, const config::Config& running) {
  if (dp.int_settings() == nullptr) return {};
  return [&dp, running](const std::vector<config::WatchEntry>& watch) -> common::Status {
    RETURN_IF_ERROR(CheckWatchList(running, watch));
    return dp.SetWatchList(watch);
  };
}

}  // namespace aggswitch::control
