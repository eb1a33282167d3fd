#include "qrepack/checkpoint/moe_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "checkpoint/moe_config_json.h"
#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/family.h"
#include "qrepack/checkpoint/glm_moe.h"

namespace qrepack {
namespace {

struct Field {
  const char* name;
  std::uint64_t MoeConfig::*member;
  bool positive;  ///< must be > 0 (it sizes a tensor dimension)
};

// One table drives both directions.
constexpr Field kFields[] = {
    {"vocab_size", &MoeConfig::vocab_size, true},
    {"hidden_size", &MoeConfig::hidden_size, true},
    {"intermediate_size", &MoeConfig::intermediate_size, true},
    {"moe_intermediate_size", &MoeConfig::moe_intermediate_size, true},
    {"num_hidden_layers", &MoeConfig::num_hidden_layers, true},
    {"first_k_dense_replace", &MoeConfig::first_k_dense_replace, false},
    {"num_attention_heads", &MoeConfig::num_attention_heads, true},
    {"n_routed_experts", &MoeConfig::n_routed_experts, true},
    {"num_experts_per_tok", &MoeConfig::num_experts_per_tok, true},
    {"n_shared_experts", &MoeConfig::n_shared_experts, false},
    {"kv_lora_rank", &MoeConfig::kv_lora_rank, true},
    {"qk_nope_head_dim", &MoeConfig::qk_nope_head_dim, true},
    {"qk_rope_head_dim", &MoeConfig::qk_rope_head_dim, true},
    {"v_head_dim", &MoeConfig::v_head_dim, true},
};

// Fields a config may omit (the model then has no indexer, no MTP layer).
constexpr Field kOptionalFields[] = {
    {"index_topk", &MoeConfig::index_topk, false},
    {"index_n_heads", &MoeConfig::index_n_heads, false},
    {"index_head_dim", &MoeConfig::index_head_dim, false},
    {"num_nextn_predict_layers", &MoeConfig::num_nextn_predict_layers, false},
    {"n_group", &MoeConfig::n_group, true},
    {"topk_group", &MoeConfig::topk_group, true},
};

Error config_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("config.moe");
}

Status read_dim(const nlohmann::json& v, const Field& f, MoeConfig& c) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > kMaxDim ||
      (f.positive && v.get<std::uint64_t>() == 0)) {
    return config_error(fmt::format("\"{}\" must be {} integer <= {}, got {}", f.name,
                                    f.positive ? "a positive" : "a non-negative", kMaxDim,
                                    v.dump()));
  }
  c.*(f.member) = v.get<std::uint64_t>();
  return ok_status();
}

template <typename T>
Status read_optional(const nlohmann::json& j, const char* key, T& out) {
  if (!j.contains(key) || j[key].is_null()) return ok_status();
  const auto& v = j[key];
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return config_error(fmt::format("\"{}\" must be true or false", key));
    out = v.get<bool>();
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
      return config_error(
          fmt::format("\"{}\" must be a non-negative number, got {}", key, v.dump()));
    }
    out = v.get<double>();
  } else {
    if (!v.is_string() || v.get_ref<const std::string&>().size() > 64) {
      return config_error(fmt::format("\"{}\" must be a short string", key));
    }
    out = v.get<std::string>();
  }
  return ok_status();
}

// rope_parameters (transformers >= 4.56) or the legacy top-level rope_theta / rope_scaling.
Status read_rope(const nlohmann::json& j, MoeConfig& c) {
  QR_TRY(read_optional(j, "rope_theta", c.rope_theta));
  QR_TRY(read_optional(j, "rope_interleave", c.rope_interleave));
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const auto& r = j[key];
    if (!r.is_object()) return config_error(fmt::format("\"{}\" must be an object", key));
    QR_TRY(read_optional(r, "type", c.rope_type));
    QR_TRY(read_optional(r, "rope_type", c.rope_type));
    QR_TRY(read_optional(r, "rope_theta", c.rope_theta));
  }
  return ok_status();
}

