#include "model/qwen38_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/forward_ops.h"
#include "model/qwen38_mixers.h"
#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

struct QsaWeights {
  std::shared_ptr<const Matrix> q_norm, k_norm, idx_q_norm, idx_k_norm;
};

// The projections of every row: queries with their gates, keys, values, indexer rows.
struct QsaRows {
  Matrix q, k, v, idx;
};

// One sequence's keys (normed, rotated) and indexer block keys, its rows [r0, r0 + n).
struct SequenceKeys {
  std::vector<float> k;       ///< [n][kv_heads][head_dim]
  std::vector<float> blocks;  ///< [n / R][idx_dim], pooled, normed, rotated
};

SequenceKeys sequence_keys(const Q38ForwardConfig& c, const QsaWeights& w, const QsaRows& rows,
                           std::uint64_t r0, std::uint64_t n) {
  const std::uint64_t D = c.head_dim, KV = c.kv_heads, ID = c.idx_dim, R = c.idx_ratio;
  const std::uint64_t IQ = c.idx_heads;
  SequenceKeys s{std::vector<float>(n * KV * D), std::vector<float>(n / R * ID)};
  for (std::uint64_t t = 0; t < n; ++t) {
    for (std::uint64_t h = 0; h < KV; ++h) {
      float* kh = s.k.data() + (t * KV + h) * D;
      q38_rms0(kh, rows.k.row(r0 + t) + h * D, w.k_norm->v.data(), D, c.eps);
      q38_rope(kh, c.rotary_dim, t, c.theta);
    }
  }
  const auto fr = static_cast<float>(R);
  for (std::uint64_t blk = 0; blk < n / R; ++blk) {
    float* pool = s.blocks.data() + blk * ID;
    for (std::uint64_t r = 0; r < R; ++r) {
      const float* raw = rows.idx.row(r0 + blk * R + r) + IQ * ID;
      for (std::uint64_t d = 0; d < ID; ++d) pool[d] += raw[d] / fr;
    }
    q38_rms0(pool, pool, w.idx_k_norm->v.data(), ID, c.eps);
    q38_rope(pool, c.rotary_dim, blk * R, c.theta);
  }
  return s;
}

// The positions position `pos` attends: the best blocks' positions, then the tail.
std::vector<std::uint64_t> select_positions(const Q38ForwardConfig& c, const QsaWeights& w,
                                            const SequenceKeys& keys, const float* idx_row,
                                            std::uint64_t pos) {
  const std::uint64_t ID = c.idx_dim, IQ = c.idx_heads, R = c.idx_ratio;
  const std::uint64_t visible = pos + 1, blocks = visible / R;
  std::vector<float> q(IQ * ID);
  for (std::uint64_t h = 0; h < IQ; ++h) {
    q38_rms0(q.data() + h * ID, idx_row + h * ID, w.idx_q_norm->v.data(), ID, c.eps);
    q38_rope(q.data() + h * ID, c.rotary_dim, pos, c.theta);
  }
  std::vector<float> score(blocks);
  for (std::uint64_t blk = 0; blk < blocks; ++blk) {
    const float* key = keys.blocks.data() + blk * ID;
    float s = 0;
    for (std::uint64_t h = 0; h < IQ; ++h) {
      float a = 0;
      for (std::uint64_t d = 0; d < ID; ++d) a += q[h * ID + d] * key[d];
      if (a > 0.0f) s += a;
    }
    score[blk] = s / std::sqrt(static_cast<float>(ID));
  }
  std::vector<std::uint64_t> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint64_t a, std::uint64_t b) { return score[a] > score[b]; });
  const std::uint64_t take = std::min(blocks, c.idx_budget / R);
  std::vector<std::uint64_t> sel;
  for (std::uint64_t z = 0; z < take; ++z) {
    for (std::uint64_t r = 0; r < R; ++r) sel.push_back(order[z] * R + r);
  }
  for (std::uint64_t t = blocks * R; t < visible; ++t) sel.push_back(t);
  return sel;
}

