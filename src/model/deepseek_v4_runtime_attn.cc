// DeepSeek V4 Flash attention as c/deepseek_v4.c's attention_token_impl,
// coli_v4_compressor_step, coli_v4_indexer_step and coli_v4_sparse_attention_ref compute it
// for one position.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4_quant.h"
#include "model/deepseek_v4_runtime.h"
#include "model/forward_ops.h"

namespace qrepack::model {
namespace {

// rope_yarn_bounds + rope_frequency (float, as the runtime).
float frequency(const DsV4Config& c, std::uint64_t pair, bool yarn) {
  const int dim = static_cast<int>(c.rope_dim);
  const float base = static_cast<float>(yarn ? c.compress_rope_theta : c.rope_theta);
  float f = 1.0f / std::pow(base, static_cast<float>(2 * pair) / static_cast<float>(dim));
  if (!yarn || c.original_seq_len == 0) return f;
  const float two_pi = 6.2831853071795864769f, den = 2.0f * std::log(base);
  const float orig = static_cast<float>(c.original_seq_len);
  const float lo_v =
      static_cast<float>(dim) * std::log(orig / (static_cast<float>(c.beta_fast) * two_pi)) / den;
  const float hi_v =
      static_cast<float>(dim) * std::log(orig / (static_cast<float>(c.beta_slow) * two_pi)) / den;
  const int lo = std::max(static_cast<int>(std::floor(lo_v)), 0);
  const int hi = std::min(static_cast<int>(std::ceil(hi_v)), dim - 1);
  const float width = hi == lo ? 0.001f : static_cast<float>(hi - lo);
  const float ramp =
      std::clamp((static_cast<float>(pair) - static_cast<float>(lo)) / width, 0.0f, 1.0f);
  const float smooth = 1.0f - ramp, factor = static_cast<float>(c.rope_factor);
  return f / factor * (1.0f - smooth) + f * smooth;
}

// The indexer's picks among the compressed rows (coli_v4_indexer_step): its own compressor
// first, then per head q = fp4(hadamard(rope(wq_b qr))), score_j = sum_h relu(q_h . k_j) w_h.
Result<std::vector<std::uint64_t>> indexer(V4Run& r, std::uint64_t l, const Vec& qa, const Vec& x,
                                           std::uint64_t pos) {
  const DsV4Config& c = r.c;
  V4LayerState& s = r.layers[l];
  QR_ASSIGN_OR_RETURN(k, v4_compress(r, s.index_comp, x, pos));
  if (k) s.index_keys.push_back(std::move(*k));
  if (s.index_keys.empty()) return std::vector<std::uint64_t>{};
  const std::string p = fmt::format("layers.{}.attn.indexer.", l);
  const std::uint64_t d = c.index_dim, heads = c.index_heads;
  QR_ASSIGN_OR_RETURN(q, v4_matvec(r.w, p + "wq_b.weight", heads * d, qa, true));
  bf16_round(q);
  for (std::uint64_t h = 0; h < heads; ++h) {
    float* qh = q.data() + h * d;
    v4_rope(c, qh + d - c.rope_dim, pos, true, false);
    bf16_round(std::span(qh + d - c.rope_dim, c.rope_dim));
    hadamard_bf16(std::span(qh, d));
    fp4_qdq(std::span(qh, d), 32);
    bf16_round(std::span(qh, d));
  }
  QR_ASSIGN_OR_RETURN(wp, r.w.get(p + "weights_proj.weight", heads, c.dim));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d * heads));
  Vec hw(heads);
  for (std::uint64_t h = 0; h < heads; ++h) hw[h] = dot(wp->row(h), x.data(), c.dim) * scale;
  std::vector<std::pair<float, std::uint64_t>> score;
  for (std::uint64_t j = 0; j < s.index_keys.size(); ++j) {
    float total = 0.0f;
    for (std::uint64_t h = 0; h < heads; ++h) {
      total += std::max(dot(q.data() + h * d, s.index_keys[j].data(), d), 0.0f) * hw[h];
    }
    score.emplace_back(total, j);
  }
  std::stable_sort(score.begin(), score.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::uint64_t> picks;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(score.size(), c.index_topk); ++i) {
    picks.push_back(score[i].second);
  }
  return picks;
}

