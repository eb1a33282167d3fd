// The Inkling dims and resident shapes (targets/inkling_layout.h), from c/inkling.c's
// load_cfg: text fields under text_config; sliding layers from layer_types ("hybrid_sliding" /
// "hybrid"), else local_layer_ids, else every layer but each sixth; dense layers from
// mlp_layer_types ("dense" / "sparse"), else the first dense_mlp_idx; with
// dense_intermediate_size present, intermediate_size is the MoE width, else
// moe_intermediate_size is.
#include "targets/inkling/inkling_layout.h"

#include <fmt/format.h>

#include <filesystem>

#include "qrepack/checkpoint/glm_moe.h"
#include "qrepack/checkpoint/moe_config.h"
#include "targets/container/planners.h"
#include "targets/container/tensor_contract.h"

namespace qrepack {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr std::string_view kRule = "inkling.config";
constexpr std::string_view kLayerRule = "inkling.layer_types";
constexpr std::uint64_t kMaxLayers = 256;  // inkling.c's MAXL

// A per-layer list of strings, each one of (yes, no): true for yes.
Result<std::vector<bool>> layer_list(const Json& t, const char* key, std::uint64_t layers,
                                     const char* yes, const char* no, const std::string& dir) {
  const Json& v = t[key];
  if (!v.is_array() || v.size() != layers) {
    return config_key_error(
        dir, fmt::format("\"{}\" must list all {} layers (\"{}\" or \"{}\")", key, layers, yes, no),
        kLayerRule);
  }
  std::vector<bool> out;
  for (const Json& x : v) {
    if (x.is_string() && x == yes) {
      out.push_back(true);
    } else if (x.is_string() && x == no) {
      out.push_back(false);
    } else {
      return config_key_error(dir,
                              fmt::format("\"{}\" holds {}, not \"{}\" or \"{}\"", key,
                                          x.dump().substr(0, 40), yes, no),
                              kLayerRule);
    }
  }
  return out;
}

}  // namespace

bool InklingDims::any_sparse() const {
  for (bool s : sparse) {
    if (s) return true;
  }
  return false;
}

const Json& inkling_text_config(const Json& config) {
  if (config.contains("text_config") && config["text_config"].is_object())
    return config["text_config"];
  return config;
}

