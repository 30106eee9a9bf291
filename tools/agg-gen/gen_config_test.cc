#include "tools/agg-gen/gen_config.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "aggregator/slot_placement.h"

namespace aggswitch::tools {
namespace {

TEST(GenConfigTest, DefaultsAreValid) {
  const common::Status status = ValidateGenConfig(GenConfig{});
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(GenConfigTest, WorkerAddressesCountUpFromWorkerZero) {
  GenConfig cfg;
  EXPECT_EQ(WorkerMac(cfg, 0).ToString(), "02:a9:9c:01:00:00");
  EXPECT_EQ(WorkerMac(cfg, 0x1ff).ToString(), "02:a9:9c:01:01:ff");
  EXPECT_EQ(common::Ipv4Addr{WorkerIp(cfg, 3)}.ToString(), "10.0.10.13");
  EXPECT_EQ(WorkerPort(cfg, 3), 40003);
}

TEST(GenConfigTest, RejectsWindowsThatFillTheSlots) {
  GenConfig cfg;
  cfg.slots = 4096;
  cfg.jobs = 1;
  cfg.window = 1024;  // 2 x 1024 = half of the slots: the limit
  EXPECT_TRUE(ValidateGenConfig(cfg).ok());
  cfg.slots = 2048;
  const common::Status status = ValidateGenConfig(cfg);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("--window 1024 x --jobs 1"), std::string::npos)
      << status.message();
}

TEST(GenConfigTest, RejectsJobsWhoseChunksWouldShareSlots) {
  GenConfig cfg;
  cfg.window = 32;
  cfg.jobs = 2;
  cfg.slot_secret = common::SipKey{0x5eed, 0xcafe};
  // Two neighbouring job ids whose first slots lie closer than 2 * window,
  // and two that lie further apart.
  const aggregator::SlotRegion region = aggregator::SlotRegion::Make(0, cfg.slots);
  auto start = [&](uint32_t id) { return region.Of(aggregator::SlotOffset(*cfg.slot_secret, id), 0); };
  auto distance = [&](uint32_t id) {
    const uint32_t d = (start(id + 1) - start(id) + cfg.slots) % cfg.slots;
    return std::min(d, cfg.slots - d);
  };
  uint32_t close = 1, apart = 1;
  while (distance(close) >= 2 * cfg.window) ++close;
  while (distance(apart) < 2 * cfg.window) ++apart;

  cfg.job_base = apart;
  EXPECT_TRUE(ValidateGenConfig(cfg).ok()) << ValidateGenConfig(cfg).message();
  cfg.job_base = close;
  const common::Status status = ValidateGenConfig(cfg);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("would collide"), std::string::npos) << status.message();
  cfg.jobs = 1;  // alone, the job is fine
  EXPECT_TRUE(ValidateGenConfig(cfg).ok());
}

TEST(GenConfigTest, RejectsBadRanges) {
  auto bad = [](auto change) {
    GenConfig cfg;
    change(cfg);
    return !ValidateGenConfig(cfg).ok();
  };
  EXPECT_TRUE(bad([](GenConfig& c) { c.workers = 0; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.workers = 257; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.elems = 357; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.elems = 0; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.dtype = aggregator::DType::kFloat16; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.op = aggregator::ReduceOp::kAnd; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.window = 0; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.job_base = 0; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.give_up_ms = c.timeout_ms - 1; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.slots = 3000; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.src_port = 65534; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.switch_port = c.src_port + 2; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.switch_ip.addr = c.src_ip.addr + 1; }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.src_mac = *common::MacAddr::Parse("03:00:00:00:00:00"); }));
  EXPECT_TRUE(bad([](GenConfig& c) { c.duration_s = -1; }));
}

}  // namespace
}  // namespace aggswitch::tools