Status read_forward_fields(const nlohmann::json& j, MoeConfig& c) {
  for (const Field& f : kOptionalFields) {
    if (j.contains(f.name) && !j[f.name].is_null()) QR_TRY(read_dim(j[f.name], f, c));
  }
  QR_TRY(read_optional(j, "model_type", c.model_type));
  QR_TRY(read_optional(j, "rms_norm_eps", c.rms_norm_eps));
  QR_TRY(read_optional(j, "norm_topk_prob", c.norm_topk_prob));
  QR_TRY(read_optional(j, "routed_scaling_factor", c.routed_scaling_factor));
  QR_TRY(read_optional(j, "tie_word_embeddings", c.tie_word_embeddings));
  QR_TRY(read_rope(j, c));
  if (c.num_nextn_predict_layers > 16) {
    return config_error(
        fmt::format("num_nextn_predict_layers {} is over 16", c.num_nextn_predict_layers));
  }
  if (c.index_n_heads > 0 && c.index_head_dim < c.qk_rope_head_dim) {
    return config_error(fmt::format("index_head_dim {} is smaller than qk_rope_head_dim {}",
                                    c.index_head_dim, c.qk_rope_head_dim));
  }
  return ok_status();
}

// The GQA families' keys (transformers' configs of each model_type).
constexpr Field kGqaFields[] = {
    {"vocab_size", &MoeConfig::vocab_size, true},
    {"hidden_size", &MoeConfig::hidden_size, true},
    {"num_hidden_layers", &MoeConfig::num_hidden_layers, true},
    {"num_attention_heads", &MoeConfig::num_attention_heads, true},
};

Status read_mlp_only_layers(const nlohmann::json& j, MoeConfig& c) {
  if (!j.contains("mlp_only_layers") || j["mlp_only_layers"].is_null()) return ok_status();
  const auto& a = j["mlp_only_layers"];
  if (!a.is_array() || a.size() > c.num_hidden_layers) {
    return config_error("\"mlp_only_layers\" must be a list of at most num_hidden_layers indices");
  }
  for (const auto& v : a) {
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= c.num_hidden_layers) {
      return config_error(fmt::format("\"mlp_only_layers\" holds {}, not a layer index", v.dump()));
    }
    c.mlp_only_layers.push_back(v.get<std::uint64_t>());
  }
  std::sort(c.mlp_only_layers.begin(), c.mlp_only_layers.end());
  c.mlp_only_layers.erase(std::unique(c.mlp_only_layers.begin(), c.mlp_only_layers.end()),
                          c.mlp_only_layers.end());
  return ok_status();
}

Status read_family_fields(const nlohmann::json& j, MoeConfig& c,
                          std::vector<std::string>& missing) {
  auto need = [&](const char* key, std::uint64_t MoeConfig::*m) -> Status {
    if (!j.contains(key)) {
      missing.emplace_back(key);
      return ok_status();
    }
    return read_dim(j[key], Field{key, m, true}, c);
  };
  c.n_shared_experts = 0;
  c.first_k_dense_replace = 0;
  c.router_bias = false;
  switch (c.family) {
    case FamilyId::kMiniMax: {
      QR_TRY(need("intermediate_size", &MoeConfig::moe_intermediate_size));
      QR_TRY(need("num_local_experts", &MoeConfig::n_routed_experts));
      QR_TRY(need("num_experts_per_tok", &MoeConfig::num_experts_per_tok));
      c.router_bias = true;
      QR_TRY(read_optional(j, "use_routing_bias", c.router_bias));
      bool qk = true;
      std::string qk_type = "per_layer";
      QR_TRY(read_optional(j, "use_qk_norm", qk));
      QR_TRY(read_optional(j, "qk_norm_type", qk_type));
      if (qk && qk_type != "per_layer") {
        return config_error(fmt::format("qk_norm_type \"{}\" is not per_layer", qk_type));
      }
      c.qk_norm = qk ? QkNorm::kPerLayer : QkNorm::kNone;
      std::uint64_t shared = 0;
      if (j.contains("shared_intermediate_size") && !j["shared_intermediate_size"].is_null()) {
        QR_TRY(read_dim(j["shared_intermediate_size"],
                        Field{"shared_intermediate_size", &MoeConfig::n_shared_experts, false}, c));
        shared = c.n_shared_experts;
        c.n_shared_experts = 0;
      }
      if (shared != 0)
        return config_error(
            "MiniMax shared experts (shared_intermediate_size > 0) are not supported");
      break;
    }
    case FamilyId::kQwen3Moe:
      QR_TRY(need("moe_intermediate_size", &MoeConfig::moe_intermediate_size));
      QR_TRY(need("num_experts", &MoeConfig::n_routed_experts));
      QR_TRY(need("num_experts_per_tok", &MoeConfig::num_experts_per_tok));
      if (j.contains("decoder_sparse_step") && !j["decoder_sparse_step"].is_null()) {
        QR_TRY(read_dim(j["decoder_sparse_step"],
                        Field{"decoder_sparse_step", &MoeConfig::decoder_sparse_step, true}, c));
      }
      QR_TRY(read_mlp_only_layers(j, c));
      QR_TRY(read_optional(j, "attention_bias", c.attention_bias));
      c.qk_norm = QkNorm::kPerHead;
      for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (!is_moe_layer(c, l)) {
          QR_TRY(need("intermediate_size", &MoeConfig::intermediate_size));
          break;
        }
      }
      break;
    default:  // dense
      QR_TRY(need("intermediate_size", &MoeConfig::intermediate_size));
      QR_TRY(read_optional(j, "attention_bias", c.attention_bias));
      if (c.model_type == "qwen2") c.attention_bias = true;  // Qwen2's q/k/v always have one
      if (c.model_type == "qwen3") c.qk_norm = QkNorm::kPerHead;
      c.n_routed_experts = 0;
      c.num_experts_per_tok = 0;
      c.first_k_dense_replace = c.num_hidden_layers;
  }
  return ok_status();
}

