#include "qrepack/checkpoint/glm_moe.h"

#include <fmt/format.h>

#include <algorithm>

#include "qrepack/core/checked.h"

namespace qrepack {

const char* weight_class_name(WeightClass c) {
  switch (c) {
    case WeightClass::kAttention:
      return "attn";
    case WeightClass::kOProj:
      return "o_proj";
    case WeightClass::kKvB:
      return "kv_b";
    case WeightClass::kMtp:
      return "mtp";
    case WeightClass::kIndexer:
      return "indexer";
    case WeightClass::kDenseMlp:
      return "dense";
    case WeightClass::kSharedExpert:
      return "shared";
    case WeightClass::kRoutedExpert:
      return "experts";
    case WeightClass::kIo:
      return "io";
    case WeightClass::kRouter:
      return "router";
    case WeightClass::kNorm:
      return "norm";
  }
  return "?";
}

std::string fused_gate_up_name(std::uint64_t layer) {
  return fmt::format("model.layers.{}.mlp.experts.gate_up_proj", layer);
}
std::string fused_down_name(std::uint64_t layer) {
  return fmt::format("model.layers.{}.mlp.experts.down_proj", layer);
}

namespace {

struct WeightEmitter {
  const MoeConfig& c;
  const std::function<void(const ModelWeight&)>& visit;
  bool main_pass = true;

  void proj(std::string name, std::uint64_t o, std::uint64_t i, WeightClass cls) const {
    visit({std::move(name), {o, i}, cls, true, Dtype::kF8E4M3, main_pass});
  }
  void bf16(std::string name, std::vector<std::uint64_t> shape, WeightClass cls) const {
    visit({std::move(name), std::move(shape), cls, false, Dtype::kBF16, main_pass});
  }

  void attention(const std::string& p) const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size, h = c.num_attention_heads;
    const std::uint64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
    if (c.q_lora_rank == 0) {
      proj(p + "self_attn.q_proj.weight", h * qk, d, W::kAttention);
    } else {
      proj(p + "self_attn.q_a_proj.weight", c.q_lora_rank, d, W::kAttention);
      bf16(p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, W::kNorm);
      proj(p + "self_attn.q_b_proj.weight", h * qk, c.q_lora_rank, W::kAttention);
    }
    proj(p + "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, d,
         W::kAttention);
    bf16(p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, W::kNorm);
    proj(p + "self_attn.kv_b_proj.weight", h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank,
         W::kKvB);
    proj(p + "self_attn.o_proj.weight", d, h * c.v_head_dim, W::kOProj);
  }

  // The DSA indexer (reference/colibri.md §3.4, §5): never loaded by the main pass.
  void indexer(const std::string& p) const {
    if (c.index_n_heads == 0) return;
    WeightEmitter side{c, visit, false};
    const std::string q = p + "self_attn.indexer.";
    side.proj(q + "wq_b.weight", c.index_n_heads * c.index_head_dim,
              c.q_lora_rank ? c.q_lora_rank : c.hidden_size, WeightClass::kIndexer);
    side.proj(q + "wk.weight", c.index_head_dim, c.hidden_size, WeightClass::kIndexer);
    side.bf16(q + "weights_proj.weight", {c.index_n_heads, c.hidden_size}, WeightClass::kIndexer);
    side.bf16(q + "k_norm.weight", {c.index_head_dim}, WeightClass::kNorm);
    side.bf16(q + "k_norm.bias", {c.index_head_dim}, WeightClass::kNorm);
  }

  void moe(const std::string& p) const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size;
    bf16(p + "mlp.gate.weight", {c.n_routed_experts, d}, W::kRouter);
    visit({p + "mlp.gate.e_score_correction_bias",
           {c.n_routed_experts},
           W::kRouter,
           false,
           Dtype::kF32,
           main_pass});
    if (c.n_shared_experts > 0) {
      const std::uint64_t s = c.moe_intermediate_size * c.n_shared_experts;
      proj(p + "mlp.shared_experts.gate_proj.weight", s, d, W::kSharedExpert);
      proj(p + "mlp.shared_experts.up_proj.weight", s, d, W::kSharedExpert);
      proj(p + "mlp.shared_experts.down_proj.weight", d, s, W::kSharedExpert);
    }
    for (std::uint64_t e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
      proj(q + "gate_proj.weight", c.moe_intermediate_size, d, W::kRoutedExpert);
      proj(q + "up_proj.weight", c.moe_intermediate_size, d, W::kRoutedExpert);
      proj(q + "down_proj.weight", d, c.moe_intermediate_size, W::kRoutedExpert);
    }
  }

