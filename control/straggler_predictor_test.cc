#include "control/straggler_predictor.h"

#include <gtest/gtest.h>

#include <vector>

namespace aggswitch::control {
namespace {

std::vector<uint32_t> Nodes(const std::vector<MemberOffset>& v) {
  std::vector<uint32_t> nodes;
  for (const MemberOffset& m : v) nodes.push_back(m.node);
  return nodes;
}

// Seed 000, section 6.1: the offsets of the Figure 1 nodes, in node order.
const std::vector<MemberOffset> kWorkedExample = {{111, 0},   {112, 2.1}, {113, 4.5}, {121, 1.3},
                                                  {122, 0.5}, {131, 0.5}, {132, 0.3}, {133, 1.5},
                                                  {134, 6},   {135, 2},   {136, 3},   {137, 4}};

TEST(StragglerPredictorTest, TheSeedsWorkedExample) {
  StragglerPredictor p(16);
  // "History: the two previous aggregation operations".
  p.Record(kWorkedExample);
  p.Record(kWorkedExample);
  EXPECT_EQ(Nodes(p.TopK(1, 2)), std::vector<uint32_t>({134}));
  EXPECT_EQ(Nodes(p.TopK(2, 2)), std::vector<uint32_t>({134, 113}));
  // Strictly greater than 4 s: node 137, at exactly 4 s, is not a straggler.
  EXPECT_EQ(Nodes(p.Over(4.0, 2)), std::vector<uint32_t>({134, 113}));
  EXPECT_DOUBLE_EQ(p.TopK(1, 2)[0].offset_s, 6.0);
}

TEST(StragglerPredictorTest, TheChosenNumberOfOperationsIsAveraged) {
  StragglerPredictor p(8);
  p.Record(std::vector<MemberOffset>{{1, 1.0}, {2, 0.0}});
  p.Record(std::vector<MemberOffset>{{1, 3.0}, {2, 5.0}});
  EXPECT_EQ(Nodes(p.TopK(1, 1)), std::vector<uint32_t>({2})) << "the last operation alone";
  const std::vector<MemberOffset> both = p.TopK(2, 2);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].node, 2u);
  EXPECT_DOUBLE_EQ(both[0].offset_s, 2.5);
  EXPECT_DOUBLE_EQ(both[1].offset_s, 2.0);
  EXPECT_EQ(p.TopK(5, 0).size(), 2u) << "0 operations means every recorded one";
}

TEST(StragglerPredictorTest, OnlyTheHistoryIsKeptAndAbsenceDoesNotCount) {
  StragglerPredictor p(2);
  p.Record(std::vector<MemberOffset>{{7, 9.0}});
  p.Record(std::vector<MemberOffset>{{8, 1.0}});
  p.Record(std::vector<MemberOffset>{{8, 2.0}});
  EXPECT_EQ(p.operations(), 2u);
  EXPECT_EQ(Nodes(p.TopK(10, 0)), std::vector<uint32_t>({8})) << "node 7 fell out of the history";
  EXPECT_TRUE(p.Over(2.0, 0).empty()) << "node 8's mean is 1.5";
  StragglerPredictor q(4);
  q.Record(std::vector<MemberOffset>{{1, 4.0}, {2, 1.0}});
  q.Record(std::vector<MemberOffset>{{2, 1.0}});  // node 1 missing: not a zero
  EXPECT_DOUBLE_EQ(q.TopK(1, 2)[0].offset_s, 4.0);
}

// A predicted straggler, once excluded, sends nothing on time to its switch:
// its operations are recorded as held, and it keeps its figure, so that
// prediction after prediction names it (and no other member in its place)
// instead of letting it back in once its offsets leave the history.
TEST(StragglerPredictorTest, AnExcludedMemberKeepsItsFigure) {
  StragglerPredictor p(4);
  p.Record(std::vector<MemberOffset>{{1, 9.0}, {2, 1.0}, {3, 0.5}});
  p.Record(std::vector<MemberOffset>{{1, 7.0}, {2, 1.0}, {3, 0.5}});
  ASSERT_EQ(Nodes(p.TopK(1, 2)), std::vector<uint32_t>({1}));
  const std::vector<uint32_t> held = {1};
  for (int op = 0; op < 10; ++op) {
    p.Record(std::vector<MemberOffset>{{2, 1.0}, {3, 0.5}}, held);
  }
  const std::vector<MemberOffset> top = p.TopK(1, 2);
  ASSERT_EQ(Nodes(top), std::vector<uint32_t>({1})) << "still the straggler";
  EXPECT_DOUBLE_EQ(top[0].offset_s, 8.0);
  EXPECT_EQ(Nodes(p.Over(2.0, 2)), std::vector<uint32_t>({1}));
  // Without held, it would have left the history and the top would be 2.
  StragglerPredictor q(4);
  q.Record(std::vector<MemberOffset>{{1, 9.0}, {2, 1.0}, {3, 0.5}});
  for (int op = 0; op < 10; ++op) q.Record(std::vector<MemberOffset>{{2, 1.0}, {3, 0.5}});
  EXPECT_EQ(Nodes(q.TopK(1, 2)), std::vector<uint32_t>({2}));
}

}  // namespace
}  // namespace aggswitch::control
