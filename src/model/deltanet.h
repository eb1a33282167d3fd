// The Gated DeltaNet token mixer of Qwen3.5 / 3.6 (transformers' Qwen3_5MoeGatedDeltaNet with
// torch_recurrent_gated_delta_rule), for one sequence, after its four input projections:
//   conv   causal depthwise conv1d over the q | k | v channels (kernel K, zero history), SiLU
//   gates  beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias), per value head
//   rule   q, k L2-normalized (eps 1e-6), q scaled by 1 / sqrt(key_head_dim); key heads
//          shared by value_heads / key_heads value heads; per value head a state S
//          [key_head_dim x value_head_dim] from zero: S *= exp(g_t); d = (v_t - S^T k_t) *
//          beta_t; S += k_t d^T; o_t = S^T q_t
//   norm   per value head: RMSNorm (x * w, not zero-centered) times silu(z)
// The result feeds out_proj.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrepack::model {

struct DeltaNetDims {
  std::uint64_t key_heads, key_dim, value_heads, value_dim, kernel;
  double eps;
  std::uint64_t key_channels() const { return key_heads * key_dim; }
  std::uint64_t conv_channels() const { return 2 * key_channels() + value_heads * value_dim; }
};

struct DeltaNetParams {
  std::span<const float> conv;     ///< [channels][kernel]
  std::span<const float> a_log;    ///< [value_heads]
  std::span<const float> dt_bias;  ///< [value_heads]
  std::span<const float> norm;     ///< [value_dim]
};

/// One sequence of `t` tokens: qkv [t][conv_channels] (before the conv), z [t][value_heads *
/// value_dim], b and a [t][value_heads]; writes out [t][value_heads * value_dim]. Value heads
/// run in parallel, each in a fixed order.
void gated_deltanet(const DeltaNetDims& d, const DeltaNetParams& p, std::uint64_t t,
                    const float* qkv, const float* z, const float* b, const float* a, float* out);

}  // namespace qrepack::model