Result<InklingDims> read_inkling_dims(const Json& config, const std::string& dir) {
  const Json& t = inkling_text_config(config);
  InklingDims d;
  QR_ASSIGN_OR_RETURN(hidden, config_dim(t, "hidden_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(layers, config_dim(t, "num_hidden_layers", dir, kRule));
  QR_ASSIGN_OR_RETURN(vocab, config_dim(t, "vocab_size", dir, kRule));
  QR_ASSIGN_OR_RETURN(heads, config_dim(t, "num_attention_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(kv, config_dim(t, "num_key_value_heads", dir, kRule));
  QR_ASSIGN_OR_RETURN(head_dim, config_dim(t, "head_dim", dir, kRule));
  QR_ASSIGN_OR_RETURN(d_rel, config_dim(t, "d_rel", dir, kRule));
  QR_ASSIGN_OR_RETURN(rel_extent, config_dim(t, "rel_extent", dir, kRule));
  const char* conv_key = t.contains("sconv_kernel_size") ? "sconv_kernel_size" : "conv_kernel_size";
  QR_ASSIGN_OR_RETURN(conv_k, config_dim(t, conv_key, dir, kRule));
  d.hidden = hidden, d.layers = layers, d.vocab = vocab, d.heads = heads, d.kv = kv;
  d.head_dim = head_dim, d.d_rel = d_rel, d.rel_extent = rel_extent, d.conv_k = conv_k;
  if (layers > kMaxLayers) {
    return config_key_error(
        dir, fmt::format("num_hidden_layers {} is over inkling.c's {} (MAXL)", layers, kMaxLayers),
        kRule);
  }
  // Attention kind per layer.
  if (t.contains("layer_types") && !t["layer_types"].is_null()) {
    QR_ASSIGN_OR_RETURN(s, layer_list(t, "layer_types", layers, "hybrid_sliding", "hybrid", dir));
    d.sliding = std::move(s);
  } else if (t.contains("local_layer_ids") && !t["local_layer_ids"].is_null()) {
    const Json& ids = t["local_layer_ids"];
    d.sliding.assign(layers, false);
    if (!ids.is_array() || ids.size() > layers) {
      return config_key_error(dir, "\"local_layer_ids\" must be a list of layer numbers",
                              kLayerRule);
    }
    for (const Json& x : ids) {
      if (!x.is_number_unsigned() || x.get<std::uint64_t>() >= layers) {
        return config_key_error(dir,
                                fmt::format("\"local_layer_ids\" holds {}, not a layer below {}",
                                            x.dump().substr(0, 40), layers),
                                kLayerRule);
      }
      d.sliding[x.get<std::size_t>()] = true;
    }
  } else {
    for (std::uint64_t i = 0; i < layers; ++i) d.sliding.push_back((i + 1) % 6 != 0);
  }
  // MLP kind per layer.
  if (t.contains("mlp_layer_types") && !t["mlp_layer_types"].is_null()) {
    QR_ASSIGN_OR_RETURN(s, layer_list(t, "mlp_layer_types", layers, "sparse", "dense", dir));
    d.sparse = std::move(s);
  } else {
    std::uint64_t dense_idx = 0;
    if (t.contains("dense_mlp_idx") && !t["dense_mlp_idx"].is_null()) {
      if (!t["dense_mlp_idx"].is_number_unsigned()) {
        return config_key_error(dir, "\"dense_mlp_idx\" must be a non-negative integer",
                                kLayerRule);
      }
      dense_idx = t["dense_mlp_idx"].get<std::uint64_t>();
    }
    for (std::uint64_t i = 0; i < layers; ++i) d.sparse.push_back(i >= dense_idx);
  }
  bool any_sliding = false, any_dense = false;
  for (std::uint64_t i = 0; i < layers; ++i) {
    any_sliding = any_sliding || d.sliding[i];
    any_dense = any_dense || !d.sparse[i];
  }
  if (any_sliding) {
    QR_ASSIGN_OR_RETURN(sh, config_dim(t, "swa_num_attention_heads", dir, kRule));
    QR_ASSIGN_OR_RETURN(skv, config_dim(t, "swa_num_key_value_heads", dir, kRule));
    QR_ASSIGN_OR_RETURN(shd, config_dim(t, "swa_head_dim", dir, kRule));
    QR_ASSIGN_OR_RETURN(window, config_dim(t, "sliding_window_size", dir, kRule));
    d.swa_heads = sh, d.swa_kv = skv, d.swa_head_dim = shd, d.window = window;
  }
  const bool release_form =
      t.contains("dense_intermediate_size") && t["dense_intermediate_size"].is_number();
  const char* moe_key = release_form ? "intermediate_size" : "moe_intermediate_size";
  const char* dense_key = release_form ? "dense_intermediate_size" : "intermediate_size";
  if (any_dense) {
    QR_ASSIGN_OR_RETURN(id, config_dim(t, dense_key, dir, kRule));
    d.dense_inter = id;
  }
  if (d.any_sparse()) {
    QR_ASSIGN_OR_RETURN(e, config_dim(t, "n_routed_experts", dir, kRule));
    QR_ASSIGN_OR_RETURN(s, config_dim(t, "n_shared_experts", dir, kRule));
    QR_ASSIGN_OR_RETURN(k, config_dim(t, "num_experts_per_tok", dir, kRule));
    QR_ASSIGN_OR_RETURN(i, config_dim(t, moe_key, dir, kRule));
    d.experts = e, d.shared = s, d.topk = k, d.moe_inter = i;
    if (k > e) {
      return config_key_error(
          dir, fmt::format("num_experts_per_tok {} exceeds n_routed_experts {}", k, e), kRule);
    }
    // The planners list E + 4 weights per layer and check them one by one.
    if (layers * (3 * e + 8) > kMaxModelWeights) {
      return Error(ErrorKind::kLimitExceeded,
                   fmt::format("config.json describes {} layers x {} experts, over the cap of {} "
                               "weights",
                               layers, e, kMaxModelWeights))
          .in_file((fs::path(dir) / "config.json").string())
          .with_rule("config.max_weights");
    }
  }
  return d;
}

std::map<std::string, InklingResident> inkling_residents(const InklingDims& d) {
  std::map<std::string, InklingResident> r;
  const std::uint64_t h = d.hidden, k = d.conv_k;
  r["model.embed_tokens.weight"] = {{d.vocab, h}};
  r["model.embed_norm.weight"] = {{h}, true};
  r["model.norm.weight"] = {{h}};
  r["lm_head.weight"] = {{d.vocab, h}};
  for (std::uint64_t l = 0; l < d.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::uint64_t nh = d.heads_of(l), kv = d.kv_of(l), hd = d.head_dim_of(l);
    r[p + "input_layernorm.weight"] = {{h}};
    r[p + "post_attention_layernorm.weight"] = {{h}};
    r[p + "self_attn.q_proj.weight"] = {{nh * hd, h}};
    r[p + "self_attn.k_proj.weight"] = {{kv * hd, h}};
    r[p + "self_attn.v_proj.weight"] = {{kv * hd, h}};
    r[p + "self_attn.r_proj.weight"] = {{nh * d.d_rel, h}};
    r[p + "self_attn.o_proj.weight"] = {{h, nh * hd}};
    r[p + "self_attn.q_norm.weight"] = {{hd}};
    r[p + "self_attn.k_norm.weight"] = {{hd}};
    r[p + "self_attn.k_sconv.conv1d.weight"] = {{kv * hd, 1, k}};
    r[p + "self_attn.v_sconv.conv1d.weight"] = {{kv * hd, 1, k}};
    r[p + "self_attn.rel_logits_proj.proj"] = {{d.d_rel, d.extent_of(l)}};
    r[p + "attn_sconv.conv1d.weight"] = {{h, 1, k}};
    r[p + "mlp_sconv.conv1d.weight"] = {{h, 1, k}};
    if (!d.sparse[l]) {
      r[p + "mlp.gate_proj.weight"] = {{d.dense_inter, h}};
      r[p + "mlp.up_proj.weight"] = {{d.dense_inter, h}};
      r[p + "mlp.down_proj.weight"] = {{h, d.dense_inter}};
      r[p + "mlp.global_scale"] = {{1}, true};
    } else {
      const std::uint64_t s = d.shared, i = d.moe_inter;
      r[p + "mlp.gate.weight"] = {{d.experts + s, h}};
      r[p + "mlp.gate.e_score_correction_bias"] = {{d.experts}};
      r[p + "mlp.gate.global_scale"] = {{1}, true};
      r[p + "mlp.shared_experts.gate_proj"] = {{s, i, h}};
      r[p + "mlp.shared_experts.up_proj"] = {{s, i, h}};
      r[p + "mlp.shared_experts.down_proj"] = {{s, h, i}};
    }
  }
  return r;
}

}  // namespace qrepack
