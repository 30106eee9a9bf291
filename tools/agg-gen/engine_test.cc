// The closed loop without a port: GenEngine against TestSwitch (test_switch.h),
// on a fake TSC that advances 100 ticks per pass (tsc_hz 1 MHz: 1 tick = 1 us).
#include "tools/agg-gen/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>

#include "tools/agg-gen/test_switch.h"

namespace aggswitch::tools {
namespace {

constexpr uint64_t kTscHz = 1000000;

GenConfig LoopConfig() {
  GenConfig cfg;
  cfg.workers = 4;
  cfg.jobs = 2;
  cfg.job_base = 1;
  cfg.elems = 16;
  cfg.window = 8;
  cfg.chunks = 100;
  cfg.timeout_ms = 2;
  return cfg;
}

// Runs the loop until the engine is done or `max_passes` passes. `deliver`
// decides whether the n-th answer frame reaches the engine.
class Loop {
 public:
  explicit Loop(const GenConfig& cfg)
      : cfg_(cfg), frames_(cfg), engine_(cfg, frames_, kTscHz), sw_(cfg) {
    engine_.Start(now_);
  }

  void Run(uint32_t max_passes, const std::function<bool(uint64_t)>& deliver = nullptr) {
    for (uint32_t pass = 0; pass < max_passes && !engine_.Done(); ++pass) {
      now_ += 100;
      SendOp ops[32];
      const uint32_t floor = Floor();
      const uint32_t n = engine_.PlanSends(now_, ops, 32);
      for (uint32_t i = 0; i < n; ++i) {
        if (ops[i].final_ack) {
          EXPECT_EQ(ops[i].ack, engine_.Ack(ops[i].job, ops[i].worker));
          Frame f(frames_.ack_len());
          frames_.WriteAck(ops[i].job, ops[i].worker, ops[i].ack, f.data());
          if (cfg_.expect == Expect::kResults) {
            EXPECT_TRUE(sw_.Receive(f).empty());
          }
          ++final_acks_;
          continue;
        }
        // Lockstep: nothing is sent a window or more ahead of the slowest worker.
        EXPECT_LT(ops[i].seq - floor, cfg_.window) << "seq " << ops[i].seq << " floor " << floor;
        EXPECT_EQ(ops[i].ack, engine_.Ack(ops[i].job, ops[i].worker));
        Frame f(frames_.contribution_len());
        frames_.WriteContribution(ops[i].job, ops[i].worker, ops[i].seq, ops[i].ack,
                                  ops[i].retransmission, f.data());
        if (cfg_.expect == Expect::kEcho) {
          answers_.push_back(std::move(f));
          continue;
        }
        for (Frame& r : sw_.Receive(f)) answers_.push_back(std::move(r));
      }
      // Answers arrive one pass later.
      while (!answers_.empty()) {
        if (!deliver || deliver(delivered_++)) {
          engine_.OnFrame(answers_.front().data(), static_cast<uint32_t>(answers_.front().size()));
        }
        answers_.pop_front();
      }
    }
  }

  uint32_t Floor() const {
    uint32_t floor = UINT32_MAX;
    for (uint32_t j = 0; j < cfg_.jobs; ++j) {
      for (uint16_t w = 0; w < cfg_.workers; ++w) floor = std::min(floor, engine_.Ack(j, w));
    }
    return floor;
  }

