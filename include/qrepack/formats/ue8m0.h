// UE8M0 (OCP MX shared scale): value 2^(code - 127) for codes 0..254, 0xFF = NaN; no zero, no
// sign, no Inf. Code 0 decodes to 2^-127 (an f32 subnormal). Producers disagree on how to round
// a float to a power of two, so the rounding is always named (reference/formats.md §2.2).
// All modes work in the linear domain; f32 subnormal inputs below 2^-127 give code 0.
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

enum class Ue8m0Rounding : std::uint8_t {
  /// PyTorch float8_e8m0fnu: on the f32 exponent, round up iff the mantissa is >= 0.5; sign
  /// ignored; 0 -> 0x00; overflow, Inf and NaN -> 0xFF.
  kNearest,
  /// CUDA __nv_cvt_float_to_e8m0(cudaRoundZero, satfinite): floor of the exponent; sign ignored;
  /// overflow and Inf -> 0xFE; NaN -> 0xFF.
  kTowardZero,
  /// CUDA cvt.rp.satfinite.ue8m0x2: ceiling of the exponent; sign ignored; overflow and Inf ->
  /// 0xFE; NaN -> 0xFF.
  kUp,
};

std::uint8_t ue8m0_encode(float x, Ue8m0Rounding rounding);
float ue8m0_decode(std::uint8_t code);

void ue8m0_encode_span(std::span<const float> in, std::span<std::uint8_t> out,
                       Ue8m0Rounding rounding);
void ue8m0_decode_span(std::span<const std::uint8_t> in, std::span<float> out);

}  // namespace qrepack
