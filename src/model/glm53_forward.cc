#include "qrepack/model/glm53_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>

#include "model/deltanet.h"
#include "model/dsa_indexer.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/glm53_config.h"
#include "model/hyper_connections.h"
#include "model/mla.h"
#include "model/moe_routing.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

// The indexer key's LayerNorm (weight and bias, eps 1e-5 as c/glm53.c), in place per row.
void layer_norm(Matrix& x, std::span<const float> w, std::span<const float> b) {
  const std::uint64_t n = x.cols;
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    float* r = x.row(t);
    float mean = 0.0f, var = 0.0f;
    for (std::uint64_t i = 0; i < n; ++i) mean += r[i];
    mean /= static_cast<float>(n);
    for (std::uint64_t i = 0; i < n; ++i) var += (r[i] - mean) * (r[i] - mean);
    var /= static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(var + 1e-5f);
    for (std::uint64_t i = 0; i < n; ++i) r[i] = (r[i] - mean) * inv * w[i] + b[i];
  }
}

void add_into(Matrix& y, const Matrix& x) {
  for (std::uint64_t i = 0; i < y.v.size(); ++i) y.v[i] += x.v[i];
}

}  // namespace

bool is_glm53_model_type(const std::string& model_type) {
  return model_type == "glm5_next" || model_type == "glm5_next_text";
}

struct Glm53Forward::State {
  model::WeightCache w;
  model::Glm53ForwardConfig c;
  std::string pfx;  ///< "model.language_model.", or "model." for a text-only export
  model::Progress progress;

  const model::Glm53Dims& d() const { return c.d; }
  model::HcDims hc() const {
    return {d().hc_mult, d().hidden, d().hc_iters, static_cast<float>(c.eps), c.hc_eps};
  }
  Result<Matrix> project(const std::string& name, const Matrix& x, std::uint64_t out) {
    QR_ASSIGN_OR_RETURN(m, w.get(pfx + name, out, x.cols));
    return matmul(x, *m);
  }
  Status norm(Matrix& x, const std::string& name) {
    QR_ASSIGN_OR_RETURN(wt, w.vec(pfx + name, x.cols));
    model::rms_norm(x, wt->v, c.eps);
    return ok_status();
  }

  Result<Matrix> kda(const std::string& p, const Matrix& x, const Batch& b);
  Result<model::KeySelection> index(const std::string& p, const Matrix& x, const Batch& b);
  Result<Matrix> mla(const std::string& p, const Matrix& x, const Batch& b);
  Result<Matrix> glu(const std::string& p, const Matrix& x, std::uint64_t inter);
  Result<Matrix> moe(const std::string& p, const Matrix& x);
  Result<Matrix> layer(std::uint64_t l, Matrix streams, const Batch& b);
};

// KDA: q, k, v through one causal conv over their concatenated channels (the runtime's three
// convs, channel by channel the same), the delta rule with per-key decay, the low-rank gate.
Result<Matrix> Glm53Forward::State::kda(const std::string& p, const Matrix& x, const Batch& b) {
  const std::uint64_t H = d().kda_heads, hd = d().kda_head_dim, P = d().kda_proj();
  const std::uint64_t K = d().conv_kernel, n = x.rows;
  const model::DeltaNetDims dims{H,
                                 hd,
                                 H,
                                 hd,
                                 K,
                                 c.eps,
                                 model::DeltaDecay::kPerKey,
                                 model::DeltaGate::kSigmoid,
                                 c.gate_lower_bound};
  // Each projection and conv kernel is read (its stored shape checked) before anything sized
  // by the config is allocated.
  std::vector<Matrix> proj;
  std::vector<float> conv;
  const char* names[3] = {"q", "k", "v"};
  for (const char* nm : names) {
    QR_ASSIGN_OR_RETURN(y, project(fmt::format("{}{}_proj.weight", p, nm), x, P));
    proj.push_back(std::move(y));
    QR_ASSIGN_OR_RETURN(
        taps, w.weights().read_floats(fmt::format("{}{}{}_conv1d.weight", pfx, p, nm), P * K));
    conv.insert(conv.end(), taps.begin(), taps.end());
  }
  Matrix qkv{n, 3 * P, std::vector<float>(n * 3 * P)};
  for (std::uint64_t j = 0; j < 3; ++j) {
    for (std::uint64_t t = 0; t < n; ++t) {
      std::copy(proj[j].row(t), proj[j].row(t) + P, qkv.row(t) + j * P);
    }
  }
  QR_ASSIGN_OR_RETURN(ga, project(p + "g_a_proj.weight", x, hd));
  QR_ASSIGN_OR_RETURN(g, project(p + "g_b_proj.weight", ga, P));
  QR_ASSIGN_OR_RETURN(fa, project(p + "f_a_proj.weight", x, hd));
  QR_ASSIGN_OR_RETURN(decay_in, project(p + "f_b_proj.weight", fa, P));
  QR_ASSIGN_OR_RETURN(beta_in, project(p + "b_proj.weight", x, H));
  // A_log: one value per head (the first H when stored padded, as Kimi K3's release does).
  QR_ASSIGN_OR_RETURN(a_log, w.weights().read_leading_floats(pfx + p + "A_log", H, std::max(P, H)));
  QR_ASSIGN_OR_RETURN(dt, w.vec(pfx + p + "dt_bias", P));
  QR_ASSIGN_OR_RETURN(onw, w.vec(pfx + p + "o_norm.weight", hd));
  const model::DeltaNetParams params{conv, a_log, dt->v, onw->v};
  Matrix out{n, P, std::vector<float>(n * P)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t0 = b.start[s], t = b.start[s + 1] - t0;
    model::gated_deltanet(dims, params, t, qkv.row(t0), g.row(t0), beta_in.row(t0),
                          decay_in.row(t0), out.row(t0));
  }
  return project(p + "o_proj.weight", out, d().hidden);
}

