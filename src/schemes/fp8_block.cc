#include "qrepack/schemes/fp8_block.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/kernels.h"
#include "qrepack/formats/fp8.h"

namespace qrepack {

void fp8_block_encode(std::span<const float> w, const Fp8BlockShape& s, std::span<std::uint8_t> q,
                      std::span<float> scale_inv) {
  QR_CHECK(w.size() == s.rows * s.cols && q.size() == w.size(), "fp8_block_encode: data size");
  QR_CHECK(scale_inv.size() == s.scale_rows() * s.scale_cols(), "fp8_block_encode: scale size");
  const std::uint64_t sc = s.scale_cols();
  std::vector<float> amax(sc);
  for (std::uint64_t br = 0; br < s.scale_rows(); ++br) {
    const std::uint64_t r0 = br * s.block_rows;
    const std::uint64_t r1 = std::min(s.rows, r0 + s.block_rows);
    std::fill(amax.begin(), amax.end(), 0.0f);
    for (std::uint64_t r = r0; r < r1; ++r) {
      const float* row = w.data() + r * s.cols;
      for (std::uint64_t bc = 0; bc < sc; ++bc) {
        const std::uint64_t c0 = bc * s.block_cols, len = std::min(s.block_cols, s.cols - c0);
        amax[bc] = std::max(amax[bc], kernels::abs_max(row + c0, len));
      }
    }
    for (std::uint64_t bc = 0; bc < sc; ++bc) {
      const float scale = amax[bc] / 448.0f;
      scale_inv[br * sc + bc] = scale == 0.0f ? 1.0f : scale;
    }
    for (std::uint64_t r = r0; r < r1; ++r) {
      for (std::uint64_t bc = 0; bc < sc; ++bc) {
        const std::uint64_t c0 = bc * s.block_cols, len = std::min(s.block_cols, s.cols - c0);
        kernels::e4m3_encode_div(w.data() + r * s.cols + c0, len, scale_inv[br * sc + bc], true,
                                 q.data() + r * s.cols + c0);
      }
    }
  }
}

void fp8_block_decode_rows(std::span<const std::uint8_t> q, std::span<const float> scale_inv,
                           const Fp8BlockShape& s, std::uint64_t row0, std::span<float> out) {
  QR_CHECK(q.size() % s.cols == 0 && out.size() == q.size(), "fp8_block_decode_rows: size");
  QR_CHECK(scale_inv.size() == s.scale_rows() * s.scale_cols(), "fp8_block_decode_rows: scale");
  const std::uint64_t n = q.size() / s.cols;
  QR_CHECK(row0 + n <= s.rows, "fp8_block_decode_rows: rows");
  const std::uint64_t sc = s.scale_cols();
  for (std::uint64_t i = 0; i < n; ++i) {
    const float* srow = scale_inv.data() + ((row0 + i) / s.block_rows) * sc;
    const std::uint8_t* in = q.data() + i * s.cols;
    float* o = out.data() + i * s.cols;
    for (std::uint64_t c = 0; c < s.cols; ++c) o[c] = e4m3_decode(in[c]) * srow[c / s.block_cols];
  }
}

Status fp8_block_check_scales(std::span<const float> scale_inv, const Fp8BlockShape& s) {
  const std::uint64_t sc = s.scale_cols();
  for (std::size_t i = 0; i < scale_inv.size(); ++i) {
    const float v = scale_inv[i];
    if (!(v > 0.0f && v <= kMaxFp8Scale)) {
      return Error(ErrorKind::kInvalidScale,
                   fmt::format("scale [{}, {}] is {}; block scales must be finite, positive and "
                               "at most 2^119 (448 times one must be finite)",
                               i / sc, i % sc, v))
          .with_rule("fp8_block.scale_positive");
    }
  }
  return ok_status();
}

}  // namespace qrepack
