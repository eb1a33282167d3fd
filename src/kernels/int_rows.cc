// The engine's int4 and int8 row encoders (references: int4_encode_row, int8_encode_row in
// schemes/int_quant.cc), from f32 rows and fused with the decoding of FP8 block-scaled and bf16
// rows: a group's abs-max comes from its codes (max |code| decodes to max |value|), and the
// values are decoded, quantized and packed in registers, so no f32 row goes through memory.
//
// The quotient w / s is not divided: t = fma(x, m, offset), with x * m the product of the
// decoded value and 1/s in at most three roundings (for FP8, x is the code times 2^-120 and m
// folds the block scale, 2^120 and 1/s). |w / s| <= 128 here, so t - offset is within 2^-14 of
// the f32 division the reference rounds; a vector with a lane within 2^-12 of a tie of rint
// (or not finite) is divided instead, exactly as the reference. kernels_test checks ties,
// every code and scales of every size.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp8.h"
#include "qrepack/formats/int4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/int_rows.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "kernels/common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The code of w with scale s, as the reference: clamp(rint_even(w / s), lo, hi) + offset.
template <int kLo, int kHi, int kOffset>
inline std::uint8_t IntCode(float w, float s) {
  const float r = std::nearbyint(w / s);
  const int q = !(r >= static_cast<float>(kLo)) ? kLo
                : r > static_cast<float>(kHi)   ? kHi
                                                : static_cast<int>(r);
  return static_cast<std::uint8_t>((q + kOffset) & 0xFF);
}

#if HWY_TARGET != HWY_SCALAR
// A value that rounds (to nearest even) to rint(w / s) + offset: fast(j) * vm + offset where
// that rounds as the division would, else the rounded division of exact(j) plus offset.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
template <class DF, class Fast, class Exact>
HWY_INLINE hn::Vec<DF> RintQuotient(DF df, std::size_t j, Fast fast, Exact exact, hn::Vec<DF> vm,
                                    hn::Vec<DF> vs, hn::Vec<DF> voff) {
  const auto t = hn::MulAdd(fast(df, j), vm, voff);
  // vreduceps: t - rint(t) in one instruction (imm 0x08: round to nearest even, no exception).
  const __m512 frac = _mm512_abs_ps(_mm512_reduce_ps(t.raw, 0x08));
  if (HWY_LIKELY(_mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f - 0x1p-12f), _CMP_NLE_UQ) == 0)) {
    return t;
  }
  return hn::Add(hn::Round(hn::Div(exact(df, j), vs)), voff);
}
#else
template <class DF, class Fast, class Exact>
HWY_INLINE hn::Vec<DF> RintQuotient(DF df, std::size_t j, Fast fast, Exact exact, hn::Vec<DF> vm,
                                    hn::Vec<DF> vs, hn::Vec<DF> voff) {
  const auto t = hn::MulAdd(fast(df, j), vm, voff);
  const auto rt = hn::Round(t);
  const auto safe = hn::Le(hn::Abs(hn::Sub(t, rt)), hn::Set(df, 0.5f - 0x1p-12f));
  if (HWY_LIKELY(hn::AllTrue(df, safe))) return rt;
  return hn::Add(hn::Round(hn::Div(exact(df, j), vs)), voff);
}
#endif
#endif

// Encodes columns [a, b) of a row that share one decoding: exact(df, j) gives the values of
// columns [j, j + Lanes), fast(df, j) the same times 1/m (see RintQuotient), value(j) one
// value. kBits 4 writes nibbles, 8 bytes. The reference's clamp is not applied: the scale is
// the group's abs-max over qmax rounded to nearest, so |w / s| <= qmax * (1 + 2^-23) and
// rint(w / s) never passes qmax.
template <int kBits, class Fast, class Exact, class ValueFn>
void EncodeSpan(std::size_t a, std::size_t b, float s, float m, Fast fast, Exact exact,
                ValueFn value, std::uint8_t* out) {
  const auto code = [s](float w) {
    return kBits == 4 ? IntCode<-8, 7, 8>(w, s) : IntCode<-128, 127, 0>(w, s);
  };
  std::size_t j = a;
  if (kBits == 4 && j % 2 == 1 && j < b) {
    PutNibble(out, j, code(value(j)));
    ++j;
  }
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, s), vm = hn::Set(df, m);
  const auto voff = hn::Set(df, kBits == 4 ? 8.0f : 0.0f);
  for (; j + N <= b; j += N) {
    const auto rt = RintQuotient(df, j, fast, exact, vm, vs, voff);
    if constexpr (kBits == 4) {
      StoreInt4(rt, out + j / 2);
    } else {
      StoreInt8(rt, out + j);
    }
  }
