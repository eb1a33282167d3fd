// SplitMix64: a fully specified generator (same stream on every platform and compiler), used
// for fixtures and tests instead of std:: distributions whose output is implementation-defined.
#pragma once

#include <cstdint>
#include <string_view>

namespace qrepack {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint32_t next_u32() { return static_cast<std::uint32_t>(next() >> 32); }
  /// Uniform in [0, 1) with 24 random bits: exact in f32.
  float unit() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  /// Uniform in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * unit(); }
  /// Approximately standard normal: Irwin-Hall sum of four uniforms, rescaled to unit
  /// variance. Arithmetic only (no libm), so bit-identical everywhere.
  float gauss() {
    const float s = unit() + unit() + unit() + unit() - 2.0f;
    return s * 1.7320508f;  // sqrt(3): the sum has variance 1/3
  }

 private:
  std::uint64_t state_;
};

/// FNV-1a 64-bit hash of a string (stable seeds derived from tensor names).
constexpr std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace qrepack
