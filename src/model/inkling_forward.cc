// Inkling's text model as c/inkling.c computes it (qrepack/model/inkling_forward.h): the
// arithmetic of step_mm, attention, sconv_apply, dense_mlp and moe, over all sequences at once
// (each sequence's rows, its own short-convolution history from zero), one layer at a time.
#include "qrepack/model/inkling_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "io/fs_util.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/inkling_weights.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {

using model::AttnMatrix;
using model::Batch;
using model::GatedMlp;
using model::LayerVector;
using model::matmul;

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void add_into(Matrix& h, const Matrix& x) {
  for (std::uint64_t i = 0; i < h.v.size(); ++i) h.v[i] += x.v[i];
}

// RMSNorm of rows of `width` values in place (a per-head norm runs over [tokens x heads, hd]).
void norm_rows(Matrix& x, std::span<const float> w, std::uint64_t width, float eps) {
  Matrix view{x.v.size() / width, width, std::move(x.v)};
  model::rms_norm(view, w, eps);
  x.v = std::move(view.v);
}

// sconv_apply: each sequence's rows of `x` [tokens, C] through a depthwise causal convolution
// of kernel K (weights [C][K]) with zero history, the input added back:
// out[t] = sum_j w[j] * in[t + j - (K - 1)] + in[t]. Channels run in parallel, each in order.
void short_conv(Matrix& x, const std::vector<float>& w, std::uint64_t k, const Batch& b) {
  const std::uint64_t ch = x.cols, pad = k - 1;
  parallel_for(ch, 16, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> col;
    for (std::size_t c = lo; c < hi; ++c) {
      const float* wc = w.data() + c * k;
      for (std::uint64_t s = 0; s < b.sequences(); ++s) {
        const std::uint64_t t0 = b.start[s], n = b.start[s + 1] - t0;
        col.assign(pad + n, 0.0f);
        for (std::uint64_t t = 0; t < n; ++t) col[pad + t] = x.row(t0 + t)[c];
        for (std::uint64_t t = 0; t < n; ++t) {
          float acc = 0.0f;
          for (std::uint64_t j = 0; j < k; ++j) acc += wc[j] * col[t + j];
          x.row(t0 + t)[c] = acc + col[pad + t];
        }
      }
    }
  });
}

}  // namespace

struct InklingForward::State {
  InklingConfig c;
  model::InklingWeights w;
  model::Progress progress;
  std::uint64_t budget = 0, used = 0;
  std::unordered_map<std::string, std::shared_ptr<const Matrix>> cache;

  // Decoded weights kept while they fit the budget (greedy generation reruns the model).
  std::shared_ptr<const Matrix> keep(const std::string& key, Matrix m);
  std::shared_ptr<const Matrix> find(const std::string& key) const;
  Result<std::shared_ptr<const Matrix>> attn_matrix(std::uint64_t l, AttnMatrix m);
  Result<std::shared_ptr<const Matrix>> vector(std::uint64_t l, LayerVector v);
  Result<std::array<std::shared_ptr<const Matrix>, 3>> mlp(const std::string& kind, std::uint64_t l,
                                                           std::uint64_t e);

  Result<Matrix> attention(std::uint64_t l, const Matrix& x, const Batch& b);
  Result<Matrix> dense(std::uint64_t l, const Matrix& x);
  Result<Matrix> moe(std::uint64_t l, const Matrix& x);
  Result<std::vector<Matrix>> head(Matrix h, const Batch& b);
};

std::shared_ptr<const Matrix> InklingForward::State::keep(const std::string& key, Matrix m) {
  auto p = std::make_shared<const Matrix>(std::move(m));
  const std::uint64_t bytes = p->v.size() * sizeof(float);
  if (used + bytes <= budget) {
    cache.emplace(key, p);
    used += bytes;
  }
  return p;
}

std::shared_ptr<const Matrix> InklingForward::State::find(const std::string& key) const {
  const auto it = cache.find(key);
  return it == cache.end() ? nullptr : it->second;
}

