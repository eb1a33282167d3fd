#include "qrepack/formats/ue8m0.h"

#include <bit>
#include <limits>

#include "core/check.h"
#include "formats/minifloat.h"

namespace qrepack {

std::uint8_t ue8m0_encode(float x, Ue8m0Rounding rounding) {
  const std::uint32_t bits = minifloat::f32_bits(x) & 0x7FFFFFFFu;  // sign ignored
  if (minifloat::f32_is_nan(bits)) return 0xFF;
  const bool nearest = rounding == Ue8m0Rounding::kNearest;
  if (minifloat::f32_is_inf(bits)) return nearest ? 0xFF : 0xFE;
  std::uint32_t exp = bits >> 23;
  const std::uint32_t mant = bits & 0x7FFFFFu;
  if (exp == 0) {
    // f32 subnormal (or zero): code 0 is 2^-127 = mantissa 0x400000 and nothing lies below it,
    // so smaller inputs clamp to code 0; between 2^-127 and 2^-126 the mode decides.
    switch (rounding) {
      case Ue8m0Rounding::kNearest:
        return mant >= 0x600000u ? 1 : 0;
      case Ue8m0Rounding::kTowardZero:
        return 0;
      case Ue8m0Rounding::kUp:
        return mant > 0x400000u ? 1 : 0;
    }
  }
  switch (rounding) {
    case Ue8m0Rounding::kNearest:
      exp += mant >= 0x400000u ? 1 : 0;  // overflow to 255 is the NaN code, as PyTorch
      break;
    case Ue8m0Rounding::kTowardZero:
      break;
    case Ue8m0Rounding::kUp:
      exp += mant != 0 ? 1 : 0;
      if (exp == 0xFF) exp = 0xFE;  // satfinite
      break;
  }
  return static_cast<std::uint8_t>(exp);
}

float ue8m0_decode(std::uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (code == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 23);
}

void ue8m0_encode_span(std::span<const float> in, std::span<std::uint8_t> out,
                       Ue8m0Rounding rounding) {
  QR_CHECK(in.size() == out.size(), "ue8m0_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = ue8m0_encode(in[i], rounding);
}

void ue8m0_decode_span(std::span<const std::uint8_t> in, std::span<float> out) {
  QR_CHECK(in.size() == out.size(), "ue8m0_decode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = ue8m0_decode(in[i]);
}

}  // namespace qrepack
