// Every SIMD target compiled in and supported by this CPU against the scalar references, bit
// for bit: random inputs, every code of the small formats, ties, tails shorter than a vector,
// NaN / Inf / subnormal inputs.
#include "kernels/kernels.h"

#include <gtest/gtest.h>
#include <hwy/tests/hwy_gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "qrepack/core/prng.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/layouts/sf_sm1xx.h"
#include "qrepack/parallel/parallel_for.h"
#include "qrepack/schemes/e0m3_sfb.h"
#include "qrepack/schemes/int_quant.h"
#include "qrepack/targets/container.h"

namespace qrepack {
namespace {

class Kernels : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Kernels);

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

TEST_P(Kernels, DispatchUsesTheTargetUnderTest) {
  EXPECT_EQ(kernels::active_target(), hwy::TargetName(GetParam()));
}

TEST_P(Kernels, Fp8DecodeScaledMatchesTheTableForEveryCode) {
  SplitMix64 rng(1);
  for (std::size_t block : {128u, 100u, 7u, 1u}) {
    for (std::size_t n : {1000u, 256u, 5u}) {
      std::vector<std::uint8_t> codes(n);
      for (std::size_t i = 0; i < n; ++i) {
        codes[i] = static_cast<std::uint8_t>(i < 256 ? i * 97 + 3 : rng.next());
        if ((codes[i] & 0x7F) == 0x7F) codes[i] &= 0xF0;  // NaN codes have their own test
      }
      std::vector<float> scales((n + block - 1) / block);
      for (auto& s : scales)
        s = std::ldexp(rng.uniform(0.5f, 1.0f), static_cast<int>(rng.next() % 40) - 20);
      std::vector<float> out(n);
      ASSERT_TRUE(kernels::fp8_decode_scaled(codes.data(), n, scales.data(), block, out.data()));
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits(out[i]), bits(e4m3_decode(codes[i]) * scales[i / block]))
            << "code " << int(codes[i]) << " at " << i << " block " << block;
      }
    }
  }
}

TEST_P(Kernels, Fp8DecodeScaledReportsNanCodesAnywhere) {
  const std::vector<float> scales(8, 1.0f);
  for (std::size_t pos : {0u, 5u, 63u, 64u, 99u}) {
    for (std::uint8_t nan : {std::uint8_t{0x7F}, std::uint8_t{0xFF}}) {
      std::vector<std::uint8_t> codes(100, 0x38);
      codes[pos] = nan;
      std::vector<float> out(100);
      EXPECT_FALSE(kernels::fp8_decode_scaled(codes.data(), 100, scales.data(), 16, out.data()))
          << pos;
    }
  }
}

TEST_P(Kernels, HalfWidthDecodesAreExactAndFlagNonFinite) {
  std::vector<std::uint16_t> all(65536 + 3);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);
  std::vector<float> out(all.size());
  EXPECT_FALSE(kernels::bf16_to_f32(all.data(), all.size(), out.data()));
  for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(bits(out[i]), bits(bf16_decode(all[i])));
  EXPECT_FALSE(kernels::f16_to_f32(all.data(), all.size(), out.data()));
  for (std::size_t i = 0; i < all.size(); ++i) {
    const float want = f16_decode(all[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(out[i])) << all[i];
    } else {
      ASSERT_EQ(bits(out[i]), bits(want)) << all[i];
    }
  }
  // Finite inputs; then one Inf in the vector body or in the tail.
  for (std::size_t n : {1003u, 37u, 3u}) {
    std::vector<std::uint16_t> fin(n, 0x3F80), half(n, 0x3C00);
    EXPECT_TRUE(kernels::bf16_to_f32(fin.data(), n, out.data()));
    EXPECT_TRUE(kernels::f16_to_f32(half.data(), n, out.data()));
    EXPECT_TRUE(kernels::f32_all_finite(out.data(), n));
    EXPECT_TRUE(kernels::bf16_all_finite(fin.data(), n));
    EXPECT_TRUE(kernels::f16_all_finite(half.data(), n));
    for (std::size_t pos : {std::size_t{0}, n - 1}) {
      auto b = fin, h = half;
      b[pos] = 0x7F80;
      h[pos] = 0xFC00;
      EXPECT_FALSE(kernels::bf16_to_f32(b.data(), n, out.data())) << n << " " << pos;
      EXPECT_FALSE(kernels::f16_to_f32(h.data(), n, out.data())) << n << " " << pos;
      EXPECT_FALSE(kernels::bf16_all_finite(b.data(), n)) << n << " " << pos;
      EXPECT_FALSE(kernels::f16_all_finite(h.data(), n)) << n << " " << pos;
      std::vector<float> f(n, 1.0f);
      f[pos] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_FALSE(kernels::f32_all_finite(f.data(), n)) << n << " " << pos;
    }
  }
}

