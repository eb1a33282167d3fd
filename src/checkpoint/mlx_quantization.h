// How an MLX checkpoint says its weights are quantized: config.json's "quantization" (mlx-lm
// also writes it again as "quantization_config") holds the default {"group_size", "bits"},
// optionally "mode" ("affine" is the one read), and per-module entries keyed by the module's
// path ("model.layers.0.mlp.gate": {"group_size": 64, "bits": 8}, or false for a module left
// in float). The tensors themselves do not say: bits and group size always come from here.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack {

struct MlxParams {
  std::uint64_t bits = 0;
  std::uint64_t group = 0;
};

struct MlxQuantization {
  MlxParams defaults;
  std::string mode = "affine";
  /// Per-module entries; nullopt for a module the config leaves unquantized (false).
  std::map<std::string, std::optional<MlxParams>, std::less<>> modules;

  /// The parameters of module `path` (a weight's name without ".weight"): its own entry, else
  /// the defaults; nullopt when the config leaves it unquantized.
  std::optional<MlxParams> for_module(std::string_view path) const;
};

/// The MLX quantization block of a parsed config.json: nullopt when it has none (a block without
/// "bits" and "group_size", or one naming a quant_method, belongs to another producer). A
/// malformed block is an error (rule mlx_affine.config); the values' ranges are checked where
/// a weight uses them.
Result<std::optional<MlxQuantization>> mlx_quantization_from_json(const nlohmann::json& config);

/// Reads `dir`/config.json: nullopt when there is none or it has no MLX block.
Result<std::optional<MlxQuantization>> load_mlx_quantization(const std::string& dir);

}  // namespace qrepack
