#include "core/tensor_name.h"

#include <fmt/format.h>

namespace qrepack {

std::optional<ControlChar> first_control_char(std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) return ControlChar{i, c};
    if (c == 0xC2 && i + 1 < name.size()) {
      const auto d = static_cast<unsigned char>(name[i + 1]);
      if (d >= 0x80 && d <= 0x9F) return ControlChar{i, d};
    }
  }
  return std::nullopt;
}

std::string printable_name(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (std::size_t i = 0; i < name.size();) {
    const std::optional<ControlChar> c = first_control_char(name.substr(i));
    if (!c) {
      out.append(name.substr(i));
      break;
    }
    out.append(name.substr(i, c->offset));
    out += fmt::format("\\u{:04x}", c->code);
    i += c->offset + (c->code >= 0x80 ? 2 : 1);
  }
  return out;
}

Status check_tensor_name(std::string_view name, ErrorKind kind) {
  const std::optional<ControlChar> c = first_control_char(name);
  if (!c) return ok_status();
  return Error(kind, fmt::format("tensor name \"{}\" holds the control character U+{:04X} at "
                                 "byte {}: the engines read names as C strings, so it would "
                                 "load under another name",
                                 printable_name(name.substr(0, 256)), c->code, c->offset))
      .with_rule("name.control_char");
}

}  // namespace qrepack
