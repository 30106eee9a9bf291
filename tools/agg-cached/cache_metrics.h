// agg-cached's /metrics: a cache node's counters (CacheDaemon::Stats) in
// Prometheus's text format, through the project's one exposition writer
// (common/prometheus.h). docs/cache.md lists the families.
//
//   r.body = RenderCacheMetrics(daemon.stats(), daemon.config());
//
// Thread safety: a pure function; any thread.
#pragma once

#include <string>

#include "cache/cache_daemon.h"

namespace aggswitch::tools {

std::string RenderCacheMetrics(const cache::CacheDaemon::Stats& s, const cache::DaemonConfig& config);

}  // namespace aggswitch::tools
