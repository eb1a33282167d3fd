// Highway implementations of kernels.h, compiled once per target by foreach_target.h. Each
// kernel follows its scalar reference operation for operation (same f32 divisions and
// multiplies, RNE conversions); element tails that do not fill a vector use the same scalar
// formulas.
#include "kernels/kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp4.h"
#include "qrepack/formats/fp8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

#include "kernels/common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::uint32_t kF32ExpMask = 0x7F800000u;

// f16 codes at p (Lanes(df) of them) as f32, exactly as f16_decode (Inf and NaN keep their
// payload). AVX2 and better convert with F16C; older targets, whose emulated conversion in
// this Highway version mishandles Inf/NaN, use integer arithmetic (no denormal operations).
template <class DF>
hn::Vec<DF> LoadHalfAsF32(DF df, const std::uint16_t* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint16_t, DF> d16;
  const auto h = hn::PromoteTo(du, hn::LoadU(d16, p));
  const auto em = hn::And(h, hn::Set(du, 0x7FFF));
  const auto sign = hn::BitCast(df, hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000))));
  const auto normal = hn::BitCast(df, hn::Add(hn::ShiftLeft<13>(em), hn::Set(du, 112u << 23)));
  const auto sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, em)), hn::Set(df, 0x1p-24f));
  const auto special = hn::BitCast(df, hn::Or(hn::ShiftLeft<13>(em), hn::Set(du, 0x7F800000u)));
  const auto emi = hn::BitCast(di, em);
  const auto is_sub = hn::RebindMask(df, hn::Lt(emi, hn::Set(di, 0x400)));
  const auto is_special = hn::RebindMask(df, hn::Gt(emi, hn::Set(di, 0x7BFF)));
  const auto mag = hn::IfThenElse(is_sub, sub, hn::IfThenElse(is_special, special, normal));
  return hn::Or(mag, sign);
#endif
}

// Whether any E4M3 code is NaN (0x7F or 0xFF).
bool CodesHaveNan(const std::uint8_t* codes, std::size_t n) {
  return MaxMagnitudeCode(codes, n) == 0x7F;
}

bool Fp8DecodeScaled(const std::uint8_t* codes, std::size_t n, const float* scales,
                     std::size_t block_cols, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto mag_mask = hn::Set(du, 0x7F);
  const auto exp_mask = hn::Set(du, 0x78);
  const auto rebias = hn::Set(du, 120u << 3);
  const auto sub_unit = hn::Set(df, 0x1p-9f);
  for (std::size_t b0 = 0; b0 < n; b0 += block_cols) {
    const std::size_t b1 = std::min(n, b0 + block_cols);
    const float s = scales[b0 / block_cols];
    const auto vs = hn::Set(df, s);
    std::size_t j = b0;
    for (; j + N <= b1; j += N) {
      const auto c = hn::PromoteTo(du, hn::LoadU(d8, codes + j));
      const auto m = hn::And(c, mag_mask);
      // Normal codes: exponent rebased from 7 to 127 in the integer domain; subnormal codes
      // (exponent 0) are m * 2^-9. Both exact, no denormal arithmetic.
      const auto normal = hn::BitCast(df, hn::ShiftLeft<20>(hn::Add(m, rebias)));
      const auto sub = hn::Mul(hn::ConvertTo(df, hn::BitCast(di, m)), sub_unit);
      const auto is_sub = hn::RebindMask(df, hn::Eq(hn::And(m, exp_mask), hn::Zero(du)));
      const auto mag = hn::IfThenElse(is_sub, sub, normal);
      const auto sign = hn::BitCast(df, hn::ShiftLeft<24>(hn::AndNot(mag_mask, c)));
      hn::StoreU(hn::Mul(hn::Or(mag, sign), vs), df, out + j);
    }
    for (; j < b1; ++j) out[j] = e4m3_decode(codes[j]) * s;
  }
  return !CodesHaveNan(codes, n);
}

// Max over lanes of the exponent field: all ones (Inf/NaN) means not finite.
template <class D, class V>
bool ExponentsFinite(D du, V acc, bool tail_bad) {
  return !tail_bad && hn::GetLane(hn::MaxOfLanes(du, acc)) < kF32ExpMask;
}

