#include "qrepack/model/decoder_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "io/fs_util.h"
#include "model/decoder_experts.h"
#include "model/deltanet.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void add_into(Matrix& h, const Matrix& x) {
  for (std::uint64_t i = 0; i < h.v.size(); ++i) h.v[i] += x.v[i];
}

// A softmax top-k routing decision: experts best first (ties: the lower index), weights
// renormalized when asked.
struct Route {
  std::vector<std::uint64_t> expert;
  std::vector<float> weight;
};
Route route_softmax(const float* logits, std::uint64_t e, std::uint64_t k, bool renormalize) {
  std::vector<float> p(logits, logits + e);
  model::softmax(p);
  std::vector<std::uint64_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint64_t x, std::uint64_t y) { return p[x] > p[y]; });
  Route r;
  for (std::uint64_t i = 0; i < k; ++i) {
    r.expert.push_back(order[i]);
    r.weight.push_back(p[order[i]]);
  }
  if (renormalize) {
    float sum = 0;
    for (float w : r.weight) sum += w;
    for (float& w : r.weight) w /= sum;
  }
  return r;
}

}  // namespace

struct DecoderForward::State {
  model::WeightCache w;
  DecoderConfig c;
  std::string prefix;  ///< "model." or "model.language_model."
  model::ExpertSource experts;
  model::Progress progress;
  bool attention_only = false;

  Status norm(Matrix& x, const std::string& name, std::uint64_t width);
  Result<Matrix> project(const std::string& p, const Matrix& x, std::uint64_t rows, bool bias);
  Status qk_norms(const std::string& p, Matrix& q, Matrix& k);
  Result<Matrix> attention(const std::string& p, const Matrix& x, const Batch& b,
                           const model::Rope& rope);
  Result<Matrix> deltanet(const std::string& p, const Matrix& x, const Batch& b);
  Result<Matrix> mlp(const std::string& p, const Matrix& x, std::uint64_t inter);
  Result<std::shared_ptr<const Matrix>> expert(std::uint64_t l, std::uint64_t e, int j);
  Result<Matrix> moe(const std::string& p, const Matrix& x, std::uint64_t layer);
  Result<std::vector<Matrix>> head(Matrix h, const Batch& b);
};

// RMSNorm of rows of `width` values (a per-head norm runs over [tokens * heads, head_dim]).
Status DecoderForward::State::norm(Matrix& x, const std::string& name, std::uint64_t width) {
  QR_ASSIGN_OR_RETURN(wt, w.vec(name, width));
  std::vector<float> weight = wt->v;
  if (c.zero_centered_norms) {
    for (float& v : weight) v = 1.0f + v;
  }
  Matrix view{x.v.size() / width, width, std::move(x.v)};
  model::rms_norm(view, weight, c.rms_norm_eps);
  x.v = std::move(view.v);
  return ok_status();
}

Result<Matrix> DecoderForward::State::project(const std::string& p, const Matrix& x,
                                              std::uint64_t rows, bool bias) {
  QR_ASSIGN_OR_RETURN(wt, w.get(p + ".weight", rows, x.cols));
  Matrix y = matmul(x, *wt);
  if (bias) {
    QR_ASSIGN_OR_RETURN(bv, w.vec(p + ".bias", rows));
    for (std::uint64_t t = 0; t < y.rows; ++t) {
      for (std::uint64_t o = 0; o < rows; ++o) y.row(t)[o] += bv->v[o];
    }
  }
  return y;
}

// q / k norms and clip_qkv, in each family's order.
Status DecoderForward::State::qk_norms(const std::string& p, Matrix& q, Matrix& k) {
  using QkNorm = DecoderConfig::QkNorm;
  if (c.qk_norm == QkNorm::kWhole) {  // OLMoE: over the whole projection
    QR_TRY(norm(q, p + "q_norm.weight", q.cols));
    QR_TRY(norm(k, p + "k_norm.weight", k.cols));
  } else if (c.qk_norm == QkNorm::kPerHead) {
    QR_TRY(norm(q, p + "q_norm.weight", c.head_dim));
    QR_TRY(norm(k, p + "k_norm.weight", c.head_dim));
  }
  return ok_status();
}