// coli_v4_sparse_attention_ref for one head over `keys` (also the values); the sink joins the
// denominator, the probabilities are bf16-rounded before the value sum.
void attend(float* out, const float* q, const std::vector<const float*>& keys, float sink,
            std::uint64_t hd) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> s(keys.size());
  float top = -INFINITY;
  for (std::uint64_t j = 0; j < keys.size(); ++j) {
    s[j] = dot(q, keys[j], hd) * scale;
    top = std::max(top, s[j]);
  }
  float den = std::exp(sink - top);
  std::fill(out, out + hd, 0.0f);
  for (std::uint64_t j = 0; j < keys.size(); ++j) {
    const float pr = std::exp(s[j] - top);
    den += pr;
    const float pb = bf16_round(pr);
    for (std::uint64_t i = 0; i < hd; ++i) out[i] += pb * keys[j][i];
  }
  for (std::uint64_t i = 0; i < hd; ++i) out[i] = bf16_round(out[i] / den);
}

Result<Vec> normed(V4Run& r, const std::string& w, const std::string& norm, const Vec& x,
                   std::uint64_t out) {
  QR_ASSIGN_OR_RETURN(y, v4_matvec(r.w, w, out, x, true));
  bf16_round(y);
  QR_ASSIGN_OR_RETURN(nw, r.w.vec(norm, out));
  v4_rms(y, nw->v, static_cast<float>(r.c.eps));
  bf16_round(y);
  return y;
}

// The grouped output: wo_a per o_group on its heads, then wo_b.
Result<Vec> output(V4Run& r, const std::string& p, const Vec& att) {
  const DsV4Config& c = r.c;
  const std::uint64_t g = c.o_groups, rank = c.o_lora, gw = c.heads / g * c.head_dim;
  QR_ASSIGN_OR_RETURN(wo_a, r.w.get(p + "wo_a.weight", g * rank, gw));
  Vec oa(g * rank);
  for (std::uint64_t k = 0; k < g; ++k) {
    Vec in(att.begin() + k * gw, att.begin() + (k + 1) * gw);
    fp8_qdq(in, 128);
    for (std::uint64_t o = 0; o < rank; ++o)
      oa[k * rank + o] = dot(wo_a->row(k * rank + o), in.data(), gw);
  }
  bf16_round(oa);
  QR_ASSIGN_OR_RETURN(y, v4_matvec(r.w, p + "wo_b.weight", c.dim, oa, true));
  bf16_round(y);
  return y;
}

}  // namespace

Result<Vec> v4_matvec(WeightCache& w, const std::string& name, std::uint64_t out, const Vec& x,
                      bool qdq) {
  QR_ASSIGN_OR_RETURN(m, w.get(name, out, x.size()));
  Vec in = x;
  if (qdq) fp8_qdq(in, 128);
  Vec y(out);
  for (std::uint64_t o = 0; o < out; ++o) y[o] = dot(m->row(o), in.data(), in.size());
  return y;
}

void v4_rope(const DsV4Config& c, float* x, std::uint64_t p, bool compressed, bool inverse) {
  for (std::uint64_t k = 0; k < c.rope_dim / 2; ++k) {
    const float a = static_cast<float>(p) * frequency(c, k, compressed);
    const float co = std::cos(a), si = inverse ? -std::sin(a) : std::sin(a);
    const float re = x[2 * k], im = x[2 * k + 1];
    x[2 * k] = re * co - im * si;
    x[2 * k + 1] = re * si + im * co;
  }
}

void v4_rms(Vec& x, std::span<const float> weight, float eps) {
  float ss = 0.0f;
  for (float v : x) ss += v * v;
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
  for (std::uint64_t i = 0; i < x.size(); ++i) x[i] = x[i] * inv * weight[i];
}