// Every 16-bit code, in the vector body and in the tail, against the decoded value's class.
TEST_P(Kernels, HalfWidthFinitenessMatchesTheDecodedValueForEveryCode) {
  constexpr std::size_t n = 67;
  std::vector<std::uint16_t> v(n, 0x3C00);
  for (std::uint32_t c = 0; c < 65536; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    for (std::size_t pos : {std::size_t{1}, n - 1}) {
      v.assign(n, 0x3C00);
      v[pos] = code;
      ASSERT_EQ(kernels::f16_all_finite(v.data(), n), std::isfinite(f16_decode(code))) << c;
      ASSERT_EQ(kernels::bf16_all_finite(v.data(), n), std::isfinite(bf16_decode(code))) << c;
    }
  }
}

TEST_P(Kernels, Bf16EncodeMatchesTheReferenceOnEveryKindOfInput) {
  SplitMix64 rng(2);
  std::vector<float> in(1 << 18);
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(rng.next());
    if (i % 4 == 1) b = (b & 0xFFFF0000u) | 0x8000u;  // exact ties
    if (i % 4 == 2)
      b = (b & 0x807FFFFFu) | (rng.next() % 2 ? 0x7F800000u : 0);  // Inf/NaN, subnormal
    in[i] = std::bit_cast<float>(b);
  }
  in.back() = 3.3895314e38f;  // rounds past the largest finite bf16
  std::vector<std::uint16_t> out(in.size());
  kernels::f32_to_bf16(in.data(), in.size() - 1, out.data());  // odd count: a tail
  for (std::size_t i = 0; i + 1 < in.size(); ++i) {
    ASSERT_EQ(out[i], bf16_encode(in[i])) << std::hex << bits(in[i]);
  }
  kernels::f32_to_bf16(in.data() + in.size() - 16, 16, out.data());
  EXPECT_EQ(out[15], bf16_encode(in.back()));
}

TEST_P(Kernels, F16EncodeMatchesTheReferenceOnEveryKindOfInput) {
  SplitMix64 rng(21);
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i)
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng.next())));
  for (int i = 0; i < 20000; ++i) {  // the binary16 range, subnormals included
    x.push_back(
        static_cast<float>(std::ldexp(rng.unit() * 2 - 1, static_cast<int>(rng.next() % 44) - 28)));
  }
  // Ties at the largest finite value, the overflow edge, and the subnormal steps.
  for (float v : {65504.0f, 65519.0f, 65520.0f, 65536.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-24f,
                  0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f, 0x1.002p0f, 0x1.003p0f, -0.0f, 0.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(v);
    x.push_back(-v);
  }
  std::vector<std::uint16_t> got(x.size());
  kernels::f32_to_f16(x.data(), x.size(), got.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(got[i], f16_encode(x[i])) << "x = " << x[i] << " bits " << bits(x[i]);
  }
}