Result<std::shared_ptr<const Matrix>> InklingForward::State::attn_matrix(std::uint64_t l,
                                                                         AttnMatrix m) {
  const std::string key = fmt::format("attn {} {}", l, static_cast<int>(m));
  if (auto p = find(key)) return p;
  QR_ASSIGN_OR_RETURN(v, w.attention(l, m));
  return keep(key, std::move(v));
}

Result<std::shared_ptr<const Matrix>> InklingForward::State::vector(std::uint64_t l,
                                                                    LayerVector v) {
  const std::string key = fmt::format("vec {} {}", l, static_cast<int>(v));
  if (auto p = find(key)) return p;
  QR_ASSIGN_OR_RETURN(f, w.vector(l, v));
  const std::uint64_t n = f.size();
  return keep(key, Matrix{1, n, std::move(f)});
}

// A dense MLP ("dense"), routed expert e ("expert") or shared expert e ("shared") of layer l:
// gate, up, down.
Result<std::array<std::shared_ptr<const Matrix>, 3>> InklingForward::State::mlp(
    const std::string& kind, std::uint64_t l, std::uint64_t e) {
  const auto key = [&](int j) { return fmt::format("{} {} {} {}", kind, l, e, j); };
  if (auto g = find(key(0)), u = find(key(1)), d = find(key(2)); g && u && d) {
    return std::array<std::shared_ptr<const Matrix>, 3>{g, u, d};
  }
  Result<GatedMlp> m = kind == "dense"    ? w.dense(l)
                       : kind == "shared" ? w.shared_expert(l, e)
                                          : w.expert(l, e);
  if (!m.ok()) return std::move(m.error());
  return std::array<std::shared_ptr<const Matrix>, 3>{keep(key(0), std::move(m->gate)),
                                                      keep(key(1), std::move(m->up)),
                                                      keep(key(2), std::move(m->down))};
}

