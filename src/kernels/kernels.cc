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
#include "qrepack/formats/fp8.h"
#include "qrepack/formats/int4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr std::uint32_t kF32ExpMask = 0x7F800000u;

// Packs `count` 4-bit codes (one per byte, < 16) two per byte, element 2p low. `count` even.
void PackNibbles(const std::uint8_t* codes, std::size_t count, std::uint8_t* out) {
  const hn::ScalableTag<std::uint16_t> d16;
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(di16)> d8;
  const std::size_t n16 = hn::Lanes(d16);
  const std::size_t pairs = count / 2;
  std::size_t p = 0;
  for (; p + n16 <= pairs; p += n16) {
    // Little-endian: lane p holds code 2p in its low byte and code 2p+1 in its high byte.
    std::uint16_t tmp[hn::MaxLanes(d16)];
    std::memcpy(tmp, codes + 2 * p, n16 * 2);
    const auto v = hn::LoadU(d16, tmp);
    const auto lo = hn::And(v, hn::Set(d16, 0x000F));
    const auto hi = hn::ShiftRight<4>(hn::And(v, hn::Set(d16, 0x0F00)));
    hn::StoreU(hn::DemoteTo(d8, hn::BitCast(di16, hn::Or(lo, hi))), d8, out + p);
  }
  for (; p < pairs; ++p) {
    out[p] = static_cast<std::uint8_t>(codes[2 * p] | (codes[2 * p + 1] << 4));
  }
}

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

// Whether any E4M3 code is NaN (0x7F or 0xFF), 64 codes per AVX-512 vector.
bool CodesHaveNan(const std::uint8_t* codes, std::size_t n) {
  const hn::ScalableTag<std::uint8_t> d8;
  const std::size_t N = hn::Lanes(d8);
  const auto mask = hn::Set(d8, 0x7F);
  auto acc = hn::Zero(d8);
  std::size_t i = 0;
  for (; i + N <= n; i += N) acc = hn::Max(acc, hn::And(hn::LoadU(d8, codes + i), mask));
  std::uint8_t lanes[hn::MaxLanes(d8)];
  hn::StoreU(acc, d8, lanes);
  bool nan = false;
  for (std::size_t l = 0; l < N; ++l) nan |= lanes[l] == 0x7F;
  for (; i < n; ++i) nan |= (codes[i] & 0x7F) == 0x7F;
  return nan;
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

// The code of w with scale s: q = clamp(rint_even(w / s), lo, hi), w / s an f32 division,
// stored as the byte q + offset (offset binary for int4: q + 8; two's complement for int8).
template <int kLo, int kHi, int kOffset>
inline std::uint8_t IntCode(float w, float s) {
  const float r = std::nearbyint(w / s);
  const int q = !(r >= static_cast<float>(kLo)) ? kLo
                : r > static_cast<float>(kHi)   ? kHi
                                                : static_cast<int>(r);
  return static_cast<std::uint8_t>((q + kOffset) & 0xFF);
}

// Int8 codes (two's complement bytes) of w[0, count) with scale s.
void Int8Codes(const float* w, std::size_t count, float s, std::uint8_t* codes) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::int8_t, decltype(df)> d8s;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, s);
  std::size_t i = 0;
  for (; i + N <= count; i += N) {
    auto q = hn::NearestInt(hn::Div(hn::LoadU(df, w + i), vs));
    q = hn::Min(hn::Max(q, hn::Set(di, -128)), hn::Set(di, 127));
    hn::StoreU(hn::DemoteTo(d8s, q), d8s, reinterpret_cast<std::int8_t*>(codes + i));
  }
  for (; i < count; ++i) codes[i] = IntCode<-128, 127, 0>(w[i], s);
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

float AbsMax(const float* w, std::size_t count);
float AbsMaxExport(const float* x, std::size_t n) { return AbsMax(x, n); }

constexpr float kMinScale = 1e-8f;  // int_quant.h kMinIntScale

// The int4 code of w with scale s, offset binary: clamp(rint_even(w / s), -8, 7) + 8.
inline std::uint8_t Int4Code(float w, float s) { return IntCode<-8, 7, 8>(w, s); }

// Codes of w[0, len) (len even) packed two per byte, the even element in the low nibble. The
// codes never leave the registers: two adjacent 32-bit lanes are one 64-bit lane c0 | c1 << 32,
// whose low byte after v | v >> 28 is c0 | c1 << 4.
void Int4Pack(const float* w, std::size_t len, float s, std::uint8_t* out) {
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Repartition<std::uint64_t, decltype(df)> d64;
  const hn::Rebind<std::uint8_t, decltype(d64)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, s);
  for (; i + N <= len; i += N) {
    auto q = hn::NearestInt(hn::Div(hn::LoadU(df, w + i), vs));
    q = hn::Add(hn::Min(hn::Max(q, hn::Set(di, -8)), hn::Set(di, 7)), hn::Set(di, 8));
    const auto v = hn::BitCast(d64, q);
    hn::StoreU(hn::TruncateTo(d8, hn::Or(v, hn::ShiftRight<28>(v))), d8, out + i / 2);
  }
#else
  (void)s;
#endif
  for (; i < len; i += 2) {
    out[i / 2] = pack_nibble_pair(Int4Code(w[i], s), Int4Code(w[i + 1], s));
  }
}

