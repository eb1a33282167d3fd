#include "qrepack/formats/float16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace qrepack {
namespace {

// IEEE binary16 by its field formula, in double (independent of the codec).
double f16_formula(unsigned c) {
  const int s = (c >> 15) & 1, e = (c >> 10) & 31, m = c & 1023;
  double mag;
  if (e == 31) {
    mag =
        m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    mag = m * std::ldexp(1.0, -24);
  } else {
    mag = (1 + m / 1024.0) * std::ldexp(1.0, e - 15);
  }
  return s ? -mag : mag;
}

TEST(F16, EveryCodeDecodesToTheSpecFormula) {
  for (unsigned c = 0; c < 65536; ++c) {
    const double want = f16_formula(c);
    const float got = f16_decode(static_cast<std::uint16_t>(c));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << c;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << c;
      ASSERT_EQ(std::signbit(got), (c & 0x8000) != 0) << c;
    }
  }
}

TEST(F16, DecodeThenEncodeIsIdentityOnEveryNonNanCode) {
  for (unsigned c = 0; c < 65536; ++c) {
    if ((c & 0x7C00) == 0x7C00 && (c & 0x3FF) != 0) continue;
    ASSERT_EQ(f16_encode(f16_decode(static_cast<std::uint16_t>(c))), c) << c;
  }
}

// Reference rounding: nearest representable f16 magnitude by search over the decoded grid (with
// 65536 standing in for Inf), ties to the even code.
std::uint16_t f16_reference(float x) {
  static const std::vector<double> grid = [] {
    std::vector<double> g;
    for (unsigned c = 0; c < 0x7C00; ++c) g.push_back(f16_formula(c));
    g.push_back(65536.0);  // the code 0x7C00 (Inf) sits where the next binade would start
    return g;
  }();
  const double a = std::fabs(static_cast<double>(x));
  const auto it = std::lower_bound(grid.begin(), grid.end(), a);
  unsigned code;
  if (it == grid.end()) {
    code = 0x7C00;
  } else if (*it == a || it == grid.begin()) {
    code = static_cast<unsigned>(it - grid.begin());
  } else {
    const unsigned hi = static_cast<unsigned>(it - grid.begin());
    const unsigned lo = hi - 1;
    const double dlo = a - grid[lo], dhi = grid[hi] - a;
    code = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  }
  return static_cast<std::uint16_t>((std::signbit(x) ? 0x8000 : 0) | code);
}

TEST(F16, RandomInputsRoundToNearestEven) {
  testing::SplitMix64 rng(5);
  for (int i = 0; i < 300000; ++i) {
    float x = std::bit_cast<float>(rng.next_u32());
    if (i % 2) x = rng.uniform(-70000.0f, 70000.0f) * (i % 3 ? 1.0f : 1e-6f);
    if (std::isnan(x)) continue;
    ASSERT_EQ(f16_encode(x), f16_reference(x)) << x;
  }
}

TEST(F16, MidpointsOverflowAndNan) {
  EXPECT_EQ(f16_encode(65504.0f), 0x7BFF);
  EXPECT_EQ(f16_encode(65519.99f), 0x7BFF);
  EXPECT_EQ(f16_encode(65520.0f), 0x7C00);  // tie with the next binade -> even -> Inf
  EXPECT_EQ(f16_encode(-1e6f), 0xFC00);
  EXPECT_EQ(f16_encode(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f16_encode(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even
  EXPECT_EQ(f16_encode(std::ldexp(1.0f, -25)), 0x0000);             // tie with min subnormal
  EXPECT_EQ(f16_encode(std::ldexp(3.0f, -25)), 0x0002);
  const std::uint16_t n = f16_encode(-std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(n & 0xFE00, 0xFE00);                                           // negative quiet NaN
  const std::uint16_t sn = f16_encode(std::bit_cast<float>(0x7F800001u));  // signalling
  EXPECT_TRUE(std::isnan(f16_decode(sn)));
  EXPECT_EQ(sn & 0x0200, 0x0200);
}

TEST(Bf16, EveryCodeDecodesToTheTopHalfOfF32) {
  for (unsigned c = 0; c < 65536; ++c) {
    const float got = bf16_decode(static_cast<std::uint16_t>(c));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got), c << 16);
  }
}

TEST(Bf16, RandomInputsRoundToNearestEven) {
  testing::SplitMix64 rng(9);
  for (int i = 0; i < 300000; ++i) {
    const std::uint32_t bits = rng.next_u32();
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    const std::uint16_t got = bf16_encode(x);
    // Candidates: truncation and the next code up (in magnitude).
    const std::uint16_t lo = static_cast<std::uint16_t>(bits >> 16);
    const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
    const double a = std::fabs(static_cast<double>(x));
    const double vlo = std::fabs(static_cast<double>(bf16_decode(lo)));
    const double vhi = (hi & 0x7F80) == 0x7F80 ? std::ldexp(1.0, 128)
                                               : std::fabs(static_cast<double>(bf16_decode(hi)));
    std::uint16_t want;
    if (std::isinf(x)) {
      want = lo;
    } else if (a - vlo < vhi - a) {
      want = lo;
    } else if (vhi - a < a - vlo) {
      want = hi;
    } else {
      want = (lo & 1) ? hi : lo;
    }
    ASSERT_EQ(got, want) << std::hex << bits;
  }
}

TEST(Bf16, TiesOverflowAndNan) {
  EXPECT_EQ(bf16_encode(std::bit_cast<float>(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(bf16_encode(std::bit_cast<float>(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(bf16_encode(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // rounds to Inf
  EXPECT_EQ(bf16_encode(-std::numeric_limits<float>::infinity()), 0xFF80);
  const std::uint16_t n = bf16_encode(std::bit_cast<float>(0xFF800001u));  // -sNaN, low payload
  EXPECT_EQ(n & 0xFFC0, 0xFFC0);                                           // -qNaN, not Inf
}

TEST(Float16Span, SpanVersionsEqualScalar) {
  testing::SplitMix64 rng(13);
  std::vector<float> in = {0.0f, -0.0f, 65520.0f, std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 50000; ++i) in.push_back(std::bit_cast<float>(rng.next_u32()));
  std::vector<std::uint16_t> out(in.size());
  std::vector<float> back(in.size());
  bf16_encode_span(in, out);
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], bf16_encode(in[i]));
  bf16_decode_span(out, back);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]),
              std::bit_cast<std::uint32_t>(bf16_decode(out[i])));
  }
  f16_encode_span(in, out);
  for (std::size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], f16_encode(in[i]));
  f16_decode_span(out, back);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]),
              std::bit_cast<std::uint32_t>(f16_decode(out[i])));
  }
}

}  // namespace
}  // namespace qrepack
