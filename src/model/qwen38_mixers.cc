#include "model/qwen38_mixers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/forward_ops.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/checked.h"
#include "qrepack/formats/float16.h"
#include "qrepack/formats/fp8.h"

namespace qrepack::model {
namespace {

constexpr std::uint64_t kNgram = 3;  // ngram_size (the config refuses any other)

Error ple_error(const ModelWeights& w, const std::string& name, std::string message) {
  return std::move(Error(ErrorKind::kUnexpectedShape, std::move(message))
                       .in_file(w.directory())
                       .in_tensor(name)
                       .with_rule("forward.ple"));
}

// The n-gram table: its parts (one tensor, or split_ngram_parts shards) and their first rows.
struct NgramTable {
  std::vector<std::string> names;
  std::vector<Dtype> dtypes;
  std::vector<std::uint64_t> start;  ///< first row of each part, then the total
  float scale = 1.0f;                ///< weight_scale (FP8 tables)
  std::vector<std::int64_t> multipliers, vocab, offset;
};

Result<std::vector<std::int64_t>> int_buffer(const ModelWeights& w, const std::string& name,
                                             std::uint64_t n) {
  QR_ASSIGN_OR_RETURN(raw, w.read_raw(name, 8 * n));
  if ((raw.dtype != Dtype::kI64 && raw.dtype != Dtype::kU64) || raw.bytes.size() != 8 * n) {
    return ple_error(w, name, fmt::format("the model needs {} I64 values", n));
  }
  std::vector<std::int64_t> v(n);
  std::memcpy(v.data(), raw.bytes.data(), 8 * n);
  return v;
}

Status add_part(const ModelWeights& w, const std::string& name, std::uint64_t dim, NgramTable& t) {
  const auto s = w.stored(name);
  if (!s) return ple_error(w, name, "the PLE layer needs this n-gram table part");
  const bool ok_dtype = s->dtype == Dtype::kF8E4M3 || s->dtype == Dtype::kBF16 ||
                        s->dtype == Dtype::kF16 || s->dtype == Dtype::kF32;
  if (!ok_dtype || s->shape.size() != 2 || s->shape[1] != dim || s->shape[0] == 0 ||
      s->shape[0] > kMaxDim * kMaxDim) {
    return ple_error(
        w, name,
        fmt::format("the n-gram table must be F8_E4M3 / BF16 / F16 / F32 [rows, {}]", dim));
  }
  t.names.push_back(name);
  t.dtypes.push_back(s->dtype);
  t.start.push_back(t.start.back() + s->shape[0]);
  return ok_status();
}

Result<NgramTable> open_table(const Q38Weights& q, const Q38ForwardConfig& c) {
  const ModelWeights& w = q.base();
  const std::string e = fmt::format("{}layers.{}.ple.ple_embedding.", q.prefix(), c.ple_layer);
  NgramTable t;
  QR_ASSIGN_OR_RETURN(m, int_buffer(w, e + "layer_multipliers", kNgram));
  QR_ASSIGN_OR_RETURN(v, int_buffer(w, e + "ngram_heads_vocab_sizes", c.ngram_heads()));
  QR_ASSIGN_OR_RETURN(o, int_buffer(w, e + "ngram_heads_offsets", c.ngram_heads()));
  t.multipliers = std::move(m), t.vocab = std::move(v), t.offset = std::move(o);
  t.start.push_back(0);
  const std::string one = e + "ngram_embedding.weight";
  if (w.has_tensor(one)) {
    QR_TRY(add_part(w, one, c.ngram_dim(), t));
  } else {
    for (std::uint64_t p = 0; p < c.ngram_parts; ++p) {
      QR_TRY(add_part(w, fmt::format("{}ngram_embedding.shard_{}.weight", e, p), c.ngram_dim(), t));
    }
  }
  if (w.has_tensor(one + "_scale")) {
    QR_ASSIGN_OR_RETURN(s, w.read_floats(one + "_scale", 1));
    t.scale = s[0];
  }
  for (std::uint64_t h = 0; h < c.ngram_heads(); ++h) {
    const std::int64_t vs = t.vocab[h], off = t.offset[h];
    if (vs <= 0 || off < 0 || static_cast<std::uint64_t>(vs) > t.start.back() ||
        static_cast<std::uint64_t>(off) > t.start.back() - static_cast<std::uint64_t>(vs)) {
      return ple_error(w, e + "ngram_heads_offsets",
                       fmt::format("head {}: rows [{}, {} + {}) are outside the table's {} rows", h,
                                   off, off, vs, t.start.back()));
    }
  }
  return t;
}

// Row `row` of the table into out[0, dim).
Status table_row(const ModelWeights& w, const NgramTable& t, std::uint64_t row, std::uint64_t dim,
                 float* out) {
  std::size_t p = 0;
  while (p + 1 < t.names.size() && row >= t.start[p + 1]) ++p;
  const Dtype d = t.dtypes[p];
  const std::uint64_t width = d == Dtype::kF8E4M3 ? 1 : d == Dtype::kF32 ? 4 : 2;
  QR_ASSIGN_OR_RETURN(
      raw, w.read_stored_bytes(t.names[p], (row - t.start[p]) * dim * width, dim * width));
  for (std::uint64_t i = 0; i < dim; ++i) {
    const std::uint8_t* b = raw.data() + i * width;
    const auto code = static_cast<std::uint16_t>(b[0] | (width > 1 ? b[1] << 8 : 0));
    if (d == Dtype::kF8E4M3) {
      out[i] = e4m3_decode(b[0]) * t.scale;
    } else if (d == Dtype::kF32) {
      std::memcpy(&out[i], b, 4);
    } else {
      out[i] = d == Dtype::kBF16 ? bf16_decode(code) : f16_decode(code);
    }
    if (!std::isfinite(out[i])) {
      return ple_error(w, t.names[p], fmt::format("row {} holds a non-finite value", row));
    }
  }
  return ok_status();
}

// q38_hash_row: the head's row for token `cur` after `p1` (then `p2`), wrapping in 64 bits.
std::uint64_t hash_row(const NgramTable& t, std::uint64_t head, std::uint64_t ngram,
                       std::uint64_t cur, std::uint64_t p1, std::uint64_t p2) {
  std::uint64_t x = cur * static_cast<std::uint64_t>(t.multipliers[0]);
  x ^= p1 * static_cast<std::uint64_t>(t.multipliers[1]);
  if (ngram == 3) x ^= p2 * static_cast<std::uint64_t>(t.multipliers[2]);
  const std::int64_t mod = t.vocab[head];
  std::int64_t r = static_cast<std::int64_t>(x) % mod;
  if (r < 0) r += mod;
  return static_cast<std::uint64_t>(t.offset[head] + r);
}

// The n-gram embeddings [t, ple_dim] of one sequence's ids.
Result<Matrix> ngram_embeddings(const ModelWeights& w, const NgramTable& t,
                                const Q38ForwardConfig& c, std::span<const std::uint32_t> ids) {
  Matrix e{ids.size(), c.ple_dim, std::vector<float>(ids.size() * c.ple_dim)};
  std::vector<std::uint64_t> history;  // at most the last two ids, oldest first
  for (std::uint64_t s = 0; s < ids.size(); ++s) {
    const std::uint64_t p1 = history.empty() ? c.eos : history.back();
    const std::uint64_t p2 = history.size() < 2 ? c.eos : history[history.size() - 2];
    for (std::uint64_t h = 0; h < c.ngram_heads(); ++h) {
      const std::uint64_t ngram = h < c.heads_per_ngram ? 2 : 3;
      QR_TRY(table_row(w, t, hash_row(t, h, ngram, ids[s], p1, p2), c.ngram_dim(),
                       e.row(s) + h * c.ngram_dim()));
    }
    if (ids[s] == c.eos) {
      history.clear();
    } else {
      history.push_back(ids[s]);
      if (history.size() > 2) history.erase(history.begin());
    }
  }
  return e;
}

struct PleWeights {
  std::shared_ptr<const Matrix> key, value, norm_key, norm_query, norm_conv;
  std::vector<float> conv;
};

// One sequence's PLE output added to its rows [r0, r0 + n) of hyper.
void ple_sequence(const Q38ForwardConfig& c, const PleWeights& p, const Matrix& keys,
                  const Matrix& value, std::uint64_t r0, std::uint64_t n, Matrix& hyper) {
  const std::uint64_t H = c.hidden, W = c.wide(), K = c.ple_kernel;
  Matrix gated{n, W, std::vector<float>(n * W)}, normed{n, W, std::vector<float>(n * W)};
  std::vector<float> kn(H), qn(H);
  for (std::uint64_t s = 0; s < n; ++s) {
    for (std::uint64_t b = 0; b < c.hc; ++b) {
      q38_rms0(kn.data(), keys.row(r0 + s) + b * H, p.norm_key->v.data() + b * H, H, c.eps);
      q38_rms0(qn.data(), hyper.row(r0 + s) + b * H, p.norm_query->v.data() + b * H, H, c.eps);
      float d = 0;
      for (std::uint64_t i = 0; i < H; ++i) d += kn[i] * qn[i];
      d /= std::sqrt(static_cast<float>(H));
      const float g = q38_sigmoid(std::copysign(std::sqrt(std::max(std::fabs(d), 1e-6f)), d));
      float* u = gated.row(s) + b * H;
      for (std::uint64_t i = 0; i < H; ++i) u[i] = g * value.row(r0 + s)[i];
      q38_rms0(normed.row(s) + b * H, u, p.norm_conv->v.data() + b * H, H, c.eps);
    }
  }
  // The conv's taps reach back (K - 1 - k) * ngram_size tokens; before the sequence, zero.
  for (std::uint64_t s = 0; s < n; ++s) {
    float* x = hyper.row(r0 + s);
    for (std::uint64_t d = 0; d < W; ++d) {
      float a = p.conv[d * K + K - 1] * normed.row(s)[d];
      for (std::uint64_t k = 0; k + 1 < K; ++k) {
        const std::uint64_t back = (K - 1 - k) * kNgram;
        if (back <= s) a += p.conv[d * K + k] * normed.row(s - back)[d];
      }
      x[d] += gated.row(s)[d] + q38_silu(a);
    }
  }
}

}  // namespace

float q38_sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float z = std::exp(x);
  return z / (1.0f + z);
}
float q38_silu(float x) { return x * q38_sigmoid(x); }