Result<Matrix> InklingForward::State::attention(std::uint64_t l, const Matrix& x, const Batch& b) {
  const std::uint64_t nh = c.heads_of(l), kvh = c.kv_of(l), hd = c.head_dim_of(l);
  const std::uint64_t ext = c.extent_of(l), drel = c.d_rel, n = x.rows, group = nh / kvh;
  const bool sliding = c.sliding[l];
  QR_ASSIGN_OR_RETURN(wq, attn_matrix(l, AttnMatrix::kQ));
  QR_ASSIGN_OR_RETURN(wk, attn_matrix(l, AttnMatrix::kK));
  QR_ASSIGN_OR_RETURN(wv, attn_matrix(l, AttnMatrix::kV));
  QR_ASSIGN_OR_RETURN(wr, attn_matrix(l, AttnMatrix::kR));
  QR_ASSIGN_OR_RETURN(kc, vector(l, LayerVector::kKConv));
  QR_ASSIGN_OR_RETURN(vc, vector(l, LayerVector::kVConv));
  QR_ASSIGN_OR_RETURN(qn, vector(l, LayerVector::kQNorm));
  QR_ASSIGN_OR_RETURN(kn, vector(l, LayerVector::kKNorm));
  QR_ASSIGN_OR_RETURN(bank, vector(l, LayerVector::kRelBank));
  Matrix q = matmul(x, *wq), k = matmul(x, *wk), v = matmul(x, *wv);
  const Matrix r = matmul(x, *wr);
  // The short convolutions run over the raw projections, before the per-head norms.
  short_conv(k, kc->v, c.conv_kernel, b);
  short_conv(v, vc->v, c.conv_kernel, b);
  norm_rows(q, qn->v, hd, c.eps);
  norm_rows(k, kn->v, hd, c.eps);
  // q and k are RMS-normalized per head, so the scores scale by 1 / hd.
  const float scale = 1.0f / static_cast<float>(hd);
  Matrix ctx{n, nh * hd, std::vector<float>(n * nh * hd)};
  parallel_for(b.sequences() * nh, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> rel(ext), pr;
    for (std::size_t job = lo; job < hi; ++job) {
      const std::uint64_t s = job / nh, h = job % nh, g = h / group, t0 = b.start[s];
      for (std::uint64_t i = t0; i < b.start[s + 1]; ++i) {
        const std::uint64_t pos = i - t0;
        const std::uint64_t first = sliding && pos + 1 > c.window ? pos + 1 - c.window : 0;
        // The bias per backward distance: this head's d_rel values mixing the bank's rows.
        const float* rv = r.row(i) + h * drel;
        const std::uint64_t reach = std::min(ext, pos - first + 1);
        for (std::uint64_t e = 0; e < reach; ++e) {
          float acc = 0.0f;
          for (std::uint64_t d = 0; d < drel; ++d) acc += rv[d] * bank->v[d * ext + e];
          rel[e] = acc;
        }
        // Log-length scaling on global layers past log_scaling_n_floor tokens.
        float tau = 1.0f;
        if (!sliding && c.log_floor > 0) {
          const double en = static_cast<double>(pos + 1) / c.log_floor;
          if (en > 1.0) tau = 1.0f + c.log_alpha * static_cast<float>(std::log(en));
        }
        const float* qi = q.row(i) + h * hd;
        pr.assign(pos - first + 1, 0.0f);
        for (std::uint64_t j = first; j <= pos; ++j) {
          const std::uint64_t dist = pos - j;
          const float bias = dist < ext ? rel[dist] : 0.0f;
          pr[j - first] = tau * (model::dot(qi, k.row(t0 + j) + g * hd, hd) * scale + bias);
        }
        model::softmax(pr);
        float* o = ctx.row(i) + h * hd;
        for (std::uint64_t j = first; j <= pos; ++j) {
          const float* vj = v.row(t0 + j) + g * hd;
          for (std::uint64_t e = 0; e < hd; ++e) o[e] += pr[j - first] * vj[e];
        }
      }
    }
  });
  QR_ASSIGN_OR_RETURN(wo, attn_matrix(l, AttnMatrix::kO));
  return matmul(ctx, *wo);
}

Result<Matrix> InklingForward::State::dense(std::uint64_t l, const Matrix& x) {
  QR_ASSIGN_OR_RETURN(m, mlp("dense", l, 0));
  QR_ASSIGN_OR_RETURN(scale, w.global_scale(l));
  Matrix g = matmul(x, *m[0]);
  model::swiglu(g, matmul(x, *m[1]));
  Matrix out = matmul(g, *m[2]);
  for (float& e : out.v) e *= scale;
  return out;
}

