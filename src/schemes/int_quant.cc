#include "qrepack/schemes/int_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "qrepack/formats/int4.h"

namespace qrepack {
namespace {

float group_scale(std::span<const float> w, float qmax) {
  float amax = 0.0f;
  for (float v : w) amax = std::max(amax, std::fabs(v));
  return std::max(amax / qmax, kMinIntScale);
}

// rint under the default rounding mode (half to even), then the clamp.
int quantize(float w, float s, int lo, int hi) {
  const float r = std::nearbyint(w / s);
  if (!(r >= static_cast<float>(lo))) return lo;  // NaN cannot occur: weights are checked finite
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

}  // namespace

void int4_encode_row(std::span<const float> w, std::uint64_t group, std::span<std::uint8_t> packed,
                     std::span<float> scales, int qmax) {
  const std::size_t n = w.size();
  const std::size_t g = (group == 0 || group > n) ? std::max<std::size_t>(n, 1) : group;
  QR_CHECK(packed.size() == (n + 1) / 2, "int4_encode_row: packed size");
  QR_CHECK(scales.size() == (n + g - 1) / g, "int4_encode_row: scales size");
  std::vector<std::uint8_t> codes(n);
  for (std::size_t k = 0; k < scales.size(); ++k) {
    const std::size_t c0 = k * g, c1 = std::min(n, c0 + g);
    const float s = group_scale(w.subspan(c0, c1 - c0), static_cast<float>(qmax));
    scales[k] = s;
    for (std::size_t c = c0; c < c1; ++c) codes[c] = int4_encode(quantize(w[c], s, -8, qmax));
  }
  pack_nibbles(codes, packed);
}

float int8_encode_row(std::span<const float> w, std::span<std::uint8_t> out) {
  QR_CHECK(out.size() == w.size(), "int8_encode_row: size");
  const float s = group_scale(w, 127.0f);
  for (std::size_t c = 0; c < w.size(); ++c) {
    out[c] = static_cast<std::uint8_t>(quantize(w[c], s, -128, 127) & 0xFF);
  }
  return s;
}

float int2_encode_row(std::span<const float> w, std::span<std::uint8_t> packed) {
  QR_CHECK(packed.size() == int2_row_bytes(w.size()), "int2_encode_row: packed size");
  const float s = group_scale(w, 1.0f);
  std::fill(packed.begin(), packed.end(), std::uint8_t{0});
  for (std::size_t e = 0; e < w.size(); ++e) {
    const auto code = static_cast<unsigned>(quantize(w[e], s, -2, 1) + 2);
    packed[e >> 2] = static_cast<std::uint8_t>(packed[e >> 2] | (code << ((e & 3) * 2)));
  }
  return s;
}

void int3_encode_row(std::span<const float> w, std::span<std::uint8_t> packed,
                     std::span<float> scales) {
  const std::size_t n = w.size(), ng = (n + kInt3Group - 1) / kInt3Group;
  QR_CHECK(packed.size() == int3_row_bytes(n) && scales.size() == ng, "int3_encode_row: sizes");
  std::fill(packed.begin(), packed.end(), std::uint8_t{0});
  for (std::size_t g = 0; g < ng; ++g) {
    const std::size_t c0 = g * kInt3Group, len = std::min<std::size_t>(kInt3Group, n - c0);
    const float s = group_scale(w.subspan(c0, len), 3.0f);
    scales[g] = s;
    std::uint8_t* lo = packed.data() + g * kInt3GroupBytes;
    std::uint8_t* hi = lo + 16;
    for (std::size_t k = 0; k < kInt3Group; ++k) {
      const auto code = static_cast<unsigned>(k < len ? quantize(w[c0 + k], s, -4, 3) + 4 : 4);
      lo[k >> 2] = static_cast<std::uint8_t>(lo[k >> 2] | ((code & 3) << ((k & 3) * 2)));
      hi[k >> 3] = static_cast<std::uint8_t>(hi[k >> 3] | (((code >> 2) & 1) << (k & 7)));
    }
  }
}

namespace {

constexpr std::array<float, 16> kInt4Values = {-8, -7, -6, -5, -4, -3, -2, -1,
                                               0,  1,  2,  3,  4,  5,  6,  7};
constexpr std::array<float, 256> make_int8_values() {
  std::array<float, 256> t{};
  for (int b = 0; b < 256; ++b) t[b] = static_cast<float>(b < 128 ? b : b - 256);
  return t;
}
constexpr auto kInt8Values = make_int8_values();

}  // namespace

void int4_decode_row(std::span<const std::uint8_t> packed, std::span<const float> scales,
                     std::uint64_t group, std::span<float> out) {
  const std::size_t n = out.size();
  const std::size_t g = (group == 0 || group > n) ? std::max<std::size_t>(n, 1) : group;
  QR_CHECK(packed.size() == (n + 1) / 2 && scales.size() == (n + g - 1) / g, "int4_decode_row");
  for (std::size_t c = 0; c < n; ++c) {
    out[c] = kInt4Values[nibble_at(packed.data(), c)] * scales[c / g];
  }
}

void int8_decode_row(std::span<const std::uint8_t> bytes, float scale, std::span<float> out) {
  QR_CHECK(bytes.size() == out.size(), "int8_decode_row");
  for (std::size_t c = 0; c < out.size(); ++c) out[c] = kInt8Values[bytes[c]] * scale;
}

void int2_decode_row(std::span<const std::uint8_t> packed, float scale, std::span<float> out) {
  QR_CHECK(packed.size() == int2_row_bytes(out.size()), "int2_decode_row");
  static constexpr std::array<float, 4> kValues = {-2, -1, 0, 1};
  for (std::size_t e = 0; e < out.size(); ++e) {
    out[e] = kValues[(packed[e >> 2] >> ((e & 3) * 2)) & 3] * scale;
  }
}

void int3_decode_row(std::span<const std::uint8_t> packed, std::span<const float> scales,
                     std::span<float> out) {
  const std::size_t n = out.size();
  QR_CHECK(packed.size() == int3_row_bytes(n) && scales.size() == (n + kInt3Group - 1) / kInt3Group,
           "int3_decode_row");
  static constexpr std::array<float, 8> kValues = {-4, -3, -2, -1, 0, 1, 2, 3};
  for (std::size_t c = 0; c < n; ++c) {
    const std::size_t g = c / kInt3Group, k = c % kInt3Group;
    const std::uint8_t* lo = packed.data() + g * kInt3GroupBytes;
    const unsigned code =
        ((lo[k >> 2] >> ((k & 3) * 2)) & 3) | (((lo[16 + (k >> 3)] >> (k & 7)) & 1) << 2);
    out[c] = kValues[code] * scales[g];
  }
}

}  // namespace qrepack
