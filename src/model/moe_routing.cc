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

}  // namespace qrepack::model
