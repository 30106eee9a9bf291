// The directory store and the MANIFEST format; the HTTP store is tested
// against a real HTTP server in the system test.
#include "cache/external_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace aggswitch::cache {
namespace {

TEST(ExternalStoreTest, ManifestLinesNameTheLineOfAnError) {
  auto ok = ExternalStore::ParseManifest("# a comment\na.bin 10\n\nsub/b.bin 0  # empty\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].name, "sub/b.bin");
  auto bad = ExternalStore::ParseManifest("a.bin 10\nb.bin ten\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ExternalStore::ParseManifest("../etc/passwd 10\n").ok());
  EXPECT_FALSE(ExternalStore::ParseManifest("a 1 2\n").ok());
  EXPECT_FALSE(ExternalStore::ValidName("/abs"));
  EXPECT_FALSE(ExternalStore::ValidName("a//b"));
  EXPECT_TRUE(ExternalStore::ValidName("a/b.c"));
}

TEST(ExternalStoreTest, DirectoryListsReadsAndCounts) {
  const std::string dir = "/tmp/aggswitch-store-test." + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/b.bin") << "hello";
  std::ofstream(dir + "/sub/a.bin") << "xy";
  auto store = ExternalStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "b.bin");
  EXPECT_EQ((*list)[1].name, "sub/a.bin");
  EXPECT_EQ((*list)[1].length, 2u);
  char buf[8] = {};
  auto o = (*store)->Read("b.bin", buf, sizeof(buf));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(std::string(buf, o->length), "hello");
  EXPECT_NE(o->version, 0u);
  EXPECT_EQ((*store)->Read("b.bin", buf, 3).status().code(), common::StatusCode::kOutOfRange);
  EXPECT_EQ((*store)->Read("none", buf, 8).status().code(), common::StatusCode::kNotFound);
  EXPECT_EQ((*store)->Read("../x", buf, 8).status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->requests(), 1u);
  EXPECT_EQ((*store)->bytes(), 5u);
  std::ofstream(dir + "/MANIFEST") << "sub/a.bin 2\n";
  EXPECT_EQ((*store)->List()->size(), 1u) << "a MANIFEST wins over the listing";
  std::filesystem::remove_all(dir);
  EXPECT_FALSE(ExternalStore::Open("relative/path").ok());
  EXPECT_FALSE(ExternalStore::Open(dir).ok());
}

}  // namespace
}  // namespace aggswitch::cache
