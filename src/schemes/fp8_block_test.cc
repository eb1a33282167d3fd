#include "qrepack/schemes/fp8_block.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qrepack/formats/fp8.h"

namespace qrepack {
namespace {

// 3x3 matrix, 2x2 blocks: four blocks, three of them cropped at the edges.
TEST(Fp8Block, HandDerivedBlocksWithEdgeCropping) {
  const std::vector<float> w = {1.0f, -2.0f, 4.48f,  //
                                0.5f, 0.25f, 0.0f,   //
                                0.0f, 0.0f,  -8.96f};
  const Fp8BlockShape s{3, 3, 2, 2};
  ASSERT_EQ(s.scale_rows(), 2u);
  ASSERT_EQ(s.scale_cols(), 2u);
  std::vector<std::uint8_t> q(9);
  std::vector<float> scale(4);
  fp8_block_encode(w, s, q, scale);
  // Scales: amax / 448 per block; the all-zero block (rows 2, cols 0-1) gets 1.
  EXPECT_EQ(scale[0], 2.0f / 448.0f);
  EXPECT_EQ(scale[1], 4.48f / 448.0f);
  EXPECT_EQ(scale[2], 1.0f);
  EXPECT_EQ(scale[3], 8.96f / 448.0f);
  // Block (0,0): w/s = 224, -448, 112, 56 -> 0x76, 0xFE, 0x6E, 0x66.
  EXPECT_EQ(q[0], 0x76);
  EXPECT_EQ(q[1], 0xFE);
  EXPECT_EQ(q[3], 0x6E);
  EXPECT_EQ(q[4], 0x66);
  // Block (0,1): 4.48 / 0.01 = 448 -> 0x7E; 0 -> 0x00. Block (1,1): -448 -> 0xFE.
  EXPECT_EQ(q[2], 0x7E);
  EXPECT_EQ(q[5], 0x00);
  EXPECT_EQ(q[6], 0x00);
  EXPECT_EQ(q[7], 0x00);
  EXPECT_EQ(q[8], 0xFE);

  // Decoding rows 1..2 alone uses the right scale rows.
  std::vector<float> out(6);
  fp8_block_decode_rows(std::span(q).subspan(3), scale, s, 1, out);
  EXPECT_EQ(out[0], e4m3_decode(0x6E) * scale[0]);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[5], e4m3_decode(0xFE) * scale[3]);
  EXPECT_NEAR(out[0], 0.5f, 1e-6f);
  EXPECT_NEAR(out[5], -8.96f, 1e-5f);
}

TEST(Fp8Block, RoundTripErrorIsBoundedByE4m3Precision) {
  const Fp8BlockShape s{300, 200};  // scale [3, 2] with edge blocks
  std::vector<float> w(300 * 200);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = std::sin(static_cast<float>(i) * 0.37f) * (1.0f + static_cast<float>(i % 7));
  }
  std::vector<std::uint8_t> q(w.size());
  std::vector<float> scale(6);
  fp8_block_encode(w, s, q, scale);
  std::vector<float> back(w.size());
  fp8_block_decode_rows(q, scale, s, 0, back);
  for (std::size_t i = 0; i < w.size(); ++i) {
    // E4M3 has 3 mantissa bits: relative error <= 2^-4 for normal codes, plus the subnormal
    // absolute step of 2^-9 * scale.
    const float sc = scale[(i / 200 / 128) * 2 + (i % 200) / 128];
    EXPECT_LE(std::fabs(back[i] - w[i]), std::fabs(w[i]) / 16 + sc * 0.001953125f) << i;
  }
}

TEST(Fp8Block, RejectsNonFiniteZeroAndNegativeScales) {
  const Fp8BlockShape s{256, 128};
  for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(), 0x1.000002p119f, 0x1p127f}) {
    const std::vector<float> scale = {1.0f, bad};
    auto st = fp8_block_check_scales(scale, s);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.error().kind(), ErrorKind::kInvalidScale);
    EXPECT_NE(st.error().message().find("[1, 0]"), std::string::npos);
  }
  EXPECT_TRUE(fp8_block_check_scales(std::vector<float>{1.0f, 0x1p119f}, s).ok());
  EXPECT_TRUE(std::isfinite(e4m3_decode(0x7E) * kMaxFp8Scale));
}

}  // namespace
}  // namespace qrepack
