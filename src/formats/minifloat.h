// Generic binary-float rounding shared by every codec with sign, exponent and mantissa fields
// (bf16, f16, E4M3FN, E5M2). Exact integer arithmetic on the f32 bit pattern: one
// round-to-nearest-even from the exact input, including the target's subnormal range.
// Overflow handling is the caller's: round_magnitude may return codes past the largest finite.
#pragma once

#include <bit>
#include <cstdint>

namespace qrepack::minifloat {

struct Spec {
  int man_bits;  ///< stored mantissa bits
  int bias;      ///< exponent bias
};

/// Right shift by `shift` bits rounding to nearest, ties to even.
constexpr std::uint32_t shift_right_rne(std::uint32_t value, int shift) {
  if (shift <= 0) return value << -shift;
  if (shift >= 32) return 0;  // callers only shift values below 2^24 this far
  const std::uint32_t q = value >> shift;
  const std::uint32_t rem = value & ((std::uint32_t{1} << shift) - 1);
  const std::uint32_t half = std::uint32_t{1} << (shift - 1);
  return (rem > half || (rem == half && (q & 1))) ? q + 1 : q;
}

/// Code of |x| (sign excluded) rounded to the target grid, for a finite f32 bit pattern with the
/// sign bit clear. The result may exceed the target's largest finite code: the caller decides
/// what overflow means.
constexpr std::uint32_t round_magnitude(std::uint32_t abs_bits, Spec spec) {
  const int exp_field = static_cast<int>(abs_bits >> 23);
  const std::uint32_t mant = abs_bits & 0x7FFFFFu;
  // An f32 subnormal is mant * 2^-149, the same as exponent field 1 without the implicit bit.
  const int ef = exp_field == 0 ? 1 : exp_field;
  const std::uint32_t sig = exp_field == 0 ? mant : (mant | 0x800000u);
  if (exp_field != 0 && ef - 127 >= 1 - spec.bias) {
    // Normal in the target: rebias the exponent and round the mantissa; a carry out of the
    // mantissa correctly bumps the exponent.
    const std::uint32_t combined = (static_cast<std::uint32_t>(ef - 127 + spec.bias) << 23) | mant;
    return shift_right_rne(combined, 23 - spec.man_bits);
  }
  // Subnormal in the target: count units of 2^(1 - bias - man_bits). A result of 2^man_bits is
  // exactly the smallest normal code.
  const int shift = 151 - spec.bias - spec.man_bits - ef;
  if (shift >= 32) return 0;
  return shift_right_rne(sig, shift);
}

/// 2^e as an f32, exact for -149 <= e <= 127.
constexpr float pow2(int e) {
  if (e >= -126) return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23);
  return std::bit_cast<float>(std::uint32_t{1} << (e + 149));
}

/// Value of a finite magnitude code (no sign, not a NaN/Inf code). Exact.
constexpr float decode_magnitude(std::uint32_t code, Spec spec) {
  const std::uint32_t exp_field = code >> spec.man_bits;
  const std::uint32_t mant = code & ((std::uint32_t{1} << spec.man_bits) - 1);
  if (exp_field == 0) {
    return static_cast<float>(mant) * pow2(1 - spec.bias - spec.man_bits);
  }
  const int e = static_cast<int>(exp_field) - spec.bias;
  return (1.0f + static_cast<float>(mant) * pow2(-spec.man_bits)) * pow2(e);
}

constexpr std::uint32_t f32_bits(float x) { return std::bit_cast<std::uint32_t>(x); }
constexpr bool f32_is_nan(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }
constexpr bool f32_is_inf(std::uint32_t bits) { return (bits & 0x7FFFFFFFu) == 0x7F800000u; }

}  // namespace qrepack::minifloat
