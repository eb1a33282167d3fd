#include "model/deepseek_v4_hc.h"

#include <cmath>

#include "model/forward_ops.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// kernel.py hc_split_sinkhorn on one row's mixes.
void split_sinkhorn(const float* mix, std::span<const float> scale, std::span<const float> base,
                    const HcParams& p, float* pre, float* post, float* comb) {
  const std::uint64_t hc = p.hc;
  for (std::uint64_t k = 0; k < hc; ++k) {
    pre[k] = sigmoid(mix[k] * scale[0] + base[k]) + p.hc_eps;
    post[k] = 2.0f * sigmoid(mix[hc + k] * scale[1] + base[hc + k]);
  }
  for (std::uint64_t i = 0; i < hc; ++i) {
    float* row = comb + i * hc;
    for (std::uint64_t j = 0; j < hc; ++j) {
      row[j] = mix[2 * hc + i * hc + j] * scale[2] + base[2 * hc + i * hc + j];
    }
    softmax(std::span(row, hc));
    for (std::uint64_t j = 0; j < hc; ++j) row[j] += p.hc_eps;
  }
  auto columns = [&] {
    for (std::uint64_t j = 0; j < hc; ++j) {
      float s = 0;
      for (std::uint64_t i = 0; i < hc; ++i) s += comb[i * hc + j];
      for (std::uint64_t i = 0; i < hc; ++i) comb[i * hc + j] /= s + p.hc_eps;
    }
  };
  columns();
  for (std::uint64_t it = 1; it < p.iters; ++it) {
    for (std::uint64_t i = 0; i < hc; ++i) {
      float s = 0;
      for (std::uint64_t j = 0; j < hc; ++j) s += comb[i * hc + j];
      for (std::uint64_t j = 0; j < hc; ++j) comb[i * hc + j] /= s + p.hc_eps;
    }
    columns();
  }
}

}  // namespace

HcMixes hc_mixes(const Matrix& h, const Matrix& fn, std::span<const float> scale,
                 std::span<const float> base, const HcParams& p) {
  const std::uint64_t n = h.rows, hc = p.hc, flat = hc * p.dim, mixes = (2 + hc) * hc;
  HcMixes m{{n, hc, std::vector<float>(n * hc)},
            {n, hc, std::vector<float>(n * hc)},
            {n, hc * hc, std::vector<float>(n * hc * hc)}};
  parallel_for(n, 4, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> mix(mixes);
    for (std::size_t t = lo; t < hi; ++t) {
      const float* x = h.row(t);
      const float ms = dot(x, x, flat) / static_cast<float>(flat);
      const float inv = 1.0f / std::sqrt(ms + p.norm_eps);
      for (std::uint64_t r = 0; r < mixes; ++r) mix[r] = dot(fn.row(r), x, flat) * inv;
      split_sinkhorn(mix.data(), scale, base, p, m.pre.row(t), m.post.row(t), m.comb.row(t));
    }
  });
  return m;
}

Matrix hc_collapse(const Matrix& h, const Matrix& pre, const HcParams& p) {
  Matrix y{h.rows, p.dim, std::vector<float>(h.rows * p.dim)};
  for (std::uint64_t t = 0; t < h.rows; ++t) {
    for (std::uint64_t i = 0; i < p.dim; ++i) {
      float s = 0;
      for (std::uint64_t c = 0; c < p.hc; ++c) s += pre.row(t)[c] * h.row(t)[c * p.dim + i];
      y.row(t)[i] = s;
    }
  }
  return y;
}

void hc_expand(Matrix& h, const Matrix& y, const HcMixes& m, const HcParams& p) {
  const std::uint64_t hc = p.hc, dim = p.dim;
  std::vector<float> res(hc * dim);
  for (std::uint64_t t = 0; t < h.rows; ++t) {
    float* x = h.row(t);
    std::copy(x, x + hc * dim, res.begin());
    const float* comb = m.comb.row(t);
    for (std::uint64_t j = 0; j < hc; ++j) {
      for (std::uint64_t i = 0; i < dim; ++i) {
        float s = 0;
        for (std::uint64_t src = 0; src < hc; ++src) s += comb[src * hc + j] * res[src * dim + i];
        x[j * dim + i] = s + m.post.row(t)[j] * y.row(t)[i];
      }
    }
  }
}

}  // namespace qrepack::model
