#include "omega/check_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qrepack/core/prng.h"

namespace qrepack {
namespace {

TEST(CheckMath, MatmulNtMatchesANaiveDoubleProduct) {
  const std::uint64_t m = 3, n = 5, k = 19;  // k not a multiple of 8: the tail loop runs
  SplitMix64 rng(5);
  std::vector<float> a(m * k), b(n * k);
  for (auto& v : a) v = rng.gauss();
  for (auto& v : b) v = rng.gauss();
  const auto y = matmul_nt(a, b, m, n, k);
  for (std::uint64_t i = 0; i < m; ++i) {
    for (std::uint64_t j = 0; j < n; ++j) {
      double want = 0;
      for (std::uint64_t c = 0; c < k; ++c) want += double(a[i * k + c]) * b[j * k + c];
      EXPECT_NEAR(y[i * n + j], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
}

TEST(CheckMath, CosineStatsGlobalAndPerToken) {
  // ref rows (1,0), (0,1), (1,1); y rows: same, scaled x3 (cos 1), orthogonal (cos 0).
  const std::vector<float> ref = {1, 0, 0, 1, 1, 1};
  const std::vector<float> y = {1, 0, 0, 3, 1, -1};
  const CosineStats s = cosine_stats(y, ref, 3, 2);
  EXPECT_DOUBLE_EQ(s.token_min, 0.0);
  EXPECT_DOUBLE_EQ(s.token_mean, 2.0 / 3.0);
  // dot = 1 + 3 + 0 = 4; |y|^2 = 1 + 9 + 2 = 12; |ref|^2 = 4.
  EXPECT_DOUBLE_EQ(s.global, 4.0 / (std::sqrt(12.0) * 2.0));
  const std::vector<float> neg = {-1, 0, 0, -1, -1, -1};
  EXPECT_DOUBLE_EQ(cosine_stats(neg, ref, 3, 2).global, -1.0);
}

}  // namespace
}  // namespace qrepack
