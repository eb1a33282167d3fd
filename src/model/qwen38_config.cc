#include "model/qwen38_config.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "model/config_keys.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack::model {
namespace {

using Json = nlohmann::json;

// q38_validate_cfg's own bounds where it has them; a shared cap on every other dimension.
constexpr std::uint64_t kMaxLayers = 512, kMaxExperts = 1024, kMaxTopK = 256;
constexpr std::uint64_t kMaxHc = 16, kMaxNgramHeads = 64, kMaxHeadWidth = 512;

// q38_num_int: an integral JSON number in [0, kMaxDim] (2.0 too); `fallback` when absent, or
// an error when there is none.
Result<std::uint64_t> integer(const Json& j, const char* key, std::optional<std::uint64_t> def) {
  if (!present(j, key)) {
    if (def) return *def;
    return forward_config_error(fmt::format("config.json has no \"{}\"", key));
  }
  const Json& v = j[key];
  const double x = v.is_number() ? v.get<double>() : -1;
  if (!v.is_number() || !std::isfinite(x) || std::floor(x) != x || x < 0 ||
      x > static_cast<double>(kMaxDim)) {
    return forward_config_error(fmt::format("\"{}\" must be an integer in [0, {}], got {}", key,
                                            kMaxDim, v.dump().substr(0, 32)));
  }
  return static_cast<std::uint64_t>(x);
}

// A string key the runtime requires to hold `want` (absent: `absent_ok`).
Status require_string(const Json& j, const char* key, const char* want, bool absent_ok) {
  if (!present(j, key) && absent_ok) return ok_status();
  if (present(j, key) && j[key] == Json(want)) return ok_status();
  return forward_unsupported(
      fmt::format("{} {}: the pass implements {} \"{}\" only (as c/qwen38.c does)", key,
                  present(j, key) ? j[key].dump().substr(0, 32) : "absent", key, want));
}

// What the runtime refuses and the pass does not implement: each refused by name.
Status check_variants(const Json& t) {
  if (!present(t, "model_type") || t["model_type"] != Json("qwen4_exp_text")) {
    return forward_unsupported(
        fmt::format("text model_type {}: the pass implements qwen4_exp_text",
                    present(t, "model_type") ? t["model_type"].dump() : "absent"));
  }
  QR_TRY(require_string(t, "hidden_act", "silu", true));
  QR_TRY(require_string(t, "output_gate_type", "sigmoid", false));
  for (const char* key : {"attention_bias", "tie_word_embeddings"}) {
    if (present(t, key) && t[key] != Json(false)) {
      return forward_unsupported(
          fmt::format("{} {}: the pass implements false only (as c/qwen38.c)", key,
                      t[key].dump().substr(0, 32)));
    }
  }
  if (present(t, "rope_parameters")) {
    QR_TRY(require_string(t["rope_parameters"], "rope_type", "default", true));
  }
  if (present(t, "ngram_size") && t["ngram_size"] != Json(3)) {
    return forward_unsupported(
        "ngram_size other than 3: the n-gram hash of c/qwen38.c mixes 2- and 3-grams");
  }
  if (present(t, "indexer_kv_heads") && t["indexer_kv_heads"] != Json(1)) {
    return forward_unsupported(
        "indexer_kv_heads other than 1: the sparse-attention indexer has one key");
  }
  if (!present(t, "ple_layer_ids") || !t["ple_layer_ids"].is_array() ||
      t["ple_layer_ids"].size() != 1) {
    return forward_unsupported(
        "ple_layer_ids must name exactly one layer (one PLE layer is implemented)");
  }
  return ok_status();
}

Status read_layer_types(const Json& t, Q38ForwardConfig& c) {
  if (!present(t, "layer_types") || !t["layer_types"].is_array() ||
      t["layer_types"].size() != c.layers) {
    return forward_config_error(fmt::format("layer_types must list {} layers", c.layers));
  }
  for (const Json& k : t["layer_types"]) {
    const std::string s = k.is_string() ? k.get<std::string>() : k.dump().substr(0, 32);
    if (s != "linear_attention" && s != "qwen_sparse_attention" && s != "full_attention") {
      return forward_unsupported(
          fmt::format("layer type \"{}\": the pass implements linear_attention and "
                      "qwen_sparse_attention (full_attention as sparse)",
                      s));
    }
    c.attention.push_back(s != "linear_attention");
    c.layer_types.push_back(s);
  }
  return ok_status();
}

Status read_dims(const Json& t, Q38ForwardConfig& c) {
  struct Key {
    const char* key;
    std::uint64_t* out;
    std::optional<std::uint64_t> def;
  };
  const Key keys[] = {
      {"hidden_size", &c.hidden, {}},
      {"num_hidden_layers", &c.layers, {}},
      {"vocab_size", &c.vocab, {}},
      {"eos_token_id", &c.eos, {}},
      {"hc_count", &c.hc, 4},
      {"hc_lowrank", &c.hc_rank, 320},
      {"num_attention_heads", &c.heads, {}},
      {"num_key_value_heads", &c.kv_heads, {}},
      {"head_dim", &c.head_dim, {}},
      {"indexer_n_heads", &c.idx_heads, {}},
      {"indexer_head_dim", &c.idx_dim, {}},
      {"indexer_budget", &c.idx_budget, {}},
      {"indexer_compress_ratio", &c.idx_ratio, {}},
      {"num_experts", &c.experts, {}},
      {"num_experts_per_tok", &c.topk, {}},
      {"moe_intermediate_size", &c.inter, {}},
      {"shared_expert_intermediate_size", &c.shared_inter, {}},
      {"linear_num_key_heads", &c.dn_key_heads, {}},
      {"linear_num_value_heads", &c.dn_value_heads, {}},
      {"linear_key_head_dim", &c.dn_key_dim, {}},
      {"linear_value_head_dim", &c.dn_value_dim, {}},
      {"linear_conv_kernel_dim", &c.dn_kernel, {}},
      {"ple_conv_kernel_size", &c.ple_kernel, 4},
      {"heads_per_ngram", &c.heads_per_ngram, 8},
      {"split_ngram_parts", &c.ngram_parts, 1},
  };
  for (const Key& k : keys) {
    QR_ASSIGN_OR_RETURN(v, integer(t, k.key, k.def));
    *k.out = v;
  }
  QR_ASSIGN_OR_RETURN(ple_dim, integer(t, "ple_embed_dim", c.hidden));
  c.ple_dim = ple_dim;
  const Json ple = {{"ple_layer_ids", t["ple_layer_ids"][0]}};
  QR_ASSIGN_OR_RETURN(ple_one_based, integer(ple, "ple_layer_ids", {}));
  if (ple_one_based == 0 || ple_one_based > c.layers) {
    return forward_config_error(
        fmt::format("ple_layer_ids [{}] is outside layers 1..{}", ple_one_based, c.layers));
  }
  c.ple_layer = ple_one_based - 1;
  if (present(t, "norm_topk_prob")) {
    if (!t["norm_topk_prob"].is_boolean())
      return forward_config_error("norm_topk_prob must be boolean");
    c.norm_topk = t["norm_topk_prob"].get<bool>();
  }
  return ok_status();
}

Status read_rope(const Json& t, Q38ForwardConfig& c) {
  const bool params = present(t, "rope_parameters") && t["rope_parameters"].is_object();
  const Json& r = params ? t["rope_parameters"] : t;
  QR_ASSIGN_OR_RETURN(theta, config_number(r, "rope_theta", 10000, NumberRange::kPositive));
  QR_ASSIGN_OR_RETURN(outer,
                      config_number(t, "partial_rotary_factor", 1.0, NumberRange::kPositive));
  QR_ASSIGN_OR_RETURN(partial,
                      config_number(r, "partial_rotary_factor", outer, NumberRange::kPositive));
  QR_ASSIGN_OR_RETURN(eps, config_number(t, "rms_norm_eps", 1e-6, NumberRange::kPositive));
  c.theta = theta;
  c.eps = eps;
  // Python int(): truncation, as Qwen4ExpTextConfig derives it.
  c.rotary_dim = static_cast<std::uint64_t>(static_cast<double>(c.head_dim) * partial);
  return ok_status();
}

// q38_validate_cfg's rules.
Status validate(const Q38ForwardConfig& c) {
  const auto need = [](bool ok, const std::string& what) {
    return ok ? ok_status() : forward_config_error(what);
  };
  QR_TRY(need(c.hidden > 0 && c.layers > 0 && c.layers <= kMaxLayers && c.vocab > 0,
              "hidden_size, num_hidden_layers (<= 512) and vocab_size must be positive"));
  QR_TRY(need(c.eos < c.vocab, fmt::format("eos_token_id {} >= vocab_size", c.eos)));
  QR_TRY(
      need(c.hc > 1 && c.hc <= kMaxHc && c.hc_rank > 0, "hc_count must be 2..16, hc_lowrank > 0"));
  QR_TRY(need(c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0,
              "num_attention_heads must be a positive multiple of num_key_value_heads"));
  QR_TRY(need(
      c.head_dim > 0 && c.rotary_dim > 0 && c.rotary_dim % 2 == 0 && c.rotary_dim <= c.head_dim,
      fmt::format("rotary dim {} must be even, positive, <= head_dim", c.rotary_dim)));
  QR_TRY(need(c.idx_heads > 0 && c.idx_dim >= c.rotary_dim,
              "indexer_n_heads must be positive and indexer_head_dim >= the rotary dim"));
  QR_TRY(need(c.idx_ratio > 0 && c.idx_budget > 0 && c.idx_budget % c.idx_ratio == 0,
              "indexer_budget must be a positive multiple of indexer_compress_ratio"));
  QR_TRY(need(c.experts > 0 && c.experts <= kMaxExperts && c.topk > 0 && c.topk <= kMaxTopK &&
                  c.topk <= c.experts && c.inter > 0 && c.shared_inter > 0,
              "num_experts (<= 1024), num_experts_per_tok (<= 256, <= experts) and the MoE "
              "widths must be positive"));
  QR_TRY(need(c.dn_key_heads > 0 && c.dn_value_heads % c.dn_key_heads == 0 &&
                  c.dn_value_heads > 0 && c.dn_key_dim > 0 && c.dn_value_dim > 0 &&
                  c.dn_value_dim <= kMaxHeadWidth && c.dn_kernel >= 2,
              "linear attention heads / dims / conv kernel invalid"));
  QR_TRY(need(c.heads_per_ngram > 0 && c.ngram_heads() <= kMaxNgramHeads && c.ple_dim > 0 &&
                  c.ple_dim % c.ngram_heads() == 0 && c.ngram_dim() <= kMaxHeadWidth &&
                  c.ple_kernel >= 2,
              "ple_embed_dim must split into 2 x heads_per_ngram (<= 64) heads of <= 512"));
  return need(c.ngram_parts > 0 && c.ngram_parts <= 512, "split_ngram_parts must be 1..512");
}

}  // namespace

Result<Q38ForwardConfig> load_q38_forward_config(const std::string& dir) {
  QR_ASSIGN_OR_RETURN(f, read_model_config(dir));
  auto in_file = [&](Error e) { return std::move(e.in_file(f.path)); };
  const Json& root = f.root;
  const Json& t = f.text();
  Q38ForwardConfig c;
  c.model_type = f.model_type;
  // Every variant is refused here, from config.json alone, before any weight is read.
  if (Status s = check_variants(t); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_dims(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_layer_types(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = read_rope(t, c); !s.ok()) return in_file(std::move(s.error()));
  if (Status s = validate(c); !s.ok()) return in_file(std::move(s.error()));
  const Json* q = root.contains("quantization_config") ? &root["quantization_config"]
                  : t.contains("quantization_config")  ? &t["quantization_config"]
                                                       : nullptr;
  c.fp8_quantization =
      q && q->is_object() && q->contains("quant_method") && (*q)["quant_method"] == Json("fp8");
  return c;
}

}  // namespace qrepack::model
