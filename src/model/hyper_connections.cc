#include "model/hyper_connections.h"

#include <fmt/format.h>

#include <cmath>

#include "model/forward_ops.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

float sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

// 1 / sqrt(mean(x^2) + eps) over the n values of x, summed in order.
float inverse_rms(const float* x, std::uint64_t n, float eps) {
  float ss = 0.0f;
  for (std::uint64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
}

// Divides every column of the m x m matrix c by its sum + eps.
void normalize_columns(float* c, std::uint64_t m, float eps, std::vector<float>& sums) {
  for (std::uint64_t j = 0; j < m; ++j) {
    float s = 0.0f;
    for (std::uint64_t i = 0; i < m; ++i) s += c[i * m + j];
    sums[j] = s;
  }
  for (std::uint64_t i = 0; i < m; ++i) {
    for (std::uint64_t j = 0; j < m; ++j) c[i * m + j] /= sums[j] + eps;
  }
}

void normalize_rows(float* c, std::uint64_t m, float eps, std::vector<float>& sums) {
  for (std::uint64_t i = 0; i < m; ++i) {
    float s = 0.0f;
    for (std::uint64_t j = 0; j < m; ++j) s += c[i * m + j];
    sums[i] = s;
  }
  for (std::uint64_t i = 0; i < m; ++i) {
    for (std::uint64_t j = 0; j < m; ++j) c[i * m + j] /= sums[i] + eps;
  }
}

}  // namespace

Result<HcSite> read_hc_site(WeightCache& w, const std::string& prefix, const std::string& site,
                            const HcDims& d) {
  const std::string p = fmt::format("{}hc_{}_", prefix, site);
  HcSite s;
  QR_ASSIGN_OR_RETURN(fn, w.get(p + "fn", d.mix_count(), d.width()));
  QR_ASSIGN_OR_RETURN(base, w.vec(p + "base", d.mix_count()));
  QR_ASSIGN_OR_RETURN(scale, w.vec(p + "scale", 3));
  s.fn = std::move(fn);
  s.base = std::move(base);
  s.scale = std::move(scale);
  return s;
}

void hc_split(const HcDims& d, std::span<const float> mixes, std::span<const float> scale,
              std::span<const float> base, float* pre, float* post, float* comb) {
  const std::uint64_t m = d.mult;
  for (std::uint64_t i = 0; i < m; ++i) {
    pre[i] = sigmoid(mixes[i] * scale[0] + base[i]) + d.hc_eps;
    post[i] = 2.0f * sigmoid(mixes[m + i] * scale[1] + base[m + i]);
  }
  for (std::uint64_t i = 0; i < m; ++i) {
    float* row = comb + i * m;
    float top = -INFINITY;
    for (std::uint64_t j = 0; j < m; ++j) {
      const std::uint64_t k = 2 * m + i * m + j;
      row[j] = mixes[k] * scale[2] + base[k];
      top = std::max(top, row[j]);
    }
    float sum = 0.0f;
    for (std::uint64_t j = 0; j < m; ++j) {
      row[j] = std::exp(row[j] - top);
      sum += row[j];
    }
    for (std::uint64_t j = 0; j < m; ++j) row[j] = row[j] / sum + d.hc_eps;
  }
  std::vector<float> sums(m);
  normalize_columns(comb, m, d.hc_eps, sums);
  for (std::uint64_t it = 1; it < d.sinkhorn_iters; ++it) {
    normalize_rows(comb, m, d.hc_eps, sums);
    normalize_columns(comb, m, d.hc_eps, sums);
  }
}

