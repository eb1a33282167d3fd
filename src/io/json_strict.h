// Strict JSON for files qrepack reads (safetensors headers, index.json, config.json): valid
// UTF-8, one value, duplicate object keys rejected (they silently collapse in most parsers,
// see reference/serialization.md A2), nesting capped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
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

/// Receives one member of the root object (its key and its value's DOM); an error stops the
/// parse and is returned as is.
using JsonMemberFn = std::function<Status(const std::string& key, nlohmann::json&& value)>;

/// Parses `text`, whose root must be an object (else the error `not_object`), handing
/// each root member to `on_member` as soon as its value is complete: memory is one member's
/// DOM, not the document's. Nested objects are checked for repeated keys as parse_json_strict
/// does; the root's keys are not (the caller sees every one). A syntax error after members
/// were delivered is still an error.
Status parse_json_strict_members(std::string_view text, ErrorKind syntax_kind,
                                 const Error& not_object, const JsonMemberFn& on_member);

/// Receives one member of one of the root's object members: (that member's key, the key, the
/// value's DOM).
using JsonNestedMemberFn = std::function<Status(const std::string& parent, const std::string& key,
                                                nlohmann::json&& value)>;

/// Parses `text`, whose root must be an object (else `not_object`), handing every member of
/// every object-valued root member to `on_member` as soon as it is complete: an index's
/// 100k-entry weight_map is never built as a DOM. Returns the root with those members as empty
/// objects (and its other members whole), so the caller sees which exist and their types.
/// Repeated keys inside the streamed objects are not detected here (their objects are never
/// built): the caller checks them.
Result<nlohmann::json> parse_json_strict_nested(std::string_view text, ErrorKind syntax_kind,
                                                const Error& not_object,
                                                const JsonNestedMemberFn& on_member);

}  // namespace qrepack
