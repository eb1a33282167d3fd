// Streams a JSON document whose top level is an object into a ByteSink, member by member and
// element by element, producing exactly the bytes nlohmann's dump(indent) gives for the whole
// document — without ever holding the whole document. For files with one record per tensor
// (the manifest, the shard index), whose DOM would grow with the checkpoint's tensor count.
//
//   JsonObjectStream s(sink, 1);
//   s.member("version", "1");
//   s.begin_array("outputs");  for (...) s.item(record);  s.end();
//   s.begin_object("weight_map");  for (...) s.item(name, file);  s.end();
//   s.finish();  // closes the top-level object and ends the file with a newline
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"
#include "qrepack/io/byte_sink.h"

namespace qrepack {

class JsonObjectStream {
 public:
  JsonObjectStream(ByteSink& sink, int indent) : sink_(sink), indent_(indent) {}

  /// A complete top-level member.
  template <typename Json>
  Status member(std::string_view key, const Json& value) {
    QR_TRY(open_member(key));
    return put_value(value.dump(indent_), indent_);
  }
  /// A top-level member whose value is an array (item(v)) or an object (item(k, v)), closed
  /// by end().
  Status begin_array(std::string_view key) { return begin_container(key, '['); }
  Status begin_object(std::string_view key) { return begin_container(key, '{'); }
  template <typename Json>
  Status item(const Json& value) {
    QR_TRY(open_item());
    return put_value(value.dump(indent_), 2 * indent_);
  }
  template <typename Json>
  Status item(std::string_view key, const Json& value) {
    QR_TRY(open_item());
    QR_TRY(put(quoted(key) + ": "));
    return put_value(value.dump(indent_), 2 * indent_);
  }
  Status end();
  /// Closes the top-level object and writes the final newline.
  Status finish();

 private:
  static std::string quoted(std::string_view key);
  Status open_member(std::string_view key);
  Status begin_container(std::string_view key, char open);
  Status open_item();
  Status put(std::string_view text);
  /// `text` (a value dumped at depth 0) re-indented to start at depth `depth` spaces.
  Status put_value(const std::string& text, int depth);

  ByteSink& sink_;
  const int indent_;
  std::size_t members_ = 0;
  std::size_t items_ = 0;
  char open_ = 0;  ///< the open container's bracket, 0 when none
};

}  // namespace qrepack
