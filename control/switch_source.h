// What the switch's HTTP server serves (api.h's DataSource over the live
// dataplane): /metrics and /api/v1 read the dataplane only through its
// [any] accessors (CollectSnapshot, CollectMacEntries, DumpSlots) and never
// touch a worker lcore's state for writing, so a scrape cannot stall
// forwarding; a slot dump asks the workers for a copy and waits at most
// 500 ms for it. The job routes (a job's TAN too), each job's counters and
// the own TAN's counters go through JobControl, which hands them to the
// control thread.
//
//   ASSIGN_OR_RETURN(auto http, StartApiServer(options, SwitchDataSource(*dp, &jobs, &tree)));
//
// Thread safety: SwitchDataSource() on the control thread; the source's
// functions on any thread (civetweb's), concurrently.
#pragma once

#include "control/api.h"

namespace aggswitch::dataplane {
class Dataplane;
}  // namespace aggswitch::dataplane

namespace aggswitch::control {

class JobControl;
class TreeControl;

// The source over `dp`, and the job table through `jobs` when given (else
// the job routes answer 503), the stragglers and TANs through `tree` with
// it. Each must outlive the server. /api/v1/slots answers 503 unless `dp`
// aggregates. [control]
DataSource SwitchDataSource(const dataplane::Dataplane& dp, JobControl* jobs = nullptr,
                            TreeControl* tree = nullptr);

// PUT /api/v1/int's watch list replacement (DataSource::set_watch): the
// list is checked as config::Validate() checks telemetry.watch in a copy of
// `running` (errors named watch[i].key), then published to the workers. An
// empty function when `dp` runs no telemetry. `dp` must outlive it. [control]
std::function<common::Status(const std::vector<config::WatchEntry>&)> WatchListSetter(
    dataplane::Dataplane& dp, const config::Config& running);

// GET and PUT /api/v1/int/decisions over `dp` (DataSource::decisions and
// set_decisions): ports named or given by index, the error naming
// decisions[i].port for one the switch does not have. `dp` must outlive
// them. [control]
void AttachPathDecisions(dataplane::Dataplane& dp, DataSource& source);

// The checks of that replacement alone: OK, or InvalidArgument listing
// every mistake. [any]
common::Status CheckWatchList(const config::Config& running,
                              const std::vector<config::WatchEntry>& watch);

}  // namespace aggswitch::control
