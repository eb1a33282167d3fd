// The arithmetic of the reference forward pass, in f32 with a fixed evaluation order: every
// output element is computed by one thread in the same order whatever the thread count, and
// the sources are built with -ffp-contract=off, so results are bit-identical across thread
// counts and builds of the same compiler.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "qrepack/model/model_weights.h"

namespace qrepack::model {

/// Dot product of n floats: eight interleaved partial sums, combined in a fixed tree.
float dot(const float* a, const float* b, std::uint64_t n);

/// Y = X W^T: X is [N, I], W is [O, I] (a weight as stored), Y is [N, O]. Parallel over O.
Matrix matmul(const Matrix& x, const Matrix& w);

/// RMSNorm of every row of x in place: x * rsqrt(mean(x^2) + eps) * weight (transformers'
/// order: normalize in f32, then scale by the weight).
void rms_norm(Matrix& x, std::span<const float> weight, double eps);

/// silu(gate) * up, elementwise into gate.
void swiglu(Matrix& gate, const Matrix& up);

/// The clamped SwiGLU of GLM-5.3-Flash's MLPs (c/glm53.c's swiglu_clamped), elementwise into
/// gate: silu(min(g, limit)) * clamp(u, -limit, limit).
void swiglu_clamped(Matrix& gate, const Matrix& up, float limit);

/// Kimi K3's SiTU-GLU, elementwise into gate: b1 tanh(g / b1) sigmoid(g) * b2 tanh(u / b2)
/// (activation_situ_beta, activation_situ_linear_beta), multiplied left to right as
/// c/kimi_k3.c's situf_ writes it.
void situ_glu(Matrix& gate, const Matrix& up, float b1, float b2);

/// Rotary tables for positions [0, t): cos and sin of position * inv_freq[i], i < dim / 2,
/// inv_freq[i] = 1 / theta^(2i / dim), computed in f32 as transformers does.
struct Rope {
  std::uint64_t half = 0;
  std::vector<float> cos, sin;  ///< [t][half]
  static Rope make(std::uint64_t dim, double theta, std::uint64_t t);
  /// The tables of given inverse frequencies (dim / 2 of them).
  static Rope from_inv_freq(const std::vector<float>& inv_freq, std::uint64_t t);
  /// inv_freq[i] = 1 / theta^(2i / dim), in f32 as transformers computes it.
  static std::vector<float> default_inv_freq(std::uint64_t dim, double theta);
  /// transformers' "llama3" rope_scaling of `inv_freq` (_compute_llama3_parameters, in f32):
  /// wavelengths above original / low_freq_factor divided by factor, below original /
  /// high_freq_factor kept, those between interpolated smoothly.
  static std::vector<float> llama3_inv_freq(std::vector<float> inv_freq, double factor,
                                            double low_freq_factor, double high_freq_factor,
                                            double original_max_positions);
  /// Rotates x (dim floats) at position p. `interleaved`: pairs (x[2i], x[2i+1]) rotate and
  /// the result is stored de-interleaved (evens then odds), as DeepSeek-V3's transformers code
  /// does for q and k alike (dot products equal the interleaved rotation's); otherwise pairs
  /// (x[i], x[i + dim/2]) rotate (GPT-NeoX / Llama split halves).
  void apply(float* x, std::uint64_t p, bool interleaved) const;
};

/// Softmax of x in place (max-subtracted, f32).
void softmax(std::span<float> x);

/// Index of the largest value; the first on ties (torch.argmax).
std::uint32_t argmax(std::span<const float> x);

}  // namespace qrepack::model