bool Bf16ToF32(const std::uint16_t* in, std::size_t n, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const std::size_t N = hn::Lanes(df);
  const auto em = hn::Set(du, kF32ExpMask);
  auto acc = hn::Zero(du);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto bits = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, in + i)));
    acc = hn::Max(acc, hn::And(bits, em));
    hn::StoreU(hn::BitCast(df, bits), df, out + i);
  }
  bool bad = false;
  for (; i < n; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
    bad |= (bits & kF32ExpMask) == kF32ExpMask;
    out[i] = std::bit_cast<float>(bits);
  }
  return ExponentsFinite(du, acc, bad);
}

bool F16ToF32(const std::uint16_t* in, std::size_t n, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto em = hn::Set(du, kF32ExpMask);
  auto acc = hn::Zero(du);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = LoadHalfAsF32(df, in + i);
    acc = hn::Max(acc, hn::And(hn::BitCast(du, v), em));
    hn::StoreU(v, df, out + i);
  }
  bool bad = false;
  for (; i < n; ++i) {
    out[i] = f16_decode(in[i]);
    bad |= !std::isfinite(out[i]);
  }
  return ExponentsFinite(du, acc, bad);
}

bool F32AllFinite(const float* in, std::size_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const std::size_t N = hn::Lanes(df);
  const auto em = hn::Set(du, kF32ExpMask);
  auto acc = hn::Zero(du);
  std::size_t i = 0;
  for (; i + N <= n; i += N)
    acc = hn::Max(acc, hn::And(hn::BitCast(du, hn::LoadU(df, in + i)), em));
  bool bad = false;
  for (; i < n; ++i) bad |= !std::isfinite(in[i]);
  return ExponentsFinite(du, acc, bad);
}

// Whether no 16-bit code has every bit of `exp_mask` set (the Inf/NaN exponent of f16 or
// bf16), without decoding.
bool U16ExponentsFinite(const std::uint16_t* in, std::size_t n, std::uint16_t exp_mask) {
  const hn::ScalableTag<std::uint16_t> d;
  const std::size_t N = hn::Lanes(d);
  const auto em = hn::Set(d, exp_mask);
  auto acc = hn::Zero(d);
  std::size_t i = 0;
  for (; i + N <= n; i += N) acc = hn::Max(acc, hn::And(hn::LoadU(d, in + i), em));
  bool bad = false;
  for (; i < n; ++i) bad |= (in[i] & exp_mask) == exp_mask;
  return !bad && hn::GetLane(hn::MaxOfLanes(d, acc)) < exp_mask;
}

void F32ToBf16(const float* in, std::size_t n, std::uint16_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint16_t, decltype(df)> d16;
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto bits = hn::BitCast(du, hn::LoadU(df, in + i));
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(bits, hn::Set(du, 0x7FFF)), lsb));
    const auto is_nan =
        hn::Gt(hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu))), hn::Set(di, 0x7F800000));
    const auto quiet = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x0040));
    const auto r = hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, rounded);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, out + i);
  }
  for (; i < n; ++i) out[i] = bf16_encode(in[i]);
}

// IEEE binary16 of each value, rounded to nearest even (overflow to infinity, subnormals
// exact): the conversion instruction where the target has one (F16C from AVX2 on x86; SSE4's
// emulation maps overflow to a finite code, so it takes the scalar reference). A vector
// holding a NaN goes to the scalar reference, which fixes the NaN's payload.
void F32ToF16(const float* in, std::size_t n, std::uint16_t* out) {
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR && (!HWY_ARCH_X86 || HWY_TARGET <= HWY_AVX2)
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const std::size_t N = hn::Lanes(df);
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, in + i);
    if (!hn::AllFalse(df, hn::IsNaN(v))) {
      for (std::size_t k = 0; k < N; ++k) out[i + k] = f16_encode(in[i + k]);
      continue;
    }
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(out + i));
  }
#endif
  for (; i < n; ++i) out[i] = f16_encode(in[i]);
}

