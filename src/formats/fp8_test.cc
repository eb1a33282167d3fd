#include "qrepack/formats/fp8.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

constexpr auto kSat = Fp8Overflow::kSaturate;
constexpr auto kNonSat = Fp8Overflow::kNonSaturate;

// Independent of the codec: the OFP8 field formulas evaluated in double.
double e4m3_formula(unsigned c) {
  const int s = (c >> 7) & 1, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag =
      e == 0 ? (m / 8.0) * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -mag : mag;
}

double e5m2_formula(unsigned c) {
  const int s = (c >> 7) & 1, e = (c >> 2) & 31, m = c & 3;
  double mag;
  if (e == 31) {
    mag =
        m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    mag = e == 0 ? (m / 4.0) * std::ldexp(1.0, -14) : (1 + m / 4.0) * std::ldexp(1.0, e - 15);
  }
  return s ? -mag : mag;
}

float f32_from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }

TEST(E4m3, EveryCodeDecodesToTheSpecFormula) {
  for (unsigned c = 0; c < 256; ++c) {
    const double want = e4m3_formula(c);
    const float got = e4m3_decode(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;
    }
  }
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x01), 0.001953125f);
}

TEST(E5m2, EveryCodeDecodesToTheSpecFormula) {
  for (unsigned c = 0; c < 256; ++c) {
    const double want = e5m2_formula(c);
    const float got = e5m2_decode(static_cast<std::uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c;
    }
  }
  EXPECT_EQ(e5m2_decode(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_decode(0x3C), 1.0f);
}

TEST(E4m3, DecodeThenEncodeIsIdentityOnEveryNonNanCode) {
  for (unsigned c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    const float v = e4m3_decode(static_cast<std::uint8_t>(c));
    EXPECT_EQ(e4m3_encode(v, kSat), c) << c;
    EXPECT_EQ(e4m3_encode(v, kNonSat), c) << c;
  }
}

TEST(E5m2, DecodeThenEncodeIsIdentityOnEveryNonNanCode) {
  for (unsigned c = 0; c < 256; ++c) {
    const unsigned mag = c & 0x7F;
    if (mag >= 0x7D) continue;
    const float v = e5m2_decode(static_cast<std::uint8_t>(c));
    EXPECT_EQ(e5m2_encode(v, kNonSat), c) << c;
    if (mag != 0x7C) {
      EXPECT_EQ(e5m2_encode(v, kSat), c) << c;
    }
  }
}

// Midpoint between adjacent finite codes c and c+1 must go to the one with the even mantissa
// (the even code); one ulp either side must go to the nearer code.
void check_midpoints(float (*decode)(std::uint8_t), std::uint8_t (*encode)(float, Fp8Overflow),
                     unsigned max_code) {
  for (unsigned c = 0; c < max_code; ++c) {
    const float lo = decode(static_cast<std::uint8_t>(c));
    const float hi = decode(static_cast<std::uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: few significant bits
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const unsigned even = (c % 2 == 0) ? c : c + 1;
    for (auto policy : {kSat, kNonSat}) {
      EXPECT_EQ(encode(mid, policy), even) << "mid of " << c;
      EXPECT_EQ(encode(-mid, policy), even | 0x80) << "mid of -" << c;
      EXPECT_EQ(encode(std::nextafter(mid, 0.0f), policy), c) << c;
      EXPECT_EQ(encode(std::nextafter(mid, 1e9f), policy), c + 1) << c;
    }
  }
}

TEST(E4m3, EveryMidpointRoundsToTheEvenCode) { check_midpoints(e4m3_decode, e4m3_encode, 0x7E); }
TEST(E5m2, EveryMidpointRoundsToTheEvenCode) { check_midpoints(e5m2_decode, e5m2_encode, 0x7B); }

struct Row {
  float x;
  std::uint8_t sat;
  std::uint8_t nonsat;
};

TEST(E4m3, WorkedExamplesOfReferenceFormats13) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Row> rows = {
      {0.0f, 0x00, 0x00},
      {-0.0f, 0x80, 0x80},
      {1.0625f, 0x38, 0x38},
      {1.1875f, 0x3A, 0x3A},
      {17.0f, 0x58, 0x58},
      {19.0f, 0x5A, 0x5A},
      {248.0f, 0x78, 0x78},
      {272.0f, 0x78, 0x78},
      {432.0f, 0x7E, 0x7E},
      {456.0f, 0x7E, 0x7E},
      {464.0f, 0x7E, 0x7E},
      {f32_from_bits(0x43E80001u), 0x7E, 0x7F},
      {479.0f, 0x7E, 0x7F},
      {480.0f, 0x7E, 0x7F},
      {1e4f, 0x7E, 0x7F},
      {inf, 0x7E, 0x7F},
      {-inf, 0xFE, 0xFF},
      {-464.0f, 0xFE, 0xFE},
      {-465.0f, 0xFE, 0xFF},
      {nan, 0x7F, 0x7F},
      {std::ldexp(1.0f, -9), 0x01, 0x01},
      {std::ldexp(1.0f, -10), 0x00, 0x00},
      {1.5f * std::ldexp(1.0f, -10), 0x01, 0x01},
      {3 * std::ldexp(1.0f, -10), 0x02, 0x02},
      {5 * std::ldexp(1.0f, -10), 0x02, 0x02},
      {0.9375f * std::ldexp(1.0f, -6), 0x08, 0x08},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(e4m3_encode(r.x, kSat), r.sat) << r.x;
    EXPECT_EQ(e4m3_encode(r.x, kNonSat), r.nonsat) << r.x;
  }
  // NaN sign: the saturating (CUDA) path drops it, the non-saturating (torch) path keeps it.
  EXPECT_EQ(e4m3_encode(-nan, kSat), 0x7F);
  EXPECT_EQ(e4m3_encode(-nan, kNonSat), 0xFF);
}

TEST(E5m2, WorkedExamplesOfReferenceFormats13) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Row> rows = {
      {1.125f, 0x3C, 0x3C},
      {1.375f, 0x3E, 0x3E},
      {57344.0f, 0x7B, 0x7B},
      {61439.0f, 0x7B, 0x7B},
      {61440.0f, 0x7B, 0x7C},
      {inf, 0x7B, 0x7C},
      {-inf, 0xFB, 0xFC},
      {std::numeric_limits<float>::quiet_NaN(), 0x7F, 0x7F},
      {std::ldexp(1.0f, -16), 0x01, 0x01},
      {std::ldexp(1.0f, -17), 0x00, 0x00},
      {1.5f * std::ldexp(1.0f, -17), 0x01, 0x01},
      {3 * std::ldexp(1.0f, -17), 0x02, 0x02},
  };
  for (const auto& r : rows) {
    EXPECT_EQ(e5m2_encode(r.x, kSat), r.sat) << r.x;
    EXPECT_EQ(e5m2_encode(r.x, kNonSat), r.nonsat) << r.x;
  }
}

