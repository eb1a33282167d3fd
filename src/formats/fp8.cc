#include "qrepack/formats/fp8.h"

#include <array>
#include <bit>
#include <limits>

#include "core/check.h"
#include "formats/minifloat.h"

namespace qrepack {
namespace {

constexpr minifloat::Spec kE4m3{3, 7};
constexpr minifloat::Spec kE5m2{2, 15};
constexpr std::uint32_t kE4m3MaxCode = 0x7E;  // 448
constexpr std::uint32_t kE5m2MaxCode = 0x7B;  // 57344
constexpr std::uint8_t kNaN = 0x7F;           // canonical NaN of both formats
constexpr std::uint8_t kE5m2Inf = 0x7C;

std::uint8_t encode(float x, Fp8Overflow overflow, minifloat::Spec spec, std::uint32_t max_code,
                    bool has_inf) {
  const std::uint32_t bits = minifloat::f32_bits(x);
  const std::uint8_t sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
  const bool saturate = overflow == Fp8Overflow::kSaturate;
  if (minifloat::f32_is_nan(bits)) return saturate ? kNaN : (kNaN | sign);
  std::uint32_t mag;
  if (minifloat::f32_is_inf(bits)) {
    mag = max_code + 1;  // treated exactly like a finite overflow
  } else {
    mag = minifloat::round_magnitude(bits & 0x7FFFFFFFu, spec);
  }
  if (mag > max_code) {
    if (saturate) return static_cast<std::uint8_t>(sign | max_code);
    return static_cast<std::uint8_t>(sign | (has_inf ? kE5m2Inf : kNaN));
  }
  return static_cast<std::uint8_t>(sign | mag);
}

constexpr std::array<float, 256> make_table(minifloat::Spec spec, bool e5m2) {
  std::array<float, 256> t{};
  for (std::uint32_t c = 0; c < 256; ++c) {
    const std::uint32_t mag = c & 0x7F;
    float v;
    if (e5m2 && mag >= 0x7D) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (e5m2 && mag == 0x7C) {
      v = std::numeric_limits<float>::infinity();
    } else if (!e5m2 && mag == 0x7F) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else {
      v = minifloat::decode_magnitude(mag, spec);
    }
    t[c] = (c & 0x80) ? -v : v;
  }
  return t;
}

constexpr auto kE4m3Table = make_table(kE4m3, false);
constexpr auto kE5m2Table = make_table(kE5m2, true);

}  // namespace

std::uint8_t e4m3_encode(float x, Fp8Overflow overflow) {
  return encode(x, overflow, kE4m3, kE4m3MaxCode, false);
}
float e4m3_decode(std::uint8_t code) { return kE4m3Table[code]; }

std::uint8_t e5m2_encode(float x, Fp8Overflow overflow) {
  return encode(x, overflow, kE5m2, kE5m2MaxCode, true);
}
float e5m2_decode(std::uint8_t code) { return kE5m2Table[code]; }

std::uint8_t ue4m3_encode(float x) {
  // fmaxf(x, 0) as FlashRT writes it: negatives, -0 and NaN (fmaxf returns the non-NaN operand)
  // all become +0 before the saturating conversion.
  if (!(x > 0.0f)) x = 0.0f;
  return e4m3_encode(x, Fp8Overflow::kSaturate);
}

float ue4m3_decode(std::uint8_t code) { return kE4m3Table[code & 0x7F]; }

void e4m3_encode_span(std::span<const float> in, std::span<std::uint8_t> out,
                      Fp8Overflow overflow) {
  QR_CHECK(in.size() == out.size(), "e4m3_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = e4m3_encode(in[i], overflow);
}

void e4m3_decode_span(std::span<const std::uint8_t> in, std::span<float> out) {
  QR_CHECK(in.size() == out.size(), "e4m3_decode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = kE4m3Table[in[i]];
}

void e5m2_encode_span(std::span<const float> in, std::span<std::uint8_t> out,
                      Fp8Overflow overflow) {
  QR_CHECK(in.size() == out.size(), "e5m2_encode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = e5m2_encode(in[i], overflow);
}

void e5m2_decode_span(std::span<const std::uint8_t> in, std::span<float> out) {
  QR_CHECK(in.size() == out.size(), "e5m2_decode_span: size mismatch");
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = kE5m2Table[in[i]];
}

}  // namespace qrepack
