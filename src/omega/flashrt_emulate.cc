#include "omega/flashrt_emulate.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace qrepack {

float flashrt_ue4m3_round(float x) {
  x = std::max(x, 1e-12f);
  float value;
  if (x < 0x1p-6f) {
    value = std::nearbyint(x / 0x1p-9f) * 0x1p-9f;
  } else {
    // floor(log2 x) taken exactly from the exponent (torch's f32 log2 agrees except within an
    // ulp of a power of two, where it may round up a binade).
    int e = 0;
    std::frexp(x, &e);
    const float base = std::ldexp(1.0f, e - 1);
    const float m = std::clamp(std::nearbyint(x / base - 1.0f), 0.0f, 8.0f);
    value = m == 8.0f ? 2.0f * base : base * (1.0f + m / 8.0f);
  }
  return std::min(value, 480.0f);
}

std::vector<float> flashrt_e0m3_emulate(std::span<const float> v, std::uint64_t rows,
                                        std::uint64_t k) {
  QR_CHECK(k % 16 == 0 && v.size() == rows * k, "flashrt_e0m3_emulate: shape");
  std::vector<float> out(v.size());
  for (std::size_t b = 0; b < v.size(); b += 16) {
    float amax = 0;
    for (std::size_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float scale = std::max(flashrt_ue4m3_round(amax / 7.0f), 0x1p-9f);
    for (std::size_t i = b; i < b + 16; ++i) {
      out[i] = std::clamp(std::nearbyint(v[i] / scale), -7.0f, 7.0f) * scale;
    }
  }
  return out;
}

}  // namespace qrepack
