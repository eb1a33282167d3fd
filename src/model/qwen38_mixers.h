// Qwen3.8-Flash-Next's residual stream and per-layer embedding, as c/qwen38_core.h computes
// them (q38_gr_read / q38_gr_apply, q38_ple). These "gated residual" hyper-connection mixers are
// not GLM-5.3's / DeepSeek V4's mHC (no Sinkhorn-normalized mixing matrix, no pre/post split):
//   hyper    the residual is hc_count streams of hidden_size ([T, hc * H]); the embedding is
//            copied into every stream
//   read     per stream b: n_b = rms0(x_b) * (1 + hc_norm_b); low = silu(down(n) / hc) [rank];
//            m = up(low) [hc * H]; the block input is (sum_b sigmoid(m_b) * n_b) / hc; the
//            inject weights a = 2 sigmoid(block_inject(n) / hc) [hc]
//   apply    x_b += a_b * block output
//   final    hyper_connection_mixer's read (no inject) feeds lm_head
//   PLE      on ple_layer_ids[0], before its attention read: per token, 2 x heads_per_ngram
//            n-gram heads hash (cur, prev, prev2) (2-grams for the first half, 3-grams after;
//            the history starts at eos and restarts after an eos) into rows of the n-gram
//            table; e = their concatenation [ple_dim]; keys = key_proj(e) [hc * H], v =
//            value_proj(e) [H]; per stream g_b = sigmoid(s(rms0(keys_b) . rms0(x_b) / sqrt(H)))
//            with s(d) = sign(d) sqrt(max(|d|, 1e-6)); u_b = g_b v; c = rms0(u) (norm_conv);
//            x += u + silu(causal depthwise conv of c, kernel K, dilation ngram_size 3)
// rms0: x / sqrt(mean(x^2) + eps) (sum in double) times 1 + w (Qwen4-Exp's zero-centered norms).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/forward_common.h"
#include "model/qwen38_config.h"
#include "model/qwen38_weights.h"

namespace qrepack::model {

/// q38_sigmoid / q38_silu (the stable branch on the sign).
float q38_sigmoid(float x);
float q38_silu(float x);

/// out = x / sqrt(mean(x^2) + eps) * (1 + w), n values (out may be x).
void q38_rms0(float* out, const float* x, const float* w, std::uint64_t n, double eps);

struct GatedRead {
  Matrix mixed;   ///< [T, H] the block's input
  Matrix inject;  ///< [T, hc] the block output's weight per stream (empty for the final mixer)
};

/// The read of hyper-connection `base` ("layers.L.attn_hyper_connection.", or
/// "hyper_connection_mixer.") over every row of `hyper` [T, hc * H].
Result<GatedRead> gated_read(Q38Weights& w, const Q38ForwardConfig& c, const std::string& base,
                             const Matrix& hyper, bool inject);

/// hyper_b += inject_b * block for every row and stream.
void gated_apply(const Q38ForwardConfig& c, Matrix& hyper, const Matrix& block,
                 const Matrix& inject);

/// Adds the PLE layer's output to `hyper` for every sequence of the batch.
Status ple_add(Q38Weights& w, const Q38ForwardConfig& c, const Batch& b, Matrix& hyper);

}  // namespace qrepack::model