#else
  (void)fast;
  (void)exact;
  (void)m;
#endif
  for (; j < b; ++j) {
    if constexpr (kBits == 4) {
      PutNibble(out, j, code(value(j)));
    } else {
      out[j] = code(value(j));
    }
  }
}

float AbsMax(const float* w, std::size_t count) {
  const hn::ScalableTag<float> df;
  const std::size_t N = hn::Lanes(df);
  auto acc = hn::Zero(df);
  std::size_t i = 0;
  for (; i + N <= count; i += N) acc = hn::Max(acc, hn::Abs(hn::LoadU(df, w + i)));
  float amax = hn::GetLane(hn::MaxOfLanes(df, acc));
  for (; i < count; ++i) amax = std::max(amax, std::fabs(w[i]));
  return amax;
}

// Groups are taken kChunk at a time: first every scale and its reciprocal, whose short serial
// computations then overlap, then every group's codes.
constexpr std::size_t kChunk = 64;

// A row of n values in groups of `group` (0: the row): scales[k] = max(amax_k / qmax, 1e-8)
// with amax_k = abs_max(c0, c1, bad), then encode(c0, c1, s, 1 / s). False when bad was set.
template <int kBits, class AbsMaxFn, class EncodeFn>
bool EncodeRowInChunks(std::size_t n, std::size_t group, AbsMaxFn abs_max, EncodeFn encode,
                       float* scales) {
  const std::size_t g = GroupOf(group, n), groups = (n + g - 1) / g;
  const float qmax = kBits == 4 ? 7.0f : 127.0f;
  float recip[kChunk];
  for (std::size_t k0 = 0; k0 < groups; k0 += kChunk) {
    const std::size_t k1 = std::min(groups, k0 + kChunk);
    bool bad = false;
    for (std::size_t k = k0; k < k1; ++k) {
      scales[k] = std::max(abs_max(k * g, std::min(n, k * g + g), bad) / qmax, kMinScale);
      recip[k - k0] = 1.0f / scales[k];
    }
    if (bad) return false;
    for (std::size_t k = k0; k < k1; ++k) {
      encode(k * g, std::min(n, k * g + g), scales[k], recip[k - k0]);
    }
  }
  return true;
}

// ---- f32 rows

template <int kBits>
void EncodeF32Row(const float* w, std::size_t n, std::size_t group, std::uint8_t* out,
                  float* scales) {
  const auto load = [w](auto df, std::size_t j) HWY_ATTR { return hn::LoadU(df, w + j); };
  EncodeRowInChunks<kBits>(
      n, group, [w](std::size_t c0, std::size_t c1, bool&) { return AbsMax(w + c0, c1 - c0); },
      [&](std::size_t c0, std::size_t c1, float s, float r) {
        EncodeSpan<kBits>(
            c0, c1, s, r, load, load, [w](std::size_t j) { return w[j]; }, out);
      },
      scales);
}

void Int4EncodeRow(const float* w, std::size_t n, std::size_t group, std::uint8_t* packed,
                   float* scales) {
  EncodeF32Row<4>(w, n, group, packed, scales);
}

float Int8EncodeRow(const float* w, std::size_t n, std::uint8_t* out) {
  float s = 0;
  EncodeF32Row<8>(w, n, 0, out, &s);
  return s;
}

float AbsMaxExport(const float* x, std::size_t n) { return AbsMax(x, n); }

// ---- FP8 block-scaled rows

// E4M3 codes as f32 times 2^-120, exactly: sign-extended, the code's exponent and mantissa
// land in the f32 exponent's low 4 bits and the mantissa's top 3 (subnormal codes become f32
// subnormals), the sign in bit 31.
template <class DF>
HWY_INLINE hn::Vec<DF> E4m3Times2m120(DF df, const std::uint8_t* codes) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::int8_t, DF> d8;
  const auto c = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(codes)));
  return hn::BitCast(df, hn::And(hn::ShiftLeft<20>(c), hn::Set(di, static_cast<int>(0x87F00000u))));
}