TEST_P(Kernels, E4m3EncodeMatchesTheReferenceBothOverflowModes) {
  SplitMix64 rng(6);
  std::vector<float> in(1 << 18);
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::uint32_t b = static_cast<std::uint32_t>(rng.next());
    switch (i % 5) {
      case 0:  // the E4M3 range and around it: exponents 2^-12 .. 2^10
        b = (b & 0x807FFFFFu) | ((115u + static_cast<std::uint32_t>(rng.next() % 22)) << 23);
        break;
      case 1:  // exact ties of the 3-bit mantissa
        b = (b & 0xFF800000u & 0x83FFFFFFu) | 0x3C000000u | ((b & 0x7u) << 20) | 0x80000u;
        break;
      case 2:
        b = (b & 0x807FFFFFu) | (rng.next() % 2 ? 0x7F800000u : 0);  // Inf/NaN, f32 subnormal
        break;
      default:
        break;  // any bit pattern
    }
    in[i] = std::bit_cast<float>(b);
  }
  in[0] = 464.0f;  // midpoint between 448 and 480: saturates / overflows
  in[1] = -0.0f;
  in[2] = 0x1p-10f;  // a subnormal tie: 0.5 units of 2^-9 -> 0
  for (bool sat : {true, false}) {
    const auto mode = sat ? Fp8Overflow::kSaturate : Fp8Overflow::kNonSaturate;
    for (float div : {1.0f, 0.0078125f, 3.0f}) {
      std::vector<std::uint8_t> out(in.size() - 3);  // not a multiple of the lane count
      kernels::e4m3_encode_div(in.data(), out.size(), div, sat, out.data());
      for (std::size_t i = 0; i < out.size(); ++i) {
        ASSERT_EQ(out[i], e4m3_encode(in[i] / div, mode))
            << std::hex << bits(in[i]) << " div " << div << " sat " << sat;
      }
    }
  }
  std::vector<float> w(1000);
  for (auto& x : w) x = rng.gauss();
  float want = 0;
  for (float x : w) want = std::max(want, std::fabs(x));
  EXPECT_EQ(kernels::abs_max(w.data(), w.size()), want);
  w[997] = -100.0f;  // in the tail for most lane counts
  EXPECT_EQ(kernels::abs_max(w.data(), w.size()), 100.0f);
}

std::vector<float> int_row(SplitMix64& rng, std::size_t n, int kind) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:  // ties: amax 7 gives s = 1 and every k + 0.5 is a tie
        w[i] = i % 9 == 0 ? 7.0f : static_cast<float>(static_cast<int>(rng.next() % 14) - 7) + 0.5f;
        break;
      case 1:
        w[i] = rng.gauss() * 0.05f;
        break;
      default:  // tiny values: the 1e-8 floor
        w[i] = rng.gauss() * 1e-10f;
    }
  }
  return w;
}

TEST_P(Kernels, Int4AndInt8RowsMatchTheEngineReference) {
  SplitMix64 rng(3);
  for (std::size_t n : {1u, 2u, 7u, 16u, 127u, 128u, 129u, 1000u, 7171u}) {
    for (int kind = 0; kind < 3; ++kind) {
      const auto w = int_row(rng, n, kind);
      for (std::size_t g : {0u, 16u, 32u, 48u, 128u, 256u}) {
        const std::size_t gg = (g == 0 || g > n) ? n : g;
        const std::size_t ng = (n + gg - 1) / gg, pb = (n + 1) / 2;
        std::vector<std::uint8_t> want(pb), got(pb, 0xAA);
        std::vector<float> ws(ng), gs(ng);
        int4_encode_row(w, g, want, ws);
        kernels::int4_encode_row(w.data(), n, g, got.data(), gs.data());
        ASSERT_EQ(got, want) << "n " << n << " g " << g << " kind " << kind;
        for (std::size_t i = 0; i < ng; ++i) ASSERT_EQ(bits(gs[i]), bits(ws[i]));
      }
      std::vector<std::uint8_t> want8(n), got8(n);
      const float s8 = int8_encode_row(w, want8);
      EXPECT_EQ(bits(kernels::int8_encode_row(w.data(), n, got8.data())), bits(s8));
      ASSERT_EQ(got8, want8) << "n " << n << " kind " << kind;
    }
  }
}

