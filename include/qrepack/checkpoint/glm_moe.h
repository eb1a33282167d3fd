// The tensors a GLM-MoE-DSA / DeepSeek-V3-style checkpoint holds, derived from its config, with
// the real checkpoint's names, shapes and storage (reference/colibri.md §3.4 and §5). One list
// serves the fixture writer and the coverage gate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/dtype.h"

namespace qrepack {

/// Precision classes users set bits for (`--bits experts=4,shared=8,...`).
enum class WeightClass : std::uint8_t {
  kAttention,
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
  /// Stored as FP8 E4M3 with a "<name>_scale_inv" sidecar in the real FP8 checkpoint;
  /// otherwise `dtype`.
  bool fp8_block;
  Dtype dtype;
};

/// Every logical weight, in state-dict order: embed, layers 0..L-1, final norm, lm_head.
/// Routed experts are listed per expert (the engine's names).
std::vector<ModelWeight> glm_moe_weights(const MoeConfig& c);

/// Fused HF names of layer L's routed experts.
std::string fused_gate_up_name(std::uint64_t layer);
std::string fused_down_name(std::uint64_t layer);

}  // namespace qrepack
