#include "qrepack/checkpoint/family.h"

#include <fmt/format.h>

#include <array>

#include "qrepack/core/checked.h"

namespace qrepack {
namespace {

using namespace std::string_view_literals;

constexpr std::array kGlmTypes = {"glm_moe_dsa"sv, "glm5_moe"sv, "glm"sv};
constexpr std::array kDeepseekTypes = {"deepseek_v3"sv};
constexpr std::array kKimiTypes = {"kimi_k2"sv};
constexpr std::array kMiniMaxTypes = {"minimax_m2"sv, "minimax_m3"sv, "minimax*"sv};
constexpr std::array kQwenMoeTypes = {"qwen3_moe"sv};
constexpr std::array kDenseTypes = {"llama"sv, "mistral"sv, "qwen2"sv, "qwen3"sv};

const std::array kFamilies = {
    Family{FamilyId::kGlmMoeDsa, "glm_moe_dsa", "GLM-MoE-DSA (GLM-5): MLA, DSA indexer, MoE, MTP",
           kGlmTypes, NameMap::kIdentity, RuleTable::kMla, TensorList::kMla, "moe-fp8"},
    Family{FamilyId::kDeepseekV3, "deepseek_v3", "DeepSeek-V3 / R1 / V3.1: MLA, MoE, MTP",
           kDeepseekTypes, NameMap::kIdentity, RuleTable::kMla, TensorList::kMla, "deepseek-v3"},
    Family{FamilyId::kKimiK2, "kimi_k2", "Kimi-K2: DeepSeek-V3 architecture", kKimiTypes,
           NameMap::kIdentity, RuleTable::kMla, TensorList::kMla, "kimi-k2"},
    Family{FamilyId::kMiniMax, "minimax", "MiniMax-M2 / M3: GQA with q/k norm, MoE", kMiniMaxTypes,
           NameMap::kMiniMax, RuleTable::kGqaMoe, TensorList::kGqa, "minimax"},
    Family{FamilyId::kQwen3Moe, "qwen3_moe", "Qwen3-MoE: GQA with q/k norm, MoE", kQwenMoeTypes,
           NameMap::kIdentity, RuleTable::kGqaMoe, TensorList::kGqa, "qwen3-moe"},
    Family{FamilyId::kDense, "dense", "Llama / Mistral / Qwen2 / Qwen3: GQA, dense SwiGLU MLP",
           kDenseTypes, NameMap::kIdentity, RuleTable::kDense, TensorList::kGqa, "llama"},
};

// Vision tensors of multimodal MiniMax checkpoints: the engine runs the text model only.
constexpr std::array kVisionPrefixes = {"vision_tower."sv, "vision_model."sv, "visual."sv,
                                        "multi_modal_projector."sv, "mm_projector."sv};

bool replace_once(std::string& s, std::string_view from, std::string_view to) {
  const auto p = s.find(from);
  if (p == std::string::npos) return false;
  s.replace(p, from.size(), to);
  return true;
}

std::optional<std::string> map_minimax(std::string_view raw) {
  std::string n(raw);
  // "language_model.model.X" and "model.language_model.X" both become "model.X".
  if (n.starts_with("language_model.")) n.erase(0, 15);
  replace_once(n, "model.language_model.", "model.");
  for (std::string_view v : kVisionPrefixes) {
    if (n.starts_with(v) ||
        (n.starts_with("model.") && std::string_view(n).substr(6).starts_with(v))) {
      return std::nullopt;
    }
  }
  if (!replace_once(n, ".block_sparse_moe.e_score_correction_bias",
                    ".mlp.gate.e_score_correction_bias")) {
    replace_once(n, ".block_sparse_moe.", ".mlp.");
  }
  if (n.find(".mlp.experts.") != std::string::npos) {
    for (auto [from, to] : {std::pair{".w1.", ".gate_proj."}, std::pair{".w3.", ".up_proj."},
                            std::pair{".w2.", ".down_proj."}}) {
      if (replace_once(n, from, to)) break;
    }
  }
  return n;
}

std::string unmap_minimax(std::string_view engine) {
  std::string n(engine);
  if (!replace_once(n, ".mlp.gate.e_score_correction_bias",
                    ".block_sparse_moe.e_score_correction_bias")) {
    replace_once(n, ".mlp.", ".block_sparse_moe.");
  }
  if (n.find(".block_sparse_moe.experts.") != std::string::npos) {
    for (auto [from, to] : {std::pair{".gate_proj.", ".w1."}, std::pair{".up_proj.", ".w3."},
                            std::pair{".down_proj.", ".w2."}}) {
      if (replace_once(n, from, to)) break;
    }
  }
  return n;
}

// The grouped-query-attention families: MiniMax, Qwen3-MoE and the dense family.
struct GqaEmitter {
  const MoeConfig& c;
  const std::function<void(const ModelWeight&)>& visit;

  void proj(std::string name, std::uint64_t o, std::uint64_t i, WeightClass cls) const {
    visit({std::move(name), {o, i}, cls, true, Dtype::kBF16, true});
  }
  void vec(std::string name, std::uint64_t n, WeightClass cls, Dtype dt = Dtype::kBF16) const {
    visit({std::move(name), {n}, cls, false, dt, true});
  }

