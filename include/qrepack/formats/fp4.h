// 4-bit element formats, one code per nibble (packing: int4.h).
//   E2M1 (NVFP4/MXFP4 element): s ee m, bias 1; values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
//     Encode: round to nearest even, saturate to +-6 (CUDA cvt.rn.satfinite.e2m1x2 / ModelOpt);
//     the sign of -0 and of tiny negatives is kept (-0.1 -> 0x8); NaN -> 0x7 (+6, as CUDA).
//   E0M3 (FlashRT sign-magnitude int4): code = sign<<3 | mag, value = +-mag, mag 0..7.
//     Encode a value already multiplied by the block's inverse scale: mag = min(rint_even(|v|), 7);
//     the sign bit only when v < 0 and mag > 0 (code 0x8 is never produced); NaN -> 0; +Inf -> 7.
// Spec: docs/formats/fp4.md (reference/formats.md §2.3, §2.4; reference/flashrt_omega.md §2.2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace qrepack {

std::uint8_t e2m1_encode(float x);
float e2m1_decode(std::uint8_t code);  ///< low nibble only
std::uint8_t e0m3_encode(float v);
float e0m3_decode(std::uint8_t code);  ///< low nibble only

void e2m1_encode_span(std::span<const float> in, std::span<std::uint8_t> out);

/// How an NVFP4 checkpoint applies its per-tensor second-level scale (reference/formats.md §4).
enum class Nvfp4Global : std::uint8_t {
  /// ModelOpt: W = (e2m1 * float(block scale)) * weight_scale_2, in that order, in f32.
  kMultiply,
  /// compressed-tensors: W = e2m1 * (float(block scale) / weight_global_scale), in f32.
  kDivide,
};

/// Decodes one NVFP4 row of `cols` elements: `packed` holds ceil(cols / 2) bytes, element 2k in
/// the low nibble; `block_scales` holds ceil(cols / 16) F8_E4M3 codes. Returns the index of
/// the first block scale that is negative or NaN (sign bit set, or 0x7F), or -1 when all are
/// valid (the row is then decoded; values are finite by construction when the global is).
std::int64_t nvfp4_decode_row(const std::uint8_t* packed, const std::uint8_t* block_scales,
                              std::size_t cols, float global, Nvfp4Global mode, float* out);
/// Decodes one MXFP4 row of `cols` elements (cols % 32 == 0): `packed` holds cols / 2 bytes,
/// element 2k in the low nibble; `exponents` holds cols / 32 UE8M0 codes. Element k is
/// e2m1(code) * 2^(exponent - 127), one f32 multiply (exact: a power of two times a value of
/// two significant bits). Returns the index of the first exponent that is the NaN code 0xFF, or
/// -1 when all are valid (the row is then decoded; 6 * 2^127 is +-Inf, left to the caller's
/// finiteness check).
std::int64_t mxfp4_decode_row(const std::uint8_t* packed, const std::uint8_t* exponents,
                              std::size_t cols, float* out);
void e0m3_encode_span(std::span<const float> in, std::span<std::uint8_t> out);

}  // namespace qrepack