void Int4EncodeRow(const float* w, std::size_t n, std::size_t group, std::uint8_t* packed,
                   float* scales) {
  const std::size_t g = (group == 0 || group > n) ? std::max<std::size_t>(n, 1) : group;
  const std::size_t groups = (n + g - 1) / g;
  for (std::size_t k = 0; k < groups; ++k) {
    const std::size_t c0 = k * g, c1 = std::min(n, c0 + g);
    const float s = std::max(AbsMax(w + c0, c1 - c0) / 7.0f, kMinScale);
    scales[k] = s;
    const std::size_t even = (c1 - c0) & ~std::size_t{1};
    Int4Pack(w + c0, even, s, packed + c0 / 2);
    if ((c1 - c0) & 1) packed[(c0 + even) / 2] = pack_nibble_pair(Int4Code(w[c0 + even], s), 0);
  }
}

float Int8EncodeRow(const float* w, std::size_t n, std::uint8_t* out) {
  const float s = std::max(AbsMax(w, n) / 127.0f, kMinScale);
  Int8Codes(w, n, s, out);
  return s;
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

void E0m3QuantizeRow(const std::uint16_t* fp16, std::size_t k, std::uint8_t* packed,
                     std::uint8_t* scale_bytes) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<std::uint8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);  // divides 16
  constexpr std::size_t kBlocksPerChunk = 32;
  std::uint8_t codes[kBlocksPerChunk * 16];
  const auto zero = hn::Zero(df);
  const auto seven = hn::Set(df, 7.0f);
  const std::size_t blocks = k / 16;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kBlocksPerChunk) {
    const std::size_t nb = std::min(kBlocksPerChunk, blocks - b0);
    for (std::size_t b = 0; b < nb; ++b) {
      const std::uint16_t* in = fp16 + (b0 + b) * 16;
      hn::Vec<decltype(df)> v[16];
      auto acc = zero;
      for (std::size_t p = 0; p < 16 / N; ++p) {
        v[p] = LoadHalfAsF32(df, in + p * N);
        // NaN never wins the kernel's comparison: treat it as 0 for the maximum.
        acc = hn::Max(acc, hn::IfThenElseZero(hn::Eq(v[p], v[p]), hn::Abs(v[p])));
      }
      const float amax = hn::GetLane(hn::MaxOfLanes(df, acc));
      float d = amax / 7.0f;
      if (d < 1e-12f) d = 1e-12f;
      const std::uint8_t sbyte = Ue4m3OfPositive(d);
      scale_bytes[b0 + b] = sbyte;
      const auto inv = hn::Set(df, 1.0f / Ue4m3Value(sbyte));  // +inf for scale 0
      for (std::size_t p = 0; p < 16 / N; ++p) {
        const auto t = hn::Mul(v[p], inv);
        // min(rint(|t|), 7): Min returns 7 for NaN, which the Eq mask then zeroes.
        auto m = hn::Min(hn::Round(hn::Abs(t)), seven);
        m = hn::IfThenElseZero(hn::Eq(t, t), m);
        auto code = hn::ConvertTo(di, m);
        const auto neg = hn::RebindMask(di, hn::And(hn::Lt(t, zero), hn::Gt(m, zero)));
        code = hn::IfThenElse(neg, hn::Or(code, hn::Set(di, 8)), code);
        hn::StoreU(hn::DemoteTo(d8, code), d8, codes + b * 16 + p * N);
      }
    }
    PackNibbles(codes, nb * 16, packed + b0 * 8);
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
HWY_EXPORT(F32ToBf16);
HWY_EXPORT(Int4EncodeRow);
HWY_EXPORT(Int8EncodeRow);
HWY_EXPORT(E0m3QuantizeRow);
HWY_EXPORT(TargetName);
HWY_EXPORT(E4m3EncodeDiv);
HWY_EXPORT(AbsMaxExport);

bool fp8_decode_scaled(const std::uint8_t* codes, std::size_t n, const float* block_scales,
                       std::size_t block_cols, float* out) {
  return HWY_DYNAMIC_DISPATCH(Fp8DecodeScaled)(codes, n, block_scales, block_cols, out);
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
void f32_to_bf16(const float* in, std::size_t n, std::uint16_t* out) {
  HWY_DYNAMIC_DISPATCH(F32ToBf16)(in, n, out);
}
void int4_encode_row(const float* w, std::size_t n, std::size_t group, std::uint8_t* packed,
                     float* scales) {
  HWY_DYNAMIC_DISPATCH(Int4EncodeRow)(w, n, group, packed, scales);
}
float int8_encode_row(const float* w, std::size_t n, std::uint8_t* out) {
  return HWY_DYNAMIC_DISPATCH(Int8EncodeRow)(w, n, out);
}
void e0m3_quantize_row(const std::uint16_t* fp16, std::size_t k, std::uint8_t* packed,
                       std::uint8_t* scale_bytes) {
  HWY_DYNAMIC_DISPATCH(E0m3QuantizeRow)(fp16, k, packed, scale_bytes);
}
void e4m3_encode_div(const float* x, std::size_t n, float divisor, bool saturate,
                     std::uint8_t* out) {
  HWY_DYNAMIC_DISPATCH(E4m3EncodeDiv)(x, n, divisor, saturate, out);
}
float abs_max(const float* x, std::size_t n) { return HWY_DYNAMIC_DISPATCH(AbsMaxExport)(x, n); }
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
