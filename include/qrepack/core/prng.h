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
  /// Standard normal with true Gaussian tails: Marsaglia's polar method over uniforms with 53
  /// random bits, its logarithm computed by exact_log (arithmetic only, no libm), so the stream
  /// is bit-identical on every machine. Draws two normals per accepted pair and returns them in
  /// order.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    for (;;) {
      const double u = 2.0 * unit53() - 1.0, v = 2.0 * unit53() - 1.0;
      const double s = u * u + v * v;
      if (s <= 0.0 || s >= 1.0) continue;
      const double f = __builtin_sqrt(-2.0 * exact_log(s) / s);
      spare_ = v * f;
      has_spare_ = true;
      return u * f;
    }
  }
  /// Uniform in [0, 1) with 53 random bits.
  double unit53() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

  /// Natural logarithm of x > 0 (a finite normal double) using only +, -, *, / and the
  /// exponent: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1) / (m + 1)),
  /// summed to double precision. Correct to about 1 ulp; identical everywhere.
  static double exact_log(double x) {
    int e = 0;
    double m = __builtin_frexp(x, &e);  // [0.5, 1)
    if (m < 0.70710678118654752) {
      m *= 2.0;
      --e;
    }
    const double t = (m - 1.0) / (m + 1.0), t2 = t * t;
    // |t| <= 0.1716, so t2^14 < 1e-21: 14 terms of the odd series, by Horner.
    static constexpr double kInvOdd[14] = {1.0,      1.0 / 3,  1.0 / 5,  1.0 / 7,  1.0 / 9,
                                           1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17, 1.0 / 19,
                                           1.0 / 21, 1.0 / 23, 1.0 / 25, 1.0 / 27};
    double sum = kInvOdd[13];
    for (int k = 12; k >= 0; --k) sum = kInvOdd[k] + t2 * sum;
    sum *= t;
    return 2.0 * sum + e * 0.69314718055994530942;
  }
  /// Approximately standard normal: Irwin-Hall sum of four uniforms, rescaled to unit
  /// variance. Arithmetic only (no libm), so bit-identical everywhere.
  float gauss() {
    const float s = unit() + unit() + unit() + unit() - 2.0f;
    return s * 1.7320508f;  // sqrt(3): the sum has variance 1/3
  }

 private:
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
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