// The container quantizers (abs_max + int_codes) against their scalar reference, on every rule
// the targets use: bits 2..8, per row and grouped (a short last group), both clamps, the
// reciprocal of k3_repack.py, the scale-1 zero group, amax floors; rows of random values, of
// exact ties (x / s = k + 0.5) and with an all-zero group.
TEST_P(Kernels, ContainerQuantizerMatchesItsScalarReference) {
  SplitMix64 rng(11);
  std::vector<QuantRule> rules;
  for (int bits : {2, 3, 4, 5, 8}) {
    for (std::uint64_t group : {0u, 32u, 64u, 48u}) {
      QuantRule r;
      r.bits = bits;
      r.group = group;
      rules.push_back(r);
      r.symmetric = true;
      r.reciprocal = true;
      r.amax_floor = 0.0f;
      r.scale_floor = 1e-20f;
      rules.push_back(r);
      r.symmetric = false;
      r.reciprocal = false;
      r.zero_group_scale_one = true;
      r.scale_floor = 1e-8f;
      rules.push_back(r);
    }
  }
  for (const std::uint64_t cols : {1u, 7u, 64u, 100u, 1000u}) {
    const std::uint64_t rows = 3;
    std::vector<float> x(rows * cols);
    for (auto& v : x) v = static_cast<float>(rng.unit() * 2.0 - 1.0);
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(cols, 64); ++i) x[i] = 0.0f;  // zero
    for (std::uint64_t i = 0; i < cols; ++i) {  // row 2: amax 7/16 and ties k + 0.5 at 1/16
      x[2 * cols + i] = static_cast<float>((static_cast<int>(i % 13) - 6) * 2 + 1) / 32.0f;
    }
    x[2 * cols] = 7.0f / 16.0f;
    for (const QuantRule& r : rules) {
      const std::uint64_t groups =
          (cols + (r.group ? r.group : cols) - 1) / (r.group ? r.group : cols);
      std::vector<std::int8_t> want(x.size()), got(x.size(), 99);
      std::vector<float> ws(rows * groups), gs(rows * groups);
      quantize_rows_reference(x.data(), rows, cols, r, want.data(), ws.data());
      quantize_rows(x.data(), rows, cols, r, got.data(), gs.data());
      ASSERT_EQ(got, want) << "cols " << cols << " bits " << r.bits << " group " << r.group
                           << " reciprocal " << r.reciprocal;
      for (std::size_t i = 0; i < ws.size(); ++i) ASSERT_EQ(bits(gs[i]), bits(ws[i]));
    }
  }
}

// The reference of the fused FP8 kernels: each value decoded by the table and multiplied by
// its block's scale, then the scalar encoders (f32 division).
struct Fp8Expect {
  std::vector<std::uint8_t> packed;
  std::vector<float> scales;
};
Fp8Expect fp8_int4_reference(const std::vector<std::uint8_t>& codes, const std::vector<float>& bs,
                             std::size_t block, std::size_t group) {
  const std::size_t n = codes.size(), g = (group == 0 || group > n) ? n : group;
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = e4m3_decode(codes[i]) * bs[i / block];
  Fp8Expect e{std::vector<std::uint8_t>((n + 1) / 2), std::vector<float>((n + g - 1) / g)};
  int4_encode_row(w, group, e.packed, e.scales);
  return e;
}

void expect_fused_fp8(const std::vector<std::uint8_t>& codes, const std::vector<float>& bs,
                      std::size_t block, std::size_t group, const std::string& what) {
  const std::size_t n = codes.size();
  const Fp8Expect want = fp8_int4_reference(codes, bs, block, group);
  std::vector<std::uint8_t> packed(want.packed.size(), 0xAA);
  std::vector<float> scales(want.scales.size());
  ASSERT_TRUE(kernels::fp8_to_int4_row(codes.data(), n, bs.data(), block, group, packed.data(),
                                       scales.data()))
      << what;
  ASSERT_EQ(packed, want.packed) << what;
  for (std::size_t k = 0; k < scales.size(); ++k) ASSERT_EQ(bits(scales[k]), bits(want.scales[k]));
  std::fill(packed.begin(), packed.end(), std::uint8_t{0xAA});
  std::fill(scales.begin(), scales.end(), -1.0f);
  ASSERT_TRUE(kernels::fp8_to_int4_rows(codes.data(), 1, n, bs.data(), block, group, packed.data(),
                                        scales.data()))
      << what;
  ASSERT_EQ(packed, want.packed) << "rows: " << what;
  for (std::size_t k = 0; k < scales.size(); ++k) ASSERT_EQ(bits(scales[k]), bits(want.scales[k]));
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = e4m3_decode(codes[i]) * bs[i / block];
  std::vector<std::uint8_t> want8(n), got8(n, 0xAA);
  const float s8 = int8_encode_row(w, want8);
  float g8 = 0;
  ASSERT_TRUE(kernels::fp8_to_int8_row(codes.data(), n, bs.data(), block, got8.data(), &g8));
  ASSERT_EQ(got8, want8) << what;
  ASSERT_EQ(bits(g8), bits(s8)) << what;
}

