// Integer weight quantization, bit-exact with the colibri C engine and its reference converter
// (reference/colibri.md §1.5, §6):
//   per row, or per group of g consecutive input columns (the last group may be shorter):
//   amax = max |w|;  s = max(amax / qmax, 1e-8) in f32;  q = clamp(rint_even(w / s), lo, qmax)
//   with w / s an f32 division.
//   int4: qmax 7, lo -8, nibble q + 8, element 2j in the low nibble, an odd row's last high
//         nibble 0; bytes per row ceil(I/2); scales [O][ceil(I/g)] row-major (g = I per row).
//   int8: qmax 127, lo -128, two's-complement bytes; bytes per row I; one scale per row.
//   int4 with bits 2 (the converter's grouped branch): qmax 1, lo -8, same nibbles.
//   int2 (fmt=3): qmax 1, lo -2, code q + 2, element e in byte e >> 2 at bits (e & 3) * 2, the
//         unused bit pairs of the last byte 0; bytes per row ceil(I/4); one scale per row.
//   int3-g64 (fmt=5): groups of 64, qmax 3, lo -4, code q + 4 (a short last group's missing
//         elements store 4); per group 24 bytes: a 16-byte low plane (element e in byte e >> 2
//         at bits (e & 3) * 2, holding code & 3), then an 8-byte high plane (element e in byte
//         e >> 3 at bit e & 7, holding code >> 2); one scale per group.
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

/// Encodes one row of `w` (I values). `group` is the group size (== I or 0 for per-row).
/// `packed` has ceil(I/2) bytes, `scales` ceil(I/group) floats.
/// `qmax` is 7 (bits 4) or 1 (bits 2); the clamp is [-8, qmax] either way.
void int4_encode_row(std::span<const float> w, std::uint64_t group, std::span<std::uint8_t> packed,
                     std::span<float> scales, int qmax = 7);

/// Encodes one row as per-row int8: `out` has I bytes; returns the scale.
float int8_encode_row(std::span<const float> w, std::span<std::uint8_t> out);

/// int2 per row: `packed` has int2_row_bytes(I) bytes; returns the scale.
float int2_encode_row(std::span<const float> w, std::span<std::uint8_t> packed);
/// int3-g64: `packed` has int3_row_bytes(I) bytes, `scales` ceil(I/64) floats.
void int3_encode_row(std::span<const float> w, std::span<std::uint8_t> packed,
                     std::span<float> scales);

inline constexpr std::uint64_t kInt3Group = 64;       ///< fixed group of int3-g64
inline constexpr std::uint64_t kInt3GroupBytes = 24;  ///< 16-byte low plane + 8-byte high plane
constexpr std::uint64_t int2_row_bytes(std::uint64_t cols) { return (cols + 3) / 4; }
constexpr std::uint64_t int3_row_bytes(std::uint64_t cols) {
  return (cols + kInt3Group - 1) / kInt3Group * kInt3GroupBytes;
}

/// Decoders used by verification. They go through lookup tables of the stored codes and share
/// no code with the encoders.
void int4_decode_row(std::span<const std::uint8_t> packed, std::span<const float> scales,
                     std::uint64_t group, std::span<float> out);
void int8_decode_row(std::span<const std::uint8_t> bytes, float scale, std::span<float> out);
void int2_decode_row(std::span<const std::uint8_t> packed, float scale, std::span<float> out);
void int3_decode_row(std::span<const std::uint8_t> packed, std::span<const float> scales,
                     std::span<float> out);

/// Smallest scale the engine allows (s = max(amax/qmax, kMinIntScale)).
inline constexpr float kMinIntScale = 1e-8f;

}  // namespace qrepack