// The router chooses top_k routed experts by sigmoid(logit) + bias (the first on ties); the
// chosen and every shared expert weigh sigmoid(logit) / their sum * route_scale *
// gate.global_scale. Each token's output sums its routed experts in the order chosen, then the
// shared ones, as moe() does.
Result<Matrix> InklingForward::State::moe(std::uint64_t l, const Matrix& x) {
  const std::uint64_t d = c.hidden, ne = c.experts, ns = c.shared, kk = c.top_k, n = x.rows;
  QR_ASSIGN_OR_RETURN(router_v, vector(l, LayerVector::kRouter));
  QR_ASSIGN_OR_RETURN(bias, vector(l, LayerVector::kRouterBias));
  QR_ASSIGN_OR_RETURN(gscale, w.global_scale(l));
  const Matrix router{ne + ns, d, router_v->v};
  const Matrix logits = matmul(x, router);
  std::vector<std::uint64_t> chosen(n * kk);
  std::vector<float> weight(n * (kk + ns));
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> by_expert(ne);
  for (std::uint64_t t = 0; t < n; ++t) {
    const float* lg = logits.row(t);
    std::uint64_t* sel = chosen.data() + t * kk;
    for (std::uint64_t k = 0; k < kk; ++k) {
      std::uint64_t best = 0;
      float best_v = -INFINITY;
      bool found = false;
      for (std::uint64_t e = 0; e < ne; ++e) {
        if (std::find(sel, sel + k, e) != sel + k) continue;
        const float score = sigmoid(lg[e]) + bias->v[e];
        if (!found || score > best_v) best = e, best_v = score, found = true;
      }
      sel[k] = best;
      by_expert[best].emplace_back(t, k);
    }
    float* wt = weight.data() + t * (kk + ns);
    float sum = 0.0f;
    for (std::uint64_t k = 0; k < kk; ++k) sum += wt[k] = sigmoid(lg[sel[k]]);
    for (std::uint64_t j = 0; j < ns; ++j) sum += wt[kk + j] = sigmoid(lg[ne + j]);
    const float f = c.route_scale * gscale / sum;
    for (std::uint64_t k = 0; k < kk + ns; ++k) wt[k] *= f;
  }
  // Each routed expert's outputs, for the tokens choosing it, at [token x top_k + slot].
  Matrix routed{n * kk, d, std::vector<float>(n * kk * d)};
  for (std::uint64_t e = 0; e < ne; ++e) {
    const auto& toks = by_expert[e];
    if (toks.empty()) continue;
    Matrix xe{toks.size(), d, std::vector<float>(toks.size() * d)};
    for (std::size_t i = 0; i < toks.size(); ++i) {
      std::copy(x.row(toks[i].first), x.row(toks[i].first) + d, xe.row(i));
    }
    QR_ASSIGN_OR_RETURN(m, mlp("expert", l, e));
    Matrix g = matmul(xe, *m[0]);
    model::swiglu(g, matmul(xe, *m[1]));
    const Matrix y = matmul(g, *m[2]);
    for (std::size_t i = 0; i < toks.size(); ++i) {
      std::copy(y.row(i), y.row(i) + d, routed.row(toks[i].first * kk + toks[i].second));
    }
  }
  std::vector<Matrix> shared;
  for (std::uint64_t j = 0; j < ns; ++j) {
    QR_ASSIGN_OR_RETURN(m, mlp("shared", l, j));
    Matrix g = matmul(x, *m[0]);
    model::swiglu(g, matmul(x, *m[1]));
    shared.push_back(matmul(g, *m[2]));
  }
  Matrix out{n, d, std::vector<float>(n * d)};
  for (std::uint64_t t = 0; t < n; ++t) {
    float* o = out.row(t);
    const float* wt = weight.data() + t * (kk + ns);
    for (std::uint64_t k = 0; k < kk; ++k) {
      const float* y = routed.row(t * kk + k);
      for (std::uint64_t i = 0; i < d; ++i) o[i] += wt[k] * y[i];
    }
    for (std::uint64_t j = 0; j < ns; ++j) {
      const float* y = shared[j].row(t);
      for (std::uint64_t i = 0; i < d; ++i) o[i] += wt[kk + j] * y[i];
    }
  }
  return out;
}

// The final norm, the hidden state divided by logits_mup_width_multiplier, and the first
// unpadded_vocab_size rows of lm_head, read in blocks.
Result<std::vector<Matrix>> InklingForward::State::head(Matrix h, const Batch& b) {
  QR_ASSIGN_OR_RETURN(fnorm, w.final_norm());
  model::rms_norm(h, fnorm, c.eps);
  for (float& e : h.v) e /= c.mup;
  const auto block = [&](std::uint64_t r0,
                         std::uint64_t n) -> Result<std::shared_ptr<const Matrix>> {
    const std::string key = fmt::format("head {}", r0);
    if (auto kept = find(key)) return kept;
    QR_ASSIGN_OR_RETURN(m, w.head(r0, n));
    return keep(key, std::move(m));
  };
  return model::vocab_logits(block, c.unpadded_vocab, h, b);
}

