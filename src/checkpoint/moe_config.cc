#include "qrepack/checkpoint/moe_config.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "io/fs_util.h"
#include "io/json_strict.h"
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

}  // namespace

std::string moe_config_to_json(const MoeConfig& c, bool fp8) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GlmMoeDsaForCausalLM"};
  j["model_type"] = c.model_type;
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
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  if (c.index_n_heads > 0) {
    j["index_topk"] = c.index_topk;
    j["index_n_heads"] = c.index_n_heads;
    j["index_head_dim"] = c.index_head_dim;
  }
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "bfloat16";
  if (fp8) {
    j["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {c.block_rows, c.block_cols}}};
  }
  return j.dump(2) + "\n";
}

Result<MoeConfig> moe_config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return config_error("config.json is not a JSON object");
  MoeConfig c;
  std::vector<std::string> missing;
  for (const Field& f : kFields) {
    if (!j.contains(f.name)) {
      missing.emplace_back(f.name);
      continue;
    }
    QR_TRY(read_dim(j[f.name], f, c));
  }
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
  const auto weights = glm_moe_weight_count(c);
  if (!weights || *weights > kMaxModelWeights) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("config.json describes {} weights (num_hidden_layers {} x "
                             "n_routed_experts {}), over the cap of {}",
                             weights ? fmt::format("{}", *weights) : std::string("2^64+"),
                             c.num_hidden_layers, c.n_routed_experts, kMaxModelWeights))
        .with_rule("config.max_weights");
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    return config_error(fmt::format("num_experts_per_tok {} exceeds n_routed_experts {}",
                                    c.num_experts_per_tok, c.n_routed_experts));
  }
  if (j.contains("quantization_config")) {
    const auto& q = j["quantization_config"];
    if (!q.is_object()) return config_error("quantization_config is not an object");
    const bool fp8 = q.contains("quant_method") && q["quant_method"] == "fp8";
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
  return c;
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
