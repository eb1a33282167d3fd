// FP8 block-scaled rows to the engine's int4 groups (reference: int4_encode_row of the decoded
// rows), many rows sharing one row of block scales at a time, without any division per value.
//
// For one block scale bs and group scale s, the reference's code of an E4M3 code c is
// 8 + sign * Q(c & 0x7F), sign that of c times that of bs, Q(m) = rint(e4m3(m) * |bs| / s):
// rounding is symmetric, so negating bs or the code negates the quotient, and |w / s| <= 7
// (s is the group's abs-max over 7, rounded to nearest), so the reference's clamp never acts.
// Q is nondecreasing in m (every step rounds monotonically), so it counts the cuts k = 1..7
// with m >= T_k, T_k the smallest m with Q(m) >= k. The cuts are found by evaluating the
// reference expression on the magnitude codes where they can lie (ComputeCuts); a span is then
// encoded by comparing its magnitude bytes with the cuts, a whole vector of codes per
// comparison.
//
// When each group lies inside one block, s depends only on bs and the group's largest
// magnitude code, so the cuts of a block are kept per largest code. The rows are walked one
// block column at a time (all rows of the column, then the next), so the few largest codes of
// a column share their cuts. Groups across blocks (int4 per row) and groups narrower than a
// vector of codes take fp8_to_int4_row.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fp8_int4_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "kernels/common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// |e4m3(m)| for m = 0..127, the NaN code 127 taking 126's value so the table stays monotone.
constexpr std::array<float, 128> kE4m3Magnitudes = [] {
  std::array<float, 128> t{};
  for (std::uint32_t m = 0; m < 128; ++m) {
    const std::uint32_t c = m == 127 ? 126 : m;
    t[m] = c < 8 ? static_cast<float>(c) * 0x1p-9f : std::bit_cast<float>((c + (120u << 3)) << 20);
  }
  return t;
}();

// below[k - 1] = T_k - 1: |Q(m)| >= k exactly when m > below[k - 1] (-1: every m, 127: none).
struct Int4Cuts {
  std::int8_t below[7];
};

// Q(m) = rint(e4m3(m) * |bs| / s) as the reference computes it.
inline float Quotient(std::size_t m, float abs_bs, float s) {
  return std::nearbyint(kE4m3Magnitudes[m] * abs_bs / s);
}

// The cuts from Q over the magnitude codes [lo, lo + count) (count a multiple of 16), when
// Q(lo) is 0 or lo is 0: T_k = lo + the number of them with Q < k.
Int4Cuts CutsOver(float abs_bs, float s, std::size_t lo, std::size_t count) {
  int below_k[7];
  for (int& b : below_k) b = static_cast<int>(lo) - 1;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  for (std::size_t m = lo; m < lo + count; m += hn::Lanes(df)) {
    const auto w = hn::Mul(hn::LoadU(df, kE4m3Magnitudes.data() + m), hn::Set(df, abs_bs));
    const auto q = hn::Round(hn::Div(w, hn::Set(df, s)));
    for (int k = 0; k < 7; ++k) {
      below_k[k] +=
          static_cast<int>(hn::CountTrue(df, hn::Lt(q, hn::Set(df, static_cast<float>(k + 1)))));
    }
  }
#else
  for (std::size_t m = lo; m < lo + count; ++m) {
    const float q = Quotient(m, abs_bs, s);
    for (int k = 0; k < 7; ++k) below_k[k] += q < static_cast<float>(k + 1);
  }
#endif
  Int4Cuts cuts;
  for (int k = 0; k < 7; ++k) cuts.below[k] = static_cast<std::int8_t>(below_k[k]);
  return cuts;
}

// The cuts for groups whose largest magnitude code is m_max (codes above it do not occur).
// Every cut lies within the 48 codes up to m_max: Q(m_max) <= 7, a code 47 steps lower is at
// most 2^-5.6 of its value (2^-5.2 among subnormal codes), and s is at least the group's
// abs-max over 7, so that code's quotient is at most 0.19 and rounds to 0. Should Q there not
// be 0 all the same, all 128 codes are evaluated.
constexpr std::size_t kCutWindow = 48;

Int4Cuts ComputeCuts(float abs_bs, float s, std::uint8_t m_max) {
  const std::size_t lo = m_max >= kCutWindow ? m_max + 1 - kCutWindow : 0;
  if (lo > 0 && Quotient(lo, abs_bs, s) != 0.0f) return CutsOver(abs_bs, s, 0, 128);
  return CutsOver(abs_bs, s, lo, kCutWindow);
}

