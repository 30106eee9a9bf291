#include "dataplane/kept_results.h"

#include <gtest/gtest.h>

#include <vector>

namespace aggswitch::dataplane {
namespace {

aggregator::AggFields ResultFields(uint32_t seq) {
  aggregator::AggFields f;
  f.opcode = aggregator::Opcode::kResult;
  f.job_id = 7;
  f.seq = seq;
  f.elem_count = 1;
  return f;
}

std::vector<uint8_t> Bytes(const KeptResults::Entry& e) {
  return std::vector<uint8_t>(e.payload, e.payload + e.len);
}

// A kept result is found under its chunk and run label only; a result kept
// again replaces its own entry; a new chunk takes the oldest entry's place.
TEST(KeptResultsTest, KeepsTheNewestResultsUnderTheirRunLabel) {
  KeptResults kept(2, 8);
  EXPECT_TRUE(kept.empty());
  const std::vector<uint8_t> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{9, 9, 9, 9};
  ASSERT_TRUE(kept.Keep({7, 1, 10}, 0xaa, ResultFields(10), a.data(), 4));
  ASSERT_TRUE(kept.Keep({7, 1, 11}, 0xaa, ResultFields(11), b.data(), 4));
  EXPECT_EQ(kept.size(), 2u);
  const KeptResults::Entry* e = kept.Find({7, 1, 10}, 0xaa);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(Bytes(*e), a);
  EXPECT_EQ(e->fields.seq, 10u);
  EXPECT_EQ(kept.Find({7, 1, 10}, 0xbb), nullptr) << "another run of the job";
  EXPECT_EQ(kept.Find({7, 2, 10}, 0xaa), nullptr) << "another registration of the job";
  EXPECT_EQ(kept.Find({7, 1, 12}, 0xaa), nullptr);

  ASSERT_TRUE(kept.Keep({7, 1, 11}, 0xaa, ResultFields(11), c.data(), 4));  // again: in place
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(Bytes(*kept.Find({7, 1, 11}, 0xaa)), c);
  ASSERT_NE(kept.Find({7, 1, 10}, 0xaa), nullptr) << "nothing else gave way";

  ASSERT_TRUE(kept.Keep({7, 1, 12}, 0xaa, ResultFields(12), b.data(), 4));  // full: the oldest goes
  EXPECT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept.Find({7, 1, 10}, 0xaa), nullptr);
  EXPECT_EQ(Bytes(*kept.Find({7, 1, 11}, 0xaa)), c);
  EXPECT_EQ(Bytes(*kept.Find({7, 1, 12}, 0xaa)), b);
}

TEST(KeptResultsTest, APayloadLargerThanAnEntryIsNotKept) {
  KeptResults kept(2, 4);
  const std::vector<uint8_t> big(5, 1);
  EXPECT_FALSE(kept.Keep({7, 1, 10}, 1, ResultFields(10), big.data(), 5));
  EXPECT_TRUE(kept.empty());
  EXPECT_EQ(kept.Find({7, 1, 10}, 1), nullptr);
  KeptResults none(0, 4);
  EXPECT_FALSE(none.Keep({7, 1, 10}, 1, ResultFields(10), big.data(), 4));
}

}  // namespace
}  // namespace aggswitch::dataplane
