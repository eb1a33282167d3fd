// DeepSeek V4.1's DSA indexer (model.py Indexer.forward and select_candidate_blocks, as
// c/deepseek_v41.c's indexer_run / candidate_blocks and dsv41_ref.py compute them).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4_attention.h"
#include "model/forward_ops.h"

namespace qrepack::model {
namespace {

Matrix rows_of(const Matrix& m, std::uint64_t r0, std::uint64_t n) {
  Matrix out{n, m.cols, {}};
  out.v.assign(m.row(r0), m.row(r0) + n * m.cols);
  return out;
}

// select_candidate_blocks for one row: blocks of `block` positions scored by their best
// score, the block holding the newest reachable position pinned in, the best `topk` of the
// rest that are not all -inf kept (ties to the lower block).
void candidate_blocks(const std::vector<float>& score, std::uint64_t lens, std::uint64_t block,
                      std::uint64_t topk, std::uint8_t* keep) {
  const std::uint64_t width = score.size(), blocks = (width + block - 1) / block;
  std::vector<float> best(blocks, -INFINITY);
  for (std::uint64_t j = 0; j < width; ++j) best[j / block] = std::max(best[j / block], score[j]);
  if (lens > 0 && (lens - 1) / block < blocks) best[(lens - 1) / block] = INFINITY;
  std::fill(keep, keep + width, 0);
  for (std::uint64_t pick = 0; pick < std::min(topk, blocks); ++pick) {
    std::int64_t chosen = -1;
    for (std::uint64_t k = 0; k < blocks; ++k) {
      if (best[k] > -INFINITY && (chosen < 0 || best[k] > best[chosen])) chosen = k;
    }
    if (chosen < 0) break;
    for (std::uint64_t j = chosen * block; j < std::min(width, (chosen + 1) * block); ++j)
      keep[j] = 1;
    best[chosen] = -INFINITY;
  }
}

// The best `k` finite scores (ties to the lower index), in position order, shifted by
// `offset`; -1 for the empty slots.
void pick(const std::vector<float>& score, std::uint64_t k, std::uint64_t lens,
          std::uint64_t offset, std::int64_t* out) {
  std::vector<std::uint64_t> taken;
  std::vector<std::uint8_t> used(score.size(), 0);
  for (std::uint64_t r = 0; r < k; ++r) {
    std::int64_t best = -1;
    for (std::uint64_t j = 0; j < score.size(); ++j) {
      if (score[j] == -INFINITY || used[j]) continue;
      if (best < 0 || score[j] > score[best]) best = j;
    }
    if (best < 0) break;
    used[best] = 1;
    taken.push_back(best);
  }
  std::sort(taken.begin(), taken.end());
  for (std::uint64_t r = 0; r < k; ++r) {
    out[r] =
        r < taken.size() && taken[r] < lens ? static_cast<std::int64_t>(taken[r] + offset) : -1;
  }
}

bool index_source_kv(const DsV4Config& c, std::uint64_t l) {
  return c.kv_source[l] && c.index_source[l] && c.ratios[l] > 0;
}

// Whether kv source `l` publishes index keys at decode position t: when a group completes.
bool publishes(const DsV4Config& c, std::uint64_t l, std::uint64_t t) {
  return index_source_kv(c, l) && (t + 1) % c.ratios[l] == 0;
}

struct Owner {
  std::uint64_t layer = 0, rows = 0;  ///< whose keys, and how many rows they had then
  bool found = false;
};

// Per decode position t >= chunk, the last publisher once position t is done (the chunk's own
// last publisher before them: the highest kv source that completed a group in it).
std::vector<Owner> last_published(const DsV4Config& c, std::uint64_t chunk, std::uint64_t n) {
  Owner last;
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    if (index_source_kv(c, l) && chunk / c.ratios[l] > 0) last = {l, chunk / c.ratios[l], true};
  }
  std::vector<Owner> out(n + 1);
  out[chunk] = last;  // entry t + 1: after position t
  for (std::uint64_t t = chunk; t < n; ++t) {
    for (std::uint64_t l = 0; l < c.layers; ++l) {
      if (publishes(c, l, t)) last = {l, (t + 1) / c.ratios[l], true};
    }
    out[t + 1] = last;
  }
  return out;
}

// Whose index keys row t of layer l scores.
Owner owner_of(const DsV4Config& c, const std::vector<Owner>& last, std::uint64_t chunk,
               std::uint64_t l, std::uint64_t t) {
  if (t < chunk) {
    for (std::uint64_t k = l + 1; k-- > 0;) {
      if (index_source_kv(c, k)) return {k, chunk / c.ratios[k], true};
    }
    return {};
  }
  for (std::uint64_t k = l + 1; k-- > 0;) {
    if (publishes(c, k, t)) return {k, (t + 1) / c.ratios[k], true};
  }
  return last[t];
}

}  // namespace