TEST_P(Kernels, FusedFp8RowsMatchDecodeThenEncode) {
  SplitMix64 rng(7);
  for (std::size_t n : {1u, 2u, 7u, 16u, 127u, 128u, 129u, 1000u, 7171u}) {
    for (std::size_t block : {128u, 100u, 7u, 1u}) {
      std::vector<std::uint8_t> codes(n);
      for (auto& c : codes) {
        c = static_cast<std::uint8_t>(rng.next());
        if ((c & 0x7F) == 0x7F) c = static_cast<std::uint8_t>(c & 0x87);  // subnormal, no NaN
      }
      std::vector<float> bs((n + block - 1) / block);
      for (std::size_t i = 0; i < bs.size(); ++i) {
        // Typical, huge (no folding), tiny and zero scales, and negative ones.
        const int kind = static_cast<int>(rng.next() % 6);
        const float m = rng.uniform(0.5f, 1.0f);
        bs[i] = kind == 0   ? std::ldexp(m, 12)
                : kind == 1 ? std::ldexp(m, -120)
                : kind == 2 ? 0.0f
                : kind == 3 ? -std::ldexp(m, -8)
                            : std::ldexp(m, static_cast<int>(rng.next() % 20) - 14);
      }
      for (std::size_t g : {0u, 16u, 37u, 64u, 128u, 256u}) {
        expect_fused_fp8(codes, bs, block, g,
                         "n " + std::to_string(n) + " block " + std::to_string(block) + " g " +
                             std::to_string(g));
      }
    }
  }
}

// Every quotient a block scale can produce: for each largest magnitude code m, a group holds m
// and every code of smaller magnitude in both signs, so every w / s the group can hold is
// divided by the reference and multiplied by the kernel, ties included (scales 2^k * 7/7 give
// s = e4m3(m) * 2^k / 7 exactly when e4m3(m) is 7, where k + 0.5 are exact ties).
TEST_P(Kernels, FusedFp8RowsMatchTheDivisionOnEveryQuotientOfAScale) {
  SplitMix64 rng(8);
  std::vector<float> scales = {1.0f, 0x1p-10f, 0x1p7f, 0x1p8f, 3.0f, 1.0f / 3.0f};
  for (int i = 0; i < 200; ++i) {
    scales.push_back(std::ldexp(rng.uniform(0.5f, 1.0f), static_cast<int>(rng.next() % 30) - 20));
  }
  for (float bs : scales) {
    for (std::uint8_t m = 1; m <= 0x7E; ++m) {
      std::vector<std::uint8_t> codes;
      for (std::uint8_t c = 0; c <= m; ++c) {
        codes.push_back(c);
        codes.push_back(static_cast<std::uint8_t>(c | 0x80));
      }
      codes.resize((codes.size() + 127) / 128 * 128, m);  // whole groups, each holding m
      for (std::size_t g = 128; g < codes.size(); g += 128) codes[g] = m;
      const std::vector<float> bsv((codes.size() + 127) / 128, bs);
      expect_fused_fp8(codes, bsv, 128, 128,
                       "scale " + std::to_string(bs) + " max code " + std::to_string(m));
    }
  }
}

