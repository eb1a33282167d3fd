// config.json of the GQA decoder families, read for the forward pass (transformers' config
// classes of each model_type: keys, defaults, and the text_config a multimodal release nests).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "model/config_keys.h"
#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/model/decoder_forward.h"
#include "qrepack/model/glm_forward.h"

namespace qrepack {
namespace {

using Json = nlohmann::json;
using model::config_number;
using model::forward_config_error;
using model::forward_unsupported;
using model::NumberRange;
using model::present;

struct ArchName {
  std::string_view model_type;
  DecoderArch arch;
};
constexpr ArchName kArchs[] = {
    {"llama", DecoderArch::kLlama},           {"qwen3", DecoderArch::kQwen3},
    {"qwen3_moe", DecoderArch::kQwen3Moe},    {"olmoe", DecoderArch::kOlmoe},
    {"qwen3_5_moe", DecoderArch::kQwen35Moe}, {"qwen3_5_moe_text", DecoderArch::kQwen35Moe},
};

// A dimension: a positive integer <= kMaxDim; `fallback` when absent (0: required).
Result<std::uint64_t> dim(const Json& j, const char* key, std::uint64_t fallback = 0) {
  if (!present(j, key)) {
    if (fallback == 0) return forward_config_error(fmt::format("config.json lacks \"{}\"", key));
    return fallback;
  }
  const Json& v = j[key];
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 || v.get<std::uint64_t>() > kMaxDim) {
    return forward_config_error(
        fmt::format("\"{}\" must be a positive integer <= {}, got {}", key, kMaxDim, v.dump()));
  }
  return v.get<std::uint64_t>();
}

Result<bool> flag(const Json& j, const char* key, bool fallback) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean())
    return forward_config_error(fmt::format("\"{}\" must be true or false", key));
  return j[key].get<bool>();
}

Result<std::string> text(const Json& j, const char* key, std::string fallback) {
  if (!present(j, key)) return fallback;
  if (!j[key].is_string() || j[key].get_ref<const std::string&>().size() > 64) {
    return forward_config_error(fmt::format("\"{}\" must be a short string", key));
  }
  return j[key].get<std::string>();
}

// The text model's keys: text_config's when the top level wraps one.
Json text_model(const Json& j) {
  if (!j.contains("text_config") || !j["text_config"].is_object()) return j;
  Json out = j["text_config"];
  if (!out.contains("model_type") && j.contains("model_type")) out["model_type"] = j["model_type"];
  if (!out.contains("tie_word_embeddings") && j.contains("tie_word_embeddings")) {
    out["tie_word_embeddings"] = j["tie_word_embeddings"];
  }
  return out;
}

// rope_theta, rope type and partial rotary: legacy top-level keys and rope_scaling, or
// rope_parameters (transformers >= 4.56) which may hold all of them.
Status read_rope(const Json& j, DecoderConfig& c) {
  QR_ASSIGN_OR_RETURN(theta,
                      config_number(j, "rope_theta", c.rope_theta, NumberRange::kNonNegative));
  QR_ASSIGN_OR_RETURN(partial,
                      config_number(j, "partial_rotary_factor", 1.0, NumberRange::kNonNegative));
  std::string type = "default";
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!present(j, key)) continue;
    const Json& r = j[key];
    if (!r.is_object()) return forward_config_error(fmt::format("\"{}\" must be an object", key));
    QR_ASSIGN_OR_RETURN(t1, text(r, "type", type));
    QR_ASSIGN_OR_RETURN(t2, text(r, "rope_type", t1));
    type = t2;
    QR_ASSIGN_OR_RETURN(th, config_number(r, "rope_theta", theta, NumberRange::kNonNegative));
    theta = th;
    QR_ASSIGN_OR_RETURN(
        pf, config_number(r, "partial_rotary_factor", partial, NumberRange::kNonNegative));
    partial = pf;
    if (type == "llama3") {
      QR_ASSIGN_OR_RETURN(f, config_number(r, "factor", 0, NumberRange::kNonNegative));
      QR_ASSIGN_OR_RETURN(lo, config_number(r, "low_freq_factor", 0, NumberRange::kNonNegative));
      QR_ASSIGN_OR_RETURN(hi, config_number(r, "high_freq_factor", 0, NumberRange::kNonNegative));
      QR_ASSIGN_OR_RETURN(
          orig, config_number(r, "original_max_position_embeddings", 0, NumberRange::kNonNegative));
      if (f <= 0 || lo <= 0 || hi <= lo || orig <= 0) {
        return forward_config_error(
            "rope_scaling \"llama3\" needs factor, low_freq_factor < high_freq_factor and "
            "original_max_position_embeddings, all positive");
      }
      c.llama3_factor = f, c.llama3_low = lo, c.llama3_high = hi, c.llama3_original = orig;
    }
  }
  if (type != "default" && type != "llama3") {
    return forward_unsupported(fmt::format(
        "rope type \"{}\": the forward pass implements \"default\" and \"llama3\"", type));
  }
  if (theta <= 0) return forward_config_error("rope_theta must be positive");
  if (partial <= 0 || partial > 1) {
    return forward_config_error(fmt::format("partial_rotary_factor {} is not in (0, 1]", partial));
  }
  c.rope_theta = theta;
  c.rotary_dim = static_cast<std::uint64_t>(static_cast<double>(c.head_dim) * partial);
  if (c.rotary_dim == 0 || c.rotary_dim % 2 != 0 || c.rotary_dim > kMaxRopeDim) {
    return forward_unsupported(
        fmt::format("rotary dimension {} (head_dim {} x partial_rotary_factor {}) "
                    "must be even, positive and <= {}",
                    c.rotary_dim, c.head_dim, partial, kMaxRopeDim));
  }
  return ok_status();
}

