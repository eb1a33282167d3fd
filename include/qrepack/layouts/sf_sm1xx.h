// CUTLASS Sm1xxBlockScaledConfig<V> scale-factor layout (SFA for activations, SFB for weights:
// the same function of (rows, K)); reference/formats.md §3.1-3.2, flashrt_omega.md §2.3.
// A 512-byte atom covers 128 rows x 4 scale columns; atoms are laid K-tile fastest, then
// row-tile:
//   kb = k / V, Kt = ceil(ceil(K/V) / 4)
//   offset(r, kb) = ((r/128)*Kt + kb/4)*512 + (r%32)*16 + ((r%128)/32)*4 + kb%4
//   size = round_up(rows, 128) * round_up(ceil(K/V), 4)
// Padding bytes are never written by quantizers and must be zero.
#pragma once

#include <cstdint>

namespace qrepack {

/// Byte offset of the scale of row `r`, scale column `kb`, for a matrix with `k_blocks` =
/// ceil(K/V) scale columns.
constexpr std::uint64_t sf_sm1xx_offset(std::uint64_t r, std::uint64_t kb, std::uint64_t k_blocks) {
  const std::uint64_t kt = (k_blocks + 3) / 4;
  return ((r / 128) * kt + kb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + kb % 4;
}

/// Bytes of the scale buffer for `rows` x `k` elements with one scale per `v` elements.
constexpr std::uint64_t sf_sm1xx_size(std::uint64_t rows, std::uint64_t k, std::uint64_t v = 16) {
  const std::uint64_t k_blocks = (k + v - 1) / v;
  return ((rows + 127) / 128) * 128 * ((k_blocks + 3) / 4) * 4;
}

}  // namespace qrepack
