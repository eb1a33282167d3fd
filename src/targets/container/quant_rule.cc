// The container targets' symmetric integer quantizers (include/qrepack/targets/container.h).
// Written as the upstream converters compute in torch / numpy on f32: amax of |x| per group,
// scale = max(amax, floor) / qmax as one f32 division, code = x / scale (f32 division)
// rounded half to even and clamped to [-qmax - 1, qmax] (or x times the f32 reciprocal 1 / scale
// where the reference does that: k3_repack.py). No FMA: every step is one correctly rounded IEEE
// operation, as theirs are.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "qrepack/core/checked.h"
#include "qrepack/targets/container.h"

namespace qrepack {

void quantize_rows_reference(const float* x, std::uint64_t n, std::uint64_t cols,
                             const QuantRule& r, std::int8_t* codes, float* scales) {
  const std::uint64_t g = r.group ? r.group : cols;
  const std::uint64_t groups = ceil_div(cols, g);
  const float qmax = static_cast<float>(r.qmax());
  const float lo = r.symmetric ? -qmax : -qmax - 1.0f;
  for (std::uint64_t row = 0; row < n; ++row) {
    const float* xr = x + row * cols;
    std::int8_t* cr = codes + row * cols;
    for (std::uint64_t k = 0; k < groups; ++k) {
      const std::uint64_t a = k * g, b = std::min(cols, a + g);
      float amax = 0.0f;
      for (std::uint64_t i = a; i < b; ++i) amax = std::max(amax, std::fabs(xr[i]));
      float scale = std::max(std::max(amax, r.amax_floor) / qmax, r.scale_floor);
      if (r.zero_group_scale_one && scale == 0.0f) scale = 1.0f;
      scales[row * groups + k] = scale;
      const float inverse = 1.0f / scale;
      for (std::uint64_t i = a; i < b; ++i) {
        const float q = std::nearbyint(r.reciprocal ? xr[i] * inverse : xr[i] / scale);
        cr[i] = static_cast<std::int8_t>(std::clamp(q, lo, qmax));
      }
    }
  }
}

void quantize_rows(const float* x, std::uint64_t n, std::uint64_t cols, const QuantRule& r,
                   std::int8_t* codes, float* scales) {
  const std::uint64_t g = r.group ? r.group : cols;
  const std::uint64_t groups = ceil_div(cols, g);
  const float qmax = static_cast<float>(r.qmax());
  const float lo = r.symmetric ? -qmax : -qmax - 1.0f;
  for (std::uint64_t row = 0; row < n; ++row) {
    const float* xr = x + row * cols;
    for (std::uint64_t k = 0; k < groups; ++k) {
      const std::uint64_t a = k * g, len = std::min(cols, a + g) - a;
      const float amax = kernels::abs_max(xr + a, len);
      float scale = std::max(std::max(amax, r.amax_floor) / qmax, r.scale_floor);
      if (r.zero_group_scale_one && scale == 0.0f) scale = 1.0f;
      scales[row * groups + k] = scale;
      kernels::int_codes(xr + a, len, scale, r.reciprocal, lo, qmax, codes + row * cols + a);
    }
  }
}

namespace {

std::uint8_t nibble(std::int8_t q, Nibbles n) {
  return n == Nibbles::kOffsetBinary ? static_cast<std::uint8_t>((q + 8) & 0xF)
                                     : static_cast<std::uint8_t>(q & 0xF);
}

}  // namespace

void pack_codes(const std::int8_t* codes, std::uint64_t count, const QuantRule& r,
                std::uint8_t* out) {
  if (!r.packed()) {
    std::copy(codes, codes + count, reinterpret_cast<std::int8_t*>(out));
    return;
  }
  // nibble(q) = (q + add) & 0xF: add 8 for offset binary, 0 for two's complement. One loop
  // without a branch per element (the compiler vectorizes it); an odd count's last byte holds
  // code 0's nibble as its pad.
  const int add = r.nibbles == Nibbles::kOffsetBinary ? 8 : 0;
  const std::uint64_t pairs = count / 2;
  for (std::uint64_t k = 0; k < pairs; ++k) {
    const auto lo = static_cast<std::uint8_t>((codes[2 * k] + add) & 0xF);
    const auto hi = static_cast<std::uint8_t>((codes[2 * k + 1] + add) & 0xF);
    out[k] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
  if (count % 2) {
    const auto lo = static_cast<std::uint8_t>((codes[count - 1] + add) & 0xF);
    out[pairs] = static_cast<std::uint8_t>(lo | (nibble(0, r.nibbles) << 4));
  }
}

void pack_codes_planar64(const std::int8_t* codes, std::uint64_t cols, const QuantRule& r,
                         std::uint8_t* out) {
  const std::uint64_t whole = cols / 64 * 64;
  for (std::uint64_t b = 0; b < whole; b += 64) {
    for (std::uint64_t k = 0; k < 32; ++k) {
      out[b / 2 + k] = static_cast<std::uint8_t>(nibble(codes[b + k], r.nibbles) |
                                                 (nibble(codes[b + k + 32], r.nibbles) << 4));
    }
  }
  pack_codes(codes + whole, cols - whole, r, out + whole / 2);
}

std::uint64_t code_bytes(std::uint64_t rows, std::uint64_t cols, const QuantRule& r) {
  if (!r.packed()) return rows * cols;
  return r.byte_rows ? rows * ((cols + 1) / 2) : (rows * cols + 1) / 2;
}

}  // namespace qrepack
