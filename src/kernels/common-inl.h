// Helpers the kernel files share, per SIMD target (included after hwy/highway.h, once per
// target as Highway's -inl.h convention has it): stores of integer codes held in f32 lanes, the
// largest E4M3 magnitude code of a span, nibble stores and the int scales' floor.
#if defined(QREPACK_KERNELS_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QREPACK_KERNELS_COMMON_INL_H_
#undef QREPACK_KERNELS_COMMON_INL_H_
#else
#define QREPACK_KERNELS_COMMON_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kMinScale = 1e-8f;  // int_quant.h kMinIntScale: the int encoders' floor

// The columns per scale of a row of n with groups of `group` (0 or more than n: the row).
inline std::size_t GroupOf(std::size_t group, std::size_t n) {
  return (group == 0 || group > n) ? std::max<std::size_t>(n, 1) : group;
}

// Sets nibble j of a packed int4 row (element 2p in the low nibble). Elements are written in
// ascending order, so an even element's byte is whole before its odd neighbour ORs in.
inline void PutNibble(std::uint8_t* packed, std::size_t j, std::uint8_t code) {
  if (j % 2 == 0) {
    packed[j / 2] = code;
  } else {
    packed[j / 2] = static_cast<std::uint8_t>(packed[j / 2] | (code << 4));
  }
}

#if HWY_TARGET != HWY_SCALAR
// StoreInt4: Lanes int4 codes, the f32 values rounded to nearest even (integers 0..15; element
// 2p low), as Lanes/2 bytes: two adjacent 32-bit lanes are one 64-bit lane c0 | c1 << 32,
// whose low byte after v | v >> 28 is c0 | c1 << 4. StoreInt8: Lanes int8 codes (rounding to
// -128..127) as bytes. Callers keep the values in range (no saturation). Highway's
// conversions add a saturation fix-up, and this Highway's 64-to-8-bit truncation and
// 32-to-8-bit demotion are permute sequences; on x86 with AVX-512 single instructions do.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_INLINE __m512i RoundToInt(hn::Vec512<float> x) {
  return _mm512_cvt_roundps_epi32(x.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
HWY_INLINE void StoreInt4(hn::Vec512<float> x, std::uint8_t* out) {
  const __m512i v = RoundToInt(x);
  const __m512i pairs = _mm512_or_si512(v, _mm512_srli_epi64(v, 28));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm512_cvtepi64_epi8(pairs));
}
HWY_INLINE void StoreInt8(hn::Vec512<float> x, std::uint8_t* out) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(RoundToInt(x)));
}
#else
template <class V>
HWY_INLINE void StoreInt4(V x, std::uint8_t* out) {
  const hn::DFromV<V> df;
  const hn::Repartition<std::uint64_t, decltype(df)> d64;
  const hn::Rebind<std::uint8_t, decltype(d64)> d8;
  const auto v = hn::BitCast(d64, hn::NearestInt(x));
  hn::StoreU(hn::TruncateTo(d8, hn::Or(v, hn::ShiftRight<28>(v))), d8, out);
}
template <class V>
HWY_INLINE void StoreInt8(V x, std::uint8_t* out) {
  const hn::DFromV<V> df;
  const hn::Rebind<std::int8_t, decltype(df)> d8;
  hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(x)), d8, reinterpret_cast<std::int8_t*>(out));
}
#endif
#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_TARGET != HWY_SCALAR
// The largest byte of v. This Highway has no 8-bit MaxOfLanes: byte pairs are folded into
// 16-bit lanes; on AVX-512 the halves are folded down to 128 bits first and phminposuw finds
// the largest of the last eight (as the smallest of their complements).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
HWY_INLINE std::uint8_t MaxOfBytes(hn::Vec512<std::uint8_t> v) {
  const __m256i m256 =
      _mm256_max_epu8(_mm512_castsi512_si256(v.raw), _mm512_extracti64x4_epi64(v.raw, 1));
  const __m128i m128 =
      _mm_max_epu8(_mm256_castsi256_si128(m256), _mm256_extracti128_si256(m256, 1));
  const __m128i w =
      _mm_max_epu16(_mm_and_si128(m128, _mm_set1_epi16(0xFF)), _mm_srli_epi16(m128, 8));
  const __m128i least = _mm_minpos_epu16(_mm_xor_si128(w, _mm_set1_epi16(-1)));
  return static_cast<std::uint8_t>(~_mm_cvtsi128_si32(least));
}
#else
template <class V>
HWY_INLINE std::uint8_t MaxOfBytes(V v) {
  const hn::DFromV<V> d8;
  const hn::Repartition<std::uint16_t, decltype(d8)> d16;
  const auto w = hn::BitCast(d16, v);
  const auto pairs = hn::Max(hn::And(w, hn::Set(d16, 0xFF)), hn::ShiftRight<8>(w));
  return static_cast<std::uint8_t>(hn::GetLane(hn::MaxOfLanes(d16, pairs)));
}
#endif
#endif

// max(code & 0x7F) over n E4M3 codes: the code of the largest magnitude (0x7F: a NaN).
inline std::uint8_t MaxMagnitudeCode(const std::uint8_t* codes, std::size_t n) {
  std::uint8_t m = 0;
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<std::uint8_t> d8;
  const std::size_t N = hn::Lanes(d8);
  const auto mask = hn::Set(d8, 0x7F);
  auto acc = hn::Zero(d8);
  for (; i + N <= n; i += N) acc = hn::Max(acc, hn::And(hn::LoadU(d8, codes + i), mask));
  if (i > 0) m = MaxOfBytes(acc);
#endif
  for (; i < n; ++i) m = std::max<std::uint8_t>(m, codes[i] & 0x7F);
  return m;
}

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#endif  // include guard