  void attention(const std::string& p) const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size, hd = attn_head_dim(c);
    const std::uint64_t q = c.num_attention_heads * hd, kv = kv_heads(c) * hd;
    const std::string a = p + "self_attn.";
    proj(a + "q_proj.weight", q, d, W::kAttention);
    if (c.attention_bias) vec(a + "q_proj.bias", q, W::kAttention);
    proj(a + "k_proj.weight", kv, d, W::kAttention);
    if (c.attention_bias) vec(a + "k_proj.bias", kv, W::kAttention);
    proj(a + "v_proj.weight", kv, d, W::kAttention);
    if (c.attention_bias) vec(a + "v_proj.bias", kv, W::kAttention);
    proj(a + "o_proj.weight", d, q, W::kOProj);
    if (c.qk_norm == QkNorm::kPerHead) {
      vec(a + "q_norm.weight", hd, W::kNorm);
      vec(a + "k_norm.weight", hd, W::kNorm);
    } else if (c.qk_norm == QkNorm::kPerLayer) {
      vec(a + "q_norm.weight", q, W::kNorm);
      vec(a + "k_norm.weight", kv, W::kNorm);
    }
  }

  void mlp(const std::string& p, std::uint64_t l) const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size;
    if (!is_moe_layer(c, l)) {
      proj(p + "mlp.gate_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.up_proj.weight", c.intermediate_size, d, W::kDenseMlp);
      proj(p + "mlp.down_proj.weight", d, c.intermediate_size, W::kDenseMlp);
      return;
    }
    visit({p + "mlp.gate.weight", {c.n_routed_experts, d}, W::kRouter, false, Dtype::kBF16, true});
    if (c.router_bias)
      vec(p + "mlp.gate.e_score_correction_bias", c.n_routed_experts, W::kRouter, Dtype::kF32);
    for (std::uint64_t e = 0; e < c.n_routed_experts; ++e) {
      const std::string q = fmt::format("{}mlp.experts.{}.", p, e);
      proj(q + "gate_proj.weight", c.moe_intermediate_size, d, W::kRoutedExpert);
      proj(q + "up_proj.weight", c.moe_intermediate_size, d, W::kRoutedExpert);
      proj(q + "down_proj.weight", d, c.moe_intermediate_size, W::kRoutedExpert);
    }
  }

  void all() const {
    using W = WeightClass;
    const std::uint64_t d = c.hidden_size;
    visit({"model.embed_tokens.weight", {c.vocab_size, d}, W::kIo, false, Dtype::kBF16, true});
    for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      vec(p + "input_layernorm.weight", d, W::kNorm);
      attention(p);
      vec(p + "post_attention_layernorm.weight", d, W::kNorm);
      mlp(p, l);
    }
    vec("model.norm.weight", d, W::kNorm);
    if (!c.tie_word_embeddings) {
      visit({"lm_head.weight", {c.vocab_size, d}, W::kIo, false, Dtype::kBF16, true});
    }
  }
};

std::optional<std::uint64_t> gqa_weight_count(const MoeConfig& c) {
  const std::uint64_t attn =
      4 + (c.attention_bias ? 3 : 0) + (c.qk_norm != QkNorm::kNone ? 2 : 0) + 2;
  const std::uint64_t moe_layers = moe_layer_count(c);
  const auto per_moe =
      checked_add(1 + (c.router_bias ? 1 : 0), checked_mul(3, c.n_routed_experts).value_or(~0ull));
  if (!per_moe) return std::nullopt;
  const auto moe = checked_mul(moe_layers, *per_moe);
  const auto rest = checked_mul(c.num_hidden_layers, attn);
  if (!moe || !rest) return std::nullopt;
  const auto sum = checked_add(*moe, *rest);
  const std::uint64_t fixed =
      2 + (c.tie_word_embeddings ? 0 : 1) + 3 * (c.num_hidden_layers - moe_layers);
  return sum ? checked_add(*sum, fixed) : std::nullopt;
}

}  // namespace

std::span<const Family> families() { return kFamilies; }

const Family& family(FamilyId id) {
  for (const Family& f : kFamilies) {
    if (f.id == id) return f;
  }
  return kFamilies[0];
}

const Family* family_for_model_type(std::string_view model_type) {
  for (const Family& f : kFamilies) {
    for (std::string_view t : f.model_types) {
      if (t == model_type ||
          (t.ends_with('*') && model_type.starts_with(t.substr(0, t.size() - 1)))) {
        return &f;
      }
    }
  }
  return nullptr;
}

std::string known_model_types() {
  std::string out;
  for (const Family& f : kFamilies) {
    for (std::string_view t : f.model_types) {
      out += fmt::format("{}{}", out.empty() ? "" : ", ", t);
    }
  }
  return out;
}

std::optional<std::string> map_source_name(NameMap map, std::string_view name) {
  if (map == NameMap::kMiniMax) return map_minimax(name);
  return std::string(name);
}

std::string unmap_engine_name(NameMap map, std::string_view name) {
  if (map == NameMap::kMiniMax) return unmap_minimax(name);
  return std::string(name);
}

void for_each_model_weight(const MoeConfig& c,
                           const std::function<void(const ModelWeight&)>& visit) {
  if (family(c.family).tensors == TensorList::kMla) {
    for_each_glm_moe_weight(c, visit);
    return;
  }
  GqaEmitter{c, visit}.all();
}

std::optional<std::uint64_t> model_weight_count(const MoeConfig& c) {
  if (family(c.family).tensors == TensorList::kMla) return glm_moe_weight_count(c);
  return gqa_weight_count(c);
}

}  // namespace qrepack
