#include "qrepack/model/deepseek_v4_forward.h"

#include <fmt/format.h>

#include <cmath>

#include "model/deepseek_v4_attention.h"
#include "model/deepseek_v4_config.h"
#include "model/deepseek_v4_engram.h"
#include "model/deepseek_v4_runtime.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/hyper_connections.h"
#include "model/moe_routing.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

// model.py Gate with sqrtsoftplus scores: the bias picks the experts (ties to the lower
// index), the unbiased scores weigh them, renormalized (+ 1e-20) and scaled.
model::Route route(std::span<const float> logits, std::span<const float> bias,
                   const model::DsV4Config& c) {
  std::vector<float> score(logits.size());
  for (std::uint64_t e = 0; e < score.size(); ++e) {
    const float v = logits[e];
    score[e] = std::sqrt(v > 20.0f ? v : std::log1p(std::exp(v)));
  }
  model::Route r;
  std::vector<std::uint8_t> taken(score.size(), 0);
  for (std::uint64_t k = 0; k < c.top_k; ++k) {
    std::uint64_t best = score.size();
    for (std::uint64_t e = 0; e < score.size(); ++e) {
      if (!taken[e] && (best == score.size() || score[e] + bias[e] > score[best] + bias[best])) {
        best = e;
      }
    }
    taken[best] = 1;
    r.expert.push_back(static_cast<std::uint32_t>(best));
    r.weight.push_back(score[best]);
  }
  if (c.norm_topk_prob && c.top_k > 1) {
    float total = 0;
    for (float v : r.weight) total += v;
    total += 1e-20f;
    for (float& v : r.weight) v /= total;
  }
  for (float& v : r.weight) v *= c.route_scale;
  return r;
}

}  // namespace

bool is_deepseek_v4_forward_type(const std::string& model_type) {
  return model::is_deepseek_v4_model_type(model_type);
}

struct DeepseekV4Forward::State {
  model::WeightCache w;
  model::DsV4Config c;
  model::Progress progress;
  std::uint64_t chunk = 0;  ///< the prefill chunk's length (0: every row)

  model::HcDims hc() const {
    return {c.hc, c.dim, c.hc_iters, static_cast<float>(c.eps), c.hc_eps};
  }
  Result<Matrix> project(const std::string& name, const Matrix& x, std::uint64_t out) {
    QR_ASSIGN_OR_RETURN(m, w.get(name, out, x.cols));
    return matmul(x, *m);
  }
  Status norm(Matrix& x, const std::string& name) {
    QR_ASSIGN_OR_RETURN(wt, w.vec(name, x.cols));
    model::rms_norm(x, wt->v, c.eps);
    return ok_status();
  }
  Result<Matrix> swiglu_ffn(const std::string& p, const Matrix& x);
  Result<Matrix> moe(const std::string& p, const Matrix& x);
  Status layer(std::uint64_t l, Matrix& h, std::vector<float>& pre, const Batch& b,
               const model::DsRopes& r, std::vector<model::DsShared>& shared);
  Result<Matrix> pass(const Batch& b, const model::DsRopes& r,
                      std::vector<model::DsShared>& shared);
  // DeepSeek V4: every sequence token by token as c/deepseek_v4.c runs it.
  Result<std::vector<Matrix>> runtime_logits(const Batch& b) {
    Matrix y{b.tokens(), c.dim, std::vector<float>(b.tokens() * c.dim)};
    for (std::uint64_t s = 0; s < b.sequences(); ++s) {
      progress.say(fmt::format("sequence {}/{} (token by token)", s + 1, b.sequences()));
      const std::span<const std::uint32_t> ids(b.ids.data() + b.start[s],
                                               b.start[s + 1] - b.start[s]);
      QR_ASSIGN_OR_RETURN(h, model::dsv4_runtime_hidden(w, c, ids));
      std::copy(h.v.begin(), h.v.end(), y.row(b.start[s]));
    }
    progress.say("head");
    return model::vocab_logits(w, "head.weight", c.vocab, y, b);
  }
};

