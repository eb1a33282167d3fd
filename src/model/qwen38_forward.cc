#include "qrepack/model/qwen38_forward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "io/fs_util.h"
#include "model/deltanet.h"
#include "model/forward_common.h"
#include "model/forward_ops.h"
#include "model/moe_routing.h"
#include "model/qwen38_attention.h"
#include "model/qwen38_config.h"
#include "model/qwen38_mixers.h"
#include "model/qwen38_weights.h"
#include "remote/paths.h"

namespace qrepack {

using model::Batch;
using model::matmul;

namespace {

// q38_moe's route of one token: softmax over the router logits (sum in double), the top_k by
// probability (ties: lower index), divided by their sum (norm_topk_prob) or by the total.
model::Route softmax_route(std::span<const float> logits, std::uint64_t top_k, bool norm_topk) {
  std::vector<float> p(logits.begin(), logits.end());
  const float mx = *std::max_element(p.begin(), p.end());
  double all = 0;
  for (float& x : p) {
    x = std::exp(x - mx);
    all += x;
  }
  model::Route r;
  std::vector<bool> used(p.size(), false);
  double top = 0;
  for (std::uint64_t z = 0; z < top_k; ++z) {
    std::size_t best = 0;
    float bv = -1.0f;
    for (std::size_t e = 0; e < p.size(); ++e) {
      if (!used[e] && p[e] > bv) bv = p[e], best = e;
    }
    used[best] = true;
    r.expert.push_back(static_cast<std::uint32_t>(best));
    r.weight.push_back(p[best]);
    top += p[best];
  }
  const double den = norm_topk ? top : all;
  for (float& w : r.weight) w = static_cast<float>(w / den);
  return r;
}

// silu(gate) * up in place, as q38_silu.
void q38_swiglu(Matrix& g, const Matrix& u) {
  for (std::size_t i = 0; i < g.v.size(); ++i) g.v[i] = model::q38_silu(g.v[i]) * u.v[i];
}

}  // namespace

bool is_qwen38_model_type(const std::string& model_type) {
  return model_type == "qwen4_exp" || model_type == "qwen4_exp_text";
}

bool is_qwen38_experts_directory(const std::string& dir) {
  return model::is_q38_sidecar_dir(dir) ||
         path_kind((std::filesystem::path(dir) / "qwen38_meta.json").string()) ==
             PathKind::kRegular;
}

struct Qwen38Forward::State {
  model::Q38Weights w;
  model::Q38ForwardConfig c;
  std::string dir;  ///< the release directory (config.json)
  model::Progress progress;
  std::vector<Matrix> hidden;

  Result<Matrix> project(const std::string& name, const Matrix& x, std::uint64_t out) {
    QR_ASSIGN_OR_RETURN(m, w.get(name, out, x.cols));
    return matmul(x, *m);
  }
  Result<Matrix> deltanet(std::uint64_t l, const Matrix& x, const Batch& b);
  Result<Matrix> moe(std::uint64_t l, const Matrix& x);
  Status layer(std::uint64_t l, Matrix& hyper, const Batch& b);
};

// Gated DeltaNet: the shared delta rule with a scalar decay per value head and the output
// normed then gated by sigmoid(z) (q38_rmsg with its sigmoid gate).
Result<Matrix> Qwen38Forward::State::deltanet(std::uint64_t l, const Matrix& x, const Batch& b) {
  const std::string p = fmt::format("layers.{}.linear_attn.", l);
  const std::uint64_t VH = c.dn_value_heads, V = VH * c.dn_value_dim, CD = c.dn_conv_channels();
  const model::DeltaNetDims dims{c.dn_key_heads,
                                 c.dn_key_dim,
                                 VH,
                                 c.dn_value_dim,
                                 c.dn_kernel,
                                 c.eps,
                                 model::DeltaDecay::kScalar,
                                 model::DeltaGate::kSigmoid,
                                 0.0f};
  QR_ASSIGN_OR_RETURN(qkv, project(p + "in_proj_qkv.weight", x, CD));
  QR_ASSIGN_OR_RETURN(z, project(p + "in_proj_z.weight", x, V));
  QR_ASSIGN_OR_RETURN(beta, project(p + "in_proj_b.weight", x, VH));
  QR_ASSIGN_OR_RETURN(decay, project(p + "in_proj_a.weight", x, VH));
  QR_ASSIGN_OR_RETURN(conv, w.floats(p + "conv1d.weight", CD * c.dn_kernel));
  QR_ASSIGN_OR_RETURN(a_log, w.floats(p + "A_log", VH));
  QR_ASSIGN_OR_RETURN(dt, w.floats(p + "dt_bias", VH));
  QR_ASSIGN_OR_RETURN(nw, w.floats(p + "norm.weight", c.dn_value_dim));
  const model::DeltaNetParams params{conv, a_log, dt, nw};
  Matrix out{x.rows, V, std::vector<float>(x.rows * V)};
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t t0 = b.start[s], t = b.start[s + 1] - t0;
    model::gated_deltanet(dims, params, t, qkv.row(t0), z.row(t0), beta.row(t0), decay.row(t0),
                          out.row(t0));
  }
  return project(p + "out_proj.weight", out, c.hidden);
}