// |e4m3(m)| for a magnitude code m <= 0x7E (ue4m3_decode, inline).
inline float E4m3Magnitude(std::uint8_t m) {
  if (m < 8) return static_cast<float>(m) * 0x1p-9f;
  return std::bit_cast<float>((static_cast<std::uint32_t>(m) + (120u << 3)) << 20);
}

// Columns [a, b) of an FP8 row, all in the block whose scale is bs. The reference value is the
// f32 product e4m3(code) * bs, one rounding; (code * 2^-120) * (bs * 2^120) is the same real
// product, so the same f32, whenever bs * 2^120 is finite; else the exact code is formed first.
template <int kBits>
void Fp8Span(const std::uint8_t* codes, std::size_t a, std::size_t b, float bs, float s, float r,
             std::uint8_t* out) {
  const auto scaled = [=](auto df, std::size_t j) HWY_ATTR {
    return hn::Mul(hn::Mul(E4m3Times2m120(df, codes + j), hn::Set(df, 0x1p120f)), hn::Set(df, bs));
  };
  const auto value = [=](std::size_t j) { return e4m3_decode(codes[j]) * bs; };
  // bs * 2^120 * r: finite unless the group's largest value is far below the block's scale.
  const float folded = std::fabs(bs) < 0x1p8f ? bs * 0x1p120f * r : INFINITY;
  if (std::isfinite(folded)) {
    const auto raw = [=](auto df, std::size_t j) HWY_ATTR { return E4m3Times2m120(df, codes + j); };
    EncodeSpan<kBits>(a, b, s, folded, raw, scaled, value, out);
  } else {
    EncodeSpan<kBits>(a, b, s, r, scaled, scaled, value, out);
  }
}

// Block segments [a, b) of columns [c0, c1): f(a, b, block scale).
template <class F>
void ForEachBlock(std::size_t c0, std::size_t c1, std::size_t block, const float* bscales, F f) {
  for (std::size_t a = c0; a < c1;) {
    const std::size_t b = std::min(c1, (a / block + 1) * block);
    f(a, b, bscales[a / block]);
    a = b;
  }
}

template <int kBits>
bool EncodeFp8Row(const std::uint8_t* codes, std::size_t n, const float* bscales, std::size_t block,
                  std::size_t group, std::uint8_t* out, float* scales) {
  // max |e4m3(c) * bs| is |e4m3(max |c|)| * |bs|: rounding is monotonic and symmetric.
  const auto abs_max = [&](std::size_t c0, std::size_t c1, bool& nan) {
    float amax = 0.0f;
    ForEachBlock(c0, c1, block, bscales, [&](std::size_t a, std::size_t b, float bs) {
      const std::uint8_t m = MaxMagnitudeCode(codes + a, b - a);
      nan |= m == 0x7F;
      amax = std::max(amax, m == 0x7F ? 0.0f : E4m3Magnitude(m) * std::fabs(bs));
    });
    return amax;
  };
  const auto encode = [&](std::size_t c0, std::size_t c1, float s, float r) {
    ForEachBlock(c0, c1, block, bscales, [&](std::size_t a, std::size_t b, float bs) {
      Fp8Span<kBits>(codes, a, b, bs, s, r, out);
    });
  };
  return EncodeRowInChunks<kBits>(n, group, abs_max, encode, scales);
}

bool Fp8ToInt4Row(const std::uint8_t* codes, std::size_t n, const float* bscales, std::size_t block,
                  std::size_t group, std::uint8_t* packed, float* scales) {
  return EncodeFp8Row<4>(codes, n, bscales, block, group, packed, scales);
}

bool Fp8ToInt8Row(const std::uint8_t* codes, std::size_t n, const float* bscales, std::size_t block,
                  std::uint8_t* out, float* scale) {
  return EncodeFp8Row<8>(codes, n, bscales, block, 0, out, scale);
}

// ---- bf16 rows

