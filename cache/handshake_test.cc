#include "cache/handshake.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "cache/external_store.h"
#include "cache/region.h"

namespace aggswitch::cache {
namespace {

TEST(HandshakeTest, AHelloCarriesItsJobAndNothingElse) {
  const std::string hello = BuildHello("train");
  auto job = ParseHello(hello.data(), hello.size(), false);
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(*job, "train");
  EXPECT_FALSE(ParseHello(hello.data(), hello.size() - 1, false).ok()) << "cut short";
  EXPECT_FALSE(ParseHello((hello + "x").data(), hello.size() + 1, false).ok()) << "a byte too many";
  EXPECT_FALSE(ParseHello(hello.data(), 3, false).ok());
  EXPECT_FALSE(ParseHello(hello.data(), hello.size(), true).ok()) << "a rendezvous descriptor";
  std::string wrong = hello;
  wrong[0] ^= 1;
  auto magic = ParseHello(wrong.data(), wrong.size(), false);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.status().message().find("magic"), std::string::npos);
  const std::string long_name = BuildHello(std::string(kMaxJobName + 1, 'j'));
  auto too_long = ParseHello(long_name.data(), long_name.size(), false);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("at most 256"), std::string::npos);
}

TEST(HandshakeTest, AReplyIsCheckedBeforeItsKeyOrRegionIsUsed) {
  HelloReply accepted;
  accepted.status = HelloReply::kAccepted;
  accepted.rkey_id = 7;
  accepted.region_base = 0x7f0000000000;
  accepted.region_size = 64 << 20;
  const std::string good = BuildHelloReply(accepted, "packed-key");
  auto p = ParseHelloReply(good.data(), good.size());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->tail, "packed-key");
  EXPECT_EQ(p->reply.rkey_id, 7u);
  EXPECT_EQ(p->reply.region_size, uint64_t{64} << 20);

  HelloReply refused;
  refused.status = HelloReply::kRefused;
  const std::string no = BuildHelloReply(refused, "job \"x\" may not read this cache");
  ASSERT_TRUE(ParseHelloReply(no.data(), no.size()).ok());

  // A tail longer or shorter than the header says, an unknown status, an
  // accepted reply without a key or with a region past the address space.
  std::string lying = good;
  uint32_t len = 1000;
  std::memcpy(&lying[offsetof(HelloReply, rkey_len)], &len, sizeof(len));
  EXPECT_FALSE(ParseHelloReply(lying.data(), lying.size()).ok());
  EXPECT_FALSE(ParseHelloReply(good.data(), good.size() - 1).ok());
  EXPECT_FALSE(ParseHelloReply(good.data(), 8).ok());
  HelloReply odd = accepted;
  odd.status = 9;
  const std::string status = BuildHelloReply(odd, "k");
  EXPECT_FALSE(ParseHelloReply(status.data(), status.size()).ok());
  const std::string keyless = BuildHelloReply(accepted, "");
  EXPECT_FALSE(ParseHelloReply(keyless.data(), keyless.size()).ok());
  HelloReply wraps = accepted;
  wraps.region_base = std::numeric_limits<uint64_t>::max() - 10;
  const std::string wrapped = BuildHelloReply(wraps, "k");
  EXPECT_FALSE(ParseHelloReply(wrapped.data(), wrapped.size()).ok());
  const std::string huge = BuildHelloReply(accepted, std::string(kMaxReplyTail + 1, 'k'));
  EXPECT_FALSE(ParseHelloReply(huge.data(), huge.size()).ok());
}

TEST(HandshakeTest, AFillRequestIsAStoreNameSentEagerly) {
  const std::string item = "shard/1000.bin";
  EXPECT_EQ(ParseFill(item.data(), item.size(), false), item);
  EXPECT_FALSE(ParseFill(item.data(), item.size(), true)) << "a rendezvous descriptor";
  EXPECT_FALSE(ParseFill(item.data(), 0, false));
  const std::string escape = "../etc/passwd";
  EXPECT_FALSE(ParseFill(escape.data(), escape.size(), false));
  const std::string huge(ExternalStore::kMaxNameLength + 1, 'a');
  EXPECT_FALSE(ParseFill(huge.data(), huge.size(), false));
}

// An item's bytes and its header before them lie inside the region, or the
// holder is not read: at the region's edges, and where a sum would wrap.
TEST(HandshakeTest, AHolderOutsideItsRegionIsRefused) {
  const uint64_t base = 0x7f0000000000, size = 1 << 20, h = sizeof(ItemHeader);
  EXPECT_TRUE(HolderInRegion(base + h, 100, base, size));
  EXPECT_TRUE(HolderInRegion(base + h, size - h, base, size)) << "up to the last byte";
  EXPECT_FALSE(HolderInRegion(base + h, size - h + 1, base, size)) << "one byte past";
  EXPECT_FALSE(HolderInRegion(base, 10, base, size)) << "no room for the header";
  EXPECT_FALSE(HolderInRegion(base - 1, 10, base, size));
  EXPECT_FALSE(HolderInRegion(base + size + h, 0, base, size));
  EXPECT_TRUE(HolderInRegion(base + size, 0, base, size)) << "an empty item at the end";
  EXPECT_FALSE(HolderInRegion(std::numeric_limits<uint64_t>::max() - 8, 100, base, size));
  EXPECT_FALSE(HolderInRegion(base + h, std::numeric_limits<uint64_t>::max(), base, size));
  EXPECT_FALSE(HolderInRegion(0x1000, 100, base, size)) << "another region, another node";
}

}  // namespace
}  // namespace aggswitch::cache