  GenConfig cfg_;
  FrameFactory frames_;
  GenEngine engine_;
  TestSwitch sw_;
  uint64_t now_ = 1000;
  uint64_t delivered_ = 0;
  uint32_t final_acks_ = 0;
  std::deque<Frame> answers_;
};

TEST(EngineTest, ClosedLoopAnswersEveryChunkOfEveryWorkerAndJob) {
  Loop loop(LoopConfig());
  loop.Run(10000);
  const GenCounters& c = loop.engine_.counters();
  ASSERT_TRUE(loop.engine_.Done());
  EXPECT_EQ(c.sent, 4u * 2u * 100u);
  EXPECT_EQ(c.completed, 4u * 2u * 100u);
  EXPECT_EQ(c.answers, c.completed);
  EXPECT_EQ(c.retransmits, 0u);
  EXPECT_EQ(c.duplicates, 0u);
  EXPECT_EQ(c.Errors(), 0u);
  EXPECT_EQ(loop.engine_.Unanswered(), 0u);
  EXPECT_EQ(loop.engine_.n_details(), 0u);
  for (uint32_t j = 0; j < 2; ++j) {
    for (uint16_t w = 0; w < 4; ++w) EXPECT_EQ(loop.engine_.Ack(j, w), 100u);
  }
  // Every worker's final ACK of every job but those that finished on the
  // last answer (those are the port runner's, at the end of the run).
  uint32_t planned = 0;
  for (uint32_t j = 0; j < 2; ++j) {
    for (uint16_t w = 0; w < 4; ++w) planned += loop.engine_.FinalAckPlanned(j, w);
  }
  EXPECT_EQ(loop.final_acks_, planned);
  EXPECT_LT(planned, 8u);
}

// A job whose last answers are late must not keep the other job's slots: each
// worker of the finished job ACKs everything at once, while the late one is
// still retransmitted. (On a switch, the late job's chunks may be placed
// where the finished job's last window was, held until its ACK.)
TEST(EngineTest, AWorkerThatFinishedAJobAcksItWhileAnotherJobStillRuns) {
  Loop loop(LoopConfig());
  const auto job1_acked = [&] {
    for (uint16_t w = 0; w < 4; ++w) {
      if (loop.sw_.ack(1, w) != 100) return false;
    }
    return true;
  };
  // Job 2's last chunk is answered only once every worker has ACKed all of
  // job 1, as a switch that placed it where job 1's last window was would:
  // without those ACKs the run never ends.
  loop.Run(10000, [&](uint64_t) {
    const auto* h =
        reinterpret_cast<const aggregator::AggHeader*>(loop.answers_.front().data() + 42);
    return h->job_id.host() != 2 || h->seq.host() != 99 || job1_acked();
  });
  ASSERT_TRUE(loop.engine_.Done());
  EXPECT_TRUE(job1_acked());
  for (uint16_t w = 0; w < 4; ++w) EXPECT_TRUE(loop.engine_.FinalAckPlanned(0, w));
  EXPECT_GT(loop.engine_.counters().retransmits, 0u);
  EXPECT_EQ(loop.engine_.counters().completed, 4u * 2u * 100u);
}

TEST(EngineTest, EveryTypeAndOperationChecksOut) {
  for (aggregator::DType dtype : {aggregator::DType::kInt32, aggregator::DType::kFloat32}) {
    for (aggregator::ReduceOp op :
         {aggregator::ReduceOp::kSum, aggregator::ReduceOp::kMin, aggregator::ReduceOp::kMax}) {
      GenConfig cfg = LoopConfig();
      cfg.dtype = dtype;
      cfg.op = op;
      cfg.chunks = 300;  // past seq 255: the seq byte wraps
      Loop loop(cfg);
      loop.Run(100000);
      EXPECT_TRUE(loop.engine_.Done());
      EXPECT_EQ(loop.engine_.counters().completed, 4u * 2u * 300u);
      EXPECT_EQ(loop.engine_.counters().Errors(), 0u)
          << aggregator::DTypeName(dtype) << " " << aggregator::ReduceOpName(op);
    }
  }
}

TEST(EngineTest, LostAnswersAreRetransmittedUntilAnswered) {
  Loop loop(LoopConfig());
  loop.Run(100000, [](uint64_t n) { return n % 7 != 3; });  // lose one answer in 7
  const GenCounters& c = loop.engine_.counters();
  ASSERT_TRUE(loop.engine_.Done());
  EXPECT_EQ(c.completed, 4u * 2u * 100u);
  EXPECT_GT(c.retransmits, 0u);
  EXPECT_EQ(c.sent, c.completed + c.retransmits);
  EXPECT_EQ(c.Errors(), 0u);
}

TEST(EngineTest, AJobWithFewerMembersGivesWrongResultsAndStalls) {
  Loop loop(LoopConfig());
  loop.sw_.set_members(3);  // the switch reduces workers 0..2 only; worker 3 is refused
  loop.Run(2000);
  const GenCounters& c = loop.engine_.counters();
  EXPECT_FALSE(loop.engine_.Done());
  EXPECT_GT(c.errors[static_cast<size_t>(GenError::kPayload)], 0u);
  EXPECT_GT(loop.engine_.Unanswered(), 0u);
  EXPECT_EQ(loop.Floor(), 0u);  // worker 3 never got an answer
  EXPECT_EQ(loop.engine_.last_progress_tsc(), 1000u);
  ASSERT_GT(loop.engine_.n_details(), 0u);
  const ErrorDetail& d = loop.engine_.details()[0];
  EXPECT_EQ(d.error, GenError::kPayload);
  EXPECT_EQ(d.index, 0);
  // Sum over 3 workers of (w + 1) * 1 + seq, against 4 workers.
  EXPECT_EQ(d.got, 6u + 3u * d.seq);
  EXPECT_EQ(d.want, 10u + 4u * d.seq);
  // Only the window was ever sent: the workers waited for worker 3.
  EXPECT_EQ(c.sent - c.retransmits, 4u * 2u * 8u);
}

TEST(EngineTest, ChecksEveryHeaderFieldOfAResult) {
  const GenConfig cfg = LoopConfig();
  FrameFactory frames(cfg);
  GenEngine engine(cfg, frames, kTscHz);
  engine.Start(0);
  SendOp ops[32];
  ASSERT_EQ(engine.PlanSends(1, ops, 32), 32u);  // seq 0..3 of every (job, worker)
  const TestSwitch sw(cfg);
  auto result = [&](auto change) {
    aggregator::AggFields f;
    f.opcode = aggregator::Opcode::kResult;
    f.job_id = 1;
    f.seq = 0;
    f.job_key = 0;  // results carry no key
    f.elem_count = cfg.elems;
    f.incarnation = cfg.incarnation;
    change(f);
    const Frame fr = sw.Result(f, Frame(4 * f.elem_count, 0), 0);
    engine.OnFrame(fr.data(), static_cast<uint32_t>(fr.size()));
  };
  auto errors = [&engine](GenError e) { return engine.counters().errors[static_cast<size_t>(e)]; };
  result([&cfg](aggregator::AggFields& f) { f.job_key = cfg.key; });
  EXPECT_EQ(errors(GenError::kHeader), 1u);
  EXPECT_STREQ(engine.details()[0].field, "job_key");
  result([](aggregator::AggFields& f) {
    f.seq = 1;
    f.elem_count = 15;
  });
  result([](aggregator::AggFields& f) {
    f.seq = 2;
    f.dtype = aggregator::DType::kFloat32;
  });
  result([](aggregator::AggFields& f) {
    f.seq = 3;
    f.op = aggregator::ReduceOp::kMax;
  });
  EXPECT_EQ(errors(GenError::kHeader), 4u);
  EXPECT_STREQ(engine.details()[1].field, "elem_count");
  EXPECT_STREQ(engine.details()[2].field, "dtype");
  EXPECT_STREQ(engine.details()[3].field, "op");
  result([](aggregator::AggFields& f) {  // an earlier run's result
    f.job_id = 2;
    f.incarnation = 0x0badf00d;
  });
  EXPECT_EQ(errors(GenError::kHeader), 5u);
  EXPECT_STREQ(engine.details()[4].field, "incarnation");
  result([](aggregator::AggFields& f) { f.seq = 4; });     // never sent
  result([](aggregator::AggFields& f) { f.job_id = 3; });  // not one of the jobs
  EXPECT_EQ(errors(GenError::kStray), 2u);
  // The header checks passed for none of them, so no payload was judged;
  // the five with a sent seq count as answered.
  EXPECT_EQ(errors(GenError::kPayload), 0u);
  EXPECT_EQ(engine.counters().completed, 5u);
}

TEST(EngineTest, EchoModeCountsTheContributionsThatComeBack) {
  GenConfig cfg = LoopConfig();
  cfg.expect = Expect::kEcho;
  Loop loop(cfg);
  loop.Run(10000);
  ASSERT_TRUE(loop.engine_.Done());
  EXPECT_EQ(loop.engine_.counters().completed, 4u * 2u * 100u);
  EXPECT_EQ(loop.engine_.counters().Errors(), 0u);
}

TEST(EngineTest, StopSendingDrainsWhatIsInFlight) {
  GenConfig cfg = LoopConfig();
  cfg.chunks = 0;  // no limit
  Loop loop(cfg);
  loop.Run(50);
  EXPECT_FALSE(loop.engine_.Done());
  const uint64_t sent = loop.engine_.counters().sent;
  EXPECT_GT(sent, 0u);
  loop.engine_.StopSending();
  loop.Run(1000);
  EXPECT_TRUE(loop.engine_.Done());
  EXPECT_EQ(loop.engine_.Unanswered(), 0u);
  EXPECT_EQ(loop.engine_.counters().completed, loop.engine_.counters().sent);
}

}  // namespace
}  // namespace aggswitch::tools