// Reads every field of `fields` present in `j`; names the absent ones in `missing`.
template <std::size_t N>
Status read_required(const nlohmann::json& j, const Field (&fields)[N], MoeConfig& c,
                     std::vector<std::string>& missing) {
  for (const Field& f : fields) {
    if (!j.contains(f.name)) {
      missing.emplace_back(f.name);
      continue;
    }
    QR_TRY(read_dim(j[f.name], f, c));
  }
  return ok_status();
}

Status read_gqa(const nlohmann::json& j, MoeConfig& c) {
  std::vector<std::string> missing;
  QR_TRY(read_required(j, kGqaFields, c, missing));
  if (missing.empty()) QR_TRY(read_family_fields(j, c, missing));
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return config_error(fmt::format("config.json ({}) lacks {}", c.model_type, list));
  }
  for (const char* key : {"num_key_value_heads", "head_dim"}) {
    if (j.contains(key) && !j[key].is_null()) {
      QR_TRY(read_dim(
          j[key],
          Field{key, key[0] == 'h' ? &MoeConfig::head_dim : &MoeConfig::num_key_value_heads, true},
          c));
    }
  }
  QR_TRY(read_optional(j, "rms_norm_eps", c.rms_norm_eps));
  QR_TRY(read_optional(j, "norm_topk_prob", c.norm_topk_prob));
  QR_TRY(read_optional(j, "tie_word_embeddings", c.tie_word_embeddings));
  QR_TRY(read_rope(j, c));
  if (c.num_attention_heads % kv_heads(c) != 0) {
    return config_error(
        fmt::format("num_attention_heads {} is not a multiple of "
                    "num_key_value_heads {}",
                    c.num_attention_heads, kv_heads(c)));
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    return config_error(
        fmt::format("hidden_size {} is not a multiple of num_attention_heads {} "
                    "and head_dim is not given",
                    c.hidden_size, c.num_attention_heads));
  }
  return ok_status();
}

Status read_mla(const nlohmann::json& j, MoeConfig& c) {
  std::vector<std::string> missing;
  QR_TRY(read_required(j, kFields, c, missing));
  // q_lora_rank: a positive rank, or null (DeepSeek-V2-Lite style q_proj).
  if (!j.contains("q_lora_rank")) {
    missing.emplace_back("q_lora_rank");
  } else if (!j["q_lora_rank"].is_null()) {
    QR_TRY(read_dim(j["q_lora_rank"], Field{"q_lora_rank", &MoeConfig::q_lora_rank, true}, c));
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return config_error("config.json lacks " + list);
  }
  QR_TRY(read_forward_fields(j, c));
  if (c.first_k_dense_replace > c.num_hidden_layers) {
    return config_error(fmt::format("first_k_dense_replace {} exceeds num_hidden_layers {}",
                                    c.first_k_dense_replace, c.num_hidden_layers));
  }
  return ok_status();
}

