#include "io/json_strict.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace qrepack {

std::optional<std::size_t> first_invalid_utf8(std::span<const std::uint8_t> s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    std::uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    const bool overlong =
        (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

namespace {

using json = nlohmann::json;

// Builds the DOM itself so it can see every key as it arrives.
class StrictSax final : public nlohmann::json_sax<json> {
 public:
  json root;
  std::optional<std::string> duplicate;
  bool too_deep = false;
  std::optional<std::string> syntax_error;
  std::size_t error_position = 0;

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool v) override { return add(json(v)); }
  bool number_integer(number_integer_t v) override { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(json(v)); }
  bool string(string_t& v) override { return add(json(v)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool key(string_t& k) override {
    if (stack_.back()->contains(k)) {
      duplicate = k;
      return false;
    }
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    syntax_error = ex.what();
    error_position = position;
    return false;
  }

 private:
  json* place(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }
  bool add(json v) {
    place(std::move(v));
    return true;
  }
  bool open(json v) {
    if (stack_.size() >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    stack_.push_back(place(std::move(v)));
    return true;
  }

  std::vector<json*> stack_;
  std::string key_;
};

}  // namespace

Result<nlohmann::json> parse_json_strict(std::string_view text, ErrorKind syntax_kind) {
  StrictSax sax;
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return std::move(sax.root);
  if (sax.duplicate) {
    return Error(ErrorKind::kDuplicateKey, fmt::format("duplicate key \"{}\"", *sax.duplicate))
        .with_rule("json.unique_keys");
  }
  if (sax.too_deep) {
    return Error(syntax_kind, fmt::format("JSON nested deeper than {}", kMaxJsonDepth))
        .with_rule("json.max_depth");
  }
  Error e(syntax_kind, fmt::format("invalid JSON: {}", sax.syntax_error.value_or("parse failed")));
  e.with_rule("json.syntax");
  if (sax.syntax_error && sax.error_position > 0) e.at_offset(sax.error_position - 1);
  return e;
}

}  // namespace qrepack