  void layer(std::uint64_t l) const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size;
    const std::string p = fmt::format("model.layers.{}.", l);
    bf16(p + "input_layernorm.weight", {d}, W::kNorm);
    bf16(p + "post_attention_layernorm.weight", {d}, W::kNorm);
    attention(p);
    indexer(p);
    if (l < c.first_k_dense_replace) {
      proj(p + "mlp.gate_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.up_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.down_proj.weight", d, c.intermediate_size, W::kDenseMlp);
      return;
    }
    moe(p);
  }

  // An MTP (nextn) layer: a full MoE layer plus its own projection and norms (GLM-5's layout);
  // DeepSeek-V3's and Kimi-K2's also carry their own embed_tokens and shared_head.head.
  void mtp_layer(std::uint64_t l) const {
    WeightEmitter side{c, visit, false};
    const std::uint64_t d = c.hidden_size;
    const std::string p = fmt::format("model.layers.{}.", l);
    const bool own_io = c.family != FamilyId::kGlmMoeDsa;
    if (own_io) side.bf16(p + "embed_tokens.weight", {c.vocab_size, d}, WeightClass::kMtp);
    side.bf16(p + "eh_proj.weight", {d, 2 * d}, WeightClass::kMtp);
    side.bf16(p + "enorm.weight", {d}, WeightClass::kNorm);
    side.bf16(p + "hnorm.weight", {d}, WeightClass::kNorm);
    side.bf16(p + "shared_head.norm.weight", {d}, WeightClass::kNorm);
    if (own_io) side.bf16(p + "shared_head.head.weight", {c.vocab_size, d}, WeightClass::kMtp);
    side.layer(l);
  }
};

}  // namespace

std::optional<std::uint64_t> glm_moe_weight_count(const MoeConfig& c) {
  const std::uint64_t dense = std::min(c.first_k_dense_replace, c.num_hidden_layers);
  const auto per_moe = checked_add(2 + (c.n_shared_experts > 0 ? 3 : 0),
                                   checked_mul(3, c.n_routed_experts).value_or(~0ull));
  const std::uint64_t per_attn = (c.q_lora_rank ? 9 : 7) + (c.index_n_heads ? 5 : 0);
  const auto moe = per_moe ? checked_mul(c.num_hidden_layers - dense, *per_moe) : std::nullopt;
  const auto attn = checked_mul(c.num_hidden_layers, per_attn);
  if (!moe || !attn || !per_moe) return std::nullopt;
  const std::uint64_t mtp_own = c.family == FamilyId::kGlmMoeDsa ? 4 : 6;
  const auto mtp = checked_mul(c.num_nextn_predict_layers, *per_moe + per_attn + mtp_own);
  if (!mtp) return std::nullopt;
  const auto sum = checked_add(*moe, *attn);
  const auto sum2 = sum ? checked_add(*sum, *mtp) : std::nullopt;
  return sum2 ? checked_add(*sum2, 3 + 3 * dense) : std::nullopt;
}

std::vector<ModelWeight> glm_moe_weights(const MoeConfig& c) {
  std::vector<ModelWeight> out;
  for_each_glm_moe_weight(c, [&](const ModelWeight& w) { out.push_back(w); });
  return out;
}

void for_each_glm_moe_weight(const MoeConfig& c,
                             const std::function<void(const ModelWeight&)>& visit) {
  using W = WeightClass;
  const WeightEmitter emit{c, visit};
  const std::uint64_t d = c.hidden_size;
  emit.bf16("model.embed_tokens.weight", {c.vocab_size, d}, W::kIo);
  for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) emit.layer(l);
  emit.bf16("model.norm.weight", {d}, W::kNorm);
  emit.bf16("lm_head.weight", {c.vocab_size, d}, W::kIo);
  for (std::uint64_t k = 0; k < c.num_nextn_predict_layers; ++k) {
    emit.mtp_layer(c.num_hidden_layers + k);
  }
}

}  // namespace qrepack