// The int4 code of one E4M3 code c under the cuts; flip is 0x80 when bs is negative.
inline std::uint8_t CutCode(std::uint8_t c, const Int4Cuts& cuts, std::uint8_t flip) {
  const int m = c & 0x7F;
  int q = 0;
  for (std::int8_t b : cuts.below) q += m > b;
  return static_cast<std::uint8_t>(((c ^ flip) & 0x80) ? 8 - q : 8 + q);
}

#if HWY_TARGET != HWY_SCALAR
// A vector of E4M3 codes as int4 codes 8 + Q or 8 - Q, stored as Lanes/2 bytes at out. below
// holds the cuts, one per vector; flip is 0x80 in every lane when bs is negative.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: each cut passed adds the lane's step (+1, or -1 where the value is negative) under
// the comparison's mask; vpmovwb packs the nibble pairs.
HWY_INLINE void EncodeVector(hn::Vec512<std::int8_t> codes, const hn::Vec512<std::int8_t>* below,
                             hn::Vec512<std::int8_t> flip, std::uint8_t* out) {
  const __m512i c = _mm512_xor_si512(codes.raw, flip.raw);
  const __m512i m = _mm512_and_si512(c, _mm512_set1_epi8(0x7F));
  const __m512i step =
      _mm512_mask_blend_epi8(_mm512_movepi8_mask(c), _mm512_set1_epi8(1), _mm512_set1_epi8(-1));
  __m512i code = _mm512_set1_epi8(8);
  for (int k = 0; k < 7; ++k) {
    code = _mm512_mask_add_epi8(code, _mm512_cmpgt_epi8_mask(m, below[k].raw), code, step);
  }
  const __m512i pairs = _mm512_or_si512(code, _mm512_srli_epi16(code, 4));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
}
// The same from the group's table (BlockCuts::Group::q): the magnitude's offset from lo,
// saturated at 0, indexes three 16-byte lookups (vpshufb), each applied from its first index
// on; then 8 + Q, or 8 - Q where the value is negative.
HWY_INLINE void EncodeVectorByTable(hn::Vec512<std::int8_t> codes, const __m512i* table, __m512i lo,
                                    hn::Vec512<std::int8_t> flip, std::uint8_t* out) {
  const __m512i c = _mm512_xor_si512(codes.raw, flip.raw);
  const __m512i d = _mm512_subs_epu8(_mm512_and_si512(c, _mm512_set1_epi8(0x7F)), lo);
  __m512i q = _mm512_shuffle_epi8(table[0], d);
  q = _mm512_mask_shuffle_epi8(q, _mm512_cmpge_epu8_mask(d, _mm512_set1_epi8(16)), table[1], d);
  q = _mm512_mask_shuffle_epi8(q, _mm512_cmpge_epu8_mask(d, _mm512_set1_epi8(32)), table[2], d);
  const __m512i eight = _mm512_set1_epi8(8);
  const __m512i code =
      _mm512_mask_sub_epi8(_mm512_add_epi8(eight, q), _mm512_movepi8_mask(c), eight, q);
  const __m512i pairs = _mm512_or_si512(code, _mm512_srli_epi16(code, 4));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(pairs));
}
#else
template <class V>
HWY_INLINE void EncodeVector(V codes, const V* below, V flip, std::uint8_t* out) {
  const hn::DFromV<V> d8;
  const auto c = hn::Xor(codes, flip);
  const auto m = hn::And(c, hn::Set(d8, 0x7F));
  auto neg_q = hn::Zero(d8);  // -Q(m): each cut passed adds a mask of -1
  for (int k = 0; k < 7; ++k) neg_q = hn::Add(neg_q, hn::VecFromMask(d8, hn::Gt(m, below[k])));
  const auto negative = hn::BroadcastSignBit(c);               // -1 where w < 0
  const auto t = hn::Sub(hn::Xor(neg_q, negative), negative);  // -Q, or Q where w < 0
  const auto code = hn::Sub(hn::Set(d8, 8), t);                // 8 + Q, or 8 - Q
  const hn::Repartition<std::int16_t, decltype(d8)> d16;
  const hn::Rebind<std::uint8_t, decltype(d16)> du8;
  const auto x = hn::BitCast(d16, code);
  const auto pairs = hn::And(hn::Or(x, hn::ShiftRight<4>(x)), hn::Set(d16, 0xFF));
  hn::StoreU(hn::DemoteTo(du8, pairs), du8, out);
}
#endif
#endif

