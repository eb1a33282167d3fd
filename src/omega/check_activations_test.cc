#include "omega/check_activations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qrepack/formats/float16.h"

namespace qrepack {
namespace {

std::vector<float> identity_blocks(std::uint64_t k) {
  std::vector<float> b(k * 64, 0.0f);
  for (std::uint64_t blk = 0; blk < k / 64; ++blk) {
    for (std::uint64_t i = 0; i < 64; ++i) b[(blk * 64 + i) * 64 + i] = 1.0f;
  }
  return b;
}

std::vector<std::int64_t> iota_perm(std::uint64_t k) {
  std::vector<std::int64_t> p(k);
  for (std::uint64_t i = 0; i < k; ++i) p[i] = static_cast<std::int64_t>(i);
  return p;
}

std::vector<std::uint16_t> ramp(std::uint64_t tokens, std::uint64_t k) {
  std::vector<std::uint16_t> x(tokens * k);
  for (std::uint64_t i = 0; i < x.size(); ++i) x[i] = f16_encode(static_cast<float>(i % 1000));
  return x;
}

TEST(CheckActivations, SyntheticXIsDeterministicPerSeed) {
  EXPECT_EQ(synthetic_x(3, 8, 128), synthetic_x(3, 8, 128));
  EXPECT_NE(synthetic_x(3, 8, 128), synthetic_x(4, 8, 128));
}

TEST(CheckActivations, RotateGathersByPerm) {
  const std::uint64_t k = 128, m = 2;
  const auto x = ramp(m, k);
  std::vector<std::int64_t> perm(k);
  for (std::uint64_t j = 0; j < k; ++j) perm[j] = static_cast<std::int64_t>((j + 1) % k);
  const auto out = rotate(x, perm, identity_blocks(k), m, k);
  // Gather: out[j] = x[perm[j]] = x[j + 1]. A scatter would give out[j] = x[j - 1].
  for (std::uint64_t t = 0; t < m; ++t) {
    for (std::uint64_t j = 0; j < k; ++j) EXPECT_EQ(out[t * k + j], x[t * k + (j + 1) % k]) << j;
  }
}

TEST(CheckActivations, RotateRightMultipliesEachBlock) {
  const std::uint64_t k = 128, m = 1;
  const auto x = ramp(m, k);
  // Block 1 is R[r][c] = 1 when r == (c + 1) % 64: x R gives out[c] = x[(c + 1) % 64], while a
  // left multiply (R x) or R^T would give x[(c - 1) % 64].
  std::vector<float> b = identity_blocks(k);
  std::fill(b.begin() + 64 * 64, b.end(), 0.0f);
  for (std::uint64_t c = 0; c < 64; ++c) b[64 * 64 + ((c + 1) % 64) * 64 + c] = 1.0f;
  const auto out = rotate(x, iota_perm(k), b, m, k);
  for (std::uint64_t c = 0; c < 64; ++c) {
    EXPECT_EQ(out[c], x[c]);
    EXPECT_EQ(out[64 + c], x[64 + (c + 1) % 64]) << c;
  }
}

TEST(CheckActivations, QuantileInterpolatesLinearly) {
  std::vector<float> v = {5, 1, 4, 2, 3};
  EXPECT_FLOAT_EQ(quantile(v, 0.5), 3.0f);
  EXPECT_FLOAT_EQ(quantile(v, 0.999), 4.996f);  // pos 3.996 between 4 and 5
  EXPECT_FLOAT_EQ(quantile(v, 0.0), 1.0f);
  EXPECT_FLOAT_EQ(quantile(v, 1.0), 5.0f);
}

TEST(CheckActivations, CalibrationPutsEachChannelsQ999AtSevenTimesItsScale) {
  const std::uint64_t m = 1000, k = 64;
  auto x2 = synthetic_x(1, m, k);
  std::vector<float> s(k);
  for (std::uint64_t c = 0; c < k; ++c) s[c] = 0.05f + 0.01f * static_cast<float>(c);
  calibrate(x2, s, m, k);
  for (std::uint64_t c = 0; c < k; ++c) {
    std::vector<double> col(m);
    for (std::uint64_t t = 0; t < m; ++t) col[t] = std::fabs(f16_decode(x2[t * k + c]));
    std::sort(col.begin(), col.end());
    const double pos = 0.999 * (m - 1);  // 998.001
    const double q = col[998] + (col[999] - col[998]) * (pos - 998);
    EXPECT_NEAR(q, 7.0 * s[c], 7.0 * s[c] * 2e-3) << c;  // fp16 rounding of the scaled values
  }
}

TEST(CheckActivations, OmegaFakeQuantRoundsHalfEvenAndClampsToInt4) {
  const std::vector<float> s = {0.5f};
  // x/s:           2.5 -> 2, 3.5 -> 4, -10 -> -8, 8 -> 7, -0.5 -> -0, 7.4 -> 7, -8.6 -> -8
  const std::vector<float> x = {1.25f, 1.75f, -5.0f, 4.0f, -0.25f, 3.7f, -4.3f};
  const std::vector<float> want = {1.0f, 2.0f, -4.0f, 3.5f, 0.0f, 3.5f, -4.0f};
  const auto got = omega_fake_quant(x, s, x.size(), 1);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

}  // namespace
}  // namespace qrepack
