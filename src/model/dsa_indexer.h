// The DSA lightning indexer's token selection with k-pooling, as GLM-5.3-Flash runs it
// (c/glm53.c through c/sparse_index.h). Keys are grouped into pools of `pool` consecutive
// tokens; a pool's key is, per channel d, the softmax over its members j of
// (gate[j][d] + ape[j][d]) mixing key[j][d]. For query q, each COMPLETE pool whose last token
// is <= q scores sum_h relu(query_h . pooled) * head_w[h] / sqrt(dim) (head_w already scaled by
// heads^-0.5 by the caller); the topk / pool best pools (ties to the lower pool) expand into
// their tokens, in rank order; with `tail`, the tokens after the last complete pool up to q are
// appended. Fewer complete pools than wanted leave fewer tokens (none at all for q < pool - 1
// without the tail): attention over an empty selection is zero. Every step in f32, one fixed
// order per query.
#pragma once

#include <cstdint>
#include <vector>

namespace qrepack::model {

struct KpoolIndexDims {
  std::uint64_t heads, dim, pool, topk;
  bool tail;
};

/// Per query row, the key positions (from the sequence's start) it attends, in selection order.
using KeySelection = std::vector<std::vector<std::uint32_t>>;

/// One sequence of `t` tokens: queries [t][heads * dim], keys / gates [t][dim], head_w
/// [t][heads], ape [pool][dim]. Appends t rows to `out`.
void kpool_select(const KpoolIndexDims& d, std::uint64_t t, const float* queries, const float* keys,
                  const float* gates, const float* head_w, const float* ape, KeySelection& out);

}  // namespace qrepack::model
