#include "telemetry/int_frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace aggswitch::telemetry {
namespace {

using Bytes = std::vector<uint8_t>;

uint16_t Get16(const Bytes& b, size_t at) { return static_cast<uint16_t>(b[at] << 8 | b[at + 1]); }

// The Internet checksum of `n` bytes, folded, not complemented.
uint32_t Sum(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2) sum += static_cast<uint32_t>(p[n - 1] << 8);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return sum;
}

// Whether the IPv4 header checksum and the UDP checksum (when not 0) verify.
bool ChecksumsVerify(const Bytes& d) {
  const size_t ihl = size_t{d[0] & 0x0Fu} * 4;
  if (Sum(d.data(), ihl) != 0xFFFF) return false;
  if (Get16(d, ihl + 6) == 0) return true;
  uint32_t pseudo = Sum(d.data() + 12, 8) + 17 + Get16(d, ihl + 4);
  return Sum(d.data() + ihl, d.size() - ihl, pseudo) == 0xFFFF;
}

// An IPv4/UDP datagram 10.0.0.1:5000 -> 10.0.0.2:`port` with `payload`,
// both checksums right (or no UDP checksum).
Bytes Datagram(const Bytes& payload, uint16_t port = 47000, bool udp_checksum = true) {
  Bytes d(28 + payload.size());
  const auto put16 = [&d](size_t at, size_t v) {
    d[at] = static_cast<uint8_t>(v >> 8);
    d[at + 1] = static_cast<uint8_t>(v);
  };
  d[0] = 0x45;
  put16(2, d.size());
  put16(4, 0x1234);
  d[6] = 0x40;
  d[8] = 64;
  d[9] = 17;
  const uint8_t addrs[8] = {10, 0, 0, 1, 10, 0, 0, 2};
  std::memcpy(&d[12], addrs, 8);
  put16(10, static_cast<uint16_t>(~Sum(d.data(), 20)));
  put16(20, 5000);
  put16(22, port);
  put16(24, 8 + payload.size());
  if (!payload.empty()) std::memcpy(&d[28], payload.data(), payload.size());
  if (udp_checksum) {
    const uint32_t pseudo = Sum(d.data() + 12, 8) + 17 + 8 + payload.size();
    uint16_t c = static_cast<uint16_t>(~Sum(d.data() + 20, d.size() - 20, pseudo));
    put16(26, c == 0 ? 0xFFFF : c);
  }
  return d;
}

HopMetadata Hop(uint32_t node) {
  HopMetadata h;
  h.node_id = node;
  h.ingress_port = 1;
  h.egress_port = 2;
  h.hop_latency_ns = 1000 + node;
  h.queue_occupancy = 5;
  return h;
}

TEST(IntFrame, ChecksumAfterMatchesARecomputation) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    Bytes words(20);
    for (uint8_t& b : words) b = static_cast<uint8_t>(rng());
    const uint16_t before = static_cast<uint16_t>(~Sum(words.data(), words.size()));
    const uint16_t from = Get16(words, 6);
    words[6] = static_cast<uint8_t>(rng());
    words[7] = static_cast<uint8_t>(rng());
    const uint16_t after = static_cast<uint16_t>(~Sum(words.data(), words.size()));
    const uint16_t updated = ChecksumAfter(before, from, Get16(words, 6));
    // Equal, or the other zero of one's complement.
    EXPECT_TRUE(updated == after || (updated == 0xFFFF && after == 0) || (updated == 0 && after == 0xFFFF));
  }
}

