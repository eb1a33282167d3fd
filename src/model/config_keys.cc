#include "model/config_keys.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#include "io/fs_util.h"
#include "io/json_strict.h"
#include "qrepack/checkpoint/moe_config.h"

namespace qrepack::model {

using Json = nlohmann::json;

Error forward_unsupported(std::string message) {
  return Error(ErrorKind::kUnsupportedModel, std::move(message)).with_rule("forward.support");
}

Error forward_config_error(std::string message) {
  return Error(ErrorKind::kInvalidConfig, std::move(message)).with_rule("forward.config");
}

bool present(const Json& j, const char* key) {
  return j.is_object() && j.contains(key) && !j[key].is_null();
}

Result<double> config_number(const Json& j, const char* key, double fallback, NumberRange range) {
  if (!present(j, key)) return fallback;
  const Json& v = j[key];
  const bool number = v.is_number() && std::isfinite(v.get<double>());
  const bool in_range = number && (range == NumberRange::kFinite ||
                                   (range == NumberRange::kNonNegative && v.get<double>() >= 0) ||
                                   (range == NumberRange::kPositive && v.get<double>() > 0));
  if (!in_range) {
    const char* what = range == NumberRange::kPositive      ? "finite positive"
                       : range == NumberRange::kNonNegative ? "finite non-negative"
                                                            : "finite";
    return forward_config_error(
        fmt::format("\"{}\" must be a {} number, got {}", key, what, v.dump().substr(0, 32)));
  }
  return v.get<double>();
}

Result<std::uint64_t> config_count(const Json& j, const char* key, std::uint64_t cap,
                                   std::optional<std::uint64_t> fallback) {
  if (!present(j, key)) {
    if (fallback) return *fallback;
    return forward_config_error(fmt::format("config.json has no \"{}\"", key));
  }
  const Json& v = j[key];
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > cap) {
    return forward_config_error(fmt::format("\"{}\" must be a whole number in [0, {}], got {}", key,
                                            cap, v.dump().substr(0, 32)));
  }
  return v.get<std::uint64_t>();
}

const Json& ModelConfigFile::text() const {
  const auto it = root.find("text_config");
  return it != root.end() && it->is_object() ? *it : root;
}

Result<ModelConfigFile> read_model_config(const std::string& dir) {
  ModelConfigFile f;
  f.path = (std::filesystem::path(dir) / "config.json").string();
  QR_ASSIGN_OR_RETURN(body, read_small_file(f.path, kMaxConfigBytes, ErrorKind::kInvalidConfig));
  auto parsed = parse_json_strict(body, ErrorKind::kInvalidConfig);
  if (!parsed.ok()) return std::move(parsed.error().in_file(f.path));
  if (!parsed->is_object()) {
    return std::move(forward_config_error("config.json is not an object").in_file(f.path));
  }
  f.root = std::move(*parsed);
  const auto mt = f.root.find("model_type");
  if (mt != f.root.end() && mt->is_string()) f.model_type = mt->get<std::string>();
  return f;
}

}  // namespace qrepack::model