void E4m3EncodeDiv(const float* x, std::size_t n, float divisor, bool saturate, std::uint8_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto vdiv = hn::Set(df, divisor);
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  const auto max_code = hn::Set(di, 0x7E);
  const auto overflow_code = hn::Set(di, saturate ? 0x7E : 0x7F);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::Div(hn::LoadU(df, x + i), vdiv);
    const auto bits = hn::BitCast(du, v);
    const auto a = hn::And(bits, abs_mask);
    const auto ai = hn::BitCast(di, a);
    const auto sign = hn::BitCast(di, hn::And(hn::ShiftRight<24>(bits), hn::Set(du, 0x80)));
    // Normal in E4M3 (|v| >= 2^-6): rebias and round the mantissa to 3 bits, half to even;
    // a carry correctly bumps the exponent. Below: units of 2^-9, rounded half to even.
    const auto lsb = hn::And(hn::ShiftRight<20>(a), hn::Set(du, 1));
    const auto normal =
        hn::Sub(hn::BitCast(di, hn::ShiftRight<20>(hn::Add(hn::Add(a, hn::Set(du, 0x7FFFF)), lsb))),
                hn::Set(di, 120 << 3));
    const auto sub = hn::NearestInt(hn::Mul(hn::BitCast(df, a), hn::Set(df, 512.0f)));
    const auto is_sub = hn::Lt(ai, hn::Set(di, 0x3C800000));  // 2^-6
    auto mag = hn::IfThenElse(is_sub, sub, normal);
    mag = hn::IfThenElse(hn::Gt(mag, max_code), overflow_code, mag);  // also Inf
    auto code = hn::Or(mag, sign);
    const auto is_nan = hn::Gt(ai, hn::Set(di, 0x7F800000));
    code = hn::IfThenElse(is_nan, saturate ? hn::Set(di, 0x7F) : hn::Or(hn::Set(di, 0x7F), sign),
                          code);
    hn::StoreU(hn::DemoteTo(d8, code), d8, out + i);
  }
  const Fp8Overflow mode = saturate ? Fp8Overflow::kSaturate : Fp8Overflow::kNonSaturate;
  for (; i < n; ++i) out[i] = e4m3_encode(x[i] / divisor, mode);
}

// UE4M3 (RNE, satfinite) of d > 0 (d may be +inf), as e4m3_encode(d, kSaturate).
inline std::uint8_t Ue4m3OfPositive(float d) {
  if (d < 0x1p-6f) return static_cast<std::uint8_t>(std::nearbyint(d * 512.0f));
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(d);
  const std::uint32_t code = ((bits + 0x7FFFFu + ((bits >> 20) & 1u)) >> 20) - (120u << 3);
  return static_cast<std::uint8_t>(std::min<std::uint32_t>(code, 0x7E));
}

inline float Ue4m3Value(std::uint8_t code) {
  if (code < 8) return static_cast<float>(code) * 0x1p-9f;
  return std::bit_cast<float>((static_cast<std::uint32_t>(code) + (120u << 3)) << 20);
}

// FlashRT's E0M3 code (sign-magnitude, as e0m3_encode) of t = v * inv, as an f32 integer:
// m = min(rint(|t|), 7), 0 for NaN; 8 + m when t < 0 and m > 0.
template <class DF, class V = hn::Vec<DF>>
HWY_INLINE V E0m3Code(DF df, V v, V inv) {
  const V t = hn::Mul(v, inv);
  V m = hn::Min(hn::Round(hn::Abs(t)), hn::Set(df, 7.0f));
  m = hn::IfThenElseZero(hn::Eq(t, t), m);  // whatever Min gave for NaN
  const V sm = hn::CopySign(m, t);          // -0 for a negative zero code: no sign bit
  return hn::IfThenElse(hn::Lt(sm, hn::Zero(df)), hn::Sub(hn::Set(df, 8.0f), sm), sm);
}

