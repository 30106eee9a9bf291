#include "cache/cache_config.h"

#include <gtest/gtest.h>

namespace aggswitch::cache {
namespace {

constexpr const char* kDaemon = R"(cache:
  node: n1
  nodes: [n1, n2, n3]
  listen: 10.0.0.1:7400
  memory: 256MiB
  store: http://10.0.9.1:8000/ds
  dataset: ds
  records: etcd://10.0.9.2:2379
  replicas: 2
  allow:
    nodes: [10.0.0.0/24]
    jobs: [train]
)";

TEST(CacheConfigTest, ReadsADaemonConfig) {
  auto c = ParseDaemonConfig(kDaemon, "cache.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->memory, 256ull << 20);
  EXPECT_EQ(c->replicas, 2u);
  EXPECT_EQ(c->allow_nodes.size(), 1u);
  EXPECT_EQ(c->allow_jobs, std::vector<std::string>{"train"});
  EXPECT_EQ(c->region_dir, "/dev/shm");
  EXPECT_EQ(c->ucx_tls, kDefaultTls);
}

TEST(CacheConfigTest, ErrorsNameTheLineTheKeyAndWhatWasExpected) {
  std::string bad = kDaemon;
  bad.replace(bad.find("256MiB"), 6, "lots");
  bad.replace(bad.find("replicas: 2"), 11, "replicas: 4");
  bad += "  colour: blue\n";
  auto c = ParseDaemonConfig(bad, "cache.yaml");
  ASSERT_FALSE(c.ok());
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("cache.yaml:5:11: cache.memory: expected a size such as 512MiB, got \"lots\""),
            std::string::npos) << m;
  EXPECT_NE(m.find("cache.colour: unknown key \"colour\""), std::string::npos) << m;
  std::string many = kDaemon;
  many.replace(many.find("replicas: 2"), 11, "replicas: 4");
  auto r = ParseDaemonConfig(many, "cache.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cache.yaml:9:13: cache.replicas: expected at most 3"),
            std::string::npos) << r.status().message();
  auto missing = ParseDaemonConfig("cache:\n  node: n1\n", "c.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cache.listen: missing required key"), std::string::npos);
  EXPECT_NE(missing.status().message().find("cache.allow: missing required key"), std::string::npos);
  auto stranger = ParseDaemonConfig(std::string(kDaemon).replace(std::string(kDaemon).find("node: n1"), 8, "node: n9"), "c.yaml");
  ASSERT_FALSE(stranger.ok());
  EXPECT_NE(stranger.status().message().find("expected one of cache.nodes"), std::string::npos);
}

TEST(CacheConfigTest, ReadsALoaderConfig) {
  auto l = ParseLoaderConfig(R"(loader:
  records: file:/tmp/r.json
  dataset: ds
  job: train
  store: /data/ds
  request: {amount: 8MiB, component: cpu}
)", "l.yaml");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->amount, 8ull << 20);
  EXPECT_EQ(l->component, Component::kCpu);
  EXPECT_EQ(l->miss, MissPolicy::kReadThrough);
  auto gpu = ParseLoaderConfig("loader:\n  records: file:/r\n  dataset: d\n  job: j\n  miss: fail\n"
                               "  request: {amount: 1GiB, component: tpu}\n", "l.yaml");
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.status().message().find("loader.request.component: expected cpu or gpu, got \"tpu\""),
            std::string::npos) << gpu.status().message();
  auto no_store = ParseLoaderConfig("loader:\n  records: file:/r\n  dataset: d\n  job: j\n"
                                    "  request: {amount: 1GiB, component: cpu}\n", "l.yaml");
  ASSERT_FALSE(no_store.ok());
  EXPECT_NE(no_store.status().message().find("loader.store: expected the external store"),
            std::string::npos) << no_store.status().message();
}

TEST(CacheConfigTest, Sizes) {
  EXPECT_EQ(ParseSize("4096"), 4096u);
  EXPECT_EQ(ParseSize("64KiB"), 65536u);
  EXPECT_EQ(ParseSize("1.5GiB"), 3ull << 29);
  EXPECT_FALSE(ParseSize("1.3B").has_value());
  EXPECT_FALSE(ParseSize("12MB").has_value());
  EXPECT_FALSE(ParseSize("").has_value());
}

}  // namespace
}  // namespace aggswitch::cache
