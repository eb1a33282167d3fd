#include "model/mla.h"

#include <algorithm>
#include <cmath>

#include "qrepack/parallel/parallel_for.h"

namespace qrepack::model {
namespace {

Status norm(WeightCache& w, Matrix& x, const std::string& name, double eps) {
  QR_ASSIGN_OR_RETURN(wt, w.vec(name, x.cols));
  rms_norm(x, wt->v, eps);
  return ok_status();
}

}  // namespace

Result<Matrix> mla_context(WeightCache& w, const std::string& p, const MlaDims& d, const Matrix& x,
                           const Batch& b, const Rope* rope, bool interleaved,
                           const KeySelection* select) {
  const std::uint64_t nh = d.heads, nope = d.nope, rd = d.rope, vd = d.v;
  const std::uint64_t qk = nope + rd, kvr = d.kv_lora, n = x.rows;
  Matrix q;
  if (d.q_lora > 0) {
    QR_ASSIGN_OR_RETURN(wqa, w.get(p + "q_a_proj.weight", d.q_lora, d.hidden));
    Matrix qa = matmul(x, *wqa);
    QR_TRY(norm(w, qa, p + "q_a_layernorm.weight", d.eps));
    QR_ASSIGN_OR_RETURN(wqb, w.get(p + "q_b_proj.weight", nh * qk, d.q_lora));
    q = matmul(qa, *wqb);
  } else {
    QR_ASSIGN_OR_RETURN(wq, w.get(p + "q_proj.weight", nh * qk, d.hidden));
    q = matmul(x, *wq);
  }
  QR_ASSIGN_OR_RETURN(wkva, w.get(p + "kv_a_proj_with_mqa.weight", kvr + rd, d.hidden));
  const Matrix kva = matmul(x, *wkva);
  Matrix latent{n, kvr, std::vector<float>(n * kvr)};
  for (std::uint64_t t = 0; t < n; ++t) {
    std::copy(kva.row(t), kva.row(t) + kvr, latent.row(t));
  }
  QR_TRY(norm(w, latent, p + "kv_a_layernorm.weight", d.eps));
  QR_ASSIGN_OR_RETURN(wkvb, w.get(p + "kv_b_proj.weight", nh * (nope + vd), kvr));
  const Matrix kvb = matmul(latent, *wkvb);

  // Full per-head queries and keys [token][head][nope | rope], rope applied at each position.
  std::vector<float> qf(n * nh * qk), kf(n * nh * qk);
  for (std::uint64_t s = 0; s + 1 < b.start.size(); ++s) {
    for (std::uint64_t t = b.start[s]; t < b.start[s + 1]; ++t) {
      const std::uint64_t pos = t - b.start[s];
      std::vector<float> kpe(kva.row(t) + kvr, kva.row(t) + kvr + rd);
      if (rope) rope->apply(kpe.data(), pos, interleaved);
      for (std::uint64_t h = 0; h < nh; ++h) {
        float* qd = &qf[(t * nh + h) * qk];
        std::copy(q.row(t) + h * qk, q.row(t) + (h + 1) * qk, qd);
        if (rope) rope->apply(qd + nope, pos, interleaved);
        float* kd = &kf[(t * nh + h) * qk];
        const float* kv = kvb.row(t) + h * (nope + vd);
        std::copy(kv, kv + nope, kd);
        std::copy(kpe.begin(), kpe.end(), kd + nope);
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(qk));
  Matrix out{n, nh * vd, std::vector<float>(n * nh * vd)};
  const std::uint64_t seqs = b.start.size() - 1;
  parallel_for(seqs * nh, 1, [&](std::size_t lo, std::size_t hi, std::size_t) {
    std::vector<float> p_row;
    std::vector<std::uint64_t> keys;
    for (std::size_t job = lo; job < hi; ++job) {
      const std::uint64_t s = job / nh, h = job % nh, t0 = b.start[s];
      for (std::uint64_t i = t0; i < b.start[s + 1]; ++i) {
        keys.clear();
        if (select) {
          for (std::uint32_t j : (*select)[i]) keys.push_back(t0 + j);
        } else {
          for (std::uint64_t j = t0; j <= i; ++j) keys.push_back(j);
        }
        if (keys.empty()) continue;
        p_row.assign(keys.size(), 0.0f);
        for (std::uint64_t k = 0; k < keys.size(); ++k) {
          p_row[k] = dot(&qf[(i * nh + h) * qk], &kf[(keys[k] * nh + h) * qk], qk) * scale;
        }
        softmax(p_row);
        float* o = out.row(i) + h * vd;
        for (std::uint64_t k = 0; k < keys.size(); ++k) {
          const float* v = kvb.row(keys[k]) + h * (nope + vd) + nope;
          for (std::uint64_t c = 0; c < vd; ++c) o[c] += p_row[k] * v[c];
        }
      }
    }
  });
  return out;
}

}  // namespace qrepack::model
