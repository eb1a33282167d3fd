#include "model/hyper_connections.h"

#include <gtest/gtest.h>

#include <cmath>

namespace qrepack::model {
namespace {

std::shared_ptr<const Matrix> mat(std::uint64_t r, std::uint64_t c, std::vector<float> v) {
  return std::make_shared<const Matrix>(Matrix{r, c, std::move(v)});
}

// With fn, base zero and hc_eps 0, every mix is 0: pre = sigmoid(0) = 1/2, post = 2 sigmoid(0)
// = 1, and comb = softmax of equal logits = 1/2 everywhere (already doubly stochastic). So
// the block input is the streams' mean and each output stream is that mean plus the branch.
TEST(HyperConnections, ZeroMixesAverageTheStreamsAndAddTheBranchToEach) {
  const HcDims d{2, 3, 4, 1e-6f, 0.0f};
  const HcSite s{mat(8, 6, std::vector<float>(48, 0.0f)), mat(1, 8, std::vector<float>(8, 0.0f)),
                 mat(1, 3, {1.0f, 1.0f, 1.0f})};
  const Matrix streams{1, 6, {1, 2, 3, 5, 6, 7}};
  HcMix mix;
  const Matrix in = hc_pre(d, s, streams, mix);
  EXPECT_EQ(in.v, (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(mix.post, (std::vector<float>{1, 1}));
  EXPECT_EQ(mix.comb, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  const Matrix out = hc_post(d, mix, streams, Matrix{1, 3, {10, 20, 30}});
  EXPECT_EQ(out.v, (std::vector<float>{13, 24, 35, 13, 24, 35}));
}

// DeepSeek V4.1 collapses with the previous sublayer's pre: given one, the block input is that
// mix of the streams, while the site's own pre (1/2, 1/2 here) is still handed out in `mix`.
TEST(HyperConnections, AGivenPreCollapsesTheStreamsAndTheSitesOwnIsHandedOn) {
  const HcDims d{2, 3, 4, 1e-6f, 0.0f};
  const HcSite s{mat(8, 6, std::vector<float>(48, 0.0f)), mat(1, 8, std::vector<float>(8, 0.0f)),
                 mat(1, 3, {1.0f, 1.0f, 1.0f})};
  const Matrix streams{2, 6, {1, 2, 3, 5, 6, 7, 0, 1, 0, 2, 0, 4}};
  const std::vector<float> lagged = {1, 0, 0.5f, 2};
  HcMix mix;
  const Matrix in = hc_pre(d, s, streams, mix, &lagged);
  EXPECT_EQ(in.v, (std::vector<float>{1, 2, 3, 4, 0.5f, 8}));
  EXPECT_EQ(mix.pre, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(mix.post, (std::vector<float>{1, 1, 1, 1}));
}

// One stream: comb is [1] whatever the logits; pre and post come from the first two mixes,
// which are fn's rows dotted with the stream over its RMS: x = (3, 4), rms = sqrt(12.5).
TEST(HyperConnections, MixesAreScaledByTheStreamsRms) {
  const float eps = 1e-3f;
  const HcDims d{1, 2, 3, 0.0f, eps};
  const HcSite s{mat(3, 2, {1, 0, 0, 1, 1, 1}), mat(1, 3, {0.5f, -0.25f, 0}),
                 mat(1, 3, {2.0f, 3.0f, 1.0f})};
  HcMix mix;
  const Matrix in = hc_pre(d, s, Matrix{1, 2, {3, 4}}, mix);
  const double r = std::sqrt(12.5);
  const double pre = 1 / (1 + std::exp(-(3 / r * 2 + 0.5))) + eps;
  const double post = 2 / (1 + std::exp(-(4 / r * 3 - 0.25)));
  EXPECT_NEAR(in.v[0], 3 * pre, 1e-5);
  EXPECT_NEAR(in.v[1], 4 * pre, 1e-5);
  EXPECT_NEAR(mix.post[0], post, 1e-6);
  // comb: softmax of one logit is 1, + eps, then divided by its column sum + eps, and again
  // by its row sum + eps and column sum + eps for each further iteration.
  double c = 1 + eps;
  c /= c + eps;
  for (int i = 1; i < 3; ++i) {
    c /= c + eps;
    c /= c + eps;
  }
  EXPECT_NEAR(mix.comb[0], c, 1e-6);
}

// Sinkhorn: many iterations make an arbitrary positive comb doubly stochastic.
TEST(HyperConnections, SinkhornMakesCombDoublyStochastic) {
  const HcDims d{3, 1, 50, 1e-6f, 0.0f};
  std::vector<float> mixes(15), base(15, 0.0f);
  for (std::size_t i = 0; i < mixes.size(); ++i) mixes[i] = 0.37f * static_cast<float>(i % 7);
  const std::vector<float> scale{1, 1, 1};
  float pre[3], post[3], comb[9];
  hc_split(d, mixes, scale, base, pre, post, comb);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(comb[i * 3] + comb[i * 3 + 1] + comb[i * 3 + 2], 1.0, 1e-5);
    EXPECT_NEAR(comb[i] + comb[3 + i] + comb[6 + i], 1.0, 1e-5);
  }
}

TEST(HyperConnections, ExpandMeanAndHeadClose) {
  const Matrix x{2, 2, {1, 2, 3, 4}};
  const Matrix e = hc_expand(x, 3);
  EXPECT_EQ(e.v, (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  EXPECT_EQ(hc_mean(Matrix{1, 4, {1, 2, 4, 8}}, 2).v, (std::vector<float>{2.5f, 5}));
  // hc_head with zero fn and base: pre = 1/2 + eps for each stream.
  const HcDims d{2, 2, 1, 1e-6f, 0.0f};
  const std::vector<float> fn(8, 0.0f), base(2, 0.0f);
  EXPECT_EQ(hc_head(d, fn, base, 1.0f, Matrix{1, 4, {1, 2, 4, 8}}).v,
            (std::vector<float>{2.5f, 5}));
}

}  // namespace
}  // namespace qrepack::model
