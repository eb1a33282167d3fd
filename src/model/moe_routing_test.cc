#include "model/moe_routing.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qrepack::model {
namespace {

// Hand-derived: logits [0, ln 3, -ln 3, 0] give sigmoid scores [0.5, 0.75, 0.25, 0.5]; with
// bias [0, 0, 0.3, 0.3] the biased choice is [0.5, 0.75, 0.55, 0.8].
const float kLogits[] = {0.0f, std::log(3.0f), -std::log(3.0f), 0.0f};
const float kBias[] = {0.0f, 0.0f, 0.3f, 0.3f};

TEST(MoeRouting, GroupLimitedSelectionKeepsOnlyTheBestGroup) {
  // Groups {0,1} (0.5 + 0.75 = 1.25) and {2,3} (0.55 + 0.8 = 1.35): only group 1 is kept, so
  // expert 1 (0.75) loses to expert 2 (0.55). Weights are the unbiased scores 0.5 and 0.25,
  // normalized to 2/3 and 1/3, times 2.
  const auto r = route_token(kLogits, kBias, {4, 2, 2, 1, true, 2.0f});
  ASSERT_EQ(r.expert, (std::vector<std::uint32_t>{3, 2}));
  EXPECT_NEAR(r.weight[0], 4.0f / 3.0f, 1e-6f);
  EXPECT_NEAR(r.weight[1], 2.0f / 3.0f, 1e-6f);
}

TEST(MoeRouting, OneGroupTakesTheBestBiasedScoresAndWeighsByUnbiasedOnes) {
  const auto r = route_token(kLogits, kBias, {4, 2, 1, 1, true, 2.0f});
  ASSERT_EQ(r.expert, (std::vector<std::uint32_t>{3, 1}));
  EXPECT_NEAR(r.weight[0], 0.8f, 1e-6f);  // 0.5 / 1.25 * 2
  EXPECT_NEAR(r.weight[1], 1.2f, 1e-6f);  // 0.75 / 1.25 * 2
  const auto raw = route_token(kLogits, kBias, {4, 2, 1, 1, false, 2.5f});
  EXPECT_NEAR(raw.weight[0], 1.25f, 1e-6f);
  EXPECT_NEAR(raw.weight[1], 1.875f, 1e-6f);
}

TEST(MoeRouting, TiesGoToTheLowerIndex) {
  const float zeros[4] = {0, 0, 0, 0};
  const auto r = route_token(zeros, zeros, {4, 2, 2, 2, true, 1.0f});
  EXPECT_EQ(r.expert, (std::vector<std::uint32_t>{0, 1}));
}

}  // namespace
}  // namespace qrepack::model
