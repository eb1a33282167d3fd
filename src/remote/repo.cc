#include "remote/repo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <span>

#include "core/sha256.h"
#include "qrepack/io/checkpoint.h"
#include "qrepack/io/side_files.h"
#include "remote/remote_file.h"

namespace qrepack::remote {
namespace {

// A repository or organisation name as the hub allows them.
bool is_repo_part(std::string_view s) {
  return !s.empty() && s.size() <= 96 && s != "." && s != ".." &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

bool is_revision(std::string_view s) {
  return !s.empty() && s.size() <= 200 && s.find("..") == std::string_view::npos &&
         std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                  c == '/';
         });
}

// A revision inside a URL path: '/' (refs/pr/1) percent-encoded.
std::string encode_revision(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '/' ? std::string("%2F") : std::string(1, c);
  return out;
}

}  // namespace

Repo::~Repo() = default;

Result<std::shared_ptr<Repo>> Repo::open(const std::string& url) {
  std::shared_ptr<Repo> r(new Repo());
  QR_ASSIGN_OR_RETURN(settings, settings_from_environment());
  if (url.rfind("hf://", 0) == 0) {
    std::string rest = url.substr(5);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    std::string revision = "main";
    if (const auto at = rest.find('@'); at != std::string::npos) {
      revision = rest.substr(at + 1);
      rest = rest.substr(0, at);
    }
    const auto slash = rest.find('/');
    if (slash == std::string::npos || !is_repo_part(rest.substr(0, slash)) ||
        !is_repo_part(rest.substr(slash + 1)) || !is_revision(revision)) {
      return Error(ErrorKind::kInvalidArgument,
                   "a hub source is hf://ORG/REPO or hf://ORG/REPO@REVISION (names of letters, "
                   "digits, '-', '_', '.')")
          .in_file(url.substr(0, 200))
          .with_rule("remote.hf_url");
    }
    const char* ep = std::getenv("HF_ENDPOINT");
    r->endpoint_ = ep && *ep ? ep : "https://huggingface.co";
    while (!r->endpoint_.empty() && r->endpoint_.back() == '/') r->endpoint_.pop_back();
    QR_TRY(check_url_allowed(r->endpoint_ + "/"));
    settings.token_origin = url_origin(r->endpoint_ + "/");
    r->http_ = std::make_shared<const HttpClient>(std::move(settings));
    r->hub_ = true;
    QR_TRY(r->resolve_hub(rest, revision));
    QR_TRY(r->list_hub());
    return r;
  }
  QR_TRY(check_url_allowed(url));
  settings.token.clear();  // a token belongs to the hub, never to another server
  r->http_ = std::make_shared<const HttpClient>(std::move(settings));
  r->http_base_ = url;
  while (!r->http_base_.empty() && r->http_base_.back() == '/') r->http_base_.pop_back();
  r->base_ = r->http_base_;
  return r;
}

Status Repo::resolve_hub(const std::string& org_repo, const std::string& revision) {
  repo_id_ = org_repo;
  revision_ = revision;
  const std::string url =
      fmt::format("{}/api/models/{}/revision/{}", endpoint_, org_repo, encode_revision(revision));
  QR_ASSIGN_OR_RETURN(text, http_->get_text(url, kMaxApiBytes));
  QR_ASSIGN_OR_RETURN(sha, parse_revision(text, url));
  commit_ = std::move(sha);
  base_ = fmt::format("hf://{}@{}", org_repo, commit_);
  return ok_status();
}

Status Repo::list_hub() {
  std::string url = fmt::format("{}/api/models/{}/tree/{}", endpoint_, repo_id_, commit_);
  const std::string origin = url_origin(url);
  for (std::size_t page = 0; !url.empty(); ++page) {
    if (page >= kMaxTreePages) {
      return Error(ErrorKind::kRemoteProtocol, "the tree listing has too many pages")
          .in_file(url)
          .with_rule("remote.api");
    }
    std::string link;
    QR_ASSIGN_OR_RETURN(text, http_->get_text(url, kMaxApiBytes, &link));
    QR_TRY(parse_tree_page(text, url, files_));
    url = next_link(link);
    if (!url.empty() && url_origin(url) != origin) {
      return Error(ErrorKind::kRemoteProtocol, "the tree listing's next page is on another origin")
          .in_file(url.substr(0, 200))
          .with_rule("remote.api");
    }
  }
  return ok_status();
}

std::string Repo::file_url(const std::string& name) const {
  if (hub_) return fmt::format("{}/{}/resolve/{}/{}", endpoint_, repo_id_, commit_, name);
  return http_base_ + "/" + name;
}

