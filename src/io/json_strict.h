// Strict JSON for files qrepack reads (safetensors headers, index.json, config.json): valid
// UTF-8, one value, duplicate object keys rejected (they silently collapse in most parsers,
// see reference/serialization.md A2), nesting capped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack {

/// Offset of the first byte that breaks UTF-8 (overlongs, surrogates and > U+10FFFF included),
/// or nullopt when `bytes` is valid UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::span<const std::uint8_t> bytes);

/// Deepest nesting accepted.
inline constexpr std::size_t kMaxJsonDepth = 64;

/// Parses `text`. Syntax errors and excessive nesting get `syntax_kind`; a repeated key in one
/// object gets ErrorKind::kDuplicateKey naming the key. Offsets in errors are relative to
/// `text`.
Result<nlohmann::json> parse_json_strict(std::string_view text, ErrorKind syntax_kind);

}  // namespace qrepack