Result<Matrix> DecoderForward::State::attention(const std::string& p, const Matrix& x,
                                                const Batch& b, const model::Rope& rope) {
  const std::uint64_t nh = c.heads, kv = c.kv_heads, hd = c.head_dim, n = x.rows;
  const std::uint64_t q_rows = nh * hd * (c.attn_output_gate ? 2 : 1);
  QR_ASSIGN_OR_RETURN(qg, project(p + "q_proj", x, q_rows, c.attention_bias));
  QR_ASSIGN_OR_RETURN(k, project(p + "k_proj", x, kv * hd, c.attention_bias));
  QR_ASSIGN_OR_RETURN(v, project(p + "v_proj", x, kv * hd, c.attention_bias));
  Matrix q = qg, gate;
  if (c.attn_output_gate) {  // per head [query | gate]
    q = Matrix{n, nh * hd, std::vector<float>(n * nh * hd)};
    gate = q;
    for (std::uint64_t t = 0; t < n; ++t) {
      for (std::uint64_t h = 0; h < nh; ++h) {
        const float* src = qg.row(t) + h * 2 * hd;
        std::copy(src, src + hd, q.row(t) + h * hd);
        std::copy(src + hd, src + 2 * hd, gate.row(t) + h * hd);
      }
    }
  }
  QR_TRY(qk_norms(p, q, k));
  if (c.clip_qkv > 0) {
    const float lim = static_cast<float>(c.clip_qkv);
    for (Matrix* m : {&q, &k, &v}) {
      for (float& e : m->v) e = std::clamp(e, -lim, lim);
    }
  }
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    for (std::uint64_t t = b.start[s]; t < b.start[s + 1]; ++t) {
      const std::uint64_t pos = t - b.start[s];
      for (std::uint64_t h = 0; h < nh; ++h) rope.apply(q.row(t) + h * hd, pos, false);
      for (std::uint64_t h = 0; h < kv; ++h) rope.apply(k.row(t) + h * hd, pos, false);
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::uint64_t group = nh / kv;
  Matrix out{n, nh * hd, std::vector<float>(n * nh * hd)};
  parallel_for(b.sequences() * nh, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> pr;
    for (std::size_t job = lo; job < hi; ++job) {
      const std::uint64_t s = job / nh, h = job % nh, g = h / group, t0 = b.start[s];
      for (std::uint64_t i = t0; i < b.start[s + 1]; ++i) {
        pr.assign(i - t0 + 1, 0.0f);
        for (std::uint64_t j = t0; j <= i; ++j) {
          pr[j - t0] = model::dot(q.row(i) + h * hd, k.row(j) + g * hd, hd) * scale;
        }
        model::softmax(pr);
        float* o = out.row(i) + h * hd;
        for (std::uint64_t j = t0; j <= i; ++j) {
          const float* vj = v.row(j) + g * hd;
          for (std::uint64_t e = 0; e < hd; ++e) o[e] += pr[j - t0] * vj[e];
        }
      }
    }
  });
  if (c.attn_output_gate) {
    for (std::uint64_t i = 0; i < out.v.size(); ++i) out.v[i] *= sigmoid(gate.v[i]);
  }
  return project(p + "o_proj", out, c.hidden_size, c.attention_bias);
}

Result<Matrix> DecoderForward::State::deltanet(const std::string& p, const Matrix& x,
                                               const Batch& b) {
  const model::DeltaNetDims d{c.key_heads,      c.key_head_dim, c.value_heads,
                              c.value_head_dim, c.conv_kernel,  c.rms_norm_eps};
  const std::uint64_t vw = d.value_heads * d.value_dim;
  QR_ASSIGN_OR_RETURN(qkv, project(p + "in_proj_qkv", x, d.conv_channels(), false));
  QR_ASSIGN_OR_RETURN(z, project(p + "in_proj_z", x, vw, false));
  QR_ASSIGN_OR_RETURN(bb, project(p + "in_proj_b", x, d.value_heads, false));
  QR_ASSIGN_OR_RETURN(aa, project(p + "in_proj_a", x, d.value_heads, false));
  QR_ASSIGN_OR_RETURN(conv,
                      w.weights().read_floats(p + "conv1d.weight", d.conv_channels() * d.kernel));
  QR_ASSIGN_OR_RETURN(a_log, w.vec(p + "A_log", d.value_heads));
  QR_ASSIGN_OR_RETURN(dt, w.vec(p + "dt_bias", d.value_heads));
  QR_ASSIGN_OR_RETURN(nw, w.vec(p + "norm.weight", d.value_dim));
  const model::DeltaNetParams params{conv, a_log->v, dt->v, nw->v};
  Matrix out{x.rows, vw, std::vector<float>(x.rows * vw)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t0 = b.start[s], t = b.start[s + 1] - t0;
    model::gated_deltanet(d, params, t, qkv.row(t0), z.row(t0), bb.row(t0), aa.row(t0),
                          out.row(t0));
  }
  return project(p + "out_proj", out, c.hidden_size, false);
}

