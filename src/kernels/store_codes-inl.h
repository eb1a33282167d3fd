// Stores of integer codes held in f32 lanes, per SIMD target (included by the kernels after
// hwy/highway.h, once per target as Highway's -inl.h convention has it).
#if defined(QREPACK_KERNELS_STORE_CODES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QREPACK_KERNELS_STORE_CODES_INL_H_
#undef QREPACK_KERNELS_STORE_CODES_INL_H_
#else
#define QREPACK_KERNELS_STORE_CODES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#endif  // include guard
