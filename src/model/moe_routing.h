// DeepSeek-V3 / GLM-MoE-DSA expert selection, as transformers' route_tokens_to_experts:
// sigmoid scores; e_score_correction_bias added for the choice only; experts in n_group groups,
// a group scored by the sum of its two best biased scores, the topk_group best groups kept;
// the top_k experts of those by biased score; weights are the unbiased scores, divided by
// their sum (+ 1e-20) when norm_topk_prob, times routed_scaling_factor. Ties go to the lower
// index (torch.topk's order is unspecified there; this one is deterministic).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "qrepack/core/error.h"
#include "qrepack/model/model_weights.h"

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

/// An expert applied to the rows routed to it: [rows, out_cols].
using ExpertFn = std::function<Result<Matrix>(std::uint64_t expert, const Matrix& rows)>;

/// The order a token's weighted expert rows are summed in: by expert index, or by the route's
/// own order (c/qwen38_core.h replays rank 0 .. top_k - 1).
enum class MixOrder : std::uint8_t { kExpertIndex, kRouteOrder };

/// The routed mixture [x.rows, out_cols]: each expert some token routes to runs once on its
/// tokens' rows of x (in token order), experts in increasing index, and each output row adds
/// weight * that expert's row in `order`. Experts no token routes to are never run.
Result<Matrix> mix_routed_experts(const Matrix& x, const std::vector<Route>& routes,
                                  std::uint64_t experts, std::uint64_t out_cols,
                                  const ExpertFn& run, MixOrder order = MixOrder::kExpertIndex);

}  // namespace qrepack::model