Result<std::optional<FileInfo>> Repo::probe(const std::string& name) {
  auto head = http_->head(file_url(name));
  if (!head.ok()) {
    if (head.error().rule() == "remote.not_found") return std::optional<FileInfo>();
    return std::move(head).error();
  }
  if (head->size > kMaxRemoteFileBytes) {
    return Error(ErrorKind::kLimitExceeded, fmt::format("{} bytes is over the cap", head->size))
        .in_file(file_url(name))
        .with_rule("remote.max_file_bytes");
  }
  FileInfo f;
  f.name = name;
  f.size = head->size;
  f.sha256 = head->linked_sha256;
  return std::optional<FileInfo>(std::move(f));
}

Result<std::optional<FileInfo>> Repo::file(const std::string& name) {
  if (!is_plain_file_name(name)) return std::optional<FileInfo>();
  {
    std::lock_guard lock(m_);
    if (const auto it = files_.find(name); it != files_.end()) return it->second;
    if (hub_) return std::optional<FileInfo>();
  }
  QR_ASSIGN_OR_RETURN(info, probe(name));
  std::lock_guard lock(m_);
  files_.emplace(name, info);
  return info;
}

Result<std::vector<std::string>> Repo::list() {
  std::vector<std::string> out;
  if (!hub_) {
    // No listing: the files a checkpoint may hold, probed by name.
    QR_TRY(file(kIndexFileName));
    QR_TRY(file("model.safetensors"));
    for (std::string_view n : side_file_names()) QR_TRY(file(std::string(n)));
  }
  std::lock_guard lock(m_);
  for (const auto& [name, info] : files_) {
    if (info) out.push_back(name);
  }
  return out;
}

Result<std::string> Repo::read_small(const std::string& name, std::uint64_t cap) {
  QR_ASSIGN_OR_RETURN(info, file(name));
  const std::string url = file_url(name);
  if (!info) {
    return Error(ErrorKind::kInputNotFound, "no such file").in_file(url);
  }
  if (info->size > cap) {
    return Error(ErrorKind::kLimitExceeded,
                 fmt::format("{} bytes, over the cap of {}", info->size, cap))
        .in_file(url)
        .with_rule("file.max_bytes");
  }
  QR_ASSIGN_OR_RETURN(text, http_->get_text(url, cap));
  const std::span bytes(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  FileInfo got = *info;
  const std::string sha = sha256_hex(bytes);
  const bool size_ok = text.size() == info->size;
  const bool sha_ok = info->sha256.empty() || sha == info->sha256;
  const bool blob_ok = info->blob_sha1.empty() || git_blob_sha1(text) == info->blob_sha1;
  if (!size_ok || !sha_ok || !blob_ok) {
    return Error(ErrorKind::kSourceHashMismatch,
                 fmt::format("{} bytes hashing to sha256 {}, but the server publishes {} bytes "
                             "and {}",
                             text.size(), sha, info->size,
                             info->sha256.empty() ? "git blob " + info->blob_sha1
                                                  : "sha256 " + info->sha256))
        .in_file(url)
        .with_rule("remote.sha256");
  }
  got.sha256 = sha;
  std::lock_guard lock(m_);
  small_read_[name] = got;
  return text;
}

Result<std::shared_ptr<RemoteFile>> Repo::open_file(const std::string& name) {
  {
    std::lock_guard lock(m_);
    if (const auto it = open_.find(name); it != open_.end()) return it->second;
  }
  QR_ASSIGN_OR_RETURN(info, file(name));
  const std::string url = file_url(name);
  if (!info) return Error(ErrorKind::kInputNotFound, "no such file").in_file(url);
  if (info->sha256.empty()) {
    return Error(ErrorKind::kRemoteProtocol,
                 "the server publishes no SHA-256 for this file (X-Linked-Etag or the hub's "
                 "lfs.oid), so its bytes cannot be checked")
        .in_file(url)
        .with_rule("remote.no_hash");
  }
  auto f = std::make_shared<RemoteFile>(http_, base_ + "/" + name, url, info->size, info->sha256);
  std::lock_guard lock(m_);
  return open_.emplace(name, std::move(f)).first->second;
}

std::vector<std::shared_ptr<RemoteFile>> Repo::opened() const {
  std::lock_guard lock(m_);
  std::vector<std::shared_ptr<RemoteFile>> out;
  for (const auto& [name, f] : open_) out.push_back(f);
  return out;
}

std::map<std::string, FileInfo> Repo::small_files_read() const {
  std::lock_guard lock(m_);
  return small_read_;
}

}  // namespace qrepack::remote
