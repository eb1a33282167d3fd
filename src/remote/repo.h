// A remote checkpoint directory: hf://ORG/REPO[@REVISION] on a Hugging Face Hub endpoint
// (HF_ENDPOINT), its revision resolved to an immutable commit first, its files listed with the
// hub's sizes and hashes (tree API: lfs.oid = SHA-256, oid = git blob SHA-1); or an
// https://HOST/PATH/ directory whose files are probed one by one (size and X-Linked-Etag).
// Repositories are registered once per process under their canonical base
// ("hf://ORG/REPO@COMMIT" or the https URL) and the URL the user gave, so every path below a
// base ("BASE/config.json") finds its repository (remote/paths.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "qrepack/core/error.h"
#include "remote/http.h"
#include "remote/hub_api.h"

namespace qrepack::remote {

class RemoteFile;

class Repo {
 public:
  /// Resolves `url` (hf:// or http(s)://) and lists it; network errors name the URL.
  static Result<std::shared_ptr<Repo>> open(const std::string& url);
  ~Repo();

  /// "hf://ORG/REPO@COMMIT" or "https://HOST/PATH" (no trailing slash): what checkpoint paths
  /// are made of.
  const std::string& base() const { return base_; }
  /// The commit a hub revision resolved to ("" for https directories).
  const std::string& commit() const { return commit_; }
  const std::string& revision() const { return revision_; }
  /// The URL of file `name`.
  std::string file_url(const std::string& name) const;
  const HttpClient& http() const { return *http_; }

  /// The file's published size and hash; nullopt when there is no such file. An error when the
  /// server could not be asked.
  Result<std::optional<FileInfo>> file(const std::string& name);
  /// The names of the top-level files (hub), or of the files a checkpoint may hold that exist
  /// (https directory: there is no listing).
  Result<std::vector<std::string>> list();
  /// A small file whole, checked against its published hash and size.
  Result<std::string> read_small(const std::string& name, std::uint64_t cap);
  /// The byte source of `name` (one per file per process: its stream and checks are shared).
  Result<std::shared_ptr<RemoteFile>> open_file(const std::string& name);
  /// Every file opened so far.
  std::vector<std::shared_ptr<RemoteFile>> opened() const;
  /// Files read whole and what they hashed to (the manifest's record).
  std::map<std::string, FileInfo> small_files_read() const;

 private:
  Repo() = default;
  Status resolve_hub(const std::string& org_repo, const std::string& revision);
  Status list_hub();
  Result<std::optional<FileInfo>> probe(const std::string& name);

  std::shared_ptr<const HttpClient> http_;
  bool hub_ = false;
  std::string endpoint_;  ///< hub: scheme://host[:port]
  std::string repo_id_;   ///< hub: ORG/REPO
  std::string revision_, commit_;
  std::string base_;
  std::string http_base_;  ///< https directory: the URL without its trailing slash
  mutable std::mutex m_;
  std::map<std::string, std::optional<FileInfo>> files_;  ///< hub: all; https: probed
  std::map<std::string, std::shared_ptr<RemoteFile>> open_;
  std::map<std::string, FileInfo> small_read_;
};

}  // namespace qrepack::remote