Status read_attention(const Json& j, DecoderConfig& c) {
  QR_ASSIGN_OR_RETURN(v, dim(j, "vocab_size"));
  QR_ASSIGN_OR_RETURN(h, dim(j, "hidden_size"));
  QR_ASSIGN_OR_RETURN(l, dim(j, "num_hidden_layers"));
  QR_ASSIGN_OR_RETURN(nh, dim(j, "num_attention_heads"));
  QR_ASSIGN_OR_RETURN(kv, dim(j, "num_key_value_heads", nh));
  QR_ASSIGN_OR_RETURN(hd, dim(j, "head_dim", h / nh == 0 ? 1 : h / nh));
  if (v > 0xFFFFFFFFull) return forward_config_error("vocab_size must fit a 32-bit token id");
  if (nh % kv != 0) {
    return forward_config_error(
        fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}", nh, kv));
  }
  c.vocab_size = v, c.hidden_size = h, c.num_layers = l;
  c.heads = nh, c.kv_heads = kv, c.head_dim = hd;
  QR_ASSIGN_OR_RETURN(eps,
                      config_number(j, "rms_norm_eps", c.rms_norm_eps, NumberRange::kNonNegative));
  QR_ASSIGN_OR_RETURN(bias, flag(j, "attention_bias", false));
  QR_ASSIGN_OR_RETURN(tie, flag(j, "tie_word_embeddings", false));
  QR_ASSIGN_OR_RETURN(clip, config_number(j, "clip_qkv", 0, NumberRange::kNonNegative));
  c.rms_norm_eps = eps, c.attention_bias = bias, c.tie_word_embeddings = tie, c.clip_qkv = clip;
  if (present(j, "mlp_bias") && j["mlp_bias"] == true) {
    return forward_unsupported("mlp_bias: the forward pass implements bias-free MLPs");
  }
  return read_rope(j, c);
}

// Which layers route to experts: qwen3_moe's decoder_sparse_step and mlp_only_layers (also
// read for the hybrid); OLMoE's every layer.
Status read_moe_layers(const Json& j, DecoderConfig& c) {
  c.moe_layer.assign(c.num_layers, c.experts > 0);
  if (c.experts == 0 || c.arch == DecoderArch::kOlmoe) return ok_status();
  QR_ASSIGN_OR_RETURN(step, dim(j, "decoder_sparse_step", 1));
  for (std::uint64_t l = 0; l < c.num_layers; ++l) c.moe_layer[l] = (l + 1) % step == 0;
  if (present(j, "mlp_only_layers")) {
    const Json& a = j["mlp_only_layers"];
    if (!a.is_array() || a.size() > c.num_layers) {
      return forward_config_error("\"mlp_only_layers\" must be a list of layer indices");
    }
    for (const Json& x : a) {
      if (!x.is_number_unsigned() || x.get<std::uint64_t>() >= c.num_layers) {
        return forward_config_error(
            fmt::format("\"mlp_only_layers\" holds {}, not a layer", x.dump()));
      }
      c.moe_layer[x.get<std::uint64_t>()] = false;
    }
  }
  if (std::find(c.moe_layer.begin(), c.moe_layer.end(), false) != c.moe_layer.end()) {
    QR_ASSIGN_OR_RETURN(inter, dim(j, "intermediate_size"));
    c.intermediate_size = inter;
  }
  return ok_status();
}

Status read_experts(const Json& j, DecoderConfig& c) {
  QR_ASSIGN_OR_RETURN(e, dim(j, "num_experts"));
  QR_ASSIGN_OR_RETURN(k, dim(j, "num_experts_per_tok"));
  const char* inter_key =
      c.arch == DecoderArch::kOlmoe ? "intermediate_size" : "moe_intermediate_size";
  QR_ASSIGN_OR_RETURN(mi, dim(j, inter_key));
  if (k > e) {
    return forward_config_error(fmt::format("num_experts_per_tok {} exceeds num_experts {}", k, e));
  }
  c.experts = e, c.experts_per_tok = k, c.moe_intermediate_size = mi;
  // Qwen3.5 / 3.6's router (Qwen3_5MoeTopKRouter) always renormalizes its top-k weights.
  QR_ASSIGN_OR_RETURN(norm, flag(j, "norm_topk_prob", false));
  c.norm_topk_prob = norm || c.arch == DecoderArch::kQwen35Moe;
  if (c.arch == DecoderArch::kQwen35Moe && present(j, "shared_expert_intermediate_size")) {
    QR_ASSIGN_OR_RETURN(si, dim(j, "shared_expert_intermediate_size"));
    c.shared_expert_intermediate_size = si;
  }
  return read_moe_layers(j, c);
}