// The routed experts (rank order, as q38_moe replays it) plus the gated shared expert.
Result<Matrix> Qwen38Forward::State::moe(std::uint64_t l, const Matrix& x) {
  const std::string p = fmt::format("layers.{}.mlp.", l);
  const std::uint64_t H = c.hidden;
  QR_ASSIGN_OR_RETURN(logits, project(p + "gate.weight", x, c.experts));
  std::vector<model::Route> routes;
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    routes.push_back(softmax_route(std::span(logits.row(t), c.experts), c.topk, c.norm_topk));
  }
  auto run = [&](std::uint64_t e, const Matrix& xe) -> Result<Matrix> {
    QR_ASSIGN_OR_RETURN(m, w.expert(l, e));
    Matrix g = matmul(xe, m.gate);
    q38_swiglu(g, matmul(xe, m.up));
    return matmul(g, m.down);
  };
  QR_ASSIGN_OR_RETURN(
      y, model::mix_routed_experts(x, routes, c.experts, H, run, model::MixOrder::kRouteOrder));
  const std::string sp = p + "shared_expert.";
  QR_ASSIGN_OR_RETURN(sg, project(sp + "gate_proj.weight", x, c.shared_inter));
  QR_ASSIGN_OR_RETURN(su, project(sp + "up_proj.weight", x, c.shared_inter));
  q38_swiglu(sg, su);
  QR_ASSIGN_OR_RETURN(shared, project(sp + "down_proj.weight", sg, H));
  QR_ASSIGN_OR_RETURN(gate_w, w.vec(p + "shared_expert_gate.weight", H));
  for (std::uint64_t t = 0; t < x.rows; ++t) {
    float g = 0;
    for (std::uint64_t d = 0; d < H; ++d) g += x.row(t)[d] * gate_w->v[d];
    g = model::q38_sigmoid(g);
    for (std::uint64_t d = 0; d < H; ++d) y.row(t)[d] += g * shared.row(t)[d];
  }
  return y;
}

// One layer (q38_layers_forward_range): the PLE on its layer, then the token mixer and the MoE,
// each between a gated-residual read and its apply.
Status Qwen38Forward::State::layer(std::uint64_t l, Matrix& hyper, const Batch& b) {
  const std::string p = fmt::format("layers.{}.", l);
  if (l == c.ple_layer) QR_TRY(model::ple_add(w, c, b, hyper));
  QR_ASSIGN_OR_RETURN(a, model::gated_read(w, c, p + "attn_hyper_connection.", hyper, true));
  Result<Matrix> block =
      c.attention[l] ? model::q38_sparse_attention(w, c, l, a.mixed, b) : deltanet(l, a.mixed, b);
  if (!block.ok()) return std::move(block.error());
  model::gated_apply(c, hyper, *block, a.inject);
  QR_ASSIGN_OR_RETURN(m, model::gated_read(w, c, p + "mlp_hyper_connection.", hyper, true));
  QR_ASSIGN_OR_RETURN(f, moe(l, m.mixed));
  model::gated_apply(c, hyper, f, m.inject);
  return ok_status();
}

Qwen38Forward::Qwen38Forward(std::unique_ptr<State> s) : s_(std::move(s)) {}
Qwen38Forward::Qwen38Forward(Qwen38Forward&&) noexcept = default;
Qwen38Forward& Qwen38Forward::operator=(Qwen38Forward&&) noexcept = default;
Qwen38Forward::~Qwen38Forward() = default;

