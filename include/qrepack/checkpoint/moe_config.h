// The config.json fields that decide which tensors a checkpoint holds and their shapes, for every
// model family qrepack knows (checkpoint/family.h): GLM-MoE-DSA, DeepSeek-V3 / Kimi-K2 (MLA +
// MoE; reference/colibri.md §3.3, §3.4), MiniMax, Qwen3-MoE, and the dense Llama / Mistral /
// Qwen2 / Qwen3 family.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

/// A row of the family table (checkpoint/family.h).
enum class FamilyId : std::uint8_t {
  kGlmMoeDsa,
  kDeepseekV3,
  kKimiK2,
  kMiniMax,
  kQwen3Moe,
  kDense
};

/// Per-head RMSNorm of q and k inside attention.
enum class QkNorm : std::uint8_t {
  kNone,
  kPerHead,   ///< q_norm / k_norm weights of [head_dim] (Qwen3, Qwen3-MoE)
  kPerLayer,  ///< q_norm [heads * head_dim], k_norm [kv_heads * head_dim] (MiniMax)
};

struct MoeConfig {
  FamilyId family = FamilyId::kGlmMoeDsa;
  std::string model_type = "glm_moe_dsa";
  std::uint64_t vocab_size = 0;
  std::uint64_t hidden_size = 0;
  std::uint64_t intermediate_size = 0;      ///< dense MLP
  std::uint64_t moe_intermediate_size = 0;  ///< per expert
  std::uint64_t num_hidden_layers = 0;
  std::uint64_t first_k_dense_replace = 0;
  std::uint64_t num_attention_heads = 0;
  std::uint64_t n_routed_experts = 0;
  std::uint64_t num_experts_per_tok = 0;
  std::uint64_t n_shared_experts = 0;
  std::uint64_t q_lora_rank = 0;  ///< 0: `"q_lora_rank": null`, one q_proj instead of q_a/q_b
  std::uint64_t kv_lora_rank = 0;
  std::uint64_t qk_nope_head_dim = 0;
  std::uint64_t qk_rope_head_dim = 0;
  std::uint64_t v_head_dim = 0;
  double rms_norm_eps = 1e-5;
  // DSA indexer (GLM-MoE-DSA); index_n_heads == 0: the model has none.
  std::uint64_t index_topk = 0;
  std::uint64_t index_n_heads = 0;
  std::uint64_t index_head_dim = 0;
  /// MTP (nextn) layers stored at layer indices num_hidden_layers and up.
  std::uint64_t num_nextn_predict_layers = 0;
  // What only the forward pass reads (reference/colibri.md §3.3; transformers' configs).
  std::uint64_t n_group = 1;
  std::uint64_t topk_group = 1;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  /// DeepSeek-V3's rope_interleave (its default true); GLM-MoE-DSA always rotates interleaved
  /// pairs (transformers' model and the C engine ignore the key).
  bool rope_interleave = true;
  bool tie_word_embeddings = false;
  // Grouped-query attention (MiniMax, Qwen3-MoE, dense families); MLA families leave them 0.
  std::uint64_t num_key_value_heads = 0;  ///< 0: num_attention_heads
  std::uint64_t head_dim = 0;             ///< 0: hidden_size / num_attention_heads
  bool attention_bias = false;            ///< q/k/v projections carry a bias (Qwen2: always)
  QkNorm qk_norm = QkNorm::kNone;
  /// Qwen3-MoE: layer l is MoE iff it is not in mlp_only_layers and (l + 1) % step == 0.
  std::uint64_t decoder_sparse_step = 1;
  std::vector<std::uint64_t> mlp_only_layers;
  /// The router carries e_score_correction_bias (MLA families, MiniMax).
  bool router_bias = true;
  /// quantization_config.quant_method ("fp8", "modelopt", "compressed-tensors") and its
  /// quant_algo / format ("NVFP4", "nvfp4-pack-quantized", ...); empty when absent.
  std::string quant_method;
  std::string quant_format;
  /// From quantization_config.weight_block_size; {0, 0} when the model is not FP8-block.
  std::uint64_t block_rows = 0;
  std::uint64_t block_cols = 0;
};

/// Layer `l` has a routed MoE MLP (else a dense one).
bool is_moe_layer(const MoeConfig& c, std::uint64_t l);
/// How many of the num_hidden_layers layers are MoE layers.
std::uint64_t moe_layer_count(const MoeConfig& c);
/// Attention geometry of the GQA families.
std::uint64_t kv_heads(const MoeConfig& c);
std::uint64_t attn_head_dim(const MoeConfig& c);

/// Reads `dir`/config.json: nullopt when there is none; an error when it is not valid.
Result<std::optional<MoeConfig>> load_moe_config(const std::string& dir);

/// Cap on every dimension and count in config.json: keeps each derived shape product far from
/// overflow (a hostile config is still input).
inline constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 24;
/// Cap on num_nextn_predict_layers (real models have 1).
inline constexpr std::uint64_t kMaxNextnLayers = 16;
/// Cap on config.json's size.
inline constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{64} << 20;

}  // namespace qrepack
