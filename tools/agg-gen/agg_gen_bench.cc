// The per-frame cost of agg-gen's hot path, without a port: writing a
// contribution, and classifying plus checking a result (GenEngine::OnFrame).
// Together with the memif copies these bound agg-gen's rate; the generator
// must stay well ahead of the switch (bench/aggregation.sh).
//
//   build/tools/agg-gen/agg_gen_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "dataplane/packet.h"
#include "tools/agg-gen/engine.h"
#include "tools/agg-gen/frames.h"

namespace aggswitch::tools {
namespace {

GenConfig BenchConfig(int64_t elems) {
  GenConfig cfg;
  cfg.workers = 16;
  cfg.elems = static_cast<uint16_t>(elems);
  return cfg;
}

void BM_WriteContribution(benchmark::State& state) {
  const GenConfig cfg = BenchConfig(state.range(0));
  const FrameFactory frames(cfg);
  std::vector<uint8_t> buf(frames.contribution_len());
  uint32_t seq = 0;
  for (auto _ : state) {
    frames.WriteContribution(0, static_cast<uint16_t>(seq & 15), seq, seq, false, buf.data());
    benchmark::DoNotOptimize(buf.data());
    ++seq;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_WriteContribution)->Arg(64)->Arg(256)->Arg(356);

// The RESULT of chunk seq of job index 0 for worker w, as the switch sends it.
std::vector<uint8_t> ResultFrame(const GenConfig& cfg, const FrameFactory& frames, uint32_t seq,
                                 uint16_t w) {
  std::vector<uint8_t> payload(frames.values().payload_bytes());
  for (uint32_t i = 0; i < cfg.elems; ++i) {
    const uint32_t bits = frames.values().ExpectedBits(seq, i);
    std::memcpy(payload.data() + 4 * i, &bits, 4);
  }
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kResult;
  f.job_id = cfg.job_base;
  f.seq = seq;
  f.job_key = cfg.key;
  f.elem_count = cfg.elems;
  std::vector<uint8_t> frame(kContributionHeadLen + payload.size());
  const uint32_t n = aggregator::BuildAggregation(
      f, nullptr, 0, payload.data(), static_cast<uint32_t>(payload.size()),
      frame.data() + kUdpHeadersLen, static_cast<uint32_t>(frame.size() - kUdpHeadersLen));
  dataplane::WriteUdpHeaders(frame.data(), WorkerMac(cfg, w).bytes.data(),
                             cfg.switch_mac.bytes.data(), 0, cfg.switch_ip.addr, WorkerIp(cfg, w),
                             cfg.switch_port, WorkerPort(cfg, w), 0, n);
  return frame;
}

// A result for a chunk already answered: classified, header and payload
// checked, counted as a duplicate (the first-answer path adds only the
// window update).
void BM_CheckResult(benchmark::State& state) {
  const GenConfig cfg = BenchConfig(state.range(0));
  const FrameFactory frames(cfg);
  GenEngine engine(cfg, frames, 1000000);
  engine.Start(0);
  SendOp ops[32];
  (void)engine.PlanSends(1, ops, 32);  // seq 0 of workers 0..15, seq 1 of 0..15
  std::vector<std::vector<uint8_t>> results;
  for (uint16_t w = 0; w < cfg.workers; ++w) results.push_back(ResultFrame(cfg, frames, 0, w));
  size_t i = 0;
  for (auto _ : state) {
    const std::vector<uint8_t>& r = results[i++ & 15];
    engine.OnFrame(r.data(), static_cast<uint32_t>(r.size()));
  }
  if (engine.counters().Errors() != 0) state.SkipWithError("wrong answers");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CheckResult)->Arg(64)->Arg(256)->Arg(356);

}  // namespace
}  // namespace aggswitch::tools
