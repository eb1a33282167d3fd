#include "omega/check_activations.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "qrepack/core/prng.h"
#include "qrepack/formats/float16.h"

namespace qrepack {

std::vector<std::uint16_t> synthetic_x(std::uint64_t seed, std::uint64_t tokens, std::uint64_t k) {
  SplitMix64 rng(seed ^ 0x6F6D656761636865ull);
  std::vector<float> gains(k);
  for (auto& g : gains) g = std::exp(rng.gauss());
  std::vector<std::uint64_t> idx(k);
  for (std::uint64_t i = 0; i < k; ++i) idx[i] = i;
  const std::uint64_t outliers = std::min(k, k / 128 + 1);
  for (std::uint64_t i = 0; i < outliers; ++i) {  // partial Fisher-Yates: distinct channels
    const std::uint64_t j = i + ((static_cast<std::uint64_t>(rng.next_u32()) * (k - i)) >> 32);
    std::swap(idx[i], idx[j]);
    gains[idx[i]] *= 10.0f;
  }
  std::vector<std::uint16_t> x(tokens * k);
  for (std::uint64_t t = 0; t < tokens; ++t) {
    for (std::uint64_t c = 0; c < k; ++c) x[t * k + c] = f16_encode(rng.gauss() * gains[c]);
  }
  return x;
}

std::vector<std::uint16_t> rotate(std::span<const std::uint16_t> x,
                                  std::span<const std::int64_t> perm, std::span<const float> blocks,
                                  std::uint64_t tokens, std::uint64_t k) {
  QR_CHECK(x.size() == tokens * k && perm.size() == k && blocks.size() == k * 64 && k % 64 == 0,
           "rotate: sizes");
  std::vector<std::uint16_t> out(tokens * k);
  for (std::uint64_t t = 0; t < tokens; ++t) {
    for (std::uint64_t b = 0; b < k / 64; ++b) {
      float acc[64] = {};
      const float* rb = blocks.data() + b * 64 * 64;
      for (std::uint64_t r = 0; r < 64; ++r) {
        const float g = f16_decode(x[t * k + static_cast<std::uint64_t>(perm[b * 64 + r])]);
        for (std::uint64_t c = 0; c < 64; ++c) acc[c] += g * rb[r * 64 + c];
      }
      for (std::uint64_t c = 0; c < 64; ++c) out[t * k + b * 64 + c] = f16_encode(acc[c]);
    }
  }
  return out;
}

float quantile(std::vector<float>& v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return static_cast<float>(v[lo] + (v[hi] - v[lo]) * frac);
}

void calibrate(std::span<std::uint16_t> x2, std::span<const float> s_t, std::uint64_t tokens,
               std::uint64_t k) {
  QR_CHECK(x2.size() == tokens * k && s_t.size() == k && tokens > 0, "calibrate: sizes");
  std::vector<float> col(tokens);
  for (std::uint64_t c = 0; c < k; ++c) {
    for (std::uint64_t t = 0; t < tokens; ++t) col[t] = std::fabs(f16_decode(x2[t * k + c]));
    const float q999 = std::max(quantile(col, 0.999), 1e-8f);
    const float factor = 7.0f * s_t[c] / q999;
    for (std::uint64_t t = 0; t < tokens; ++t) {
      x2[t * k + c] = f16_encode(f16_decode(x2[t * k + c]) * factor);
    }
  }
}

std::vector<float> omega_fake_quant(std::span<const float> x, std::span<const float> s_t,
                                    std::uint64_t tokens, std::uint64_t k) {
  QR_CHECK(x.size() == tokens * k && s_t.size() == k, "omega_fake_quant: sizes");
  std::vector<float> a(tokens * k);
  for (std::uint64_t t = 0; t < tokens; ++t) {
    for (std::uint64_t c = 0; c < k; ++c) {
      const float s = s_t[c];
      a[t * k + c] = std::clamp(std::nearbyint(x[t * k + c] / s), -8.0f, 7.0f) * s;
    }
  }
  return a;
}

}  // namespace qrepack