// The DSA indexer: queries from the normed q_a, keys LayerNorm(wk x), pooling gates
// index_kpool_compress_gate x, head weights weights_proj x / sqrt(heads); then the k-pooled
// selection per sequence.
Result<model::KeySelection> Glm53Forward::State::index(const std::string& p, const Matrix& x,
                                                       const Batch& b) {
  const model::Glm53Dims& k = d();
  const std::string ix = p + "indexer.";
  QR_ASSIGN_OR_RETURN(qa, project(p + "q_a_proj.weight", x, k.q_lora));
  QR_TRY(norm(qa, p + "q_a_layernorm.weight"));
  QR_ASSIGN_OR_RETURN(iq, project(ix + "wq_b.weight", qa, k.index_heads * k.index_dim));
  QR_ASSIGN_OR_RETURN(keys, project(ix + "wk.weight", x, k.index_dim));
  QR_ASSIGN_OR_RETURN(knw, w.vec(pfx + ix + "k_norm.weight", k.index_dim));
  QR_ASSIGN_OR_RETURN(knb, w.vec(pfx + ix + "k_norm.bias", k.index_dim));
  layer_norm(keys, knw->v, knb->v);
  QR_ASSIGN_OR_RETURN(gates, project(ix + "index_kpool_compress_gate", x, k.index_dim));
  QR_ASSIGN_OR_RETURN(hw, project(ix + "weights_proj.weight", x, k.index_heads));
  for (float& v : hw.v) v /= std::sqrt(static_cast<float>(k.index_heads));
  QR_ASSIGN_OR_RETURN(ape, w.get(pfx + ix + "index_kpool_compress_ape", k.kpool, k.index_dim));
  const model::KpoolIndexDims id{k.index_heads, k.index_dim, k.kpool, k.index_topk, k.kpool_tail};
  model::KeySelection sel;
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t0 = b.start[s];
    model::kpool_select(id, b.start[s + 1] - t0, iq.row(t0), keys.row(t0), gates.row(t0),
                        hw.row(t0), ape->v.data(), sel);
  }
  return sel;
}

// NoPE MLA over the indexer's selection, then o_proj (GLM-5.3's MLA layers are not gated).
Result<Matrix> Glm53Forward::State::mla(const std::string& p, const Matrix& x, const Batch& b) {
  const model::Glm53Dims& k = d();
  QR_ASSIGN_OR_RETURN(sel, index(p, x, b));
  const model::MlaDims dims{k.hidden, k.heads, k.q_lora, k.kv_lora, k.nope, 0, k.v_head, c.eps};
  QR_ASSIGN_OR_RETURN(ctx, model::mla_context(w, pfx + p, dims, x, b, nullptr, false, &sel));
  return project(p + "o_proj.weight", ctx, k.hidden);
}

// down(swiglu_clamped(gate x, up x)) of `p`{gate,up,down}_proj.weight.
Result<Matrix> Glm53Forward::State::glu(const std::string& p, const Matrix& x,
                                        std::uint64_t inter) {
  QR_ASSIGN_OR_RETURN(gv, project(p + "gate_proj.weight", x, inter));
  QR_ASSIGN_OR_RETURN(uv, project(p + "up_proj.weight", x, inter));
  model::swiglu_clamped(gv, uv, c.swiglu_limit);
  return project(p + "down_proj.weight", gv, x.cols);
}

