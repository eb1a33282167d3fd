// FP8 block scheme (DeepSeek-V3 / GLM FP8 checkpoints; reference/formats.md §6):
//   weight  F8_E4M3 [O, I]
//   scale   F32 "<weight>_scale_inv" [ceil(O/br), ceil(I/bc)], a MULTIPLIER despite the name
//   decode  W[i][j] = f32(e4m3(q[i][j])) * scale[i/br][j/bc]; edge blocks are cropped
//   encode  scale = amax(block) / 448 (f32 division), an all-zero block gets scale 1;
//           q = e4m3_rne_saturate(w / scale) (f32 division)
// Encode is the inverse path used by the reference fixture emitter (colibri glm_fp8_emit.py).
#pragma once

#include <cstdint>
#include <span>

#include "qrepack/core/error.h"

namespace qrepack {

struct Fp8BlockShape {
  std::uint64_t rows;  ///< O
  std::uint64_t cols;  ///< I
  std::uint64_t block_rows = 128;
  std::uint64_t block_cols = 128;
  std::uint64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  std::uint64_t scale_cols() const { return (cols + block_cols - 1) / block_cols; }
};

/// Quantizes a row-major f32 [rows, cols] matrix. `q` has rows*cols bytes, `scale_inv`
/// scale_rows()*scale_cols() floats. Non-finite inputs saturate (E4M3 satfinite).
void fp8_block_encode(std::span<const float> w, const Fp8BlockShape& shape,
                      std::span<std::uint8_t> q, std::span<float> scale_inv);

/// Decodes rows [row0, row0 + n) of a quantized matrix: `q` holds exactly those rows,
/// `scale_inv` the whole scale matrix, `out` n*cols floats.
void fp8_block_decode_rows(std::span<const std::uint8_t> q, std::span<const float> scale_inv,
                           const Fp8BlockShape& shape, std::uint64_t row0, std::span<float> out);

/// The largest FP8 scale accepted: 448 (the largest E4M3 magnitude) times it is still finite.
inline constexpr float kMaxFp8Scale = 0x1p119f;

/// Checks a scale matrix before use: every entry finite, > 0 and <= kMaxFp8Scale. The error
/// names the entry.
Status fp8_block_check_scales(std::span<const float> scale_inv, const Fp8BlockShape& shape);

}  // namespace qrepack
