#include "model/dsa_indexer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qrepack::model {
namespace {

using Rows = std::vector<std::vector<std::uint32_t>>;

// One head of dimension 1, pools of 2, top 2 tokens (one pool), head weight 1. With zero gates
// and ape a pool's key is its members' mean: keys 1, 3 | -4, -2 | 5, 7 pool to 2, -3, 6.
// A query q scores pool p by relu(q * key_p): positive queries prefer the largest positive
// key, and a pool whose dot is negative scores 0.
TEST(DsaIndexer, SelectsTheBestCompleteVisiblePoolAndOnlyWithTheTailTheRest) {
  const std::vector<float> queries{1, 1, 1, 1, 1, 1}, keys{1, 3, -4, -2, 5, 7};
  const std::vector<float> gates(6, 0.0f), head_w(6, 1.0f), ape(2, 0.0f);
  KeySelection sel;
  kpool_select({1, 1, 2, 2, false}, 6, queries.data(), keys.data(), gates.data(), head_w.data(),
               ape.data(), sel);
  // q 0: no complete pool yet; q 1, 2, 3: pool 0 (pool 1 scores relu(-3) = 0 < 2); q 4: pool 2
  // is not complete before q 5; q 5: pool 2 (6 > 2).
  EXPECT_EQ(sel, (Rows{{}, {0, 1}, {0, 1}, {0, 1}, {0, 1}, {4, 5}}));
  KeySelection tail;
  kpool_select({1, 1, 2, 2, true}, 6, queries.data(), keys.data(), gates.data(), head_w.data(),
               ape.data(), tail);
  EXPECT_EQ(tail, (Rows{{0}, {0, 1}, {0, 1, 2}, {0, 1}, {0, 1, 4}, {4, 5}}));
}

// Ties go to the lower pool; a negative query makes every dot negative, so all pools score 0.
TEST(DsaIndexer, TiesGoToTheLowerPool) {
  const std::vector<float> queries{-1, -1, -1, -1}, keys{1, 3, 5, 7};
  const std::vector<float> gates(4, 0.0f), head_w(4, 1.0f), ape(2, 0.0f);
  KeySelection sel;
  kpool_select({1, 1, 2, 2, false}, 4, queries.data(), keys.data(), gates.data(), head_w.data(),
               ape.data(), sel);
  EXPECT_EQ(sel[3], (std::vector<std::uint32_t>{0, 1}));
}

// The pooled key is a per-channel softmax over gate + ape: gates (0, ln 3) weigh the members
// 1/4 and 3/4, so keys (4, 8) pool to 7; the score is relu(q . 7) * w / sqrt(1), which picks
// this pool over one pooling to 6.5 (keys 6, 7 with equal weights).
TEST(DsaIndexer, PoolsKeysBySoftmaxOfGatePlusPositionBias) {
  const std::vector<float> queries(4, 1.0f), keys{4, 8, 6, 7};
  const std::vector<float> gates{0, std::log(3.0f), 0, 0}, head_w(4, 1.0f), ape{0, 0};
  KeySelection sel;
  kpool_select({1, 1, 2, 2, false}, 4, queries.data(), keys.data(), gates.data(), head_w.data(),
               ape.data(), sel);
  EXPECT_EQ(sel[3], (std::vector<std::uint32_t>{0, 1}));
  // Without the gate both pools' keys are means (6 and 6.5): the second wins.
  const std::vector<float> flat(4, 0.0f);
  KeySelection mean;
  kpool_select({1, 1, 2, 2, false}, 4, queries.data(), keys.data(), flat.data(), head_w.data(),
               ape.data(), mean);
  EXPECT_EQ(mean[3], (std::vector<std::uint32_t>{2, 3}));
}

}  // namespace
}  // namespace qrepack::model