// A three-hop path: insert, and at each hop push, report, pop; the last
// hop strips. Valid on every link, never longer than the INT headers, and
// the host gets the original bytes.
TEST(IntFrame, ThreeHopsThenTheOriginalBytes) {
  const Bytes payload = {'g', 'r', 'a', 'd', 'i', 'e', 'n', 't', 's', '!', 1};
  const Bytes original = Datagram(payload);
  ASSERT_TRUE(ChecksumsVerify(original));
  Bytes d = original;
  d.resize(200);
  size_t len = original.size();
  ASSERT_EQ(InsertInt(d.data(), &len, d.size(), {7700, instr::kLatencySet, 8, 1, 42}), FrameError::kNone);
  ASSERT_EQ(len, original.size() + kInsertedBytes);
  for (uint32_t node = 1; node <= 3; ++node) {
    SCOPED_TRACE(node);
    ASSERT_EQ(PushHop(d.data(), &len, d.size(), Hop(node)), FrameError::kNone);
    EXPECT_TRUE(ChecksumsVerify(Bytes(d.begin(), d.begin() + static_cast<long>(len))));
    IntView v;
    ASSERT_EQ(ViewInt(d.data(), len, 7700, &v), FrameError::kNone);
    EXPECT_EQ(v.hop_bytes, 16u);
    EXPECT_EQ(ReadHopMetadata(instr::kLatencySet, v.stack).node_id, node);
    EXPECT_EQ(v.md->remaining, 8 - node);
    EXPECT_EQ(v.source_node, 1u);
    EXPECT_EQ(v.path_seq, 42u);
    ASSERT_EQ(PopHop(d.data(), &len), FrameError::kNone);
    const Bytes on_link(d.begin(), d.begin() + static_cast<long>(len));
    EXPECT_TRUE(ChecksumsVerify(on_link));
    EXPECT_EQ(len, original.size() + kInsertedBytes) << "the same length on every link";
    EXPECT_EQ(Get16(on_link, 22), 7700);
  }
  ASSERT_EQ(StripInt(d.data(), &len), FrameError::kNone);
  EXPECT_EQ(Bytes(d.begin(), d.begin() + static_cast<long>(len)), original);
}

// Bit for bit, whatever the sender wrote: random payloads of every parity,
// with and without a UDP checksum, and with a wrong one.
TEST(IntFrame, StrippingRestoresAnyDatagramExactly) {
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    Bytes payload(rng() % 300);
    for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
    Bytes original = Datagram(payload, static_cast<uint16_t>(rng()), i % 3 != 0);
    if (i % 7 == 0) original[26] ^= 0x5a;  // a wrong checksum stays as wrong
    Bytes d = original;
    d.resize(original.size() + 64);
    size_t len = original.size();
    const uint16_t bits = (i % 2) ? instr::kBothSets : instr::kBandwidthSet;
    ASSERT_EQ(InsertInt(d.data(), &len, d.size(), {7700, bits, 4, 9, static_cast<uint32_t>(i)}),
              FrameError::kNone);
    if (i % 7 != 0) {
      EXPECT_TRUE(ChecksumsVerify(Bytes(d.begin(), d.begin() + static_cast<long>(len))));
    }
    ASSERT_EQ(PushHop(d.data(), &len, d.size(), Hop(3)), FrameError::kNone);
    ASSERT_EQ(StripInt(d.data(), &len), FrameError::kNone) << "with a hop's metadata still on";
    ASSERT_EQ(Bytes(d.begin(), d.begin() + static_cast<long>(len)), original) << i;
  }
}

TEST(IntFrame, OnlyWholeUnfragmentedUdpDatagramsAreChanged) {
  const Bytes original = Datagram({1, 2, 3, 4});
  const auto refused = [&](Bytes d, FrameError want, size_t cap = 200) {
    const Bytes before = d;
    d.resize(std::max(d.size(), cap));
    size_t len = before.size();
    EXPECT_EQ(InsertInt(d.data(), &len, cap, {}), want);
    EXPECT_EQ(len, before.size());
    EXPECT_EQ(Bytes(d.begin(), d.begin() + static_cast<long>(before.size())), before) << "unchanged";
  };
  Bytes tcp = original;
  tcp[9] = 6;
  refused(tcp, FrameError::kNotUdp);
  Bytes fragment = original;
  fragment[6] = 0x20;  // more fragments
  refused(fragment, FrameError::kNotUdp);
  Bytes short_udp = original;
  short_udp[25] = 9;  // UDP length disagrees
  refused(short_udp, FrameError::kBadLength);
  refused(original, FrameError::kNoRoom, original.size() + kInsertedBytes - 1);
  size_t len = original.size();
  Bytes plain = original;
  EXPECT_EQ(StripInt(plain.data(), &len), FrameError::kNotInt);
  EXPECT_EQ(PopHop(plain.data(), &len), FrameError::kNotInt);
  IntView v;
  EXPECT_EQ(ViewInt(plain.data(), len, 7700, &v), FrameError::kNotInt);
  EXPECT_STREQ(FrameErrorName(FrameError::kHopsDone), "hops_done");
}

