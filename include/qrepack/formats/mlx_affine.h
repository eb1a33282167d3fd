// MLX affine quantization (mlx-community checkpoints; the engine's affine_quant.h): a row of I
// inputs is I * bits / 32 little-endian uint32 words, element k in word k / (32 / bits) at bit
// bits * (k mod (32 / bits)) (lowest bits = lowest column), an unsigned code q in [0, 2^bits).
// Each group of `group` inputs has a scale s and a bias b (F32, F16 or BF16, widened to f32
// exactly); w = s * q + b, one f32 multiply and one f32 add (no fused multiply-add). Bits 2, 4
// and 8 pack whole codes per word; 3, 5 and 6 straddle words and are not read here.
// Spec: docs/formats/source-encodings.md.
#pragma once

#include <cstdint>

namespace qrepack {

/// Bits whose codes fill a uint32 word exactly: 2, 4 and 8.
constexpr bool mlx_affine_bits_supported(std::uint64_t bits) {
  return bits == 2 || bits == 4 || bits == 8;
}

/// Decodes one row of `cols` elements from `words` (cols * bits / 32 words as little-endian
/// bytes) with per-group `scales` and `biases` (cols / group each). cols must be a multiple of
/// group, and group of 32 / bits.
void mlx_affine_decode_row(const std::uint8_t* words, const float* scales, const float* biases,
                           std::uint64_t cols, unsigned bits, std::uint64_t group, float* out);

}  // namespace qrepack
