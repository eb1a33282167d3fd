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

Status e0m3_check_k(std::uint64_t k) {
  if (k % 16 != 0) {
    return Error(ErrorKind::kUnexpectedShape,
                 fmt::format("E0M3 needs K to be a multiple of 16, got {}", k))
        .with_rule("e0m3.k_multiple_of_16");
  }
  return ok_status();
}

Status e0m3_quantize_reference(std::span<const std::uint16_t> fp16, std::uint64_t rows,
                               std::uint64_t k, std::span<std::uint8_t> packed,
                               std::span<std::uint8_t> sf) {
  QR_TRY(e0m3_check_k(k));
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

namespace {
constexpr std::uint64_t kMaxRowScales = 1024;  // 16-blocks per kernel call (16384 elements)
}  // namespace

void e0m3_quantize_rows(std::span<const std::uint16_t> fp16, std::span<std::uint8_t> packed,
                        std::uint64_t r0, std::uint64_t k, std::span<std::uint8_t> sf,
                        std::uint64_t rows) {
  QR_CHECK(k > 0 && k % 16 == 0 && fp16.size() % k == 0 && packed.size() == fp16.size() / 2 &&
               r0 + fp16.size() / k <= rows && sf.size() == sf_sm1xx_size(rows, k),
           "e0m3_quantize_rows: rows or buffer sizes");
  const std::uint64_t kb_count = k / 16, count = fp16.size() / k;
  std::uint8_t row_scales[kMaxRowScales];
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint16_t* in = fp16.data() + i * k;
    std::uint8_t* out = packed.data() + i * (k / 2);
    // Rows longer than the stack buffer go through it a slice of whole 16-blocks at a time.
    for (std::uint64_t kb0 = 0; kb0 < kb_count; kb0 += kMaxRowScales) {
      const std::uint64_t kbs = std::min<std::uint64_t>(kMaxRowScales, kb_count - kb0);
      kernels::e0m3_quantize_row(in + kb0 * 16, kbs * 16, out + kb0 * 8, row_scales);
      for (std::uint64_t j = 0; j < kbs; ++j) {
        sf[sf_sm1xx_offset(r0 + i, kb0 + j, kb_count)] = row_scales[j];
      }
    }
  }
}

Status e0m3_quantize(std::span<const std::uint16_t> fp16, std::uint64_t rows, std::uint64_t k,
                     std::span<std::uint8_t> packed, std::span<std::uint8_t> sf) {
  QR_TRY(e0m3_check_k(k));
  QR_CHECK(fp16.size() == rows * k && packed.size() == rows * k / 2, "e0m3_quantize: data size");
  QR_CHECK(sf.size() == sf_sm1xx_size(rows, k), "e0m3_quantize: scale buffer size");
  std::fill(sf.begin(), sf.end(), 0);
  parallel_for(rows, 8, [&](std::size_t r0, std::size_t r1, std::size_t) {
    e0m3_quantize_rows(fp16.subspan(r0 * k, (r1 - r0) * k),
                       packed.subspan(r0 * (k / 2), (r1 - r0) * (k / 2)), r0, k, sf, rows);
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
