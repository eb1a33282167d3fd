// Manifold-constrained hyper-connections (mHC): `mult` parallel residual streams replace the
// plain residual. At each site (before attention, before the MLP) the streams of a token,
// flattened to [mult * dim], give the mix logits
//   mixes = (fn . streams) / sqrt(mean(streams^2) + norm_eps)        fn [(2+mult)*mult, mult*dim]
// split into
//   pre[i]    = sigmoid(mixes[i] * scale[0] + base[i]) + hc_eps              (mult)
//   post[i]   = 2 sigmoid(mixes[mult+i] * scale[1] + base[mult+i])           (mult)
//   comb[i,j] = softmax_j(mixes[2mult + i*mult + j] * scale[2] + base[...]) + hc_eps, then
//               Sinkhorn: columns normalized (sum + hc_eps), and sinkhorn_iters - 1 more rounds
//               of rows then columns                                         (mult x mult)
// The block's input is sum_i pre[i] * stream_i; after the block, stream_j of the output is
// sum_i comb[i,j] * stream_i + post[j] * branch. The same arithmetic in GLM-5.3-Flash
// (c/glm53.c through c/hyper_connections.h) and DeepSeek V4 (c/deepseek_v4.c's
// coli_v4_hc_pre / coli_v4_hc_post); they differ only in how the streams close before the
// final norm: GLM-5.3 takes their plain mean (hc_mean), DeepSeek V4 a learned pre-only mix
// with hc_head_{fn,base,scale} (hc_head).
// f32, fixed order: tokens run in parallel, each token's reductions in one order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/forward_common.h"

namespace qrepack::model {

struct HcDims {
  std::uint64_t mult = 1, dim = 0;  ///< hc_mult, hidden_size
  std::uint64_t sinkhorn_iters = 1;
  float norm_eps = 1e-6f;  ///< the RMS scale of the flattened streams (rms_norm_eps)
  float hc_eps = 1e-6f;    ///< hc_eps
  std::uint64_t mix_count() const { return (2 + mult) * mult; }
  std::uint64_t width() const { return mult * dim; }
};

/// One site's weights: fn [mix_count, mult*dim], base [mix_count], scale [3].
struct HcSite {
  std::shared_ptr<const Matrix> fn, base, scale;
};

/// Reads `<prefix>hc_<site>_{fn,base,scale}` (site "attn" or "ffn"), shapes checked.
Result<HcSite> read_hc_site(WeightCache& w, const std::string& prefix, const std::string& site,
                            const HcDims& d);

/// What hc_pre hands to hc_post: per token, post [mult] and comb [mult][mult]; and pre
/// [mult], the site's own collapse weights.
struct HcMix {
  std::vector<float> post, comb, pre;
};

/// The block inputs [n, dim] of `streams` [n, mult*dim]; `mix` receives pre, post and comb.
/// `collapse_pre` ([n * mult]), when given, collapses the streams instead of the site's own
/// pre: DeepSeek V4.1 collapses each sublayer's input with the pre its previous sublayer
/// computed (model.py's Block as c/deepseek_v41.c runs it).
Matrix hc_pre(const HcDims& d, const HcSite& s, const Matrix& streams, HcMix& mix,
              const std::vector<float>* collapse_pre = nullptr);

/// The streams after the block: comb-mixed `streams` plus post * `branch` [n, dim].
Matrix hc_post(const HcDims& d, const HcMix& mix, const Matrix& streams, const Matrix& branch);

/// `x` [n, dim] copied into each of `mult` streams: [n, mult*dim].
Matrix hc_expand(const Matrix& x, std::uint64_t mult);

/// The streams' plain mean (GLM-5.3-Flash's close), summed in stream order then divided.
Matrix hc_mean(const Matrix& streams, std::uint64_t mult);

/// DeepSeek V4's close: sum_i pre[i] * stream_i with pre[i] = sigmoid((fn_i . streams) /
/// rms * scale[0] + base[i]) + hc_eps; fn [mult, mult*dim], base [mult], scale [1].
Matrix hc_head(const HcDims& d, std::span<const float> fn, std::span<const float> base, float scale,
               const Matrix& streams);

/// The Sinkhorn split of one token's mixes (exposed for tests): pre [mult], post [mult],
/// comb [mult*mult].
void hc_split(const HcDims& d, std::span<const float> mixes, std::span<const float> scale,
              std::span<const float> base, float* pre, float* post, float* comb);

}  // namespace qrepack::model
