// The tensors a GLM-MoE-DSA / DeepSeek-V3-style checkpoint holds, derived from its config, with
// the real checkpoint's names, shapes and storage (reference/colibri.md §3.4 and §5). One list
// serves the fixture writer and the coverage gate.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/dtype.h"

namespace qrepack {

/// Precision classes users set bits for (`--bits experts=4,shared=8,...`).
enum class WeightClass : std::uint8_t {
  kAttention,  ///< q/k/v and MLA q_a, q_b, kv_a (o_proj and kv_b have their own classes)
  kOProj,      ///< self_attn.o_proj
  kKvB,        ///< MLA self_attn.kv_b_proj
  kMtp,        ///< the MTP head's own projections: eh_proj, embed_tokens, shared_head.head
  kIndexer,    ///< DSA indexer projections (wq_b, wk, weights_proj)
  kDenseMlp,
  kSharedExpert,
  kRoutedExpert,
  kIo,      ///< embed_tokens and lm_head
  kRouter,  ///< mlp.gate.weight and e_score_correction_bias
  kNorm,
};

const char* weight_class_name(WeightClass c);

struct ModelWeight {
  std::string name;
  std::vector<std::uint64_t> shape;
  WeightClass cls;
  /// A projection: stored in the checkpoint's low-precision encoding in a quantized release
  /// (FP8 E4M3 with a "<name>_scale_inv" sidecar in the real FP8 checkpoint); otherwise
  /// `dtype`.
  bool quantized;
  Dtype dtype;
  /// The engine's main pass loads it. False for the DSA indexer and the MTP layers, which the
  /// checkpoint holds but the main conversion drops (the coverage gate skips them).
  bool main_pass = true;
};

/// Every logical weight, in state-dict order: embed, layers 0..L-1, final norm, lm_head, then
/// the MTP layers (L..L+num_nextn_predict_layers-1). Routed experts are listed per expert (the
/// engine's names). With index_n_heads > 0 every layer carries the DSA indexer.
std::vector<ModelWeight> glm_moe_weights(const MoeConfig& c);

/// Calls `visit` for each weight of glm_moe_weights(c), in the same order, without holding the
/// list (coverage and check-load walk it; memory stays constant).
void for_each_glm_moe_weight(const MoeConfig& c,
                             const std::function<void(const ModelWeight&)>& visit);

/// How many weights glm_moe_weights(c) lists, or nullopt on overflow; computed, not counted.
std::optional<std::uint64_t> glm_moe_weight_count(const MoeConfig& c);

/// Cap on the weights a config.json may describe (GLM-5.2, the largest family member, has
/// about 62k; a config at the dimension caps would otherwise describe 2^48).
inline constexpr std::uint64_t kMaxModelWeights = std::uint64_t{1} << 20;

/// Fused HF names of layer L's routed experts.
std::string fused_gate_up_name(std::uint64_t layer);
std::string fused_down_name(std::uint64_t layer);

}  // namespace qrepack
