#include "io/json_stream.h"

#include "core/check.h"

namespace qrepack {

std::string JsonObjectStream::quoted(std::string_view key) {
  return nlohmann::json(std::string(key)).dump();
}

Status JsonObjectStream::put(std::string_view text) {
  return sink_.write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Status JsonObjectStream::put_value(const std::string& text, int depth) {
  // Dumped JSON holds newlines only between its own lines (strings escape theirs), so
  // re-indenting is one run of spaces after each newline.
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  const std::string pad(static_cast<std::size_t>(depth), ' ');
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out += pad;
  }
  return put(out);
}

Status JsonObjectStream::open_member(std::string_view key) {
  QR_CHECK(!open_, "JSON stream: member inside an open container");
  const std::string pad(static_cast<std::size_t>(indent_), ' ');
  QR_TRY(put(std::string(members_++ ? ",\n" : "{\n") + pad + quoted(key) + ": "));
  return ok_status();
}

Status JsonObjectStream::begin_container(std::string_view key, char open) {
  QR_TRY(open_member(key));
  open_ = open;
  items_ = 0;
  return put(std::string(1, open));
}

Status JsonObjectStream::open_item() {
  QR_CHECK(open_, "JSON stream: item outside a container");
  const std::string pad(static_cast<std::size_t>(2 * indent_), ' ');
  return put((items_++ ? ",\n" : "\n") + pad);
}

Status JsonObjectStream::end() {
  QR_CHECK(open_, "JSON stream: end without a container");
  const char close = open_ == '[' ? ']' : '}';
  open_ = 0;
  if (items_ == 0) return put(std::string(1, close));  // nlohmann writes [] and {}
  std::string text(static_cast<std::size_t>(indent_) + 2, ' ');
  text.front() = '\n';
  text.back() = close;
  return put(text);
}

Status JsonObjectStream::finish() {
  if (open_) QR_TRY(end());
  return put(members_ ? "\n}\n" : "{}\n");
}

}  // namespace qrepack