// Block b's scale byte and 1 / its value (+inf for the byte 0): d = max(amax / 7, 1e-12),
// NaN values ignored by the abs-max.
inline std::uint8_t E0m3ScaleByte(const std::uint16_t* in, float& inv) {
  float amax = 0.0f;
#if HWY_TARGET != HWY_SCALAR
  const hn::CappedTag<float, 16> df;
  const std::size_t N = hn::Lanes(df);  // divides 16
  auto acc = hn::Zero(df);
  for (std::size_t p = 0; p < 16; p += N) {
    const auto v = LoadHalfAsF32(df, in + p);
    acc = hn::Max(acc, hn::IfThenElseZero(hn::Eq(v, v), hn::Abs(v)));
  }
  amax = hn::GetLane(hn::MaxOfLanes(df, acc));
#else
  for (std::size_t p = 0; p < 16; ++p) {
    const float a = std::fabs(f16_decode(in[p]));
    if (a > amax) amax = a;
  }
#endif
  float d = amax / 7.0f;
  if (d < 1e-12f) d = 1e-12f;
  const std::uint8_t sbyte = Ue4m3OfPositive(d);
  inv = 1.0f / Ue4m3Value(sbyte);
  return sbyte;
}

#if HWY_TARGET != HWY_SCALAR
// The abs-max (NaN ignored) of the Lanes(df) blocks of 16 at `in`, lane i holding block i's:
// each block's partial maxima are folded pairwise across blocks (even lanes against odd ones),
// so no block needs a horizontal reduction of its own.
template <class DF>
HWY_INLINE hn::Vec<DF> BlocksAbsMax(DF df, const std::uint16_t* in) {
  constexpr std::size_t N = hn::MaxLanes(df);
  static_assert(N >= 2 && 16 % N == 0);
  hn::Vec<DF> v[N];
  for (std::size_t i = 0; i < N; ++i) {
    auto acc = hn::Zero(df);
    for (std::size_t p = 0; p < 16; p += N) {
      const auto x = LoadHalfAsF32(df, in + i * 16 + p);
      acc = hn::Max(acc, hn::IfThenElseZero(hn::Eq(x, x), hn::Abs(x)));
    }
    v[i] = acc;
  }
  for (std::size_t width = N; width > 1; width /= 2) {
    for (std::size_t i = 0; i < width / 2; ++i) {
      v[i] = hn::Max(hn::ConcatEven(df, v[2 * i + 1], v[2 * i]),
                     hn::ConcatOdd(df, v[2 * i + 1], v[2 * i]));
    }
  }
  return v[0];
}

// E0m3ScaleByte for Lanes(df) blocks at once from their abs-maxima.
template <class DF>
HWY_INLINE void E0m3Scales(DF df, hn::Vec<DF> amax, std::uint8_t* bytes, float* inv) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, DF> d8;
  const auto d = hn::Max(hn::Div(amax, hn::Set(df, 7.0f)), hn::Set(df, 1e-12f));
  const auto bits = hn::BitCast(di, d);  // d > 0: as Ue4m3OfPositive
  const auto lsb = hn::And(hn::ShiftRight<20>(bits), hn::Set(di, 1));
  const auto normal = hn::Sub(hn::ShiftRight<20>(hn::Add(hn::Add(bits, hn::Set(di, 0x7FFFF)), lsb)),
                              hn::Set(di, 120 << 3));
  const auto sub = hn::NearestInt(hn::Mul(d, hn::Set(df, 512.0f)));
  const auto is_sub = hn::RebindMask(di, hn::Lt(d, hn::Set(df, 0x1p-6f)));
  const auto code = hn::Min(hn::IfThenElse(is_sub, sub, normal), hn::Set(di, 0x7E));
  const auto value =
      hn::IfThenElse(hn::RebindMask(df, hn::Lt(code, hn::Set(di, 8))),
                     hn::Mul(hn::ConvertTo(df, code), hn::Set(df, 0x1p-9f)),
                     hn::BitCast(df, hn::ShiftLeft<20>(hn::Add(code, hn::Set(di, 120 << 3)))));
  hn::StoreU(hn::Div(hn::Set(df, 1.0f), value), df, inv);  // +inf for the byte 0
  hn::StoreU(hn::DemoteTo(d8, code), d8, bytes);
}
#endif

