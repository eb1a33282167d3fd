#include "model/glm53_config.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/config_keys.h"

namespace qrepack::model {
namespace {

using Json = nlohmann::json;

// layer_types is the authority (glm53.c's load_layer_kinds): "linear..." is KDA, anything
// naming "attention" or "full" is MLA + indexer; full_attn_layers, when given, must agree.
Result<std::vector<bool>> layer_kinds(const Json& t, std::uint64_t layers) {
  if (!present(t, "layer_types") || !t["layer_types"].is_array() ||
      t["layer_types"].size() != layers) {
    return forward_config_error(fmt::format("layer_types must list {} entries", layers));
  }
  std::vector<bool> full;
  for (const Json& e : t["layer_types"]) {
    if (!e.is_string()) return forward_config_error("a layer_types entry is not a string");
    const std::string s = e.get<std::string>();
    if (s.find("linear") != std::string::npos) {
      full.push_back(false);
    } else if (s.find("attention") != std::string::npos || s.find("full") != std::string::npos) {
      full.push_back(true);
    } else {
      return forward_unsupported(
          fmt::format("layer type \"{}\" at {}: the pass implements KDA "
                      "(linear_attention) and MLA + DSA layers only",
                      s.substr(0, 64), full.size()));
    }
  }
  const Json* la = present(t, "linear_attn_config") ? &t["linear_attn_config"] : nullptr;
  if (la && la->is_object() && present(*la, "full_attn_layers")) {
    const Json& fl = (*la)["full_attn_layers"];
    std::uint64_t marked = 0;
    for (bool f : full) marked += f;
    if (!fl.is_array() || fl.size() != marked) {
      return forward_config_error("linear_attn_config.full_attn_layers disagrees with layer_types");
    }
    for (const Json& i : fl) {
      if (!i.is_number_unsigned() || i.get<std::uint64_t>() >= layers || !full[i.get<size_t>()]) {
        return forward_config_error(
            "linear_attn_config.full_attn_layers disagrees with layer_types");
      }
    }
  }
  return full;
}

// first_k_dense_replace, else the first "sparse" of mlp_layer_types.
Result<std::uint64_t> first_dense(const Json& t, std::uint64_t layers) {
  if (present(t, "first_k_dense_replace")) return config_count(t, "first_k_dense_replace", layers);
  if (!present(t, "mlp_layer_types") || !t["mlp_layer_types"].is_array()) {
    return forward_config_error(
        "config.json has neither first_k_dense_replace nor mlp_layer_types");
  }
  const Json& k = t["mlp_layer_types"];
  for (std::uint64_t i = 0; i < k.size(); ++i) {
    if (k[i].is_string() && k[i].get<std::string>().find("sparse") != std::string::npos) return i;
  }
  return std::min<std::uint64_t>(k.size(), layers);
}

Status read_dims(const Json& t, Glm53Dims& d) {
  const Json empty = Json::object();
  const Json& la = present(t, "linear_attn_config") && t["linear_attn_config"].is_object()
                       ? t["linear_attn_config"]
                       : empty;
  if (la.empty()) return forward_config_error("config.json has no linear_attn_config");
  struct Key {
    std::uint64_t* dst;
    const Json* j;
    const char* key;
    std::uint64_t cap;
    std::optional<std::uint64_t> fallback;
  };
  const Key keys[] = {
      {&d.hidden, &t, "hidden_size", 65536, {}},
      {&d.layers, &t, "num_hidden_layers", 120, {}},
      {&d.vocab, &t, "vocab_size", 1 << 22, {}},
      {&d.dense_inter, &t, "intermediate_size", 1 << 20, {}},
      {&d.heads, &t, "num_attention_heads", 1024, {}},
      {&d.q_lora, &t, "q_lora_rank", 1 << 16, {}},
      {&d.kv_lora, &t, "kv_lora_rank", 4096, {}},
      {&d.nope, &t, "qk_nope_head_dim", 4096, {}},
      {&d.v_head, &t, "v_head_dim", 4096, {}},
      {&d.experts, &t, "n_routed_experts", 4096, {}},
      {&d.topk, &t, "num_experts_per_tok", 64, {}},
      {&d.moe_inter, &t, "moe_intermediate_size", 1 << 20, {}},
      {&d.shared, &t, "n_shared_experts", 64, 1},
      {&d.kda_heads, &la, "num_heads", 4096, {}},
      {&d.kda_head_dim, &la, "head_dim", 512, {}},
      {&d.conv_kernel, &la, "short_conv_kernel_size", 8, {}},
      {&d.index_topk, &t, "index_topk", 1 << 20, 0},
      {&d.index_heads, &t, "index_n_heads", 1024, 0},
      {&d.index_dim, &t, "index_head_dim", 4096, 0},
      {&d.kpool, &t, "index_kpool", 64, 1},
      {&d.hc_mult, &t, "hc_mult", 8, 1},
      {&d.hc_iters, &t, "hc_sinkhorn_iters", 1000, 0},
  };
  for (const Key& k : keys) {
    QR_ASSIGN_OR_RETURN(v, config_count(*k.j, k.key, k.cap, k.fallback));
    *k.dst = v;
  }
  QR_ASSIGN_OR_RETURN(fd, first_dense(t, d.layers));
  d.first_dense = fd;
  QR_ASSIGN_OR_RETURN(full, layer_kinds(t, d.layers));
  d.full = std::move(full);
  if (present(t, "index_kpool_always_select_tail")) {
    const Json& v = t["index_kpool_always_select_tail"];
    d.kpool_tail = v.is_boolean() ? v.get<bool>() : (v.is_number() && v.get<double>() != 0);
  }
  return ok_status();
}

// The ranges glm53.c's load_cfg checks, and what every shape needs to be positive.
Status check_dims(const Glm53Dims& d) {
  if (d.hidden == 0 || d.layers == 0 || d.vocab == 0 || d.experts == 0 || d.topk == 0 ||
      d.topk > d.experts || d.moe_inter == 0 || d.moe_inter % 32 || d.kda_proj() == 0 ||
      d.conv_kernel == 0 || d.hc_mult == 0 || d.kpool == 0 || d.shared == 0 ||
      (d.first_dense > 0 && d.dense_inter == 0)) {
    return forward_config_error(
        "a dimension is out of the runtime's range (hidden, layers, vocab, experts, top-k <= "
        "experts, moe_intermediate_size a multiple of 32, KDA heads x head_dim, conv kernel "
        "1..8, hc_mult 1..8, index_kpool 1..64, n_shared_experts and the dense "
        "intermediate_size when dense layers exist must be positive)");
  }
  return ok_status();
}

// What glm53.c would run differently from this pass, or not at all: refused by name.
Status check_variants(const Json& t, const Glm53Dims& d) {
  if (present(t, "qk_rope_head_dim") && t["qk_rope_head_dim"] != Json(0)) {
    return forward_unsupported(
        "qk_rope_head_dim is not 0: GLM-5.3-Flash's MLA layers are NoPE, rotary MLA is not "
        "implemented (c/glm53.c refuses it too)");
  }
  if (!present(t, "swiglu_limit") || !t["swiglu_limit"].is_number() ||
      t["swiglu_limit"].get<double>() <= 0) {
    return forward_unsupported(
        "swiglu_limit is absent or not positive: GLM-5.3-Flash's MLPs clamp the SwiGLU at "
        "swiglu_limit, and c/glm53.c's default of 0 would zero every MLP");
  }
  if (d.hc_iters == 0) {
    return forward_unsupported(
        "hc_sinkhorn_iters is 0 or absent: the hyper-connections need at least "
        "one Sinkhorn iteration");
  }
  for (const char* key : {"n_group", "num_expert_group"}) {
    if (present(t, key) && !(t[key].is_number_unsigned() && t[key].get<std::uint64_t>() <= 1)) {
      return forward_unsupported(fmt::format(
          "{} {}: group-limited routing is not implemented (c/glm53.c routes over all experts)",
          key, t[key].dump().substr(0, 32)));
    }
  }
  if (present(t, "scoring_func") && t["scoring_func"] != Json("sigmoid")) {
    return forward_unsupported(
        "scoring_func is not \"sigmoid\": only sigmoid routing is implemented");
  }
  if (present(t, "norm_topk_prob") && t["norm_topk_prob"] != Json(true)) {
    return forward_unsupported(
        "norm_topk_prob is not true: the router's weights are always "
        "renormalized (c/glm53.c)");
  }
  const bool any_full = std::find(d.full.begin(), d.full.end(), true) != d.full.end();
  if (any_full && (d.heads == 0 || d.q_lora == 0 || d.kv_lora == 0 || d.nope == 0 ||
                   d.v_head == 0 || d.index_heads == 0 || d.index_dim == 0 || d.kpool < 2 ||
                   d.index_topk < d.kpool || d.index_topk % d.kpool)) {
    return forward_unsupported(fmt::format(
        "MLA + DSA layers with heads {}, q_lora_rank {}, kv_lora_rank {}, qk_nope_head_dim {}, "
        "v_head_dim {}, index_n_heads {}, index_head_dim {}, index_kpool {}, index_topk {}: the "
        "pass implements the q_a / q_b query and the k-pooled indexer (kpool >= 2, index_topk a "
        "positive multiple of it), as c/glm53.c runs them",
        d.heads, d.q_lora, d.kv_lora, d.nope, d.v_head, d.index_heads, d.index_dim, d.kpool,
        d.index_topk));
  }
  return ok_status();
}

}  // namespace

Result<Glm53ForwardConfig> load_glm53_forward_config(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(f, read_model_config(dir));
  auto in_file = [&](Error e) { return std::move(e.in_file(f.path)); };
  const Json& t = f.text();
  Glm53ForwardConfig c;
  c.model_type = f.model_type;
  if (Status s = read_dims(t, c.d); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = check_dims(c.d); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = check_variants(t, c.d); !s.ok()) return in_file(std::move(s.error()));
  const Json& la = t["linear_attn_config"];
  auto eps = config_number(t, "rms_norm_eps", 1e-6);
  auto scale = config_number(t, "routed_scaling_factor", 1.0);
  auto limit = config_number(t, "swiglu_limit", 0.0);
  auto lb = config_number(la, "gate_lower_bound", -5.0);
  auto hc_eps = config_number(t, "hc_eps", 1e-6);
  for (auto* r : {&eps, &scale, &limit, &lb, &hc_eps}) {
    if (!r->ok()) return in_file(std::move(r->error()));
  }
  if (*eps < 0 || *hc_eps < 0) {
    return in_file(forward_config_error("rms_norm_eps and hc_eps must not be negative"));
  }
  c.eps = *eps;
  c.routed_scale = static_cast<float>(*scale);
  c.swiglu_limit = static_cast<float>(*limit);
  c.gate_lower_bound = static_cast<float>(*lb);
  c.hc_eps = static_cast<float>(*hc_eps);
  c.tied = present(t, "tie_word_embeddings") && t["tie_word_embeddings"] == Json(true);
  return c;
}

}  // namespace qrepack::model
