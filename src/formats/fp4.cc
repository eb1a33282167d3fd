#include "qrepack/formats/fp4.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.h"
#include "formats/minifloat.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/formats/int4.h"
#include "qrepack/formats/ue8m0.h"

namespace qrepack {
namespace {

constexpr std::array<float, 16> kE2m1Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                               4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                               -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

std::uint8_t e2m1_encode(float x) {
  const std::uint32_t bits = minifloat::f32_bits(x);
  if (minifloat::f32_is_nan(bits)) return 0x7;
  const std::uint8_t sign = (bits & 0x80000000u) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Midpoints between neighbours; a tie goes to the even code (even mantissa bit): 0.25 -> 0,
  // 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0.
  std::uint8_t mag;
  if (a <= 0.25f) {
    mag = 0;
  } else if (a < 0.75f) {
    mag = 1;
  } else if (a <= 1.25f) {
    mag = 2;
  } else if (a < 1.75f) {
    mag = 3;
  } else if (a <= 2.5f) {
    mag = 4;
  } else if (a < 3.5f) {
    mag = 5;
  } else if (a <= 5.0f) {
    mag = 6;
  } else {
    mag = 7;  // saturates, +-Inf included
  }
  return static_cast<std::uint8_t>(sign | mag);
}

float e2m1_decode(std::uint8_t code) { return kE2m1Values[code & 0x0F]; }

std::int64_t nvfp4_decode_row(const std::uint8_t* packed, const std::uint8_t* block_scales,
                              std::size_t cols, float global, Nvfp4Global mode, float* out) {
  const std::size_t blocks = (cols + 15) / 16;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::uint8_t code = block_scales[b];
    if ((code & 0x80) != 0 || code == 0x7F) return static_cast<std::int64_t>(b);
    const float s = e4m3_decode(code);
    const float eff = mode == Nvfp4Global::kDivide ? s / global : s;
    const std::size_t end = std::min(cols, 16 * b + 16);
    for (std::size_t k = 16 * b; k < end; ++k) {
      const float q = kE2m1Values[nibble_at(packed, k)];
      out[k] = mode == Nvfp4Global::kDivide ? q * eff : (q * eff) * global;
    }
  }
  return -1;
}

std::int64_t mxfp4_decode_row(const std::uint8_t* packed, const std::uint8_t* exponents,
                              std::size_t cols, float* out) {
  for (std::size_t b = 0; b < cols / 32; ++b) {
    if (exponents[b] == 0xFF) return static_cast<std::int64_t>(b);
    const float s = ue8m0_decode(exponents[b]);
    for (std::size_t k = 32 * b; k < 32 * b + 32; ++k)
      out[k] = kE2m1Values[nibble_at(packed, k)] * s;
  }
  return -1;
}

std::uint8_t e0m3_encode(float v) {
  if (std::isnan(v)) return 0;
  const float a = std::fabs(v);
  // rint under the default rounding mode is round-half-even, like __float2int_rn.
  const float r = a >= 7.0f ? 7.0f : std::nearbyint(a);
  const auto mag = static_cast<std::uint8_t>(r);
  return static_cast<std::uint8_t>((v < 0.0f && mag > 0) ? (0x8 | mag) : mag);
}

float e0m3_decode(std::uint8_t code) {
  const float mag = static_cast<float>(code & 0x7);
  return (code & 0x8) ? -mag : mag;
}

void e2m1_encode_span(std::span<const float> in, std::span<std::uint8_t> out) {
  QR_CHECK(in.size() == out.size(), "e2m1_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = e2m1_encode(in[i]);
}

void e0m3_encode_span(std::span<const float> in, std::span<std::uint8_t> out) {
  QR_CHECK(in.size() == out.size(), "e0m3_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = e0m3_encode(in[i]);
}

}  // namespace qrepack