// Many rows sharing one row of block scales (the cut sets are kept per block and largest code,
// so rows repeat them): each row's bytes and scales are its own reference's.
TEST_P(Kernels, FusedFp8RowBlocksMatchDecodeThenEncodePerRow) {
  SplitMix64 rng(9);
  for (std::size_t n : {1u, 7u, 128u, 129u, 1000u}) {
    for (std::size_t block : {128u, 64u, 100u, 7u}) {
      for (std::size_t g : {0u, 16u, 37u, 64u, 128u}) {
        const std::size_t rows = 1 + rng.next() % 150;
        const std::size_t gg = (g == 0 || g > n) ? n : g, ng = (n + gg - 1) / gg;
        const std::size_t pb = (n + 1) / 2;
        std::vector<std::uint8_t> codes(rows * n);
        const int top = 0x40 + static_cast<int>(rng.next() % 0x3F);  // rows' maxima repeat
        for (auto& c : codes) {
          c = static_cast<std::uint8_t>(rng.next() % top | (rng.next() % 2) << 7);
        }
        std::vector<float> bs((n + block - 1) / block);
        for (auto& x : bs) {
          x = std::ldexp(rng.uniform(0.5f, 1.0f), static_cast<int>(rng.next() % 40) - 30);
          if (rng.next() % 4 == 0) x = -x;
        }
        std::vector<std::uint8_t> packed(rows * pb, 0xAA);
        std::vector<float> scales(rows * ng, -1.0f);
        ASSERT_TRUE(kernels::fp8_to_int4_rows(codes.data(), rows, n, bs.data(), block, g,
                                              packed.data(), scales.data()));
        for (std::size_t r = 0; r < rows; ++r) {
          const std::vector<std::uint8_t> row(codes.begin() + r * n, codes.begin() + (r + 1) * n);
          const Fp8Expect want = fp8_int4_reference(row, bs, block, g);
          const std::string what = "n " + std::to_string(n) + " block " + std::to_string(block) +
                                   " g " + std::to_string(g) + " row " + std::to_string(r);
          ASSERT_TRUE(std::equal(want.packed.begin(), want.packed.end(), packed.begin() + r * pb))
              << what;
          for (std::size_t k = 0; k < ng; ++k) {
            ASSERT_EQ(bits(scales[r * ng + k]), bits(want.scales[k])) << what;
          }
        }
      }
    }
  }
}

TEST_P(Kernels, FusedRowsReportNanAndInfCodes) {
  const std::vector<float> bs(8, 1.0f);
  for (std::size_t pos : {0u, 5u, 63u, 64u, 99u}) {
    for (std::uint8_t nan : {std::uint8_t{0x7F}, std::uint8_t{0xFF}}) {
      std::vector<std::uint8_t> codes(100, 0x38), packed(50);
      codes[pos] = nan;
      std::vector<float> scales(8);
      float s8 = 0;
      EXPECT_FALSE(kernels::fp8_to_int4_row(codes.data(), 100, bs.data(), 16, 32, packed.data(),
                                            scales.data()))
          << pos;
      EXPECT_FALSE(kernels::fp8_to_int8_row(codes.data(), 100, bs.data(), 16, codes.data(), &s8));
      std::vector<std::uint8_t> two(codes);  // the NaN in the second of two rows
      two.insert(two.begin(), 100, std::uint8_t{0x38});
      std::vector<std::uint8_t> packed2(100);
      std::vector<float> scales2(16);
      EXPECT_FALSE(kernels::fp8_to_int4_rows(two.data(), 2, 100, bs.data(), 16, 16, packed2.data(),
                                             scales2.data()))
          << pos;
      EXPECT_FALSE(kernels::fp8_to_int4_rows(two.data(), 2, 100, bs.data(), 16, 32, packed2.data(),
                                             scales2.data()))
          << pos;
    }
    for (std::uint16_t bad :
         {std::uint16_t{0x7F80}, std::uint16_t{0xFF80}, std::uint16_t{0x7FC1}}) {
      std::vector<std::uint16_t> h(100, 0x3F80);
      h[pos] = bad;
      std::vector<std::uint8_t> out(100);
      std::vector<float> scales(8);
      float s8 = 0;
      EXPECT_FALSE(kernels::bf16_to_int4_row(h.data(), 100, 32, out.data(), scales.data()));
      EXPECT_FALSE(kernels::bf16_to_int8_row(h.data(), 100, out.data(), &s8));
    }
  }
}

TEST_P(Kernels, FusedBf16RowsMatchDecodeThenEncode) {
  SplitMix64 rng(9);
  for (std::size_t n : {1u, 2u, 7u, 16u, 127u, 128u, 129u, 1000u, 7171u}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> w = kind < 3 ? int_row(rng, n, kind) : std::vector<float>(n);
      std::vector<std::uint16_t> h(n);
      for (std::size_t i = 0; i < n; ++i) {
        // kind 3: any finite bf16 pattern (subnormals, huge values, signed zeros)
        h[i] = kind < 3 ? bf16_encode(w[i]) : static_cast<std::uint16_t>(rng.next() & 0xFF7F);
        w[i] = bf16_decode(h[i]);
      }
      for (std::size_t g : {0u, 16u, 37u, 64u, 128u, 256u}) {
        const std::size_t gg = (g == 0 || g > n) ? n : g;
        std::vector<std::uint8_t> want((n + 1) / 2), got(want.size(), 0xAA);
        std::vector<float> ws((n + gg - 1) / gg), gs(ws.size());
        int4_encode_row(w, g, want, ws);
        ASSERT_TRUE(kernels::bf16_to_int4_row(h.data(), n, g, got.data(), gs.data()));
        ASSERT_EQ(got, want) << "n " << n << " g " << g << " kind " << kind;
        for (std::size_t i = 0; i < ws.size(); ++i) ASSERT_EQ(bits(gs[i]), bits(ws[i]));
      }
      std::vector<std::uint8_t> want8(n), got8(n);
      const float s8 = int8_encode_row(w, want8);
      float g8 = 0;
      ASSERT_TRUE(kernels::bf16_to_int8_row(h.data(), n, got8.data(), &g8));
      ASSERT_EQ(got8, want8) << "n " << n << " kind " << kind;
      EXPECT_EQ(bits(g8), bits(s8));
    }
  }
}

