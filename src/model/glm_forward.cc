#include "qrepack/model/glm_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/mla.h"
#include "model/moe_routing.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

Error unsupported(std::string message) {
  return Error(ErrorKind::kUnsupportedModel, std::move(message)).with_rule("forward.support");
}

// transformers' GLM-MoE-DSA (modular_glm_moe_dsa.py: apply_rotary_pos_emb_interleave) and the C
// engine (glm.c rope_interleave) rotate interleaved pairs whatever the config says; DeepSeek-V3
// and Kimi-K2 follow rope_interleave. (An earlier transformers GLM-MoE-DSA rotated split
// halves: the oracle drift of colibri #281, 25/32.)
bool interleaved_rope(const MoeConfig& c) {
  return c.model_type == "glm_moe_dsa" || c.rope_interleave;
}

}  // namespace

Status check_forward_support(const MoeConfig& c) {
  static constexpr std::string_view kFamilies[] = {"glm_moe_dsa", "deepseek_v3", "kimi_k2"};
  if (std::find(std::begin(kFamilies), std::end(kFamilies), c.model_type) == std::end(kFamilies)) {
    return unsupported(
        fmt::format("model_type \"{}\" has no reference forward pass (qrepack implements "
                    "glm_moe_dsa, deepseek_v3, kimi_k2, kimi_k3, llama, qwen3, qwen3_moe, olmoe, "
                    "qwen3_5_moe and inkling)",
                    c.model_type));
  }
  if (c.rope_type != "default") {
    return unsupported(
        fmt::format("rope type \"{}\": the forward pass implements \"default\" "
                    "rope only",
                    c.rope_type));
  }
  if (c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim > kMaxRopeDim) {
    return unsupported(
        fmt::format("qk_rope_head_dim {} must be even and <= {}", c.qk_rope_head_dim, kMaxRopeDim));
  }
  if (c.rope_theta <= 0) return unsupported("rope_theta must be positive");
  const std::uint64_t per_group = c.n_group ? c.n_routed_experts / c.n_group : 0;
  if (c.n_group == 0 || c.n_routed_experts % c.n_group != 0 || per_group < 2 ||
      c.topk_group > c.n_group || c.num_experts_per_tok > c.topk_group * per_group) {
    return unsupported(fmt::format(
        "routing n_routed_experts {} in n_group {} keeping topk_group {} with top-{}: groups "
        "must split the experts evenly, hold at least 2 each and offer top-k experts",
        c.n_routed_experts, c.n_group, c.topk_group, c.num_experts_per_tok));
  }
  return ok_status();
}

struct GlmForward::State {
  model::WeightCache w;
  MoeConfig c;
  model::Progress progress;

  Result<std::shared_ptr<const Matrix>> get(const std::string& name, std::uint64_t rows,
                                            std::uint64_t cols) {
    return w.get(name, rows, cols);
  }
  Result<std::shared_ptr<const Matrix>> vec(const std::string& name, std::uint64_t n) {
    return w.vec(name, n);
  }
  void say(const std::string& s) const { progress.say(s); }

  Result<Matrix> embed(const Batch& b);
  Status norm(Matrix& x, const std::string& name);
  Result<Matrix> attention(const std::string& p, const Matrix& x, const Batch& b,
                           const model::Rope& rope);
  Result<Matrix> mlp(const std::string& p, const Matrix& x, std::uint64_t inter);
  Result<Matrix> moe(const std::string& p, const Matrix& x);
  Result<std::vector<Matrix>> head(Matrix h, const Batch& b);
};

Result<Matrix> GlmForward::State::embed(const Batch& b) {
  return model::embed_tokens(w.weights(), "model.embed_tokens.weight", c.vocab_size, c.hidden_size,
                             b);
}

Status GlmForward::State::norm(Matrix& x, const std::string& name) {
  QR_ASSIGN_OR_RETURN(wt, vec(name, x.cols));
  model::rms_norm(x, wt->v, c.rms_norm_eps);
  return ok_status();
}

Result<Matrix> GlmForward::State::attention(const std::string& p, const Matrix& x, const Batch& b,
                                            const model::Rope& rope) {
  const std::uint64_t nh = c.num_attention_heads, vd = c.v_head_dim;
  const model::MlaDims d{c.hidden_size,      nh, c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
                         c.qk_rope_head_dim, vd, c.rms_norm_eps};
  QR_ASSIGN_OR_RETURN(ctx,
                      model::mla_context(w, p + "self_attn.", d, x, b, &rope, interleaved_rope(c)));
  QR_ASSIGN_OR_RETURN(wo, get(p + "self_attn.o_proj.weight", c.hidden_size, nh * vd));
  return matmul(ctx, *wo);
}

Result<Matrix> GlmForward::State::mlp(const std::string& p, const Matrix& x, std::uint64_t inter) {
  const std::uint64_t d = c.hidden_size;
  QR_ASSIGN_OR_RETURN(wg, get(p + "gate_proj.weight", inter, d));
  Matrix g = matmul(x, *wg);
  QR_ASSIGN_OR_RETURN(wu, get(p + "up_proj.weight", inter, d));
  model::swiglu(g, matmul(x, *wu));
  QR_ASSIGN_OR_RETURN(wd, get(p + "down_proj.weight", d, inter));
  return matmul(g, *wd);
}

