// Built with -ffp-contract=off (CMakeLists.txt): s * q + b is two f32 roundings, as specified.
#include "qrepack/formats/mlx_affine.h"

namespace qrepack {

void mlx_affine_decode_row(const std::uint8_t* words, const float* scales, const float* biases,
                           std::uint64_t cols, unsigned bits, std::uint64_t group, float* out) {
  const unsigned per_word = 32 / bits;
  const std::uint32_t mask = (std::uint32_t{1} << bits) - 1;
  for (std::uint64_t w = 0; w < cols / per_word; ++w) {
    const std::uint8_t* b = words + 4 * w;
    const std::uint32_t word =
        static_cast<std::uint32_t>(b[0]) | (static_cast<std::uint32_t>(b[1]) << 8) |
        (static_cast<std::uint32_t>(b[2]) << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
    for (unsigned j = 0; j < per_word; ++j) {
      const std::uint64_t k = w * per_word + j;
      const float q = static_cast<float>((word >> (bits * j)) & mask);
      const float scaled = scales[k / group] * q;
      out[k] = scaled + biases[k / group];
    }
  }
}

}  // namespace qrepack
