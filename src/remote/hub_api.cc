#include "remote/hub_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "io/json_strict.h"

namespace qrepack::remote {
namespace {

bool is_hex(std::string_view s, std::size_t n) {
  return s.size() == n && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Error api_error(const std::string& url, std::string message) {
  return Error(ErrorKind::kRemoteProtocol, std::move(message)).in_file(url).with_rule("remote.api");
}

// One entry of the tree API's answer: nullopt for what qrepack never reads (directories,
// nested paths), an error for anything malformed.
Result<std::optional<FileInfo>> tree_entry(const nlohmann::json& e, const std::string& url) {
  if (!e.is_object() || !e.contains("type") || !e["type"].is_string() || !e.contains("path") ||
      !e["path"].is_string()) {
    return api_error(url, "a tree entry without a string \"type\" and \"path\"");
  }
  if (e["type"] != "file") return std::optional<FileInfo>();
  FileInfo f;
  f.name = e["path"].get<std::string>();
  if (!is_plain_file_name(f.name)) return std::optional<FileInfo>();
  if (!e.contains("size") || !e["size"].is_number_unsigned() ||
      e["size"].get<std::uint64_t>() > kMaxRemoteFileBytes) {
    return api_error(url, fmt::format("tree entry \"{}\" has no usable size", f.name));
  }
  f.size = e["size"].get<std::uint64_t>();
  if (e.contains("lfs")) {
    const auto& lfs = e["lfs"];
    if (!lfs.is_object() || !lfs.contains("oid") || !lfs["oid"].is_string() ||
        !is_hex(lfs["oid"].get<std::string>(), 64) || !lfs.contains("size") ||
        !lfs["size"].is_number_unsigned() || lfs["size"].get<std::uint64_t>() != f.size) {
      return api_error(url, fmt::format("tree entry \"{}\": lfs needs a 64-hex oid and the "
                                        "file's size",
                                        f.name));
    }
    f.sha256 = lfs["oid"].get<std::string>();
  } else if (e.contains("oid") && e["oid"].is_string() && is_hex(e["oid"].get<std::string>(), 40)) {
    f.blob_sha1 = e["oid"].get<std::string>();
  } else {
    return api_error(url, fmt::format("tree entry \"{}\" has no 40-hex oid", f.name));
  }
  return std::optional<FileInfo>(std::move(f));
}

}  // namespace

Result<std::string> parse_revision(std::string_view text, const std::string& url) {
  auto j = parse_json_strict(text, ErrorKind::kRemoteProtocol);
  if (!j.ok()) return std::move(j.error().in_file(url).with_rule("remote.api"));
  if (!j->is_object() || !j->contains("sha") || !(*j)["sha"].is_string() ||
      !is_hex((*j)["sha"].get<std::string>(), 40)) {
    return api_error(url, "the revision's answer has no 40-hex \"sha\"");
  }
  return (*j)["sha"].get<std::string>();
}

Status parse_tree_page(std::string_view text, const std::string& url,
                       std::map<std::string, std::optional<FileInfo>>& files) {
  auto j = parse_json_strict(text, ErrorKind::kRemoteProtocol);
  if (!j.ok()) return std::move(j.error().in_file(url).with_rule("remote.api"));
  if (!j->is_array()) return api_error(url, "the tree listing is not a JSON array");
  for (const auto& e : *j) {
    QR_ASSIGN_OR_RETURN(f, tree_entry(e, url));
    if (!f) continue;
    if (files.size() >= kMaxListedFiles) {
      return api_error(url, fmt::format("more than {} files", kMaxListedFiles));
    }
    if (!files.emplace(f->name, *f).second) {
      return api_error(url, fmt::format("\"{}\" is listed twice", f->name.substr(0, 255)));
    }
  }
  return ok_status();
}

std::string next_link(std::string_view link) {
  const auto rel = link.find("rel=\"next\"");
  if (rel == std::string_view::npos) return {};
  const auto open = link.rfind('<', rel);
  if (open == std::string_view::npos) return {};
  const auto close = link.find('>', open);
  if (close == std::string_view::npos || close > rel) return {};
  return std::string(link.substr(open + 1, close - open - 1));
}

Status ResponseHeaders::add_line(std::string_view line) {
  bytes += line.size();
  if (bytes > kMaxHeaderBytes) {
    return Error(ErrorKind::kRemoteProtocol,
                 fmt::format("response headers over {} bytes", kMaxHeaderBytes))
        .with_rule("remote.header_bytes");
  }
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 1xx or a redirect)
    const std::uint64_t seen = bytes;
    *this = ResponseHeaders();
    bytes = seen;
    return ok_status();
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return ok_status();
  const std::string name = lower_ascii(std::string(line.substr(0, colon)));
  std::string value = trim_spaces(line.substr(colon + 1));
  using Field = std::string ResponseHeaders::*;
  static constexpr std::pair<std::string_view, Field> kFields[] = {
      {"location", &ResponseHeaders::location},
      {"content-range", &ResponseHeaders::content_range},
      {"content-length", &ResponseHeaders::content_length},
      {"content-encoding", &ResponseHeaders::content_encoding},
      {"x-linked-etag", &ResponseHeaders::linked_etag},
      {"x-linked-size", &ResponseHeaders::linked_size},
      {"retry-after", &ResponseHeaders::retry_after},
      {"link", &ResponseHeaders::link},
  };
  for (const auto& [field_name, field] : kFields) {
    if (name == field_name) this->*field = std::move(value);
  }
  content_encoding = lower_ascii(std::move(content_encoding));
  return ok_status();
}

Status check_content_range(std::string_view content_range, std::uint64_t first, std::uint64_t last,
                           std::uint64_t total) {
  if (content_range == fmt::format("bytes {}-{}/{}", first, last, total)) return ok_status();
  return Error(ErrorKind::kRemoteProtocol,
               fmt::format("asked for bytes {}-{} of {} and the server answered Content-Range "
                           "\"{}\"",
                           first, last, total, content_range.substr(0, 80)))
      .with_rule("remote.content_range");
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim_spaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

bool is_plain_file_name(std::string_view s) {
  return !s.empty() && s.size() <= 255 && s != "." && s != ".." &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return static_cast<unsigned char>(c) > 0x20 && c != '/' && c != '\\' && c != 0x7f &&
                  c != '?' && c != '#' && c != '%';
         });
}

std::string unquote_etag(std::string v) {
  if (v.rfind("W/", 0) == 0) v = v.substr(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

bool is_sha256_hex(std::string_view s) { return is_hex(s, 64); }

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

}  // namespace qrepack::remote