Status dsv4_indexer(WeightCache& w, const DsV4Config& c, const DsRope& rope, std::uint64_t l,
                    const Matrix& x, const Matrix& qr, std::uint64_t r0, std::uint64_t n,
                    DsShared& s) {
  const std::uint64_t ratio = c.ratios[l], clen = n / ratio;
  const std::uint64_t k = std::min(c.index_topk, clen), ih = c.index_heads, id = c.index_dim;
  s.topk_width = k;
  s.topk.assign(n * k, -1);
  if (clen == 0) return ok_status();
  const std::vector<Owner> last = last_published(c, std::min(s.chunk, n), n);
  const std::string p = fmt::format("layers.{}.attn.indexer.", l);
  QR_ASSIGN_OR_RETURN(wq, w.get(p + "wq_b.weight", ih * id, c.q_lora));
  QR_ASSIGN_OR_RETURN(wp, w.get(p + "weights_proj.weight", ih, c.dim));
  Matrix q = matmul(rows_of(qr, r0, n), *wq);
  Matrix wts = matmul(rows_of(x, r0, n), *wp);
  const float scale =
      (1.0f / std::sqrt(static_cast<float>(id))) * (1.0f / std::sqrt(static_cast<float>(ih)));
  for (float& v : wts.v) v *= scale;
  const bool source = static_cast<std::int64_t>(l) == c.candidate_source;
  const bool consumer = !source && c.candidate_source >= 0 &&
                        c.candidate_source < static_cast<std::int64_t>(l) && s.keep_width > 0;
  if (source) {
    s.keep.assign(n * clen, 0);
    s.keep_width = clen;
  }
  std::vector<float> score(clen);
  for (std::uint64_t t = 0; t < n; ++t) {
    for (std::uint64_t h = 0; h < ih; ++h)
      rope.apply(q.row(t) + h * id + id - 2 * rope.half, t, false);
    const std::uint64_t lens = (t + 1) / ratio;
    const Owner o = owner_of(c, last, std::min(s.chunk, n), l, t);
    if (!o.found && lens > 0) {
      return Error(ErrorKind::kInternal, fmt::format("layer {} row {}: no index keys", l, t));
    }
    if (o.found && o.layer > l) s.read_previous = true;
    const Matrix& keys = o.layer > l ? s.prev_index_k[o.layer] : s.index_k[o.layer];
    const std::uint64_t rows = std::min(o.rows, keys.cols == id ? keys.rows : 0);
    for (std::uint64_t j = 0; j < clen; ++j) {
      if (j >= lens) {
        score[j] = -INFINITY;
        continue;
      }
      float total = 0;
      for (std::uint64_t h = 0; h < ih && j < rows; ++h) {
        const float d = dot(q.row(t) + h * id, keys.row(j), id);
        if (d > 0) total += d * wts.row(t)[h];
      }
      score[j] = total;
    }
    if (source) {
      candidate_blocks(score, lens, c.candidate_block_size, c.candidate_topk_blocks,
                       s.keep.data() + t * clen);
    } else if (consumer) {
      for (std::uint64_t j = 0; j < std::min(clen, s.keep_width); ++j) {
        if (!s.keep[t * s.keep_width + j]) score[j] = -INFINITY;
      }
    }
    pick(score, k, lens, n, s.topk.data() + t * k);
  }
  return ok_status();
}

}  // namespace qrepack::model
