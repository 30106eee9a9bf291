#include "tools/agg-gen/gen_config.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "aggregator/slot_placement.h"

namespace aggswitch::tools {

using common::InvalidArgument;
using common::Status;

namespace {

std::string Str(uint64_t v) {
  return std::to_string(v);
}

// Distance between two slots on the ring of `slots`.
uint32_t RingDistance(uint32_t a, uint32_t b, uint32_t slots) {
  const uint32_t d = (a - b) & (slots - 1);
  return std::min(d, slots - d);
}

Status ValidateSlots(const GenConfig& cfg) {
  if (cfg.slots < 2 || (cfg.slots & (cfg.slots - 1)) != 0) {
    return InvalidArgument("--slots " + Str(cfg.slots) +
                           ": the switch's aggregation.slots is a power of two");
  }
  const uint64_t footprint = 2ull * cfg.window;  // slots one job may hold at once
  if (footprint * cfg.jobs > cfg.slots / 2) {
    return InvalidArgument("--window " + Str(cfg.window) + " x --jobs " + Str(cfg.jobs) +
                           ": the jobs would hold up to " + Str(footprint * cfg.jobs) + " of the " +
                           Str(cfg.slots) + " slots (2 x window each); keep it to half (" +
                           Str(cfg.slots / 2) + ") with a smaller --window or fewer --jobs");
  }
  // Jobs advance in lockstep (engine.h), so job j always holds slots
  // start(j) + [G - window, G + window) for a common G: two jobs whose starts
  // are closer than 2 * window would collide.
  if (!cfg.slot_secret) return Status::Ok();  // where the jobs start is the switch's secret
  const aggregator::SlotRegion region = aggregator::SlotRegion::Make(0, cfg.slots);
  std::vector<uint32_t> start(cfg.jobs);
  for (uint32_t j = 0; j < cfg.jobs; ++j) {
    start[j] = region.Of(aggregator::SlotOffset(*cfg.slot_secret, cfg.job_base + j), 0);
  }
  for (uint32_t a = 0; a < cfg.jobs; ++a) {
    for (uint32_t b = a + 1; b < cfg.jobs; ++b) {
      const uint32_t d = RingDistance(start[a], start[b], cfg.slots);
      if (d < footprint) {
        return InvalidArgument("jobs " + Str(cfg.job_base + a) + " and " + Str(cfg.job_base + b) +
                               " start " + Str(d) + " slots apart in a " + Str(cfg.slots) +
                               "-slot switch; with --window " + Str(cfg.window) +
                               " their chunks would collide (they need " + Str(footprint) +
                               "): pick another --job-base, fewer --jobs or a smaller --window");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateGenConfig(const GenConfig& cfg) {
  if (cfg.workers < 1 || cfg.workers > kMaxGenWorkers) {
    return InvalidArgument("--workers wants 1.." + Str(kMaxGenWorkers));
  }
  if (cfg.jobs < 1) return InvalidArgument("--jobs wants at least 1");
  if (cfg.job_base < 1 || uint64_t{cfg.job_base} + cfg.jobs - 1 > UINT32_MAX) {
    return InvalidArgument("--job-base: job ids are 1..4294967295");
  }
  if (cfg.elems < 1 || cfg.elems > kMaxGenElems) {
    return InvalidArgument("--elems wants 1.." + Str(kMaxGenElems) +
                           " (a contribution fits a 1500-byte MTU)");
  }
  if (cfg.dtype != aggregator::DType::kInt32 && cfg.dtype != aggregator::DType::kFloat32) {
    return InvalidArgument("--dtype: int32 or float32");
  }
  if (cfg.op != aggregator::ReduceOp::kSum && cfg.op != aggregator::ReduceOp::kMin &&
      cfg.op != aggregator::ReduceOp::kMax) {
    return InvalidArgument("--op: sum, min or max");
  }
  if (cfg.window < 1 || cfg.window > kMaxGenWindow) {
    return InvalidArgument("--window wants 1.." + Str(kMaxGenWindow) + " chunks");
  }
  if (cfg.timeout_ms < 1) return InvalidArgument("--timeout-ms wants at least 1");
  if (cfg.give_up_ms < cfg.timeout_ms) {
    return InvalidArgument("--give-up-ms must be at least --timeout-ms");
  }
  if (!(cfg.duration_s >= 0) || std::isinf(cfg.duration_s)) {
    return InvalidArgument("--duration wants seconds >= 0");
  }
  if (uint32_t{cfg.src_port} + cfg.workers - 1 > UINT16_MAX) {
    return InvalidArgument("--src-port: worker ports " + Str(cfg.src_port) + ".." +
                           Str(uint32_t{cfg.src_port} + cfg.workers - 1) + " exceed 65535");
  }
  if (cfg.switch_port >= cfg.src_port && cfg.switch_port < uint32_t{cfg.src_port} + cfg.workers) {
    return InvalidArgument("--switch-port " + Str(cfg.switch_port) +
                           " lies among the worker ports: results could not be told apart");
  }
  if (uint64_t{cfg.src_ip.addr} + cfg.workers - 1 > UINT32_MAX) {
    return InvalidArgument("--src-ip: worker addresses run past 255.255.255.255");
  }
  if (cfg.switch_ip.addr >= cfg.src_ip.addr &&
      uint64_t{cfg.switch_ip.addr} < uint64_t{cfg.src_ip.addr} + cfg.workers) {
    return InvalidArgument("--switch-ip " + cfg.switch_ip.ToString() +
                           " is one of the worker addresses");
  }
  if (cfg.src_mac.IsMulticast() || cfg.src_mac.ToU64() + cfg.workers - 1 > 0xffffffffffffULL) {
    return InvalidArgument("--src-mac: worker MACs must be unicast and below ff:ff:ff:ff:ff:ff");
  }
  if (cfg.switch_mac.IsZero()) return InvalidArgument("--switch-mac must not be zero");
  return ValidateSlots(cfg);
}

common::MacAddr WorkerMac(const GenConfig& cfg, uint16_t worker) {
  return common::MacAddr::FromU64(cfg.src_mac.ToU64() + worker);
}

uint32_t WorkerIp(const GenConfig& cfg, uint16_t worker) {
  return cfg.src_ip.addr + worker;
}

uint16_t WorkerPort(const GenConfig& cfg, uint16_t worker) {
  return static_cast<uint16_t>(cfg.src_port + worker);
}

}  // namespace aggswitch::tools