TEST(IntFrame, NoHopCountLeftSetsEAndNoRoomSetsM) {
  const Bytes original = Datagram({9, 9});
  Bytes d = original;
  d.resize(200);
  size_t len = original.size();
  ASSERT_EQ(InsertInt(d.data(), &len, d.size(), {7700, instr::kLatencySet, 1, 1, 1}), FrameError::kNone);
  ASSERT_EQ(PopHop(d.data(), &len), FrameError::kNoHop);
  ASSERT_EQ(PushHop(d.data(), &len, d.size(), Hop(1)), FrameError::kNone);
  ASSERT_EQ(PopHop(d.data(), &len), FrameError::kNone);
  const size_t before = len;
  EXPECT_EQ(PushHop(d.data(), &len, d.size(), Hop(2)), FrameError::kHopsDone);
  EXPECT_EQ(len, before);
  IntView v;
  ASSERT_EQ(ViewInt(d.data(), len, 7700, &v), FrameError::kNone);
  EXPECT_TRUE(v.md->ver_flags & kFlagE);
  EXPECT_TRUE(ChecksumsVerify(Bytes(d.begin(), d.begin() + static_cast<long>(len))));

  Bytes e = original;
  e.resize(200);
  len = original.size();
  ASSERT_EQ(InsertInt(e.data(), &len, e.size(), {7700, instr::kLatencySet, 8, 1, 1}), FrameError::kNone);
  EXPECT_EQ(PushHop(e.data(), &len, len + 15, Hop(1)), FrameError::kNoRoom);
  ASSERT_EQ(ViewInt(e.data(), len, 7700, &v), FrameError::kNone);
  EXPECT_TRUE(v.md->ver_flags & kFlagM);
  EXPECT_EQ(v.hop_bytes, 0u);
  EXPECT_TRUE(ChecksumsVerify(Bytes(e.begin(), e.begin() + static_cast<long>(len))));
  // Stripped, the flags go with the headers: the original bytes.
  ASSERT_EQ(StripInt(e.data(), &len), FrameError::kNone);
  EXPECT_EQ(Bytes(e.begin(), e.begin() + static_cast<long>(len)), original);
}

// Taking a hop (what a switch that reports each hop at once does): the
// index follows from the budget the first hop wrote, the datagram stays
// valid and keeps its length, and a spent budget sets E.
TEST(IntFrame, TakingHopsCountsThemFromTheBudget) {
  const Bytes original = Datagram({1, 2, 3}, 5555, true);
  Bytes d = original;
  d.resize(200);
  size_t len = original.size();
  ASSERT_EQ(InsertInt(d.data(), &len, d.size(), {7700, instr::kBothSets, 3, 9, 77}), FrameError::kNone);
  for (uint32_t hop = 1; hop <= 3; ++hop) {
    SCOPED_TRACE(hop);
    HopTaken taken;
    ASSERT_EQ(TakeHop(d.data(), len, &taken), FrameError::kNone);
    EXPECT_EQ(taken.hop_index, hop);
    EXPECT_EQ(taken.instructions, instr::kBothSets);
    EXPECT_EQ(taken.source_node, 9u);
    EXPECT_EQ(taken.path_seq, 77u);
    EXPECT_EQ(taken.original_port, 5555);
    EXPECT_EQ(len, original.size() + kInsertedBytes);
    EXPECT_TRUE(ChecksumsVerify(Bytes(d.begin(), d.begin() + static_cast<long>(len))));
  }
  HopTaken taken;
  EXPECT_EQ(TakeHop(d.data(), len, &taken), FrameError::kHopsDone);
  IntView v;
  ASSERT_EQ(ViewInt(d.data(), len, 7700, &v), FrameError::kNone);
  EXPECT_TRUE(v.md->ver_flags & kFlagE);
  EXPECT_TRUE(ChecksumsVerify(Bytes(d.begin(), d.begin() + static_cast<long>(len))));
  ASSERT_EQ(StripInt(d.data(), &len), FrameError::kNone);
  EXPECT_EQ(Bytes(d.begin(), d.begin() + static_cast<long>(len)), original);
}

}  // namespace
}  // namespace aggswitch::telemetry
