#include "omega/check_math.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qrepack {

std::vector<float> matmul_nt(std::span<const float> a, std::span<const float> b, std::uint64_t m,
                             std::uint64_t n, std::uint64_t k) {
  std::vector<float> y(m * n);
  constexpr std::uint64_t kRowBlock = 32;  // rows of B kept hot while every row of A passes
  for (std::uint64_t n0 = 0; n0 < n; n0 += kRowBlock) {
    const std::uint64_t n1 = std::min(n, n0 + kRowBlock);
    for (std::uint64_t i = 0; i < m; ++i) {
      const float* ar = a.data() + i * k;
      for (std::uint64_t j = n0; j < n1; ++j) {
        const float* br = b.data() + j * k;
        float acc[8] = {};
        std::uint64_t c = 0;
        for (; c + 8 <= k; c += 8) {
          for (int l = 0; l < 8; ++l) acc[l] += ar[c + l] * br[c + l];
        }
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; c < k; ++c) s += ar[c] * br[c];
        y[i * n + j] = s;
      }
    }
  }
  return y;
}

CosineStats cosine_stats(std::span<const float> y, std::span<const float> ref, std::uint64_t m,
                         std::uint64_t n) {
  const auto cos = [](double dot, double yy, double rr) {
    return yy > 0 && rr > 0 ? dot / (std::sqrt(yy) * std::sqrt(rr)) : 0.0;
  };
  CosineStats s;
  s.token_min = std::numeric_limits<double>::infinity();
  double dot = 0, yy = 0, rr = 0, sum_tok = 0;
  for (std::uint64_t i = 0; i < m; ++i) {
    double d = 0, a = 0, b = 0;
    for (std::uint64_t j = 0; j < n; ++j) {
      const double p = y[i * n + j], q = ref[i * n + j];
      d += p * q;
      a += p * p;
      b += q * q;
    }
    const double c = cos(d, a, b);
    sum_tok += c;
    s.token_min = std::min(s.token_min, c);
    dot += d;
    yy += a;
    rr += b;
  }
  s.global = cos(dot, yy, rr);
  s.token_mean = m ? sum_tok / static_cast<double>(m) : 0.0;
  if (m == 0) s.token_min = 0;
  return s;
}

}  // namespace qrepack
