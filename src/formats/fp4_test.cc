#include "qrepack/formats/fp4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(E2m1, EveryCodeDecodesToTheSpecFormula) {
  for (unsigned c = 0; c < 16; ++c) {
    const int s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
    const double mag = e == 0 ? m * 0.5 : (1 + m / 2.0) * std::ldexp(1.0, e - 1);
    const float got = e2m1_decode(static_cast<std::uint8_t>(c));
    EXPECT_EQ(static_cast<double>(got), s ? -mag : mag) << c;
    EXPECT_EQ(std::signbit(got), s == 1) << c;
  }
}

TEST(E2m1, DecodeThenEncodeIsIdentity) {
  for (unsigned c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_encode(e2m1_decode(static_cast<std::uint8_t>(c))), c) << c;
  }
}

TEST(E2m1, EveryMidpointRoundsToTheEvenCode) {
  for (unsigned c = 0; c < 7; ++c) {
    const float lo = e2m1_decode(static_cast<std::uint8_t>(c));
    const float hi = e2m1_decode(static_cast<std::uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    const unsigned even = c % 2 == 0 ? c : c + 1;
    EXPECT_EQ(e2m1_encode(mid), even) << mid;
    EXPECT_EQ(e2m1_encode(-mid), even | 8) << mid;
    EXPECT_EQ(e2m1_encode(std::nextafter(mid, 0.0f)), c) << mid;
    EXPECT_EQ(e2m1_encode(std::nextafter(mid, 100.0f)), c + 1) << mid;
  }
}

// reference/formats.md §2.3, the RNE column.
TEST(E2m1, WorkedExamplesOfReferenceFormats23) {
  const std::vector<std::pair<float, std::uint8_t>> rows = {
      {0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4},  {3.5f, 0x6},
      {5.0f, 0x6},  {0.26f, 0x1}, {5.5f, 0x7},  {7.0f, 0x7},  {kInf, 0x7},  {-0.1f, 0x8},
      {-0.0f, 0x8}, {-2.5f, 0xC}, {-3.5f, 0xE}, {kNan, 0x7},  {-kInf, 0xF},
  };
  for (const auto& [x, code] : rows) EXPECT_EQ(e2m1_encode(x), code) << x;
}

TEST(E0m3, EveryCodeDecodesToSignMagnitude) {
  for (unsigned c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -static_cast<float>(c & 7) : static_cast<float>(c & 7);
    EXPECT_EQ(e0m3_decode(static_cast<std::uint8_t>(c)), want) << c;
  }
}

TEST(E0m3, DecodeThenEncodeIsIdentityExceptNegativeZero) {
  for (unsigned c = 0; c < 16; ++c) {
    const unsigned want = c == 8 ? 0 : c;  // -0 is never produced
    EXPECT_EQ(e0m3_encode(e0m3_decode(static_cast<std::uint8_t>(c))), want) << c;
  }
}

// reference/formats.md §2.4 and flashrt_omega.md §2.2: __float2int_rn is half-to-even.
TEST(E0m3, WorkedExamplesOfReferenceFormats24) {
  const std::vector<std::pair<float, std::uint8_t>> rows = {
      {2.5f, 0x2},       {3.5f, 0x4},  {6.5f, 0x6},   {7.6f, 0x7},        {-0.4f, 0x0},
      {-0.5f, 0x0},      {0.5f, 0x0},  {1.5f, 0x2},   {-1.5f, 0xA},       {-2.5f, 0xA},
      {-6.5f, 0xE},      {-7.0f, 0xF}, {100.0f, 0x7}, {-100.0f, 0xF},     {kInf, 0x7},
      {-kInf, 0xF},      {kNan, 0x0},  {-0.0f, 0x0},  {0.49999997f, 0x0}, {0.50000006f, 0x1},
      {7.0000005f, 0x7},
  };
  for (const auto& [v, code] : rows) EXPECT_EQ(e0m3_encode(v), code) << v;
}

TEST(E0m3, EveryHalfIntegerTieGoesToEven) {
  for (int k = 0; k < 7; ++k) {
    const float tie = static_cast<float>(k) + 0.5f;
    const unsigned even = (k % 2 == 0) ? static_cast<unsigned>(k) : static_cast<unsigned>(k + 1);
    EXPECT_EQ(e0m3_encode(tie), even) << tie;
    EXPECT_EQ(e0m3_encode(-tie), even == 0 ? 0u : (8u | even)) << tie;
  }
}

TEST(Fp4Span, SpanVersionsEqualScalar) {
  testing::SplitMix64 rng(17);
  std::vector<float> in = {0.0f, -0.0f, kInf, -kInf, kNan, 0.25f, 2.5f};
  for (int i = 0; i < 20000; ++i) {
    in.push_back(rng.uniform(-9.0f, 9.0f));
    in.push_back(std::bit_cast<float>(rng.next_u32()));
  }
  std::vector<std::uint8_t> out(in.size());
  e2m1_encode_span(in, out);
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], e2m1_encode(in[i]));
  e0m3_encode_span(in, out);
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], e0m3_encode(in[i]));
}

