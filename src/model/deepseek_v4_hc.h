// DeepSeek V4.1's hyper-connections: hc_mult copies of the residual stream, mixed by a
// Sinkhorn-normalized matrix (the vendor's model.py Block, kernel.py hc_split_sinkhorn, as
// c/deepseek_v41.c's hc_mixes and dsv41_ref.py compute them). Kept apart from the shared
// hyper-connection helper on purpose: in V4.1 the `pre` weights a sublayer computes collapse
// the copies for the NEXT sublayer (attention reads the previous block's FFN `pre`, the FFN
// this attention's, the final norm the last FFN's), where the shared helper collapses with
// the sublayer's own `pre` at once.
#pragma once

#include <cstdint>
#include <span>

#include "qrepack/model/model_weights.h"

namespace qrepack::model {

/// Per row: pre [hc], post [hc] and comb [hc, hc] (comb[i][j]: copy i into copy j).
struct HcMixes {
  Matrix pre, post, comb;
};

struct HcParams {
  std::uint64_t hc, dim, iters;
  float norm_eps, hc_eps;
};

/// The mixes of every row of h ([n, hc * dim]): (h . fn_r) * rsqrt(mean(h^2) + norm_eps) for
/// each of fn's (2 + hc) * hc rows, then pre = sigmoid(m scale0 + base) + hc_eps, post =
/// 2 sigmoid(m scale1 + base), comb = softmax rows + hc_eps, column-normalized, then
/// iters - 1 rounds of row and column normalization (each sum + hc_eps).
HcMixes hc_mixes(const Matrix& h, const Matrix& fn, std::span<const float> scale,
                 std::span<const float> base, const HcParams& p);

/// y[t] = sum_c pre[t][c] h[t][c]: [n, dim].
Matrix hc_collapse(const Matrix& h, const Matrix& pre, const HcParams& p);

/// h[t][j] = sum_i comb[t][i][j] h[t][i] + post[t][j] y[t], in place.
void hc_expand(Matrix& h, const Matrix& y, const HcMixes& m, const HcParams& p);

}  // namespace qrepack::model
