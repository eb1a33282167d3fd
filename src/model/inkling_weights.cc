// Inkling's weights in its release layout or the runtime's (model/inkling_weights.h). The
// release-to-runtime names are those of colibri-inkling's layout (targets/inkling/inkling.cc),
// which renames the release for inkling.c.
#include "model/inkling_weights.h"

#include <fmt/format.h>

#include <filesystem>

#include "io/fs_util.h"

namespace qrepack::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOverlayDir = "dense-int4g64";  // inkling.c's subdirectory

struct VectorName {
  const char* release;  ///< after model.llm.layers.L.
  const char* runtime;  ///< after model.layers.L.
};
// In LayerVector order.
constexpr VectorName kVectors[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"mlp_norm.weight", "post_attention_layernorm.weight"},
    {"attn.q_norm.weight", "self_attn.q_norm.weight"},
    {"attn.k_norm.weight", "self_attn.k_norm.weight"},
    {"attn.k_sconv.weight", "self_attn.k_sconv.conv1d.weight"},
    {"attn.v_sconv.weight", "self_attn.v_sconv.conv1d.weight"},
    {"attn_sconv.weight", "attn_sconv.conv1d.weight"},
    {"mlp_sconv.weight", "mlp_sconv.conv1d.weight"},
    {"attn.rel_logits_proj.proj", "self_attn.rel_logits_proj.proj"},
    {"mlp.gate.weight", "mlp.gate.weight"},
    {"mlp.gate.bias", "mlp.gate.e_score_correction_bias"},
};
static_assert(std::size(kVectors) == static_cast<std::size_t>(LayerVector::kRouterBias) + 1);

// In AttnMatrix order.
constexpr VectorName kAttention[] = {
    {"attn.wq_du.weight", "self_attn.q_proj.weight"},
    {"attn.wk_dv.weight", "self_attn.k_proj.weight"},
    {"attn.wv_dv.weight", "self_attn.v_proj.weight"},
    {"attn.wr_du.weight", "self_attn.r_proj.weight"},
    {"attn.wo_ud.weight", "self_attn.o_proj.weight"},
};
static_assert(std::size(kAttention) == static_cast<std::size_t>(AttnMatrix::kO) + 1);

}  // namespace

Result<InklingWeights> InklingWeights::make(ModelWeights w, const InklingConfig& c) {
  const bool release = w.has_tensor("model.llm.embed.weight");
  std::optional<ModelWeights> overlay;
  const std::string od = (fs::path(w.directory()) / kOverlayDir).string();
  if (!release && path_kind(od) == PathKind::kDirectory) {
    QR_ASSIGN_OR_RETURN(o, ModelWeights::open_by_names(od));
    overlay = std::move(o);
  }
  return InklingWeights(std::move(w), std::move(overlay), release, c);
}

std::string InklingWeights::layer_name(std::uint64_t layer, const char* release,
                                       const char* runtime) const {
  return release_ ? fmt::format("model.llm.layers.{}.{}", layer, release)
                  : fmt::format("model.layers.{}.{}", layer, runtime);
}

Result<Matrix> InklingWeights::rows(const std::string& name, std::uint64_t rows, std::uint64_t cols,
                                    std::uint64_t row0, std::uint64_t n) const {
  if (overlay_ && overlay_->has_tensor(name) && overlay_->has_tensor(name + ".qs")) {
    return overlay_->read(name, rows, cols, row0, n);
  }
  if (w_.has_tensor(name) && !w_.has_tensor(name + ".qs")) {
    return w_.read_stored_rows(name, rows, cols, row0, n);
  }
  return w_.read(name, rows, cols, row0, n);  // a container's U8 + .qs (or: missing, named)
}

GatedMlp InklingWeights::split_gate_up(const Matrix& block, std::uint64_t inter) const {
  const std::uint64_t d = block.cols;
  GatedMlp g{Matrix{inter, d, std::vector<float>(inter * d)},
             Matrix{inter, d, std::vector<float>(inter * d)},
             {}};
  for (std::uint64_t r = 0; r < inter; ++r) {
    // release: gate row r is row 2r, up row r is 2r + 1; runtime: gate rows, then up rows.
    const std::uint64_t gr = release_ ? 2 * r : r, ur = release_ ? 2 * r + 1 : inter + r;
    std::copy(block.row(gr), block.row(gr) + d, g.gate.row(r));
    std::copy(block.row(ur), block.row(ur) + d, g.up.row(r));
  }
  return g;
}

Result<Matrix> InklingWeights::embedding(std::uint64_t row0, std::uint64_t n) const {
  return rows(release_ ? "model.llm.embed.weight" : "model.embed_tokens.weight", c_.vocab,
              c_.hidden, row0, n);
}

Result<Matrix> InklingWeights::head(std::uint64_t row0, std::uint64_t n) const {
  return rows(release_ ? "model.llm.unembed.weight" : "lm_head.weight", c_.vocab, c_.hidden, row0,
              n);
}

Result<std::optional<std::vector<float>>> InklingWeights::embed_norm() const {
  const std::string name = release_ ? "model.llm.embed_norm.weight" : "model.embed_norm.weight";
  if (!w_.has_tensor(name)) return std::optional<std::vector<float>>();
  QR_ASSIGN_OR_RETURN(v, w_.read_floats(name, c_.hidden));
  return std::optional<std::vector<float>>(std::move(v));
}