TEST_P(Kernels, E0m3RowMatchesTheReferenceQuantizer) {
  SplitMix64 rng(4);
  const std::size_t k = 65536 + 1024;  // every fp16 code once, then edge blocks
  std::vector<std::uint16_t> h(k);
  for (std::size_t i = 0; i < 65536; ++i) h[i] = static_cast<std::uint16_t>(i * 40503u);
  const float ties[] = {0.5f, 1.5f, 2.5f, 3.5f, 6.5f, 7.0f, -2.5f, -0.5f};
  for (std::size_t i = 65536; i < k; ++i) {
    const std::size_t blk = (i - 65536) / 16;
    switch (blk % 8) {
      case 0:
        h[i] = f16_encode(ties[i % 8]);
        break;  // amax 7: s = 1, ties
      case 1:
        h[i] = 0;
        break;  // all zero
      case 2:
        h[i] = i % 16 ? 0 : f16_encode(1e-5f);
        break;  // scale byte 0
      case 3:
        h[i] = i % 5 ? f16_encode(rng.gauss()) : 0x7E00;
        break;  // NaN inside
      case 4:
        h[i] = i % 16 ? f16_encode(rng.gauss()) : 0xFC00;
        break;  // -Inf: scale 0x7E
      case 5:
        h[i] = f16_encode(rng.gauss() * 60000.0f);
        break;  // large, saturating
      case 6:
        h[i] = static_cast<std::uint16_t>(rng.next() % 0x400);
        break;  // subnormals
      default:
        h[i] = f16_encode(rng.gauss() * 0.01f);
    }
  }
  std::vector<std::uint8_t> want_packed(k / 2), want_sf(sf_sm1xx_size(1, k));
  ASSERT_TRUE(e0m3_quantize_reference(h, 1, k, want_packed, want_sf).ok());
  std::vector<std::uint8_t> packed(k / 2, 0xAA), sb(k / 16, 0xAA);
  kernels::e0m3_quantize_row(h.data(), k, packed.data(), sb.data());
  ASSERT_EQ(packed, want_packed);
  for (std::size_t kb = 0; kb < k / 16; ++kb) {
    ASSERT_EQ(sb[kb], want_sf[sf_sm1xx_offset(0, kb, k / 16)]) << "block " << kb;
  }
}

TEST_P(Kernels, E0m3MatrixIsIdenticalForAnyThreadCount) {
  SplitMix64 rng(5);
  const std::size_t rows = 300, k = 1040;  // padding rows and scale columns
  std::vector<std::uint16_t> h(rows * k);
  for (auto& x : h) x = f16_encode(rng.gauss() * 3.0f);
  std::vector<std::uint8_t> want_p(rows * k / 2), want_sf(sf_sm1xx_size(rows, k));
  ASSERT_TRUE(e0m3_quantize_reference(h, rows, k, want_p, want_sf).ok());
  for (std::size_t threads : {1u, 2u, 3u}) {
    set_thread_count(threads);
    std::vector<std::uint8_t> p(rows * k / 2), sf(sf_sm1xx_size(rows, k), 0xAA);
    ASSERT_TRUE(e0m3_quantize(h, rows, k, p, sf).ok());
    EXPECT_EQ(p, want_p) << threads;
    EXPECT_EQ(sf, want_sf) << threads;
  }
  set_thread_count(0);
}

}  // namespace
}  // namespace qrepack
