#include "qrepack/schemes/e0m3_sfb.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/kernels.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp4.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/formats/int4.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {

Status e0m3_quantize_reference(std::span<const std::uint16_t> fp16, std::uint64_t rows,
                               std::uint64_t k, std::span<std::uint8_t> packed,
                               std::span<std::uint8_t> sf) {
  if (k % 16 != 0) {
    return Error(ErrorKind::kUnexpectedShape,
                 fmt::format("E0M3 needs K to be a multiple of 16, got {}", k))
        .with_rule("e0m3.k_multiple_of_16");
  }
  QR_CHECK(fp16.size() == rows * k && packed.size() == rows * k / 2, "e0m3_quantize: data size");
  QR_CHECK(sf.size() == sf_sm1xx_size(rows, k), "e0m3_quantize: scale buffer size");
  std::fill(sf.begin(), sf.end(), 0);
  const std::uint64_t kb_count = k / 16;
  float v[16];
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t kb = 0; kb < kb_count; ++kb) {
      const std::uint16_t* in = fp16.data() + r * k + kb * 16;
      float amax = 0.0f;
      for (int i = 0; i < 16; ++i) {
        v[i] = f16_decode(in[i]);
        const float a = std::fabs(v[i]);
        if (a > amax) amax = a;  // a NaN never compares greater: ignored, as the kernel does
      }
      float d = amax / 7.0f;
      if (d < 1e-12f) d = 1e-12f;
      const std::uint8_t sbyte = ue4m3_encode(d);
      const float inv = 1.0f / ue4m3_decode(sbyte);  // +inf when the scale byte is 0
      sf[sf_sm1xx_offset(r, kb, kb_count)] = sbyte;
      std::uint8_t* out = packed.data() + r * (k / 2) + kb * 8;
      for (int p = 0; p < 8; ++p) {
        const std::uint8_t lo = e0m3_encode(v[2 * p] * inv);
        const std::uint8_t hi = e0m3_encode(v[2 * p + 1] * inv);
        out[p] = pack_nibble_pair(lo, hi);
      }
    }
  }
  return ok_status();
}

Status e0m3_quantize(std::span<const std::uint16_t> fp16, std::uint64_t rows, std::uint64_t k,
                     std::span<std::uint8_t> packed, std::span<std::uint8_t> sf) {
  if (k % 16 != 0) return e0m3_quantize_reference(fp16, rows, k, packed, sf);  // its error
  QR_CHECK(fp16.size() == rows * k && packed.size() == rows * k / 2, "e0m3_quantize: data size");
  QR_CHECK(sf.size() == sf_sm1xx_size(rows, k), "e0m3_quantize: scale buffer size");
  std::fill(sf.begin(), sf.end(), 0);
  const std::uint64_t kb_count = k / 16;
  parallel_for(rows, 8, [&](std::size_t r0, std::size_t r1, std::size_t) {
    std::vector<std::uint8_t> row_scales(kb_count);
    for (std::size_t r = r0; r < r1; ++r) {
      kernels::e0m3_quantize_row(fp16.data() + r * k, k, packed.data() + r * (k / 2),
                                 row_scales.data());
      for (std::uint64_t kb = 0; kb < kb_count; ++kb) {
        sf[sf_sm1xx_offset(r, kb, kb_count)] = row_scales[kb];
      }
    }
  });
  return ok_status();
}

void e0m3_dequantize(std::span<const std::uint8_t> packed, std::span<const std::uint8_t> sf,
                     std::uint64_t rows, std::uint64_t k, std::span<float> out) {
  QR_CHECK(packed.size() == rows * k / 2 && out.size() == rows * k &&
               sf.size() == sf_sm1xx_size(rows, k),
           "e0m3_dequantize: sizes");
  const std::uint64_t kb_count = k / 16;
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t c = 0; c < k; ++c) {
      const float scale = ue4m3_decode(sf[sf_sm1xx_offset(r, c / 16, kb_count)]);
      out[r * k + c] = e0m3_decode(nibble_at(packed.data() + r * (k / 2), c)) * scale;
    }
  }
}

}  // namespace qrepack
