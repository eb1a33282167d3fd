// DeepSeek-V3 / GLM-MoE-DSA expert selection, as transformers' route_tokens_to_experts:
// sigmoid scores; e_score_correction_bias added for the choice only; experts in n_group groups,
// a group scored by the sum of its two best biased scores, the topk_group best groups kept;
// the top_k experts of those by biased score; weights are the unbiased scores, divided by
// their sum (+ 1e-20) when norm_topk_prob, times routed_scaling_factor. Ties go to the lower
// index (torch.topk's order is unspecified there; this one is deterministic).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrepack::model {

struct RoutingParams {
  std::uint64_t experts, top_k, n_group, topk_group;
  bool norm_topk_prob;
  float routed_scaling_factor;
};

struct Route {
  std::vector<std::uint32_t> expert;  ///< top_k expert indices, in selection order
  std::vector<float> weight;          ///< their weights
};

/// One token's route from its router logits (`experts` floats) and the bias.
Route route_token(std::span<const float> logits, std::span<const float> bias,
                  const RoutingParams& p);

}  // namespace qrepack::model