// Columns [a, b) of a row: codes and out are the row's.
void EncodeSpan(const std::uint8_t* codes, std::size_t a, std::size_t b, const Int4Cuts& cuts,
                std::uint8_t flip, std::uint8_t* out) {
  std::size_t j = a;
  if (j % 2 == 1 && j < b) {
    PutNibble(out, j, CutCode(codes[j], cuts, flip));
    ++j;
  }
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<std::int8_t> d8;
  const std::size_t N = hn::Lanes(d8);
  if (j + N <= b) {
    hn::Vec<decltype(d8)> below[7];
    for (int k = 0; k < 7; ++k) below[k] = hn::Set(d8, cuts.below[k]);
    const auto vflip = hn::Set(d8, static_cast<std::int8_t>(flip));
    for (; j + N <= b; j += N) {
      const auto c = hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(codes + j));
      EncodeVector(c, below, vflip, out + j / 2);
    }
  }
#endif
  for (; j < b; ++j) PutNibble(out, j, CutCode(codes[j], cuts, flip));
}

// The group scale and cuts of each largest magnitude code in one block, computed when first
// asked for: s = max(|e4m3(m) * bs| / 7, 1e-8) (the reference's abs-max over qmax).
class BlockCuts {
 public:
  explicit BlockCuts(float bs) : abs_bs_(std::fabs(bs)) { known_.fill(false); }
  // With `table`, every cut lies in the 48 codes from `lo` (none below it): q[d] is Q(lo + d),
  // and Q of a code below lo is 0.
  struct Group {
    float scale;
    Int4Cuts cuts;
    std::uint8_t lo;
    bool table;
    alignas(16) std::uint8_t q[kCutWindow];
  };
  const Group& of(std::uint8_t m) {
    if (!known_[m]) {
      Group& g = groups_[m];
      g.scale = std::max(kE4m3Magnitudes[m] * abs_bs_ / 7.0f, kMinScale);
      g.cuts = ComputeCuts(abs_bs_, g.scale, m);
      g.lo = static_cast<std::uint8_t>(m >= kCutWindow ? m + 1 - kCutWindow : 0);
      g.table = true;  // codes below lo read q[0]: Q(lo) must be 0 unless none are below
      for (std::int8_t b : g.cuts.below) g.table = g.table && (g.lo == 0 || b >= g.lo);
      for (std::size_t d = 0; d < kCutWindow; ++d) {
        int q = 0;
        for (std::int8_t b : g.cuts.below) q += static_cast<int>(g.lo + d) > b;
        g.q[d] = static_cast<std::uint8_t>(q);
      }
      known_[m] = true;
    }
    return groups_[m];
  }

 private:
  float abs_bs_;
  std::array<bool, 128> known_;
  std::array<Group, 128> groups_;
};

#if HWY_TARGET != HWY_SCALAR
constexpr std::size_t kMaxGroupVectors = 4;

// Rows [0, rows) of columns [c0, c1) in groups of g = v whole vectors (v <= kMaxGroupVectors,
// c1 - c0 a multiple of g; group k0 starts at c0): each group's codes are loaded once, for its
// largest magnitude and its codes.
bool EncodeVectorGroups(const std::uint8_t* codes, std::size_t rows, std::size_t n, std::size_t c0,
                        std::size_t c1, std::size_t k0, std::size_t v, BlockCuts& block,
                        std::uint8_t flip, std::uint8_t* packed, float* scales, std::size_t ng) {
  const hn::ScalableTag<std::int8_t> d8;
  const std::size_t N = hn::Lanes(d8), g = v * N, pb = (n + 1) / 2;
  const auto magnitude = hn::Set(d8, 0x7F), vflip = hn::Set(d8, static_cast<std::int8_t>(flip));
  for (std::size_t i = 0; i < rows; ++i) {
    const auto* row = reinterpret_cast<const std::int8_t*>(codes + i * n);
    float* row_scales = scales + i * ng + k0;
    for (std::size_t a = c0; a < c1; a += g) {
      hn::Vec<decltype(d8)> c[kMaxGroupVectors];
      auto top = hn::Zero(d8);
      for (std::size_t t = 0; t < v; ++t) {
        c[t] = hn::LoadU(d8, row + a + t * N);
        top = hn::Max(top, hn::And(c[t], magnitude));
      }
      const std::uint8_t m = MaxOfBytes(hn::BitCast(hn::RebindToUnsigned<decltype(d8)>(), top));
      if (m == 0x7F) return false;
      const BlockCuts::Group& group = block.of(m);
      *row_scales++ = group.scale;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
      if (group.table) {
        __m512i table[3];
        for (int k = 0; k < 3; ++k) {
          table[k] = _mm512_broadcast_i32x4(
              _mm_load_si128(reinterpret_cast<const __m128i*>(group.q + 16 * k)));
        }
        const __m512i lo = _mm512_set1_epi8(static_cast<char>(group.lo));
        for (std::size_t t = 0; t < v; ++t) {
          EncodeVectorByTable(c[t], table, lo, vflip, packed + i * pb + (a + t * N) / 2);
        }
        continue;
      }
#endif
      hn::Vec<decltype(d8)> below[7];
      for (int k = 0; k < 7; ++k) below[k] = hn::Set(d8, group.cuts.below[k]);
      for (std::size_t t = 0; t < v; ++t) {
        EncodeVector(c[t], below, vflip, packed + i * pb + (a + t * N) / 2);
      }
    }
  }
  return true;
}
#endif

