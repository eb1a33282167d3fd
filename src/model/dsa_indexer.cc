#include "model/dsa_indexer.h"

#include <algorithm>
#include <cmath>

namespace qrepack::model {
namespace {

// The pooled keys [pools][dim] of the complete pools (the incomplete tail pool is unused).
std::vector<float> pooled_keys(const KpoolIndexDims& d, std::uint64_t complete, const float* keys,
                               const float* gates, const float* ape) {
  const std::uint64_t m = d.pool, dim = d.dim;
  std::vector<float> pooled(complete * dim), logit(m);
  for (std::uint64_t p = 0; p < complete; ++p) {
    const std::uint64_t s = p * m;
    for (std::uint64_t c = 0; c < dim; ++c) {
      float top = -INFINITY;
      for (std::uint64_t j = 0; j < m; ++j) {
        logit[j] = gates[(s + j) * dim + c] + ape[j * dim + c];
        top = std::max(top, logit[j]);
      }
      float total = 0.0f;
      for (std::uint64_t j = 0; j < m; ++j) total += std::exp(logit[j] - top);
      float mixed = 0.0f;
      for (std::uint64_t j = 0; j < m; ++j) {
        mixed += std::exp(logit[j] - top) / total * keys[(s + j) * dim + c];
      }
      pooled[p * dim + c] = mixed;
    }
  }
  return pooled;
}

// Query q's score of each visible pool (pools 0 .. visible-1).
void score_pools(const KpoolIndexDims& d, const float* query, const float* head_w,
                 const std::vector<float>& pooled, std::uint64_t visible,
                 std::vector<float>& score) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.dim));
  score.assign(visible, 0.0f);
  for (std::uint64_t p = 0; p < visible; ++p) {
    float s = 0.0f;
    for (std::uint64_t h = 0; h < d.heads; ++h) {
      float dot = 0.0f;
      for (std::uint64_t c = 0; c < d.dim; ++c) dot += query[h * d.dim + c] * pooled[p * d.dim + c];
      if (dot > 0.0f) s += head_w[h] * dot * scale;
    }
    score[p] = s;
  }
}

}  // namespace

void kpool_select(const KpoolIndexDims& d, std::uint64_t t, const float* queries, const float* keys,
                  const float* gates, const float* head_w, const float* ape, KeySelection& out) {
  const std::uint64_t m = d.pool, complete = t / m, wanted = d.topk / m;
  const std::vector<float> pooled = pooled_keys(d, complete, keys, gates, ape);
  std::vector<float> score;
  std::vector<bool> taken;
  for (std::uint64_t q = 0; q < t; ++q) {
    std::vector<std::uint32_t> row;
    const std::uint64_t visible = std::min(complete, (q + 1) / m);
    score_pools(d, queries + q * d.heads * d.dim, head_w + q * d.heads, pooled, visible, score);
    taken.assign(visible, false);
    for (std::uint64_t r = 0; r < wanted; ++r) {
      std::uint64_t best = visible;
      for (std::uint64_t p = 0; p < visible; ++p) {
        if (!taken[p] && (best == visible || score[p] > score[best])) best = p;
      }
      if (best == visible) break;
      taken[best] = true;
      for (std::uint64_t j = 0; j < m; ++j) row.push_back(static_cast<std::uint32_t>(best * m + j));
    }
    if (d.tail) {
      const std::uint64_t tail = (q + 1) % m, start = q + 1 - tail;
      for (std::uint64_t j = 0; j < tail && j + 1 < m; ++j) {
        row.push_back(static_cast<std::uint32_t>(start + j));
      }
    }
    out.push_back(std::move(row));
  }
}

}  // namespace qrepack::model