Result<Matrix> GlmForward::State::moe(const std::string& p, const Matrix& x) {
  const std::uint64_t d = c.hidden_size, e = c.n_routed_experts, n = x.rows;
  QR_ASSIGN_OR_RETURN(wr, get(p + "mlp.gate.weight", e, d));
  const Matrix logits = matmul(x, *wr);
  QR_ASSIGN_OR_RETURN(bias, vec(p + "mlp.gate.e_score_correction_bias", e));
  const model::RoutingParams rp{e,
                                c.num_experts_per_tok,
                                c.n_group,
                                c.topk_group,
                                c.norm_topk_prob,
                                static_cast<float>(c.routed_scaling_factor)};
  std::vector<model::Route> routes;
  for (std::uint64_t t = 0; t < n; ++t) {
    routes.push_back(model::route_token(std::span(logits.row(t), e), bias->v, rp));
  }
  QR_ASSIGN_OR_RETURN(
      out, model::mix_routed_experts(x, routes, e, d, [&](std::uint64_t ex, const Matrix& xe) {
        return mlp(fmt::format("{}mlp.experts.{}.", p, ex), xe, c.moe_intermediate_size);
      }));
  if (c.n_shared_experts > 0) {
    QR_ASSIGN_OR_RETURN(
        shared, mlp(p + "mlp.shared_experts.", x, c.moe_intermediate_size * c.n_shared_experts));
    for (std::uint64_t i = 0; i < out.v.size(); ++i) out.v[i] += shared.v[i];
  }
  return out;
}

Result<std::vector<Matrix>> GlmForward::State::head(Matrix h, const Batch& b) {
  QR_TRY(norm(h, "model.norm.weight"));
  const std::string name =
      model::head_weight_name(w.weights(), c.tie_word_embeddings, "model.embed_tokens.weight");
  return model::vocab_logits(w, name, c.vocab_size, h, b);
}

GlmForward::GlmForward(std::unique_ptr<State> s) : s_(std::move(s)) {}
GlmForward::GlmForward(GlmForward&&) noexcept = default;
GlmForward& GlmForward::operator=(GlmForward&&) noexcept = default;
GlmForward::~GlmForward() = default;

Result<GlmForward> GlmForward::open(const std::string& path,
                                    const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open(path));
  QR_ASSIGN_OR_RETURN(cfg, load_moe_config(w.directory()));
  if (!cfg && !fallback_config_dir.empty()) {
    QR_ASSIGN_OR_RETURN(fallback, load_moe_config(fallback_config_dir));
    cfg = std::move(fallback);
  }
  if (!cfg) {
    return Error(ErrorKind::kInvalidConfig,
                 "no config.json beside the checkpoint: the forward pass needs the model's "
                 "dimensions")
        .in_file(path);
  }
  QR_TRY(check_forward_support(*cfg));
  auto st = std::make_unique<State>(State{model::WeightCache(std::move(w)), std::move(*cfg), {}});
  return GlmForward(std::move(st));
}

const MoeConfig& GlmForward::config() const { return s_->c; }
const std::string& GlmForward::model_type() const { return s_->c.model_type; }
std::uint64_t GlmForward::vocab_size() const { return s_->c.vocab_size; }
std::uint64_t GlmForward::hidden_size() const { return s_->c.hidden_size; }
std::uint64_t GlmForward::layer_count() const { return s_->c.num_hidden_layers; }
const std::string& GlmForward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> GlmForward::input_files() const {
  return model::pass_input_files(s_->w.weights());
}
void GlmForward::set_cache_budget(std::uint64_t bytes) { s_->w.set_budget(bytes); }
void GlmForward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}

Result<std::vector<Matrix>> GlmForward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const MoeConfig& c = st.c;
  for (const TokenIds& s : seqs) {
    if (c.index_n_heads > 0 && c.index_topk > 0 && s.size() > c.index_topk) {
      return unsupported(fmt::format(
          "a sequence of {} tokens is longer than index_topk {}: the DSA indexer would select "
          "keys, which the forward pass does not implement",
          s.size(), c.index_topk));
    }
  }
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, c.vocab_size));
  const std::uint64_t longest = b.longest();
  const auto rope = model::Rope::make(c.qk_rope_head_dim, c.rope_theta, longest);
  QR_ASSIGN_OR_RETURN(h, st.embed(b));
  for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) {
    const bool dense = l < c.first_k_dense_replace;
    st.say(fmt::format("layer {}/{} ({})", l + 1, c.num_hidden_layers, dense ? "dense" : "MoE"));
    const std::string p = fmt::format("model.layers.{}.", l);
    Matrix x = h;
    QR_TRY(st.norm(x, p + "input_layernorm.weight"));
    QR_ASSIGN_OR_RETURN(a, st.attention(p, x, b, rope));
    for (std::uint64_t i = 0; i < h.v.size(); ++i) h.v[i] += a.v[i];
    x = h;
    QR_TRY(st.norm(x, p + "post_attention_layernorm.weight"));
    Result<Matrix> m = dense ? st.mlp(p + "mlp.", x, c.intermediate_size) : st.moe(p, x);
    if (!m.ok()) return std::move(m.error());
    for (std::uint64_t i = 0; i < h.v.size(); ++i) h.v[i] += m->v[i];
  }
  st.say("lm_head");
  return st.head(std::move(h), b);
}

}  // namespace qrepack