// Every layer over the whole batch, then the final collapse and norm.
Result<Matrix> DeepseekV4Forward::State::pass(const Batch& b, const model::DsRopes& r,
                                              std::vector<model::DsShared>& shared) {
  QR_ASSIGN_OR_RETURN(e, model::embed_tokens(w.weights(), "embed.weight", c.vocab, c.dim, b));
  Matrix h = model::hc_expand(e, c.hc);
  std::vector<float> pre(b.tokens() * c.hc, 0.0f);  // layer 0's attention reads copy 0
  for (std::uint64_t t = 0; t < b.tokens(); ++t) pre[t * c.hc] = 1.0f;
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    progress.say(fmt::format("layer {}/{} (compress 1:{})", l + 1, c.layers, c.ratios[l]));
    QR_TRY(layer(l, h, pre, b, r, shared));
  }
  Matrix y{b.tokens(), c.dim, std::vector<float>(b.tokens() * c.dim)};
  for (std::uint64_t t = 0; t < b.tokens(); ++t) {
    for (std::uint64_t i = 0; i < c.dim; ++i) {
      float a = 0;
      for (std::uint64_t k = 0; k < c.hc; ++k) a += pre[t * c.hc + k] * h.row(t)[k * c.dim + i];
      y.row(t)[i] = a;
    }
  }
  QR_TRY(norm(y, "norm.weight"));
  return y;
}

// An expert (routed FP4 or the shared FP8 one): w2(silu(w1 x) * w3 x), w3 x clamped to
// +-swiglu_limit and w1 x from above when the limit is set.
Result<Matrix> DeepseekV4Forward::State::swiglu_ffn(const std::string& p, const Matrix& x) {
  QR_ASSIGN_OR_RETURN(g, project(p + "w1.weight", x, c.moe_inter));
  QR_ASSIGN_OR_RETURN(u, project(p + "w3.weight", x, c.moe_inter));
  const float lim = c.swiglu_limit;
  for (std::uint64_t i = 0; i < g.v.size(); ++i) {
    float gv = g.v[i], uv = u.v[i];
    if (lim > 0) {
      uv = std::clamp(uv, -lim, lim);
      gv = std::min(gv, lim);
    }
    g.v[i] = (gv / (1.0f + std::exp(-gv))) * uv;
  }
  return project(p + "w2.weight", g, c.dim);
}

Result<Matrix> DeepseekV4Forward::State::moe(const std::string& p, const Matrix& x) {
  QR_ASSIGN_OR_RETURN(logits, project(p + "gate.weight", x, c.experts));
  QR_ASSIGN_OR_RETURN(bias, w.vec(p + "gate.bias", c.experts));
  std::vector<model::Route> routes;
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    routes.push_back(route(std::span(logits.row(t), c.experts), bias->v, c));
  }
  QR_ASSIGN_OR_RETURN(y, model::mix_routed_experts(
                             x, routes, c.experts, c.dim, [&](std::uint64_t e, const Matrix& xe) {
                               return swiglu_ffn(fmt::format("{}experts.{}.", p, e), xe);
                             }));
  QR_ASSIGN_OR_RETURN(s, swiglu_ffn(p + "shared_experts.", x));
  for (std::uint64_t i = 0; i < y.v.size(); ++i) y.v[i] += s.v[i];
  return y;
}

// One block: the engram (when the layer has one), then attention and the MoE, each read
// through the copies collapsed with the previous sublayer's `pre` and expanded with its own
// post / comb.
Status DeepseekV4Forward::State::layer(std::uint64_t l, Matrix& h, std::vector<float>& pre,
                                       const Batch& b, const model::DsRopes& r,
                                       std::vector<model::DsShared>& shared) {
  const std::string p = fmt::format("layers.{}.", l);
  if (const model::DsEngramTable* t = c.engram.table_of(l)) {
    for (std::uint64_t s = 0; s < b.sequences(); ++s) {
      const std::span<const std::uint32_t> ids(b.ids.data() + b.start[s],
                                               b.start[s + 1] - b.start[s]);
      QR_TRY(model::apply_engram(w, c, *t, h, b.start[s], ids));
    }
  }
  // Each sublayer collapses the streams with the pre the sublayer before it computed.
  QR_ASSIGN_OR_RETURN(as, model::read_hc_site(w, p, "attn", hc()));
  model::HcMix am;
  Matrix y = model::hc_pre(hc(), as, h, am, &pre);
  QR_TRY(norm(y, p + "attn_norm.weight"));
  QR_ASSIGN_OR_RETURN(a, model::dsv4_attention(w, c, r, l, y, b, shared));
  h = model::hc_post(hc(), am, h, a);
  QR_ASSIGN_OR_RETURN(fs, model::read_hc_site(w, p, "ffn", hc()));
  model::HcMix fm;
  y = model::hc_pre(hc(), fs, h, fm, &am.pre);
  QR_TRY(norm(y, p + "ffn_norm.weight"));
  QR_ASSIGN_OR_RETURN(f, moe(p + "ffn.", y));
  h = model::hc_post(hc(), fm, h, f);
  pre = std::move(fm.pre);
  return ok_status();
}

