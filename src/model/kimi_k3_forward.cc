#include "qrepack/model/kimi_k3_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/fs_util.h"
#include "model/deltanet.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/kimi_k3_config.h"
#include "model/mla.h"
#include "model/moe_routing.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

constexpr const char* kPrefix = "language_model.";

// c/kimi_k3.c's res_mix for every row: entries [blocks..., last]; each scored by
// (v . sw) / sqrt(mean(v^2) + eps) (sums in double), softmax, and the raw entries mixed in f32
// in entry order.
Matrix res_mix(const std::vector<Matrix>& blocks, const Matrix& last, std::span<const float> sw,
               double eps) {
  const std::uint64_t n = last.rows, d = last.cols, e = blocks.size() + 1;
  Matrix out{n, d, std::vector<float>(n * d)};
  parallel_for(n, 8, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<const float*> v(e);
    std::vector<float> p(e);
    for (std::size_t t = lo; t < hi; ++t) {
      for (std::uint64_t k = 0; k + 1 < e; ++k) v[k] = blocks[k].row(t);
      v[e - 1] = last.row(t);
      for (std::uint64_t k = 0; k < e; ++k) {
        double ms = 0, dot = 0;
        for (std::uint64_t i = 0; i < d; ++i) {
          const double x = v[k][i];
          ms += x * x;
          dot += x * static_cast<double>(sw[i]);
        }
        p[k] = static_cast<float>(dot / std::sqrt(ms / static_cast<double>(d) + eps));
      }
      model::softmax(p);
      float* o = out.row(t);
      for (std::uint64_t i = 0; i < d; ++i) {
        float a = 0;
        for (std::uint64_t k = 0; k < e; ++k) a += p[k] * v[k][i];
        o[i] = a;
      }
    }
  });
  return out;
}

void add_into(Matrix& y, const Matrix& x) {
  for (std::uint64_t i = 0; i < y.v.size(); ++i) y.v[i] += x.v[i];
}

}  // namespace

bool is_kimi_k3_model_type(const std::string& model_type) {
  return model_type == "kimi_k3" || model_type == "kimi_linear";
}

struct KimiK3Forward::State {
  model::WeightCache w;
  model::K3ForwardConfig c;
  std::string pfx;  ///< "language_model." when the checkpoint's names carry it
  model::Progress progress;

  const K3Dims& d() const { return c.d; }
  Result<std::shared_ptr<const Matrix>> get(const std::string& name, std::uint64_t rows,
                                            std::uint64_t cols) {
    return w.get(pfx + name, rows, cols);
  }
  Result<std::shared_ptr<const Matrix>> vec(const std::string& name, std::uint64_t n) {
    return w.vec(pfx + name, n);
  }
  Result<Matrix> project(const std::string& name, const Matrix& x, std::uint64_t out) {
    QR_ASSIGN_OR_RETURN(m, get(name, out, x.cols));
    return matmul(x, *m);
  }
  Status norm(Matrix& x, const std::string& name) {
    QR_ASSIGN_OR_RETURN(wt, vec(name, x.cols));
    model::rms_norm(x, wt->v, c.eps);
    return ok_status();
  }
  // An AttnRes score weight: <base>_norm.weight * <base>_proj.weight, elementwise in f32.
  Result<std::vector<float>> score_weight(const std::string& base) {
    const std::uint64_t h = d().hidden;
    QR_ASSIGN_OR_RETURN(n, vec(base + "_norm.weight", h));
    QR_ASSIGN_OR_RETURN(p, vec(base + "_proj.weight", h));
    std::vector<float> sw(h);
    for (std::uint64_t i = 0; i < h; ++i) sw[i] = n->v[i] * p->v[i];
    return sw;
  }
  Result<Matrix> mix(const std::vector<Matrix>& blocks, const Matrix& last,
                     const std::string& base) {
    QR_ASSIGN_OR_RETURN(sw, score_weight(base));
    return res_mix(blocks, last, sw, c.eps);
  }

  Result<Matrix> kda(const std::string& p, const Matrix& x, const Batch& b);
  Result<Matrix> mla(const std::string& p, const Matrix& x, const Batch& b);
  Result<Matrix> glu(const std::string& gate, const std::string& up, const std::string& down,
                     const Matrix& x, std::uint64_t inter);
  Result<Matrix> moe(const std::string& p, const Matrix& x);
  Result<Matrix> layer(std::uint64_t l, Matrix h, std::vector<Matrix>& blocks, const Batch& b);
};

