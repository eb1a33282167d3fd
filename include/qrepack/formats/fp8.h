// FP8 element formats (OCP OFP8) and the UE4M3 scale.
//   E4M3FN: s eeee mmm, bias 7, max +-448 (0x7E), NaN only 0x7F/0xFF, no Inf.
//   E5M2:   s eeeee mm, bias 15, max +-57344 (0x7B), Inf 0x7C, NaN 0x7D..0x7F.
//   UE4M3:  E4M3FN with the sign bit 0: scale factors in [0, 448].
// Encoding: one round-to-nearest-even from the exact f32, then the overflow policy.
// Spec and worked examples: docs/formats/fp8.md (reference/formats.md §1, §2.1).
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

/// What happens to a value whose rounded code lies past the largest finite code.
enum class Fp8Overflow : std::uint8_t {
  /// CUDA __NV_SATFINITE: finite overflow and +-Inf -> +-max; NaN -> 0x7F.
  kSaturate,
  /// PyTorch <= 2.12 / ml_dtypes: overflow -> NaN (E4M3) or +-Inf (E5M2); Inf -> NaN (E4M3)
  /// or Inf (E5M2); NaN -> 0x7F with the input's sign.
  kNonSaturate,
};

std::uint8_t e4m3_encode(float x, Fp8Overflow overflow);
float e4m3_decode(std::uint8_t code);
std::uint8_t e5m2_encode(float x, Fp8Overflow overflow);
float e5m2_decode(std::uint8_t code);

/// UE4M3 scale byte: the input is clamped with fmaxf(x, 0) first, as FlashRT does (negatives,
/// -0 and NaN become +0), then converted as E4M3 with saturation.
std::uint8_t ue4m3_encode(float x);
/// Decodes the low 7 bits (bit 7 is not part of a valid UE4M3 byte; see ue4m3_is_valid).
float ue4m3_decode(std::uint8_t code);
/// A valid UE4M3 byte has bit 7 clear.
constexpr bool ue4m3_is_valid(std::uint8_t code) { return (code & 0x80) == 0; }

/// Array versions; `out.size()` must equal `in.size()`.
void e4m3_encode_span(std::span<const float> in, std::span<std::uint8_t> out, Fp8Overflow overflow);
void e4m3_decode_span(std::span<const std::uint8_t> in, std::span<float> out);
void e5m2_encode_span(std::span<const float> in, std::span<std::uint8_t> out, Fp8Overflow overflow);
void e5m2_decode_span(std::span<const std::uint8_t> in, std::span<float> out);

}  // namespace qrepack
