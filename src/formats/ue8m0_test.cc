#include "qrepack/formats/ue8m0.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace qrepack {
namespace {

TEST(Ue8m0, EveryCodeDecodesToAPowerOfTwo) {
  for (unsigned c = 0; c < 255; ++c) {
    EXPECT_EQ(static_cast<double>(ue8m0_decode(static_cast<std::uint8_t>(c))),
              std::ldexp(1.0, static_cast<int>(c) - 127))
        << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_decode(0xFF)));
}

TEST(Ue8m0, DecodeThenEncodeIsIdentityInEveryMode) {
  for (unsigned c = 0; c < 255; ++c) {
    const float v = ue8m0_decode(static_cast<std::uint8_t>(c));
    for (auto m : {Ue8m0Rounding::kNearest, Ue8m0Rounding::kTowardZero, Ue8m0Rounding::kUp}) {
      EXPECT_EQ(ue8m0_encode(v, m), c) << c;
    }
  }
}

// reference/formats.md §2.2 table: PyTorch (nearest), CUDA RZ (toward zero), CUDA RP (up).
TEST(Ue8m0, WorkedExamplesOfReferenceFormats22) {
  struct Row {
    float x;
    std::uint8_t nearest, toward_zero, up;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const Row rows[] = {
      {1.0f, 0x7F, 0x7F, 0x7F},       {1.5f, 0x80, 0x7F, 0x80},
      {1.0000001f, 0x7F, 0x7F, 0x80}, {0.75f, 0x7F, 0x7E, 0x7F},
      {3.0f, 0x81, 0x80, 0x81},       {0.0f, 0x00, 0x00, 0x00},
      {-2.0f, 0x80, 0x80, 0x80},      {1.5f * std::ldexp(1.0f, 127), 0xFF, 0xFE, 0xFE},
      {inf, 0xFF, 0xFE, 0xFE},        {std::numeric_limits<float>::quiet_NaN(), 0xFF, 0xFF, 0xFF},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(ue8m0_encode(r.x, Ue8m0Rounding::kNearest), r.nearest) << r.x;
    EXPECT_EQ(ue8m0_encode(r.x, Ue8m0Rounding::kTowardZero), r.toward_zero) << r.x;
    EXPECT_EQ(ue8m0_encode(r.x, Ue8m0Rounding::kUp), r.up) << r.x;
  }
}

TEST(Ue8m0, SpanEqualsScalar) {
  const float in[] = {1.0f, 1.5f, 0.75f, 3.0f, 0.0f, -2.0f, 1e30f, 1e-30f};
  std::uint8_t out[8];
  for (auto m : {Ue8m0Rounding::kNearest, Ue8m0Rounding::kTowardZero, Ue8m0Rounding::kUp}) {
    ue8m0_encode_span(in, out, m);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], ue8m0_encode(in[i], m));
  }
  float back[8];
  ue8m0_decode_span(out, back);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(back[i], ue8m0_decode(out[i]));
}

}  // namespace
}  // namespace qrepack

namespace qrepack {
namespace {

TEST(Ue8m0, F32SubnormalInputsRoundInTheLinearDomain) {
  const float two_m127 = std::ldexp(1.0f, -127);
  EXPECT_EQ(ue8m0_encode(two_m127 * 0.5f, Ue8m0Rounding::kNearest), 0x00);
  EXPECT_EQ(ue8m0_encode(two_m127 * 1.5f, Ue8m0Rounding::kNearest), 0x01);  // tie -> up
  EXPECT_EQ(ue8m0_encode(two_m127 * 1.25f, Ue8m0Rounding::kNearest), 0x00);
  EXPECT_EQ(ue8m0_encode(two_m127 * 1.25f, Ue8m0Rounding::kUp), 0x01);
  EXPECT_EQ(ue8m0_encode(two_m127 * 1.25f, Ue8m0Rounding::kTowardZero), 0x00);
  EXPECT_EQ(ue8m0_encode(two_m127 * 0.5f, Ue8m0Rounding::kUp), 0x00);
}

}  // namespace
}  // namespace qrepack
