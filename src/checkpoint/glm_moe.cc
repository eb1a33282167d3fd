#include "qrepack/checkpoint/glm_moe.h"

#include <fmt/format.h>

#include <algorithm>

#include "qrepack/core/checked.h"

namespace qrepack {

const char* weight_class_name(WeightClass c) {
  switch (c) {
    case WeightClass::kAttention:
      return "attn";
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

std::optional<std::uint64_t> glm_moe_weight_count(const MoeConfig& c) {
  const std::uint64_t dense = std::min(c.first_k_dense_replace, c.num_hidden_layers);
  const auto per_moe = checked_add(2 + (c.n_shared_experts > 0 ? 3 : 0),
                                   checked_mul(3, c.n_routed_experts).value_or(~0ull));
  const auto moe = per_moe ? checked_mul(c.num_hidden_layers - dense, *per_moe) : std::nullopt;
  const auto attn = checked_mul(c.num_hidden_layers, 9);
  if (!moe || !attn) return std::nullopt;
  const auto sum = checked_add(*moe, *attn);
  return sum ? checked_add(*sum, 3 + 3 * dense) : std::nullopt;
}

std::vector<ModelWeight> glm_moe_weights(const MoeConfig& c) {
  std::vector<ModelWeight> out;
  for_each_glm_moe_weight(c, [&](const ModelWeight& w) { out.push_back(w); });
  return out;
}

void for_each_glm_moe_weight(const MoeConfig& c,
                             const std::function<void(const ModelWeight&)>& visit) {
  using W = WeightClass;
  const std::uint64_t d = c.hidden_size;
  const std::uint64_t h = c.num_attention_heads;
  auto proj = [&](std::string name, std::uint64_t o, std::uint64_t i, W cls) {
    visit({std::move(name), {o, i}, cls, true, Dtype::kF8E4M3});
  };
  auto bf16 = [&](std::string name, std::vector<std::uint64_t> shape, W cls) {
    visit({std::move(name), std::move(shape), cls, false, Dtype::kBF16});
  };
  bf16("model.embed_tokens.weight", {c.vocab_size, d}, W::kIo);
  for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    bf16(p + "input_layernorm.weight", {d}, W::kNorm);
    bf16(p + "post_attention_layernorm.weight", {d}, W::kNorm);
    proj(p + "self_attn.q_a_proj.weight", c.q_lora_rank, d, W::kAttention);
    bf16(p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, W::kNorm);
    proj(p + "self_attn.q_b_proj.weight", h * (c.qk_nope_head_dim + c.qk_rope_head_dim),
         c.q_lora_rank, W::kAttention);
    proj(p + "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, d,
         W::kAttention);
    bf16(p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, W::kNorm);
    proj(p + "self_attn.kv_b_proj.weight", h * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank,
         W::kAttention);
    proj(p + "self_attn.o_proj.weight", d, h * c.v_head_dim, W::kAttention);
    if (l < c.first_k_dense_replace) {
      proj(p + "mlp.gate_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.up_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.down_proj.weight", d, c.intermediate_size, W::kDenseMlp);
      continue;
    }
    bf16(p + "mlp.gate.weight", {c.n_routed_experts, d}, W::kRouter);
    visit({p + "mlp.gate.e_score_correction_bias",
           {c.n_routed_experts},
           W::kRouter,
           false,
           Dtype::kF32});
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
  bf16("model.norm.weight", {d}, W::kNorm);
  bf16("lm_head.weight", {c.vocab_size, d}, W::kIo);
}

}  // namespace qrepack
