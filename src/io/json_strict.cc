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

// Builds the DOM itself so it can see every key as it arrives. With `on_member`, the root must
// be an object and is never built: each of its members is built alone, handed over and freed,
// so memory is one member's DOM, not the document's (the caller checks the root's keys for
// repeats).
class StrictSax final : public nlohmann::json_sax<json> {
 public:
  explicit StrictSax(const JsonMemberFn* on_member = nullptr) : on_member_(on_member) {}
  /// Streams the members of the root's object members instead (depth 2).
  explicit StrictSax(const JsonNestedMemberFn* on_nested)
      : on_nested_(on_nested), stream_depth_(2) {}

  json root;
  std::optional<std::string> duplicate;
  bool too_deep = false;
  bool root_not_object = false;
  std::optional<Error> member_error;
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
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    if (stack_.back()->contains(k)) {
      duplicate = k;
      return false;
    }
    if (streaming_member()) {
      member_key_ = k;
    } else {
      key_ = k;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    syntax_error = ex.what();
    error_position = position;
    return false;
  }

 private:
  // At the streamed depth, inside an object (a root member that is an array is built whole).
  bool streaming_member() const {
    return (on_member_ != nullptr || on_nested_ != nullptr) && stack_.size() == stream_depth_ &&
           stack_.back()->is_object();
  }

  json* place(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    if (streaming_member()) {
      member_ = std::move(v);
      return &member_;
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
  // Hands a finished member of the root to the caller.
  bool deliver() {
    Status st = on_nested_ ? (*on_nested_)(parent_key_, member_key_, std::move(member_))
                           : (*on_member_)(member_key_, std::move(member_));
    member_ = json();
    if (st.ok()) return true;
    member_error = std::move(st).error();
    return false;
  }
  // A root that is not an object is parsed on as parse_json_strict would (its syntax and depth
  // errors come first), then refused.
  void check_root(const json& v) {
    if ((on_member_ != nullptr || on_nested_ != nullptr) && stack_.empty() && !v.is_object()) {
      root_not_object = true;
      on_member_ = nullptr;
      on_nested_ = nullptr;
    }
  }
  bool add(json v) {
    check_root(v);
    const bool member = streaming_member();
    place(std::move(v));
    return member ? deliver() : true;
  }
  bool open(json v) {
    if (stack_.size() >= kMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    check_root(v);
    if (stack_.size() == 1) parent_key_ = key_;  // a root member: its members may stream
    stack_.push_back(place(std::move(v)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return streaming_member() ? deliver() : true;
  }

  const JsonMemberFn* on_member_ = nullptr;
  const JsonNestedMemberFn* on_nested_ = nullptr;
  std::size_t stream_depth_ = 1;
  std::string parent_key_;  ///< depth-2 streaming: the root member holding the member
  std::vector<json*> stack_;
  std::string key_;         ///< the key of the value being built inside a member or the root
  std::string member_key_;  ///< the root member's key (streaming)
  json member_;
};

Error strict_error(const StrictSax& sax, ErrorKind syntax_kind) {
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

}  // namespace

Result<nlohmann::json> parse_json_strict(std::string_view text, ErrorKind syntax_kind) {
  StrictSax sax;
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return std::move(sax.root);
  return strict_error(sax, syntax_kind);
}

Status parse_json_strict_members(std::string_view text, ErrorKind syntax_kind,
                                 const Error& not_object, const JsonMemberFn& on_member) {
  StrictSax sax(&on_member);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return sax.root_not_object ? Status(not_object) : ok_status();
  if (sax.member_error) return std::move(*sax.member_error);
  return strict_error(sax, syntax_kind);
}

Result<nlohmann::json> parse_json_strict_nested(std::string_view text, ErrorKind syntax_kind,
                                                const Error& not_object,
                                                const JsonNestedMemberFn& on_member) {
  StrictSax sax(&on_member);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax, json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) {
    if (sax.root_not_object) return not_object;
    return std::move(sax.root);
  }
  if (sax.member_error) return std::move(*sax.member_error);
  return strict_error(sax, syntax_kind);
}

}  // namespace qrepack
