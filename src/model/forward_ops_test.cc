#include "model/forward_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "qrepack/core/prng.h"

namespace qrepack::model {
namespace {

TEST(ForwardOps, RopeRotatesSplitHalvesOrInterleavedPairs) {
  // theta 1, dim 4: inv_freq = [1, 1]; at position 1 every pair rotates by 1 radian.
  const Rope r = Rope::make(4, 1.0, 2);
  const float c = std::cos(1.0f), s = std::sin(1.0f);
  float half[4] = {1, 2, 3, 4};  // pairs (1, 3) and (2, 4)
  r.apply(half, 1, false);
  EXPECT_FLOAT_EQ(half[0], 1 * c - 3 * s);
  EXPECT_FLOAT_EQ(half[2], 3 * c + 1 * s);
  EXPECT_FLOAT_EQ(half[1], 2 * c - 4 * s);
  float inter[4] = {1, 3, 2, 4};  // pairs (1, 3) and (2, 4), stored de-interleaved after
  r.apply(inter, 1, true);
  EXPECT_FLOAT_EQ(inter[0], half[0]);
  EXPECT_FLOAT_EQ(inter[1], half[1]);
  EXPECT_FLOAT_EQ(inter[2], half[2]);
  EXPECT_FLOAT_EQ(inter[3], half[3]);
  float p0[4] = {1, 2, 3, 4};
  r.apply(p0, 0, false);  // position 0 is the identity
  EXPECT_EQ(p0[3], 4.0f);
}

TEST(ForwardOps, RmsNormSoftmaxArgmax) {
  Matrix x{1, 4, {1, -1, 1, -1}};
  const float w[4] = {1, 2, 3, 4};
  rms_norm(x, w, 0.0);
  EXPECT_EQ(x.v, (std::vector<float>{1, -2, 3, -4}));
  float p[3] = {0, std::log(3.0f), 0};
  softmax(p);
  EXPECT_NEAR(p[1], 0.6f, 1e-6f);
  EXPECT_NEAR(p[0], 0.2f, 1e-6f);
  const float ties[4] = {1, 5, 5, 2};
  EXPECT_EQ(argmax(ties), 1u);
}

TEST(ForwardOps, SituGluOfHandPickedArguments) {
  // g = ln 9: tanh(g / 4) = tanh(atanh(1/2)) = 1/2, sigmoid(g) = 9/10, so 4 * 0.5 * 0.9 = 1.8;
  // u = 25 atanh(1/5): 25 tanh(u / 25) = 5. The product is 9; with -g it is -0.2 * 5 = -1.
  const float g = std::log(9.0f), u = 25.0f * std::atanh(0.2f);
  Matrix gate{1, 3, {g, -g, 0.0f}};
  const Matrix up{1, 3, {u, u, u}};
  situ_glu(gate, up, 4.0f, 25.0f);
  EXPECT_NEAR(gate.v[0], 9.0f, 1e-5f);
  EXPECT_NEAR(gate.v[1], -1.0f, 1e-5f);
  EXPECT_EQ(gate.v[2], 0.0f);
}

TEST(ForwardOps, MatmulIsXTimesWTransposed) {
  const Matrix x{2, 3, {1, 2, 3, 4, 5, 6}};
  const Matrix w{2, 3, {1, 0, 0, 0, 1, 1}};
  EXPECT_EQ(matmul(x, w).v, (std::vector<float>{1, 5, 4, 11}));
}

TEST(Prng, ArithmeticLogAndTrueNormalTails) {
  for (double v : {1e-300, 1e-10, 0.1, 0.5, 0.9999, 1.0, 2.0, 3.14159, 1e10}) {
    EXPECT_NEAR(SplitMix64::exact_log(v), std::log(v), 4e-16 * std::fabs(std::log(v)) + 1e-16) << v;
  }
  SplitMix64 rng(7);
  double s = 0, s2 = 0, s4 = 0;
  int beyond4 = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    const double g = rng.normal();
    s += g;
    s2 += g * g;
    s4 += g * g * g * g;
    beyond4 += std::fabs(g) > 4.0;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NEAR(s4 / n, 3.0, 0.1);  // Gaussian kurtosis (Irwin-Hall of four gives 2.7)
  EXPECT_GT(beyond4, 5);          // P(|g| > 4) = 6.3e-5: about 25 here; a bounded law gives 0
}

}  // namespace
}  // namespace qrepack::model