Result<Qwen38Forward> Qwen38Forward::open(const std::string& path,
                                          const std::string& fallback_config_dir) {
  namespace fs = std::filesystem;
  // A local checkpoint's config.json is read before any of its files; a remote one's
  // directory is known once its headers are (no weight is read before the refusals either way).
  std::optional<ModelWeights> given;
  std::string dir =
      path_kind(path) == PathKind::kDirectory ? path : fs::path(path).parent_path().string();
  if (remote::is_remote_path(path)) {
    QR_ASSIGN_OR_RETURN(w, ModelWeights::open_as_stored(path));
    dir = w.directory();
    given = std::move(w);
  }
  std::string base_dir = dir;
  auto store = model::Q38ExpertStore::kRelease;
  // path_kind, not std::filesystem: a remote repository's files are not local.
  if (path_kind((fs::path(dir) / "config.json").string()) == PathKind::kMissing) {
    // An experts-only directory: the release it is mounted beside holds the rest.
    const bool sidecar = model::is_q38_sidecar_dir(dir);
    base_dir = !fallback_config_dir.empty() ? fallback_config_dir
               : sidecar ? fs::path(dir).lexically_normal().parent_path().string()
                         : "";
    if (base_dir.empty()) {
      return Error(ErrorKind::kInvalidConfig,
                   "an experts-only directory (no config.json): give the release directory it "
                   "sits beside (qrepack eval RELEASE THIS, qrepack oracle THIS --release DIR)")
          .in_file(path)
          .with_rule("forward.config");
    }
    store = sidecar ? model::Q38ExpertStore::kSidecar : model::Q38ExpertStore::kOverlay;
  }
  // Every variant the pass does not implement is refused here, before any weight is read.
  QR_ASSIGN_OR_RETURN(cfg, model::load_q38_forward_config(base_dir));
  if (!given) {
    QR_ASSIGN_OR_RETURN(w, ModelWeights::open_as_stored(path));
    given = std::move(w);
  }
  std::optional<ModelWeights> experts;
  if (store != model::Q38ExpertStore::kRelease) {
    experts = std::move(given);
    QR_ASSIGN_OR_RETURN(release, ModelWeights::open_as_stored(base_dir));
    given = std::move(release);
  }
  QR_ASSIGN_OR_RETURN(w, model::Q38Weights::make(std::move(*given), std::move(experts), store,
                                                 cfg.hidden, cfg.inter, cfg.experts));
  auto st = std::make_unique<State>(State{std::move(w), std::move(cfg), base_dir, {}, {}});
  return Qwen38Forward(std::move(st));
}

const std::string& Qwen38Forward::model_type() const { return s_->c.model_type; }
std::uint64_t Qwen38Forward::vocab_size() const { return s_->c.vocab; }
std::uint64_t Qwen38Forward::hidden_size() const { return s_->c.hidden; }
std::uint64_t Qwen38Forward::layer_count() const { return s_->c.layers; }
const std::string& Qwen38Forward::directory() const { return s_->dir; }
std::vector<std::string> Qwen38Forward::input_files() const { return s_->w.files(); }
void Qwen38Forward::set_cache_budget(std::uint64_t bytes) { s_->w.cache().set_budget(bytes); }
void Qwen38Forward::set_progress(std::function<void(std::string_view)> progress) {
  s_->progress.fn = std::move(progress);
}
const std::vector<Matrix>* Qwen38Forward::final_hidden() const { return &s_->hidden; }

Result<std::vector<Matrix>> Qwen38Forward::logits(const std::vector<TokenIds>& seqs) {
  State& st = *s_;
  const model::Q38ForwardConfig& c = st.c;
  QR_ASSIGN_OR_RETURN(b, model::make_batch(seqs, c.vocab));
  QR_ASSIGN_OR_RETURN(e, model::embed_tokens(st.w.base(), st.w.prefix() + "embed_tokens.weight",
                                             c.vocab, c.hidden, b));
  // Every stream starts as the embedding.
  Matrix hyper{b.tokens(), c.wide(), std::vector<float>(b.tokens() * c.wide())};
  for (std::uint64_t t = 0; t < b.tokens(); ++t) {
    for (std::uint64_t s = 0; s < c.hc; ++s) {
      std::copy(e.row(t), e.row(t) + c.hidden, hyper.row(t) + s * c.hidden);
    }
  }
  for (std::uint64_t l = 0; l < c.layers; ++l) {
    st.progress.say(fmt::format("layer {}/{} ({}{})", l + 1, c.layers,
                                c.attention[l] ? "QSA" : "GDN", l == c.ple_layer ? ", PLE" : ""));
    QR_TRY(st.layer(l, hyper, b));
  }
  st.progress.say("lm_head");
  QR_ASSIGN_OR_RETURN(fin, model::gated_read(st.w, c, "hyper_connection_mixer.", hyper, false));
  st.hidden.clear();
  for (std::uint64_t s = 0; s < b.sequences(); ++s) {
    const std::uint64_t r0 = b.start[s], n = b.start[s + 1] - r0;
    st.hidden.push_back(Matrix{
        n, c.hidden, std::vector<float>(fin.mixed.row(r0), fin.mixed.row(r0) + n * c.hidden)});
  }
  return model::vocab_logits(st.w.cache(), "lm_head.weight", c.vocab, fin.mixed, b);
}

}  // namespace qrepack
