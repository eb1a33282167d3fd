// Pieces of the E8/IQ3 reference encoder (schemes/e8_iq3.cc) that the SIMD kernel shares: the
// per-block preparation (signs, parity fix, super-scale), the f32 steps whose rounding the
// output depends on, and the packing. Each does exactly the reference encoder's f32 operations
// in its order (docs/formats/e8-iq3.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "qrepack/schemes/e8_iq3.h"

namespace qrepack::e8 {

/// The rotation block of a row with `rem` (> 0) columns left: its lowest set bit, capped at
/// kE8MaxRotation.
std::uint64_t rotation_block(std::uint64_t rem);
/// The signs of a rotation block of b (a power of two), as b values +-1.0f.
const float* rotation_signs(std::uint64_t b);
/// The rotation of one block of b in place: signs, butterflies, division by sqrt(b).
void rotate_block_ref(float* x, std::uint64_t b);

/// The codebook halved, as four coordinate planes, and each entry's squared norm (exact).
struct RefGrid {
  std::array<std::array<float, 256>, 4> g;
  std::array<float, 256> g2;
};
const RefGrid& ref_grid();

/// One super-block after its sign pass: magnitudes, stored signs (parity fixed), the fp16
/// super-scale and its f32 value.
struct Prepared {
  std::array<float, kE8Block> mag;
  std::array<std::uint8_t, kE8Block> neg;
  std::uint16_t d_bits = 0;
  float d = 0.0f;
};

/// numpy's pairwise f32 sum of n values.
float pairwise_sum(const float* a, std::size_t n);
/// Fills p from 256 rotated weights; false when the super-scale overflows fp16.
bool prepare_block(const float* x, Prepared& p);
/// prepare_block's steps: in each group of 8 with an odd count of negatives, the first least
/// magnitude's sign flipped; the super-scale from numpy's pairwise sum of the squares.
void fix_parity(Prepared& p);
bool set_scale(float sum_of_squares, Prepared& p);
/// max(d * (0.5 + code) * 0.5, 1e-20), f32.
inline float code_scale(float d, unsigned code) {
  const float db = d * (0.5f + static_cast<float>(code)) * 0.5f;
  return db < 1e-20f ? 1e-20f : db;  // np.maximum(db, 1e-20)
}
/// m . g_j as the reference BLAS computes it: ((m0 g0 + m1 g1) + m2 g2) + m3 g3, no fusing
/// (the files using it are built with -ffp-contract=off).
inline float dot_blas(const float* m, const RefGrid& g, std::size_t j) {
  float s = m[0] * g.g[0][j];
  s = s + m[1] * g.g[1][j];
  s = s + m[2] * g.g[2][j];
  return s + m[3] * g.g[3][j];
}
/// One group's share of a code's error: (db * db) * |g|^2 - (2 * db) * (m . g).
inline float group_term(float db, float g2, float a) {
  const float db2 = db * db;
  const float twice = 2.0f * db;
  return db2 * g2 - twice * a;
}
/// pairwise_sum of eight values: ((t0 + t1) + (t2 + t3)) + ((t4 + t5) + (t6 + t7)).
inline float sum_of_eight(const float t[8]) {
  return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}
/// Writes sub-block ib's eight indices and its sign/scale word into the block `out`.
void pack_sub_block(const Prepared& p, unsigned ib, const std::uint8_t idx[8], unsigned code,
                    std::uint8_t* out);
/// The reference search of one prepared block: bytes 0..95 of `out` (store_scale writes the rest).
void encode_block_ref(const Prepared& p, std::uint8_t* out);
/// Writes the fp16 super-scale at bytes 96..97.
void store_scale(const Prepared& p, std::uint8_t* out);

}  // namespace qrepack::e8
