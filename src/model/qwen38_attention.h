// Qwen3.8-Flash-Next's sparse attention (QSA), as c/qwen38_core.h's q38_attention computes it
// for each position p of a sequence:
//   q_proj  per head [query (head_dim) | output gate (head_dim)]; query and key RMS-normed
//           (zero-centered, q_norm / k_norm) then rotated on their first rotary_dim values
//           (pairs i, i + rotary_dim / 2; angle p / theta^(2i / rotary_dim) in f32)
//   indexer index_qk_proj gives indexer_n_heads queries and one key of indexer_head_dim; the
//           keys of each whole block of indexer_compress_ratio R positions are averaged (sum of
//           k / R), normed (k_layernorm) and rotated at the block's first position; a block
//           scores sum_h relu(q_h . key) / sqrt(indexer_head_dim) with the queries normed
//           (q_layernorm) and rotated at p; the best indexer_budget / R blocks (ties: lower
//           block) and the tail positions after the last whole block are attended
//   attend  softmax(q . k / sqrt(head_dim)) over the selected positions in that order (the
//           query head's key-value head: h / (heads / kv_heads)), times sigmoid(output gate)
//   o_proj  of the heads' outputs
#pragma once

#include <cstdint>

#include "model/forward_common.h"
#include "model/qwen38_config.h"
#include "model/qwen38_weights.h"

namespace qrepack::model {

/// The sparse-attention block of text layer `layer` over every sequence of the batch.
Result<Matrix> q38_sparse_attention(Q38Weights& w, const Q38ForwardConfig& c, std::uint64_t layer,
                                    const Matrix& x, const Batch& b);

/// q38_rope: rotates x's first `rotary_dim` values at position `pos`.
void q38_rope(float* x, std::uint64_t rotary_dim, std::uint64_t pos, double theta);

}  // namespace qrepack::model