// KDA: q, k, v through one causal conv over their concatenated channels (the three convs of
// the runtime, channel by channel the same), then the delta rule with per-key decay.
Result<Matrix> KimiK3Forward::State::kda(const std::string& p, const Matrix& x, const Batch& b) {
  const std::uint64_t hidden = d().hidden, H = d().kda_heads, hd = d().kda_head_dim;
  const std::uint64_t P = d().kda_proj(), K = d().conv_kernel, n = x.rows;
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
  const char* names[3] = {"q", "k", "v"};
  std::vector<Matrix> proj;
  std::vector<std::vector<float>> taps;
  for (const char* nm : names) {
    QR_ASSIGN_OR_RETURN(y, project(fmt::format("{}{}_proj.weight", p, nm), x, P));
    proj.push_back(std::move(y));
    QR_ASSIGN_OR_RETURN(
        kernel, w.weights().read_floats(fmt::format("{}{}{}_conv1d.weight", pfx, p, nm), P * K));
    taps.push_back(std::move(kernel));
  }
  Matrix qkv{n, 3 * P, std::vector<float>(n * 3 * P)};
  std::vector<float> conv;
  for (std::uint64_t j = 0; j < 3; ++j) {
    for (std::uint64_t t = 0; t < n; ++t) {
      std::copy(proj[j].row(t), proj[j].row(t) + P, qkv.row(t) + j * P);
    }
    conv.insert(conv.end(), taps[j].begin(), taps[j].end());
  }
  QR_ASSIGN_OR_RETURN(g, project(p + "g_proj.weight", x, P));
  QR_ASSIGN_OR_RETURN(fa, project(p + "f_a_proj.weight", x, hd));
  QR_ASSIGN_OR_RETURN(decay_in, project(p + "f_b_proj.weight", fa, P));
  QR_ASSIGN_OR_RETURN(beta_in, project(p + "b_proj.weight", x, H));
  // A_log is stored per head, zero-padded to head_dim in the release: the first H values.
  QR_ASSIGN_OR_RETURN(a_log, w.weights().read_leading_floats(pfx + p + "A_log", H, std::max(P, H)));
  QR_ASSIGN_OR_RETURN(dt, vec(p + "dt_bias", P));
  QR_ASSIGN_OR_RETURN(onw, vec(p + "o_norm.weight", hd));
  const model::DeltaNetParams params{conv, a_log, dt->v, onw->v};
  Matrix out{n, P, std::vector<float>(n * P)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t0 = b.start[s], t = b.start[s + 1] - t0;
    model::gated_deltanet(dims, params, t, qkv.row(t0), g.row(t0), beta_in.row(t0),
                          decay_in.row(t0), out.row(t0));
  }
  return project(p + "o_proj.weight", out, hidden);
}

// Gated NoPE MLA: the shared MLA mechanism without a rope, its context times sigmoid(g_proj x).
Result<Matrix> KimiK3Forward::State::mla(const std::string& p, const Matrix& x, const Batch& b) {
  const K3Dims& k = d();
  const model::MlaDims dims{k.hidden, k.heads, k.q_lora, k.kv_lora,
                            k.nope,   k.rope,  k.v_head, c.eps};
  QR_ASSIGN_OR_RETURN(ctx, model::mla_context(w, pfx + p, dims, x, b, nullptr, false));
  QR_ASSIGN_OR_RETURN(g, project(p + "g_proj.weight", x, k.heads * k.v_head));
  for (std::uint64_t i = 0; i < ctx.v.size(); ++i) {
    ctx.v[i] *= 1.0f / (1.0f + std::exp(-g.v[i]));
  }
  return project(p + "o_proj.weight", ctx, k.hidden);
}

// down(situ(gate(x), up(x))), gate and up [inter, x.cols], down [x.cols, inter].
Result<Matrix> KimiK3Forward::State::glu(const std::string& gate, const std::string& up,
                                         const std::string& down, const Matrix& x,
                                         std::uint64_t inter) {
  QR_ASSIGN_OR_RETURN(gv, project(gate, x, inter));
  QR_ASSIGN_OR_RETURN(uv, project(up, x, inter));
  model::situ_glu(gv, uv, c.situ_b1, c.situ_b2);
  return project(down, gv, x.cols);
}

// LatentMoE: sigmoid routing over every expert (no groups, no scaling), experts in the latent,
// the mixture RMS-normed and projected back, plus the shared experts at full width.
Result<Matrix> KimiK3Forward::State::moe(const std::string& p, const Matrix& x) {
  const K3Dims& k = d();
  const std::uint64_t n = x.rows;
  QR_ASSIGN_OR_RETURN(logits, project(p + "gate.weight", x, k.experts));
  QR_ASSIGN_OR_RETURN(bias, vec(p + "gate.e_score_correction_bias", k.experts));
  const model::RoutingParams rp{k.experts, k.topk, 1, 1, true, 1.0f};
  std::vector<model::Route> routes;
  for (std::uint64_t t = 0; t < n; ++t) {
    routes.push_back(model::route_token(std::span(logits.row(t), k.experts), bias->v, rp));
  }
  QR_ASSIGN_OR_RETURN(z, project(p + "routed_expert_down_proj.weight", x, k.latent));
  QR_ASSIGN_OR_RETURN(
      u, model::mix_routed_experts(
             z, routes, k.experts, k.latent, [&](std::uint64_t e, const Matrix& ze) {
               const std::string ep = fmt::format("{}experts.{}.", p, e);
               return glu(ep + "w1.weight", ep + "w3.weight", ep + "w2.weight", ze, k.moe_inter);
             }));
  QR_TRY(norm(u, p + "routed_expert_norm.weight"));
  QR_ASSIGN_OR_RETURN(y, project(p + "routed_expert_up_proj.weight", u, k.hidden));
  if (k.shared > 0) {
    const std::string sp = p + "shared_experts.";
    QR_ASSIGN_OR_RETURN(s, glu(sp + "gate_proj.weight", sp + "up_proj.weight",
                               sp + "down_proj.weight", x, k.moe_inter * k.shared));
    add_into(y, s);
  }
  return y;
}

