// Synthetic activations for `qrepack check` (reference/flashrt_omega.md §4.1), each step a
// separate function so it can be tested on its own:
//   synthetic_x: x[t][c] = fp16(g * gain[c]), gain = exp(g) lognormal, K/128 + 1 distinct
//                outlier channels x10, g ~ N(0, 1) from SplitMix64(seed)
//   rotate:      x2[t][64b + c] = fp16(sum_r x[t][perm[64b + r]] * R[b][r][c]) (gather by perm,
//                then right-multiply each 64-slice by its block, as Omega's forward does)
//   calibrate:   x2[:, c] *= 7 * s_t[c] / max(q99.9(|x2[:, c]|), 1e-8), rounded to fp16, so
//                each channel's q99.9 equals 7 * s_t[c], the table's own definition
//   omega_fake_quant: clamp(rint_even(x / s_t), -8, 7) * s_t, f32 division (Omega's a_bits=4)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrepack {

/// fp16 codes [tokens, k].
std::vector<std::uint16_t> synthetic_x(std::uint64_t seed, std::uint64_t tokens, std::uint64_t k);

/// fp16 codes [tokens, k]; `blocks` is [k/64, 64, 64] as f32, `perm` a permutation of 0..k-1.
std::vector<std::uint16_t> rotate(std::span<const std::uint16_t> x,
                                  std::span<const std::int64_t> perm, std::span<const float> blocks,
                                  std::uint64_t tokens, std::uint64_t k);

/// In place, fp16 codes [tokens, k].
void calibrate(std::span<std::uint16_t> x2, std::span<const float> s_t, std::uint64_t tokens,
               std::uint64_t k);

/// Linear-interpolated quantile (torch.quantile's default) of `v`, which is sorted here.
float quantile(std::vector<float>& v, double q);

/// f32 [tokens, k] from f32 x [tokens, k] and per-channel s_t [k].
std::vector<float> omega_fake_quant(std::span<const float> x, std::span<const float> s_t,
                                    std::uint64_t tokens, std::uint64_t k);

}  // namespace qrepack