Result<std::vector<float>> InklingWeights::final_norm() const {
  return w_.read_floats(release_ ? "model.llm.norm.weight" : "model.norm.weight", c_.hidden);
}

Result<Matrix> InklingWeights::attention(std::uint64_t l, AttnMatrix m) const {
  const VectorName& n = kAttention[static_cast<std::size_t>(m)];
  const std::uint64_t q = c_.heads_of(l) * c_.head_dim_of(l), kv = c_.kv_of(l) * c_.head_dim_of(l);
  const std::uint64_t d = c_.hidden;
  std::uint64_t r = 0, k = d;
  switch (m) {
    case AttnMatrix::kQ:
      r = q;
      break;
    case AttnMatrix::kK:
    case AttnMatrix::kV:
      r = kv;
      break;
    case AttnMatrix::kR:
      r = c_.heads_of(l) * c_.d_rel;
      break;
    case AttnMatrix::kO:
      r = d, k = q;
      break;
  }
  return rows(layer_name(l, n.release, n.runtime), r, k, 0, r);
}

Result<std::vector<float>> InklingWeights::vector(std::uint64_t l, LayerVector v) const {
  const VectorName& n = kVectors[static_cast<std::size_t>(v)];
  const std::uint64_t d = c_.hidden, k = c_.conv_kernel;
  const std::uint64_t kv = c_.kv_of(l) * c_.head_dim_of(l);
  std::uint64_t count = 0;
  switch (v) {
    case LayerVector::kInputNorm:
    case LayerVector::kPostNorm:
      count = d;
      break;
    case LayerVector::kQNorm:
    case LayerVector::kKNorm:
      count = c_.head_dim_of(l);
      break;
    case LayerVector::kKConv:
    case LayerVector::kVConv:
      count = kv * k;
      break;
    case LayerVector::kAttnConv:
    case LayerVector::kMlpConv:
      count = d * k;
      break;
    case LayerVector::kRelBank:
      count = c_.d_rel * c_.extent_of(l);
      break;
    case LayerVector::kRouter:
      count = (c_.experts + c_.shared) * d;
      break;
    case LayerVector::kRouterBias:
      count = c_.experts;
      break;
  }
  return w_.read_floats(layer_name(l, n.release, n.runtime), count);
}

Result<float> InklingWeights::global_scale(std::uint64_t l) const {
  const char* suffix = c_.sparse[l] ? "mlp.gate.global_scale" : "mlp.global_scale";
  const std::string name = layer_name(l, suffix, suffix);
  if (!w_.has_tensor(name)) return 1.0f;  // load_scalar's default
  QR_ASSIGN_OR_RETURN(v, w_.read_floats(name, 1));
  return v[0];
}

Result<GatedMlp> InklingWeights::dense(std::uint64_t l) const {
  const std::uint64_t i = c_.dense_inter, d = c_.hidden;
  GatedMlp g;
  if (release_) {
    QR_ASSIGN_OR_RETURN(block, rows(layer_name(l, "mlp.w13_dn.weight", ""), 2 * i, d, 0, 2 * i));
    g = split_gate_up(block, i);
  } else {
    QR_ASSIGN_OR_RETURN(gate, rows(layer_name(l, "", "mlp.gate_proj.weight"), i, d, 0, i));
    QR_ASSIGN_OR_RETURN(up, rows(layer_name(l, "", "mlp.up_proj.weight"), i, d, 0, i));
    g.gate = std::move(gate), g.up = std::move(up);
  }
  QR_ASSIGN_OR_RETURN(down,
                      rows(layer_name(l, "mlp.w2_md.weight", "mlp.down_proj.weight"), d, i, 0, d));
  g.down = std::move(down);
  return g;
}

Result<GatedMlp> InklingWeights::expert(std::uint64_t l, std::uint64_t e) const {
  const std::uint64_t i = c_.moe_inter, d = c_.hidden, n = c_.experts;
  QR_ASSIGN_OR_RETURN(
      block, rows(layer_name(l, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj"), n * 2 * i, d,
                  e * 2 * i, 2 * i));
  GatedMlp g = split_gate_up(block, i);
  QR_ASSIGN_OR_RETURN(down, rows(layer_name(l, "mlp.experts.w2_weight", "mlp.experts.down_proj"),
                                 n * d, i, e * d, d));
  g.down = std::move(down);
  return g;
}

Result<GatedMlp> InklingWeights::shared_expert(std::uint64_t l, std::uint64_t j) const {
  const std::uint64_t i = c_.moe_inter, d = c_.hidden, s = c_.shared;
  GatedMlp g;
  if (release_) {
    QR_ASSIGN_OR_RETURN(block, rows(layer_name(l, "mlp.shared_experts.shared_w13_weight", ""),
                                    s * 2 * i, d, j * 2 * i, 2 * i));
    g = split_gate_up(block, i);
  } else {
    QR_ASSIGN_OR_RETURN(
        gate, rows(layer_name(l, "", "mlp.shared_experts.gate_proj"), s * i, d, j * i, i));
    QR_ASSIGN_OR_RETURN(up,
                        rows(layer_name(l, "", "mlp.shared_experts.up_proj"), s * i, d, j * i, i));
    g.gate = std::move(gate), g.up = std::move(up);
  }
  QR_ASSIGN_OR_RETURN(down, rows(layer_name(l, "mlp.shared_experts.shared_w2_weight",
                                            "mlp.shared_experts.down_proj"),
                                 s * d, i, j * d, d));
  g.down = std::move(down);
  return g;
}

}  // namespace qrepack::model