// layer_types, or transformers' fallback: every full_attention_interval-th layer attends.
Status read_layer_types(const Json& j, DecoderConfig& c) {
  c.linear_layer.assign(c.num_layers, false);
  if (!present(j, "layer_types")) {
    QR_ASSIGN_OR_RETURN(every, dim(j, "full_attention_interval", 4));
    for (std::uint64_t l = 0; l < c.num_layers; ++l) c.linear_layer[l] = (l + 1) % every != 0;
    return ok_status();
  }
  const Json& a = j["layer_types"];
  if (!a.is_array() || a.size() != c.num_layers) {
    return forward_config_error(
        fmt::format("\"layer_types\" must list the {} layers' types", c.num_layers));
  }
  for (std::uint64_t l = 0; l < c.num_layers; ++l) {
    if (a[l] == "linear_attention") {
      c.linear_layer[l] = true;
    } else if (a[l] != "full_attention") {
      return forward_unsupported(
          fmt::format("layer {} has type {}: the forward pass implements "
                      "linear_attention and full_attention",
                      l, a[l].dump().substr(0, 64)));
    }
  }
  return ok_status();
}

Status read_deltanet(const Json& j, DecoderConfig& c) {
  QR_TRY(read_layer_types(j, c));
  QR_ASSIGN_OR_RETURN(kernel, dim(j, "linear_conv_kernel_dim"));
  QR_ASSIGN_OR_RETURN(kh, dim(j, "linear_num_key_heads"));
  QR_ASSIGN_OR_RETURN(kd, dim(j, "linear_key_head_dim"));
  QR_ASSIGN_OR_RETURN(vh, dim(j, "linear_num_value_heads"));
  QR_ASSIGN_OR_RETURN(vd, dim(j, "linear_value_head_dim"));
  if (vh % kh != 0) {
    return forward_unsupported(fmt::format(
        "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", vh, kh));
  }
  if (kernel > 64 || kd > 4096 || vd > 4096) {
    return forward_unsupported(
        fmt::format("DeltaNet conv kernel {} / head dims {} x {} over the pass's caps (64, 4096)",
                    kernel, kd, vd));
  }
  c.conv_kernel = kernel, c.key_heads = kh, c.key_head_dim = kd, c.value_heads = vh;
  c.value_head_dim = vd;
  return ok_status();
}

Result<DecoderConfig> decoder_config_from_json(const Json& top) {
  if (!top.is_object()) return forward_config_error("config.json is not a JSON object");
  const Json j = text_model(top);
  QR_ASSIGN_OR_RETURN(type, text(j, "model_type", ""));
  DecoderConfig c;
  c.model_type = type;
  const auto* a = std::find_if(std::begin(kArchs), std::end(kArchs),
                               [&](const ArchName& x) { return x.model_type == type; });
  if (a == std::end(kArchs)) {
    return forward_unsupported(fmt::format("model_type \"{}\" has no decoder forward pass", type));
  }
  c.arch = a->arch;
  QR_TRY(read_attention(j, c));
  switch (c.arch) {
    case DecoderArch::kLlama:
    case DecoderArch::kQwen3: {
      QR_ASSIGN_OR_RETURN(inter, dim(j, "intermediate_size"));
      c.intermediate_size = inter;
      c.moe_layer.assign(c.num_layers, false);
      break;
    }
    case DecoderArch::kQwen3Moe:
    case DecoderArch::kOlmoe:
      QR_TRY(read_experts(j, c));
      break;
    case DecoderArch::kQwen35Moe: {
      QR_TRY(read_experts(j, c));
      QR_TRY(read_deltanet(j, c));
      QR_ASSIGN_OR_RETURN(gate, flag(j, "attn_output_gate", true));
      c.attn_output_gate = gate;
      c.zero_centered_norms = true;
      break;
    }
  }
  if (c.linear_layer.empty()) c.linear_layer.assign(c.num_layers, false);
  c.qk_norm = c.arch == DecoderArch::kLlama   ? DecoderConfig::QkNorm::kNone
              : c.arch == DecoderArch::kOlmoe ? DecoderConfig::QkNorm::kWhole
                                              : DecoderConfig::QkNorm::kPerHead;
  return c;
}

}  // namespace

bool is_decoder_model_type(const std::string& model_type) {
  return std::any_of(std::begin(kArchs), std::end(kArchs),
                     [&](const ArchName& a) { return a.model_type == model_type; });
}

Result<DecoderConfig> load_decoder_config(const std::string& dir) {
  const std::string p = (std::filesystem::path(dir) / "config.json").string();
  QR_ASSIGN_OR_RETURN(body, read_small_file(p, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(body, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p));
  auto c = decoder_config_from_json(*j);
  if (!c.ok()) return std::move(c.error().in_file(p));
  return c;
}

}  // namespace qrepack