Status read_quantization_config(const nlohmann::json& j, MoeConfig& c) {
  if (j.contains("quantization_config")) {
    const auto& q = j["quantization_config"];
    if (!q.is_object()) return config_error("quantization_config is not an object");
    QR_TRY(read_optional(q, "quant_method", c.quant_method));
    QR_TRY(read_optional(q, "quant_algo", c.quant_format));
    QR_TRY(read_optional(q, "format", c.quant_format));
    const bool fp8 = c.quant_method == "fp8";
    if (fp8) {
      c.block_rows = c.block_cols = 128;
      if (q.contains("weight_block_size")) {
        const auto& b = q["weight_block_size"];
        if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() ||
            !b[1].is_number_unsigned() || b[0].get<std::uint64_t>() == 0 ||
            b[1].get<std::uint64_t>() == 0) {
          return config_error(fmt::format(
              "quantization_config.weight_block_size must be [rows, cols], got {}", b.dump()));
        }
        c.block_rows = b[0];
        c.block_cols = b[1];
      }
    }
  }
  return ok_status();
}

Status check_weight_count(const MoeConfig& c) {
  const auto weights = model_weight_count(c);
  if (!weights || *weights > kMaxModelWeights) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("config.json describes {} weights (num_hidden_layers {} x "
                             "experts {}), over the cap of {}",
                             weights ? fmt::format("{}", *weights) : std::string("2^64+"),
                             c.num_hidden_layers, c.n_routed_experts, kMaxModelWeights))
        .with_rule("config.max_weights");
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    return config_error(fmt::format("num_experts_per_tok {} exceeds the {} routed experts",
                                    c.num_experts_per_tok, c.n_routed_experts));
  }
  return ok_status();
}

// A multimodal config nests the text model in text_config: its keys win over the top level's
// (the engine's converter flattens it the same way); model_type stays the top level's when
// that one names a family.
nlohmann::json flatten_text_config(const nlohmann::json& j) {
  if (!j.contains("text_config") || !j["text_config"].is_object()) return j;
  nlohmann::json out = j;
  for (const auto& [k, v] : j["text_config"].items()) {
    if (k == "model_type" && j.contains("model_type") && j["model_type"].is_string() &&
        family_for_model_type(j["model_type"].get_ref<const std::string&>())) {
      continue;
    }
    out[k] = v;
  }
  out.erase("text_config");
  return out;
}

}  // namespace

Result<MoeConfig> moe_config_from_json(const nlohmann::json& raw) {
  if (!raw.is_object()) return config_error("config.json is not a JSON object");
  const nlohmann::json j = flatten_text_config(raw);
  MoeConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    return config_error(fmt::format("config.json has no model_type string; qrepack knows {}",
                                    known_model_types()))
        .with_rule("config.model_type");
  }
  c.model_type = j["model_type"].get<std::string>();
  const Family* fam = family_for_model_type(c.model_type);
  if (!fam) {
    return Error(ErrorKind::kUnsupportedModel,
                 fmt::format("model_type \"{}\" is not a family qrepack knows ({}); pass "
                             "--no-coverage-gate to convert by name rules alone",
                             c.model_type.substr(0, 64), known_model_types()))
        .with_rule("config.model_type");
  }
  c.family = fam->id;
  if (fam->tensors == TensorList::kMla) {
    QR_TRY(read_mla(j, c));
  } else {
    QR_TRY(read_gqa(j, c));
  }
  QR_TRY(read_quantization_config(j, c));
  QR_TRY(check_weight_count(c));
  return c;
}

nlohmann::json fp8_block_quantization_config(const MoeConfig& c) {
  return {{"quant_method", "fp8"},
          {"fmt", "e4m3"},
          {"activation_scheme", "dynamic"},
          {"weight_block_size",
           {c.block_rows ? c.block_rows : 128, c.block_cols ? c.block_cols : 128}}};
}