Result<Matrix> DecoderForward::State::mlp(const std::string& p, const Matrix& x,
                                          std::uint64_t inter) {
  QR_ASSIGN_OR_RETURN(g, project(p + "gate_proj", x, inter, false));
  QR_ASSIGN_OR_RETURN(u, project(p + "up_proj", x, inter, false));
  model::swiglu(g, u);
  return project(p + "down_proj", g, c.hidden_size, false);
}

// Expert e of layer l's projection j (gate, up, down), decoded once per budget.
Result<std::shared_ptr<const Matrix>> DecoderForward::State::expert(std::uint64_t l,
                                                                    std::uint64_t e, int j) {
  const auto key = [&](int k) { return fmt::format("expert {} {} {}", l, e, k); };
  if (auto m = w.find(key(j))) return m;
  QR_ASSIGN_OR_RETURN(m, experts.read(l, e));
  auto gate = w.keep(key(0), std::move(m.gate));
  auto up = w.keep(key(1), std::move(m.up));
  auto down = w.keep(key(2), std::move(m.down));
  return j == 0 ? gate : j == 1 ? up : down;
}

Result<Matrix> DecoderForward::State::moe(const std::string& p, const Matrix& x,
                                          std::uint64_t layer) {
  const std::uint64_t d = c.hidden_size, e = c.experts, n = x.rows;
  QR_ASSIGN_OR_RETURN(logits, project(p + "gate", x, e, false));
  std::vector<std::vector<std::pair<std::uint64_t, float>>> by_expert(e);
  for (std::uint64_t t = 0; t < n; ++t) {
    const Route r = route_softmax(logits.row(t), e, c.experts_per_tok, c.norm_topk_prob);
    for (std::size_t k = 0; k < r.expert.size(); ++k) {
      by_expert[r.expert[k]].emplace_back(t, r.weight[k]);
    }
  }
  Matrix out{n, d, std::vector<float>(n * d)};
  for (std::uint64_t ex = 0; ex < e; ++ex) {
    const auto& toks = by_expert[ex];
    if (toks.empty()) continue;
    Matrix xe{toks.size(), d, std::vector<float>(toks.size() * d)};
    for (std::size_t i = 0; i < toks.size(); ++i) {
      std::copy(x.row(toks[i].first), x.row(toks[i].first) + d, xe.row(i));
    }
    QR_ASSIGN_OR_RETURN(wg, expert(layer, ex, 0));
    QR_ASSIGN_OR_RETURN(wu, expert(layer, ex, 1));
    QR_ASSIGN_OR_RETURN(wd, expert(layer, ex, 2));
    Matrix g = matmul(xe, *wg);
    model::swiglu(g, matmul(xe, *wu));
    const Matrix y = matmul(g, *wd);
    for (std::size_t i = 0; i < toks.size(); ++i) {
      float* o = out.row(toks[i].first);
      for (std::uint64_t k = 0; k < d; ++k) o[k] += y.row(i)[k] * toks[i].second;
    }
  }
  if (c.shared_expert_intermediate_size > 0) {
    QR_ASSIGN_OR_RETURN(shared, mlp(p + "shared_expert.", x, c.shared_expert_intermediate_size));
    QR_ASSIGN_OR_RETURN(sg, project(p + "shared_expert_gate", x, 1, false));
    for (std::uint64_t t = 0; t < n; ++t) {
      const float gate = sigmoid(sg.v[t]);
      for (std::uint64_t k = 0; k < d; ++k) out.row(t)[k] += gate * shared.row(t)[k];
    }
  }
  return out;
}

