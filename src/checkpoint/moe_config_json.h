// config.json as JSON values: the writer the fixtures use and the strict parser behind
// load_moe_config (private: the library links nlohmann_json privately).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "qrepack/checkpoint/moe_config.h"
#include "qrepack/core/error.h"

namespace qrepack {

/// config.json text for `c` in its family's keys; `quantization_config` (an object or null)
/// is included as given.
std::string moe_config_to_json(const MoeConfig& c, const nlohmann::json& quantization_config);
/// The DeepSeek-V3 FP8 quantization_config for `c`'s block size.
nlohmann::json fp8_block_quantization_config(const MoeConfig& c);

/// Parses and validates config.json by its family (model_type; a `text_config` object is
/// flattened over the top level first, as multimodal MiniMax configs nest the text model): all
/// of the family's fields present, positive where a shape needs them, layer and top-k bounds.
/// An unknown model_type is an error naming the known families. Missing weight_block_size with
/// quant_method "fp8" defaults to 128x128.
Result<MoeConfig> moe_config_from_json(const nlohmann::json& j);

}  // namespace qrepack
