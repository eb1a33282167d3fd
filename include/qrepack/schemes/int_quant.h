// Integer weight quantization, bit-exact with the colibri C engine and its reference converter
// (reference/colibri.md §1.5, §6):
//   per row, or per group of g consecutive input columns (the last group may be shorter):
//   amax = max |w|;  s = max(amax / qmax, 1e-8) in f32;  q = clamp(rint_even(w / s), lo, qmax)
//   with w / s an f32 division.
//   int4: qmax 7, lo -8, nibble q + 8, element 2j in the low nibble, an odd row's last high
//         nibble 0; bytes per row ceil(I/2); scales [O][ceil(I/g)] row-major (g = I per row).
//   int8: qmax 127, lo -128, two's-complement bytes; bytes per row I; one scale per row.
#pragma once

#include <cstdint>
#include <span>

namespace qrepack {

/// Encodes one row of `w` (I values). `group` is the group size (== I or 0 for per-row).
/// `packed` has ceil(I/2) bytes, `scales` ceil(I/group) floats.
void int4_encode_row(std::span<const float> w, std::uint64_t group, std::span<std::uint8_t> packed,
                     std::span<float> scales);

/// Encodes one row as per-row int8: `out` has I bytes; returns the scale.
float int8_encode_row(std::span<const float> w, std::span<std::uint8_t> out);

/// Decoders used by verification. They go through lookup tables of the stored codes and share
/// no code with the encoders.
void int4_decode_row(std::span<const std::uint8_t> packed, std::span<const float> scales,
                     std::uint64_t group, std::span<float> out);
void int8_decode_row(std::span<const std::uint8_t> bytes, float scale, std::span<float> out);

/// Smallest scale the engine allows (s = max(amax/qmax, kMinIntScale)).
inline constexpr float kMinIntScale = 1e-8f;

}  // namespace qrepack
