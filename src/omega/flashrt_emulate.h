// FlashRT's checker emulation of E0M3 (tools/check_omega_e0m3_layer.py `e0m3_emulate`,
// reference/flashrt_omega.md §4.1), reproduced so a user can compare qrepack's report with one
// that checker made. It is NOT the kernel's quantizer (formats/fp4.h, schemes/e0m3_sfb.h):
//   scale = ue4m3_round(amax16 / 7), floored at 2^-9; q = clamp(rint_even(v / scale), -7, 7).
//   ue4m3_round: below 2^-6 rint(x / 2^-9) * 2^-9; else with base = 2^floor(log2 x),
//   m = rint_even(x / base - 1) (no factor 8: m is 0 or 1), value base * (1 + m / 8); then
//   clamped to 480. So normal scales are only 2^e or 1.125 * 2^e: 1.9 -> 1.125, 100 -> 72.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrepack {

/// The checker's ue4m3_round of one positive value (values <= 1e-12 are taken as 1e-12).
float flashrt_ue4m3_round(float x);

/// e0m3_emulate of a row-major [rows, k] matrix (k a multiple of 16): the dequantized values.
std::vector<float> flashrt_e0m3_emulate(std::span<const float> v, std::uint64_t rows,
                                        std::uint64_t k);

}  // namespace qrepack
