#include "model/deltanet.h"

#include <algorithm>
#include <cmath>

#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus (beta 1, threshold 20).
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// The causal depthwise conv with SiLU over every channel of the sequence.
std::vector<float> causal_conv(const DeltaNetDims& d, std::span<const float> w, std::uint64_t t,
                               const float* x) {
  const std::uint64_t c = d.conv_channels(), k = d.kernel;
  std::vector<float> y(t * c);
  for (std::uint64_t s = 0; s < t; ++s) {
    for (std::uint64_t ch = 0; ch < c; ++ch) {
      float acc = 0;
      for (std::uint64_t j = 0; j < k; ++j) {
        if (s + j + 1 < k) continue;  // before the sequence: zero history
        acc += w[ch * k + j] * x[(s + j + 1 - k) * c + ch];
      }
      y[s * c + ch] = silu(acc);
    }
  }
  return y;
}

// x * rsqrt(sum(x^2) + 1e-6), then * extra.
void l2_normalize(std::vector<float>& x, float extra) {
  float ss = 0;
  for (float v : x) ss += v * v;
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (float& v : x) v = v * inv * extra;
}

// The decay factors exp(g) of value head h's state rows at step i (`decay`: key_dim values).
void step_decay(const DeltaNetDims& d, const DeltaNetParams& p, const float* a, std::uint64_t i,
                std::uint64_t h, std::vector<float>& decay) {
  const std::uint64_t w = d.decay_width();
  const float* ai = a + (i * d.value_heads + h) * w;
  if (d.decay == DeltaDecay::kScalar) {
    const float g = -std::exp(p.a_log[h]) * softplus(ai[0] + p.dt_bias[h]);
    std::fill(decay.begin(), decay.end(), std::exp(g));
    return;
  }
  const float rate = std::exp(p.a_log[h]);
  for (std::uint64_t r = 0; r < d.key_dim; ++r) {
    decay[r] = std::exp(d.lower_bound * sigmoid(rate * (ai[r] + p.dt_bias[h * w + r])));
  }
}

// One value head over the whole sequence.
void head_recurrence(const DeltaNetDims& d, const DeltaNetParams& p, std::uint64_t t,
                     const std::vector<float>& conv, const float* z, const float* b, const float* a,
                     std::uint64_t h, float* out) {
  const std::uint64_t kd = d.key_dim, vd = d.value_dim, c = d.conv_channels();
  const std::uint64_t kh = h / (d.value_heads / d.key_heads);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kd));
  std::vector<float> s(kd * vd, 0.0f), q(kd), k(kd), mem(vd), o(vd), decay(kd);
  for (std::uint64_t i = 0; i < t; ++i) {
    const float* row = conv.data() + i * c;
    q.assign(row + kh * kd, row + (kh + 1) * kd);
    k.assign(row + d.key_channels() + kh * kd, row + d.key_channels() + (kh + 1) * kd);
    const float* v = row + 2 * d.key_channels() + h * vd;
    l2_normalize(q, 1.0f);
    for (float& x : q) x *= scale;
    l2_normalize(k, 1.0f);
    const float beta = sigmoid(b[i * d.value_heads + h]);
    step_decay(d, p, a, i, h, decay);
    for (std::uint64_t r = 0; r < kd; ++r) {
      for (std::uint64_t col = 0; col < vd; ++col) s[r * vd + col] *= decay[r];
    }
    for (std::uint64_t col = 0; col < vd; ++col) {
      float acc = 0;
      for (std::uint64_t r = 0; r < kd; ++r) acc += s[r * vd + col] * k[r];
      mem[col] = (v[col] - acc) * beta;
    }
    for (std::uint64_t r = 0; r < kd; ++r) {
      for (std::uint64_t col = 0; col < vd; ++col) s[r * vd + col] += k[r] * mem[col];
    }
    for (std::uint64_t col = 0; col < vd; ++col) {
      float acc = 0;
      for (std::uint64_t r = 0; r < kd; ++r) acc += s[r * vd + col] * q[r];
      o[col] = acc;
    }
    // Gated RMSNorm of the head's output.
    double ss = 0;
    for (float x : o) ss += static_cast<double>(x) * x;
    const float var = static_cast<float>(ss / static_cast<double>(vd));
    const float inv = 1.0f / std::sqrt(var + static_cast<float>(d.eps));
    const float* zh = z + i * d.value_heads * vd + h * vd;
    float* dst = out + i * d.value_heads * vd + h * vd;
    for (std::uint64_t col = 0; col < vd; ++col) {
      const float gate = d.gate == DeltaGate::kSilu ? silu(zh[col]) : sigmoid(zh[col]);
      dst[col] = p.norm[col] * (o[col] * inv) * gate;
    }
  }
}

}  // namespace

void gated_deltanet(const DeltaNetDims& d, const DeltaNetParams& p, std::uint64_t t,
                    const float* qkv, const float* z, const float* b, const float* a, float* out) {
  const std::vector<float> conv = causal_conv(d, p.conv, t, qkv);
  parallel_for(d.value_heads, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    for (std::size_t h = lo; h < hi; ++h) head_recurrence(d, p, t, conv, z, b, a, h, out);
  });
}

}  // namespace qrepack::model