TEST(Nvfp4, DecodesTheWorkedExampleInBothConventions) {
  // reference/formats.md §4.3: codes 7 D 4 1 0 F (6, -3, 2, 0.5, 0, -6), block scale 0x63 = 44.
  const std::uint8_t packed[8] = {0xD7, 0x14, 0xF0, 0, 0, 0, 0, 0};
  const std::uint8_t scale[1] = {0x63};
  float mo[16], ct[16];
  ASSERT_EQ(nvfp4_decode_row(packed, scale, 16, 0.0037202381f, Nvfp4Global::kMultiply, mo), -1);
  ASSERT_EQ(nvfp4_decode_row(packed, scale, 16, 268.8f, Nvfp4Global::kDivide, ct), -1);
  const double want[6] = {0.98214, -0.49107, 0.32738, 0.08185, 0.0, -0.98214};
  for (int k = 0; k < 6; ++k) {
    EXPECT_NEAR(mo[k], want[k], 1e-5) << k;
    EXPECT_NEAR(ct[k], want[k], 1e-5) << k;
  }
  // ModelOpt's order is (e2m1 * block) * global; compressed-tensors' e2m1 * (block / global).
  EXPECT_EQ(mo[0], (6.0f * 44.0f) * 0.0037202381f);
  EXPECT_EQ(ct[1], -3.0f * (44.0f / 268.8f));
  for (int k = 6; k < 16; ++k) EXPECT_EQ(mo[k], 0.0f);
}

TEST(Nvfp4, NegativeAndNanBlockScalesAreReported) {
  const std::uint8_t packed[16] = {};
  float out[32];
  const std::uint8_t neg[2] = {0x38, 0xB8};  // 1.0, -1.0
  EXPECT_EQ(nvfp4_decode_row(packed, neg, 32, 1.0f, Nvfp4Global::kMultiply, out), 1);
  const std::uint8_t nan[2] = {0x7F, 0x38};
  EXPECT_EQ(nvfp4_decode_row(packed, nan, 32, 1.0f, Nvfp4Global::kMultiply, out), 0);
  // An odd tail: 20 columns use two block scales, the second for 4 elements.
  const std::uint8_t odd_packed[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0x21, 0};
  const std::uint8_t two[2] = {0x38, 0x40};  // 1.0, 2.0
  ASSERT_EQ(nvfp4_decode_row(odd_packed, two, 20, 1.0f, Nvfp4Global::kMultiply, out), -1);
  EXPECT_EQ(out[16], 1.0f);  // code 1 (0.5) * 2
  EXPECT_EQ(out[17], 2.0f);  // code 2 (1.0) * 2
}

TEST(Mxfp4, DecodesTheWorkedExample) {
  // docs/formats/source-encodings.md: bytes D7 14 hold e2m1 6, -3, 2, 0.5; exponent 0x7E is
  // 2^-1; the second group's exponent 0x00 is 2^-127 (an f32 subnormal, exact).
  std::uint8_t packed[32] = {0xD7, 0x14};
  packed[16] = 0x07;  // group 2: element 32 is code 7 (6.0)
  const std::uint8_t exps[2] = {0x7E, 0x00};
  float out[64];
  ASSERT_EQ(mxfp4_decode_row(packed, exps, 64, out), -1);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], -1.5f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], 0.25f);
  for (int k = 4; k < 32; ++k) EXPECT_EQ(out[k], 0.0f) << k;
  EXPECT_EQ(out[32], std::ldexp(6.0f, -127));
  const std::uint8_t nan[2] = {0x7F, 0xFF};
  EXPECT_EQ(mxfp4_decode_row(packed, nan, 64, out), 1);
}

}  // namespace
}  // namespace qrepack
