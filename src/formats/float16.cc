#include "qrepack/formats/float16.h"

#include <bit>

#include "core/check.h"
#include "formats/minifloat.h"

namespace qrepack {
namespace {

constexpr minifloat::Spec kBf16{7, 127};
constexpr minifloat::Spec kF16{10, 15};

}  // namespace

std::uint16_t bf16_encode(float x) {
  const std::uint32_t bits = minifloat::f32_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  if (minifloat::f32_is_nan(bits)) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet, sign kept
  }
  if (minifloat::f32_is_inf(bits)) return static_cast<std::uint16_t>(sign | 0x7F80u);
  // Rounding past the largest finite bf16 carries into exponent 0xFF, mantissa 0: +-Inf.
  const std::uint32_t mag = minifloat::round_magnitude(bits & 0x7FFFFFFFu, kBf16);
  return static_cast<std::uint16_t>(sign | mag);
}

float bf16_decode(std::uint16_t code) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 16);
}

std::uint16_t f16_encode(float x) {
  const std::uint32_t bits = minifloat::f32_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  if (minifloat::f32_is_nan(bits)) {
    return static_cast<std::uint16_t>(sign | 0x7E00u | ((bits & 0x7FFFFFu) >> 13));
  }
  if (minifloat::f32_is_inf(bits)) return static_cast<std::uint16_t>(sign | 0x7C00u);
  const std::uint32_t mag = minifloat::round_magnitude(bits & 0x7FFFFFFFu, kF16);
  if (mag >= 0x7C00u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // overflow -> Inf
  return static_cast<std::uint16_t>(sign | mag);
}

float f16_decode(std::uint16_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x8000u) << 16;
  const std::uint32_t mag = code & 0x7FFFu;
  if (mag >= 0x7C00u) {
    // Inf or NaN: widen the exponent to all ones and keep the payload.
    return std::bit_cast<float>(sign | 0x7F800000u | ((mag & 0x3FFu) << 13));
  }
  const float v = minifloat::decode_magnitude(mag, kF16);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
}

void bf16_encode_span(std::span<const float> in, std::span<std::uint16_t> out) {
  QR_CHECK(in.size() == out.size(), "bf16_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = bf16_encode(in[i]);
}

void bf16_decode_span(std::span<const std::uint16_t> in, std::span<float> out) {
  QR_CHECK(in.size() == out.size(), "bf16_decode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = bf16_decode(in[i]);
}

void f16_encode_span(std::span<const float> in, std::span<std::uint16_t> out) {
  QR_CHECK(in.size() == out.size(), "f16_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = f16_encode(in[i]);
}

void f16_decode_span(std::span<const std::uint16_t> in, std::span<float> out) {
  QR_CHECK(in.size() == out.size(), "f16_decode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = f16_decode(in[i]);
}

}  // namespace qrepack
