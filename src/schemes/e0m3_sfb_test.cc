#include "qrepack/schemes/e0m3_sfb.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qrepack/core/prng.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/layouts/sf_sm1xx.h"

namespace qrepack {
namespace {

std::vector<std::uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  f16_encode_span(v, out);
  return out;
}

// Five hand-derived 16-element blocks of one row (K = 80), reference/flashrt_omega.md §2.2.
TEST(E0m3Sfb, HandDerivedBlocks) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row = {
      // A: amax 7 -> d = 1, scale 0x38, inv 1; ties 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 3.5 -> 4, 6.5 ->
      // 6
      7, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f, 6.5f, -7, 0, -0.0f, 1, 2, 3, 4,
      // B: amax 10 -> d = 1.4285715 -> 0x3B (1.375), inv 0.72727; 10 -> 7.27 -> 7 (saturates)
      10, -10, 4.125f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      // C: all zero -> d floored to 1e-12 -> scale 0x00, inv inf, 0 * inf = NaN -> 0
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      // D: amax 0.001 -> scale 0x00, inv inf: nonzero values become +-7, zero stays 0
      0.001f, -0.0005f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      // E: NaN ignored by amax (3.5 -> d 0.5 -> 0x30, inv 2); NaN -> 0; 1.75 * 2 = 3.5 -> 4
      nan, 3.5f, 1.75f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const auto f16 = to_f16(row);
  std::vector<std::uint8_t> packed(40), sf(sf_sm1xx_size(1, 80));
  ASSERT_EQ(sf.size(), 1024u);
  std::fill(sf.begin(), sf.end(), 0xAA);  // must be zeroed by the quantizer
  ASSERT_TRUE(e0m3_quantize(f16, 1, 80, packed, sf).ok());
  const std::vector<std::uint8_t> want = {0x07, 0x22, 0xA0, 0x4A, 0xF6, 0x00, 0x21, 0x43,  // A
                                          0xF7, 0x03, 0,    0,    0,    0,    0,    0,     // B
                                          0,    0,    0,    0,    0,    0,    0,    0,     // C
                                          0xF7, 0,    0,    0,    0,    0,    0,    0,     // D
                                          0x70, 0x04, 0,    0,    0,    0,    0,    0};    // E
  EXPECT_EQ(packed, want);
  EXPECT_EQ(sf[0], 0x38);
  EXPECT_EQ(sf[1], 0x3B);
  EXPECT_EQ(sf[2], 0x00);
  EXPECT_EQ(sf[3], 0x00);
  EXPECT_EQ(sf[512], 0x30);  // the fifth scale column starts the next 512-byte atom
  std::size_t nonzero = 0;
  for (auto b : sf) nonzero += b != 0;
  EXPECT_EQ(nonzero, 3u);  // padding zero, nothing else written
}

TEST(E0m3Sfb, InfinityInputSaturatesTheScale) {
  std::vector<float> row(16, 0.0f);
  row[0] = std::numeric_limits<float>::infinity();
  row[1] = 448.0f * 3;  // 1344 / 448 = 3
  const auto f16 = to_f16(row);
  std::vector<std::uint8_t> packed(8), sf(sf_sm1xx_size(1, 16));
  ASSERT_TRUE(e0m3_quantize(f16, 1, 16, packed, sf).ok());
  EXPECT_EQ(sf[0], 0x7E);
  EXPECT_EQ(packed[0], 0x37);
}

TEST(E0m3Sfb, RejectsKNotMultipleOf16) {
  std::vector<std::uint16_t> f16(24);
  std::vector<std::uint8_t> packed(12), sf(sf_sm1xx_size(1, 24));
  EXPECT_EQ(e0m3_quantize(f16, 1, 24, packed, sf).error().kind(), ErrorKind::kUnexpectedShape);
}

TEST(E0m3Sfb, DecoderReconstructsWithinHalfAScaleStep) {
  const std::uint64_t rows = 130, k = 64;  // rows past one 128-row tile
  SplitMix64 rng(5);
  std::vector<float> x(rows * k);
  for (auto& v : x) v = rng.gauss() * 0.7f;
  const auto f16 = to_f16(x);
  std::vector<std::uint8_t> packed(rows * k / 2), sf(sf_sm1xx_size(rows, k));
  ASSERT_TRUE(e0m3_quantize(f16, rows, k, packed, sf).ok());
  std::vector<float> back(x.size());
  e0m3_dequantize(packed, sf, rows, k, back);
  for (std::uint64_t r = 0; r < rows; ++r) {
    for (std::uint64_t c = 0; c < k; ++c) {
      const float s = ue4m3_decode(sf[sf_sm1xx_offset(r, c / 16, k / 16)]);
      const float v = f16_decode(f16[r * k + c]);
      ASSERT_LE(std::fabs(back[r * k + c] - v), 0.5f * s + 1e-7f) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace qrepack
