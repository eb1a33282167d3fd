// E8/IQ3, the engine's fmt 6 (docs/formats/e8-iq3.md), bit-exact with the engine converter's
// reference encoder (iq3_pack.encode after rotate_rows, f32, Debian numpy with the reference
// BLAS):
//   rotation: each row is multiplied by Q = D H / sqrt(b) per block of the row, blocks being
//     the lowest set bit of what remains (capped at 32768: 6144 -> 2048 + 4096); D's signs are
//     the bits of a xorshift64* stream seeded 417 + b; H the Walsh-Hadamard butterflies, f32.
//   super-block of 256 rotated weights -> 98 bytes: bytes 0..63 one codebook index per 4
//     weights; bytes 64..95 one little-endian u32 per 32 weights (four 7-bit sign words, the
//     8th sign of each 8 implied by even parity of negatives, and the 4-bit sub-scale code in
//     bits 28..31); bytes 96..97 the fp16 super-scale d.
//   value = d * (0.5 + code) * 0.5 * grid[index][k] * sign (grid: the IQ3_XXS codebook halved).
//   The engine's .qs for fmt 6 is the single f32 6.0 (a format tag, not a scale).
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

inline constexpr std::uint64_t kE8Block = 256;          ///< weights per super-block
inline constexpr std::uint64_t kE8BlockBytes = 98;      ///< bytes per super-block
inline constexpr std::uint64_t kE8MaxRotation = 32768;  ///< largest rotation block
inline constexpr float kE8Tag = 6.0f;                   ///< the .qs of an fmt 6 tensor

/// Bytes of one row of `cols` weights (cols % 256 == 0).
constexpr std::uint64_t e8_row_bytes(std::uint64_t cols) { return cols / kE8Block * kE8BlockBytes; }

/// The codebook entry `index` (0..255) as its four halved magnitudes (2, 6, ..., 26, 31).
void e8_grid_entry(unsigned index, float out[4]);

/// W Q on one row, in place (the engine rotates activations with the same transform).
void e8_rotate_row(std::span<float> row);
/// The inverse (W Q) Q^T: the butterflies first, then the signs.
void e8_unrotate_row(std::span<float> row);

/// Encodes one rotated row (size % 256 == 0) into e8_row_bytes(size) bytes: the scalar
/// reference, the specification of the SIMD kernel. False (out unspecified) when a
/// super-block's scale is not finite in fp16 (magnitudes beyond about 1.3e6 RMS).
bool e8_encode_row_ref(std::span<const float> rotated, std::span<std::uint8_t> out);

/// Decodes one row into rotated weights (packed.size() == e8_row_bytes(out.size())):
/// d * (0.5 + code) * 0.5 * grid * sign, exact (every such product has at most 21 significant
/// bits, so any evaluation order gives the same f32).
void e8_decode_row(std::span<const std::uint8_t> packed, std::span<float> out);

}  // namespace qrepack