namespace {

const char* architecture(const MoeConfig& c) {
  switch (c.family) {
    case FamilyId::kGlmMoeDsa:
      return "GlmMoeDsaForCausalLM";
    case FamilyId::kDeepseekV3:
    case FamilyId::kKimiK2:
      return "DeepseekV3ForCausalLM";
    case FamilyId::kMiniMax:
      return "MiniMaxM2ForCausalLM";
    case FamilyId::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case FamilyId::kDense:
      break;
  }
  if (c.model_type == "mistral") return "MistralForCausalLM";
  if (c.model_type == "qwen2") return "Qwen2ForCausalLM";
  if (c.model_type == "qwen3") return "Qwen3ForCausalLM";
  return "LlamaForCausalLM";
}

void gqa_to_json(const MoeConfig& c, nlohmann::ordered_json& j) {
  for (const Field& f : kGqaFields) j[f.name] = c.*(f.member);
  j["num_key_value_heads"] = kv_heads(c);
  j["head_dim"] = attn_head_dim(c);
  switch (c.family) {
    case FamilyId::kMiniMax:
      j["intermediate_size"] = c.moe_intermediate_size;
      j["num_local_experts"] = c.n_routed_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["use_routing_bias"] = c.router_bias;
      j["scoring_func"] = "sigmoid";
      j["use_qk_norm"] = c.qk_norm == QkNorm::kPerLayer;
      j["qk_norm_type"] = "per_layer";
      break;
    case FamilyId::kQwen3Moe:
      j["intermediate_size"] = c.intermediate_size;
      j["moe_intermediate_size"] = c.moe_intermediate_size;
      j["num_experts"] = c.n_routed_experts;
      j["num_experts_per_tok"] = c.num_experts_per_tok;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["attention_bias"] = c.attention_bias;
      break;
    default:
      j["intermediate_size"] = c.intermediate_size;
      if (c.model_type != "qwen2") j["attention_bias"] = c.attention_bias;
  }
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
}

void mla_to_json(const MoeConfig& c, nlohmann::ordered_json& j) {
  for (const Field& f : kFields) j[f.name] = c.*(f.member);
  if (c.q_lora_rank > 0) {
    j["q_lora_rank"] = c.q_lora_rank;
  } else {
    j["q_lora_rank"] = nullptr;
  }
  j["num_key_value_heads"] = c.num_attention_heads;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_parameters"] = {{"rope_type", c.rope_type}, {"rope_theta", c.rope_theta}};
  j["rope_interleave"] = c.rope_interleave;
  j["attention_bias"] = false;
  if (c.index_n_heads > 0) {
    j["index_topk"] = c.index_topk;
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
  }
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
}

}  // namespace

std::string moe_config_to_json(const MoeConfig& c, const nlohmann::json& quantization_config) {
  nlohmann::ordered_json j;
  j["architectures"] = {architecture(c)};
  j["model_type"] = c.model_type;
  const bool mla = family(c.family).tensors == TensorList::kMla;
  if (mla) {
    mla_to_json(c, j);
  } else {
    gqa_to_json(c, j);
  }
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  if (!quantization_config.is_null()) j["quantization_config"] = quantization_config;
  return j.dump(2) + "\n";
}

bool is_moe_layer(const MoeConfig& c, std::uint64_t l) {
  switch (c.family) {
    case FamilyId::kDense:
      return false;
    case FamilyId::kMiniMax:
      return true;
    case FamilyId::kQwen3Moe:
      return c.n_routed_experts > 0 &&
             !std::binary_search(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), l) &&
             (l + 1) % c.decoder_sparse_step == 0;
    default:
      return l >= c.first_k_dense_replace;
  }
}

std::uint64_t moe_layer_count(const MoeConfig& c) {
  std::uint64_t n = 0;
  for (std::uint64_t l = 0; l < c.num_hidden_layers; ++l) n += is_moe_layer(c, l);
  return n;
}

std::uint64_t kv_heads(const MoeConfig& c) {
  return c.num_key_value_heads ? c.num_key_value_heads : c.num_attention_heads;
}

std::uint64_t attn_head_dim(const MoeConfig& c) {
  return c.head_dim ? c.head_dim
                    : (c.num_attention_heads ? c.hidden_size / c.num_attention_heads : 0);
}

Result<std::optional<MoeConfig>> load_moe_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path p = fs::path(dir) / "config.json";
  // Absent: no config (the coverage gate says so). Anything else there must be a readable
  // regular file: a symlink loop or a FIFO named config.json is an error, not "no config".
  if (path_kind(p.string()) == PathKind::kMissing) return std::optional<MoeConfig>{};
  QR_ASSIGN_OR_RETURN(text,
                      read_small_file(p.string(), kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p.string()));
  auto cfg = moe_config_from_json(*j);
  if (!cfg.ok()) return std::move(cfg.error().in_file(p.string()));
  return std::optional<MoeConfig>(std::move(cfg).value());
}

}  // namespace qrepack