Result<std::optional<Vec>> v4_compress(V4Run& r, V4Compressor& s, const Vec& x, std::uint64_t pos) {
  const std::uint64_t ratio = s.ratio, d = s.dim, width = (ratio == 4 ? 2 : 1) * d;
  const std::uint64_t slot = pos % ratio, row = ratio == 4 ? ratio + slot : slot;
  QR_ASSIGN_OR_RETURN(wkv, r.w.get(s.prefix + ".wkv.weight", width, r.c.dim));
  QR_ASSIGN_OR_RETURN(wg, r.w.get(s.prefix + ".wgate.weight", width, r.c.dim));
  QR_ASSIGN_OR_RETURN(ape, r.w.get(s.prefix + ".ape", ratio, width));
  for (std::uint64_t o = 0; o < width; ++o) {
    s.kv.row(row)[o] = dot(wkv->row(o), x.data(), r.c.dim);
    s.score.row(row)[o] = dot(wg->row(o), x.data(), r.c.dim) + ape->row(slot)[o];
  }
  if ((pos + 1) % ratio != 0) return std::optional<Vec>{};
  const std::uint64_t pool = ratio == 4 ? 8 : ratio;
  Vec out(d);
  for (std::uint64_t i = 0; i < d; ++i) {
    auto col = [&](std::uint64_t k) { return ratio == 4 && k >= 4 ? i + d : i; };
    float top = -INFINITY;
    for (std::uint64_t k = 0; k < pool; ++k) top = std::max(top, s.score.row(k)[col(k)]);
    float total = 0.0f, mixed = 0.0f;
    for (std::uint64_t k = 0; k < pool; ++k) {
      const float e = std::exp(s.score.row(k)[col(k)] - top);
      total += e;
      mixed += s.kv.row(k)[col(k)] * e;
    }
    out[i] = mixed / total;
  }
  if (ratio == 4) {  // this group's rows become the next group's first half
    std::copy(s.kv.row(4), s.kv.row(8), s.kv.row(0));
    std::copy(s.score.row(4), s.score.row(8), s.score.row(0));
  }
  bf16_round(out);
  QR_ASSIGN_OR_RETURN(nw, r.w.vec(s.prefix + ".norm.weight", d));
  v4_rms(out, nw->v, static_cast<float>(r.c.eps));
  bf16_round(out);
  const std::uint64_t rd = r.c.rope_dim;
  v4_rope(r.c, out.data() + d - rd, pos + 1 - ratio, true, false);
  bf16_round(std::span(out.data() + d - rd, rd));
  const std::span<float> part(out.data(), s.fp4 ? d : d - rd);
  if (s.fp4) {
    hadamard_bf16(out);
    fp4_qdq(part, 32);
  } else {
    fp8_qdq(part, 64);
  }
  bf16_round(part);
  return std::optional<Vec>(std::move(out));
}

Result<Vec> v4_attention(V4Run& r, std::uint64_t l, const Vec& x, std::uint64_t pos) {
  const DsV4Config& c = r.c;
  V4LayerState& s = r.layers[l];
  const std::string p = fmt::format("layers.{}.attn.", l);
  const std::uint64_t nh = c.heads, hd = c.head_dim, rd = c.rope_dim, ratio = c.ratios[l];
  QR_ASSIGN_OR_RETURN(qa, normed(r, p + "wq_a.weight", p + "q_norm.weight", x, c.q_lora));
  std::optional<std::vector<std::uint64_t>> picks;
  if (ratio) {
    QR_ASSIGN_OR_RETURN(kc, v4_compress(r, s.comp, x, pos));
    if (kc) s.compressed.push_back(std::move(*kc));
    if (ratio == 4) {
      QR_ASSIGN_OR_RETURN(ix, indexer(r, l, qa, x, pos));
      picks = std::move(ix);
    }
  }
  QR_ASSIGN_OR_RETURN(q, v4_matvec(r.w, p + "wq_b.weight", nh * hd, qa, true));
  bf16_round(q);
  for (std::uint64_t h = 0; h < nh; ++h) {  // an unweighted RMS scale per head
    float ss = 0.0f;
    for (std::uint64_t i = 0; i < hd; ++i) ss += q[h * hd + i] * q[h * hd + i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(hd) + static_cast<float>(c.eps));
    for (std::uint64_t i = 0; i < hd; ++i) q[h * hd + i] = bf16_round(q[h * hd + i] * inv);
  }
  QR_ASSIGN_OR_RETURN(kv, normed(r, p + "wkv.weight", p + "kv_norm.weight", x, hd));
  for (std::uint64_t h = 0; h < nh; ++h) {
    v4_rope(c, q.data() + h * hd + hd - rd, pos, ratio != 0, false);
    bf16_round(std::span(q.data() + h * hd + hd - rd, rd));
  }
  v4_rope(c, kv.data() + hd - rd, pos, ratio != 0, false);
  bf16_round(std::span(kv.data() + hd - rd, rd));
  fp8_qdq(std::span(kv.data(), hd - rd), 64);
  bf16_round(std::span(kv.data(), hd - rd));
  s.window.push_back(std::move(kv));
  std::vector<const float*> keys;
  for (std::uint64_t j = s.window.size() > c.window ? s.window.size() - c.window : 0;
       j < s.window.size(); ++j) {
    keys.push_back(s.window[j].data());
  }
  if (picks) {
    for (std::uint64_t j : *picks) keys.push_back(s.compressed[j].data());
  } else {
    for (const Vec& k : s.compressed) keys.push_back(k.data());
  }
  QR_ASSIGN_OR_RETURN(sink, r.w.vec(p + "attn_sink", nh));
  Vec att(nh * hd);
  for (std::uint64_t h = 0; h < nh; ++h) {
    attend(att.data() + h * hd, q.data() + h * hd, keys, sink->v[h], hd);
    v4_rope(c, att.data() + h * hd + hd - rd, pos, ratio != 0, true);
    bf16_round(std::span(att.data() + h * hd + hd - rd, rd));
  }
  return output(r, p, att);
}

}  // namespace qrepack::model
