// Remote paths: a checkpoint "directory" given as hf://ORG/REPO[@REV] or http(s)://HOST/PATH/
// is opened once (resolved, listed) and registered; paths below it ("BASE/config.json") then
// work with the same filesystem helpers as local ones (io/fs_util.h dispatches here).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qrepack/core/error.h"
#include "remote/repo.h"

namespace qrepack::remote {

/// Whether `path` is a remote source (hf://, https://, http://).
bool is_remote_path(std::string_view path);

/// Opens (once per process) the repository `url` names and returns its canonical base, the
/// directory every file path of it starts with.
Result<std::string> open_remote_directory(const std::string& url);

struct Located {
  std::shared_ptr<Repo> repo;
  std::string name;  ///< file name below the base; "" for the base itself
};
/// The opened repository holding `path`, or nullopt (not remote, or never opened).
std::optional<Located> locate(const std::string& path);

/// Every repository opened in this process.
std::vector<std::shared_ptr<Repo>> opened_repos();

/// Streams every opened remote file to its end and checks its published SHA-256 (and that
/// re-read chunks match): what a command runs before it publishes anything read from them.
/// `only_data_read` limits it to files whose data was read (a --shard worker: another worker
/// reads the others).
Status verify_opened_files(bool only_data_read = false);

/// The SHA-256 the server publishes for the remote file at `path` (kRemoteProtocol, rule
/// remote.no_hash, when it publishes none).
Result<std::string> published_sha256(const std::string& path);

/// Whether every opened remote file whose data was read has been hashed whole and matched
/// (true with no remote source): a resumable run records an output shard as done only then.
bool read_files_verified();

/// What qrepack.json records of a remote source below `directory`: the URL given, the
/// resolved commit, and every file read with its size and SHA-256; null for a local one.
nlohmann::ordered_json remote_source_record(const std::string& directory);

/// Bytes received and retries so far, over every opened repository.
struct TransferTotals {
  std::uint64_t bytes = 0, requests = 0, retries = 0;
  std::uint64_t refetched_chunks = 0;  ///< evicted chunks read again (a second pass follows)
};
TransferTotals transfer_totals();

}  // namespace qrepack::remote
