#include "model/deepseek_v4_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "model/forward_ops.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

// model.py find_correction_range / linear_ramp_factor (double, as Python's math).
std::vector<float> yarn(std::vector<float> f, const DsV4Config& c, double base) {
  const double d = static_cast<double>(2 * f.size()),
               orig = static_cast<double>(c.original_seq_len);
  auto dim_of = [&](double rot) {
    return d * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = std::max(std::floor(dim_of(static_cast<double>(c.beta_fast))), 0.0);
  double high = std::min(std::ceil(dim_of(static_cast<double>(c.beta_slow))), d - 1);
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(c.rope_factor);
  for (std::uint64_t k = 0; k < f.size(); ++k) {
    float ramp = (static_cast<float>(k) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float smooth = 1 - ramp;
    f[k] = f[k] / factor * (1 - smooth) + f[k] * smooth;
  }
  return f;
}

// Rotates the last rope_dim channels of every `width`-wide head of row r (local position p).
void rope_heads(const DsRope& rope, float* row, std::uint64_t heads, std::uint64_t width,
                std::uint64_t p, bool inverse) {
  for (std::uint64_t h = 0; h < heads; ++h) {
    rope.apply(row + h * width + width - 2 * rope.half, p, inverse);
  }
}

// model.py Compressor.forward for one prompt: the pooled, RMS-normed latents of its complete
// groups ([n / ratio, head_dim], unrotated).
Matrix compress(const Matrix& kv, const Matrix* gate, std::uint64_t r0, std::uint64_t n,
                std::uint64_t ratio, std::span<const float> norm, double eps) {
  const std::uint64_t hd = kv.cols, groups = n / ratio;
  Matrix out{groups, hd, std::vector<float>(groups * hd)};
  for (std::uint64_t g = 0; g < groups; ++g) {
    const std::uint64_t t0 = r0 + g * ratio;
    for (std::uint64_t i = 0; i < hd; ++i) {
      if (ratio == 1) {
        out.row(g)[i] = kv.row(t0)[i];
        continue;
      }
      float best = -INFINITY;
      for (std::uint64_t k = 0; k < ratio; ++k) best = std::max(best, gate->row(t0 + k)[i]);
      float total = 0, mixed = 0;
      for (std::uint64_t k = 0; k < ratio; ++k) {
        const float e = std::exp(gate->row(t0 + k)[i] - best);
        total += e;
        mixed += e * kv.row(t0 + k)[i];
      }
      out.row(g)[i] = mixed / total;
    }
  }
  rms_norm(out, norm, eps);
  return out;
}

// kernel.py sparse_attn for one query head: the rows `idx` lists of kv_all (-1: none); the
// sink joins the denominator only.
void attend(float* out, const float* q, const Matrix& kv_all, const std::vector<std::int64_t>& idx,
            float sink, float scale) {
  const std::uint64_t hd = kv_all.cols;
  std::vector<float> score(idx.size(), -INFINITY);
  float best = -1e30f;
  for (std::uint64_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    score[j] = dot(q, kv_all.row(static_cast<std::uint64_t>(idx[j])), hd) * scale;
    best = std::max(best, score[j]);
  }
  float denom = 0;
  std::fill(out, out + hd, 0.0f);
  for (std::uint64_t j = 0; j < idx.size(); ++j) {
    if (idx[j] < 0) continue;
    const float e = std::exp(score[j] - best);
    denom += e;
    const float* k = kv_all.row(static_cast<std::uint64_t>(idx[j]));
    for (std::uint64_t i = 0; i < hd; ++i) out[i] += e * k[i];
  }
  denom += std::exp(sink - best);
  for (std::uint64_t i = 0; i < hd; ++i) out[i] /= denom;
}

struct Proj {
  WeightCache& w;
  Result<Matrix> operator()(const std::string& name, const Matrix& x, std::uint64_t out) {
    QR_ASSIGN_OR_RETURN(m, w.get(name, out, x.cols));
    return matmul(x, *m);
  }
  Result<Matrix> normed(const std::string& name, const std::string& norm, const Matrix& x,
                        std::uint64_t out, double eps) {
    QR_ASSIGN_OR_RETURN(y, (*this)(name, x, out));
    QR_ASSIGN_OR_RETURN(wt, w.vec(norm, out));
    rms_norm(y, wt->v, eps);
    return y;
  }
};

// The compressing half of one layer for one sequence: the kv source's latents (index keys
// from them unrotated, the cache rotated), the indexer's picks.
Status compressed_half(WeightCache& w, const DsV4Config& c, const DsRope& rope, std::uint64_t l,
                       const Matrix& x, const Matrix& qr, const Matrix* ckv, const Matrix* cgate,
                       std::uint64_t r0, std::uint64_t n, DsShared& s) {
  const std::string p = fmt::format("layers.{}.attn.", l);
  const std::uint64_t ratio = c.ratios[l];
  if (c.kv_source[l]) {
    QR_ASSIGN_OR_RETURN(norm, w.vec(p + "compressor.norm.weight", c.head_dim));
    Matrix latent = compress(*ckv, cgate, r0, n, ratio, norm->v, c.eps);
    if (c.index_source[l] && latent.rows > 0) {
      Proj proj{w};
      QR_ASSIGN_OR_RETURN(k, proj.normed(p + "indexer.wk.weight", p + "indexer.k_norm.weight",
                                         latent, c.index_dim, c.eps));
      for (std::uint64_t g = 0; g < k.rows; ++g) {
        rope_heads(rope, k.row(g), 1, c.index_dim, g * ratio, false);
      }
      s.index_k[l] = std::move(k);
    }
    for (std::uint64_t g = 0; g < latent.rows; ++g) {
      rope_heads(rope, latent.row(g), 1, c.head_dim, g * ratio, false);
    }
    s.compress_kv = std::move(latent);
  }
  if (c.index_source[l]) QR_TRY(dsv4_indexer(w, c, rope, l, x, qr, r0, n, s));
  return ok_status();
}

}  // namespace

DsRope DsRope::make(const DsV4Config& c, bool compressed, std::uint64_t t) {
  DsRope r;
  r.half = c.rope_dim / 2;
  const double base = compressed ? c.compress_rope_theta : c.rope_theta;
  std::vector<float> f(r.half);
  for (std::uint64_t k = 0; k < r.half; ++k) {
    const float e = static_cast<float>(2 * k) / static_cast<float>(c.rope_dim);
    f[k] = 1.0f / std::pow(static_cast<float>(base), e);
  }
  if (compressed && c.original_seq_len > 0 && c.max_positions > c.original_seq_len) {
    f = yarn(std::move(f), c, base);
  }
  r.cos.resize(t * r.half);
  r.sin.resize(t * r.half);
  for (std::uint64_t p = 0; p < t; ++p) {
    for (std::uint64_t k = 0; k < r.half; ++k) {
      const float a = static_cast<float>(p) * f[k];
      r.cos[p * r.half + k] = std::cos(a);
      r.sin[p * r.half + k] = std::sin(a);
    }
  }
  return r;
}

void DsRope::apply(float* x, std::uint64_t p, bool inverse) const {
  for (std::uint64_t k = 0; k < half; ++k) {
    const float co = cos[p * half + k], si = inverse ? -sin[p * half + k] : sin[p * half + k];
    const float a = x[2 * k], b = x[2 * k + 1];
    x[2 * k] = a * co - b * si;
    x[2 * k + 1] = a * si + b * co;
  }
}

Result<Matrix> dsv4_attention(WeightCache& w, const DsV4Config& c, const DsRopes& ropes,
                              std::uint64_t l, const Matrix& x, const Batch& b,
                              std::vector<DsShared>& shared) {
  const std::string p = fmt::format("layers.{}.attn.", l);
  const std::uint64_t ratio = c.ratios[l], nh = c.heads, hd = c.head_dim, N = x.rows;
  const DsRope& rope = ratio ? ropes.compressed : ropes.window;
  Proj proj{w};
  QR_ASSIGN_OR_RETURN(qr, proj.normed(p + "wq_a.weight", p + "q_norm.weight", x, c.q_lora, c.eps));
  QR_ASSIGN_OR_RETURN(q, proj(p + "wq_b.weight", qr, nh * hd));
  QR_ASSIGN_OR_RETURN(kv, proj.normed(p + "wkv.weight", p + "kv_norm.weight", x, hd, c.eps));
  QR_ASSIGN_OR_RETURN(sink, w.vec(p + "attn_sink", nh));
  Matrix ckv, cgate;
  if (ratio && c.kv_source[l]) {
    QR_ASSIGN_OR_RETURN(a, proj(p + "compressor.wkv.weight", x, hd));
    ckv = std::move(a);
    if (ratio > 1) {
      QR_ASSIGN_OR_RETURN(g, proj(p + "compressor.wgate.weight", x, hd));
      cgate = std::move(g);
    }
  }
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    for (std::uint64_t t = b.start[s]; t < b.start[s + 1]; ++t) {
      rope_heads(rope, q.row(t), nh, hd, t - b.start[s], false);
      rope_heads(rope, kv.row(t), 1, hd, t - b.start[s], false);
    }
  }
  Matrix heads{N, nh * hd, std::vector<float>(N * nh * hd)};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t r0 = b.start[s], n = b.start[s + 1] - r0;
    DsShared& sh = shared[s];
    std::uint64_t clen = 0;
    if (ratio) {
      QR_TRY(compressed_half(w, c, rope, l, x, qr, &ckv, &cgate, r0, n, sh));
      clen = n / ratio;
    }
    // kv_all: the prompt's own KV (the window half), then the compressed cache.
    Matrix kv_all{n + clen, hd, std::vector<float>((n + clen) * hd)};
    std::copy(kv.row(r0), kv.row(r0) + n * hd, kv_all.v.begin());
    if (clen)
      std::copy(sh.compress_kv.v.begin(), sh.compress_kv.v.begin() + clen * hd, kv_all.row(n));
    const std::uint64_t width = std::min(n, c.window);
    parallel_for(n, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
      std::vector<std::int64_t> idx;
      for (std::size_t t = lo; t < hi; ++t) {
        idx.clear();
        const std::uint64_t first = t + 1 > c.window ? t + 1 - c.window : 0;
        for (std::uint64_t i = 0; i < width; ++i) {
          idx.push_back(first + i > t ? -1 : static_cast<std::int64_t>(first + i));
        }
        for (std::uint64_t k = 0; ratio && k < sh.topk_width; ++k)
          idx.push_back(sh.topk[t * sh.topk_width + k]);
        for (std::uint64_t h = 0; h < nh; ++h) {
          attend(heads.row(r0 + t) + h * hd, q.row(r0 + t) + h * hd, kv_all, idx, sink->v[h],
                 scale);
        }
        rope_heads(rope, heads.row(r0 + t), nh, hd, t, true);
      }
    });
  }
  // wo_a is block diagonal over the o_groups; wo_b mixes them.
  const std::uint64_t per = nh * hd / c.o_groups, g = c.o_groups, r = c.o_lora;
  QR_ASSIGN_OR_RETURN(wo_a, w.get(p + "wo_a.weight", g * r, per));
  Matrix grouped{N, g * r, std::vector<float>(N * g * r)};
  parallel_for(g * r, 8, [&](std::size_t lo, std::size_t hi, std::size_t) {
    for (std::size_t o = lo; o < hi; ++o) {
      for (std::uint64_t t = 0; t < N; ++t) {
        grouped.row(t)[o] = dot(wo_a->row(o), heads.row(t) + (o / r) * per, per);
      }
    }
  });
  return proj(p + "wo_b.weight", grouped, c.dim);
}

}  // namespace qrepack::model
