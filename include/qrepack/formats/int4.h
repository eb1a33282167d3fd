// Integer element codes and nibble packing.
//   int4 offset binary: q in [-8, 7] stored as the nibble q + 8 (the C engine's convention).
//   int8: q in [-128, 127] stored as its two's-complement byte.
//   Packing: element 2j in the low nibble (bits 3..0) of byte j, element 2j+1 in the high
//   nibble; an odd count leaves the last high nibble 0, as the C engine's converter writes it
//   and whatever the element format (its decoder never reads it). Every scalar encoder packs
//   through these functions (the SIMD kernels are tested byte-equal to them). Spec:
//   docs/formats/int4.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace qrepack {

constexpr std::uint8_t int4_encode(int q) { return static_cast<std::uint8_t>((q + 8) & 0x0F); }
constexpr int int4_decode(std::uint8_t nibble) { return static_cast<int>(nibble & 0x0F) - 8; }
constexpr std::uint8_t int8_encode(int q) { return static_cast<std::uint8_t>(q & 0xFF); }
constexpr int int8_decode(std::uint8_t byte) { return static_cast<std::int8_t>(byte); }

/// Nibble code of zero for offset-binary int4.
inline constexpr std::uint8_t kInt4ZeroNibble = 0x8;

/// One packed byte: `lo` (element 2j) in bits 3..0, `hi` (element 2j+1) in bits 7..4.
constexpr std::uint8_t pack_nibble_pair(std::uint8_t lo, std::uint8_t hi) {
  return static_cast<std::uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
}
/// Nibble `i` of a packed row.
constexpr std::uint8_t nibble_at(const std::uint8_t* packed, std::size_t i) {
  return static_cast<std::uint8_t>((packed[i / 2] >> (4 * (i & 1))) & 0x0F);
}

/// Bytes needed for `count` packed nibbles.
constexpr std::size_t packed_nibble_bytes(std::size_t count) { return (count + 1) / 2; }

/// Packs 4-bit codes (low nibble of each input byte) two per byte; an odd count's last high
/// nibble is 0. `out.size()` must be packed_nibble_bytes(codes.size()).
void pack_nibbles(std::span<const std::uint8_t> codes, std::span<std::uint8_t> out);
/// Inverse of pack_nibbles: `codes.size()` nibbles from `packed`.
void unpack_nibbles(std::span<const std::uint8_t> packed, std::span<std::uint8_t> codes);

}  // namespace qrepack