Matrix hc_pre(const HcDims& d, const HcSite& s, const Matrix& streams, HcMix& mix,
              const std::vector<float>* collapse_pre) {
  const std::uint64_t n = streams.rows, m = d.mult, dim = d.dim, mc = d.mix_count();
  Matrix out{n, dim, std::vector<float>(n * dim)};
  mix.post.assign(n * m, 0.0f);
  mix.comb.assign(n * m * m, 0.0f);
  mix.pre.assign(n * m, 0.0f);
  parallel_for(n, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> mixes(mc);
    for (std::size_t t = lo; t < hi; ++t) {
      const float* x = streams.row(t);
      const float inv = inverse_rms(x, d.width(), d.norm_eps);
      for (std::uint64_t r = 0; r < mc; ++r) mixes[r] = dot(s.fn->row(r), x, d.width()) * inv;
      hc_split(d, mixes, s.scale->v, s.base->v, &mix.pre[t * m], &mix.post[t * m],
               &mix.comb[t * m * m]);
      const float* pre = collapse_pre ? collapse_pre->data() + t * m : &mix.pre[t * m];
      float* o = out.row(t);
      for (std::uint64_t c = 0; c < dim; ++c) {
        float a = 0.0f;
        for (std::uint64_t i = 0; i < m; ++i) a += pre[i] * x[i * dim + c];
        o[c] = a;
      }
    }
  });
  return out;
}

Matrix hc_post(const HcDims& d, const HcMix& mix, const Matrix& streams, const Matrix& branch) {
  const std::uint64_t n = streams.rows, m = d.mult, dim = d.dim;
  Matrix out{n, d.width(), std::vector<float>(n * d.width())};
  parallel_for(n, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    for (std::size_t t = lo; t < hi; ++t) {
      const float* x = streams.row(t);
      const float* comb = &mix.comb[t * m * m];
      const float* post = &mix.post[t * m];
      for (std::uint64_t j = 0; j < m; ++j) {
        float* o = out.row(t) + j * dim;
        for (std::uint64_t c = 0; c < dim; ++c) {
          float a = 0.0f;
          for (std::uint64_t i = 0; i < m; ++i) a += comb[i * m + j] * x[i * dim + c];
          o[c] = a + post[j] * branch.row(t)[c];
        }
      }
    }
  });
  return out;
}

Matrix hc_expand(const Matrix& x, std::uint64_t mult) {
  Matrix out{x.rows, x.cols * mult, std::vector<float>(x.rows * x.cols * mult)};
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    for (std::uint64_t i = 0; i < mult; ++i) {
      std::copy(x.row(t), x.row(t) + x.cols, out.row(t) + i * x.cols);
    }
  }
  return out;
}

Matrix hc_mean(const Matrix& streams, std::uint64_t mult) {
  const std::uint64_t dim = streams.cols / mult;
  Matrix out{streams.rows, dim, std::vector<float>(streams.rows * dim)};
  for (std::uint64_t t = 0; t < streams.rows; ++t) {
    for (std::uint64_t c = 0; c < dim; ++c) {
      float s = 0.0f;
      for (std::uint64_t i = 0; i < mult; ++i) s += streams.row(t)[i * dim + c];
      out.row(t)[c] = s / static_cast<float>(mult);
    }
  }
  return out;
}

Matrix hc_head(const HcDims& d, std::span<const float> fn, std::span<const float> base, float scale,
               const Matrix& streams) {
  const std::uint64_t n = streams.rows, m = d.mult, dim = d.dim;
  Matrix out{n, dim, std::vector<float>(n * dim)};
  parallel_for(n, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> pre(m);
    for (std::size_t t = lo; t < hi; ++t) {
      const float* x = streams.row(t);
      const float inv = inverse_rms(x, d.width(), d.norm_eps);
      for (std::uint64_t i = 0; i < m; ++i) {
        const float mixv = dot(fn.data() + i * d.width(), x, d.width()) * inv;
        pre[i] = sigmoid(mixv * scale + base[i]) + d.hc_eps;
      }
      for (std::uint64_t c = 0; c < dim; ++c) {
        float a = 0.0f;
        for (std::uint64_t i = 0; i < m; ++i) a += pre[i] * x[i * dim + c];
        out.row(t)[c] = a;
      }
    }
  });
  return out;
}

}  // namespace qrepack::model
