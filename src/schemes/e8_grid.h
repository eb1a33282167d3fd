// The E8/IQ3 codebook (docs/formats/e8-iq3.md): the published IQ3_XXS grid, 256 entries of four
// magnitudes from {4, 12, 20, 28, 36, 44, 52, 62}, one byte each (coordinate k in byte k). The
// format halves them: weight units are 2, 6, 10, 14, 18, 22, 26 and 31.
#pragma once

#include <array>
#include <cstdint>

namespace qrepack::e8 {

inline constexpr int kGridSize = 256;
inline constexpr int kLevels = 8;

/// The table as published (doubled magnitudes, byte k = coordinate k).
extern const std::array<std::uint32_t, kGridSize> kGridPacked;

/// Halved magnitude of level l (0..7): 2, 6, 10, 14, 18, 22, 26, 31.
constexpr float level_value(int l) { return l == 7 ? 31.0f : 2.0f + 4.0f * static_cast<float>(l); }

/// Coordinate k (0..3) of entry j, halved, as a level index 0..7.
int grid_level(int j, int k);

}  // namespace qrepack::e8
