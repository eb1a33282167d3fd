// The config.json fields of a GLM-MoE-DSA / DeepSeek-V3-style model that decide which tensors
// exist and their shapes (reference/colibri.md §3.3, §3.4).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"

namespace qrepack {

struct MoeConfig {
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
  /// From quantization_config.weight_block_size; {0, 0} when the model is not FP8-block.
  std::uint64_t block_rows = 0;
  std::uint64_t block_cols = 0;
};

/// config.json text for `c`; with `fp8` the DeepSeek-V3 quantization_config is included.
std::string moe_config_to_json(const MoeConfig& c, bool fp8);

/// Parses and validates config.json (all listed fields present, positive where a shape needs
/// them, first_k_dense_replace <= num_hidden_layers, top-k <= experts). Missing
/// weight_block_size with quant_method "fp8" defaults to 128x128.
Result<MoeConfig> moe_config_from_json(const nlohmann::json& j);

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
