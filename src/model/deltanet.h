// The gated delta rule token mixers, for one sequence, after their input projections: the
// Gated DeltaNet of Qwen3.5 / 3.6 (transformers' Qwen3_5MoeGatedDeltaNet with
// torch_recurrent_gated_delta_rule) and Kimi Delta Attention (KDA) of Kimi K3 (c/kimi_k3.c's
// kda_forward; fla's fused_recurrent_kda). One mechanism, two choices:
//   conv   causal depthwise conv1d over the q | k | v channels (kernel K, zero history), SiLU
//          (KDA's three convs are this one over the concatenated channels)
//   beta   sigmoid(b), per value head
//   decay  kScalar (Qwen): g = -exp(A_log[h]) * softplus(a + dt_bias[h]), one per value head;
//          kPerKey (KDA): g_i = lower_bound * sigmoid(exp(A_log[h]) * (a_i + dt_bias_i)), one
//          per key channel of the head's state
//   rule   q, k L2-normalized (1 / sqrt(sum + 1e-6)), q scaled by 1 / sqrt(key_head_dim); key
//          heads shared by value_heads / key_heads value heads; per value head a state S
//          [key_head_dim x value_head_dim] from zero: row i of S *= exp(g_i); d = (v_t - S^T
//          k_t) * beta_t; S += k_t d^T; o_t = S^T q_t
//   norm   per value head: RMSNorm (x * w, not zero-centered) times silu(z) (kSilu, Qwen) or
//          sigmoid(z) (kSigmoid, KDA's output gate)
// The result feeds the output projection.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace qrepack::model {

enum class DeltaDecay : std::uint8_t { kScalar, kPerKey };
enum class DeltaGate : std::uint8_t { kSilu, kSigmoid };

struct DeltaNetDims {
  std::uint64_t key_heads, key_dim, value_heads, value_dim, kernel;
  double eps;
  DeltaDecay decay = DeltaDecay::kScalar;
  DeltaGate gate = DeltaGate::kSilu;
  float lower_bound = 0;  ///< kPerKey's gate_lower_bound
  std::uint64_t key_channels() const { return key_heads * key_dim; }
  std::uint64_t conv_channels() const { return 2 * key_channels() + value_heads * value_dim; }
  /// Decay inputs (`a`, dt_bias) per value head: 1, or key_dim for kPerKey.
  std::uint64_t decay_width() const { return decay == DeltaDecay::kPerKey ? key_dim : 1; }
};

struct DeltaNetParams {
  std::span<const float> conv;     ///< [channels][kernel], oldest tap first
  std::span<const float> a_log;    ///< [value_heads]
  std::span<const float> dt_bias;  ///< [value_heads * decay_width]
  std::span<const float> norm;     ///< [value_dim]
};

/// One sequence of `t` tokens: qkv [t][conv_channels] (before the conv), z [t][value_heads *
/// value_dim] (the output gate's input), b [t][value_heads], a [t][value_heads * decay_width];
/// writes out [t][value_heads * value_dim]. Value heads run in parallel, each in a fixed order.
void gated_deltanet(const DeltaNetDims& d, const DeltaNetParams& p, std::uint64_t t,
                    const float* qkv, const float* z, const float* b, const float* a, float* out);

}  // namespace qrepack::model