// max(x & 0x7FFF) over n bf16 codes: the largest magnitude (>= 0x7F80: Inf or NaN).
std::uint16_t MaxMagnitudeBf16(const std::uint16_t* in, std::size_t n) {
  const hn::ScalableTag<std::uint16_t> d16;
  const std::size_t N = hn::Lanes(d16);
  const auto mask = hn::Set(d16, 0x7FFF);
  auto acc = hn::Zero(d16);
  std::size_t i = 0;
  for (; i + N <= n; i += N) acc = hn::Max(acc, hn::And(hn::LoadU(d16, in + i), mask));
  std::uint16_t m = i > 0 ? hn::GetLane(hn::MaxOfLanes(d16, acc)) : 0;
  for (; i < n; ++i) m = std::max<std::uint16_t>(m, in[i] & 0x7FFF);
  return m;
}

template <int kBits>
bool EncodeBf16Row(const std::uint16_t* in, std::size_t n, std::size_t group, std::uint8_t* out,
                   float* scales) {
  const auto abs_max = [in](std::size_t c0, std::size_t c1, bool& bad) {
    const std::uint16_t m = MaxMagnitudeBf16(in + c0, c1 - c0);
    bad |= m >= 0x7F80;
    return m >= 0x7F80 ? 0.0f : bf16_decode(m);
  };
  const auto load = [in](auto df, std::size_t j) HWY_ATTR {
    const hn::RebindToUnsigned<decltype(df)> du;
    const hn::Rebind<std::uint16_t, decltype(df)> d16;
    return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, in + j))));
  };
  const auto encode = [&](std::size_t c0, std::size_t c1, float s, float r) {
    EncodeSpan<kBits>(
        c0, c1, s, r, load, load, [in](std::size_t j) { return bf16_decode(in[j]); }, out);
  };
  return EncodeRowInChunks<kBits>(n, group, abs_max, encode, scales);
}

bool Bf16ToInt4Row(const std::uint16_t* in, std::size_t n, std::size_t group, std::uint8_t* packed,
                   float* scales) {
  return EncodeBf16Row<4>(in, n, group, packed, scales);
}

bool Bf16ToInt8Row(const std::uint16_t* in, std::size_t n, std::uint8_t* out, float* scale) {
  return EncodeBf16Row<8>(in, n, 0, out, scale);
}

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qrepack::kernels {

HWY_EXPORT(Int4EncodeRow);
HWY_EXPORT(Int8EncodeRow);
HWY_EXPORT(AbsMaxExport);
HWY_EXPORT(Fp8ToInt4Row);
HWY_EXPORT(Fp8ToInt8Row);
HWY_EXPORT(Bf16ToInt4Row);
HWY_EXPORT(Bf16ToInt8Row);

void int4_encode_row(const float* w, std::size_t n, std::size_t group, std::uint8_t* packed,
                     float* scales) {
  HWY_DYNAMIC_DISPATCH(Int4EncodeRow)(w, n, group, packed, scales);
}
float int8_encode_row(const float* w, std::size_t n, std::uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(Int8EncodeRow)(w, n, out);
}
float abs_max(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(AbsMaxExport)(x, n); }
bool fp8_to_int4_row(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                     std::size_t block_cols, std::size_t group, std::uint8_t* packed,
                     float* scales) {
  return HWY_DYNAMIC_DISPATCH(Fp8ToInt4Row)(codes, n, block_scales, block_cols, group, packed,
                                            scales);
}
bool fp8_to_int8_row(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                     std::size_t block_cols, std::uint8_t* out, float* scale) {
  return HWY_DYNAMIC_DISPATCH(Fp8ToInt8Row)(codes, n, block_scales, block_cols, out, scale);
}
bool bf16_to_int4_row(const std::uint16_t* in, std::size_t n, std::size_t group,
                      std::uint8_t* packed, float* scales) {
  return HWY_DYNAMIC_DISPATCH(Bf16ToInt4Row)(in, n, group, packed, scales);
}
bool bf16_to_int8_row(const std::uint16_t* in, std::size_t n, std::uint8_t* out, float* scale) {
  return HWY_DYNAMIC_DISPATCH(Bf16ToInt8Row)(in, n, out, scale);
}

}  // namespace qrepack::kernels
#endif