InklingForward::InklingForward(std::unique_ptr<State> s) : s_(std::move(s)) {}
InklingForward::InklingForward(InklingForward&&) noexcept = default;
InklingForward& InklingForward::operator=(InklingForward&&) noexcept = default;
InklingForward::~InklingForward() = default;

Result<InklingForward> InklingForward::open(const std::string& path,
                                            const std::string& fallback_config_dir) {
  // Headers only, then the config: a variant the pass does not implement is refused before
  // any weight is read.
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open_by_names(path));
  QR_ASSIGN_OR_RETURN(config_dir, model::config_dir_of(w, path, fallback_config_dir));
  QR_ASSIGN_OR_RETURN(cfg, load_inkling_config(config_dir));
  QR_ASSIGN_OR_RETURN(iw, model::InklingWeights::make(std::move(w), cfg));
  auto st = std::make_unique<State>(State{std::move(cfg), std::move(iw), {}, 0, 0, {}});
  return InklingForward(std::move(st));
}

const InklingConfig& InklingForward::config() const { return s_->c; }
const std::string& InklingForward::model_type() const { return s_->c.model_type; }
std::uint64_t InklingForward::vocab_size() const { return s_->c.unpadded_vocab; }
std::uint64_t InklingForward::hidden_size() const { return s_->c.hidden; }
std::uint64_t InklingForward::layer_count() const { return s_->c.layers; }
const std::string& InklingForward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> InklingForward::input_files() const {
  return model::pass_input_files(s_->w.weights());
}
void InklingForward::set_cache_budget(std::uint64_t bytes) { s_->budget = bytes; }
void InklingForward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}
bool InklingForward::uses_dense_overlay() const { return s_->w.has_overlay(); }

Result<std::vector<Matrix>> InklingForward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const InklingConfig& c = st.c;
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, c.vocab));
  Matrix h{b.tokens(), c.hidden, std::vector<float>(b.tokens() * c.hidden)};
  std::unordered_map<std::uint32_t, std::vector<float>> rows;
  for (std::uint64_t t = 0; t < b.tokens(); ++t) {
    auto it = rows.find(b.ids[t]);
    if (it == rows.end()) {
      QR_ASSIGN_OR_RETURN(r, st.w.embedding(b.ids[t], 1));
      it = rows.emplace(b.ids[t], std::move(r.v)).first;
    }
    std::copy(it->second.begin(), it->second.end(), h.row(t));
  }
  QR_ASSIGN_OR_RETURN(enorm, st.w.embed_norm());
  if (enorm) model::rms_norm(h, *enorm, c.eps);
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    st.progress.say(fmt::format("layer {}/{} ({}, {})", l + 1, c.layers,
                                c.sliding[l] ? "sliding" : "global",
                                c.sparse[l] ? "MoE" : "dense"));
    QR_ASSIGN_OR_RETURN(in_norm, st.vector(l, LayerVector::kInputNorm));
    QR_ASSIGN_OR_RETURN(post_norm, st.vector(l, LayerVector::kPostNorm));
    QR_ASSIGN_OR_RETURN(attn_conv, st.vector(l, LayerVector::kAttnConv));
    QR_ASSIGN_OR_RETURN(mlp_conv, st.vector(l, LayerVector::kMlpConv));
    Matrix x = h;
    model::rms_norm(x, in_norm->v, c.eps);
    QR_ASSIGN_OR_RETURN(a, st.attention(l, x, b));
    short_conv(a, attn_conv->v, c.conv_kernel, b);
    add_into(h, a);
    x = h;
    model::rms_norm(x, post_norm->v, c.eps);
    Result<Matrix> m = c.sparse[l] ? st.moe(l, x) : st.dense(l, x);
    if (!m.ok()) return std::move(m.error());
    short_conv(*m, mlp_conv->v, c.conv_kernel, b);
    add_into(h, *m);
  }
  st.progress.say("lm_head");
  return st.head(std::move(h), b);
}

}  // namespace qrepack
