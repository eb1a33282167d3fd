// Integer codes of a span under one scale, as the container targets' quantizers compute them
// (reference: quantize_rows in targets/container/quant_rule.cc): q = round-half-even(x / s) (one
// f32 division per lane, or x * (1 / s) for the reciprocal rule), clamped to [lo, hi]. Every step
// is one correctly rounded IEEE operation in SIMD as in the scalar code, so the codes are the
// same bit for bit.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/int_codes.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// foreach_target must come first.
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace qrepack::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void IntCodes(const float* x, std::size_t n, float scale, bool reciprocal, float lo, float hi,
              std::int8_t* codes) {
  const float inverse = 1.0f / scale;
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::ScalableTag<float> df;
  const hn::Rebind<std::int32_t, decltype(df)> di;
  const hn::Rebind<std::int8_t, decltype(df)> d8;
  const std::size_t N = hn::Lanes(df);
  const auto vs = hn::Set(df, scale), vinv = hn::Set(df, inverse);
  const auto vlo = hn::Set(df, lo), vhi = hn::Set(df, hi);
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    const auto q = hn::Round(reciprocal ? hn::Mul(v, vinv) : hn::Div(v, vs));
    const auto c = hn::Min(hn::Max(q, vlo), vhi);
    hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, c)), d8, codes + i);
  }
#endif
  for (; i < n; ++i) {
    const float q = std::nearbyint(reciprocal ? x[i] * inverse : x[i] / scale);
    codes[i] = static_cast<std::int8_t>(std::clamp(q, lo, hi));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace qrepack::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qrepack::kernels {

HWY_EXPORT(IntCodes);

void int_codes(const float* x, std::size_t n, float scale, bool reciprocal, float lo, float hi,
               std::int8_t* codes) {
  HWY_DYNAMIC_DISPATCH(IntCodes)(x, n, scale, reciprocal, lo, hi, codes);
}

}  // namespace qrepack::kernels
#endif