void q38_rms0(float* out, const float* x, const float* w, std::uint64_t n, double eps) {
  double ss = 0;
  for (std::uint64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r =
      1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + static_cast<float>(eps));
  for (std::uint64_t i = 0; i < n; ++i) out[i] = x[i] * r * (1.0f + w[i]);
}

Result<GatedRead> gated_read(Q38Weights& w, const Q38ForwardConfig& c, const std::string& base,
                             const Matrix& hyper, bool inject) {
  const std::uint64_t H = c.hidden, W = c.wide(), C = c.hc, T = hyper.rows;
  QR_ASSIGN_OR_RETURN(norm_w, w.vec(base + "hc_norm.weight", W));
  QR_ASSIGN_OR_RETURN(down, w.get(base + "input_mix_weight_down.weight", c.hc_rank, W));
  QR_ASSIGN_OR_RETURN(up, w.get(base + "input_mix_weight_up.weight", W, c.hc_rank));
  Matrix norm{T, W, std::vector<float>(T * W)};
  for (std::uint64_t s = 0; s < T; ++s) {
    for (std::uint64_t b = 0; b < C; ++b) {
      q38_rms0(norm.row(s) + b * H, hyper.row(s) + b * H, norm_w->v.data() + b * H, H, c.eps);
    }
  }
  const auto fc = static_cast<float>(C);
  Matrix low = matmul(norm, *down);
  for (float& v : low.v) v = q38_silu(v / fc);
  const Matrix mix = matmul(low, *up);
  GatedRead r{Matrix{T, H, std::vector<float>(T * H)}, {}};
  for (std::uint64_t s = 0; s < T; ++s) {
    for (std::uint64_t d = 0; d < H; ++d) {
      float v = 0;
      for (std::uint64_t b = 0; b < C; ++b) {
        v += q38_sigmoid(mix.row(s)[b * H + d]) * norm.row(s)[b * H + d];
      }
      r.mixed.row(s)[d] = v / fc;
    }
  }
  if (!inject) return r;
  QR_ASSIGN_OR_RETURN(inj, w.get(base + "block_inject_weight.weight", C, W));
  r.inject = matmul(norm, *inj);
  for (float& v : r.inject.v) v = 2.0f * q38_sigmoid(v / fc);
  return r;
}