// Rows [0, rows) of columns [c0, c1), one block (scale bs) holding whole groups of g; group
// k0 starts at c0.
bool EncodeBlockColumn(const std::uint8_t* codes, std::size_t rows, std::size_t n, std::size_t c0,
                       std::size_t c1, float bs, std::size_t g, std::size_t k0,
                       std::uint8_t* packed, float* scales) {
  BlockCuts block(bs);
  const std::uint8_t flip = std::signbit(bs) ? 0x80 : 0;
  const std::size_t pb = (n + 1) / 2, ng = (n + g - 1) / g;
#if HWY_TARGET != HWY_SCALAR
  const std::size_t N = hn::Lanes(hn::ScalableTag<std::int8_t>());
  if (g % N == 0 && g / N <= kMaxGroupVectors && (c1 - c0) % g == 0) {
    return EncodeVectorGroups(codes, rows, n, c0, c1, k0, g / N, block, flip, packed, scales, ng);
  }
#endif
  for (std::size_t i = 0; i < rows; ++i) {
    const std::uint8_t* row = codes + i * n;
    float* row_scales = scales + i * ng + k0;
    for (std::size_t a = c0; a < c1; a += g) {
      const std::size_t b = std::min(c1, a + g);
      const std::uint8_t m = MaxMagnitudeCode(row + a, b - a);
      if (m == 0x7F) return false;
      const BlockCuts::Group& group = block.of(m);
      *row_scales++ = group.scale;
      EncodeSpan(row, a, b, group.cuts, flip, packed + i * pb);
    }
  }
  return true;
}

bool Fp8ToInt4Rows(const std::uint8_t* codes, std::size_t rows, std::size_t n, const float* bscales,
                   std::size_t block, std::size_t group, std::uint8_t* packed, float* scales) {
  const std::size_t g = GroupOf(group, n);
#if HWY_TARGET != HWY_SCALAR
  // Groups narrower than a vector of codes would be encoded code by code here; the per-row
  // kernel's f32 lanes are narrower.
  const bool narrow = g < hn::Lanes(hn::ScalableTag<std::int8_t>());
#else
  const bool narrow = false;
#endif
  if ((block % g != 0 && n > block) || narrow) {  // a group across blocks, or narrow: per row
    const std::size_t pb = (n + 1) / 2, ng = (n + g - 1) / g;
    for (std::size_t i = 0; i < rows; ++i) {
      if (!fp8_to_int4_row(codes + i * n, n, bscales, block, group, packed + i * pb,
                           scales + i * ng)) {
        return false;
      }
    }
    return true;
  }
  for (std::size_t c0 = 0; c0 < n; c0 += block) {
    if (!EncodeBlockColumn(codes, rows, n, c0, std::min(n, c0 + block), bscales[c0 / block], g,
                           c0 / g, packed, scales)) {
      return false;
    }
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qrepack::kernels {

HWY_EXPORT(Fp8ToInt4Rows);

bool fp8_to_int4_rows(const std::uint8_t* codes, std::size_t rows, std::size_t n,
                      const float* block_scales, std::size_t block_cols, std::size_t group,
                      std::uint8_t* packed, float* scales) {
  return HWY_DYNAMIC_DISPATCH(Fp8ToInt4Rows)(codes, rows, n, block_scales, block_cols, group,
                                             packed, scales);
}

}  // namespace qrepack::kernels
#endif