// Query head h at position `pos` over the selected positions, gated, into out[0, head_dim).
void attend_head(const Q38ForwardConfig& c, const QsaWeights& w, const SequenceKeys& keys,
                 const QsaRows& rows, std::uint64_t r0, std::uint64_t pos, std::uint64_t h,
                 const std::vector<std::uint64_t>& sel, float* out) {
  const std::uint64_t D = c.head_dim, KV = c.kv_heads, kvh = h / (c.heads / KV);
  const float* qraw = rows.q.row(r0 + pos) + h * 2 * D;
  std::vector<float> q(D), p(sel.size());
  q38_rms0(q.data(), qraw, w.q_norm->v.data(), D, c.eps);
  q38_rope(q.data(), c.rotary_dim, pos, c.theta);
  float mx = -INFINITY;
  for (std::size_t j = 0; j < sel.size(); ++j) {
    const float* k = keys.k.data() + (sel[j] * KV + kvh) * D;
    float a = 0;
    for (std::uint64_t d = 0; d < D; ++d) a += q[d] * k[d];
    p[j] = a / std::sqrt(static_cast<float>(D));
    mx = std::max(mx, p[j]);
  }
  float den = 0;
  for (float& x : p) {
    x = std::exp(x - mx);
    den += x;
  }
  std::fill(out, out + D, 0.0f);
  for (std::size_t j = 0; j < sel.size(); ++j) {
    const float a = p[j] / den;
    const float* v = rows.v.row(r0 + sel[j]) + kvh * D;
    for (std::uint64_t d = 0; d < D; ++d) out[d] += a * v[d];
  }
  for (std::uint64_t d = 0; d < D; ++d) out[d] *= q38_sigmoid(qraw[D + d]);
}

}  // namespace

void q38_rope(float* x, std::uint64_t rotary_dim, std::uint64_t pos, double theta) {
  const std::uint64_t half = rotary_dim / 2;
  const auto th = static_cast<float>(theta);
  for (std::uint64_t i = 0; i < half; ++i) {
    const float ang = static_cast<float>(pos) /
                      std::pow(th, static_cast<float>(2 * i) / static_cast<float>(rotary_dim));
    const float co = std::cos(ang), si = std::sin(ang), a = x[i], b = x[i + half];
    x[i] = a * co - b * si;
    x[i + half] = b * co + a * si;
  }
}

Result<Matrix> q38_sparse_attention(Q38Weights& w, const Q38ForwardConfig& c, std::uint64_t layer,
                                    const Matrix& x, const Batch& b) {
  const std::string p = fmt::format("layers.{}.self_attn.", layer);
  const std::uint64_t H = c.hidden, D = c.head_dim, QH = c.heads, KV = c.kv_heads;
  QsaRows rows;
  {
    QR_ASSIGN_OR_RETURN(q, w.get(p + "q_proj.weight", 2 * QH * D, H));
    rows.q = matmul(x, *q);
  }
  {
    QR_ASSIGN_OR_RETURN(k, w.get(p + "k_proj.weight", KV * D, H));
    rows.k = matmul(x, *k);
  }
  {
    QR_ASSIGN_OR_RETURN(v, w.get(p + "v_proj.weight", KV * D, H));
    rows.v = matmul(x, *v);
  }
  {
    QR_ASSIGN_OR_RETURN(
        idx, w.get(p + "indexer.index_qk_proj.weight", (c.idx_heads + 1) * c.idx_dim, H));
    rows.idx = matmul(x, *idx);
  }
  QsaWeights qw;
  QR_ASSIGN_OR_RETURN(qn, w.vec(p + "q_norm.weight", D));
  QR_ASSIGN_OR_RETURN(kn, w.vec(p + "k_norm.weight", D));
  QR_ASSIGN_OR_RETURN(iqn, w.vec(p + "indexer.q_layernorm.weight", c.idx_dim));
  QR_ASSIGN_OR_RETURN(ikn, w.vec(p + "indexer.k_layernorm.weight", c.idx_dim));
  qw = QsaWeights{qn, kn, iqn, ikn};
  Matrix heads{x.rows, QH * D, std::vector<float>(x.rows * QH * D)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t r0 = b.start[s], n = b.start[s + 1] - r0;
    const SequenceKeys keys = sequence_keys(c, qw, rows, r0, n);
    parallel_for(n, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
      for (std::size_t pos = lo; pos < hi; ++pos) {
        const auto sel = select_positions(c, qw, keys, rows.idx.row(r0 + pos), pos);
        for (std::uint64_t h = 0; h < QH; ++h) {
          attend_head(c, qw, keys, rows, r0, pos, h, sel, heads.row(r0 + pos) + h * D);
        }
      }
    });
  }
  QR_ASSIGN_OR_RETURN(o, w.get(p + "o_proj.weight", H, QH * D));
  return matmul(heads, *o);
}

}  // namespace qrepack::model
