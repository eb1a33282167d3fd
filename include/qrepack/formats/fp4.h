// 4-bit element formats, one code per nibble (packing: int4.h).
//   E2M1 (NVFP4/MXFP4 element): s ee m, bias 1; values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives.
//     Encode: round to nearest even, saturate to +-6 (CUDA cvt.rn.satfinite.e2m1x2 / ModelOpt);
//     the sign of -0 and of tiny negatives is kept (-0.1 -> 0x8); NaN -> 0x7 (+6, as CUDA).
//   E0M3 (FlashRT sign-magnitude int4): code = sign<<3 | mag, value = +-mag, mag 0..7.
//     Encode a value already multiplied by the block's inverse scale: mag = min(rint_even(|v|), 7);
//     the sign bit only when v < 0 and mag > 0 (code 0x8 is never produced); NaN -> 0; +Inf -> 7.
// Spec: docs/formats/fp4.md (reference/formats.md §2.3, §2.4; reference/flashrt_omega.md §2.2).
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

std::uint8_t e2m1_encode(float x);
float e2m1_decode(std::uint8_t code);  ///< low nibble only
std::uint8_t e0m3_encode(float v);
float e0m3_decode(std::uint8_t code);  ///< low nibble only

void e2m1_encode_span(std::span<const float> in, std::span<std::uint8_t> out);
void e0m3_encode_span(std::span<const float> in, std::span<std::uint8_t> out);

}  // namespace qrepack
