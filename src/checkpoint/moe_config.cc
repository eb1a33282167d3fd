#include "qrepack/checkpoint/moe_config.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

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
    {"q_lora_rank", &MoeConfig::q_lora_rank, true},
    {"kv_lora_rank", &MoeConfig::kv_lora_rank, true},
    {"qk_nope_head_dim", &MoeConfig::qk_nope_head_dim, true},
    {"qk_rope_head_dim", &MoeConfig::qk_rope_head_dim, true},
    {"v_head_dim", &MoeConfig::v_head_dim, true},
};

Error config_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("config.moe");
}

}  // namespace

std::string moe_config_to_json(const MoeConfig& c, bool fp8) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GlmMoeDsaForCausalLM"};
  j["model_type"] = c.model_type;
  for (const Field& f : kFields) j[f.name] = c.*(f.member);
  j["num_key_value_heads"] = c.num_attention_heads;
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["norm_topk_prob"] = true;
  j["routed_scaling_factor"] = 2.5;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  j["tie_word_embeddings"] = false;
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
    const auto& v = j[f.name];
    if (!v.is_number_unsigned() || v.get<std::uint64_t>() > kMaxDim ||
        (f.positive && v.get<std::uint64_t>() == 0)) {
      return config_error(fmt::format("\"{}\" must be {} integer <= {}, got {}", f.name,
                                      f.positive ? "a positive" : "a non-negative", kMaxDim,
                                      v.dump()));
    }
    c.*(f.member) = v.get<std::uint64_t>();
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return config_error("config.json lacks " + list);
  }
  if (j.contains("model_type") && j["model_type"].is_string()) c.model_type = j["model_type"];
  if (j.contains("rms_norm_eps") && j["rms_norm_eps"].is_number())
    c.rms_norm_eps = j["rms_norm_eps"];
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
