#include "model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace qrepack::model {
namespace {

// Indices of the k largest values, largest first, ties to the lower index.
std::vector<std::uint32_t> top_k(std::span<const float> v, std::uint64_t k) {
  std::vector<std::uint32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return v[a] > v[b]; });
  idx.resize(std::min<std::uint64_t>(k, idx.size()));
  return idx;
}

}  // namespace

Route route_token(std::span<const float> logits, std::span<const float> bias,
                  const RoutingParams& p) {
  const std::uint64_t e = p.experts, per_group = e / p.n_group;
  std::vector<float> score(e), choice(e);
  for (std::uint64_t i = 0; i < e; ++i) {
    score[i] = 1.0f / (1.0f + std::exp(-logits[i]));
    choice[i] = score[i] + bias[i];
  }
  std::vector<float> group_score(p.n_group);
  for (std::uint64_t g = 0; g < p.n_group; ++g) {
    const auto best = top_k(std::span<const float>(choice).subspan(g * per_group, per_group), 2);
    float s = 0;
    for (auto i : best) s += choice[g * per_group + i];
    group_score[g] = s;
  }
  const auto groups = top_k(group_score, p.topk_group);
  std::vector<float> masked(e, -std::numeric_limits<float>::infinity());
  for (auto g : groups) {
    for (std::uint64_t i = g * per_group; i < (g + 1) * per_group; ++i) masked[i] = choice[i];
  }
  Route r;
  r.expert = top_k(masked, p.top_k);
  float sum = 0;
  for (auto i : r.expert) {
    r.weight.push_back(score[i]);
    sum += score[i];
  }
  for (float& w : r.weight) {
    if (p.norm_topk_prob) w /= sum + 1e-20f;
    w *= p.routed_scaling_factor;
  }
  return r;
}

Result<Matrix> mix_routed_experts(const Matrix& x, const std::vector<Route>& routes,
                                  std::uint64_t experts, std::uint64_t out_cols,
                                  const ExpertFn& run, MixOrder order) {
  const std::uint64_t n = x.rows, d = x.cols;
  // Tokens per expert, in token order, with their weights and ranks.
  struct Use {
    std::uint64_t token;
    float weight;
    std::size_t rank;
  };
  std::vector<std::vector<Use>> by_expert(experts);
  std::uint64_t ranks = 0;
  for (std::uint64_t t = 0; t < routes.size(); ++t) {
    ranks = std::max<std::uint64_t>(ranks, routes[t].expert.size());
    for (std::size_t k = 0; k < routes[t].expert.size(); ++k) {
      by_expert[routes[t].expert[k]].push_back({t, routes[t].weight[k], k});
    }
  }
  Matrix out{n, out_cols, std::vector<float>(n * out_cols)};
  // kRouteOrder: each weighted row parked at (token, rank), summed once every expert ran.
  std::vector<float> parked(order == MixOrder::kRouteOrder ? n * ranks * out_cols : 0);
  for (std::uint64_t ex = 0; ex < experts; ++ex) {
    const auto& toks = by_expert[ex];
    if (toks.empty()) continue;
    Matrix xe{toks.size(), d, std::vector<float>(toks.size() * d)};
    for (std::size_t i = 0; i < toks.size(); ++i) {
      std::copy(x.row(toks[i].token), x.row(toks[i].token) + d, xe.row(i));
    }
    QR_ASSIGN_OR_RETURN(y, run(ex, xe));
    for (std::size_t i = 0; i < toks.size(); ++i) {
      float* o = order == MixOrder::kRouteOrder
                     ? parked.data() + (toks[i].token * ranks + toks[i].rank) * out_cols
                     : out.row(toks[i].token);
      for (std::uint64_t k = 0; k < out_cols; ++k) o[k] += y.row(i)[k] * toks[i].weight;
    }
  }
  for (std::uint64_t t = 0; order == MixOrder::kRouteOrder && t < routes.size(); ++t) {
    for (std::size_t k = 0; k < routes[t].expert.size(); ++k) {
      const float* p = parked.data() + (t * ranks + k) * out_cols;
      for (std::uint64_t j = 0; j < out_cols; ++j) out.row(t)[j] += p[j];
    }
  }
  return out;
}

}  // namespace qrepack::model