DeepseekV4Forward::DeepseekV4Forward(std::unique_ptr<State> s) : s_(std::move(s)) {}
DeepseekV4Forward::DeepseekV4Forward(DeepseekV4Forward&&) noexcept = default;
DeepseekV4Forward& DeepseekV4Forward::operator=(DeepseekV4Forward&&) noexcept = default;
DeepseekV4Forward::~DeepseekV4Forward() = default;

Result<DeepseekV4Forward> DeepseekV4Forward::open(const std::string& path,
                                                  const std::string& fallback_config_dir) {
  QR_ASSIGN_OR_RETURN(w, ModelWeights::open_as_stored(path));
  QR_ASSIGN_OR_RETURN(config_dir, model::config_dir_of(w, path, fallback_config_dir));
  // Every variant the pass does not implement is refused here, before any weight is read.
  QR_ASSIGN_OR_RETURN(cfg, model::load_deepseek_v4_config(config_dir));
  auto st = std::make_unique<State>(State{model::WeightCache(std::move(w)), std::move(cfg), {}});
  return DeepseekV4Forward(std::move(st));
}

const std::string& DeepseekV4Forward::model_type() const { return s_->c.model_type; }
std::uint64_t DeepseekV4Forward::vocab_size() const { return s_->c.vocab; }
std::uint64_t DeepseekV4Forward::hidden_size() const { return s_->c.dim; }
std::uint64_t DeepseekV4Forward::layer_count() const { return s_->c.layers; }
const std::string& DeepseekV4Forward::directory() const { return s_->w.weights().directory(); }
std::vector<std::string> DeepseekV4Forward::input_files() const {
  std::vector<std::string> files = model::pass_input_files(s_->w.weights());
  if (!s_->c.engram.tables.empty()) {
    files.push_back(s_->w.weights().directory() + "/dsv41_engram.json");
  }
  return files;
}
void DeepseekV4Forward::set_cache_budget(std::uint64_t bytes) { s_->w.set_budget(bytes); }
void DeepseekV4Forward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}

Result<std::vector<Matrix>> DeepseekV4Forward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const model::DsV4Config& c = st.c;
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, c.vocab));
  if (b.longest() > c.max_positions) {
    return Error(ErrorKind::kInvalidArgument,
                 fmt::format("a sequence of {} tokens is longer than the model's {} positions "
                             "(max_seq_len / max_position_embeddings)",
                             b.longest(), c.max_positions));
  }
  if (c.runtime_v4) return st.runtime_logits(b);
  const model::DsRopes ropes{model::DsRope::make(c, false, b.longest()),
                             model::DsRope::make(c, true, b.longest())};
  std::vector<model::DsShared> shared(b.sequences());
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t n = b.start[s + 1] - b.start[s];
    shared[s].chunk = st.chunk == 0 ? n : std::min(st.chunk, n);
    shared[s].index_k.resize(c.layers);
    shared[s].prev_index_k.resize(c.layers);
  }
  // A decode step may read index keys a later layer published at an earlier position, which a
  // layer-by-layer pass computes after it: passes repeat, reading the previous pass's keys,
  // until those keys repeat exactly (position t is exact once every earlier one is, so at most
  // longest + 1 passes).
  for (std::uint64_t round = 0;; ++round) {
    QR_ASSIGN_OR_RETURN(y, st.pass(b, ropes, shared));
    bool settled = true;
    for (model::DsShared& s : shared) {
      for (std::uint64_t l = 0; l < c.layers; ++l) {
        if (s.read_previous && s.index_k[l].v != s.prev_index_k[l].v) settled = false;
      }
      s.prev_index_k = s.index_k;
      s.read_previous = false;
    }
    if (settled) {
      st.progress.say("head");
      return model::vocab_logits(st.w, "head.weight", c.vocab, y, b);
    }
    if (round > b.longest()) {
      return Error(ErrorKind::kInternal, "the decode steps' index keys did not settle");
    }
  }
}

Result<TokenIds> DeepseekV4Forward::generate(const TokenIds& prompt, std::uint64_t n) {
  s_->chunk = prompt.size();
  auto out = ForwardModel::generate(prompt, n);
  s_->chunk = 0;
  return out;
}

}  // namespace qrepack
