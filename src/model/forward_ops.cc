#include "model/forward_ops.h"

#include <algorithm>
#include <cmath>

#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {

float dot(const float* a, const float* b, std::uint64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

Matrix matmul(const Matrix& x, const Matrix& w) {
  Matrix y{x.rows, w.rows, std::vector<float>(x.rows * w.rows)};
  const std::uint64_t in = x.cols;
  parallel_for(w.rows, 8, [&](std::size_t b, std::size_t e, std::size_t) {
    for (std::size_t o = b; o < e; ++o) {
      const float* wr = w.row(o);
      for (std::uint64_t t = 0; t < x.rows; ++t) y.v[t * w.rows + o] = dot(x.row(t), wr, in);
    }
  });
  return y;
}

void rms_norm(Matrix& x, std::span<const float> weight, double eps) {
  for (std::uint64_t r = 0; r < x.rows; ++r) {
    float* v = x.row(r);
    double ss = 0;
    for (std::uint64_t c = 0; c < x.cols; ++c) ss += static_cast<double>(v[c]) * v[c];
    const float var = static_cast<float>(ss / static_cast<double>(x.cols));
    const float inv = 1.0f / std::sqrt(var + static_cast<float>(eps));
    for (std::uint64_t c = 0; c < x.cols; ++c) v[c] = weight[c] * (v[c] * inv);
  }
}

void swiglu(Matrix& gate, const Matrix& up) {
  for (std::uint64_t i = 0; i < gate.v.size(); ++i) {
    const float g = gate.v[i];
    gate.v[i] = g / (1.0f + std::exp(-g)) * up.v[i];
  }
}

void swiglu_clamped(Matrix& gate, const Matrix& up, float limit) {
  for (std::uint64_t i = 0; i < gate.v.size(); ++i) {
    const float g = std::min(gate.v[i], limit), u = std::clamp(up.v[i], -limit, limit);
    gate.v[i] = g / (1.0f + std::exp(-g)) * u;
  }
}

void situ_glu(Matrix& gate, const Matrix& up, float b1, float b2) {
  for (std::uint64_t i = 0; i < gate.v.size(); ++i) {
    const float g = gate.v[i], u = up.v[i];
    gate.v[i] = b1 * std::tanh(g / b1) * (1.0f / (1.0f + std::exp(-g))) * b2 * std::tanh(u / b2);
  }
}

std::vector<float> Rope::default_inv_freq(std::uint64_t dim, double theta) {
  std::vector<float> f(dim / 2);
  for (std::uint64_t i = 0; i < f.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return f;
}

std::vector<float> Rope::llama3_inv_freq(std::vector<float> inv_freq, double factor,
                                         double low_freq_factor, double high_freq_factor,
                                         double original_max_positions) {
  const float old_len = static_cast<float>(original_max_positions);
  const float low_wavelen = static_cast<float>(original_max_positions / low_freq_factor);
  const float high_wavelen = static_cast<float>(original_max_positions / high_freq_factor);
  const float f = static_cast<float>(factor), lo = static_cast<float>(low_freq_factor);
  const float span = static_cast<float>(high_freq_factor - low_freq_factor);
  constexpr float kTwoPi = static_cast<float>(2.0 * 3.14159265358979323846);
  for (float& x : inv_freq) {
    const float wavelen = kTwoPi / x;
    const float scaled = wavelen > low_wavelen ? x / f : x;
    if (wavelen < high_wavelen || wavelen > low_wavelen) {
      x = scaled;
      continue;
    }
    const float smooth = (old_len / wavelen - lo) / span;
    x = (1.0f - smooth) * scaled / f + smooth * scaled;
  }
  return inv_freq;
}

Rope Rope::from_inv_freq(const std::vector<float>& inv_freq, std::uint64_t t) {
  Rope r;
  r.half = inv_freq.size();
  r.cos.resize(t * r.half);
  r.sin.resize(t * r.half);
  for (std::uint64_t i = 0; i < r.half; ++i) {
    for (std::uint64_t p = 0; p < t; ++p) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      r.cos[p * r.half + i] = std::cos(angle);
      r.sin[p * r.half + i] = std::sin(angle);
    }
  }
  return r;
}

Rope Rope::make(std::uint64_t dim, double theta, std::uint64_t t) {
  return from_inv_freq(default_inv_freq(dim, theta), t);
}

void Rope::apply(float* x, std::uint64_t p, bool interleaved) const {
  float tmp[1024];  // kMaxRopeDim (check_forward_support refuses more)
  const std::uint64_t d = 2 * half;
  if (interleaved) {
    for (std::uint64_t i = 0; i < half; ++i) {
      tmp[i] = x[2 * i];
      tmp[half + i] = x[2 * i + 1];
    }
  } else {
    std::copy(x, x + d, tmp);
  }
  const float* c = cos.data() + p * half;
  const float* s = sin.data() + p * half;
  for (std::uint64_t i = 0; i < half; ++i) {
    const float a = tmp[i], b = tmp[half + i];
    x[i] = a * c[i] - b * s[i];
    x[half + i] = b * c[i] + a * s[i];
  }
}

void softmax(std::span<float> x) {
  float m = -INFINITY;
  for (float v : x) m = std::max(m, v);
  double sum = 0;
  for (float& v : x) {
    v = std::exp(v - m);
    sum += v;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& v : x) v *= inv;
}

std::uint32_t argmax(std::span<const float> x) {
  std::uint32_t best = 0;
  for (std::uint32_t i = 1; i < x.size(); ++i) {
    if (x[i] > x[best]) best = i;
  }
  return best;
}

}  // namespace qrepack::model
