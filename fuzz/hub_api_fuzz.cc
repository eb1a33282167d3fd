// libFuzzer target: what a model hub or https server sends qrepack, parsed as the remote
// reader parses it (remote/hub_api.h). The first byte picks the parser: a revision answer, a
// tree API page (twice, into one listing: repeats across pages), a Link header, or response
// header lines (split at '\n') followed by the Content-Range check of a range asked for.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "remote/hub_api.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string url = "https://hub.example/api";
  using namespace qrepack::remote;
  switch (data[0] % 4) {
    case 0:
      (void)parse_revision(text, url);
      break;
    case 1: {
      std::map<std::string, std::optional<FileInfo>> files;
      if (parse_tree_page(text, url, files).ok()) (void)parse_tree_page(text, url, files);
      break;
    }
    case 2:
      (void)next_link(text);
      break;
    default: {
      ResponseHeaders h;
      std::size_t start = 0;
      while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        end = end == std::string_view::npos ? text.size() : end + 1;
        if (!h.add_line(text.substr(start, end - start)).ok()) break;
        start = end;
      }
      (void)check_content_range(h.content_range, 0, 1023, 4096);
      (void)parse_u64(h.content_length);
      (void)is_sha256_hex(lower_ascii(unquote_etag(h.linked_etag)));
      break;
    }
  }
  return 0;
}
