// Multi-head latent attention (DeepSeek-V2/V3 MLA) up to its output projection, shared by the
// GLM-MoE-DSA / DeepSeek-V3 / Kimi-K2 pass (rotary keys) and Kimi K3's gated MLA layers (NoPE):
//   q      q_a_proj -> q_a_layernorm -> q_b_proj, or q_proj when q_lora == 0; per head
//          [nope | rope]
//   kv     kv_a_proj_with_mqa = [latent (kv_lora) | rope part (one head shared by all)];
//          kv_a_layernorm on the latent; kv_b_proj into per-head [k_nope | v]
//   rope   applied to q's and k's rope parts at each position when a Rope is given; without
//          one (Kimi K3) they enter the scores unrotated
//   attend scores q . k * (nope + rope)^-0.5, causal softmax (f32, sums in double), the
//          weighted v's; with a KeySelection (GLM-5.3-Flash's DSA indexer) each query attends
//          only its selected keys, in selection order, and an empty selection gives zeros
// Weights are read through the cache one matrix at a time; norms use `eps`.
#pragma once

#include <cstdint>
#include <string>

#include "model/dsa_indexer.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"

namespace qrepack::model {

struct MlaDims {
  std::uint64_t hidden, heads, q_lora, kv_lora, nope, rope, v;
  double eps;
};

/// The per-head attention outputs [x.rows][heads * v] (before o_proj) of x's rows, each
/// sequence of `b` attending causally to itself, or, when `select` is given, row i to the keys
/// select[i] lists (positions from its sequence's start). `p` names the weights
/// ("...self_attn.").
Result<Matrix> mla_context(WeightCache& w, const std::string& p, const MlaDims& d, const Matrix& x,
                           const Batch& b, const Rope* rope, bool interleaved,
                           const KeySelection* select = nullptr);

}  // namespace qrepack::model