// The two policies must agree everywhere except: NaN sign, +-Inf, and finite values beyond the
// rounding boundary (|x| > 464 for E4M3).
TEST(E4m3, SaturateAndNonSaturateDifferExactlyWhereTheSpecSays) {
  testing::SplitMix64 rng(7);
  std::vector<float> xs = {464.0f,  std::nextafter(464.0f, 1e9f),   448.0f,
                           -464.0f, std::nextafter(-464.0f, -1e9f), 3.4e38f};
  for (int i = 0; i < 200000; ++i) {
    // Random magnitudes across the whole f32 range plus a dense band around the boundary.
    xs.push_back(std::bit_cast<float>(rng.next_u32()));
    xs.push_back(rng.uniform(-600.0f, 600.0f));
  }
  for (float x : xs) {
    const auto s = e4m3_encode(x, kSat);
    const auto n = e4m3_encode(x, kNonSat);
    if (std::isnan(x)) continue;
    const bool beyond = std::isinf(x) || std::fabs(x) > 464.0f;
    if (beyond) {
      EXPECT_EQ(s, std::signbit(x) ? 0xFE : 0x7E) << x;
      EXPECT_EQ(n, std::signbit(x) ? 0xFF : 0x7F) << x;
    } else {
      EXPECT_EQ(s, n) << x;
    }
  }
}

TEST(Ue4m3, WorkedExamplesOfReferenceFormats21) {
  EXPECT_EQ(ue4m3_encode(44.8f), 0x63);
  EXPECT_EQ(ue4m3_decode(0x63), 44.0f);
  EXPECT_EQ(ue4m3_encode(0.5f), 0x30);
  EXPECT_EQ(ue4m3_encode(1.0f), 0x38);
  EXPECT_EQ(ue4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(ue4m3_encode(500.0f), 0x7E);
  EXPECT_EQ(ue4m3_encode(1e-12f), 0x00);
  EXPECT_EQ(ue4m3_encode(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(ue4m3_encode(1.5f * std::ldexp(1.0f, -10)), 0x01);
  EXPECT_EQ(ue4m3_encode(0.001f), 0x01);
}

TEST(Ue4m3, NegativeAndNanInputsClampToZeroAndNeverSetBit7) {
  EXPECT_EQ(ue4m3_encode(-1.0f), 0x00);
  EXPECT_EQ(ue4m3_encode(-0.0f), 0x00);
  EXPECT_EQ(ue4m3_encode(-std::numeric_limits<float>::infinity()), 0x00);
  EXPECT_EQ(ue4m3_encode(std::numeric_limits<float>::quiet_NaN()), 0x00);
  EXPECT_EQ(ue4m3_encode(std::numeric_limits<float>::infinity()), 0x7E);
  testing::SplitMix64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    EXPECT_TRUE(ue4m3_is_valid(ue4m3_encode(std::bit_cast<float>(rng.next_u32()))));
  }
  EXPECT_FALSE(ue4m3_is_valid(0xFE));
}

TEST(Fp8Span, SpanVersionsEqualScalarOnRandomAndEdgeInputs) {
  testing::SplitMix64 rng(11);
  std::vector<float> in = {0.0f,
                           -0.0f,
                           464.0f,
                           -464.0f,
                           61440.0f,
                           std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::ldexp(1.0f, -10)};
  for (int i = 0; i < 50000; ++i) {
    in.push_back(std::bit_cast<float>(rng.next_u32()));
    in.push_back(rng.uniform(-500.0f, 500.0f));
  }
  std::vector<std::uint8_t> out(in.size());
  for (auto policy : {kSat, kNonSat}) {
    e4m3_encode_span(in, out, policy);
    for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], e4m3_encode(in[i], policy));
    e5m2_encode_span(in, out, policy);
    for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], e5m2_encode(in[i], policy));
  }
  std::vector<std::uint8_t> codes(256);
  for (unsigned c = 0; c < 256; ++c) codes[c] = static_cast<std::uint8_t>(c);
  std::vector<float> dec(256);
  e4m3_decode_span(codes, dec);
  for (unsigned c = 0; c < 256; ++c) {
    const float want = e4m3_decode(static_cast<std::uint8_t>(c));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(dec[c]), std::bit_cast<std::uint32_t>(want));
  }
  e5m2_decode_span(codes, dec);
  for (unsigned c = 0; c < 256; ++c) {
    const float want = e5m2_decode(static_cast<std::uint8_t>(c));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(dec[c]), std::bit_cast<std::uint32_t>(want));
  }
}

}  // namespace
}  // namespace qrepack
