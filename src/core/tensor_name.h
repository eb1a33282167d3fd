// Tensor names from files are C strings to the engines that load them: a NUL inside
// "a\u0000b" makes the tensor load as "a", shadowing a real one, and other control characters
// hide what a name says in every log. Every reader that yields tensor names (safetensors
// headers, an index's weight_map, the keys of a torch pack) refuses them with one rule,
// name.control_char (docs/security.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack {

struct ControlChar {
  std::size_t offset;  ///< byte offset in the name
  std::uint32_t code;  ///< U+0000..U+001F, U+007F or U+0080..U+009F
};

/// The first control character of `name` (valid UTF-8 assumed; C1 controls are the
/// two-byte sequences C2 80..C2 9F).
std::optional<ControlChar> first_control_char(std::string_view name);

/// `name` with every control character written \uXXXX (for messages).
std::string printable_name(std::string_view name);

/// Ok, or the refusal of `name` with error `kind` and rule name.control_char.
Status check_tensor_name(std::string_view name, ErrorKind kind);

}  // namespace qrepack