void gated_apply(const Q38ForwardConfig& c, Matrix& hyper, const Matrix& block,
                 const Matrix& inject) {
  const std::uint64_t H = c.hidden;
  for (std::uint64_t s = 0; s < hyper.rows; ++s) {
    for (std::uint64_t b = 0; b < c.hc; ++b) {
      const float a = inject.row(s)[b];
      float* x = hyper.row(s) + b * H;
      for (std::uint64_t d = 0; d < H; ++d) x[d] += a * block.row(s)[d];
    }
  }
}

Status ple_add(Q38Weights& w, const Q38ForwardConfig& c, const Batch& b, Matrix& hyper) {
  const std::string p = fmt::format("layers.{}.ple.", c.ple_layer);
  const std::uint64_t W = c.wide();
  PleWeights pw;
  QR_ASSIGN_OR_RETURN(key, w.get(p + "key_proj.weight", W, c.ple_dim));
  QR_ASSIGN_OR_RETURN(value, w.get(p + "value_proj.weight", c.hidden, c.ple_dim));
  QR_ASSIGN_OR_RETURN(nk, w.vec(p + "norm_key.weight", W));
  QR_ASSIGN_OR_RETURN(nq, w.vec(p + "norm_query.weight", W));
  QR_ASSIGN_OR_RETURN(nc, w.vec(p + "norm_conv.weight", W));
  QR_ASSIGN_OR_RETURN(conv, w.floats(p + "conv1d.weight", W * c.ple_kernel));
  pw = PleWeights{key, value, nk, nq, nc, std::move(conv)};
  QR_ASSIGN_OR_RETURN(table, open_table(w, c));
  Matrix emb{b.tokens(), c.ple_dim, std::vector<float>(b.tokens() * c.ple_dim)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t r0 = b.start[s], n = b.start[s + 1] - r0;
    QR_ASSIGN_OR_RETURN(e, ngram_embeddings(w.base(), table, c, std::span(b.ids).subspan(r0, n)));
    std::copy(e.v.begin(), e.v.end(), emb.row(r0));
  }
  const Matrix keys = matmul(emb, *pw.key), values = matmul(emb, *pw.value);
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    ple_sequence(c, pw, keys, values, b.start[s], b.start[s + 1] - b.start[s], hyper);
  }
  return ok_status();
}

}  // namespace qrepack::model
