#include "checkpoint/mlx_quantization.h"

#include <fmt/format.h>

#include <filesystem>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack {
namespace {

Error block_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("mlx_affine.config");
}

// {"group_size": G, "bits": B}: both unsigned integers (ranges checked by the weight's claim).
Result<MlxParams> read_params(const nlohmann::json& v, std::string_view where) {
  const auto number = [&](const char* key) -> Result<std::uint64_t> {
    if (!v.contains(key) || !v[key].is_number_unsigned()) {
      return block_error(
          fmt::format("quantization{} needs \"{}\" as a non-negative integer", where, key));
    }
    return v[key].get<std::uint64_t>();
  };
  QR_ASSIGN_OR_RETURN(bits, number("bits"));
  QR_ASSIGN_OR_RETURN(group, number("group_size"));
  return MlxParams{bits, group};
}

const nlohmann::json* mlx_block(const nlohmann::json& config) {
  for (const char* key : {"quantization", "quantization_config"}) {
    if (!config.is_object() || !config.contains(key)) continue;
    const auto& q = config[key];
    // GPTQ / AWQ blocks have bits and group_size too, but name their producer (quant_method);
    // mlx-lm's never does.
    if (q.is_object() && q.contains("bits") && q.contains("group_size") &&
        !q.contains("quant_method")) {
      return &q;
    }
  }
  return nullptr;
}

}  // namespace

std::optional<MlxParams> MlxQuantization::for_module(std::string_view path) const {
  const auto it = modules.find(path);
  return it == modules.end() ? std::optional(defaults) : it->second;
}

Result<std::optional<MlxQuantization>> mlx_quantization_from_json(const nlohmann::json& config) {
  const nlohmann::json* q = mlx_block(config);
  if (!q) return std::optional<MlxQuantization>{};
  MlxQuantization m;
  QR_ASSIGN_OR_RETURN(defaults, read_params(*q, ""));
  m.defaults = defaults;
  for (const auto& [key, v] : q->items()) {
    if (key == "bits" || key == "group_size") continue;
    if (key == "mode") {
      if (!v.is_string()) return block_error("quantization.mode is not a string");
      m.mode = v.get<std::string>();
    } else if (v.is_boolean()) {
      // true: the defaults (mlx-lm's predicate said "quantize"); false: left in float.
      m.modules.emplace(key, v.get<bool>() ? std::optional(m.defaults) : std::nullopt);
    } else if (v.is_object()) {
      QR_ASSIGN_OR_RETURN(p, read_params(v, fmt::format(".\"{}\"", key.substr(0, 200))));
      m.modules.emplace(key, p);
    }
    // Other scalar keys (quant_method and the like written by converters) say nothing here.
  }
  return std::optional(std::move(m));
}

Result<std::optional<MlxQuantization>> load_mlx_quantization(const std::string& dir) {
  const std::string p = (std::filesystem::path(dir) / "config.json").string();
  if (path_kind(p) == PathKind::kMissing) return std::optional<MlxQuantization>{};
  QR_ASSIGN_OR_RETURN(text, read_small_file(p, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto j = parse_json_strict(text, ErrorKind::kInvalidConfig);
  if (!j.ok()) return std::move(j.error().in_file(p));
  auto m = mlx_quantization_from_json(*j);
  if (!m.ok()) return std::move(m.error().in_file(p));
  return m;
}

}  // namespace qrepack
