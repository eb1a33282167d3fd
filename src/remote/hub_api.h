// What a server sends, parsed and bounded: the hub API's revision and tree answers, Link
// headers, and HTTP response header lines with the Content-Range check. Kept apart from the
// transport so a fuzz target drives them with arbitrary bytes (fuzz/hub_api_fuzz.cc).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "qrepack/core/error.h"

namespace qrepack::remote {

/// What the server publishes about one file.
struct FileInfo {
  std::string name;
  std::uint64_t size = 0;
  std::string sha256;     ///< LFS object id / X-Linked-Etag; empty when none is published
  std::string blob_sha1;  ///< git blob id of a non-LFS file (hub tree API)
};

/// The 40-hex commit of a revision answer ({"sha": ...}); errors name `url`.
Result<std::string> parse_revision(std::string_view text, const std::string& url);

/// Adds one tree API page (a JSON array of entries) to `files`: top-level files with their size
/// and hashes; directories and nested paths skipped; anything malformed, a repeated name or more
/// than kMaxListedFiles refused.
Status parse_tree_page(std::string_view text, const std::string& url,
                       std::map<std::string, std::optional<FileInfo>>& files);

/// The URL of `<URL>; rel="next"` in a Link header, or "".
std::string next_link(std::string_view link);

/// The response headers qrepack reads, from header lines as they arrive.
struct ResponseHeaders {
  std::string location, content_range, content_length, content_encoding, linked_etag, linked_size,
      retry_after, link;
  std::uint64_t bytes = 0;  ///< every header byte of the exchange, redirects included
  /// Takes one line ("Name: value\r\n" or a status line, which starts a new response).
  /// kRemoteProtocol past kMaxHeaderBytes.
  Status add_line(std::string_view line);
};

/// Whether `content_range` names exactly bytes [first, last] of a file of `total` bytes.
Status check_content_range(std::string_view content_range, std::uint64_t first, std::uint64_t last,
                           std::uint64_t total);

/// A file name a checkpoint may hold at its top level: printable, no separators, no URL
/// metacharacters ('?', '#', '%').
bool is_plain_file_name(std::string_view s);
/// ASCII lowercase; spaces, tabs and line ends trimmed from both ends.
std::string lower_ascii(std::string s);
std::string trim_spaces(std::string_view s);
/// "W/\"abc\"" -> "abc".
std::string unquote_etag(std::string v);
bool is_sha256_hex(std::string_view s);
std::optional<std::uint64_t> parse_u64(std::string_view s);

/// Caps on what a server may send.
inline constexpr std::uint64_t kMaxHeaderBytes = 64 << 10;
inline constexpr std::uint64_t kMaxApiBytes = 64ull << 20;
inline constexpr std::size_t kMaxListedFiles = 200'000;
inline constexpr std::size_t kMaxTreePages = 1'000;
inline constexpr std::uint64_t kMaxRemoteFileBytes = 4ull << 40;

}  // namespace qrepack::remote
