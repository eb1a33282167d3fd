// DeepSeek V4 Flash's blocks, MoE and close as c/deepseek_v4.c's block_token_impl,
// moe_token, coli_v4_route, the expert forwards and final_hidden compute them.
#include "model/deepseek_v4_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "model/deepseek_v4_quant.h"
#include "model/forward_ops.h"
#include "model/hyper_connections.h"

namespace qrepack::model {
namespace {

float sigmoid_stable(float v) {
  if (v >= 0.0f) return 1.0f / (1.0f + std::exp(-v));
  const float g = std::exp(v);
  return g / (1.0f + g);
}

// coli_v4_swiglu: the gate clamped from above and the up both ways when the limit is set.
Vec swiglu(const Vec& g, const Vec& u, float limit) {
  Vec out(g.size());
  for (std::uint64_t i = 0; i < g.size(); ++i) {
    float gv = g[i], uv = u[i];
    if (limit > 0.0f) {
      gv = std::min(gv, limit);
      uv = std::max(-limit, std::min(uv, limit));
    }
    out[i] = gv * sigmoid_stable(gv) * uv;
  }
  return out;
}

// An expert: gate and up rounded, the activation (times the route weight for a routed one)
// rounded, down rounded.
Result<Vec> expert(V4Run& r, const std::string& p, const Vec& x, std::optional<float> weight) {
  const DsV4Config& c = r.c;
  QR_ASSIGN_OR_RETURN(g, v4_matvec(r.w, p + "w1.weight", c.moe_inter, x, true));
  QR_ASSIGN_OR_RETURN(u, v4_matvec(r.w, p + "w3.weight", c.moe_inter, x, true));
  bf16_round(g);
  bf16_round(u);
  Vec a = swiglu(g, u, c.swiglu_limit);
  if (weight) {
    for (float& v : a) v *= *weight;
  }
  bf16_round(a);
  QR_ASSIGN_OR_RETURN(y, v4_matvec(r.w, p + "w2.weight", c.dim, a, true));
  bf16_round(y);
  return y;
}

// The experts of `tok`: tid2eid's on the first num_hash_layers layers, else the best
// sqrtsoftplus score + bias (ties to the lower index); weighed by their scores' share.
Result<std::vector<std::pair<std::uint64_t, float>>> route(V4Run& r, const std::string& p,
                                                           const Vec& x, std::uint32_t tok,
                                                           bool hashed) {
  const DsV4Config& c = r.c;
  QR_ASSIGN_OR_RETURN(gate, r.w.get(p + "gate.weight", c.experts, c.dim));
  Vec score(c.experts);
  for (std::uint64_t e = 0; e < c.experts; ++e) {
    const float v = dot(gate->row(e), x.data(), c.dim);
    score[e] = std::sqrt(std::max(v, 0.0f) + std::log1p(std::exp(-std::fabs(v))));
  }
  std::vector<std::uint64_t> idx;
  if (hashed) {
    QR_ASSIGN_OR_RETURN(raw, r.w.weights().read_raw(p + "gate.tid2eid", c.vocab * c.top_k * 8));
    if (raw.dtype != Dtype::kI64 || raw.bytes.size() != c.vocab * c.top_k * 8) {
      return Error(ErrorKind::kUnexpectedShape,
                   fmt::format("{}gate.tid2eid must be I64 [{}, {}]", p, c.vocab, c.top_k));
    }
    for (std::uint64_t k = 0; k < c.top_k; ++k) {
      std::int64_t e = 0;
      std::memcpy(&e, raw.bytes.data() + (tok * c.top_k + k) * 8, 8);
      if (e < 0 || static_cast<std::uint64_t>(e) >= c.experts) {
        return Error(ErrorKind::kUnexpectedShape,
                     fmt::format("{}gate.tid2eid names expert {} of {}", p, e, c.experts));
      }
      idx.push_back(static_cast<std::uint64_t>(e));
    }
  } else {
    QR_ASSIGN_OR_RETURN(bias, r.w.vec(p + "gate.bias", c.experts));
    std::vector<std::uint8_t> taken(c.experts, 0);
    for (std::uint64_t k = 0; k < c.top_k; ++k) {
      std::uint64_t best = c.experts;
      for (std::uint64_t e = 0; e < c.experts; ++e) {
        if (!taken[e] &&
            (best == c.experts || score[e] + bias->v[e] > score[best] + bias->v[best])) {
          best = e;
        }
      }
      taken[best] = 1;
      idx.push_back(best);
    }
  }
  float total = 0.0f;
  for (std::uint64_t e : idx) total += score[e];
  if (!(total > 0.0f)) return Error(ErrorKind::kInternal, p + ": the route scores sum to 0");
  std::vector<std::pair<std::uint64_t, float>> out;
  for (std::uint64_t e : idx) out.emplace_back(e, score[e] / total * c.route_scale);
  return out;
}

Result<Vec> moe(V4Run& r, std::uint64_t l, const Vec& x, std::uint32_t tok) {
  const DsV4Config& c = r.c;
  const std::string p = fmt::format("layers.{}.ffn.", l);
  QR_ASSIGN_OR_RETURN(picks, route(r, p, x, tok, l < c.hash_layers));
  QR_ASSIGN_OR_RETURN(shared, expert(r, p + "shared_experts.", x, std::nullopt));
  Vec out(c.dim, 0.0f);
  for (std::uint64_t e = 0; e < c.experts; ++e) {  // in expert order, as the runtime sums
    for (const auto& [id, weight] : picks) {
      if (id != e) continue;
      QR_ASSIGN_OR_RETURN(y, expert(r, fmt::format("{}experts.{}.", p, e), x, weight));
      for (std::uint64_t i = 0; i < c.dim; ++i) out[i] += y[i];
      break;
    }
  }
  for (std::uint64_t i = 0; i < c.dim; ++i) out[i] = bf16_round(out[i] + shared[i]);
  return out;
}

HcDims hc_dims(const DsV4Config& c) {
  return {c.hc, c.dim, c.hc_iters, static_cast<float>(c.eps), c.hc_eps};
}

// One block on the streams h ([1, hc * dim]): each sublayer reads the streams collapsed with
// its own pre (bf16), normed (bf16); the streams after it bf16-rounded.
Status block(V4Run& r, std::uint64_t l, Matrix& h, std::uint32_t tok, std::uint64_t pos) {
  const DsV4Config& c = r.c;
  const std::string p = fmt::format("layers.{}.", l);
  for (const char* site : {"attn", "ffn"}) {
    QR_ASSIGN_OR_RETURN(s, read_hc_site(r.w, p, site, hc_dims(c)));
    HcMix mix;
    Matrix red = hc_pre(hc_dims(c), s, h, mix);
    Vec x(red.v.begin(), red.v.end());
    bf16_round(x);
    QR_ASSIGN_OR_RETURN(nw, r.w.vec(fmt::format("{}{}_norm.weight", p, site), c.dim));
    v4_rms(x, nw->v, static_cast<float>(c.eps));
    bf16_round(x);
    Result<Vec> y = site[0] == 'a' ? v4_attention(r, l, x, pos) : moe(r, l, x, tok);
    if (!y.ok()) return std::move(y.error());
    h = hc_post(hc_dims(c), mix, h, Matrix{1, c.dim, std::move(*y)});
    bf16_round(h.v);
  }
  return ok_status();
}

V4Compressor compressor(std::string prefix, std::uint64_t ratio, std::uint64_t dim, bool fp4) {
  const std::uint64_t rows = ratio == 4 ? 8 : ratio, width = (ratio == 4 ? 2 : 1) * dim;
  return {std::move(prefix),
          ratio,
          dim,
          fp4,
          Matrix{rows, width, Vec(rows * width, 0.0f)},
          Matrix{rows, width, Vec(rows * width, -INFINITY)}};
}

}  // namespace

Result<Matrix> dsv4_runtime_hidden(WeightCache& w, const DsV4Config& c,
                                   std::span<const std::uint32_t> ids) {
  V4Run r{w, c, std::vector<V4LayerState>(c.layers)};
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("layers.{}.attn.", l);
    if (c.ratios[l])
      r.layers[l].comp = compressor(p + "compressor", c.ratios[l], c.head_dim, false);
    if (c.ratios[l] == 4) {
      r.layers[l].index_comp = compressor(p + "indexer.compressor", 4, c.index_dim, true);
    }
  }
  QR_ASSIGN_OR_RETURN(fn, w.get("hc_head_fn", c.hc, c.hc * c.dim));
  QR_ASSIGN_OR_RETURN(base, w.vec("hc_head_base", c.hc));
  QR_ASSIGN_OR_RETURN(scale, w.vec("hc_head_scale", 1));
  QR_ASSIGN_OR_RETURN(norm, w.vec("norm.weight", c.dim));
  Matrix out{ids.size(), c.dim, Vec(ids.size() * c.dim)};
  for (std::uint64_t t = 0; t < ids.size(); ++t) {
    const Batch one{{0, 1}, {ids[t]}};
    QR_ASSIGN_OR_RETURN(e, embed_tokens(w.weights(), "embed.weight", c.vocab, c.dim, one));
    Matrix h = hc_expand(e, c.hc);
    for (std::uint64_t l = 0; l < c.layers; ++l) QR_TRY(block(r, l, h, ids[t], t));
    Matrix y = hc_head(hc_dims(c), fn->v, base->v, scale->v[0], h);
    Vec v(y.v.begin(), y.v.end());
    bf16_round(v);
    v4_rms(v, norm->v, static_cast<float>(c.eps));
    bf16_round(v);
    std::copy(v.begin(), v.end(), out.row(t));
  }
  return out;
}

}  // namespace qrepack::model