// Sigmoid routing over every expert (bias for the choice, weights renormalized and scaled),
// the routed mixture plus the shared expert.
Result<Matrix> Glm53Forward::State::moe(const std::string& p, const Matrix& x) {
  const model::Glm53Dims& k = d();
  QR_ASSIGN_OR_RETURN(logits, project(p + "gate.weight", x, k.experts));
  QR_ASSIGN_OR_RETURN(bias, w.vec(pfx + p + "gate.e_score_correction_bias", k.experts));
  const model::RoutingParams rp{k.experts, k.topk, 1, 1, true, c.routed_scale};
  std::vector<model::Route> routes;
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    routes.push_back(model::route_token(std::span(logits.row(t), k.experts), bias->v, rp));
  }
  QR_ASSIGN_OR_RETURN(y, glu(p + "shared_experts.", x, k.moe_inter * k.shared));
  QR_ASSIGN_OR_RETURN(u, model::mix_routed_experts(x, routes, k.experts, k.hidden,
                                                   [&](std::uint64_t e, const Matrix& xe) {
                                                     return glu(fmt::format("{}experts.{}.", p, e),
                                                                xe, k.moe_inter);
                                                   }));
  add_into(y, u);
  return y;
}

// One layer on the streams [n, hc_mult * hidden]: the attention site, then the MLP site.
Result<Matrix> Glm53Forward::State::layer(std::uint64_t l, Matrix streams, const Batch& b) {
  const std::string p = fmt::format("layers.{}.", l);
  const model::HcDims hd = hc();
  for (const char* site : {"attn", "ffn"}) {
    const bool attn = site[0] == 'a';
    QR_ASSIGN_OR_RETURN(s, model::read_hc_site(w, pfx + p, site, hd));
    model::HcMix mix;
    Matrix x = model::hc_pre(hd, s, streams, mix);
    QR_TRY(norm(x, p + (attn ? "input_layernorm.weight" : "post_attention_layernorm.weight")));
    Result<Matrix> y =
        attn ? (d().full[l] ? mla(p + "self_attn.", x, b) : kda(p + "self_attn.", x, b))
             : (d().sparse(l) ? moe(p + "mlp.", x) : glu(p + "mlp.", x, d().dense_inter));
    if (!y.ok()) return std::move(y.error());
    streams = model::hc_post(hd, mix, streams, *y);
  }
  return streams;
}

Glm53Forward::Glm53Forward(std::unique_ptr<State> s) : s_(std::move(s)) {}
Glm53Forward::Glm53Forward(Glm53Forward&&) noexcept = default;
Glm53Forward& Glm53Forward::operator=(Glm53Forward&&) noexcept = default;
Glm53Forward::~Glm53Forward() = default;

Result<Glm53Forward> Glm53Forward::open(const std::string& path,
                                        const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open_as_stored(path));
  QR_ASSIGN_OR_RETURN(config_dir, model::config_dir_of(w, path, fallback_config_dir));
  // Every variant the pass does not implement is refused here, before any weight is read.
  QR_ASSIGN_OR_RETURN(cfg, model::load_glm53_forward_config(config_dir));
  // The runtime's probe: the vision wrapper's prefix when its embedding is stored so.
  std::string pfx = "model.language_model.";
  if (!w.has_tensor(pfx + "embed_tokens.weight")) pfx = "model.";
  auto st = std::make_unique<State>(
      State{model::WeightCache(std::move(w)), std::move(cfg), std::move(pfx), {}});
  return Glm53Forward(std::move(st));
}

const std::string& Glm53Forward::model_type() const { return s_->c.model_type; }
std::uint64_t Glm53Forward::vocab_size() const { return s_->c.d.vocab; }
std::uint64_t Glm53Forward::hidden_size() const { return s_->c.d.hidden; }
std::uint64_t Glm53Forward::layer_count() const { return s_->c.d.layers; }
const std::string& Glm53Forward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> Glm53Forward::input_files() const {
  return model::pass_input_files(s_->w.weights());
}
void Glm53Forward::set_cache_budget(std::uint64_t bytes) { s_->w.set_budget(bytes); }
void Glm53Forward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}

Result<std::vector<Matrix>> Glm53Forward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const model::Glm53Dims& k = st.d();
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, k.vocab));
  QR_ASSIGN_OR_RETURN(
      h, model::embed_tokens(st.w.weights(), st.pfx + "embed_tokens.weight", k.vocab, k.hidden, b));
  Matrix streams = model::hc_expand(h, k.hc_mult);
  for (std::uint64_t l = 0; l < k.layers; ++l) {
    st.progress.say(fmt::format("layer {}/{} ({}, {})", l + 1, k.layers,
                                k.full[l] ? "MLA+DSA" : "KDA", k.sparse(l) ? "MoE" : "dense"));
    QR_ASSIGN_OR_RETURN(next, st.layer(l, std::move(streams), b));
    streams = std::move(next);
  }
  st.progress.say("lm_head");
  Matrix out = model::hc_mean(streams, k.hc_mult);
  QR_TRY(st.norm(out, "norm.weight"));
  const std::string head =
      model::head_weight_name(st.w.weights(), st.c.tied, st.pfx + "embed_tokens.weight");
  return model::vocab_logits(st.w, head, k.vocab, out, b);
}

}  // namespace qrepack
