// What every forward pass's config reader shares: config.json read strictly and bounded (the
// text model's keys under text_config when the file nests them), the two rules a config is
// refused under, and the checked readers of numbers and counts.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "qrepack/core/error.h"

namespace qrepack::model {

/// A variant the pass does not implement (rule forward.support).
Error forward_unsupported(std::string message);
/// A value the pass cannot use: wrong type, out of range, missing (rule forward.config).
Error forward_config_error(std::string message);

/// Whether `j` is an object holding `key` with a non-null value.
bool present(const nlohmann::json& j, const char* key);

enum class NumberRange : std::uint8_t { kFinite, kNonNegative, kPositive };

/// A finite number in `range`; `fallback` when absent.
Result<double> config_number(const nlohmann::json& j, const char* key, double fallback,
                             NumberRange range = NumberRange::kFinite);

/// A whole number in [0, cap]; `fallback` when absent, an error when absent and none is given.
Result<std::uint64_t> config_count(const nlohmann::json& j, const char* key, std::uint64_t cap,
                                   std::optional<std::uint64_t> fallback = std::nullopt);

/// `dir`/config.json, parsed strictly from a bounded read.
struct ModelConfigFile {
  std::string path;        ///< for Error::in_file
  nlohmann::json root;     ///< an object
  std::string model_type;  ///< the top level's, "" when it names none
  /// The text model's keys: text_config when it is an object, else the top level.
  const nlohmann::json& text() const;
};
Result<ModelConfigFile> read_model_config(const std::string& dir);

}  // namespace qrepack::model