Result<std::vector<Matrix>> DecoderForward::State::head(Matrix h, const Batch& b) {
  QR_TRY(norm(h, prefix + "norm.weight", c.hidden_size));
  const std::string name =
      model::head_weight_name(w.weights(), c.tie_word_embeddings, prefix + "embed_tokens.weight");
  return model::vocab_logits(w, name, c.vocab_size, h, b);
}

DecoderForward::DecoderForward(std::unique_ptr<State> s) : s_(std::move(s)) {}
DecoderForward::DecoderForward(DecoderForward&&) noexcept = default;
DecoderForward& DecoderForward::operator=(DecoderForward&&) noexcept = default;
DecoderForward::~DecoderForward() = default;

Result<DecoderForward> DecoderForward::open(const std::string& path,
                                            const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open_by_names(path));
  QR_ASSIGN_OR_RETURN(config_dir, model::config_dir_of(w, path, fallback_config_dir));
  QR_ASSIGN_OR_RETURN(cfg, load_decoder_config(config_dir));
  const std::string prefix =
      w.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  auto st = std::make_unique<State>(State{
      model::WeightCache(std::move(w)), std::move(cfg), prefix, model::ExpertSource(), {}, false});
  QR_ASSIGN_OR_RETURN(ex, model::ExpertSource::make(st->w.weights(), prefix, st->c.hidden_size,
                                                    st->c.moe_intermediate_size));
  st->experts = std::move(ex);
  return DecoderForward(std::move(st));
}

const DecoderConfig& DecoderForward::config() const { return s_->c; }
const std::string& DecoderForward::model_type() const { return s_->c.model_type; }
std::uint64_t DecoderForward::vocab_size() const { return s_->c.vocab_size; }
std::uint64_t DecoderForward::hidden_size() const { return s_->c.hidden_size; }
std::uint64_t DecoderForward::layer_count() const { return s_->c.num_layers; }
const std::string& DecoderForward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> DecoderForward::input_files() const {
  return model::pass_input_files(s_->w.weights());
}
void DecoderForward::set_cache_budget(std::uint64_t bytes) { s_->w.set_budget(bytes); }
void DecoderForward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}
void DecoderForward::set_attention_only(bool on) { s_->attention_only = on; }

Result<std::vector<Matrix>> DecoderForward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const DecoderConfig& c = st.c;
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, c.vocab_size));
  std::vector<float> inv_freq = model::Rope::default_inv_freq(c.rotary_dim, c.rope_theta);
  if (c.llama3_factor > 0) {
    inv_freq = model::Rope::llama3_inv_freq(std::move(inv_freq), c.llama3_factor, c.llama3_low,
                                            c.llama3_high, c.llama3_original);
  }
  const auto rope = model::Rope::from_inv_freq(inv_freq, b.longest());
  QR_ASSIGN_OR_RETURN(h, model::embed_tokens(st.w.weights(), st.prefix + "embed_tokens.weight",
                                             c.vocab_size, c.hidden_size, b));
  for (std::uint64_t l = 0; l < c.num_layers; ++l) {
    const bool linear = c.linear_layer[l];
    if (linear && st.attention_only) continue;
    st.progress.say(fmt::format("layer {}/{} ({}{})", l + 1, c.num_layers,
                                linear ? "DeltaNet" : "attention", c.moe_layer[l] ? ", MoE" : ""));
    const std::string p = fmt::format("{}layers.{}.", st.prefix, l);
    Matrix x = h;
    QR_TRY(st.norm(x, p + "input_layernorm.weight", c.hidden_size));
    Result<Matrix> a =
        linear ? st.deltanet(p + "linear_attn.", x, b) : st.attention(p + "self_attn.", x, b, rope);
    if (!a.ok()) return std::move(a.error());
    add_into(h, *a);
    x = h;
    QR_TRY(st.norm(x, p + "post_attention_layernorm.weight", c.hidden_size));
    Result<Matrix> m =
        c.moe_layer[l] ? st.moe(p + "mlp.", x, l) : st.mlp(p + "mlp.", x, c.intermediate_size);
    if (!m.ok()) return std::move(m.error());
    add_into(h, *m);
  }
  st.progress.say("lm_head");
  return st.head(std::move(h), b);
}

}  // namespace qrepack