// Blocks are taken kChunk at a time: first every scale byte, Lanes blocks per vector, then
// every block's codes, packed as they are made.
void E0m3QuantizeRow(const std::uint16_t* fp16, std::size_t k, std::uint8_t* packed,
                     std::uint8_t* scale_bytes) {
  constexpr std::size_t kChunk = 32;
  float inv[kChunk];
  const std::size_t blocks = k / 16;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kChunk) {
    const std::size_t nb = std::min(kChunk, blocks - b0);
    std::size_t b = 0;
#if HWY_TARGET != HWY_SCALAR
    const hn::ScalableTag<float> dfull;
    for (; b + hn::Lanes(dfull) <= nb; b += hn::Lanes(dfull)) {
      E0m3Scales(dfull, BlocksAbsMax(dfull, fp16 + (b0 + b) * 16), scale_bytes + b0 + b, inv + b);
    }
#endif
    for (; b < nb; ++b) scale_bytes[b0 + b] = E0m3ScaleByte(fp16 + (b0 + b) * 16, inv[b]);
    for (b = 0; b < nb; ++b) {
      const std::uint16_t* in = fp16 + (b0 + b) * 16;
      std::uint8_t* out = packed + (b0 + b) * 8;
#if HWY_TARGET != HWY_SCALAR
      const hn::CappedTag<float, 16> df;
      const std::size_t N = hn::Lanes(df);
      const auto vinv = hn::Set(df, inv[b]);
      for (std::size_t p = 0; p < 16; p += N) {
        StoreInt4(E0m3Code(df, LoadHalfAsF32(df, in + p), vinv), out + p / 2);
      }
#else
      for (std::size_t p = 0; p < 16; p += 2) {
        out[p / 2] = static_cast<std::uint8_t>(e0m3_encode(f16_decode(in[p]) * inv[b]) |
                                               (e0m3_encode(f16_decode(in[p + 1]) * inv[b]) << 4));
      }
#endif
    }
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qrepack::kernels {

HWY_EXPORT(Fp8DecodeScaled);
HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F16ToF32);
HWY_EXPORT(F32AllFinite);
HWY_EXPORT(U16ExponentsFinite);
HWY_EXPORT(F32ToBf16);
HWY_EXPORT(F32ToF16);
HWY_EXPORT(E0m3QuantizeRow);
HWY_EXPORT(TargetName);
HWY_EXPORT(E4m3EncodeDiv);

bool fp8_decode_scaled(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                       std::size_t block_cols, float* out) {
  return HWY_DYNAMIC_DISPATCH(Fp8DecodeScaled)(codes, n, block_scales, block_cols, out);
}
void f32_to_f16(const float* in, std::size_t n, std::uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(F32ToF16)(in, n, out);
}
bool bf16_to_f32(const std::uint16_t* in, std::size_t n, float* out) {
  return HWY_DYNAMIC_DISPATCH(Bf16ToF32)(in, n, out);
}
bool f16_to_f32(const std::uint16_t* in, std::size_t n, float* out) {
  return HWY_DYNAMIC_DISPATCH(F16ToF32)(in, n, out);
}
bool f32_all_finite(const float* in, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(F32AllFinite)(in, n);
}
bool f16_all_finite(const std::uint16_t* in, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(U16ExponentsFinite)(in, n, 0x7C00);
}
bool bf16_all_finite(const std::uint16_t* in, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(U16ExponentsFinite)(in, n, 0x7F80);
}
void f32_to_bf16(const float* in, std::size_t n, std::uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(F32ToBf16)(in, n, out);
}
void e0m3_quantize_row(const std::uint16_t* fp16, std::size_t k, std::uint8_t* packed,
                       std::uint8_t* scale_bytes) {
  HWY_DYNAMIC_DISPATCH(E0m3QuantizeRow)(fp16, k, packed, scale_bytes);
}
void e4m3_encode_div(const float* x, std::size_t n, float divisor, bool saturate,
                     std::uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(E4m3EncodeDiv)(x, n, divisor, saturate, out);
}
std::string active_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

std::vector<std::string> compiled_targets() {
  std::vector<std::string> out;
  for (int bit = 0; bit < 63; ++bit) {  // lower bits are the better targets
    const std::int64_t t = std::int64_t{1} << bit;
    if ((HWY_TARGETS & t) != 0) out.emplace_back(hwy::TargetName(t));
  }
  return out;
}

std::vector<std::string> available_targets() {
  std::vector<std::string> out;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) out.emplace_back(hwy::TargetName(t));
  return out;
}

bool force_target(std::string_view name) {
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  }
  return false;
}

}  // namespace qrepack::kernels
#endif
