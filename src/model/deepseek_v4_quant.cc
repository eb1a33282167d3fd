#include "model/deepseek_v4_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace qrepack::model {
namespace {

// ceil(log2(v)) for v > 0, clamped to the UE8M0 range.
int scale_exponent(float v) {
  int e = 0;
  const float f = std::frexp(v, &e);
  return std::clamp(f == 0.5f ? e - 1 : e, -127, 127);
}

// e4m3fn round-to-nearest-even of |m| < 448.
float e4m3_round(float m) {
  if (m < 0.015625f) return std::nearbyint(m * 512.0f) / 512.0f;  // subnormal step 2^-9
  int e = 0;
  std::frexp(m, &e);                               // m in [2^(e-1), 2^e)
  const float step = std::ldexp(1.0f, e - 1 - 3);  // three mantissa bits
  return std::nearbyint(m / step) * step;
}

constexpr float kE2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1.0f, -1.5f, -2, -3, -4, -6};

}  // namespace

float bf16_round(float v) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

void bf16_round(std::span<float> x) {
  for (float& v : x) v = bf16_round(v);
}

void fp8_qdq(std::span<float> x, std::uint64_t block) {
  for (std::uint64_t b = 0; b < x.size(); b += block) {
    const std::span<float> s = x.subspan(b, std::min<std::uint64_t>(block, x.size() - b));
    float top = 0;
    for (float v : s) top = std::max(top, std::fabs(v));
    const float scale = std::ldexp(1.0f, scale_exponent(std::max(top, 1e-4f) / 448.0f));
    for (float& v : s) {
      const float n = std::clamp(v / scale, -448.0f, 448.0f), m = std::fabs(n);
      const float q = m == 0 ? 0.0f : (m >= 448.0f ? 448.0f : e4m3_round(m));
      v = std::copysign(q, n) * scale;
    }
  }
}

void fp4_qdq(std::span<float> x, std::uint64_t block) {
  for (std::uint64_t b = 0; b < x.size(); b += block) {
    const std::span<float> s = x.subspan(b, std::min<std::uint64_t>(block, x.size() - b));
    float top = 0;
    for (float v : s) top = std::max(top, std::fabs(v));
    top = std::max(top, 6.0f * std::ldexp(1.0f, -126));
    const float scale = std::ldexp(1.0f, scale_exponent(top / 6.0f));
    for (float& v : s) {
      const float n = std::clamp(v / scale, -6.0f, 6.0f);
      int best = 0;
      for (int c = 1; c < 16; ++c) {
        if (std::fabs(n - kE2m1[c]) < std::fabs(n - kE2m1[best])) best = c;
      }
      v = kE2m1[best] * scale;
    }
  }
}

void hadamard_bf16(std::span<float> x) {
  const std::uint64_t n = x.size();
  for (std::uint64_t w = 1; w < n; w *= 2) {
    for (std::uint64_t b = 0; b < n; b += 2 * w) {
      for (std::uint64_t i = 0; i < w; ++i) {
        const float l = x[b + i], r = x[b + w + i];
        x[b + i] = l + r;
        x[b + w + i] = l - r;
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (float& v : x) v = bf16_round(v * scale);
}

}  // namespace qrepack::model