// One layer of the AttnRes stream: `h` the hidden state (the previous layer's prefix sum),
// `blocks` the snapshots so far (one added at each block boundary); returns the new hidden.
Result<Matrix> KimiK3Forward::State::layer(std::uint64_t l, Matrix h, std::vector<Matrix>& blocks,
                                           const Batch& b) {
  const K3Dims& k = d();
  const std::string p = fmt::format("model.layers.{}.", l);
  const bool snap = l % k.res_block == 0;
  Matrix prefix = h;
  if (!blocks.empty()) {
    QR_ASSIGN_OR_RETURN(m, mix(blocks, prefix, p + "self_attention_res"));
    h = std::move(m);
  }
  if (snap) blocks.push_back(prefix);
  QR_TRY(norm(h, p + "input_layernorm.weight"));
  Result<Matrix> a = k.kda[l] ? kda(p + "self_attn.", h, b) : mla(p + "self_attn.", h, b);
  if (!a.ok()) return std::move(a.error());
  if (snap) {
    prefix = std::move(*a);
  } else {
    add_into(prefix, *a);
  }
  QR_ASSIGN_OR_RETURN(x, mix(blocks, prefix, p + "mlp_res"));
  QR_TRY(norm(x, p + "post_attention_layernorm.weight"));
  Result<Matrix> f = k.sparse(l) ? moe(p + "block_sparse_moe.", x)
                                 : glu(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight",
                                       p + "mlp.down_proj.weight", x, k.dense_inter);
  if (!f.ok()) return std::move(f.error());
  add_into(prefix, *f);
  return prefix;
}

KimiK3Forward::KimiK3Forward(std::unique_ptr<State> s) : s_(std::move(s)) {}
KimiK3Forward::KimiK3Forward(KimiK3Forward&&) noexcept = default;
KimiK3Forward& KimiK3Forward::operator=(KimiK3Forward&&) noexcept = default;
KimiK3Forward::~KimiK3Forward() = default;

Result<KimiK3Forward> KimiK3Forward::open(const std::string& path,
                                          const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open_as_stored(path));
  QR_ASSIGN_OR_RETURN(config_dir, model::config_dir_of(w, path, fallback_config_dir));
  // Every variant the pass does not implement is refused here, before any weight is read.
  QR_ASSIGN_OR_RETURN(cfg, model::load_k3_forward_config(config_dir));
  // The runtime's probe: names carry "language_model." when layer 0's input norm is stored so.
  const std::string probe = "model.layers.0.input_layernorm.weight";
  std::string pfx = !w.has_tensor(probe) && w.has_tensor(kPrefix + probe) ? kPrefix : "";
  auto st = std::make_unique<State>(
      State{model::WeightCache(std::move(w)), std::move(cfg), std::move(pfx), {}});
  return KimiK3Forward(std::move(st));
}

const std::string& KimiK3Forward::model_type() const { return s_->c.model_type; }
std::uint64_t KimiK3Forward::vocab_size() const { return s_->c.d.vocab; }
std::uint64_t KimiK3Forward::hidden_size() const { return s_->c.d.hidden; }
std::uint64_t KimiK3Forward::layer_count() const { return s_->c.d.layers; }
const std::string& KimiK3Forward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> KimiK3Forward::input_files() const {
  return model::pass_input_files(s_->w.weights());
}
void KimiK3Forward::set_cache_budget(std::uint64_t bytes) { s_->w.set_budget(bytes); }
void KimiK3Forward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}

Result<std::vector<Matrix>> KimiK3Forward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const K3Dims& k = st.d();
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, k.vocab));
  QR_ASSIGN_OR_RETURN(h, model::embed_tokens(st.w.weights(), st.pfx + "model.embed_tokens.weight",
                                             k.vocab, k.hidden, b));
  std::vector<Matrix> blocks;
  for (std::uint64_t l = 0; l < k.layers; ++l) {
    st.progress.say(fmt::format("layer {}/{} ({}, {})", l + 1, k.layers, k.kda[l] ? "KDA" : "MLA",
                                k.sparse(l) ? "MoE" : "dense"));
    QR_ASSIGN_OR_RETURN(next, st.layer(l, std::move(h), blocks, b));
    h = std::move(next);
  }
  st.progress.say("lm_head");
  QR_ASSIGN_OR_RETURN(out, st.mix(blocks, h, "model.output_attn_res"));
  QR_TRY(st.norm(out, "model.norm.weight"));
  return model::vocab_logits(st.w, st.pfx + "lm_head.weight", k.vocab, out, b);
}

}  // namespace qrepack
