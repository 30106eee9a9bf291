// The record model and FileRecords; EtcdRecords is tested against a real
// etcd in etcd_records_test.cc.
#include "cache/records.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

namespace aggswitch::cache {
namespace {

size_t RankOf(const std::string& node) { return node == "n1" ? 0 : node == "n2" ? 1 : 2; }

TEST(RecordsTest, ItemRecordsRoundTripAsJson) {
  const ItemRecord r{"a/b.bin", 4096, 77, 0xdeadbeef, {{"n1", 0x7f0000001040, 5}, {"n2", 64, 9}}};
  auto back = ParseItemRecord(ToJson(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->item, r.item);
  EXPECT_EQ(back->length, r.length);
  EXPECT_EQ(back->version, r.version);
  EXPECT_EQ(back->crc32c, r.crc32c);
  EXPECT_EQ(back->holders, r.holders);
  EXPECT_NE(ToJson(r).find("\"owner\":\"n1\""), std::string::npos);
  EXPECT_FALSE(ParseItemRecord("{\"item\": 3}").ok());
  EXPECT_FALSE(ParseItemRecord("not json").ok());
  // Numbers that no field holds are refused, not converted (cache_fuzz found 1e20).
  std::string big = ToJson(r);
  big.replace(big.find("\"length\":4096"), 13, "\"length\":1e20");
  EXPECT_FALSE(ParseItemRecord(big).ok());
  std::string negative = ToJson(r);
  negative.replace(negative.find("\"rkey\":5"), 8, "\"rkey\":-5");
  EXPECT_FALSE(ParseItemRecord(negative).ok());
  std::string wide = ToJson(r);
  wide.replace(wide.find("\"crc32c\":3735928559"), 19, "\"crc32c\":4294967296");
  EXPECT_FALSE(ParseItemRecord(wide).ok());
}

TEST(RecordsTest, ManifestPiecesEndAtLineEnds) {
  std::string manifest;
  for (int i = 0; i < 40000; ++i) manifest += "train/" + std::to_string(i) + ".bin " + std::to_string(i) + "\n";
  const auto pieces = ManifestPieces(manifest);
  ASSERT_GT(pieces.size(), 1u);
  std::string joined;
  for (const auto& p : pieces) {
    EXPECT_LE(p.size(), Records::kManifestPiece);
    EXPECT_EQ(p.back(), '\n');
    joined += p;
  }
  EXPECT_EQ(joined, manifest);
  EXPECT_TRUE(ManifestPieces("").empty());
}

TEST(RecordsTest, MergeKeepsPlacementOrderAndDropsOtherVersions) {
  const ItemRecord fresh{"x", 10, 1, 5, {}};
  ItemRecord r = MergeHolder(std::nullopt, fresh, {"n2", 200, 1}, RankOf);
  r = MergeHolder(r, fresh, {"n1", 100, 1}, RankOf);
  ASSERT_EQ(r.holders.size(), 2u);
  EXPECT_EQ(r.holders[0].node, "n1") << "the owner comes first";
  r = MergeHolder(r, fresh, {"n2", 300, 2}, RankOf);  // n2 refilled
  ASSERT_EQ(r.holders.size(), 2u);
  EXPECT_EQ(r.holders[1].addr, 300u);
  const ItemRecord changed{"x", 10, 2, 6, {}};  // the source changed
  r = MergeHolder(r, changed, {"n3", 1, 1}, RankOf);
  ASSERT_EQ(r.holders.size(), 1u);
  EXPECT_EQ(r.version, 2u);
  EXPECT_FALSE(WithoutHolder(r, "n3").has_value());
}

TEST(RecordsTest, FileRecordsStoreItemsAndNodes) {
  const std::string path = "/tmp/aggswitch-records-test." + std::to_string(::getpid()) + ".json";
  auto opened = OpenRecords("file:" + path, "/p");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  Records& rec = **opened;
  const ItemRecord fresh{"x", 10, 1, 5, {}};
  ASSERT_TRUE(rec.AddHolder("ds", fresh, {"n2", 200, 1}, RankOf).ok());
  ASSERT_TRUE(rec.AddHolder("ds", fresh, {"n1", 100, 1}, RankOf).ok());
  auto got = rec.Get("ds", "x");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->holders.size(), 2u);
  EXPECT_EQ((*got)->holders[0].node, "n1");
  EXPECT_FALSE(rec.Get("ds", "y")->has_value());
  EXPECT_FALSE(rec.Get("other", "x")->has_value());
  EXPECT_EQ(rec.List("ds")->size(), 1u);

  ASSERT_TRUE(rec.RemoveHolder("ds", "x", "n1").ok());
  EXPECT_EQ((*rec.Get("ds", "x"))->holders[0].node, "n2");
  ASSERT_TRUE(rec.RemoveHolder("ds", "x", "n2").ok());
  EXPECT_FALSE(rec.Get("ds", "x")->has_value()) << "no holder left: no record";

  NodeRecord n{"n1", "10.0.0.1:7400", "/dev/shm/x", 4096, 1 << 20, 3, 42, {"n1", "n2"}};
  ASSERT_TRUE(rec.PutNode(n, 10).ok());
  auto nodes = rec.Nodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].ucx_listen, "10.0.0.1:7400");
  EXPECT_EQ((*nodes)[0].members, (std::vector<std::string>{"n1", "n2"}));
  ASSERT_TRUE(rec.DropNode("n1").ok());
  EXPECT_TRUE(rec.Nodes()->empty());
  EXPECT_EQ(*rec.Manifest("ds"), "");
  ASSERT_TRUE(rec.PutManifest("ds", "a 1\nb 2\n").ok());
  EXPECT_EQ(*rec.Manifest("ds"), "a 1\nb 2\n");
  std::remove(path.c_str());
  std::remove((path + ".lock").c_str());
  EXPECT_FALSE(OpenRecords("redis://x", "/p").ok());
}

}  // namespace
}  // namespace aggswitch::cache
